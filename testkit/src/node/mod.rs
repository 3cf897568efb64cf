//! Real nodes for the test cluster: per node, containerd with its CRI plugin (Debian's
//! package) and a kubelet; per host, kube-scheduler and kube-proxy in iptables mode (v1.20.2,
//! built by `testkit/scripts/build-kube.sh` beside the apiserver), so that pods run as
//! containers, their probes are real and a Service's ClusterIP routes to them.
//!
//! The nodes share the host's network and run as root: kube-proxy and the bridge CNI change the
//! host's iptables rules, and node `i` adds a bridge `electori` with its pods in `10.244.i.0/24`
//! (all within [`CLUSTER_POD_CIDR`]; the host routes between them). Images come from archives
//! imported into each node's containerd, never from a registry. The cluster must have been
//! started with [`ClusterOptions::node_address`](crate::cluster::ClusterOptions::node_address)
//! set to [`host_address`]. Dropping the nodes stops their processes, kills every container
//! they ran, removes the iptables rules, network namespaces and mounts, and deletes their
//! directory. One run's nodes at a time per host: a second run waits for the first (see
//! `host_lock`).

mod containerd;
mod host_lock;
mod kubelet;
mod network;
mod proxy;
mod scheduler;
mod teardown;

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

pub use containerd::PAUSE_IMAGE;
pub use network::{CLUSTER_POD_CIDR, host_address};

use crate::cluster::processes::ManagedProcess;
use crate::cluster::workdir::ClusterDir;
use crate::cluster::{ClusterError, TestCluster};

/// The Debian packages a node needs; `testkit/scripts/node-packages.sh` installs them.
const PACKAGES_SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/node-packages.sh");
/// How long a process gets to exit after SIGTERM when the nodes stop.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// How to start the host's [`RealNodes`].
#[derive(Debug, Clone)]
pub struct NodesOptions {
    /// The nodes, at least one; the first is where kube-proxy says it runs.
    pub nodes: Vec<NodeOptions>,
    /// Image archives (`docker-archive` or `oci-archive`) imported into every node's
    /// containerd before its kubelet starts; one must hold [`PAUSE_IMAGE`].
    pub images: Vec<PathBuf>,
    /// Where the process logs go; `None` means the nodes' directory (removed with it).
    pub log_dir: Option<PathBuf>,
    /// kube-proxy's `iptables.minSyncPeriod` (how often at most it rewrites its rules);
    /// `None` keeps its default (1 s), as a user's cluster has it.
    pub proxy_min_sync_period: Option<Duration>,
}

/// One node of [`NodesOptions`].
#[derive(Debug, Clone)]
pub struct NodeOptions {
    /// The node's name.
    pub name: String,
    /// Taints the kubelet registers the node with (`key=value:Effect`), e.g. to keep pods off
    /// a node unless they tolerate it.
    pub taints: Vec<String>,
}

/// The host's running nodes. Dropping them tears everything down (see the module
/// documentation).
#[derive(Debug)]
pub struct RealNodes {
    nodes: Vec<RealNode>,
    /// kube-scheduler and kube-proxy, in start order (stopped in reverse).
    processes: Vec<ManagedProcess>,
    proxy_program: PathBuf,
    namespaces_before: Vec<PathBuf>,
    dir: ClusterDir,
    /// Held until everything above is torn down (fields drop after [`Drop::drop`], in order).
    _lock: host_lock::HostLock,
}

/// One running node: its containerd and kubelet.
#[derive(Debug)]
pub struct RealNode {
    name: String,
    containerd: containerd::Containerd,
    kubelet: ManagedProcess,
}

impl RealNodes {
    /// Installs the nodes' packages if needed, waits for this host's lock, then starts
    /// kube-scheduler; each node's containerd (importing `options.images`) and kubelet
    /// (waiting until the API server reports the node Ready); and kube-proxy (waiting for its
    /// first rule sync).
    pub async fn start(cluster: &TestCluster, options: NodesOptions) -> Result<Self, ClusterError> {
        install_packages()?;
        let address = cluster.node_address().ok_or_else(|| {
            ClusterError::Build(
                "the cluster was started without ClusterOptions::node_address".into(),
            )
        })?;
        let first = options
            .nodes
            .first()
            .ok_or_else(|| ClusterError::Build("no node to start".into()))?
            .name
            .clone();
        let bin_dir = crate::cluster::binaries::Binaries::locate(false)?.bin_dir;
        let lock = host_lock::HostLock::acquire().await?;
        network::prepare_host()?;
        teardown::sweep_stale();
        let dir = ClusterDir::create_for_node()?;
        let log_dir = dir.log_dir(options.log_dir.as_deref())?;
        let mut nodes = Self {
            nodes: Vec::new(),
            processes: Vec::new(),
            proxy_program: bin_dir.join("kube-proxy"),
            namespaces_before: teardown::network_namespaces(),
            dir,
            _lock: lock,
        };
        let kubeconfig = cluster.kubeconfig_path().to_path_buf();
        let host = Host {
            cluster,
            address,
            bin_dir: &bin_dir,
            kubeconfig: &kubeconfig,
            log_dir: &log_dir,
        };
        if let Err(error) = nodes.start_all(&host, &options, &first).await {
            nodes.dir.keep();
            return Err(error);
        }
        eprintln!(
            "testkit: nodes {:?} ready at {address} (directory {})",
            nodes.nodes.iter().map(RealNode::name).collect::<Vec<_>>(),
            nodes.dir.path().display()
        );
        Ok(nodes)
    }

