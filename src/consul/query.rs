//! Read options and response metadata shared by every read endpoint.

use std::time::Duration;

use http::HeaderMap;

use super::go_duration;

/// The longest `wait` Consul honours (`max_query_time`); longer waits are clamped to it.
pub const MAX_WAIT: Duration = Duration::from_secs(600);

/// Read consistency mode.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Consistency {
    /// The server's default mode (leader-served, no extra verification round).
    #[default]
    Default,
    /// `?consistent`: the leader verifies its leadership before answering.
    Consistent,
    /// `?stale`: any server may answer, even without a leader.
    Stale,
}

/// A blocking-query request: return once the result's index exceeds `index`, or after `wait`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Blocking {
    /// The index of the previous answer. 0 makes the query non-blocking.
    pub index: u64,
    /// How long the server may hold the request (clamped to [`MAX_WAIT`]).
    pub wait: Duration,
}

impl Blocking {
    /// The wait actually requested from the server.
    pub fn effective_wait(&self) -> Duration {
        self.wait.min(MAX_WAIT)
    }

    /// The client-side timeout for this query: the wait plus Consul's maximum jitter
    /// (`wait/16`) plus `slack` for the network and the server's own work.
    pub fn timeout(&self, slack: Duration) -> Duration {
        let wait = self.effective_wait();
        wait + wait / 16 + slack
    }
}

/// Options of a read request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueryOptions {
    /// Consistency mode.
    pub consistency: Consistency,
    /// Blocking-query parameters; `None` for a plain read.
    pub blocking: Option<Blocking>,
}

impl QueryOptions {
    /// A blocking read waiting for an index above `index`.
    pub fn blocking(index: u64, wait: Duration) -> Self {
        Self {
            consistency: Consistency::Default,
            blocking: Some(Blocking { index, wait }),
        }
    }

    /// Whether the server may hold the request (a blocking query with a non-zero index).
    pub(crate) fn blocks(&self) -> bool {
        self.blocking.is_some_and(|b| b.index > 0)
    }

    /// The query parameters these options add (`index` and `wait` only when the index is
    /// non-zero, since index 0 is a non-blocking read anyway).
    pub(crate) fn query_pairs(&self) -> Vec<(&'static str, String)> {
        let mut pairs = Vec::new();
        match self.consistency {
            Consistency::Default => {}
            Consistency::Consistent => pairs.push(("consistent", String::new())),
            Consistency::Stale => pairs.push(("stale", String::new())),
        }
        if let Some(blocking) = self.blocking.filter(|_| self.blocks()) {
            pairs.push(("index", blocking.index.to_string()));
            pairs.push(("wait", go_duration::format(blocking.effective_wait())));
        }
        pairs
    }

    /// The client-side timeout of a read with these options.
    pub(crate) fn timeout(&self, request_timeout: Duration) -> Duration {
        match self.blocking {
            Some(blocking) if self.blocks() => blocking.timeout(request_timeout),
            _ => request_timeout,
        }
    }
}

/// Metadata Consul returns with every read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueryMeta {
    /// `X-Consul-Index` (0 when the header is missing).
    pub index: u64,
    /// `X-Consul-KnownLeader`.
    pub known_leader: bool,
    /// `X-Consul-LastContact`: how long ago the answering server heard from the leader.
    pub last_contact: Duration,
}

impl QueryMeta {
    /// Parses the meta headers. Missing or malformed headers give the zero value, which the
    /// blocking-index rules treat safely (index 0 means "re-read without blocking").
    pub(crate) fn from_headers(headers: &HeaderMap) -> Self {
        let header = |name: &str| {
            headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::trim)
        };
        Self {
            index: header("x-consul-index")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0),
            known_leader: header("x-consul-knownleader") == Some("true"),
            last_contact: Duration::from_millis(
                header("x-consul-lastcontact")
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0),
            ),
        }
    }
}

/// A read result with its metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueryResult<T> {
    /// The decoded answer.
    pub value: T,
    /// The response's metadata.
    pub meta: QueryMeta,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocking_parameters() {
        let options = QueryOptions::blocking(42, Duration::from_secs(30));
        assert_eq!(
            options.query_pairs(),
            vec![("index", "42".to_owned()), ("wait", "30s".to_owned())]
        );
        let slack = Duration::from_secs(10);
        assert_eq!(
            options.timeout(slack),
            Duration::from_secs(30) + Duration::from_millis(1875) + slack
        );
        let long = QueryOptions::blocking(1, Duration::from_secs(3600));
        assert_eq!(long.query_pairs()[1].1, "600s");
        assert_eq!(long.timeout(slack), Duration::from_millis(637_500) + slack);
        let sub_second = QueryOptions::blocking(1, Duration::from_millis(250));
        assert_eq!(sub_second.query_pairs()[1].1, "250ms");
    }

    #[test]
    fn index_zero_is_not_blocking() {
        let options = QueryOptions::blocking(0, Duration::from_secs(30));
        assert!(options.query_pairs().is_empty());
        assert_eq!(
            options.timeout(Duration::from_secs(5)),
            Duration::from_secs(5)
        );
        let consistent = QueryOptions {
            consistency: Consistency::Consistent,
            blocking: None,
        };
        assert_eq!(
            consistent.query_pairs(),
            vec![("consistent", String::new())]
        );
    }

    #[test]
    fn parses_meta_headers() {
        let mut headers = HeaderMap::new();
        headers.insert("X-Consul-Index", "17".parse().unwrap());
        headers.insert("X-Consul-KnownLeader", "true".parse().unwrap());
        headers.insert("X-Consul-LastContact", "250".parse().unwrap());
        let meta = QueryMeta::from_headers(&headers);
        assert_eq!(meta.index, 17);
        assert!(meta.known_leader);
        assert_eq!(meta.last_contact, Duration::from_millis(250));
        assert_eq!(
            QueryMeta::from_headers(&HeaderMap::new()),
            QueryMeta::default()
        );
    }
}
