//! [`Ctx`]: one request as the endpoint handlers see it, and the reading of its body.

use std::sync::Arc;

use bytes::Bytes;
use http::HeaderMap;
use http_body_util::{BodyExt as _, Limited};
use hyper::body::Incoming;

use super::super::acl::{Authorizer, request_token};
use super::super::error::ApiError;
use super::super::inner::Inner;
use super::super::query::Query;

/// Largest body accepted on endpoints without a configured limit (session create).
pub(super) const DEFAULT_BODY_LIMIT: usize = 16 * 1024 * 1024;

/// Why a body could not be read.
pub(super) enum BodyError {
    /// More than the limit; carries the number of bytes seen.
    TooLarge(usize),
    /// The client went away or sent a malformed body.
    Broken,
}

/// One request as the endpoint handlers see it.
pub(crate) struct Ctx {
    pub(super) inner: Arc<Inner>,
    pub(super) query: Query,
    pub(super) headers: HeaderMap,
    pub(super) body: Option<Incoming>,
    pub(super) pretty: bool,
}

impl Ctx {
    /// 500 `No path to datacenter` for a `?dc=` other than the configured one; then, as
    /// Consul CE answers a request naming an Enterprise namespace or admin partition (even
    /// `default`), 400.
    pub(super) fn check_placement(&self) -> Result<(), ApiError> {
        if let Some(dc) = self.query.get("dc")
            && !dc.is_empty()
            && dc != self.inner.config.datacenter
        {
            return Err(ApiError::internal("No path to datacenter"));
        }
        let enterprise = [("ns", "Namespaces"), ("partition", "Partitions")];
        for (parameter, feature) in enterprise {
            if self
                .query
                .get(parameter)
                .is_some_and(|value| !value.is_empty())
            {
                return Err(ApiError::bad_request(format!(
                    "Invalid query parameter: \"{parameter}\" - {feature} are a Consul Enterprise feature"
                )));
            }
        }
        Ok(())
    }

    /// 500 `No cluster leader` unless a leader exists or the read allows stale answers.
    pub(super) fn require_leader(&self, stale: bool) -> Result<(), ApiError> {
        if stale || self.inner.with_state(|st, _| st.has_leader()) {
            Ok(())
        } else {
            Err(ApiError::no_leader())
        }
    }

    /// Resolves the request's token (403 `ACL not found` when unknown).
    pub(super) fn authorizer(&self) -> Result<Authorizer, ApiError> {
        let token = request_token(&self.query, &self.headers);
        Authorizer::resolve(self.inner.config.acl.as_ref(), token.as_deref())
    }

    /// The `Content-Length` header, if present and numeric.
    pub(super) fn content_length(&self) -> Option<u64> {
        self.headers
            .get(http::header::CONTENT_LENGTH)?
            .to_str()
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    /// Reads the whole body, refusing more than `limit` bytes.
    pub(super) async fn read_body(&mut self, limit: usize) -> Result<Bytes, BodyError> {
        let Some(body) = self.body.take() else {
            return Ok(Bytes::new());
        };
        // Read a little past the limit so the 413 can report a size beyond it.
        let hard_limit = limit.saturating_add(DEFAULT_BODY_LIMIT);
        match Limited::new(body, hard_limit).collect().await {
            Ok(collected) => {
                let bytes = collected.to_bytes();
                if bytes.len() > limit {
                    Err(BodyError::TooLarge(bytes.len()))
                } else {
                    Ok(bytes)
                }
            }
            Err(e) if e.is::<http_body_util::LengthLimitError>() => {
                Err(BodyError::TooLarge(hard_limit.saturating_add(1)))
            }
            Err(_) => Err(BodyError::Broken),
        }
    }
}
