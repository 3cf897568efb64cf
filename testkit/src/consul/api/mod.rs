//! HTTP request handling: faults and stats, routing, method checks, and the response
//! conventions shared by every endpoint (plain-text errors, JSON bodies, meta headers).

mod admin;
mod ctx;
mod kv;
mod response;
mod session;

use std::sync::Arc;

use bytes::Bytes;
use http::{Method, Request};
use hyper::body::Incoming;

use super::acl::request_token;
use super::error::ApiError;
use super::faults::FaultAction;
use super::inner::Inner;
use super::mutex::lock;
use super::query::{Query, decode_path};
use super::routes::Route;
use super::version::EMULATED_VERSION;
use ctx::Ctx;
use response::{Resp, json_response, response, set_header, text};

/// Returned by the service to make hyper close the connection without answering.
#[derive(Debug)]
pub(crate) struct DropConnection;

impl std::fmt::Display for DropConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("connection dropped by fault injection")
    }
}

impl std::error::Error for DropConnection {}

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
/// ([`EMULATED_VERSION`]).
fn agent_self(ctx: &Ctx) -> Resp {
    let config = &ctx.inner.config;
    let body = serde_json::json!({
        "Config": {
            "Datacenter": config.datacenter,
            "NodeName": config.node_name,
            "Server": true,
            "Version": EMULATED_VERSION,
        },
    });
    json_response(&body, ctx.pretty)
}
