//! Typed errors of the Consul client, classified by HTTP status and body text (Consul's bodies
//! are Go error strings, matched by substring because RPC forwarding adds prefixes).

use std::fmt;
use std::time::Duration;

/// Longest response body excerpt kept in an error.
const MAX_BODY_EXCERPT: usize = 512;

/// What a failed request was doing: the operation and the key or session it was about.
/// Shown in every error message; it never contains the token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorContext {
    /// The operation, for example `kv acquire` or `session renew`.
    pub operation: &'static str,
    /// The key, prefix or session ID the operation was about (may be empty).
    pub target: String,
}

impl ErrorContext {
    /// A context for `operation` on `target`.
    pub fn new(operation: &'static str, target: impl Into<String>) -> Self {
        Self {
            operation,
            target: target.into(),
        }
    }
}

impl fmt::Display for ErrorContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.target.is_empty() {
            f.write_str(self.operation)
        } else {
            write!(f, "{} {:?}", self.operation, self.target)
        }
    }
}

/// Where a transport failure happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransportFailure {
    /// TCP connect, TLS handshake or HTTP handshake failed: the request was never sent.
    Connect,
    /// The request did not complete within its timeout; it may or may not have been applied.
    Timeout,
    /// The connection broke while the request or response was in flight; it may or may not
    /// have been applied.
    Io,
}

impl fmt::Display for TransportFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Connect => "connection failed",
            Self::Timeout => "timed out",
            Self::Io => "connection error",
        })
    }
}

/// An error from the Consul client.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConsulError {
    /// Connect failure, timeout or connection reset. Retryable.
    #[error("consul {context}: {failure}: {detail}")]
    Transport {
        /// The failed request.
        context: ErrorContext,
        /// Which phase failed.
        failure: TransportFailure,
        /// The underlying error text.
        detail: String,
    },
    /// HTTP 500 `No cluster leader`: Consul has no Raft leader right now. Retryable.
    #[error("consul {context}: no cluster leader")]
    NoClusterLeader {
        /// The failed request.
        context: ErrorContext,
    },
    /// HTTP 500 `rpc error getting client: ...` or `rpc error making call: EOF` (and other
    /// connection failures): the server answering could not reach the Raft leader, typically
    /// while a new leader is elected. Retryable; the request was not applied when the server
    /// could not even connect (`rpc error getting client`), otherwise it may have been.
    #[error("consul {context}: the server could not reach the Raft leader: {detail}")]
    LeaderForwarding {
        /// The failed request.
        context: ErrorContext,
        /// Consul's text.
        detail: String,
    },
    /// HTTP 500 `Not ready to serve consistent reads` (right after an election). Retryable.
    #[error("consul {context}: server not ready to serve consistent reads")]
    NotReadyForConsistentReads {
        /// The failed request.
        context: ErrorContext,
    },
    /// HTTP 429, or 503 `rate limit exceeded`. Retryable after a backoff.
    #[error("consul {context}: rate limited (HTTP {status})")]
    RateLimited {
        /// The failed request.
        context: ErrorContext,
        /// 429 or 503.
        status: u16,
        /// The `Retry-After` header, when the server sent one.
        retry_after: Option<Duration>,
    },
    /// HTTP 403 `Permission denied`: the token lacks a permission. Not retryable.
    #[error("consul {context}: permission denied: {detail}")]
    PermissionDenied {
        /// The failed request.
        context: ErrorContext,
        /// Consul's explanation (which permission is missing).
        detail: String,
    },
    /// HTTP 403 `ACL not found`: the token is unknown to Consul. Not retryable.
    #[error("consul {context}: ACL token not found")]
    AclNotFound {
        /// The failed request.
        context: ErrorContext,
    },
    /// HTTP 500 `invalid session` / `missing session` on an acquire or release. Not retryable.
    #[error("consul {context}: invalid session: {detail}")]
    InvalidSession {
        /// The failed request.
        context: ErrorContext,
        /// Consul's message.
        detail: String,
    },
    /// Session renew answered 404: the session expired or was destroyed. Not retryable.
    #[error("consul {context}: session not found")]
    SessionNotFound {
        /// The failed request.
        context: ErrorContext,
    },
    /// HTTP 413: the value exceeds Consul's `kv_max_value_size`. Not retryable.
    #[error("consul {context}: value too large: {detail}")]
    ValueTooLarge {
        /// The failed request.
        context: ErrorContext,
        /// Consul's message.
        detail: String,
    },
    /// HTTP 400 `... are a Consul Enterprise feature`: the request named a namespace or an admin
    /// partition, and this server is Consul CE. Not retryable.
    #[error("consul {context}: {detail}")]
    EnterpriseOnly {
        /// The failed request.
        context: ErrorContext,
        /// Consul's message.
        detail: String,
    },
    /// The request was rejected before it was sent (bad key, bad session ID, bad token bytes).
    #[error("consul {context}: invalid request: {detail}")]
    InvalidRequest {
        /// The rejected request.
        context: ErrorContext,
        /// What is wrong with it.
        detail: String,
    },
    /// The client could not be set up (for example an unreadable CA file). Not retryable.
    #[error("consul {context}: configuration error: {detail}")]
    Configuration {
        /// What was being set up.
        context: ErrorContext,
        /// What is wrong.
        detail: String,
    },
    /// A 2xx answer whose body could not be decoded.
    #[error("consul {context}: cannot decode response: {detail}")]
    Decode {
        /// The request.
        context: ErrorContext,
        /// The decoder's message.
        detail: String,
    },
    /// This replica may not write (it does not hold the operator's Lease, or its deadline
    /// passed while the request was in flight): the write was not sent, or was cancelled.
    /// Not retryable.
    #[error("consul {context}: {reason}")]
    NotActive {
        /// The refused request.
        context: ErrorContext,
        /// Refused before sending, or cancelled in flight.
        reason: crate::write_gate::NotActive,
    },
    /// Any other status.
    #[error("consul {context}: unexpected response: HTTP {status}: {body}")]
    Unexpected {
        /// The failed request.
        context: ErrorContext,
        /// The HTTP status.
        status: u16,
        /// The response body, truncated.
        body: String,
    },
}

