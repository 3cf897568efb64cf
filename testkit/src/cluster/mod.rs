//! A real Kubernetes test cluster: Debian's etcd, kube-apiserver and kube-controller-manager
//! v1.20.2 (built from Debian's source package by `testkit/scripts/build-kube.sh`) on loopback.
//!
//! Every test binary shares one cluster ([`TestCluster::shared`]); each test works in its own
//! namespace ([`with_namespace`]). There is no kubelet and no scheduler: pods never run unless
//! the pod simulator plays the kubelet. Deployments, ReplicaSets, EndpointSlices, garbage
//! collection, namespace deletion, service-account tokens and ClusterRole aggregation are the
//! real controllers.

pub mod audit;
pub(crate) mod binaries;
mod credentials;
mod error;
mod kubeconfig;
mod launch;
mod namespace;
mod options;
pub(crate) mod ports;
pub(crate) mod processes;
pub(crate) mod readiness;
mod service_account;
mod start;
mod test_cluster;
pub(crate) mod workdir;

pub use binaries::BIN_DIR_ENV;
pub use error::ClusterError;
pub use namespace::{TEST_NAMESPACE_LABEL, with_namespace};
pub use options::ClusterOptions;
pub(crate) use processes::spawn_tied;
pub use start::SKIP_ENV;
pub use test_cluster::{TestCluster, install_crypto_provider};
