//! What a request is about, derived from its method, path and query the way the API
//! server's `RequestInfoFactory` does it.

use http::Method;

/// The Kubernetes verb of a request, as the API server's authorizer sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Verb {
    /// `GET` of one named object.
    Get,
    /// `GET` of a collection.
    List,
    /// `GET` with `?watch=true` (or the legacy `/watch/` path prefix).
    Watch,
    /// `POST`.
    Create,
    /// `PUT`.
    Update,
    /// `PATCH`.
    Patch,
    /// `DELETE` of one named object.
    Delete,
    /// `DELETE` of a collection.
    DeleteCollection,
}

/// The parsed identity of one API request.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RequestInfo {
    /// `None` for methods the API server has no verb for (`HEAD`, `OPTIONS`, ...).
    pub verb: Option<Verb>,
    /// The resource, with its subresource when there is one: `pods`, `pods/status`.
    /// `None` for non-resource paths such as `/version`.
    pub resource: Option<String>,
    /// The namespace the request is scoped to.
    pub namespace: Option<String>,
    /// The object name, when the path names one.
    pub name: Option<String>,
}

impl RequestInfo {
    /// Parses a request line. `query` is the raw query string without the `?`; kube's
    /// leading `&` and empty pairs are accepted.
    pub fn parse(method: &Method, path: &str, query: Option<&str>) -> RequestInfo {
        let mut parts: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
        let api_prefix_len = match parts.first() {
            Some(&"api") => 2,
            Some(&"apis") => 3,
            _ => return RequestInfo::non_resource(method),
        };
        if parts.len() <= api_prefix_len {
            return RequestInfo::non_resource(method);
        }
        parts.drain(..api_prefix_len);

        let mut watch = query.is_some_and(has_watch_param);
        if parts.first() == Some(&"watch") {
            watch = true;
            parts.remove(0);
        }

        let mut namespace = None;
        if parts.first() == Some(&"namespaces") && parts.len() >= 2 {
            namespace = Some(parts[1].to_string());
            // `/namespaces/<ns>` is the namespace object itself; longer paths are
            // resources inside it.
            if parts.len() > 2 {
                parts.drain(..2);
            }
        }

        let resource = match parts.as_slice() {
            [] => None,
            [resource] | [resource, _] => Some((*resource).to_string()),
            [resource, _, subresource, ..] => Some(format!("{resource}/{subresource}")),
        };
        let name = parts.get(1).map(|n| (*n).to_string());
        RequestInfo {
            verb: verb(method, name.is_some(), watch),
            resource,
            namespace,
            name,
        }
    }

    /// Non-resource paths (`/version`, `/healthz`, discovery) are one document each, so
    /// `GET` is `get`, as in the API server.
    fn non_resource(method: &Method) -> RequestInfo {
        RequestInfo {
            verb: verb(method, true, false),
            ..RequestInfo::default()
        }
    }
}

fn has_watch_param(query: &str) -> bool {
    url::form_urlencoded::parse(query.as_bytes())
        .any(|(key, value)| key == "watch" && (value == "true" || value == "1"))
}

