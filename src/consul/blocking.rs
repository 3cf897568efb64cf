//! Blocking queries done by Consul's client rules (docs: api-docs/features/blocking.mdx):
//! follow `X-Consul-Index`, reset to 0 when it goes backwards, never block on an index below 1,
//! and rate-limit the loop so that a storm of wake-ups cannot turn into a hot loop.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use super::error::Result;
use super::query::{Blocking, Consistency, QueryOptions, QueryResult};
use super::settings::WatchPacing;

/// What an answer did to the index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IndexChange {
    /// The index moved forward (or this was the first answer): the data may have changed.
    Advanced,
    /// Same index as before: the wait expired or the wake-up was spurious.
    Unchanged,
    /// The index went backwards (snapshot restore, reaped tombstones): the index was reset to
    /// 0, so the next query is a non-blocking re-read.
    Reset,
}

/// The index half of a blocking-query loop. Pure: no I/O, no clock.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BlockingIndex {
    current: u64,
}

impl BlockingIndex {
    /// Starts with index 0: the first query does not block.
    pub fn new() -> Self {
        Self::default()
    }

    /// The index to send with the next query (0 means a non-blocking read).
    pub fn index(&self) -> u64 {
        self.current
    }

    /// Records the `X-Consul-Index` of an answer.
    ///
    /// - lower than the current index: reset to 0 ([`IndexChange::Reset`]);
    /// - otherwise adopt it, but never below 1, so that once the loop has read once it always
    ///   blocks (a server that answers 0 would otherwise make every query return at once).
    pub fn observe(&mut self, returned: u64) -> IndexChange {
        if returned < self.current {
            self.current = 0;
            return IndexChange::Reset;
        }
        let next = returned.max(1);
        let change = if next > self.current || self.current == 0 {
            IndexChange::Advanced
        } else {
            IndexChange::Unchanged
        };
        self.current = next;
        change
    }

    /// Forgets the index, so the next query is a non-blocking re-read.
    pub fn reset(&mut self) {
        self.current = 0;
    }
}

/// A token bucket: up to `burst` queries back to back, then one per `refill_interval`.
/// Pure: callers pass the current instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenBucket {
    burst: u32,
    refill_interval: Duration,
    tokens: u32,
    last_refill: Instant,
}

impl TokenBucket {
    /// A full bucket.
    pub fn new(pacing: WatchPacing, now: Instant) -> Self {
        let burst = pacing.burst.max(1);
        Self {
            burst,
            refill_interval: pacing.refill_interval,
            tokens: burst,
            last_refill: now,
        }
    }

    /// Takes a token if one is available, otherwise returns how long until the next one.
    pub fn try_take(&mut self, now: Instant) -> Result<(), Duration> {
        self.refill(now);
        if self.tokens > 0 {
            self.tokens -= 1;
            Ok(())
        } else {
            let next = self.last_refill + self.refill_interval;
            Err(next.saturating_duration_since(now))
        }
    }

    fn refill(&mut self, now: Instant) {
        if self.refill_interval.is_zero() {
            self.tokens = self.burst;
            self.last_refill = now;
            return;
        }
        let elapsed = now.saturating_duration_since(self.last_refill);
        let earned = elapsed.as_nanos() / self.refill_interval.as_nanos();
        if earned == 0 {
            return;
        }
        let room = self.burst - self.tokens;
        if earned >= u128::from(room) {
            self.tokens = self.burst;
            self.last_refill = now;
        } else {
            // earned < room <= u32::MAX
            let earned = u32::try_from(earned).unwrap_or(room);
            self.tokens += earned;
            self.last_refill += self.refill_interval * earned;
        }
    }
}

