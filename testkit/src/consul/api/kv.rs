//! `/v1/kv/<key>` endpoints (GET, PUT, DELETE).

use super::super::acl::Authorizer;
use super::super::blocking::{Evaluation, QueryOptions, parse_query_options};
use super::super::error::ApiError;
use super::super::json::DirEntryJson;
use super::super::notify::Topic;
use super::super::query::{Query, parse_uint};
use super::super::state::KvEntry;
use super::ctx::{BodyError, Ctx};
use super::response::{Resp, json_response, response, set_filtered, set_header, set_meta};

/// Where the 413 text points (`kv_max_value_size`).
const MAX_VALUE_SIZE_DOCS: &str =
    "https://developer.hashicorp.com/docs/agent/config/config-files#kv_max_value_size";

fn missing_key() -> ApiError {
    ApiError::bad_request("Missing key name")
}

/// Keys that Go's path cleaning would redirect, or that modern Consul rejects as path
/// traversal, get a 400 (a documented deviation): a leading `/`, an empty segment
/// (`//`), or a `.`/`..` segment.
fn validate_key(key: &str) -> Result<(), ApiError> {
    let bad = key.starts_with('/')
        || key.contains("//")
        || key
            .split('/')
            .any(|segment| segment == "." || segment == "..");
    if bad {
        Err(ApiError::bad_request(format!(
            "Invalid key name {}: a leading '/', '//' and '.' or '..' segments are not allowed",
            super::super::query::go_quote(key)
        )))
    } else {
        Ok(())
    }
}

/// Consul's `conflictingFlags`: at most one of `flags` may be present.
fn conflicting_flags(query: &Query, flags: &[&str]) -> Result<(), ApiError> {
    if flags.iter().filter(|f| query.has(f)).count() > 1 {
        Err(ApiError::bad_request(format!(
            "Conflicting flags: {}",
            query.encode()
        )))
    } else {
        Ok(())
    }
}

/// A numeric query parameter parsed with `strconv.ParseUint` (500 with Go's text).
fn uint_param(query: &Query, name: &str) -> Result<Option<u64>, ApiError> {
    query
        .get(name)
        .map(|v| parse_uint(v).map_err(ApiError::internal))
        .transpose()
}

/// `GET /v1/kv/<key>` with `?recurse`, `?keys`, `?raw` and blocking.
pub(super) async fn get(ctx: Ctx, key: &str) -> Result<Resp, ApiError> {
    let opts = parse_query_options(&ctx.query)?;
    if ctx.query.has("keys") {
        return keys(ctx, key, &opts).await;
    }
    let recurse = ctx.query.has("recurse");
    if !recurse && key.is_empty() {
        return Err(missing_key());
    }
    if !key.is_empty() {
        validate_key(key)?;
    }
    ctx.check_placement()?;
    ctx.require_leader(opts.stale)?;
    let authz = ctx.authorizer()?;
    if recurse {
        return list(ctx, key, &opts, &authz).await;
    }
    authz.require_key_read(key)?;
    let (index, (entry, leader)) = ctx
        .inner
        .blocking_query(&opts, Topic::Key(key.to_string()), |st| {
            let (index, entry) = st.kv_get(key);
            Ok(Evaluation {
                index,
                not_found: entry.is_none(),
                value: (entry.cloned(), st.has_leader()),
            })
        })
        .await?;
    let mut resp = match entry {
        None => response(404, Vec::new()),
        Some(entry) if ctx.query.has("raw") => {
            let mut resp = response(200, entry.value);
            set_header(&mut resp, "Content-Type", "text/plain");
            set_header(&mut resp, "X-Content-Type-Options", "nosniff");
            set_header(&mut resp, "Content-Security-Policy", "sandbox");
            resp
        }
        Some(entry) => json_response(&[DirEntryJson::from(&entry)], ctx.pretty),
    };
    set_meta(&mut resp, index, leader);
    Ok(resp)
}

/// Entries readable by the token, and whether ACLs hid some.
struct Listed<T> {
    items: Vec<T>,
    filtered: bool,
    leader: bool,
}

impl<T> Listed<T> {
    /// The items of `all` that pass `readable` (the token's ACL check); `leader`: whether
    /// the state has a leader.
    fn readable(
        all: impl ExactSizeIterator<Item = T>,
        readable: impl Fn(&T) -> bool,
        leader: bool,
    ) -> Self {
        let total = all.len();
        let items: Vec<T> = all.filter(|item| readable(item)).collect();
        Listed {
            filtered: items.len() < total,
            items,
            leader,
        }
    }
}

async fn list(
    ctx: Ctx,
    prefix: &str,
    opts: &QueryOptions,
    authz: &Authorizer,
) -> Result<Resp, ApiError> {
    let (index, listed) = ctx
        .inner
        .blocking_query(opts, Topic::Kv, |st| {
            let (index, entries) = st.kv_list(prefix);
            Ok(Evaluation {
                index,
                not_found: false,
                value: Listed::readable(
                    entries.into_iter().cloned(),
                    |e: &KvEntry| authz.can_read_key(&e.key),
                    st.has_leader(),
                ),
            })
        })
        .await?;
    let mut resp = if listed.items.is_empty() {
        response(404, Vec::new())
    } else {
        let body: Vec<DirEntryJson<'_>> = listed.items.iter().map(DirEntryJson::from).collect();
        json_response(&body, ctx.pretty)
    };
    set_meta(&mut resp, index, listed.leader);
    set_filtered(&mut resp, authz, listed.filtered);
    Ok(resp)
}

