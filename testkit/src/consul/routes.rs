//! URL path → endpoint, with the method lists of Consul's `http_register.go`.

use http::Method;

/// A classified request path (already percent-decoded).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Route {
    SessionCreate,
    SessionDestroy(String),
    SessionRenew(String),
    SessionInfo(String),
    SessionList,
    SessionNode(String),
    Kv(String),
    StatusLeader,
    /// `/v1/agent/self`: the agent's configuration (its version, node and datacenter).
    AgentSelf,
    /// A subtree endpoint addressed without its trailing slash: Go's `ServeMux` answers
    /// 301 to the path with the slash.
    Redirect(String),
    /// `/_emu/<rest>`: the emulator's admin surface.
    Admin(String),
    Unknown,
}

/// Builds a route from the rest of the path after its prefix.
type MakeRoute = fn(String) -> Route;

const PREFIXED: &[(&str, MakeRoute)] = &[
    ("/v1/session/destroy/", Route::SessionDestroy),
    ("/v1/session/renew/", Route::SessionRenew),
    ("/v1/session/info/", Route::SessionInfo),
    ("/v1/session/node/", Route::SessionNode),
    ("/v1/kv/", Route::Kv),
    ("/_emu/", Route::Admin),
];

impl Route {
    pub(crate) fn classify(path: &str) -> Route {
        match path {
            "/v1/session/create" => return Route::SessionCreate,
            "/v1/session/list" => return Route::SessionList,
            "/v1/status/leader" => return Route::StatusLeader,
            "/v1/agent/self" => return Route::AgentSelf,
            _ => {}
        }
        for (prefix, make) in PREFIXED {
            if let Some(rest) = path.strip_prefix(prefix) {
                return make(rest.to_string());
            }
            if path == prefix.trim_end_matches('/') {
                return Route::Redirect(prefix.to_string());
            }
        }
        Route::Unknown
    }

    /// Methods the endpoint accepts (besides OPTIONS); empty for non-endpoints.
    pub(crate) fn methods(&self) -> &'static [Method] {
        match self {
            Route::SessionCreate | Route::SessionDestroy(_) | Route::SessionRenew(_) => {
                &[Method::PUT]
            }
            Route::SessionInfo(_) | Route::SessionList | Route::SessionNode(_) => &[Method::GET],
            Route::StatusLeader | Route::AgentSelf => &[Method::GET],
            Route::Kv(_) => &[Method::GET, Method::PUT, Method::DELETE],
            Route::Redirect(_) | Route::Admin(_) | Route::Unknown => &[],
        }
    }

    /// The `Allow` header: `OPTIONS,<methods>`.
    pub(crate) fn allow_header(&self) -> String {
        let mut parts = vec!["OPTIONS"];
        parts.extend(self.methods().iter().map(Method::as_str));
        parts.join(",")
    }

    /// The endpoint name used in [`Stats`](super::Stats).
    pub(crate) fn stats_name(&self, method: &Method) -> &'static str {
        match self {
            Route::SessionCreate => "session.create",
            Route::SessionDestroy(_) => "session.destroy",
            Route::SessionRenew(_) => "session.renew",
            Route::SessionInfo(_) => "session.info",
            Route::SessionList => "session.list",
            Route::SessionNode(_) => "session.node",
            Route::Kv(_) => match *method {
                Method::GET => "kv.get",
                Method::PUT => "kv.put",
                Method::DELETE => "kv.delete",
                _ => "kv.other",
            },
            Route::StatusLeader => "status.leader",
            Route::AgentSelf => "agent.self",
            Route::Redirect(_) | Route::Admin(_) | Route::Unknown => "unknown",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_paths() {
        assert_eq!(Route::classify("/v1/session/create"), Route::SessionCreate);
        assert_eq!(Route::classify("/v1/session/create/x"), Route::Unknown);
        assert_eq!(
            Route::classify("/v1/session/destroy/"),
            Route::SessionDestroy(String::new())
        );
        assert_eq!(Route::classify("/v1/kv/a/b"), Route::Kv("a/b".into()));
        assert_eq!(Route::classify("/v1/kv"), Route::Redirect("/v1/kv/".into()));
        assert_eq!(Route::classify("/v1/nope"), Route::Unknown);
        assert_eq!(Route::classify("/_emu/stats"), Route::Admin("stats".into()));
        assert_eq!(
            Route::Kv(String::new()).allow_header(),
            "OPTIONS,GET,PUT,DELETE"
        );
        assert_eq!(
            Route::SessionRenew(String::new()).allow_header(),
            "OPTIONS,PUT"
        );
    }
}
