//! The kubelet: registers the node, runs pods through containerd's CRI, probes them.

use std::net::Ipv4Addr;
use std::path::Path;

use k8s_openapi::api::core::v1::Node;
use kube::Api;

use crate::cluster::processes::ManagedProcess;
use crate::cluster::{ClusterError, TestCluster, ports, readiness};

/// Everything the kubelet's command line and configuration are made of.
pub(super) struct Kubelet<'a> {
    pub(super) program: &'a Path,
    pub(super) name: &'a str,
    pub(super) address: Ipv4Addr,
    /// Taints to register the node with (`key=value:Effect`).
    pub(super) taints: &'a [String],
    pub(super) dir: &'a Path,
    pub(super) kubeconfig: &'a Path,
    pub(super) runtime_socket: &'a Path,
    pub(super) log_dir: &'a Path,
}

impl Kubelet<'_> {
    /// Starts the kubelet, waits for its `/healthz`, then until the API server has the node
    /// with condition Ready=True.
    pub(super) async fn start(
        &self,
        cluster: &TestCluster,
    ) -> Result<ManagedProcess, ClusterError> {
        let [port, healthz_port] = ports::free_ports()?;
        let root = self.dir.join("kubelet");
        std::fs::create_dir_all(&root)
            .map_err(ClusterError::io(format!("creating {}", root.display())))?;
        let config_path = root.join("config.yaml");
        std::fs::write(&config_path, config(self.address, port, healthz_port)).map_err(
            ClusterError::io(format!("writing {}", config_path.display())),
        )?;
        let socket = format!("unix://{}", self.runtime_socket.display());
        let mut args = vec![
            format!("--config={}", config_path.display()),
            format!("--kubeconfig={}", self.kubeconfig.display()),
            "--container-runtime=remote".into(),
            format!("--container-runtime-endpoint={socket}"),
            format!("--image-service-endpoint={socket}"),
            format!("--root-dir={}", root.display()),
            format!("--cert-dir={}", root.join("pki").display()),
            format!("--hostname-override={}", self.name),
            format!("--node-ip={}", self.address),
            "--v=1".into(),
        ];
        if !self.taints.is_empty() {
            args.push(format!("--register-with-taints={}", self.taints.join(",")));
        }
        let mut process = readiness::spawn_serving(
            "kubelet",
            self.program,
            &args,
            self.log_dir.join(format!("{}-kubelet.log", self.name)),
            &format!("http://127.0.0.1:{healthz_port}"),
            "/healthz",
        )
        .await?;
        let nodes: Api<Node> = Api::all(cluster.client().await);
        readiness::wait_until(&mut process, "the node Ready in the API", || {
            node_ready(&nodes, self.name)
        })
        .await?;
        Ok(process)
    }
}

/// Whether the API server has node `name` with condition Ready=True.
async fn node_ready(nodes: &Api<Node>, name: &str) -> Result<(), String> {
    let node = nodes
        .get_opt(name)
        .await
        .map_err(|e| format!("reading node {name}: {e}"))?
        .ok_or_else(|| format!("node {name} is not registered yet"))?;
    let ready = node
        .status
        .and_then(|status| status.conditions)
        .unwrap_or_default()
        .into_iter()
        .find(|condition| condition.type_ == "Ready");
    match ready {
        Some(condition) if condition.status == "True" => Ok(()),
        Some(condition) => Err(format!(
            "node {name} Ready={}: {}",
            condition.status,
            condition.message.unwrap_or_default()
        )),
        None => Err(format!("node {name} has no Ready condition yet")),
    }
}

/// The kubelet's configuration for a test node: cgroupfs without per-QoS cgroups (no systemd
/// here), anonymous access to its API on loopback only, no eviction or image garbage collection
/// (the images were imported and cannot be pulled again; a nearly full disk must not evict).
fn config(address: Ipv4Addr, port: u16, healthz_port: u16) -> String {
    format!(
        "apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: {address}
port: {port}
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: {healthz_port}
authentication:
  anonymous: {{enabled: true}}
  webhook: {{enabled: false}}
authorization: {{mode: AlwaysAllow}}
cgroupDriver: cgroupfs
cgroupsPerQOS: false
enforceNodeAllocatable: []
failSwapOn: false
evictionHard: {{memory.available: 1Mi, nodefs.available: 0%, nodefs.inodesFree: 0%, imagefs.available: 0%}}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
nodeStatusUpdateFrequency: 10s
serializeImagePulls: false
resolvConf: /etc/resolv.conf
"
    )
}
