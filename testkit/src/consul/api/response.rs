//! The response conventions shared by every endpoint: plain-text errors, JSON bodies, meta headers.

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode};
use http_body_util::Full;
use serde::Serialize;

use super::super::acl::Authorizer;
use super::super::error::ApiError;
use super::super::json;

/// The response type of every handler.
pub(crate) type Resp = Response<Full<Bytes>>;

/// Builds a response with a status and body.
pub(super) fn response(status: u16, body: impl Into<Bytes>) -> Resp {
    let mut resp = Response::new(Full::new(body.into()));
    *resp.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    resp
}

/// Sets a header, skipping values that are not valid header text.
pub(super) fn set_header(resp: &mut Resp, name: &'static str, value: &str) {
    if let Ok(v) = HeaderValue::from_str(value) {
        resp.headers_mut().insert(name, v);
    }
}

/// A plain-text answer (Go's `text/plain; charset=utf-8` for non-empty bodies).
pub(super) fn text(status: u16, body: impl Into<String>) -> Resp {
    let body = body.into();
    let empty = body.is_empty();
    let mut resp = response(status, body);
    if !empty {
        set_header(&mut resp, "Content-Type", "text/plain; charset=utf-8");
    }
    resp
}

/// A 200 JSON answer.
pub(super) fn json_response<T: Serialize + ?Sized>(value: &T, pretty: bool) -> Resp {
    let mut resp = response(200, json::to_bytes(value, pretty));
    set_header(&mut resp, "Content-Type", "application/json");
    resp
}

/// Consul's read meta headers (`setMeta`).
pub(super) fn set_meta(resp: &mut Resp, index: u64, known_leader: bool) {
    set_header(resp, "X-Consul-Index", &index.max(1).to_string());
    set_header(
        resp,
        "X-Consul-KnownLeader",
        if known_leader { "true" } else { "false" },
    );
    set_header(resp, "X-Consul-LastContact", "0");
    set_header(resp, "X-Consul-Query-Backend", "blocking-query");
}

/// `X-Consul-Results-Filtered-By-ACLs: true` when filtering removed something and a token
/// was given.
pub(super) fn set_filtered(resp: &mut Resp, authz: &Authorizer, filtered: bool) {
    if filtered && authz.reports_filtering() {
        set_header(resp, "X-Consul-Results-Filtered-By-ACLs", "true");
    }
}

impl From<ApiError> for Resp {
    fn from(e: ApiError) -> Self {
        text(e.status, e.body)
    }
}
