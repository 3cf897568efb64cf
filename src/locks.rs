//! Watches the elections' Consul keys with as few blocking queries as possible, keeps the
//! last answer as a cache the controller reads ([`LockWatcher::lock`]), and reports the
//! elections whose key changed.
//!
//! # Groups
//! Elections are grouped by Consul address, datacenter, ACL token and *scope*, and each group
//! runs one blocking query (one long poll, holding one of the client's connection permits):
//! - a key with a `/` is watched through a recursive read of its first path segment
//!   (`elector/shop/web/leader` through `elector/?recurse`), so the default keys of every
//!   election share one query;
//! - a key without a `/` has no prefix to share; it is watched by a single-key blocking read
//!   of its own (shared only by elections using that same key).
//!
//! The number of concurrent long polls is therefore the number of distinct (address,
//! datacenter, token, first segment or slash-less key) groups, never the number of elections.
//! The price of a shared prefix is that every change under it (including keys that belong to
//! no election) wakes the query and returns the whole prefix; the client's watch pacing
//! (a token bucket) bounds how often that happens.
//!
//! # Reports
//! An election's key is sent on the channel when its entry changed between two answers of its
//! group (presence, `ModifyIndex` or `Session`), when its group's read fails after a success
//! (every election of the group becomes [`LockView::Unknown`], reported once), and when reads
//! succeed again (including the first read of a new group). Answers follow Consul's
//! blocking-index rules through [`crate::consul::BlockingWatch`]; failures back off
//! exponentially (bounded, with jitter) and re-read without blocking once Consul answers.
//! An answer from a server that knows no cluster leader counts as a failure: its data cannot
//! be confirmed.
//!
//! [`LockWatcher::refresh`] reads one key directly (after the operator's own acquire or
//! release) and merges the result into the cache. Cache slots carry the index they were read
//! at, so an older answer of the group query never overwrites a newer direct read.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use jiff::Timestamp;
use tokio::sync::mpsc::UnboundedSender;
use tokio::task::AbortHandle;

use crate::consul::{
    ConsulAddress, ConsulClient, ConsulError, ConsulToken, IndexChange, KvPair, QueryOptions,
    QueryResult, RetryPolicy,
};
use crate::election::config::ElectionKey;
use crate::election::observe::LockView;

/// Pause between failed reads of a group: exponential from 1 s, at most 30 s, full jitter.
const BACKOFF: RetryPolicy = RetryPolicy {
    max_attempts: u32::MAX,
    base_delay: Duration::from_secs(1),
    max_delay: Duration::from_secs(30),
};

/// The longest one (blocking) read of a group may take with the client's timeouts and
/// retries, with room to spare: a task silent for longer is stuck.
fn query_budget(wait: Duration) -> Duration {
    (wait + wait / 16 + Duration::from_secs(15)) * 4 + Duration::from_secs(30)
}

/// What one blocking query reads.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Scope {
    /// Every key under `<segment>/` (a recursive read).
    Prefix(String),
    /// One key without a `/` (a single-key read).
    Key(String),
}

impl Scope {
    /// The scope that watches `key`.
    fn of(key: &str) -> Scope {
        match key.split_once('/') {
            Some((segment, _)) => Scope::Prefix(format!("{segment}/")),
            None => Scope::Key(key.to_owned()),
        }
    }

    /// One read of the scope (blocking or not, as `options` say).
    async fn read(
        &self,
        client: &ConsulClient,
        options: QueryOptions,
    ) -> Result<QueryResult<Vec<KvPair>>, ConsulError> {
        match self {
            Scope::Prefix(prefix) => client.kv_list(prefix, options).await,
            Scope::Key(key) => {
                let answer = client.kv_get(key, options).await?;
                Ok(QueryResult {
                    value: answer.value.into_iter().collect(),
                    meta: answer.meta,
                })
            }
        }
    }
}