async fn keys(ctx: Ctx, prefix: &str, opts: &QueryOptions) -> Result<Resp, ApiError> {
    if !prefix.is_empty() {
        validate_key(prefix)?;
    }
    // The historic misspelling is accepted; the correct spelling wins.
    let separator = ctx
        .query
        .get("separator")
        .or_else(|| ctx.query.get("seperator"))
        .unwrap_or("")
        .to_string();
    ctx.check_placement()?;
    ctx.require_leader(opts.stale)?;
    let authz = ctx.authorizer()?;
    let (index, listed) = ctx
        .inner
        .blocking_query(opts, Topic::Kv, |st| {
            let (index, keys) = st.kv_keys(prefix, &separator);
            Ok(Evaluation {
                index,
                not_found: false,
                value: Listed::readable(
                    keys.into_iter(),
                    |k: &String| authz.can_read_key(k),
                    st.has_leader(),
                ),
            })
        })
        .await?;
    let mut resp = if listed.items.is_empty() && !prefix.is_empty() {
        response(404, Vec::new())
    } else {
        json_response(&listed.items, ctx.pretty)
    };
    set_meta(&mut resp, index, listed.leader);
    set_filtered(&mut resp, &authz, listed.filtered);
    Ok(resp)
}

/// The write a PUT performs.
enum PutOp {
    Set,
    Cas(u64),
    Acquire(String),
    Release(String),
}

/// `PUT /v1/kv/<key>` with `?flags`, `?cas`, `?acquire`, `?release`.
pub(super) async fn put(mut ctx: Ctx, key: &str) -> Result<Resp, ApiError> {
    parse_query_options(&ctx.query)?;
    if key.is_empty() {
        return Err(missing_key());
    }
    validate_key(key)?;
    conflicting_flags(&ctx.query, &["cas", "acquire", "release"])?;
    let flags = uint_param(&ctx.query, "flags")?.unwrap_or(0);
    let op = if let Some(cas) = uint_param(&ctx.query, "cas")? {
        PutOp::Cas(cas)
    } else if ctx.query.has("acquire") {
        PutOp::Acquire(ctx.query.get("acquire").unwrap_or("").to_string())
    } else if ctx.query.has("release") {
        PutOp::Release(ctx.query.get("release").unwrap_or("").to_string())
    } else {
        PutOp::Set
    };
    let max = ctx.inner.config.max_value_size;
    let too_large = |n: u64| {
        ApiError::new(
            413,
            format!(
                "Request body({n} bytes) too large, max size: {max} bytes. See {MAX_VALUE_SIZE_DOCS}."
            ),
        )
    };
    if let Some(len) = ctx.content_length()
        && len > max as u64
    {
        return Err(too_large(len));
    }
    let value = match ctx.read_body(max).await {
        Ok(body) => body.to_vec(),
        Err(BodyError::TooLarge(n)) => return Err(too_large(n as u64)),
        Err(BodyError::Broken) => return Err(ApiError::bad_request("body read error")),
    };
    ctx.check_placement()?;
    ctx.require_leader(false)?;
    let authz = ctx.authorizer()?;
    authz.require_key_write(key)?;
    let result = ctx.inner.with_state(|st, now| match op {
        PutOp::Set => Ok(st.kv_set(key, value, flags)),
        PutOp::Cas(cas) => Ok(st.kv_cas(key, value, flags, cas)),
        PutOp::Acquire(session) => st.kv_acquire(key, &session, value, flags, now),
        PutOp::Release(session) => st.kv_release(key, &session, value, flags),
    })?;
    Ok(json_response(&result, ctx.pretty))
}

/// `DELETE /v1/kv/<key>` with `?recurse` or `?cas`.
pub(super) async fn delete(ctx: Ctx, key: &str) -> Result<Resp, ApiError> {
    parse_query_options(&ctx.query)?;
    conflicting_flags(&ctx.query, &["recurse", "cas"])?;
    let recurse = ctx.query.has("recurse");
    if !recurse && key.is_empty() {
        return Err(missing_key());
    }
    if !key.is_empty() {
        validate_key(key)?;
    }
    let cas = uint_param(&ctx.query, "cas")?;
    ctx.check_placement()?;
    ctx.require_leader(false)?;
    let authz = ctx.authorizer()?;
    authz.require_key_write(key)?;
    let result = ctx.inner.with_state(|st, _| match (recurse, cas) {
        (true, _) => st.kv_delete_tree(key),
        (false, Some(cas)) => st.kv_delete_cas(key, cas),
        (false, None) => st.kv_delete(key),
    });
    Ok(json_response(&result, ctx.pretty))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_validation() {
        for ok in ["a", "a/b", "a/b/", "a.b/..c", "svc/leader", "x..y"] {
            assert!(validate_key(ok).is_ok(), "{ok}");
        }
        for bad in ["/a", "a//b", "a/../b", "..", "a/.", "./a"] {
            assert_eq!(validate_key(bad).map_err(|e| e.status), Err(400), "{bad}");
        }
    }

    #[test]
    fn conflicting_flags_text() {
        let q = Query::parse(Some("acquire=abc&cas=5"));
        assert_eq!(
            conflicting_flags(&q, &["cas", "acquire", "release"])
                .unwrap_err()
                .body,
            "Conflicting flags: acquire=abc&cas=5"
        );
        let q = Query::parse(Some("recurse&cas=1"));
        assert_eq!(
            conflicting_flags(&q, &["recurse", "cas"]).unwrap_err().body,
            "Conflicting flags: cas=1&recurse="
        );
        assert!(
            conflicting_flags(&Query::parse(Some("cas=1&flags=2")), &["cas", "acquire"]).is_ok()
        );
    }
}
