//! Why the suite's environment could not be set up: [`SuiteError`].

use crate::cluster::ClusterError;

/// Why the environment could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum SuiteError {
    /// The cluster or the node did not start.
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    /// The chart did not install, or its workloads did not become available.
    #[error("the chart: {0}")]
    Chart(String),
    /// The command could not be run.
    #[error("cannot run {command}: {source}")]
    Command {
        /// The program.
        command: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}