fn verb(method: &Method, named: bool, watch: bool) -> Option<Verb> {
    Some(match *method {
        Method::GET if watch => Verb::Watch,
        Method::GET if named => Verb::Get,
        Method::GET => Verb::List,
        Method::POST => Verb::Create,
        Method::PUT => Verb::Update,
        Method::PATCH => Verb::Patch,
        Method::DELETE if named => Verb::Delete,
        Method::DELETE => Verb::DeleteCollection,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(method: Method, uri: &str) -> RequestInfo {
        let (path, query) = match uri.split_once('?') {
            Some((p, q)) => (p, Some(q)),
            None => (uri, None),
        };
        RequestInfo::parse(&method, path, query)
    }

    fn expect(
        verb: Verb,
        resource: &str,
        namespace: Option<&str>,
        name: Option<&str>,
    ) -> RequestInfo {
        RequestInfo {
            verb: Some(verb),
            resource: Some(resource.to_string()),
            namespace: namespace.map(str::to_string),
            name: name.map(str::to_string),
        }
    }

    #[test]
    fn kube_watch_url_with_leading_ampersand() {
        let got = info(
            Method::GET,
            "/api/v1/namespaces/ns/pods?&watch=true&timeoutSeconds=290&labelSelector=app%3Dprobe&allowWatchBookmarks=true&resourceVersion=12",
        );
        assert_eq!(got, expect(Verb::Watch, "pods", Some("ns"), None));
    }

    #[test]
    fn list_get_and_legacy_watch() {
        assert_eq!(
            info(Method::GET, "/api/v1/namespaces/ns/pods?&limit=500"),
            expect(Verb::List, "pods", Some("ns"), None)
        );
        assert_eq!(
            info(Method::GET, "/api/v1/namespaces/ns/pods/a"),
            expect(Verb::Get, "pods", Some("ns"), Some("a"))
        );
        assert_eq!(
            info(Method::GET, "/api/v1/watch/namespaces/ns/pods/a"),
            expect(Verb::Watch, "pods", Some("ns"), Some("a"))
        );
        assert_eq!(
            info(Method::GET, "/api/v1/pods?watch=1"),
            expect(Verb::Watch, "pods", None, None)
        );
        assert_eq!(
            info(Method::GET, "/api/v1/pods?watch=false"),
            expect(Verb::List, "pods", None, None)
        );
    }

    #[test]
    fn writes_and_subresources() {
        assert_eq!(
            info(
                Method::PATCH,
                "/api/v1/namespaces/ns/pods/a?&fieldManager=m"
            ),
            expect(Verb::Patch, "pods", Some("ns"), Some("a"))
        );
        assert_eq!(
            info(
                Method::PATCH,
                "/apis/elector.dev/v1alpha1/namespaces/ns/leaderelections/web/status?&force=true"
            ),
            expect(
                Verb::Patch,
                "leaderelections/status",
                Some("ns"),
                Some("web")
            )
        );
        assert_eq!(
            info(Method::POST, "/apis/events.k8s.io/v1/namespaces/ns/events?"),
            expect(Verb::Create, "events", Some("ns"), None)
        );
        assert_eq!(
            info(Method::PUT, "/api/v1/namespaces/ns/pods/a/status"),
            expect(Verb::Update, "pods/status", Some("ns"), Some("a"))
        );
        assert_eq!(
            info(Method::DELETE, "/api/v1/namespaces/ns/pods/a"),
            expect(Verb::Delete, "pods", Some("ns"), Some("a"))
        );
        assert_eq!(
            info(Method::DELETE, "/api/v1/namespaces/ns/pods"),
            expect(Verb::DeleteCollection, "pods", Some("ns"), None)
        );
    }

    #[test]
    fn namespace_objects_and_cluster_scoped_resources() {
        assert_eq!(
            info(Method::GET, "/api/v1/namespaces/ns"),
            expect(Verb::Get, "namespaces", Some("ns"), Some("ns"))
        );
        assert_eq!(
            info(Method::GET, "/api/v1/namespaces"),
            expect(Verb::List, "namespaces", None, None)
        );
        assert_eq!(
            info(
                Method::GET,
                "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/x.y"
            ),
            expect(Verb::Get, "customresourcedefinitions", None, Some("x.y"))
        );
    }

    #[test]
    fn non_resource_paths_have_no_resource() {
        for path in ["/version", "/api", "/api/v1", "/apis/apps/v1", "/healthz"] {
            let got = info(Method::GET, path);
            assert_eq!(got.resource, None, "{path}");
            assert_eq!(got.verb, Some(Verb::Get), "{path}");
        }
        assert_eq!(info(Method::HEAD, "/api/v1/pods").verb, None);
    }
}
