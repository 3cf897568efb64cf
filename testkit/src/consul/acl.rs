//! A small ACL model: per-token key-prefix and session permissions, with Consul's
//! token sources and error texts.

use std::collections::HashMap;

use super::error::ApiError;
use super::query::Query;

/// ACL configuration: known tokens (secret → policy) and the anonymous policy used when a
/// request carries no token.
#[derive(Debug, Clone, Default)]
pub struct AclConfig {
    /// Secret token → its policy. A token not in this map gets 403 `ACL not found`.
    pub tokens: HashMap<String, AclPolicy>,
    /// Policy of requests that carry no token.
    pub anonymous: AclPolicy,
}

/// What a token may do. Key rules are prefixes (`""` = every key); write implies read.
#[derive(Debug, Clone, Default)]
pub struct AclPolicy {
    /// Prefixes readable with `key:read`.
    pub key_read: Vec<String>,
    /// Prefixes writable with `key:write` (also readable).
    pub key_write: Vec<String>,
    /// `session:write` on every node (also grants `session:read`).
    pub session_write: bool,
    /// `session:read` on every node.
    pub session_read: bool,
}

/// The AccessorID Consul reports for the anonymous token.
const ANONYMOUS_ACCESSOR: &str = "00000000-0000-0000-0000-000000000002";

/// The authority a request runs with.
#[derive(Debug, Clone)]
pub(crate) enum Authorizer {
    /// ACLs are disabled: everything is allowed.
    AllowAll,
    /// ACLs are enabled and the request resolved to this policy.
    Policy {
        policy: AclPolicy,
        accessor: String,
        /// Whether the request carried a token (for `X-Consul-Results-Filtered-By-ACLs`).
        token_given: bool,
    },
}

/// The token of a request: `?token=`, then `X-Consul-Token`, then `Authorization: Bearer`.
/// Empty values are skipped, like Consul does.
pub(crate) fn request_token(query: &Query, headers: &http::HeaderMap) -> Option<String> {
    if let Some(t) = query.get("token").filter(|t| !t.is_empty()) {
        return Some(t.to_string());
    }
    if let Some(t) = headers
        .get("X-Consul-Token")
        .and_then(|v| v.to_str().ok())
        .filter(|t| !t.is_empty())
    {
        return Some(t.to_string());
    }
    let auth = headers.get(http::header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, rest) = auth.trim().split_once(' ')?;
    let token = rest.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then(|| token.to_string())
}

/// A stable, non-secret AccessorID derived from a secret (two FNV-1a passes as a UUID).
fn accessor_for(secret: &str) -> String {
    let hash = |seed: u64| {
        secret.bytes().fold(seed, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
        })
    };
    let a = hash(0xcbf2_9ce4_8422_2325);
    let b = hash(0x84222325_cbf29ce4);
    let hex = format!("{a:016x}{b:016x}");
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

impl Authorizer {
    /// Resolves a request's token against the configuration (403 `ACL not found` for an
    /// unknown token).
    pub(crate) fn resolve(acl: Option<&AclConfig>, token: Option<&str>) -> Result<Self, ApiError> {
        let Some(acl) = acl else {
            return Ok(Authorizer::AllowAll);
        };
        match token {
            None => Ok(Authorizer::Policy {
                policy: acl.anonymous.clone(),
                accessor: ANONYMOUS_ACCESSOR.to_string(),
                token_given: false,
            }),
            Some(t) => match acl.tokens.get(t) {
                Some(policy) => Ok(Authorizer::Policy {
                    policy: policy.clone(),
                    accessor: accessor_for(t),
                    token_given: true,
                }),
                None => Err(ApiError::forbidden("ACL not found")),
            },
        }
    }

    fn denied(&self, permission: &str, resource: &str) -> ApiError {
        let accessor = match self {
            Authorizer::AllowAll => ANONYMOUS_ACCESSOR,
            Authorizer::Policy { accessor, .. } => accessor,
        };
        ApiError::forbidden(format!(
            "Permission denied: token with AccessorID '{accessor}' lacks permission '{permission}' on {}",
            super::query::go_quote(resource)
        ))
    }

    /// Whether `key:read` is granted on `key`.
    pub(crate) fn can_read_key(&self, key: &str) -> bool {
        match self {
            Authorizer::AllowAll => true,
            Authorizer::Policy { policy, .. } => policy
                .key_read
                .iter()
                .chain(&policy.key_write)
                .any(|p| key.starts_with(p.as_str())),
        }
    }

