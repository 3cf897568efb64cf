//! The reconcile error, with a static category that becomes a metric label, an event reason
//! and a log field (never a message with names in it).

use crate::consul::ConsulError;
use crate::election::refusal::ConsulRefusal;

/// Why a reconcile failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A Kubernetes API call failed.
    #[error("kubernetes API: {operation}: {source}")]
    Kube {
        /// What was being done (`patch pod`, `patch status`, `read secret`).
        operation: &'static str,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// A Consul call failed.
    #[error("consul: {0}")]
    Consul(#[from] ConsulError),
    /// The finalizer helper failed (adding or removing the finalizer, or the cleanup).
    #[error("finalizer: {0}")]
    Finalizer(#[source] Box<kube::runtime::finalizer::Error<Error>>),
    /// A deletion could not clean up in Consul yet; it is retried after `retry_after`.
    #[error("cleanup in Consul pending (retry in {}s): {source}", retry_after.as_secs())]
    CleanupPending {
        /// When to try again.
        retry_after: std::time::Duration,
        /// Why Consul could not be cleaned up.
        #[source]
        source: Box<Error>,
    },
    /// A status write was refused because the status is not the one it was based on: its
    /// fencing token moved since this process last read or wrote it (another writer, such as
    /// a replica that took over). Nothing was written; the next reconcile starts from the
    /// status as it is.
    #[error("status changed elsewhere (expected {expected}): {source}")]
    StatusStale {
        /// The revision and fencing token the write expected.
        expected: String,
        /// The API server's refusal.
        #[source]
        source: kube::Error,
    },
    /// A status could not be encoded as a patch (never for a status the operator built).
    #[error("cannot encode the status: {0}")]
    InvalidStatus(String),
    /// The object has no namespace or name (never for a namespaced object from the API).
    #[error("the LeaderElection has no {0}")]
    MissingMetadata(&'static str),
}

/// How long a reconcile that Consul refused for lack of ACL rights waits before it tries
/// again (the condition and the event already say what is missing).
pub const REFUSED_RETRY: std::time::Duration = std::time::Duration::from_secs(30);

impl Error {
    /// A static category for metrics and logs (`snake_case`, like Consul's categories).
    pub fn category(&self) -> &'static str {
        match self {
            Self::Kube { source, .. } => match source {
                kube::Error::Api(s) if s.is_conflict() => "kube_conflict",
                kube::Error::Api(s) if s.is_not_found() => "kube_not_found",
                kube::Error::Api(s) if s.is_forbidden() => "kube_forbidden",
                kube::Error::Api(_) => "kube_api_error",
                kube::Error::Service(e) if e.is::<crate::write_gate::NotActive>() => "not_active",
                _ => "kube_unavailable",
            },
            Self::StatusStale { .. } => "status_stale",
            Self::InvalidStatus(_) => "invalid_status",
            Self::Consul(e) => e.category(),
            // The step the finalizer helper wraps says what failed; only its own API calls
            // (adding or removing the finalizer) are the helper's.
            Self::Finalizer(inner) => match inner.as_ref() {
                kube::runtime::finalizer::Error::ApplyFailed(error)
                | kube::runtime::finalizer::Error::CleanupFailed(error) => error.category(),
                _ => "finalizer",
            },
            Self::CleanupPending { .. } => "consul_cleanup_pending",
            Self::MissingMetadata(_) => "missing_metadata",
        }
    }

    /// What Consul refused, when this error is Consul refusing a request for lack of rights
    /// (the election reports it as a condition until a request succeeds).
    pub fn consul_refusal(&self) -> Option<ConsulRefusal> {
        match self {
            Self::Consul(ConsulError::PermissionDenied { context, .. }) => Some(
                ConsulRefusal::permission_denied(context.operation, &context.target),
            ),
            Self::Consul(ConsulError::AclNotFound { context }) => Some(
                ConsulRefusal::token_not_found(context.operation, &context.target),
            ),
            Self::Consul(ConsulError::EnterpriseOnly { context, detail }) => Some(
                ConsulRefusal::enterprise_only(context.operation, &context.target, detail),
            ),
            _ => None,
        }
    }

    /// How soon a reconcile that failed with this error should be retried, when the error
    /// says (a deletion waiting for Consul backs off).
    pub fn retry_after(&self) -> Option<std::time::Duration> {
        match self {
            Self::CleanupPending { retry_after, .. } => Some(*retry_after),
            Self::Finalizer(inner) => match inner.as_ref() {
                kube::runtime::finalizer::Error::CleanupFailed(e)
                | kube::runtime::finalizer::Error::ApplyFailed(e) => e.retry_after(),
                _ => None,
            },
            // Retrying sooner cannot help: somebody must change the token's rules first.
            Self::Consul(
                ConsulError::PermissionDenied { .. }
                | ConsulError::AclNotFound { .. }
                | ConsulError::EnterpriseOnly { .. },
            ) => Some(REFUSED_RETRY),
            _ => None,
        }
    }

    /// Wraps a kube error with what was being done.
    pub fn kube(operation: &'static str) -> impl FnOnce(kube::Error) -> Error {
        move |source| Error::Kube { operation, source }
    }
}

#[cfg(test)]
mod tests {
    use kube::runtime::finalizer;

    use super::*;

    #[test]
    fn a_failure_inside_the_finalizer_helper_keeps_its_own_category() {
        let wrapped = |inner| Error::Finalizer(Box::new(inner));
        let apply = wrapped(finalizer::Error::ApplyFailed(Error::MissingMetadata(
            "name",
        )));
        assert_eq!(apply.category(), "missing_metadata");
        let cleanup = wrapped(finalizer::Error::CleanupFailed(Error::MissingMetadata(
            "name",
        )));
        assert_eq!(cleanup.category(), "missing_metadata");
        let own = wrapped(finalizer::Error::UnnamedObject);
        assert_eq!(own.category(), "finalizer");
    }
}
