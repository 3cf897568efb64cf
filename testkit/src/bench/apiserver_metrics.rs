//! The API server's own request counters: `apiserver_request_total{verb,resource,...}` from
//! `GET /metrics`, scraped before and after a phase.

use std::collections::BTreeMap;

use kube::Client;

/// Verbs that change state (as the 1.20 API server labels them).
const WRITE_VERBS: [&str; 6] = [
    "POST",
    "PUT",
    "PATCH",
    "DELETE",
    "DELETECOLLECTION",
    "APPLY",
];

/// Requests per `(verb, resource[/subresource])`.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct RequestCounts(pub(crate) BTreeMap<(String, String), f64>);

impl RequestCounts {
    /// Parses the Prometheus text format, summing `apiserver_request_total` over the labels
    /// other than verb, resource and subresource.
    pub(crate) fn parse(text: &str) -> Self {
        let mut counts = BTreeMap::new();
        for line in text.lines() {
            let Some(rest) = line.strip_prefix("apiserver_request_total{") else {
                continue;
            };
            let Some((labels, value)) = rest.rsplit_once('}') else {
                continue;
            };
            let Ok(value) = value.trim().parse::<f64>() else {
                continue;
            };
            let label = |name: &str| label_value(labels, name).unwrap_or_default();
            let resource = match label("subresource") {
                "" => label("resource").to_owned(),
                sub => format!("{}/{sub}", label("resource")),
            };
            *counts
                .entry((label("verb").to_owned(), resource))
                .or_insert(0.0) += value;
        }
        Self(counts)
    }

    /// Scrapes the API server with `client` (admin).
    pub(crate) async fn scrape(client: &Client) -> Result<Self, String> {
        let request = http::Request::get("/metrics")
            .body(Vec::new())
            .map_err(|error| format!("building GET /metrics: {error}"))?;
        let text = client
            .request_text(request)
            .await
            .map_err(|error| format!("GET /metrics from the API server: {error}"))?;
        Ok(Self::parse(&text))
    }

    /// The requests counted since `before`, zero counts left out.
    pub(crate) fn since(&self, before: &Self) -> Self {
        let delta = self
            .0
            .iter()
            .map(|(key, after)| {
                (
                    key.clone(),
                    after - before.0.get(key).copied().unwrap_or(0.0),
                )
            })
            .filter(|(_, n)| *n > 0.0)
            .collect();
        Self(delta)
    }

    /// Only the writes (see [`WRITE_VERBS`]).
    pub(crate) fn writes(&self) -> Self {
        let writes = self
            .0
            .iter()
            .filter(|((verb, _), _)| WRITE_VERBS.contains(&verb.as_str()))
            .map(|(key, n)| (key.clone(), *n))
            .collect();
        Self(writes)
    }

    /// Only the requests to resources named `resource` or `resource/<subresource>` for one
    /// of `resources`.
    pub(crate) fn to_resources(&self, resources: &[&str]) -> Self {
        let kept = self
            .0
            .iter()
            .filter(|((_, resource), _)| {
                let base = resource.split('/').next().unwrap_or_default();
                resources.contains(&base)
            })
            .map(|(key, n)| (key.clone(), *n))
            .collect();
        Self(kept)
    }

    /// The total, with `events` counted apart: `(without events, events)`.
    pub(crate) fn total_and_events(&self) -> (f64, f64) {
        self.0
            .iter()
            .fold((0.0, 0.0), |(other, events), ((_, resource), n)| {
                if resource == "events" {
                    (other, events + n)
                } else {
                    (other + n, events)
                }
            })
    }

    /// `{"VERB resource": n}`, for the JSON report.
    pub(crate) fn to_json(&self) -> serde_json::Value {
        self.0
            .iter()
            .map(|((verb, resource), n)| (format!("{verb} {resource}"), serde_json::json!(n)))
            .collect::<serde_json::Map<_, _>>()
            .into()
    }
}

/// The value of label `name` in `a="x",b="y"` (values here never contain quotes).
fn label_value<'a>(labels: &'a str, name: &str) -> Option<&'a str> {
    labels.split(',').find_map(|pair| {
        let (key, value) = pair.split_once('=')?;
        (key.trim() == name).then(|| value.trim().trim_matches('"'))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const BEFORE: &str = r#"# HELP apiserver_request_total [STABLE] Counter of apiserver requests
# TYPE apiserver_request_total counter
apiserver_request_total{code="201",component="apiserver",contentType="application/json",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="POST",version="v1"} 10
apiserver_request_total{code="200",component="apiserver",contentType="application/json",dry_run="",group="",resource="pods",scope="resource",subresource="status",verb="PATCH",version="v1"} 4
apiserver_request_total{code="200",component="apiserver",contentType="application/json",dry_run="",group="",resource="pods",scope="namespace",subresource="",verb="LIST",version="v1"} 2
apiserver_request_latencies_summary{verb="POST"} 99
"#;

    #[test]
    fn request_counts_sum_codes_and_split_writes_and_events() {
        let before = RequestCounts::parse(BEFORE);
        let key = |verb: &str, resource: &str| (verb.to_owned(), resource.to_owned());
        assert_eq!(before.0.get(&key("PATCH", "pods/status")), Some(&4.0));
        assert_eq!(before.0.len(), 3);
        let after = RequestCounts::parse(&format!(
            "{BEFORE}apiserver_request_total{{code=\"409\",resource=\"pods\",subresource=\"\",verb=\"POST\"}} 3\n\
             apiserver_request_total{{code=\"201\",resource=\"events\",subresource=\"\",verb=\"POST\"}} 5\n"
        ));
        let delta = after.since(&before);
        assert_eq!(delta.0.get(&key("POST", "pods")), Some(&3.0));
        assert_eq!(delta.0.get(&key("LIST", "pods")), None);
        assert_eq!(delta.writes().total_and_events(), (3.0, 5.0));
        assert_eq!(delta.to_json()["POST events"], 5.0);
        let pods = after.to_resources(&["pods"]);
        assert_eq!(pods.0.len(), 3, "pods and pods/status, events left out");
    }
}
