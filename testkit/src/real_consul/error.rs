//! Why a real Consul could not be started: [`RealConsulError`].

/// Why a real Consul could not be started.
#[derive(Debug, thiserror::Error)]
pub enum RealConsulError {
    /// `CONSUL_BIN` is unset on CI, or names no executable.
    #[error("no Consul binary: {0}")]
    Binary(String),
    /// A process could not be spawned, or the harness' own I/O failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The cluster did not become usable in time.
    #[error("consul did not become ready: {reason}\n--- last lines of its log ---\n{log_tail}")]
    NotReady {
        /// What was awaited.
        reason: String,
        /// The last lines of the members' logs.
        log_tail: String,
    },
    /// A member's process exited while the cluster was starting.
    #[error("consul {node} exited while starting\n--- last lines of its log ---\n{log_tail}")]
    MemberExited {
        /// Its node name.
        node: String,
        /// The last lines of its log.
        log_tail: String,
    },
    /// An HTTP call of the harness to Consul failed.
    #[error("consul {what}: {detail}")]
    Http {
        /// The call.
        what: String,
        /// Status and body, or the transport error.
        detail: String,
    },
}

impl RealConsulError {
    pub(super) fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> Self {
        let context = context.into();
        move |source| Self::Io { context, source }
    }
}