impl ConsulError {
    /// A short, stable name of the error kind, for metrics labels and log fields.
    pub fn category(&self) -> &'static str {
        match self {
            Self::Transport { .. } => "transport",
            Self::NoClusterLeader { .. } => "no_cluster_leader",
            Self::LeaderForwarding { .. } => "leader_forwarding",
            Self::NotReadyForConsistentReads { .. } => "not_ready",
            Self::RateLimited { .. } => "rate_limited",
            Self::PermissionDenied { .. } => "permission_denied",
            Self::AclNotFound { .. } => "acl_not_found",
            Self::InvalidSession { .. } => "invalid_session",
            Self::SessionNotFound { .. } => "session_not_found",
            Self::ValueTooLarge { .. } => "value_too_large",
            Self::EnterpriseOnly { .. } => "enterprise_only",
            Self::InvalidRequest { .. } => "invalid_request",
            Self::Configuration { .. } => "configuration",
            Self::Decode { .. } => "decode",
            Self::NotActive { .. } => "not_active",
            Self::Unexpected { .. } => "unexpected",
        }
    }

    /// Whether trying again later can succeed: transport failures, no leader, not ready and
    /// rate limiting. Everything else needs a change first (token, session, value, request).
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            Self::Transport { .. }
                | Self::NoClusterLeader { .. }
                | Self::LeaderForwarding { .. }
                | Self::NotReadyForConsistentReads { .. }
                | Self::RateLimited { .. }
        )
    }

    /// Whether the error proves that Consul did not apply the request, so that even a
    /// non-idempotent request (session create, CAS) can be sent again safely.
    pub fn request_not_applied(&self) -> bool {
        match self {
            Self::Transport { failure, .. } => *failure == TransportFailure::Connect,
            Self::NoClusterLeader { .. }
            | Self::NotReadyForConsistentReads { .. }
            | Self::RateLimited { .. } => true,
            Self::LeaderForwarding { detail, .. } => detail.contains(NO_CONNECTION_TO_LEADER),
            _ => false,
        }
    }

    /// The delay the server asked for with `Retry-After`, if any.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::RateLimited { retry_after, .. } => *retry_after,
            _ => None,
        }
    }

    /// The context of the request that failed.
    pub fn context(&self) -> &ErrorContext {
        match self {
            Self::Transport { context, .. }
            | Self::NoClusterLeader { context }
            | Self::LeaderForwarding { context, .. }
            | Self::NotReadyForConsistentReads { context }
            | Self::RateLimited { context, .. }
            | Self::PermissionDenied { context, .. }
            | Self::AclNotFound { context }
            | Self::InvalidSession { context, .. }
            | Self::SessionNotFound { context }
            | Self::ValueTooLarge { context, .. }
            | Self::EnterpriseOnly { context, .. }
            | Self::InvalidRequest { context, .. }
            | Self::Configuration { context, .. }
            | Self::Decode { context, .. }
            | Self::NotActive { context, .. }
            | Self::Unexpected { context, .. } => context,
        }
    }

    /// Classifies a non-success response. `body` must already have the token redacted.
    pub(crate) fn from_response(
        context: ErrorContext,
        status: u16,
        body: &str,
        retry_after: Option<Duration>,
    ) -> Self {
        let detail = || excerpt(body);
        match status {
            429 => Self::RateLimited {
                context,
                status,
                retry_after,
            },
            503 if body.contains("rate limit exceeded") => Self::RateLimited {
                context,
                status,
                retry_after,
            },
            403 if body.contains("ACL not found") => Self::AclNotFound { context },
            403 if body.contains("Permission denied") => Self::PermissionDenied {
                context,
                detail: detail(),
            },
            400 if body.contains("a Consul Enterprise feature") => Self::EnterpriseOnly {
                context,
                detail: detail(),
            },
            413 => Self::ValueTooLarge {
                context,
                detail: detail(),
            },
            500 if body.contains("No cluster leader") => Self::NoClusterLeader { context },
            500 if body.contains("Not ready to serve consistent reads") => {
                Self::NotReadyForConsistentReads { context }
            }
            500 if body.contains("invalid session") || body.contains("missing session") => {
                Self::InvalidSession {
                    context,
                    detail: detail(),
                }
            }
            500 if leader_unreachable(body) => Self::LeaderForwarding {
                context,
                detail: detail(),
            },
            _ => Self::Unexpected {
                context,
                status,
                body: detail(),
            },
        }
    }
}

