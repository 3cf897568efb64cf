//! kube-scheduler: binds the test cluster's pods to the node.

use std::path::Path;

use crate::cluster::processes::ManagedProcess;
use crate::cluster::{ClusterError, ports, readiness};

/// Starts kube-scheduler (as admin through `kubeconfig`) and waits for its `/healthz`.
pub(super) async fn start(
    bin_dir: &Path,
    kubeconfig: &Path,
    dir: &Path,
    log_dir: &Path,
) -> Result<ManagedProcess, ClusterError> {
    let [port] = ports::free_ports()?;
    let args = [
        format!("--kubeconfig={}", kubeconfig.display()),
        "--leader-elect=false".into(),
        "--port=0".into(),
        format!("--secure-port={port}"),
        "--bind-address=127.0.0.1".into(),
        format!("--cert-dir={}", dir.join("scheduler-certs").display()),
    ];
    readiness::spawn_serving(
        "kube-scheduler",
        &bin_dir.join("kube-scheduler"),
        &args,
        log_dir.join("kube-scheduler.log"),
        &format!("https://127.0.0.1:{port}"),
        "/healthz",
    )
    .await
}