/// Identifies a group: where its query goes, who asks, and what it reads.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Target {
    address: ConsulAddress,
    datacenter: Option<String>,
    token: Option<ConsulToken>,
    scope: Scope,
}

impl Target {
    fn new(client: &ConsulClient, key: &str) -> Target {
        Target {
            address: client.address().clone(),
            datacenter: client.datacenter().map(str::to_owned),
            token: client.token().cloned(),
            scope: Scope::of(key),
        }
    }
}

/// What the cache knows about one key.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Slot {
    /// The index this knowledge is current at: the entry's `ModifyIndex`, or for a deletion
    /// seen by a direct read, that read's `X-Consul-Index`.
    index: u64,
    /// The entry; `None` for a deletion seen by a direct read.
    entry: Option<KvPair>,
}

impl Slot {
    fn present(entry: KvPair) -> Slot {
        Slot {
            index: entry.modify_index,
            entry: Some(entry),
        }
    }
}

/// What a change report compares: presence, `ModifyIndex` and holder.
fn fingerprint(slot: Option<&Slot>) -> Option<(u64, Option<&str>)> {
    slot.and_then(|slot| slot.entry.as_ref())
        .map(|entry| (entry.modify_index, entry.session.as_deref()))
}

/// The planner's view of a key's entry.
fn view_of(entry: Option<&KvPair>) -> LockView {
    match entry {
        None => LockView::Absent,
        Some(entry) => match &entry.session {
            None => LockView::Free {
                lock_index: entry.lock_index,
            },
            Some(session) => LockView::Held {
                session: session.clone(),
                lock_index: entry.lock_index,
                value: (!entry.value.is_empty()).then(|| entry.value.clone()),
            },
        },
    }
}

/// The cache after a group answer: the answer's entries, plus the slots of direct reads
/// newer than the answer. When the index went backwards (Consul's data was replaced, for
/// example by a snapshot restore), the answer alone is the truth.
fn next_cache(
    previous: Option<&HashMap<String, Slot>>,
    answer: QueryResult<Vec<KvPair>>,
    change: IndexChange,
) -> HashMap<String, Slot> {
    let mut cache: HashMap<String, Slot> = answer
        .value
        .into_iter()
        .map(|entry| (entry.key.clone(), Slot::present(entry)))
        .collect();
    if change != IndexChange::Reset {
        let newer = previous
            .into_iter()
            .flatten()
            .filter(|(_, slot)| slot.index > answer.meta.index);
        for (key, slot) in newer {
            cache.insert(key.clone(), slot.clone());
        }
    }
    cache
}

/// Merges a direct read of `key` into `cache`, unless the cache already knows a newer state.
fn merge_direct(cache: &mut HashMap<String, Slot>, key: &str, slot: Slot) {
    if cache
        .get(key)
        .is_none_or(|cached| cached.index <= slot.index)
    {
        cache.insert(key.to_owned(), slot);
    }
}

/// The members whose key differs between `previous` and `next` (every member when there
/// was no previous state).
fn changed_members(
    members: &HashMap<ElectionKey, String>,
    previous: Option<&HashMap<String, Slot>>,
    next: &HashMap<String, Slot>,
) -> Vec<ElectionKey> {
    members
        .iter()
        .filter(|(_, key)| {
            previous.is_none_or(|previous| {
                fingerprint(previous.get(key.as_str())) != fingerprint(next.get(key.as_str()))
            })
        })
        .map(|(election, _)| election.clone())
        .collect()
}

/// One blocking query and the elections it serves.
struct Group {
    /// Tells this group apart from a later one with the same target.
    id: u64,
    /// Each member election and its key.
    members: HashMap<ElectionKey, String>,
    /// The last answer, by key; `None` until the first successful read and while reads fail.
    cache: Option<HashMap<String, Slot>>,
    /// Direct reads made while `cache` is `None`, merged into the next answer when newer:
    /// an answer read before the operator's own acquire must not undo it.
    early: HashMap<String, Slot>,
    /// When the last successful answer arrived: every key of the group was as cached then.
    read_at: Option<Timestamp>,
    /// When the group's task should next have made progress (its query's longest answer
    /// time, or the end of its backoff): liveness watches that queries keep cycling.
    due: tokio::time::Instant,
    task: AbortHandle,
}

