//! kube-proxy in iptables mode: makes every Service's ClusterIP route to its ready endpoints,
//! for pods and for the host itself.

use std::path::Path;
use std::time::Duration;

use super::network::CLUSTER_POD_CIDR;
use crate::cluster::processes::ManagedProcess;
use crate::cluster::{ClusterError, ports, readiness};

/// Starts kube-proxy and waits until its `/healthz` answers (after its first rule sync).
pub(super) async fn start(
    program: &Path,
    node_name: &str,
    kubeconfig: &Path,
    dir: &Path,
    log_dir: &Path,
    min_sync_period: Option<Duration>,
) -> Result<ManagedProcess, ClusterError> {
    let [healthz_port, metrics_port] = ports::free_ports()?;
    let config_path = dir.join("kube-proxy.yaml");
    std::fs::write(
        &config_path,
        config(
            node_name,
            kubeconfig,
            healthz_port,
            metrics_port,
            min_sync_period,
        ),
    )
    .map_err(ClusterError::io(format!(
        "writing {}",
        config_path.display()
    )))?;
    let args = [
        format!("--config={}", config_path.display()),
        "--v=1".into(),
    ];
    readiness::spawn_serving(
        "kube-proxy",
        program,
        &args,
        log_dir.join("kube-proxy.log"),
        &format!("http://127.0.0.1:{healthz_port}"),
        "/healthz",
    )
    .await
}

/// kube-proxy's configuration: iptables mode with the defaults a user's cluster has (rule sync
/// timing too, unless `min_sync_period` is given), except that it leaves the host's conntrack
/// sysctls alone.
fn config(
    node_name: &str,
    kubeconfig: &Path,
    healthz_port: u16,
    metrics_port: u16,
    min_sync_period: Option<Duration>,
) -> String {
    let iptables = min_sync_period.map_or_else(String::new, |period| {
        format!("iptables:\n  minSyncPeriod: {}ms\n", period.as_millis())
    });
    format!(
        "apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
hostnameOverride: {node_name}
clusterCIDR: {CLUSTER_POD_CIDR}
clientConnection:
  kubeconfig: {kubeconfig}
healthzBindAddress: 127.0.0.1:{healthz_port}
metricsBindAddress: 127.0.0.1:{metrics_port}
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
{iptables}",
        kubeconfig = kubeconfig.display()
    )
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::time::Duration;

    use super::config;

    #[test]
    fn the_rule_sync_period_is_kube_proxys_own_unless_given() {
        let default = config("n", Path::new("/k"), 1, 2, None);
        assert!(!default.contains("minSyncPeriod"), "{default}");
        let given = config("n", Path::new("/k"), 1, 2, Some(Duration::ZERO));
        assert!(
            given.contains("iptables:\n  minSyncPeriod: 0ms\n"),
            "{given}"
        );
    }
}
