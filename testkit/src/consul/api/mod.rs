//! HTTP request handling: faults and stats, routing, method checks, and the response
//! conventions shared by every endpoint (plain-text errors, JSON bodies, meta headers).

mod admin;
mod kv;
mod session;

use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt as _, Full, Limited};
use hyper::body::Incoming;
use serde::Serialize;

use super::acl::{Authorizer, request_token};
use super::error::ApiError;
use super::faults::FaultAction;
use super::json;
use super::lock;
use super::query::{Query, decode_path};
use super::routes::Route;
use super::server::{DropConnection, Inner};

/// The response type of every handler.
pub(crate) type Resp = Response<Full<Bytes>>;

/// Largest body accepted on endpoints without a configured limit (session create).
const DEFAULT_BODY_LIMIT: usize = 16 * 1024 * 1024;

/// Builds a response with a status and body.
fn response(status: u16, body: impl Into<Bytes>) -> Resp {
    let mut resp = Response::new(Full::new(body.into()));
    *resp.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    resp
}

/// Sets a header, skipping values that are not valid header text.
fn set_header(resp: &mut Resp, name: &'static str, value: &str) {
    if let Ok(v) = HeaderValue::from_str(value) {
        resp.headers_mut().insert(name, v);
    }
}

/// A plain-text answer (Go's `text/plain; charset=utf-8` for non-empty bodies).
fn text(status: u16, body: impl Into<String>) -> Resp {
    let body = body.into();
    let empty = body.is_empty();
    let mut resp = response(status, body);
    if !empty {
        set_header(&mut resp, "Content-Type", "text/plain; charset=utf-8");
    }
    resp
}

/// A 200 JSON answer.
fn json_response<T: Serialize + ?Sized>(value: &T, pretty: bool) -> Resp {
    let mut resp = response(200, json::to_bytes(value, pretty));
    set_header(&mut resp, "Content-Type", "application/json");
    resp
}