#[derive(Default)]
struct State {
    /// The group of each watched election (its key is in the group's members).
    elections: HashMap<ElectionKey, Target>,
    groups: HashMap<Target, Group>,
    /// When each election's key was last read directly ([`LockWatcher::refresh`]).
    direct_reads: HashMap<ElectionKey, Timestamp>,
}

impl State {
    /// The group of `election` and the key it watches there.
    fn group_of(&mut self, election: &ElectionKey) -> Option<(&mut Group, String)> {
        let group = self.groups.get_mut(self.elections.get(election)?)?;
        let key = group.members.get(election)?.clone();
        Some((group, key))
    }

    /// Removes `election` from its group, stopping the group's query when it was the last
    /// member.
    fn leave(&mut self, election: &ElectionKey) {
        self.direct_reads.remove(election);
        let Some(target) = self.elections.remove(election) else {
            return;
        };
        if let Some(group) = self.groups.get_mut(&target) {
            group.members.remove(election);
            if group.members.is_empty() {
                group.task.abort();
                self.groups.remove(&target);
            }
        }
    }
}

struct Inner {
    changes: UnboundedSender<ElectionKey>,
    wait: Duration,
    state: Mutex<State>,
    next_group: AtomicU64,
}

impl Inner {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn report(&self, elections: Vec<ElectionKey>) {
        for election in elections {
            // A closed channel means the controller is shutting down; nothing to tell.
            let _ = self.changes.send(election);
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        let state = self.state.get_mut().unwrap_or_else(PoisonError::into_inner);
        for group in state.groups.values() {
            group.task.abort();
        }
    }
}

/// Watches the elections' lock keys (see the module docs). Cheap to clone; clones share the
/// groups. Dropping the last clone stops every query.
#[derive(Clone)]
pub struct LockWatcher {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for LockWatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.inner.state();
        f.debug_struct("LockWatcher")
            .field("elections", &state.elections.len())
            .field("queries", &state.groups.len())
            .finish_non_exhaustive()
    }
}

impl LockWatcher {
    /// A watcher reporting changed elections on `changes`, whose blocking queries wait up to
    /// `wait` (Consul caps it at 10 minutes).
    pub fn new(changes: UnboundedSender<ElectionKey>, wait: Duration) -> LockWatcher {
        LockWatcher {
            inner: Arc::new(Inner {
                changes,
                wait,
                state: Mutex::new(State::default()),
                next_group: AtomicU64::new(0),
            }),
        }
    }

    /// Watches `key` for `election` through `client`. Idempotent; watching another key, or
    /// through a client with another address, datacenter or token, moves the election to
    /// that group (stopping the old group's query if it was the last member). Must be called
    /// within a tokio runtime (a new group spawns its query task).
    pub fn watch(&self, election: &ElectionKey, client: &ConsulClient, key: &str) {
        let target = Target::new(client, key);
        let mut state = self.inner.state();
        if state.elections.get(election) == Some(&target)
            && let Some((group, _)) = state.group_of(election)
        {
            // Same query; at most the key within its scope changed.
            group.members.insert(election.clone(), key.to_owned());
            return;
        }
        state.leave(election);
        let group = state.groups.entry(target.clone()).or_insert_with(|| {
            let id = self.inner.next_group.fetch_add(1, Ordering::Relaxed);
            let link = GroupLink {
                watcher: Arc::downgrade(&self.inner),
                target: target.clone(),
                id,
            };
            // Spawned under the lock, so the task finds its group when it first answers.
            let task = tokio::spawn(run_group(link, client.clone(), self.inner.wait));
            Group {
                id,
                members: HashMap::new(),
                cache: None,
                early: HashMap::new(),
                read_at: None,
                due: tokio::time::Instant::now() + query_budget(self.inner.wait),
                task: task.abort_handle(),
            }
        });
        group.members.insert(election.clone(), key.to_owned());
        state.elections.insert(election.clone(), target);
    }

