//! A running cluster, [`TestCluster`]: its addresses, credentials, clients and processes.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use secrecy::SecretString;

use super::audit;
use super::error::ClusterError;
use super::kubeconfig;
use super::processes::ManagedProcess;
use super::workdir::ClusterDir;

/// How long a process gets to exit after SIGTERM when a cluster is dropped.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// A running test cluster. Dropping it stops its processes and removes its directory.
#[derive(Debug)]
pub struct TestCluster {
    /// Started processes, in start order (stopped in reverse).
    pub(super) processes: Mutex<Vec<ManagedProcess>>,
    pub(super) server_url: String,
    pub(super) server_uri: http::Uri,
    /// DER certificates the apiserver's serving certificate chains to.
    pub(super) server_ca: Vec<Vec<u8>>,
    pub(super) admin_token: String,
    pub(super) kubeconfig: PathBuf,
    pub(super) controller_manager: bool,
    /// The address a real node reaches the apiserver at, when it serves one.
    pub(super) node_address: Option<Ipv4Addr>,
    /// What kube-apiserver reports.
    pub(super) version: crate::version::Version,
    pub(super) dir: ClusterDir,
}

/// Installs rustls' ring provider as the process default (idempotent); called by every client
/// constructor here.
pub fn install_crypto_provider() {
    // Fails only when a provider is installed already, which is what we want.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

impl TestCluster {
    /// The version of the cluster's kube-apiserver, for what a test expects of that version.
    pub fn version(&self) -> crate::version::Version {
        self.version
    }

    /// The admin kubeconfig (certificate-authority-data and bearer token), usable by kubectl.
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig
    }

    /// Writes to `path` a kubeconfig that authenticates as admin and acts as `user`
    /// (`Impersonate-User`): the API server authorizes its requests with `user`'s RBAC
    /// bindings, and its audit log names `user` as the writer.
    pub fn write_kubeconfig_as(&self, path: &Path, user: &str) -> Result<(), ClusterError> {
        let ca_pem = self.ca_pem()?;
        kubeconfig::write(
            path,
            &self.server_url,
            &ca_pem,
            &self.admin_token,
            Some(user),
        )
    }

    /// The address a real node reaches the apiserver at
    /// ([`ClusterOptions::node_address`](super::ClusterOptions::node_address)).
    pub fn node_address(&self) -> Option<Ipv4Addr> {
        self.node_address
    }

    /// The PEM bundle of the apiserver's CA (its self-signed serving certificate).
    pub fn ca_pem(&self) -> Result<Vec<u8>, ClusterError> {
        let ca_file = self.dir.path().join("certs").join("apiserver.crt");
        std::fs::read(&ca_file).map_err(ClusterError::io(format!("reading {}", ca_file.display())))
    }

    /// Every write the API server has recorded in its audit log so far.
    pub fn audit_writes(&self) -> std::io::Result<Vec<audit::AuditWrite>> {
        audit::read(&self.dir.path().join(audit::LOG_FILE))
    }

    /// `https://127.0.0.1:<port>` of the apiserver (`https://<node address>:<port>` when it
    /// serves a node: its self-signed certificate names only that address).
    pub fn server_url(&self) -> &str {
        &self.server_url
    }

    /// The bearer token of `admin` (group `system:masters`).
    pub fn admin_token(&self) -> &str {
        &self.admin_token
    }

    /// The name and process id of every running cluster process (`etcd`, `kube-apiserver`,
    /// `kube-controller-manager`), for reading their CPU time from `/proc`.
    pub fn process_ids(&self) -> Vec<(&'static str, u32)> {
        let processes = self
            .processes
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        processes.iter().map(|p| (p.name(), p.pid())).collect()
    }

    /// A client configuration for `admin`, verifying the apiserver's certificate.
    pub fn kube_config(&self) -> kube::Config {
        self.config_with_token(&self.admin_token)
    }

    /// An admin client, built in (and bound to) the caller's runtime.
    pub async fn client(&self) -> kube::Client {
        self.client_with_token(&self.admin_token).await
    }

    /// A client authenticating with the bearer `token`, built in the caller's runtime.
    ///
    /// # Panics
    /// When kube cannot build the client (an invalid TLS configuration).
    pub async fn client_with_token(&self, token: &str) -> kube::Client {
        install_crypto_provider();
        kube::Client::try_from(self.config_with_token(token)).unwrap_or_else(|e| {
            panic!(
                "testkit: cannot build a client for {}: {e}",
                self.server_url
            )
        })
    }

    /// The client configuration for `token`.
    fn config_with_token(&self, token: &str) -> kube::Config {
        let mut config = kube::Config::new(self.server_uri.clone());
        config.root_cert = Some(self.server_ca.clone());
        config.auth_info.token = Some(SecretString::from(token));
        config
    }

    /// Stops every process, last started first, each given `grace` after SIGTERM. Skips them if
    /// another thread holds the list (only possible while exiting).
    pub(super) fn stop_processes(&self, grace: Duration) {
        if let Ok(mut processes) = self.processes.try_lock() {
            while let Some(mut process) = processes.pop() {
                process.stop(grace);
            }
        }
    }
}

impl Drop for TestCluster {
    fn drop(&mut self) {
        self.stop_processes(STOP_GRACE);
    }
}