    /// Starts kube-scheduler, every node, then kube-proxy (as node `proxy_node`).
    async fn start_all(
        &mut self,
        host: &Host<'_>,
        options: &NodesOptions,
        proxy_node: &str,
    ) -> Result<(), ClusterError> {
        self.processes.push(
            scheduler::start(host.bin_dir, host.kubeconfig, self.dir.path(), host.log_dir).await?,
        );
        for (index, node) in options.nodes.iter().enumerate() {
            let index = u8::try_from(index)
                .map_err(|_| ClusterError::Build("at most 256 nodes per host".into()))?;
            let dir = self.dir.path().join(&node.name);
            let started = RealNode::start(host, index, node, &dir, &options.images).await?;
            self.nodes.push(started);
        }
        self.processes.push(
            proxy::start(
                &self.proxy_program,
                proxy_node,
                host.kubeconfig,
                self.dir.path(),
                host.log_dir,
                options.proxy_min_sync_period,
            )
            .await?,
        );
        Ok(())
    }

    /// The nodes, in the order of [`NodesOptions::nodes`].
    pub fn nodes(&self) -> &[RealNode] {
        &self.nodes
    }
}

impl Drop for RealNodes {
    fn drop(&mut self) {
        while let Some(mut process) = self.processes.pop() {
            process.stop(STOP_GRACE);
        }
        for node in &mut self.nodes {
            node.stop();
        }
        teardown::remove_proxy_rules(&self.proxy_program);
        teardown::remove_network_namespaces(&self.namespaces_before);
    }
}

/// What every node of the host starts with.
struct Host<'a> {
    cluster: &'a TestCluster,
    address: Ipv4Addr,
    bin_dir: &'a Path,
    kubeconfig: &'a Path,
    log_dir: &'a Path,
}

impl RealNode {
    /// Starts node number `index` in `dir`: containerd, the image imports, and the kubelet.
    async fn start(
        host: &Host<'_>,
        index: u8,
        options: &NodeOptions,
        dir: &Path,
        images: &[PathBuf],
    ) -> Result<Self, ClusterError> {
        let name = &options.name;
        let containerd = containerd::Containerd::start(
            index,
            dir,
            host.log_dir,
            &format!("{name}-containerd.log"),
        )
        .await?;
        for archive in images {
            containerd.import(archive).await?;
        }
        let kubelet = kubelet::Kubelet {
            program: &host.bin_dir.join("kubelet"),
            name,
            address: host.address,
            taints: &options.taints,
            dir,
            kubeconfig: host.kubeconfig,
            runtime_socket: containerd.socket(),
            log_dir: host.log_dir,
        }
        .start(host.cluster)
        .await?;
        Ok(Self {
            name: name.clone(),
            containerd,
            kubelet,
        })
    }

    /// The node's name, as the API server knows it.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// containerd's socket (`ctr --address`).
    pub fn containerd_socket(&self) -> &Path {
        self.containerd.socket()
    }

    /// The kubelet's process id: a test that stops it (SIGSTOP) makes the node fall silent
    /// while its containers keep running, as a hung kubelet or a cut-off node would.
    pub fn kubelet_pid(&self) -> u32 {
        self.kubelet.pid()
    }

    /// Stops the kubelet (a stopped one is killed after the grace), then every container and
    /// containerd. Blocking: runs from `Drop`.
    fn stop(&mut self) {
        // A kubelet a test left SIGSTOPped would not see SIGTERM before the grace ran out.
        self.kubelet.signal(libc::SIGCONT);
        self.kubelet.stop(STOP_GRACE);
        self.containerd.stop_with_containers();
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