    /// Stops watching for `election`; the group's query stops when its last election leaves.
    pub fn unwatch(&self, election: &ElectionKey) {
        self.inner.state().leave(election);
    }

    /// The election's key as its group last read it: [`LockView::Unknown`] when the election
    /// is not watched, before its group's first successful read, and while its group's reads
    /// fail.
    pub fn lock(&self, election: &ElectionKey) -> LockView {
        let mut state = self.inner.state();
        match state.group_of(election) {
            Some((
                Group {
                    cache: Some(cache), ..
                },
                key,
            )) => view_of(cache.get(&key).and_then(|slot| slot.entry.as_ref())),
            _ => LockView::Unknown,
        }
    }

    /// The group whose query is most behind its schedule, and by how much, if any is behind.
    pub fn most_overdue(&self, now: tokio::time::Instant) -> Option<Duration> {
        self.inner
            .state()
            .groups
            .values()
            .filter_map(|group| now.checked_duration_since(group.due))
            .max()
    }

    /// When the election's key was last read successfully, by its group's query or
    /// directly: the moment the cached view was last known true. `None` when never.
    pub fn read_at(&self, election: &ElectionKey) -> Option<Timestamp> {
        let mut state = self.inner.state();
        let direct = state.direct_reads.get(election).copied();
        let group = state
            .group_of(election)
            .and_then(|(group, _)| group.read_at);
        direct.max(group)
    }

    /// Reads `key` directly (not blocking) and returns it. When `election` is watched on
    /// `key` through an equivalent client, the answer is merged into its group's cache
    /// (unless the cache already holds something newer), or, before the group's first
    /// answer, into that answer when it comes. The merge is not reported: the caller has
    /// the answer.
    pub async fn refresh(
        &self,
        election: &ElectionKey,
        client: &ConsulClient,
        key: &str,
    ) -> Result<LockView, ConsulError> {
        let started = Timestamp::now();
        let answer = client.kv_get(key, QueryOptions::default()).await?;
        let view = view_of(answer.value.as_ref());
        let slot = match answer.value {
            Some(entry) => Slot::present(entry),
            None => Slot {
                index: answer.meta.index,
                entry: None,
            },
        };
        let target = Target::new(client, key);
        let mut state = self.inner.state();
        if state.elections.get(election) == Some(&target) {
            state.direct_reads.insert(election.clone(), started);
        }
        if state.elections.get(election) == Some(&target)
            && let Some((group, watched)) = state.group_of(election)
            && watched == key
        {
            match &mut group.cache {
                Some(cache) => merge_direct(cache, key, slot),
                None => merge_direct(&mut group.early, key, slot),
            }
        }
        Ok(view)
    }
}

/// A group task's handle on its group.
struct GroupLink {
    watcher: Weak<Inner>,
    target: Target,
    id: u64,
}

impl GroupLink {
    /// Runs `f` on the group (if it still exists) and reports the elections it returns.
    /// `false` when the group or the watcher is gone (the task should stop).
    fn with_group(&self, f: impl FnOnce(&mut Group) -> Vec<ElectionKey>) -> bool {
        let Some(inner) = self.watcher.upgrade() else {
            return false;
        };
        let changed = {
            let mut state = inner.state();
            let Some(group) = state
                .groups
                .get_mut(&self.target)
                .filter(|group| group.id == self.id)
            else {
                return false;
            };
            f(group)
        };
        inner.report(changed);
        true
    }

