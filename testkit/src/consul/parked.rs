//! The registry of parked blocking queries that tests synchronise on, and the guard that parks one.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::watch;

use super::mutex::lock;
use super::notify::{Notifier, Topic};

#[derive(Debug, Clone)]
struct Parked {
    deadline: Duration,
    /// What the query watches.
    topic: Topic,
    /// Version of the topic the query last evaluated against.
    seen: u64,
}

#[derive(Debug, Default)]
struct RegistryInner {
    next_id: u64,
    parked: HashMap<u64, Parked>,
}

/// Parked blocking queries, observable by tests.
#[derive(Debug)]
pub(crate) struct Registry {
    inner: Mutex<RegistryInner>,
    version: watch::Sender<u64>,
}

impl Default for Registry {
    fn default() -> Self {
        Registry {
            inner: Mutex::new(RegistryInner::default()),
            version: watch::Sender::new(0),
        }
    }
}

impl Registry {
    fn bump(&self) {
        self.version.send_modify(|v| *v = v.wrapping_add(1));
    }

    fn park(&self, id: Option<u64>, parked: Parked) -> u64 {
        let id = {
            let mut inner = lock(&self.inner);
            let id = id.unwrap_or_else(|| {
                inner.next_id += 1;
                inner.next_id
            });
            inner.parked.insert(id, parked);
            id
        };
        self.bump();
        id
    }

    fn unpark(&self, id: u64) {
        lock(&self.inner).parked.remove(&id);
        self.bump();
    }

    /// Number of parked queries.
    pub(crate) fn len(&self) -> usize {
        lock(&self.inner).parked.len()
    }

    /// Resolves once at least `n` queries are parked.
    pub(crate) async fn wait_for_len(&self, n: usize) {
        self.wait_until(|len| len >= n).await;
    }

    /// Resolves once at most `n` queries are parked.
    pub(crate) async fn wait_for_len_at_most(&self, n: usize) {
        self.wait_until(|len| len <= n).await;
    }

    async fn wait_until(&self, done: impl Fn(usize) -> bool) {
        let mut rx = self.version.subscribe();
        while !done(self.len()) {
            if rx.changed().await.is_err() {
                return;
            }
        }
    }

    /// The earliest parked deadline strictly after `now`.
    pub(crate) fn next_deadline_after(&self, now: Duration) -> Option<Duration> {
        lock(&self.inner)
            .parked
            .values()
            .map(|p| p.deadline)
            .filter(|d| *d > now)
            .min()
    }

    /// Resolves once every parked query has evaluated the latest version of its topic
    /// (`version`) and none has a deadline at or before `now` (those must have answered).
    pub(crate) async fn wait_settled(&self, now: Duration, version: impl Fn(&Topic) -> u64) {
        let mut rx = self.version.subscribe();
        loop {
            rx.borrow_and_update();
            let parked: Vec<Parked> = lock(&self.inner).parked.values().cloned().collect();
            let settled = parked
                .iter()
                .all(|p| p.deadline > now && p.seen == version(&p.topic));
            if settled || rx.changed().await.is_err() {
                return;
            }
        }
    }
}

/// Keeps a query registered while it blocks; unregisters on drop (also on cancellation)
/// and releases the topic's channel if nobody else watches it.
pub(crate) struct ParkGuard<'a> {
    pub(crate) registry: &'a Registry,
    pub(crate) notifier: &'a Notifier,
    pub(crate) topic: &'a Topic,
    pub(crate) id: Option<u64>,
}

impl ParkGuard<'_> {
    pub(crate) fn park(&mut self, deadline: Duration, seen: u64) {
        let parked = Parked {
            deadline,
            topic: self.topic.clone(),
            seen,
        };
        self.id = Some(self.registry.park(self.id, parked));
    }
}

impl Drop for ParkGuard<'_> {
    fn drop(&mut self) {
        if let Some(id) = self.id {
            self.registry.unpark(id);
        }
        self.notifier.release(self.topic);
    }
}
