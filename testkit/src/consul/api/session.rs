//! `/v1/session/*` endpoints.

use serde::Serialize;

use super::super::blocking::{Evaluation, parse_query_options};
use super::super::error::ApiError;
use super::super::json::SessionJson;
use super::super::notify::Topic;
use super::super::session_request::decode_session_create;
use super::super::state::Session;
use super::{BodyError, Ctx, DEFAULT_BODY_LIMIT, Resp, json_response, set_filtered, set_meta};

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
    ctx.check_dc()?;
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

/// `PUT /v1/session/destroy/<id>`: idempotent `true`.
pub(super) async fn destroy(ctx: Ctx, id: &str) -> Result<Resp, ApiError> {
    require_id(id)?;
    ctx.check_dc()?;
    ctx.require_leader(false)?;
    let authz = ctx.authorizer()?;
    ctx.inner.with_state(|st, now| {
        let Some(node) = st.session(id).map(|s| s.node.clone()) else {
            return Ok(());
        };
        authz.require_session_write(&node)?;
        st.destroy_session(id, now);
        Ok(())
    })?;
    Ok(json_response(&true, ctx.pretty))
}

/// `PUT /v1/session/renew/<id>`: resets the TTL timer, `[session]` or 404.
pub(super) async fn renew(ctx: Ctx, id: &str) -> Result<Resp, ApiError> {
    require_id(id)?;
    ctx.check_dc()?;
    ctx.require_leader(false)?;
    let authz = ctx.authorizer()?;
    let renewed = ctx.inner.with_state(|st, now| {
        let Some(node) = st.session(id).map(|s| s.node.clone()) else {
            return Ok(None);
        };
        authz.require_session_write(&node)?;
        Ok(st.renew_session(id, now))
    })?;
    match renewed {
        Some(session) => Ok(json_response(&[SessionJson::from(&session)], ctx.pretty)),
        None => Err(ApiError::new(404, format!("Session id '{id}' not found"))),
    }
}

/// Result of a session read: visible sessions, whether ACLs hid some, leader presence.
struct SessionsRead {
    sessions: Vec<Session>,
    filtered: bool,
    leader: bool,
}

fn sessions_response(ctx: &Ctx, index: u64, read: &SessionsRead) -> Resp {
    let body: Vec<SessionJson<'_>> = read.sessions.iter().map(SessionJson::from).collect();
    let mut resp = json_response(&body, ctx.pretty);
    set_meta(&mut resp, index, read.leader);
    resp
}

/// `GET /v1/session/info/<id>`: `[session]` or `[]`, index = sessions table.
pub(super) async fn info(ctx: Ctx, id: &str) -> Result<Resp, ApiError> {
    let opts = parse_query_options(&ctx.query)?;
    require_id(id)?;
    ctx.check_dc()?;
    ctx.require_leader(opts.stale)?;
    let authz = ctx.authorizer()?;
    let can_read = authz.can_read_sessions();
    let (index, read) = ctx
        .inner
        .blocking_query(&opts, Topic::Sessions, |st| {
            let found = st.session(id);
            let visible: Vec<Session> = found.filter(|_| can_read).into_iter().cloned().collect();
            Ok(Evaluation {
                index: st.indexes().sessions,
                not_found: found.is_none(),
                value: SessionsRead {
                    filtered: found.is_some() && visible.is_empty(),
                    sessions: visible,
                    leader: st.has_leader(),
                },
            })
        })
        .await?;
    let mut resp = sessions_response(&ctx, index, &read);
    set_filtered(&mut resp, &authz, read.filtered);
    Ok(resp)
}

/// `GET /v1/session/list` and `GET /v1/session/node/<node>`: sorted by ID.
pub(super) async fn list(ctx: Ctx, node: Option<&str>) -> Result<Resp, ApiError> {
    let opts = parse_query_options(&ctx.query)?;
    if node == Some("") {
        return Err(ApiError::bad_request("Missing node name"));
    }
    ctx.check_dc()?;
    ctx.require_leader(opts.stale)?;
    let authz = ctx.authorizer()?;
    let can_read = authz.can_read_sessions();
    let (index, read) = ctx
        .inner
        .blocking_query(&opts, Topic::Sessions, |st| {
            let matching: Vec<&Session> = st
                .sessions()
                .filter(|s| node.is_none_or(|n| s.node == n))
                .collect();
            let visible: Vec<Session> = if can_read {
                matching.iter().map(|s| (*s).clone()).collect()
            } else {
                Vec::new()
            };
            Ok(Evaluation {
                index: st.indexes().sessions,
                not_found: false,
                value: SessionsRead {
                    filtered: visible.len() < matching.len(),
                    sessions: visible,
                    leader: st.has_leader(),
                },
            })
        })
        .await?;
    let mut resp = sessions_response(&ctx, index, &read);
    set_filtered(&mut resp, &authz, read.filtered);
    Ok(resp)
}
