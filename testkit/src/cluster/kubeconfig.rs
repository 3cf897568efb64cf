//! The admin kubeconfig of a test cluster, for kube-controller-manager, kubectl and anyone else.

use std::path::Path;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;

use super::error::ClusterError;

/// Name of the cluster, user and context in the kubeconfig.
const NAME: &str = "testkit";

/// Writes a kubeconfig to `path` for `server` (trusting the PEM bundle `ca_pem`) and `token`,
/// impersonating `user` when given.
pub(crate) fn write(
    path: &Path,
    server: &str,
    ca_pem: &[u8],
    token: &str,
    user: Option<&str>,
) -> Result<(), ClusterError> {
    let ca_data = STANDARD.encode(ca_pem);
    let impersonate = user.map_or_else(String::new, |user| format!("\n    as: {user}"));
    let text = format!(
        "apiVersion: v1
kind: Config
clusters:
- name: {NAME}
  cluster:
    server: {server}
    certificate-authority-data: {ca_data}
users:
- name: {NAME}
  user:
    token: {token}{impersonate}
contexts:
- name: {NAME}
  context:
    cluster: {NAME}
    user: {NAME}
    namespace: default
current-context: {NAME}
"
    );
    std::fs::write(path, text).map_err(ClusterError::io(format!("writing {}", path.display())))
}