/// A reusable blocking-query loop: index tracking plus pacing.
///
/// ```no_run
/// # async fn demo(client: consul_elector::consul::ConsulClient) -> consul_elector::consul::Result<()> {
/// use std::time::Duration;
/// use consul_elector::consul::{BlockingWatch, WatchPacing};
/// let mut watch = BlockingWatch::new(Duration::from_secs(60), WatchPacing::default());
/// loop {
///     let (answer, _change) = watch.next(|options| client.kv_list("elector/", options)).await?;
///     // react to answer.value
/// #   break;
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct BlockingWatch {
    index: BlockingIndex,
    bucket: TokenBucket,
    wait: Duration,
    consistency: Consistency,
    /// The next query starts no earlier than this ([`BlockingWatch::hold_next_until`]).
    not_before: Option<Instant>,
}

impl BlockingWatch {
    /// A watch whose queries wait up to `wait` (Consul clamps to 10 minutes).
    pub fn new(wait: Duration, pacing: WatchPacing) -> Self {
        Self {
            index: BlockingIndex::new(),
            bucket: TokenBucket::new(pacing, Instant::now()),
            wait,
            consistency: Consistency::Default,
            not_before: None,
        }
    }

    /// Uses `consistency` for every query of this watch.
    pub fn with_consistency(mut self, consistency: Consistency) -> Self {
        self.consistency = consistency;
        self
    }

    /// The index the next query will send.
    pub fn index(&self) -> u64 {
        self.index.index()
    }

    /// The options of the next query.
    pub fn options(&self) -> QueryOptions {
        QueryOptions {
            consistency: self.consistency,
            blocking: Some(Blocking {
                index: self.index.index(),
                wait: self.wait,
            }),
        }
    }

    /// Makes later queries wait up to `wait` (a query under way keeps its own).
    pub fn set_wait(&mut self, wait: Duration) {
        self.wait = wait;
    }

    /// Forgets the index (for example after the caller lost track of the data).
    pub fn reset(&mut self) {
        self.index.reset();
    }

    /// Makes the next query start no earlier than `at` (besides the rate limiter), for a
    /// caller whose answers are costly to process: writes meanwhile fold into one answer.
    pub fn hold_next_until(&mut self, at: Instant) {
        self.not_before = Some(at);
    }

