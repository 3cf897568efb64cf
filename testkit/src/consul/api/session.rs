//! `/v1/session/*` endpoints.

use std::time::Duration;

use serde::Serialize;

use super::super::blocking::{Evaluation, QueryOptions, parse_query_options};
use super::super::error::ApiError;
use super::super::json::SessionJson;
use super::super::notify::Topic;
use super::super::session_request::decode_session_create;
use super::super::state::{Session, State};
use super::ctx::{BodyError, Ctx, DEFAULT_BODY_LIMIT};
use super::response::{Resp, json_response, set_filtered, set_meta};

#[derive(Serialize)]
struct CreatedJson {
    #[serde(rename = "ID")]
    id: String,
}

/// `PUT /v1/session/create`.
pub(super) async fn create(mut ctx: Ctx) -> Result<Resp, ApiError> {
    let body = match ctx.read_body(DEFAULT_BODY_LIMIT).await {
        Ok(body) => body,
        Err(BodyError::TooLarge(n)) => {
            return Err(ApiError::new(
                413,
                format!("Request body({n} bytes) too large"),
            ));
        }
        Err(BodyError::Broken) => {
            return Err(ApiError::bad_request(
                "Request decode failed: body read error",
            ));
        }
    };
    let spec = decode_session_create(&body, &ctx.inner.config.node_name)?;
    ctx.check_placement()?;
    ctx.require_leader(false)?;
    if spec.node.is_empty() {
        return Err(ApiError::internal("Must provide Node"));
    }
    let authz = ctx.authorizer()?;
    authz.require_session_write(&spec.node)?;
    let id = uuid::Uuid::new_v4().to_string();
    ctx.inner
        .with_state(|st, now| st.create_session(spec, id.clone(), now))?;
    Ok(json_response(&CreatedJson { id }, ctx.pretty))
}

fn require_id(id: &str) -> Result<(), ApiError> {
    if id.is_empty() {
        Err(ApiError::bad_request("Missing session"))
    } else {
        Ok(())
    }
}

/// Runs `change` on the state for session `id` after the checks of a session write (the ID,
/// the datacenter, a leader, `session:write` on the session's node); `None`, without running
/// it, when the session does not exist.
fn write_session<T>(
    ctx: &Ctx,
    id: &str,
    change: impl FnOnce(&mut State, Duration) -> T,
) -> Result<Option<T>, ApiError> {
    require_id(id)?;
    ctx.check_placement()?;
    ctx.require_leader(false)?;
    let authz = ctx.authorizer()?;
    ctx.inner.with_state(|st, now| {
        let Some(node) = st.session(id).map(|s| s.node.clone()) else {
            return Ok(None);
        };
        authz.require_session_write(&node)?;
        Ok(Some(change(st, now)))
    })
}

/// `PUT /v1/session/destroy/<id>`: idempotent `true`.
pub(super) async fn destroy(ctx: Ctx, id: &str) -> Result<Resp, ApiError> {
    write_session(&ctx, id, |st, now| st.destroy_session(id, now))?;
    Ok(json_response(&true, ctx.pretty))
}

/// `PUT /v1/session/renew/<id>`: resets the TTL timer, `[session]` or 404.
pub(super) async fn renew(ctx: Ctx, id: &str) -> Result<Resp, ApiError> {
    match write_session(&ctx, id, |st, now| st.renew_session(id, now))?.flatten() {
        Some(session) => Ok(json_response(&[SessionJson::from(&session)], ctx.pretty)),
        None => Err(ApiError::new(404, format!("Session id '{id}' not found"))),
    }
}

/// Which sessions a read returns.
#[derive(Clone, Copy)]
enum Selection<'q> {
    /// `info/<id>`: that session; "not found" when it does not exist.
    Id(&'q str),
    /// `list` (`None`) and `node/<node>`: every session, or those of the node.
    Node(Option<&'q str>),
}

/// Result of a session read: visible sessions, whether ACLs hid some, leader presence.
struct SessionsRead {
    sessions: Vec<Session>,
    filtered: bool,
    leader: bool,
}

/// Answers a (blocking) read of the sessions `selection` picks, indexed by the sessions
/// table: all of them when the token may read sessions, none otherwise.
async fn read_sessions(
    ctx: Ctx,
    opts: &QueryOptions,
    selection: Selection<'_>,
) -> Result<Resp, ApiError> {
    ctx.check_placement()?;
    ctx.require_leader(opts.stale)?;
    let authz = ctx.authorizer()?;
    let can_read = authz.can_read_sessions();
    let (index, read) = ctx
        .inner
        .blocking_query(opts, Topic::Sessions, |st| {
            let matching: Vec<&Session> = match selection {
                Selection::Id(id) => st.session(id).into_iter().collect(),
                Selection::Node(node) => st
                    .sessions()
                    .filter(|s| node.is_none_or(|n| s.node == n))
                    .collect(),
            };
            let visible: Vec<Session> = if can_read {
                matching.iter().map(|s| (*s).clone()).collect()
            } else {
                Vec::new()
            };
            Ok(Evaluation {
                index: st.indexes().sessions,
                not_found: matches!(selection, Selection::Id(_)) && matching.is_empty(),
                value: SessionsRead {
                    filtered: visible.len() < matching.len(),
                    sessions: visible,
                    leader: st.has_leader(),
                },
            })
        })
        .await?;
    let body: Vec<SessionJson<'_>> = read.sessions.iter().map(SessionJson::from).collect();
    let mut resp = json_response(&body, ctx.pretty);
    set_meta(&mut resp, index, read.leader);
    set_filtered(&mut resp, &authz, read.filtered);
    Ok(resp)
}

/// `GET /v1/session/info/<id>`: `[session]` or `[]`, index = sessions table.
pub(super) async fn info(ctx: Ctx, id: &str) -> Result<Resp, ApiError> {
    let opts = parse_query_options(&ctx.query)?;
    require_id(id)?;
    read_sessions(ctx, &opts, Selection::Id(id)).await
}

/// `GET /v1/session/list` and `GET /v1/session/node/<node>`: sorted by ID.
pub(super) async fn list(ctx: Ctx, node: Option<&str>) -> Result<Resp, ApiError> {
    let opts = parse_query_options(&ctx.query)?;
    if node == Some("") {
        return Err(ApiError::bad_request("Missing node name"));
    }
    read_sessions(ctx, &opts, Selection::Node(node)).await
}