/// Consul's read meta headers (`setMeta`).
fn set_meta(resp: &mut Resp, index: u64, known_leader: bool) {
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
fn set_filtered(resp: &mut Resp, authz: &Authorizer, filtered: bool) {
    if filtered && authz.reports_filtering() {
        set_header(resp, "X-Consul-Results-Filtered-By-ACLs", "true");
    }
}

impl From<ApiError> for Resp {
    fn from(e: ApiError) -> Self {
        text(e.status, e.body)
    }
}

/// Why a body could not be read.
enum BodyError {
    /// More than the limit; carries the number of bytes seen.
    TooLarge(usize),
    /// The client went away or sent a malformed body.
    Broken,
}

/// One request as the endpoint handlers see it.
pub(crate) struct Ctx {
    inner: Arc<Inner>,
    query: Query,
    headers: HeaderMap,
    body: Option<Incoming>,
    pretty: bool,
}

impl Ctx {
    /// 500 `No path to datacenter` for a `?dc=` other than the configured one.
    fn check_dc(&self) -> Result<(), ApiError> {
        match self.query.get("dc") {
            Some(dc) if !dc.is_empty() && dc != self.inner.config.datacenter => {
                Err(ApiError::internal("No path to datacenter"))
            }
            _ => Ok(()),
        }
    }

    /// 500 `No cluster leader` unless a leader exists or the read allows stale answers.
    fn require_leader(&self, stale: bool) -> Result<(), ApiError> {
        if stale || self.inner.with_state(|st, _| st.has_leader()) {
            Ok(())
        } else {
            Err(ApiError::no_leader())
        }
    }

    /// Resolves the request's token (403 `ACL not found` when unknown).
    fn authorizer(&self) -> Result<Authorizer, ApiError> {
        let token = request_token(&self.query, &self.headers);
        Authorizer::resolve(self.inner.config.acl.as_ref(), token.as_deref())
    }

    /// The `Content-Length` header, if present and numeric.
    fn content_length(&self) -> Option<u64> {
        self.headers
            .get(http::header::CONTENT_LENGTH)?
            .to_str()
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    /// Reads the whole body, refusing more than `limit` bytes.
    async fn read_body(&mut self, limit: usize) -> Result<Bytes, BodyError> {
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

/// Entry point of the hyper service.
pub(crate) async fn handle(
    inner: Arc<Inner>,
    req: Request<Incoming>,
) -> Result<Resp, DropConnection> {
    let (parts, body) = req.into_parts();
    let default_policy = if inner.config.acl.is_some() {
        "deny"
    } else {
        "allow"
    };
    let query = Query::parse(parts.uri.query());
    let mut resp = match decode_path(parts.uri.path()) {
        Err(e) => text(400, e),
        Ok(path) => {
            let route = Route::classify(&path);
            let ctx = Ctx {
                inner: inner.clone(),
                pretty: query.has("pretty"),
                query,
                headers: parts.headers,
                body: Some(body),
            };
            if let Route::Admin(rest) = &route {
                admin::handle(ctx, &parts.method, rest).await
            } else {
                tracing::debug!(method = %parts.method, uri = %parts.uri, "request");
                serve_api(ctx, route, &parts.method, parts.uri.query()).await?
            }
        }
    };
    set_header(&mut resp, "X-Consul-Default-ACL-Policy", default_policy);
    Ok(resp)
}

/// Counts the request, applies faults, checks the method, then runs the endpoint.
async fn serve_api(
    ctx: Ctx,
    route: Route,
    method: &Method,
    raw_query: Option<&str>,
) -> Result<Resp, DropConnection> {
    let token = request_token(&ctx.query, &ctx.headers);
    let _in_flight = ctx.inner.stats.begin_request(
        route.stats_name(method),
        token.as_deref(),
        *method != Method::GET,
    );
    let actions = lock(&ctx.inner.faults).take_matching(&route, method);
    for action in actions {
        match action {
            FaultAction::Latency(d) => tokio::time::sleep(d).await,
            FaultAction::Respond {
                status,
                body,
                retry_after,
            } => {
                let mut resp = text(status, body);
                if let Some(secs) = retry_after {
                    set_header(&mut resp, "Retry-After", &secs.to_string());
                }
                return Ok(resp);
            }
            FaultAction::DropConnection => return Err(DropConnection),
            FaultAction::NoLeaderError => return Ok(ApiError::no_leader().into()),
            FaultAction::EchoToken { status } => {
                return Ok(text(
                    status,
                    format!("denied token {}", token.as_deref().unwrap_or("(none)")),
                ));
            }
        }
    }
    match &route {
        Route::Redirect(location) => {
            let location = match raw_query {
                Some(q) => format!("{location}?{q}"),
                None => location.clone(),
            };
            let mut resp = text(
                301,
                format!("<a href=\"{location}\">Moved Permanently</a>.\n\n"),
            );
            set_header(&mut resp, "Location", &location);
            set_header(&mut resp, "Content-Type", "text/html; charset=utf-8");
            return Ok(resp);
        }
        Route::Unknown | Route::Admin(_) => {
            return Ok(text(
                404,
                "Invalid URL path: not a recognized HTTP API endpoint",
            ));
        }
        _ => {}
    }
    if method == Method::OPTIONS {
        let mut resp = response(200, Bytes::new());
        set_header(&mut resp, "Allow", &route.allow_header());
        return Ok(resp);
    }
    if !route.methods().contains(method) {
        let mut resp = text(405, format!("method {method} not allowed"));
        set_header(&mut resp, "Allow", &route.allow_header());
        return Ok(resp);
    }
    let result = match route {
        Route::SessionCreate => session::create(ctx).await,
        Route::SessionDestroy(id) => session::destroy(ctx, &id).await,
        Route::SessionRenew(id) => session::renew(ctx, &id).await,
        Route::SessionInfo(id) => session::info(ctx, &id).await,
        Route::SessionList => session::list(ctx, None).await,
        Route::SessionNode(node) => session::list(ctx, Some(&node)).await,
        Route::Kv(key) => match *method {
            Method::GET => kv::get(ctx, &key).await,
            Method::PUT => kv::put(ctx, &key).await,
            _ => kv::delete(ctx, &key).await,
        },
        Route::StatusLeader => Ok(status_leader(&ctx)),
        Route::AgentSelf => Ok(agent_self(&ctx)),
        Route::Redirect(_) | Route::Admin(_) | Route::Unknown => Err(ApiError::new(
            404,
            "Invalid URL path: not a recognized HTTP API endpoint",
        )),
    };
    Ok(result.unwrap_or_else(Resp::from))
}

/// `GET /v1/status/leader`: the leader's RPC address, or `""` without a leader.
fn status_leader(ctx: &Ctx) -> Resp {
    let leader = ctx.inner.with_state(|st, _| st.has_leader());
    let addr = if leader { "127.0.0.1:8300" } else { "" };
    json_response(addr, ctx.pretty)
}

/// `GET /v1/agent/self`, reduced to the `Config` fields clients read: the datacenter, the
/// node name, that the agent is a server, and the Consul version the emulator follows
/// ([`EMULATED_VERSION`](super::EMULATED_VERSION)).
fn agent_self(ctx: &Ctx) -> Resp {
    let config = &ctx.inner.config;
    let body = serde_json::json!({
        "Config": {
            "Datacenter": config.datacenter,
            "NodeName": config.node_name,
            "Server": true,
            "Version": super::EMULATED_VERSION,
        },
    });
    json_response(&body, ctx.pretty)
}