    /// Stores a successful answer and reports the members whose key changed (all of them
    /// when the group was Unknown).
    fn answered(&self, answer: QueryResult<Vec<KvPair>>, change: IndexChange) -> bool {
        let arrived = Timestamp::now();
        self.with_group(|group| {
            group.read_at = Some(arrived);
            let previous = group.cache.take();
            let early = std::mem::take(&mut group.early);
            let cache = next_cache(previous.as_ref().or(Some(&early)), answer, change);
            let changed = changed_members(&group.members, previous.as_ref(), &cache);
            group.cache = Some(cache);
            changed
        })
    }

    /// Records when the task should next have made progress.
    fn expect_progress_by(&self, due: tokio::time::Instant) -> bool {
        self.with_group(|group| {
            group.due = due;
            Vec::new()
        })
    }

    /// Forgets the cache after a failed read, reporting every member if it was known.
    fn failed(&self) -> bool {
        self.with_group(|group| match group.cache.take() {
            Some(_) => group.members.keys().cloned().collect(),
            None => Vec::new(),
        })
    }
}

/// The blocking-query loop of one group; runs until the group is removed (then it is
/// aborted) or the watcher is dropped.
async fn run_group(link: GroupLink, client: ConsulClient, wait: Duration) {
    let mut watch = client.watch(wait);
    let mut failures: u32 = 0;
    loop {
        if !link.expect_progress_by(tokio::time::Instant::now() + query_budget(wait)) {
            return;
        }
        let result = watch
            .next(|options| link.target.scope.read(&client, options))
            .await;
        let retry_after = match result {
            Ok((answer, change)) if answer.meta.known_leader => {
                failures = 0;
                if !link.answered(answer, change) {
                    return;
                }
                continue;
            }
            Ok(_) => {
                tracing::warn!(scope = ?link.target.scope, "consul answered without a known cluster leader");
                None
            }
            Err(error) => {
                tracing::warn!(
                    scope = ?link.target.scope,
                    category = error.category(),
                    "consul lock watch failed: {error}"
                );
                error.retry_after()
            }
        };
        if !link.failed() {
            return;
        }
        // Once Consul answers again, read at once instead of blocking on the old index.
        watch.reset();
        let delay = BACKOFF.delay(failures, retry_after, &mut rand::rng());
        failures = failures.saturating_add(1);
        if !link.expect_progress_by(tokio::time::Instant::now() + delay + query_budget(wait)) {
            return;
        }
        tokio::time::sleep(delay).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::consul::QueryMeta;

    fn pair(key: &str, modify_index: u64, session: Option<&str>) -> KvPair {
        KvPair {
            lock_index: 1,
            key: key.to_owned(),
            flags: 0,
            value: b"v".to_vec(),
            session: session.map(str::to_owned),
            create_index: 1,
            modify_index,
        }
    }

    fn answer(index: u64, entries: Vec<KvPair>) -> QueryResult<Vec<KvPair>> {
        QueryResult {
            value: entries,
            meta: QueryMeta {
                index,
                known_leader: true,
                ..QueryMeta::default()
            },
        }
    }

    fn election(name: &str) -> ElectionKey {
        ElectionKey {
            namespace: "ns".to_owned(),
            name: name.to_owned(),
        }
    }

    #[test]
    fn keys_are_watched_through_their_first_segment() {
        assert_eq!(
            Scope::of("elector/shop/web/leader"),
            Scope::Prefix("elector/".to_owned())
        );
        assert_eq!(Scope::of("a/"), Scope::Prefix("a/".to_owned()));
        assert_eq!(Scope::of("leader"), Scope::Key("leader".to_owned()));
    }

    #[test]
    fn views_of_entries() {
        assert_eq!(view_of(None), LockView::Absent);
        let mut entry = pair("k", 5, None);
        entry.lock_index = 3;
        assert_eq!(view_of(Some(&entry)), LockView::Free { lock_index: 3 });
        entry.session = Some("s1".to_owned());
        assert_eq!(
            view_of(Some(&entry)),
            LockView::Held {
                session: "s1".to_owned(),
                lock_index: 3,
                value: Some(b"v".to_vec())
            }
        );
        entry.value.clear();
        assert!(matches!(
            view_of(Some(&entry)),
            LockView::Held { value: None, .. }
        ));
    }

    #[test]
    fn a_direct_read_newer_than_an_answer_survives_it() {
        let mut cache = next_cache(
            None,
            answer(10, vec![pair("a", 10, None)]),
            IndexChange::Advanced,
        );
        // Our own acquire at 12, read directly; the group's answer from index 11 is older.
        merge_direct(&mut cache, "a", Slot::present(pair("a", 12, Some("s1"))));
        // A deletion read directly at 13 of a key the answer still has.
        merge_direct(
            &mut cache,
            "b",
            Slot {
                index: 13,
                entry: None,
            },
        );
        let stale = answer(11, vec![pair("a", 10, None), pair("b", 11, None)]);
        let next = next_cache(Some(&cache), stale, IndexChange::Advanced);
        assert_eq!(next["a"].index, 12);
        assert_eq!(next["b"].entry, None);
        // A later answer carries the newer state itself and drops the deletion marker.
        let fresh = answer(14, vec![pair("a", 12, Some("s1"))]);
        let later = next_cache(Some(&next), fresh, IndexChange::Advanced);
        assert_eq!(later.len(), 1);
        assert_eq!(fingerprint(later.get("a")), Some((12, Some("s1"))));
    }

    #[test]
    fn an_index_going_backwards_trusts_the_answer() {
        let cache = next_cache(
            None,
            answer(50, vec![pair("a", 50, Some("s1"))]),
            IndexChange::Advanced,
        );
        let restored = answer(20, vec![pair("a", 20, None)]);
        let next = next_cache(Some(&cache), restored, IndexChange::Reset);
        assert_eq!(fingerprint(next.get("a")), Some((20, None)));
    }

    #[test]
    fn direct_reads_never_overwrite_newer_state() {
        let mut cache = next_cache(
            None,
            answer(30, vec![pair("a", 30, Some("s2"))]),
            IndexChange::Advanced,
        );
        merge_direct(&mut cache, "a", Slot::present(pair("a", 25, Some("s1"))));
        merge_direct(
            &mut cache,
            "a",
            Slot {
                index: 29,
                entry: None,
            },
        );
        assert_eq!(fingerprint(cache.get("a")), Some((30, Some("s2"))));
        merge_direct(
            &mut cache,
            "a",
            Slot {
                index: 31,
                entry: None,
            },
        );
        assert_eq!(fingerprint(cache.get("a")), None);
    }

    #[test]
    fn changes_are_presence_modify_index_and_holder() {
        let members: HashMap<ElectionKey, String> = ["same", "held", "bumped", "gone", "new"]
            .into_iter()
            .map(|name| (election(name), name.to_owned()))
            .collect();
        let before = next_cache(
            None,
            answer(
                9,
                vec![
                    pair("same", 3, None),
                    pair("held", 4, None),
                    pair("bumped", 5, Some("s1")),
                    pair("gone", 6, None),
                    pair("unwatched", 7, None),
                ],
            ),
            IndexChange::Advanced,
        );
        let after = next_cache(
            Some(&before),
            answer(
                20,
                vec![
                    pair("same", 3, None),
                    pair("held", 4, Some("s2")),
                    pair("bumped", 15, Some("s1")),
                    pair("new", 16, None),
                    pair("unwatched", 17, None),
                ],
            ),
            IndexChange::Advanced,
        );
        let mut changed = changed_members(&members, Some(&before), &after);
        changed.sort();
        let expected: Vec<ElectionKey> = ["bumped", "gone", "held", "new"]
            .into_iter()
            .map(election)
            .collect();
        assert_eq!(changed, expected);
        assert_eq!(changed_members(&members, None, &after).len(), members.len());
    }
}
