//! Request and connection counters.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use super::mutex::lock;

/// A snapshot of the emulator's counters.
///
/// Endpoint names: `session.create`, `session.destroy`, `session.renew`, `session.info`,
/// `session.list`, `session.node`, `kv.get`, `kv.put`, `kv.delete`, `kv.other` (other
/// methods on `/v1/kv/`), `status.leader` and `unknown`. The `/_emu/` admin surface is not
/// counted.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Stats {
    /// Requests received per endpoint name.
    pub requests: BTreeMap<&'static str, u64>,
    /// Highest number of concurrent requests per endpoint name.
    pub in_flight_max: BTreeMap<&'static str, usize>,
    /// Highest number of concurrent requests overall.
    pub in_flight_total_max: usize,
    /// TCP connections open now.
    pub connections_open: usize,
    /// Highest number of simultaneously open TCP connections.
    pub connections_max: usize,
    /// TCP connections accepted.
    pub connections_total: u64,
    /// Requests received per ACL token presented (header, bearer or `?token=`); the empty
    /// string counts requests without a token. Lets a test prove where a token was sent.
    pub requests_by_token: BTreeMap<String, u64>,
    /// Of [`Stats::requests_by_token`], the writes (every method but `GET`): lets a test prove
    /// that a client sent no write after a moment, whatever it read.
    pub writes_by_token: BTreeMap<String, u64>,
}

impl Stats {
    /// Requests received by one endpoint (0 when none).
    pub fn requests_to(&self, endpoint: &str) -> u64 {
        self.requests.get(endpoint).copied().unwrap_or(0)
    }

    /// Requests received by all endpoints.
    pub fn total_requests(&self) -> u64 {
        self.requests.values().sum()
    }

    /// Requests that presented `token` (`""`: requests without a token).
    pub fn requests_with_token(&self, token: &str) -> u64 {
        self.requests_by_token.get(token).copied().unwrap_or(0)
    }

    /// Writes (every method but `GET`) that presented `token`.
    pub fn writes_with_token(&self, token: &str) -> u64 {
        self.writes_by_token.get(token).copied().unwrap_or(0)
    }
}

#[derive(Debug, Default)]
struct Counters {
    stats: Stats,
    in_flight: BTreeMap<&'static str, usize>,
    in_flight_total: usize,
}

/// Shared counters; guards decrement the "current" gauges when dropped.
#[derive(Debug, Clone, Default)]
pub(crate) struct StatsCollector {
    counters: Arc<Mutex<Counters>>,
}

/// Held while a request is in flight.
#[derive(Debug)]
pub(crate) struct RequestGuard {
    collector: StatsCollector,
    name: &'static str,
}

/// Held while a connection is open.
#[derive(Debug)]
pub(crate) struct ConnectionGuard {
    collector: StatsCollector,
}

impl StatsCollector {
    pub(crate) fn snapshot(&self) -> Stats {
        lock(&self.counters).stats.clone()
    }

    /// Zeroes the counters; maxima restart from the current gauges.
    pub(crate) fn reset(&self) {
        let mut c = lock(&self.counters);
        let open = c.stats.connections_open;
        c.stats = Stats {
            connections_open: open,
            connections_max: open,
            in_flight_total_max: c.in_flight_total,
            in_flight_max: c
                .in_flight
                .iter()
                .filter(|(_, n)| **n > 0)
                .map(|(k, n)| (*k, *n))
                .collect(),
            ..Stats::default()
        };
    }

    /// Counts a request to `name` with `token`; `write` for every method but `GET`.
    pub(crate) fn begin_request(
        &self,
        name: &'static str,
        token: Option<&str>,
        write: bool,
    ) -> RequestGuard {
        let mut c = lock(&self.counters);
        let token = token.unwrap_or_default().to_owned();
        *c.stats.requests.entry(name).or_default() += 1;
        if write {
            *c.stats.writes_by_token.entry(token.clone()).or_default() += 1;
        }
        *c.stats.requests_by_token.entry(token).or_default() += 1;
        let current = {
            let n = c.in_flight.entry(name).or_default();
            *n += 1;
            *n
        };
        let max = c.stats.in_flight_max.entry(name).or_default();
        *max = (*max).max(current);
        c.in_flight_total += 1;
        c.stats.in_flight_total_max = c.stats.in_flight_total_max.max(c.in_flight_total);
        RequestGuard {
            collector: self.clone(),
            name,
        }
    }

    pub(crate) fn open_connection(&self) -> ConnectionGuard {
        let mut c = lock(&self.counters);
        c.stats.connections_total += 1;
        c.stats.connections_open += 1;
        c.stats.connections_max = c.stats.connections_max.max(c.stats.connections_open);
        ConnectionGuard {
            collector: self.clone(),
        }
    }
}

impl Drop for RequestGuard {
    fn drop(&mut self) {
        let mut c = lock(&self.collector.counters);
        if let Some(n) = c.in_flight.get_mut(self.name) {
            *n = n.saturating_sub(1);
        }
        c.in_flight_total = c.in_flight_total.saturating_sub(1);
    }
}

impl Drop for ConnectionGuard {
    fn drop(&mut self) {
        let mut c = lock(&self.collector.counters);
        c.stats.connections_open = c.stats.connections_open.saturating_sub(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_maxima() {
        let s = StatsCollector::default();
        let c1 = s.open_connection();
        let c2 = s.open_connection();
        let a = s.begin_request("kv.get", None, false);
        let b = s.begin_request("kv.get", None, false);
        let c = s.begin_request("kv.put", Some("t"), true);
        drop((a, b, c, c1));
        let snap = s.snapshot();
        assert_eq!(snap.requests_to("kv.get"), 2);
        assert_eq!(snap.total_requests(), 3);
        assert_eq!(
            (snap.requests_with_token(""), snap.requests_with_token("t")),
            (2, 1)
        );
        assert_eq!(
            (snap.writes_with_token(""), snap.writes_with_token("t")),
            (0, 1)
        );
        assert_eq!(snap.in_flight_max.get("kv.get"), Some(&2));
        assert_eq!(snap.in_flight_total_max, 3);
        assert_eq!(
            (
                snap.connections_open,
                snap.connections_max,
                snap.connections_total
            ),
            (1, 2, 2)
        );
        s.reset();
        let snap = s.snapshot();
        assert_eq!(snap.total_requests(), 0);
        assert_eq!(
            (
                snap.connections_open,
                snap.connections_max,
                snap.connections_total
            ),
            (1, 1, 0)
        );
        drop(c2);
        assert_eq!(s.snapshot().connections_open, 0);
    }
}
