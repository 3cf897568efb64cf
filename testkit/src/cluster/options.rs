//! How to start a cluster: [`ClusterOptions`].

use std::net::Ipv4Addr;
use std::path::PathBuf;

/// How to start a [`TestCluster`](super::TestCluster).
#[derive(Debug, Clone)]
pub struct ClusterOptions {
    /// Build kube-apiserver and kube-controller-manager first if this machine never built them
    /// (about 5 minutes); when false, a missing build is a
    /// [`ClusterError::Build`](super::ClusterError::Build).
    pub build_if_missing: bool,
    /// Run kube-controller-manager (Deployments, ReplicaSets, EndpointSlices, garbage
    /// collection, namespace deletion, service-account tokens).
    pub controller_manager: bool,
    /// Where the process logs go; `None` means the cluster directory (removed with it).
    pub log_dir: Option<PathBuf>,
    /// Serve a real node (`crate::node`) at this host address: the apiserver listens on every
    /// interface and advertises this address (the `kubernetes` Service's endpoint, which pods
    /// reach through kube-proxy), and admits pods with their ServiceAccount's token. `None`:
    /// loopback only, for simulated pods.
    pub node_address: Option<Ipv4Addr>,
}

impl Default for ClusterOptions {
    fn default() -> Self {
        Self {
            build_if_missing: true,
            controller_manager: true,
            log_dir: None,
            node_address: None,
        }
    }
}
