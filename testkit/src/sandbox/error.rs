//! Why the sandbox could not run its scenario at all: [`SandboxError`].

use crate::cluster::ClusterError;
use crate::pods::WorkloadError;

/// Why the sandbox could not run its scenario at all.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// The operator binary could not be built.
    #[error("cannot build the operator: {0}")]
    Build(String),
    /// The test cluster did not start.
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    /// The CRD or the LeaderElection could not be made.
    #[error("{0}")]
    Crd(String),
    /// A Kubernetes API request failed.
    #[error("{context}: {source}")]
    Kube {
        /// What was being done.
        context: String,
        /// Why it failed.
        #[source]
        source: kube::Error,
    },
    /// The Deployment did not come up.
    #[error("the Deployment: {0}")]
    Workload(#[from] WorkloadError),
    /// A local file, process or socket operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// Why it failed.
        #[source]
        source: std::io::Error,
    },
    /// Anything else that kept the sandbox from starting.
    #[error("{0}")]
    Setup(String),
}

impl SandboxError {
    /// A `map_err` adapter turning an I/O error into [`SandboxError::Io`] with `context`.
    pub(crate) fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> Self {
        let context = context.into();
        move |source| Self::Io { context, source }
    }
}
