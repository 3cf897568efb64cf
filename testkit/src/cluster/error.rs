//! Why a cluster could not start: [`ClusterError`].

use std::path::PathBuf;

/// Why a cluster could not start.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// The Kubernetes binaries are missing or could not be built.
    #[error("cannot provide the Kubernetes binaries: {0}")]
    Build(String),
    /// A process (or a helper such as `openssl`) could not be started.
    #[error("cannot start {process}: {source}")]
    Spawn {
        /// The program.
        process: &'static str,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A process started but did not serve in time, or exited.
    #[error("{process} is not ready: {reason}\n--- last lines of {} ---\n{log_tail}", log.display())]
    NotReady {
        /// The program.
        process: &'static str,
        /// What was awaited and the last probe's answer.
        reason: String,
        /// Its log file.
        log: PathBuf,
        /// The last lines of that log.
        log_tail: String,
    },
    /// A file or socket operation of the test harness itself failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// Why it failed.
        #[source]
        source: std::io::Error,
    },
}

impl ClusterError {
    /// A `map_err` adapter turning an I/O error into [`ClusterError::Io`] with `context`.
    pub(crate) fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> Self {
        let context = context.into();
        move |source| Self::Io { context, source }
    }
}
