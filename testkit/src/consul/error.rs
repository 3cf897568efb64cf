//! Plain-text API errors (Consul's error bodies are the bare Go error strings).

/// An HTTP error answer: status code and plain-text body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ApiError {
    pub(crate) status: u16,
    pub(crate) body: String,
}

impl ApiError {
    pub(crate) fn new(status: u16, body: impl Into<String>) -> Self {
        ApiError {
            status,
            body: body.into(),
        }
    }

    /// 400 Bad Request.
    pub(crate) fn bad_request(body: impl Into<String>) -> Self {
        Self::new(400, body)
    }

    /// 403 Forbidden.
    pub(crate) fn forbidden(body: impl Into<String>) -> Self {
        Self::new(403, body)
    }

    /// 500 Internal Server Error (Consul's answer for most RPC errors).
    pub(crate) fn internal(body: impl Into<String>) -> Self {
        Self::new(500, body)
    }

    /// 500 `No cluster leader`.
    pub(crate) fn no_leader() -> Self {
        Self::internal("No cluster leader")
    }
}