    /// Waits until the time set by [`BlockingWatch::hold_next_until`] and for the rate limiter
    /// (only when its tokens are used up), runs one query with this watch's options and
    /// records the returned index. On error the index is kept, so the next call repeats the
    /// same query. Cancel-safe: dropped while it waits, the next call waits again.
    pub async fn next<T, F, Fut>(&mut self, query: F) -> Result<(QueryResult<T>, IndexChange)>
    where
        F: FnOnce(QueryOptions) -> Fut,
        Fut: Future<Output = Result<QueryResult<T>>>,
    {
        if let Some(at) = self.not_before {
            tokio::time::sleep_until(at).await;
            self.not_before = None;
        }
        while let Err(delay) = self.bucket.try_take(Instant::now()) {
            tokio::time::sleep(delay).await;
        }
        let answer = query(self.options()).await?;
        let change = self.index.observe(answer.meta.index);
        Ok((answer, change))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn follows_the_index() {
        let mut index = BlockingIndex::new();
        assert_eq!(index.index(), 0);
        assert_eq!(index.observe(5), IndexChange::Advanced);
        assert_eq!(index.index(), 5);
        assert_eq!(index.observe(5), IndexChange::Unchanged);
        assert_eq!(index.observe(9), IndexChange::Advanced);
        assert_eq!(index.index(), 9);
    }

    #[test]
    fn resets_when_the_index_goes_backwards() {
        let mut index = BlockingIndex::new();
        index.observe(100);
        assert_eq!(index.observe(7), IndexChange::Reset);
        assert_eq!(index.index(), 0);
        assert_eq!(index.observe(7), IndexChange::Advanced);
        assert_eq!(index.index(), 7);
    }

    #[test]
    fn never_blocks_below_one() {
        let mut index = BlockingIndex::new();
        assert_eq!(index.observe(0), IndexChange::Advanced);
        assert_eq!(index.index(), 1);
        assert_eq!(index.observe(0), IndexChange::Reset);
        assert_eq!(index.index(), 0);
        index.observe(0);
        assert_eq!(index.index(), 1);
        assert_eq!(index.observe(1), IndexChange::Unchanged);
    }

    #[test]
    fn bucket_allows_a_burst_then_paces() {
        let start = Instant::now();
        let pacing = WatchPacing {
            burst: 2,
            refill_interval: Duration::from_secs(1),
        };
        let mut bucket = TokenBucket::new(pacing, start);
        assert_eq!(bucket.try_take(start), Ok(()));
        assert_eq!(bucket.try_take(start), Ok(()));
        assert_eq!(bucket.try_take(start), Err(Duration::from_secs(1)));
        let later = start + Duration::from_millis(400);
        assert_eq!(bucket.try_take(later), Err(Duration::from_millis(600)));
        let refilled = start + Duration::from_millis(1000);
        assert_eq!(bucket.try_take(refilled), Ok(()));
        assert!(bucket.try_take(refilled).is_err());
        // A long pause refills the burst, but not beyond it.
        let much_later = start + Duration::from_secs(60);
        assert_eq!(bucket.try_take(much_later), Ok(()));
        assert_eq!(bucket.try_take(much_later), Ok(()));
        assert!(bucket.try_take(much_later).is_err());
    }

    #[test]
    fn partial_refill_keeps_the_remainder() {
        let start = Instant::now();
        let pacing = WatchPacing {
            burst: 3,
            refill_interval: Duration::from_secs(1),
        };
        let mut bucket = TokenBucket::new(pacing, start);
        for _ in 0..3 {
            bucket.try_take(start).unwrap();
        }
        let t = start + Duration::from_millis(1500);
        assert_eq!(bucket.try_take(t), Ok(()));
        // The next token comes at 2 s, not 2.5 s.
        assert_eq!(bucket.try_take(t), Err(Duration::from_millis(500)));
    }

    #[tokio::test(start_paused = true)]
    async fn watch_sleeps_only_without_tokens() {
        let pacing = WatchPacing {
            burst: 2,
            refill_interval: Duration::from_secs(5),
        };
        let mut watch = BlockingWatch::new(Duration::from_secs(30), pacing);
        let start = Instant::now();
        let mut sent = Vec::new();
        for returned in [3u64, 3, 8] {
            let (answer, _) = watch
                .next(|options| {
                    sent.push((options.blocking.map(|b| b.index), Instant::now() - start));
                    async move {
                        Ok(QueryResult {
                            value: (),
                            meta: super::super::query::QueryMeta {
                                index: returned,
                                ..Default::default()
                            },
                        })
                    }
                })
                .await
                .unwrap();
            assert_eq!(answer.meta.index, returned);
        }
        assert_eq!(
            sent,
            vec![
                (Some(0), Duration::ZERO),
                (Some(3), Duration::ZERO),
                (Some(3), Duration::from_secs(5)),
            ]
        );
        assert_eq!(watch.index(), 8);
    }

    #[tokio::test(start_paused = true)]
    async fn a_held_query_waits_once_and_a_dropped_wait_holds_again() {
        let mut watch = BlockingWatch::new(Duration::from_secs(30), WatchPacing::default());
        let start = Instant::now();
        let answer = || async {
            Ok(QueryResult {
                value: (),
                meta: super::super::query::QueryMeta {
                    index: 3,
                    ..Default::default()
                },
            })
        };
        watch.hold_next_until(start + Duration::from_secs(2));
        // Dropped while it waits: nothing is sent, and the next call still waits.
        let early = tokio::time::timeout(Duration::from_secs(1), watch.next(|_| answer())).await;
        assert!(early.is_err());
        // The held query goes at 2 s; the hold is then spent, and the next one goes at once.
        for _ in 0..2 {
            let mut sent_at = None;
            watch
                .next(|_| {
                    sent_at = Some(Instant::now() - start);
                    answer()
                })
                .await
                .unwrap();
            assert_eq!(sent_at, Some(Duration::from_secs(2)));
        }
    }
}