/// Consul's text when a server cannot even connect to the Raft leader to forward a request.
const NO_CONNECTION_TO_LEADER: &str = "rpc error getting client";

/// Whether a 500's body says the server answering could not reach the Raft leader (the
/// connection failed or broke), rather than that the leader refused the request.
fn leader_unreachable(body: &str) -> bool {
    body.contains(NO_CONNECTION_TO_LEADER)
        || (body.contains("rpc error making call:")
            && [
                "EOF",
                "connection reset",
                "closed network connection",
                "connection refused",
            ]
            .iter()
            .any(|failure| body.contains(failure)))
}

/// The body trimmed and cut to [`MAX_BODY_EXCERPT`] bytes (on a character boundary).
fn excerpt(body: &str) -> String {
    let body = body.trim();
    if body.len() <= MAX_BODY_EXCERPT {
        return body.to_owned();
    }
    let mut end = MAX_BODY_EXCERPT;
    while !body.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes)", &body[..end], body.len())
}

/// Result type of the Consul client.
pub type Result<T, E = ConsulError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    fn classify(status: u16, body: &str) -> ConsulError {
        ConsulError::from_response(ErrorContext::new("kv put", "a/b"), status, body, None)
    }

    #[test]
    fn classifies_by_status_and_body() {
        let cases = [
            (429, "", "rate_limited", true),
            (
                429,
                "rate limit exceeded, try again later or against a different server",
                "rate_limited",
                true,
            ),
            (
                503,
                "rate limit exceeded for operation that can only be performed by the leader, try again later",
                "rate_limited",
                true,
            ),
            (503, "Service Unavailable", "unexpected", false),
            (
                403,
                "Permission denied: token with AccessorID 'x' lacks permission 'key:write' on \"a/b\"",
                "permission_denied",
                false,
            ),
            (403, "ACL not found", "acl_not_found", false),
            (
                403,
                "rpc error making call: ACL not found",
                "acl_not_found",
                false,
            ),
            (
                403,
                "Endpoint is blocked by agent configuration",
                "unexpected",
                false,
            ),
            (
                413,
                "Request body(524289 bytes) too large, max size: 524288 bytes.",
                "value_too_large",
                false,
            ),
            (500, "No cluster leader", "no_cluster_leader", true),
            // A server forwarding to a Raft leader that just died (seen on Consul 1.0.8 while
            // a new leader is elected; later versions can answer the same on a follower).
            (
                500,
                "rpc error getting client: failed to get conn: dial tcp 127.0.0.1:8300: connect: connection refused",
                "leader_forwarding",
                true,
            ),
            (500, "rpc error making call: EOF", "leader_forwarding", true),
            (
                500,
                "rpc error making call: No cluster leader",
                "no_cluster_leader",
                true,
            ),
            (
                500,
                "Not ready to serve consistent reads",
                "not_ready",
                true,
            ),
            (
                500,
                "raft apply failed: invalid session \"1111\"",
                "invalid_session",
                false,
            ),
            (500, "missing session", "invalid_session", false),
            (
                500,
                "Invalid Behavior setting 'Release'",
                "unexpected",
                false,
            ),
            (400, "Invalid wait time", "unexpected", false),
        ];
        for (status, body, category, retryable) in cases {
            let error = classify(status, body);
            assert_eq!(error.category(), category, "{status} {body}");
            assert_eq!(error.is_retryable(), retryable, "{status} {body}");
        }
    }

    #[test]
    fn keeps_retry_after_and_context() {
        let error = ConsulError::from_response(
            ErrorContext::new("session renew", "abc"),
            429,
            "",
            Some(Duration::from_secs(3)),
        );
        assert_eq!(error.retry_after(), Some(Duration::from_secs(3)));
        assert!(error.request_not_applied());
        assert_eq!(error.context().operation, "session renew");
        assert_eq!(
            error.to_string(),
            "consul session renew \"abc\": rate limited (HTTP 429)"
        );
    }

    #[test]
    fn truncates_long_bodies() {
        let body = "é".repeat(1000);
        let ConsulError::Unexpected { body: kept, .. } = classify(502, &body) else {
            panic!("expected unexpected");
        };
        assert!(kept.len() < 600);
        assert!(kept.ends_with("(2000 bytes)"));
    }

    #[test]
    fn only_connect_failures_prove_nothing_was_applied() {
        let transport = |failure| ConsulError::Transport {
            context: ErrorContext::new("kv cas", "k"),
            failure,
            detail: String::new(),
        };
        assert!(transport(TransportFailure::Connect).request_not_applied());
        assert!(!transport(TransportFailure::Timeout).request_not_applied());
        assert!(!transport(TransportFailure::Io).request_not_applied());
        assert!(transport(TransportFailure::Io).is_retryable());
    }
}