    /// Whether `key:write` is granted on `key`.
    pub(crate) fn can_write_key(&self, key: &str) -> bool {
        match self {
            Authorizer::AllowAll => true,
            Authorizer::Policy { policy, .. } => {
                policy.key_write.iter().any(|p| key.starts_with(p.as_str()))
            }
        }
    }

    /// Whether `session:read` is granted (on any node).
    pub(crate) fn can_read_sessions(&self) -> bool {
        match self {
            Authorizer::AllowAll => true,
            Authorizer::Policy { policy, .. } => policy.session_read || policy.session_write,
        }
    }

    /// `key:read` on `key`, or 403.
    pub(crate) fn require_key_read(&self, key: &str) -> Result<(), ApiError> {
        if self.can_read_key(key) {
            Ok(())
        } else {
            Err(self.denied("key:read", key))
        }
    }

    /// `key:write` on `key` (or on every key under it, for a recursive delete), or 403.
    pub(crate) fn require_key_write(&self, key: &str) -> Result<(), ApiError> {
        if self.can_write_key(key) {
            Ok(())
        } else {
            Err(self.denied("key:write", key))
        }
    }

    /// `session:write` on `node`, or 403.
    pub(crate) fn require_session_write(&self, node: &str) -> Result<(), ApiError> {
        match self {
            Authorizer::AllowAll => Ok(()),
            Authorizer::Policy { policy, .. } if policy.session_write => Ok(()),
            Authorizer::Policy { .. } => Err(self.denied("session:write", node)),
        }
    }

    /// Whether filtering that removed something should be reported with
    /// `X-Consul-Results-Filtered-By-ACLs: true` (only when a token was given).
    pub(crate) fn reports_filtering(&self) -> bool {
        matches!(
            self,
            Authorizer::Policy {
                token_given: true,
                ..
            }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> AclConfig {
        let mut tokens = HashMap::new();
        tokens.insert(
            "writer".to_string(),
            AclPolicy {
                key_write: vec!["svc/".to_string()],
                session_write: true,
                ..AclPolicy::default()
            },
        );
        tokens.insert(
            "reader".to_string(),
            AclPolicy {
                key_read: vec![String::new()],
                ..AclPolicy::default()
            },
        );
        AclConfig {
            tokens,
            anonymous: AclPolicy::default(),
        }
    }

    #[test]
    fn resolves_tokens_and_checks_prefixes() {
        let cfg = config();
        assert!(matches!(
            Authorizer::resolve(None, Some("x")),
            Ok(Authorizer::AllowAll)
        ));
        let err = Authorizer::resolve(Some(&cfg), Some("nope")).expect_err("unknown");
        assert_eq!((err.status, err.body.as_str()), (403, "ACL not found"));
        let w = Authorizer::resolve(Some(&cfg), Some("writer")).expect("writer");
        assert!(w.can_write_key("svc/leader"));
        assert!(w.can_read_key("svc/leader"));
        assert!(!w.can_read_key("other"));
        assert!(w.require_session_write("node1").is_ok());
        let denied = w.require_key_write("other/k").expect_err("denied");
        assert!(
            denied
                .body
                .starts_with("Permission denied: token with AccessorID '")
        );
        assert!(
            denied
                .body
                .ends_with("lacks permission 'key:write' on \"other/k\"")
        );
        let r = Authorizer::resolve(Some(&cfg), Some("reader")).expect("reader");
        assert!(r.can_read_key("anything"));
        assert!(!r.can_write_key("anything"));
        assert!(r.reports_filtering());
        let anon = Authorizer::resolve(Some(&cfg), None).expect("anon");
        assert!(!anon.reports_filtering());
        assert!(anon.require_session_write("node1").is_err());
    }

    #[test]
    fn token_sources_in_priority_order() {
        let mut headers = http::HeaderMap::new();
        headers.insert("X-Consul-Token", http::HeaderValue::from_static("hdr"));
        headers.insert(
            http::header::AUTHORIZATION,
            http::HeaderValue::from_static("Bearer bearer"),
        );
        let q = Query::parse(Some("token=qs"));
        assert_eq!(request_token(&q, &headers).as_deref(), Some("qs"));
        let q = Query::parse(Some("token="));
        assert_eq!(request_token(&q, &headers).as_deref(), Some("hdr"));
        headers.remove("X-Consul-Token");
        assert_eq!(request_token(&q, &headers).as_deref(), Some("bearer"));
        headers.remove(http::header::AUTHORIZATION);
        assert_eq!(request_token(&q, &headers), None);
    }
}
