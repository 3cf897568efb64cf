//! Blocking queries: `?index`/`?wait` and consistency parameters, the timeout with
//! jitter and the wait loop of Consul's `blockingquery.Query` (with the modern missing-key
//! rule).

use std::time::Duration;

use rand::Rng as _;

use super::duration::parse_go_duration;
use super::error::ApiError;
use super::inner::Inner;
use super::notify::Topic;
use super::parked::ParkGuard;
use super::query::{Query, go_quote};
use super::state::State;

/// Consul's default `max_query_time`.
const MAX_QUERY_TIME: Duration = Duration::from_secs(600);
/// Consul's default `default_query_time`.
const DEFAULT_QUERY_TIME: Duration = Duration::from_secs(300);
/// `structs.JitterFraction`.
const JITTER_FRACTION: u32 = 16;

/// Query parameters shared by every read (`agent/http.go` `parse`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct QueryOptions {
    /// `?index`; 0 = non-blocking.
    pub(crate) min_index: u64,
    /// `?wait` in nanoseconds; 0 when absent.
    pub(crate) wait_ns: i64,
    /// `?stale` (or a positive `?max_stale`): served without a leader.
    pub(crate) stale: bool,
}

/// Parses consistency, then wait, then index, with Consul's 400 texts.
pub(crate) fn parse_query_options(q: &Query) -> Result<QueryOptions, ApiError> {
    let mut opts = QueryOptions {
        stale: q.has("stale"),
        ..QueryOptions::default()
    };
    let consistent = q.has("consistent");
    if let Some(max_stale) = q.get("max_stale").filter(|v| !v.is_empty()) {
        let ns = parse_go_duration(max_stale).map_err(|_| {
            ApiError::bad_request(format!("Invalid max_stale value {}", go_quote(max_stale)))
        })?;
        if ns > 0 {
            opts.stale = true;
        }
    }
    if opts.stale && consistent {
        return Err(ApiError::bad_request(
            "Cannot specify ?stale with ?consistent, conflicting semantics.",
        ));
    }
    if let Some(wait) = q.get("wait").filter(|v| !v.is_empty()) {
        opts.wait_ns =
            parse_go_duration(wait).map_err(|_| ApiError::bad_request("Invalid wait time"))?;
    }
    if let Some(index) = q.get("index").filter(|v| !v.is_empty()) {
        opts.min_index =
            super::query::parse_uint(index).map_err(|_| ApiError::bad_request("Invalid index"))?;
    }
    Ok(opts)
}

/// `min(wait, 600s)`, or 300 s when `wait <= 0`; plus a uniform jitter in
/// `[0, timeout/16)` when enabled.
pub(crate) fn query_timeout(wait_ns: i64, jitter: bool) -> Duration {
    let wait = super::duration::nanos_to_duration(wait_ns);
    let base = if wait_ns <= 0 {
        DEFAULT_QUERY_TIME
    } else {
        wait.min(MAX_QUERY_TIME)
    };
    let max_jitter = base / JITTER_FRACTION;
    if !jitter || max_jitter.is_zero() {
        return base;
    }
    let nanos = rand::rng().random_range(0..max_jitter.as_nanos());
    base + Duration::from_nanos(u64::try_from(nanos).unwrap_or(0))
}

/// One evaluation of a query against the state.
pub(crate) struct Evaluation<T> {
    /// The index the query reports (forced to at least 1 by the loop).
    pub(crate) index: u64,
    /// The query signalled "not found" (single key, session info).
    pub(crate) not_found: bool,
    /// The result.
    pub(crate) value: T,
}

impl Inner {
    /// Runs a query watching `topic`, blocking per Consul's rules when `opts.min_index > 0`:
    /// returns as soon as the result index exceeds the requested one, or at the timeout
    /// with the current result. A query that reports "not found" twice in a row raises its
    /// threshold to the current index, so only the key appearing (or the timeout) ends it.
    /// Returns the index (at least 1) and the value.
    pub(crate) async fn blocking_query<T>(
        &self,
        opts: &QueryOptions,
        topic: Topic,
        mut eval: impl FnMut(&State) -> Result<Evaluation<T>, ApiError>,
    ) -> Result<(u64, T), ApiError> {
        let mut min = opts.min_index;
        if min == 0 {
            let e = self.with_state(|st, _| eval(st))?;
            return Ok((e.index.max(1), e.value));
        }
        let timeout = query_timeout(opts.wait_ns, self.config.jitter);
        let deadline = self.clock.now().saturating_add(timeout);
        let mut guard = ParkGuard {
            registry: &self.parked,
            notifier: &self.notifier,
            topic: &topic,
            id: None,
        };
        let mut not_found = false;
        loop {
            let mut changes = self.notifier.subscribe(&topic);
            let seen = *changes.borrow();
            let e = self.with_state(|st, _| eval(st))?;
            let index = e.index.max(1);
            if e.not_found {
                if not_found {
                    min = index;
                }
                not_found = true;
            }
            if index > min || self.clock.now() >= deadline {
                return Ok((index, e.value));
            }
            guard.park(deadline, seen);
            tokio::select! {
                _ = changes.changed() => {}
                () = self.clock.sleep_until(deadline) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(q: &str) -> Result<QueryOptions, ApiError> {
        parse_query_options(&Query::parse(Some(q)))
    }

    #[test]
    fn parses_parameters_with_consul_errors() {
        assert_eq!(
            opts("index=5&wait=15s"),
            Ok(QueryOptions {
                min_index: 5,
                wait_ns: 15_000_000_000,
                stale: false
            })
        );
        assert_eq!(opts("wait=15").unwrap_err().body, "Invalid wait time");
        assert_eq!(opts("index=abc").unwrap_err().body, "Invalid index");
        assert_eq!(opts("index=-1").unwrap_err().body, "Invalid index");
        assert_eq!(
            opts("stale&consistent&wait=15").unwrap_err().body,
            "Cannot specify ?stale with ?consistent, conflicting semantics."
        );
        assert_eq!(
            opts("max_stale=x").unwrap_err().body,
            "Invalid max_stale value \"x\""
        );
        assert!(opts("max_stale=5s").expect("ok").stale);
        assert_eq!(opts("index=&wait="), Ok(QueryOptions::default()));
    }

    #[test]
    fn timeouts_clamp_default_and_jitter() {
        let s = |n: u64| Duration::from_secs(n);
        assert_eq!(query_timeout(1_000_000_000, false), s(1));
        assert_eq!(query_timeout(0, false), s(300));
        assert_eq!(query_timeout(-5, false), s(300));
        assert_eq!(query_timeout(1_200_000_000_000, false), s(600));
        for _ in 0..200 {
            let t = query_timeout(1_000_000_000, true);
            assert!(t >= s(1) && t < Duration::from_millis(1062) + Duration::from_micros(500));
            let t = query_timeout(1_200_000_000_000, true);
            assert!(t >= s(600) && t < s(600) + s(600) / 16);
        }
    }
}
