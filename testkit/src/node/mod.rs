//! A real node for the test cluster: containerd with its CRI plugin (Debian's package), a
//! kubelet, kube-proxy in iptables mode and kube-scheduler (v1.20.2, built by
//! `testkit/scripts/build-kube.sh` beside the apiserver), so that pods run as containers, their
//! probes are real and a Service's ClusterIP routes to them.
//!
//! One node, on the host's own network and as root: kube-proxy and the bridge CNI change the
//! host's iptables rules and add a bridge (`elector0`, pods in [`POD_CIDR`]). Images come from
//! archives imported into containerd, never from a registry. The cluster must have been started
//! with [`ClusterOptions::node_address`](crate::cluster::ClusterOptions::node_address) set to
//! [`host_address`]. Dropping the node stops its processes, kills every container it ran,
//! removes its iptables rules, network namespaces and mounts, and deletes its directory.

mod containerd;
mod kubelet;
mod network;
mod proxy;
mod scheduler;
mod teardown;

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

pub use network::{POD_CIDR, host_address};

use crate::cluster::processes::ManagedProcess;
use crate::cluster::workdir::ClusterDir;
use crate::cluster::{ClusterError, TestCluster};

/// The Debian packages a node needs; `testkit/scripts/node-packages.sh` installs them.
const PACKAGES_SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/node-packages.sh");
/// How long a process gets to exit after SIGTERM when the node stops.
const STOP_GRACE: Duration = Duration::from_secs(5);
/// The image the pod sandboxes run (its archive must be among the imported ones).
pub const PAUSE_IMAGE: &str = "docker.io/consul-elector-e2e/pause:3.2";

/// How to start a [`RealNode`].
#[derive(Debug, Clone)]
pub struct NodeOptions {
    /// The node's name.
    pub name: String,
    /// Image archives (`docker-archive` or `oci-archive`) imported into containerd before the
    /// kubelet starts; one must hold [`PAUSE_IMAGE`].
    pub images: Vec<PathBuf>,
    /// Where the process logs go; `None` means the node directory (removed with it).
    pub log_dir: Option<PathBuf>,
    /// kube-proxy's `iptables.minSyncPeriod` (how often at most it rewrites its rules);
    /// `None` keeps its default (1 s), as a user's cluster has it.
    pub proxy_min_sync_period: Option<Duration>,
}

/// A running node. Dropping it tears it down (see the module documentation).
#[derive(Debug)]
pub struct RealNode {
    name: String,
    address: Ipv4Addr,
    dir: ClusterDir,
    containerd: containerd::Containerd,
    /// kube-scheduler, kubelet and kube-proxy, in start order (stopped in reverse).
    processes: Vec<ManagedProcess>,
    proxy_program: PathBuf,
    namespaces_before: Vec<PathBuf>,
}

impl RealNode {
    /// Installs the node's packages if needed, then starts containerd (and imports
    /// `options.images`), kube-scheduler, the kubelet (waiting until the API server reports the
    /// node Ready) and kube-proxy (waiting for its first rule sync).
    pub async fn start(cluster: &TestCluster, options: NodeOptions) -> Result<Self, ClusterError> {
        install_packages()?;
        let address = cluster.node_address().ok_or_else(|| {
            ClusterError::Build(
                "the cluster was started without ClusterOptions::node_address".into(),
            )
        })?;
        let bin_dir = crate::cluster::binaries::Binaries::locate(false)?.bin_dir;
        network::prepare_host()?;
        teardown::sweep_stale();
        let dir = ClusterDir::create_for_node()?;
        let log_dir = dir.log_dir(options.log_dir.as_deref())?;
        let kubeconfig = cluster.kubeconfig_path().to_path_buf();
        let namespaces_before = teardown::network_namespaces();
        let containerd = containerd::Containerd::start(dir.path(), &log_dir).await?;
        let mut node = Self {
            name: options.name.clone(),
            address,
            containerd,
            processes: Vec::new(),
            proxy_program: bin_dir.join("kube-proxy"),
            namespaces_before,
            dir,
        };
        let started = node
            .start_rest(cluster, &options, &bin_dir, &kubeconfig, &log_dir)
            .await;
        if let Err(error) = started {
            node.dir.keep();
            return Err(error);
        }
        eprintln!(
            "testkit: node {} ready at {address} (directory {})",
            node.name,
            node.dir.path().display()
        );
        Ok(node)
    }

    /// Imports the images, then starts kube-scheduler, the kubelet and kube-proxy.
    async fn start_rest(
        &mut self,
        cluster: &TestCluster,
        options: &NodeOptions,
        bin_dir: &Path,
        kubeconfig: &Path,
        log_dir: &Path,
    ) -> Result<(), ClusterError> {
        for archive in &options.images {
            self.containerd.import(archive).await?;
        }
        self.processes
            .push(scheduler::start(bin_dir, kubeconfig, self.dir.path(), log_dir).await?);
        let kubelet = kubelet::Kubelet {
            program: &bin_dir.join("kubelet"),
            name: &self.name,
            address: self.address,
            dir: self.dir.path(),
            kubeconfig,
            runtime_socket: self.containerd.socket(),
            log_dir,
        };
        self.processes.push(kubelet.start(cluster).await?);
        self.processes.push(
            proxy::start(
                &self.proxy_program,
                &self.name,
                kubeconfig,
                self.dir.path(),
                log_dir,
                options.proxy_min_sync_period,
            )
            .await?,
        );
        Ok(())
    }

    /// The node's name, as the API server knows it.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The host address the node registered with (its InternalIP).
    pub fn address(&self) -> Ipv4Addr {
        self.address
    }

    /// containerd's socket (`ctr --address`).
    pub fn containerd_socket(&self) -> &Path {
        self.containerd.socket()
    }

    /// The process id of the container whose CRI id is `container_id` (the part of a pod's
    /// `containerStatuses[].containerID` after `containerd://`), for killing it from outside as
    /// the kernel's OOM killer would.
    pub async fn container_pid(&self, container_id: &str) -> Result<u32, ClusterError> {
        self.containerd.task_pid(container_id).await
    }

    /// Stops the kubelet (SIGTERM): the node stops reporting and its containers keep running.
    pub fn stop_kubelet(&mut self) {
        if let Some(kubelet) = self.processes.iter_mut().find(|p| p.name() == "kubelet") {
            kubelet.stop(STOP_GRACE);
        }
    }
}

impl Drop for RealNode {
    fn drop(&mut self) {
        while let Some(mut process) = self.processes.pop() {
            process.stop(STOP_GRACE);
        }
        self.containerd.stop_with_containers();
        teardown::remove_proxy_rules(&self.proxy_program);
        teardown::remove_network_namespaces(&self.namespaces_before);
    }
}

/// Runs the packages script (it installs only what is missing).
fn install_packages() -> Result<(), ClusterError> {
    let status = Command::new(PACKAGES_SCRIPT)
        .status()
        .map_err(|e| ClusterError::Build(format!("cannot run {PACKAGES_SCRIPT}: {e}")))?;
    if status.success() {
        Ok(())
    } else {
        Err(ClusterError::Build(format!(
            "{PACKAGES_SCRIPT} failed ({status}); its output is above on stderr"
        )))
    }
}
