//! Watches the elections' Consul keys with a bounded number of blocking queries, keeps the
//! last answers as a cache the controller reads ([`LockWatcher::lock`]), and reports the
//! elections whose key changed.
//!
//! # Groups
//! Elections are grouped by *access* (Consul address, datacenter, Enterprise namespace and partition, ACL token) and *scope*;
//! each group runs one blocking query (one long poll, holding one connection of the
//! client's long-poll budget) and caches its answer:
//! - a key with a `/` is watched through a recursive read of its first two path segments
//!   (`elector/shop/web/leader` through `elector/shop/?recurse`; a key with one `/`, through
//!   its first segment), so the default keys of one namespace share one query, and a change
//!   returns that namespace's entries only;
//! - a key without a `/` has no prefix to share; it is watched by a single-key blocking read
//!   of its own (shared only by elections using that same key).
//!
//! A prefix under which no key exists yet answers with the index of the whole KV store
//! (Consul's rule), so its query returns after every KV write anywhere, with an empty answer
//! that reports nothing; the watch pacing bounds the rate, and the first lock key written in
//! the namespace ends it.
//!
//! # The long-poll budget
//! One query per namespace would mean 1,000 long polls for 1,000 namespaces, each holding an
//! HTTP connection for up to `wait`; Consul refuses more than `http_max_conns_per_client`
//! (200 by default) connections per client, and renewals must never queue behind long polls.
//! So one address gets at most [`LONG_POLLS_PER_ADDRESS`] groups. When a new scope would
//! exceed that, the two neighbouring scopes (in key order, within one first segment) that
//! share a string prefix are merged into one group on that prefix, preferring the merge
//! whose group has the fewest elections: Consul's prefixes are plain strings, so
//! `elector/ns-1` watches `elector/ns-1/`, `elector/ns-10/`, ... at once. 1,000 namespaces
//! `ns-0`..`ns-999` of 10 elections each, arriving in any order, end in 32 groups of at most
//! 1,110 keys (11 % of them) instead of one query returning all 10,000. The trade-off: a
//! merged group's answers return every key of its namespaces, and groups are never split
//! again while they have members (an operator restart plans from scratch). Merges never
//! cross a first path segment; slash-less keys and different tokens cannot share a query,
//! so many of those can exceed the budget.
//!
//! A merged group starts with its predecessors' caches (each complete for its old prefix),
//! so its elections keep their views and only the keys that changed are reported when it
//! first answers.
//!
//! # Reports
//! An election's key is sent on the channel as soon as an answer shows it changed
//! (presence, `ModifyIndex` or `Session`). Two things delay only the *next* query, never
//! the report of an answer received: the client's watch pacing (a small token bucket), after
//! a burst of answers, and a pause after each answer of 0.25 ms per entry it had
//! ([`answer_pause`]). The pause matters for large groups during bursts of writes: at 2,000
//! keys a group answers at most twice a second, each answer covering every write since
//! the last, instead of once per write with all 2,000 entries each time. A query parked
//! when a key changes still answers at once.
//!
//! Elections are also reported when their group's read fails after a success (every
//! election of the group becomes [`LockView::Unknown`], reported once), and when
//! reads succeed again (including the first read of a new group). Answers follow Consul's
//! blocking-index rules through [`crate::consul::BlockingWatch`]; failures back off
//! exponentially (bounded, with jitter) and re-read without blocking once Consul answers.
//! An answer from a server that knows no cluster leader counts as a failure: its data cannot
//! be confirmed.
//!
//! # Confirmations
//! Rule 2 counts a key's confirmation from the last answer covering it ([`LockWatcher::read_at`]),
//! not from the last change: a cached "held" view whose query stalled may hide a deletion.
//! So every group's queries wait at most [`effective_wait`] (2/5 of the shortest session TTL
//! among its elections, or `--lock-watch-wait` if shorter): a healthy Consul answers every
//! query, changed or not, within 0.425 of that TTL after the previous answer's pause
//! (at most `wait / 8`, so 0.475 of the TTL in all). A group whose answer is a whole TTL
//! late reports its elections once (the planner fences them), and all of them again when
//! the next answer arrives. When an election with a shorter TTL joins, the query under way
//! is replaced at once by one with the shorter wait.
//!
//! # Direct reads
//! [`LockWatcher::current`] gives a new election its view without a read of its own when
//! its group has answered, or answers within 2 seconds: only while the group's reads fail
//! or hang does an election read its key directly. A cold start of 1,000 elections thus
//! costs one read and one long poll per group (20 requests for 10 namespaces, 60 for 100),
//! not one read per election. [`LockWatcher::refresh`] reads one key directly (after the
//! operator's own acquire or release: the acquire answer carries no `LockIndex`, the
//! fencing token) and merges the result into the cache. Cache slots carry the index they
//! were read at, so an older answer of the group query never overwrites a newer direct read.
//! A reconcile that follows a write of the operator it could not read back (the answer was
//! lost, or the read after it failed) reads the key directly too, rather than take a cached
//! answer from before the write ([`crate::election::key_memory::KeyMemory::writing`]).
//!
//! # Cost
//! Processing an answer costs O(entries and elections of its group); [`LockWatcher::lock`],
//! [`LockWatcher::read_at`] and registering an election already in place are O(1), and
//! [`LockWatcher::most_overdue`] looks at the groups only.

mod shards;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use tokio::sync::{mpsc::UnboundedSender, watch};
use tokio::task::AbortHandle;

use crate::consul::{
    BlockingWatch, ConsulAddress, ConsulClient, ConsulError, IndexChange, KvEntry, KvList, KvPair,
    QueryOptions, QueryResult, RetryPolicy, Tenancy, TokenIdentity,
};
use crate::election::config::ElectionKey;
use crate::election::confirmation_pace::{answer_pause, effective_wait};
use crate::election::observe::LockView;
use shards::Scope;

/// The most blocking queries the watcher keeps open on one Consul address (see the module
/// docs); the client's long-poll connection budget is sized for it.
pub const LONG_POLLS_PER_ADDRESS: usize = 32;

/// How long [`LockWatcher::current`] waits for a new group's first answer before reading
/// the key directly.
const FIRST_ANSWER_WAIT: Duration = Duration::from_secs(2);

/// Pause between failed reads of a group: exponential from 1 s, at most 30 s, full jitter.
const BACKOFF: RetryPolicy = RetryPolicy {
    max_attempts: u32::MAX,
    base_delay: Duration::from_secs(1),
    max_delay: Duration::from_secs(30),
};

/// How a group's query is paced: what its task reads before every query.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Pace {
    /// The wait of its blocking queries ([`effective_wait`]).
    wait: Duration,
    /// The shortest TTL of its elections: an answer later than this after the previous one
    /// leaves their views unconfirmed (see [`GroupLink::unconfirmed`]).
    ttl: Option<Duration>,
}

/// The longest one (blocking) read of a group may take with the client's timeouts and
/// retries, with room to spare: a task silent for longer is stuck.
fn query_budget(wait: Duration) -> Duration {
    (wait + wait / 16 + Duration::from_secs(15)) * 4 + Duration::from_secs(30)
}

impl Scope {
    /// One read of the scope (blocking or not, as `options` say), left undecoded.
    async fn read(
        &self,
        client: &ConsulClient,
        options: QueryOptions,
    ) -> Result<QueryResult<KvList>, ConsulError> {
        match self {
            Scope::Prefix(prefix) => client.kv_list_raw(prefix, options).await,
            Scope::Key(key) => client.kv_get_raw(key, options).await,
        }
    }
}

/// Where a group's query goes and who asks.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Access {
    address: ConsulAddress,
    datacenter: Option<String>,
    tenancy: Tenancy,
    token: TokenIdentity,
}

impl Access {
    fn of(client: &ConsulClient) -> Access {
        Access {
            address: client.address().clone(),
            datacenter: client.datacenter().map(str::to_owned),
            tenancy: client.tenancy().clone(),
            token: client.token_identity(),
        }
    }
}

/// Identifies a group: its access and what it reads.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Target {
    access: Access,
    scope: Scope,
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

/// [`apply_entries`] on the entries of `list`.
#[cfg(test)]
fn apply_answer(
    cache: &mut HashMap<String, Slot>,
    list: &KvList,
    index: u64,
    change: IndexChange,
) -> Result<HashSet<String>, ConsulError> {
    apply_entries(cache, list, &list.entries()?, index, change)
}

/// Turns `cache` (the previous answer, with the direct reads since) into the cache after a
/// group answer read at `index`: the answer's entries, plus the slots of direct reads newer
/// than the answer. When the index went backwards (Consul's data was replaced, for example
/// by a snapshot restore), the answer alone is the truth. Returns the keys whose
/// [`fingerprint`] changed.
///
/// Every answer repeats every entry of the group's scope, most of them unchanged: an entry
/// whose `ModifyIndex` (Consul bumps it on every write of the key) and holder match the
/// cached one keeps its slot, undecoded and unallocated. A value that is not base64 fails
/// the whole answer, as a body that is not a list of entries does.
///
/// `entries` are those of `list`, parsed by the caller before it takes the watcher's lock: at
/// 2,000 keys a parse takes long enough to hold up every reconcile that reads a view.
fn apply_entries(
    cache: &mut HashMap<String, Slot>,
    list: &KvList,
    entries: &[KvEntry<'_>],
    index: u64,
    change: IndexChange,
) -> Result<HashSet<String>, ConsulError> {
    let keep_newer = change != IndexChange::Reset;
    // How many of the cached keys the answer names (Consul's keys are unique in an answer).
    let mut cached_and_named = 0;
    let mut unchanged = |entry: &KvEntry<'_>| {
        let slot = cache.get(entry.key.as_ref());
        cached_and_named += usize::from(slot.is_some());
        slot.is_some_and(|slot| {
            (keep_newer && slot.index > index)
                || slot.entry.as_ref().is_some_and(|cached| {
                    cached.modify_index == entry.modify_index
                        && cached.lock_index == entry.lock_index
                        && cached.flags == entry.flags
                        && cached.session.as_deref() == entry.session()
                })
        })
    };
    // Decoded before the cache changes, so an answer that fails leaves it as it was.
    let fresh: Vec<KvPair> = entries
        .iter()
        .filter(|entry| !unchanged(entry))
        .map(|entry| entry.decode(list))
        .collect::<Result<_, _>>()?;
    let mut changed = HashSet::new();
    if cached_and_named != cache.len() {
        // Some cached key is missing from the answer: it went (unless a direct read newer
        // than the answer still has it). The usual answer names every cached key and skips
        // this pass.
        let seen: HashSet<&str> = entries.iter().map(|entry| entry.key.as_ref()).collect();
        cache.retain(|key, slot| {
            let keep = seen.contains(key.as_str()) || (keep_newer && slot.index > index);
            if !keep && fingerprint(Some(slot)).is_some() {
                changed.insert(key.clone());
            }
            keep
        });
    }
    for entry in fresh {
        let key = entry.key.clone();
        let slot = Slot::present(entry);
        let before = cache.insert(key.clone(), slot);
        if fingerprint(before.as_ref()) != fingerprint(cache.get(&key)) {
            changed.insert(key);
        }
    }
    Ok(changed)
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

/// The members whose key is among `changed` (the keys whose fingerprint an answer changed;
/// `None` when there was no previous cache); a member whose key the previous cache did not
/// know (`known` says false) always counts as changed.
fn changed_members(
    members: &HashMap<ElectionKey, String>,
    changed: Option<&HashSet<String>>,
    known: impl Fn(&str) -> bool,
) -> Vec<ElectionKey> {
    members
        .iter()
        .filter(|(_, key)| match changed {
            Some(changed) if known(key) => changed.contains(key.as_str()),
            _ => true,
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
    /// Each member's session TTL, and the shortest of them.
    ttls: HashMap<ElectionKey, Duration>,
    shortest_ttl: Option<Duration>,
    /// The pace of the query task; changed when the shortest TTL changes.
    pace: watch::Sender<Pace>,
    /// `--lock-watch-wait`.
    configured_wait: Duration,
    /// An answer was overdue and the members were told their views went unconfirmed: the
    /// next answer reports them all again.
    overdue: bool,
    /// The last answer, by key; `None` until the first successful read (or a merge brought
    /// the caches of the groups it replaced) and while reads fail.
    cache: Option<HashMap<String, Slot>>,
    /// Until the group's own first answer: the prefixes its inherited `cache` is complete
    /// for (the scopes of the groups it replaced). Empty: the cache is complete for the
    /// group's scope.
    inherited: Vec<String>,
    /// Direct reads made while `cache` is `None`, merged into the next answer when newer:
    /// an answer read before the operator's own acquire must not undo it.
    early: HashMap<String, Slot>,
    /// When the cache was last known true: the last answer's arrival, or for an inherited
    /// cache the oldest of its predecessors'.
    read_at: Option<tokio::time::Instant>,
    /// The last read failed (reset by an answer).
    failing: bool,
    /// Counts the reads that ended, answered or failed: lets a new election wait for the
    /// group's first answer instead of reading its key itself.
    reads: watch::Sender<u64>,
    /// When the group's task should next have made progress (its query's longest answer
    /// time, or the end of its backoff): liveness watches that queries keep cycling.
    due: tokio::time::Instant,
    task: AbortHandle,
}

impl Group {
    /// A group with no members, whose query task starts at once.
    fn start(inner: &Arc<Inner>, client: &ConsulClient, target: &Target) -> Group {
        let id = inner.next_group.fetch_add(1, Ordering::Relaxed);
        let link = GroupLink {
            watcher: Arc::downgrade(inner),
            target: target.clone(),
            id,
        };
        let pace = watch::Sender::new(Pace {
            wait: inner.wait,
            ttl: None,
        });
        // Spawned under the state lock, so the task finds its group when it first answers.
        let task = tokio::spawn(run_group(link, client.clone(), pace.subscribe()));
        Group {
            id,
            members: HashMap::new(),
            ttls: HashMap::new(),
            shortest_ttl: None,
            pace,
            configured_wait: inner.wait,
            overdue: false,
            cache: None,
            inherited: Vec::new(),
            early: HashMap::new(),
            read_at: None,
            failing: false,
            reads: watch::Sender::new(0),
            due: tokio::time::Instant::now() + query_budget(inner.wait),
            task: task.abort_handle(),
        }
    }

    /// Adds or updates `election` with `key` and its session `ttl`, shortening the query's
    /// wait when the group's shortest TTL shrinks. O(1) unless the member with the shortest
    /// TTL lengthened it.
    fn join(&mut self, election: &ElectionKey, key: &str, ttl: Duration) {
        self.members.insert(election.clone(), key.to_owned());
        let old = self.ttls.insert(election.clone(), ttl);
        if old == Some(ttl) {
            return;
        }
        let shortest = match self.shortest_ttl {
            Some(shortest) if ttl <= shortest => Some(ttl),
            Some(shortest) if old != Some(shortest) => Some(shortest),
            _ => self.ttls.values().min().copied(),
        };
        self.set_shortest_ttl(shortest);
    }

    /// Removes `election`.
    fn leave(&mut self, election: &ElectionKey) {
        self.members.remove(election);
        if self.ttls.remove(election) == self.shortest_ttl {
            self.set_shortest_ttl(self.ttls.values().min().copied());
        }
    }

    fn set_shortest_ttl(&mut self, shortest: Option<Duration>) {
        self.shortest_ttl = shortest;
        let pace = Pace {
            wait: effective_wait(self.configured_wait, shortest),
            ttl: shortest,
        };
        self.pace.send_if_modified(|current| {
            let changed = *current != pace;
            *current = pace;
            changed
        });
    }

    /// Whether the group's own first answer is still to come (and no read failed yet).
    fn first_answer_pending(&self) -> bool {
        (self.cache.is_none() || !self.inherited.is_empty()) && !self.failing
    }

    /// Whether the cache knows `key` (as present or absent).
    fn knows(&self, key: &str) -> bool {
        self.cache.is_some()
            && (self.inherited.is_empty()
                || self
                    .inherited
                    .iter()
                    .any(|prefix| key.starts_with(prefix.as_str())))
    }

    /// The cached view of `key`.
    fn view(&self, key: &str) -> LockView {
        match &self.cache {
            Some(cache) if self.knows(key) => {
                view_of(cache.get(key).and_then(|slot| slot.entry.as_ref()))
            }
            _ => LockView::Unknown,
        }
    }

    /// Takes over the members, cache and direct reads of `old`, the group that watched
    /// `old_prefix` (which this group's scope covers).
    fn inherit(&mut self, old: Group, old_prefix: String) {
        old.task.abort();
        self.members.extend(old.members);
        self.ttls.extend(old.ttls);
        let shortest = match (self.shortest_ttl, old.shortest_ttl) {
            (Some(ours), Some(theirs)) => Some(ours.min(theirs)),
            (ours, theirs) => ours.or(theirs),
        };
        self.set_shortest_ttl(shortest);
        if let Some(old_cache) = old.cache {
            let covered = match old.inherited.is_empty() {
                true => vec![old_prefix],
                false => old.inherited,
            };
            self.cache.get_or_insert_default().extend(old_cache);
            self.inherited.extend(covered);
            self.read_at = match (self.read_at, old.read_at) {
                (Some(ours), Some(theirs)) => Some(ours.min(theirs)),
                (ours, theirs) => ours.or(theirs),
            };
        }
        self.early.extend(old.early);
        if let Some(cache) = &mut self.cache {
            // Direct reads survive in the cache once there is one (next_cache keeps them).
            for (key, slot) in self.early.drain() {
                merge_direct(cache, &key, slot);
            }
        }
    }
}

#[derive(Default)]
struct State {
    /// The group of each watched election (its key is in the group's members).
    elections: HashMap<ElectionKey, Target>,
    groups: HashMap<Target, Group>,
    /// The prefix scopes of each access's groups: prefix-free, so a key has at most one.
    prefixes: HashMap<Access, BTreeSet<String>>,
    /// When each election's key was last read directly ([`LockWatcher::refresh`]).
    direct_reads: HashMap<ElectionKey, tokio::time::Instant>,
}

impl State {
    /// The group of `election` and the key it watches there.
    fn group_of(&mut self, election: &ElectionKey) -> Option<(&mut Group, String)> {
        let group = self.groups.get_mut(self.elections.get(election)?)?;
        let key = group.members.get(election)?.clone();
        Some((group, key))
    }

    /// The existing group whose scope covers `key`.
    fn covering(&self, access: &Access, key: &str) -> Option<Target> {
        let scope = match Scope::finest(key) {
            Scope::Key(key) => Scope::Key(key),
            Scope::Prefix(_) => {
                let prefixes = self.prefixes.get(access)?;
                Scope::Prefix(shards::covering(prefixes, key)?.clone())
            }
        };
        let target = Target {
            access: access.clone(),
            scope,
        };
        self.groups.contains_key(&target).then_some(target)
    }

    /// The target of a new group for `key`, which no group covers: its finest scope, or,
    /// when the address has no long poll to spare, a merge of neighbouring scopes.
    fn new_target(&self, access: &Access, key: &str) -> Target {
        let finest = Scope::finest(key);
        let scope = match &finest {
            Scope::Prefix(new) if self.queries_to(&access.address) >= LONG_POLLS_PER_ADDRESS => {
                let weights: BTreeMap<String, usize> = self
                    .prefixes
                    .get(access)
                    .into_iter()
                    .flatten()
                    .map(|prefix| {
                        let target = Target {
                            access: access.clone(),
                            scope: Scope::Prefix(prefix.clone()),
                        };
                        let weight = self.groups.get(&target).map_or(0, |g| g.members.len());
                        (prefix.clone(), weight)
                    })
                    .collect();
                match shards::merge_point(&weights, new) {
                    Some(merged) => Scope::Prefix(merged),
                    None => finest,
                }
            }
            _ => finest,
        };
        Target {
            access: access.clone(),
            scope,
        }
    }

    /// How many groups query `address`.
    fn queries_to(&self, address: &ConsulAddress) -> usize {
        self.groups
            .keys()
            .filter(|target| target.access.address == *address)
            .count()
    }

    /// Starts the group on `target`, which takes over the groups its scope covers.
    fn start(&mut self, inner: &Arc<Inner>, client: &ConsulClient, target: &Target) {
        let mut group = Group::start(inner, client, target);
        if let Scope::Prefix(prefix) = &target.scope {
            let prefixes = self.prefixes.entry(target.access.clone()).or_default();
            for old_prefix in shards::absorbed_by(prefixes, prefix) {
                prefixes.remove(&old_prefix);
                let old_target = Target {
                    access: target.access.clone(),
                    scope: Scope::Prefix(old_prefix.clone()),
                };
                if let Some(old) = self.groups.remove(&old_target) {
                    for election in old.members.keys() {
                        self.elections.insert(election.clone(), target.clone());
                    }
                    group.inherit(old, old_prefix);
                }
            }
            prefixes.insert(prefix.clone());
        }
        self.groups.insert(target.clone(), group);
    }

    /// Removes `election` from its group, stopping the group's query when it was the last
    /// member.
    fn leave(&mut self, election: &ElectionKey) {
        self.direct_reads.remove(election);
        let Some(target) = self.elections.remove(election) else {
            return;
        };
        if let Some(group) = self.groups.get_mut(&target) {
            group.leave(election);
            if group.members.is_empty() {
                group.task.abort();
                self.groups.remove(&target);
                if let (Scope::Prefix(prefix), Some(prefixes)) =
                    (&target.scope, self.prefixes.get_mut(&target.access))
                {
                    prefixes.remove(prefix);
                    if prefixes.is_empty() {
                        self.prefixes.remove(&target.access);
                    }
                }
            }
        }
    }
}

struct Inner {
    changes: UnboundedSender<ElectionKey>,
    /// Marked at every report, for [`LockWatcher::subscribe`].
    reported: watch::Sender<()>,
    wait: Duration,
    state: Mutex<State>,
    next_group: AtomicU64,
}

impl Inner {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn report(&self, elections: Vec<ElectionKey>) {
        if !elections.is_empty() {
            self.reported.send_replace(());
        }
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
                reported: watch::Sender::new(()),
                wait,
                state: Mutex::new(State::default()),
                next_group: AtomicU64::new(0),
            }),
        }
    }

    /// Watches `key` for `election`, whose session TTL is `ttl`, through `client`.
    /// Idempotent; watching another key, or through a client with another address,
    /// datacenter or token, moves the election to that key's group (stopping the old group's
    /// query if it was the last member). The group's queries wait at most
    /// [`effective_wait`] for its shortest TTL. Must be called within a tokio runtime (a new
    /// group spawns its query task).
    pub fn watch(&self, election: &ElectionKey, client: &ConsulClient, key: &str, ttl: Duration) {
        let access = Access::of(client);
        let mut state = self.inner.state();
        if let Some(target) = state.elections.get(election)
            && target.access == access
            && target.scope.covers(key)
            && let Some((group, _)) = state.group_of(election)
        {
            // Same query; at most the key within its scope, or the TTL, changed.
            group.join(election, key, ttl);
            return;
        }
        state.leave(election);
        let target = match state.covering(&access, key) {
            Some(target) => target,
            None => {
                let target = state.new_target(&access, key);
                state.start(&self.inner, client, &target);
                if target.scope.covers(key) {
                    target
                } else {
                    // Merging made room: the key's own scope gets the freed query.
                    let own = Target {
                        access,
                        scope: Scope::finest(key),
                    };
                    state.start(&self.inner, client, &own);
                    own
                }
            }
        };
        if let Some(group) = state.groups.get_mut(&target) {
            group.join(election, key, ttl);
            state.elections.insert(election.clone(), target);
        }
    }

    /// A receiver marked changed whenever a key (of any election) is reported changed after
    /// this call: for a task that waits on something else and must look at the locks again
    /// when they change.
    pub fn subscribe(&self) -> watch::Receiver<()> {
        self.inner.reported.subscribe()
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
            Some((group, key)) => group.view(&key),
            None => LockView::Unknown,
        }
    }

    /// The number of blocking queries running.
    pub fn queries(&self) -> usize {
        self.inner.state().groups.len()
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
    /// directly: the moment (monotonic clock) the cached view was last known true. `None`
    /// when never.
    pub fn read_at(&self, election: &ElectionKey) -> Option<tokio::time::Instant> {
        let mut state = self.inner.state();
        let direct = state.direct_reads.get(election).copied();
        let group = state
            .group_of(election)
            .and_then(|(group, _)| group.read_at);
        direct.max(group)
    }

    /// The election's key for a reconcile that starts: the cached view when its group knows
    /// it; else, when the group's first read is under way, that read's answer (waiting at
    /// most a few seconds); else a direct read ([`LockWatcher::refresh`]). So the elections
    /// of a new group cost one read of the group, not one read each.
    pub async fn current(
        &self,
        election: &ElectionKey,
        client: &ConsulClient,
        key: &str,
    ) -> Result<LockView, ConsulError> {
        let deadline = tokio::time::Instant::now() + FIRST_ANSWER_WAIT;
        loop {
            let mut reads = {
                let mut state = self.inner.state();
                match state.group_of(election) {
                    Some((group, watched)) if watched == key => match group.view(key) {
                        LockView::Unknown if group.first_answer_pending() => {
                            group.reads.subscribe()
                        }
                        LockView::Unknown => break,
                        view => return Ok(view),
                    },
                    _ => break,
                }
            };
            // A read ended, or a merge replaced the group (its channel closed): look again.
            if tokio::time::timeout_at(deadline, reads.changed())
                .await
                .is_err()
            {
                break;
            }
        }
        self.refresh(election, client, key).await
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
        let started = tokio::time::Instant::now();
        let answer = client.kv_get(key, QueryOptions::default()).await?;
        let view = view_of(answer.value.as_ref());
        let slot = match answer.value {
            Some(entry) => Slot::present(entry),
            None => Slot {
                index: answer.meta.index,
                entry: None,
            },
        };
        let access = Access::of(client);
        let mut state = self.inner.state();
        if state
            .elections
            .get(election)
            .is_none_or(|target| target.access != access)
        {
            return Ok(view);
        }
        let Some((group, watched)) = state.group_of(election) else {
            return Ok(view);
        };
        if watched != key {
            return Ok(view);
        }
        match &mut group.cache {
            Some(cache) => merge_direct(cache, key, slot),
            None => merge_direct(&mut group.early, key, slot),
        }
        state.direct_reads.insert(election.clone(), started);
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
    /// when the group was Unknown). `Ok(Some(entries))`, the answer's length, while the group
    /// lives; `Ok(None)` when the group or the watcher is gone; an error, changing nothing,
    /// when the answer does not decode.
    fn answered(
        &self,
        answer: QueryResult<KvList>,
        change: IndexChange,
    ) -> Result<Option<usize>, ConsulError> {
        let arrived = tokio::time::Instant::now();
        // Parsed before the lock is taken; an answer that does not parse changes nothing.
        let entries = answer.value.entries()?;
        let mut failure = None;
        let alive = self.with_group(|group| {
            let had_cache = group.cache.is_some();
            let mut cache = match group.cache.take() {
                Some(cache) => cache,
                None => std::mem::take(&mut group.early),
            };
            let changed_keys = match apply_entries(
                &mut cache,
                &answer.value,
                &entries,
                answer.meta.index,
                change,
            ) {
                Ok(changed) => changed,
                Err(error) => {
                    // The cache (or the early reads) stay as they were.
                    match had_cache {
                        true => group.cache = Some(cache),
                        false => group.early = cache,
                    }
                    failure = Some(error);
                    return Vec::new();
                }
            };
            group.read_at = Some(arrived);
            group.failing = false;
            let inherited = std::mem::take(&mut group.inherited);
            let known = |key: &str| {
                inherited.is_empty()
                    || inherited
                        .iter()
                        .any(|prefix| key.starts_with(prefix.as_str()))
            };
            let changed = match std::mem::take(&mut group.overdue) {
                // Their views went unconfirmed meanwhile: each is confirmed (or not) again.
                true => group.members.keys().cloned().collect(),
                // Nothing changed, and every member's key was known: nobody to tell (without
                // a look at each of the group's members).
                false if had_cache && changed_keys.is_empty() && inherited.is_empty() => Vec::new(),
                false => changed_members(&group.members, had_cache.then_some(&changed_keys), known),
            };
            group.cache = Some(cache);
            group.reads.send_modify(|reads| *reads += 1);
            changed
        });
        match failure {
            Some(error) => Err(error),
            None => Ok(alive.then_some(entries.len())),
        }
    }

    /// Records when the task should next have made progress.
    fn expect_progress_by(&self, due: tokio::time::Instant) -> bool {
        self.with_group(|group| {
            group.due = due;
            Vec::new()
        })
    }

    /// An answer is overdue by a TTL of the group's: reports every member whose view the
    /// cache still holds (their views are no longer confirmed; the planner decides), once
    /// per overdue answer.
    fn unconfirmed(&self) -> bool {
        self.with_group(|group| match group.cache.is_some() && !group.overdue {
            true => {
                group.overdue = true;
                group.members.keys().cloned().collect()
            }
            false => Vec::new(),
        })
    }

    /// Forgets the cache after a failed read, reporting every member if it was known.
    fn failed(&self) -> bool {
        self.with_group(|group| {
            group.failing = true;
            group.inherited.clear();
            group.reads.send_modify(|reads| *reads += 1);
            match group.cache.take() {
                Some(_) => group.members.keys().cloned().collect(),
                None => Vec::new(),
            }
        })
    }
}

/// How waiting for one answer of a group's query ended.
enum Outcome {
    /// The query ended.
    Ended(Result<(QueryResult<KvList>, IndexChange), ConsulError>),
    /// The wait was shortened: the query was dropped, a new one starts.
    Restart,
    /// The group or the watcher is gone.
    Stop,
}

/// Runs one query of the group, telling the members once their views go unconfirmed
/// (nothing answered by `confirm_by`, which is then cleared) and dropping the query when the
/// pace's wait shortens (an election with a shorter TTL joined).
async fn one_answer(
    link: &GroupLink,
    client: &ConsulClient,
    watch: &mut BlockingWatch,
    pace: &mut watch::Receiver<Pace>,
    confirm_by: &mut Option<tokio::time::Instant>,
) -> Outcome {
    // Only a query that blocks is worth replacing: a non-blocking read answers at once.
    let wait = watch
        .options()
        .blocking
        .filter(|b| b.index > 0)
        .map(|b| b.wait);
    let query = watch.next(|options| link.target.scope.read(client, options));
    tokio::pin!(query);
    loop {
        let overdue = async {
            match *confirm_by {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            result = &mut query => return Outcome::Ended(result),
            () = overdue => {
                if !link.unconfirmed() {
                    return Outcome::Stop;
                }
                *confirm_by = None;
            }
            Ok(()) = pace.changed() => {
                if wait.is_some_and(|wait| pace.borrow().wait < wait) {
                    return Outcome::Restart;
                }
            }
        }
    }
}

/// The blocking-query loop of one group; runs until the group is removed (then it is
/// aborted) or the watcher is dropped.
async fn run_group(link: GroupLink, client: ConsulClient, mut pace: watch::Receiver<Pace>) {
    let mut watch = client.watch(pace.borrow_and_update().wait);
    let mut failures: u32 = 0;
    // When the members' views go unconfirmed unless an answer arrives first: a TTL of the
    // group's after the last answer (or the task's start).
    let mut confirm_by: Option<tokio::time::Instant> = None;
    loop {
        let current = *pace.borrow_and_update();
        watch.set_wait(current.wait);
        let now = tokio::time::Instant::now();
        confirm_by = confirm_by.or(current.ttl.map(|ttl| now + ttl));
        if !link.expect_progress_by(now + query_budget(current.wait)) {
            return;
        }
        let result = match one_answer(&link, &client, &mut watch, &mut pace, &mut confirm_by).await
        {
            Outcome::Ended(result) => result,
            Outcome::Restart => continue,
            Outcome::Stop => return,
        };
        let retry_after = match result {
            Ok((answer, change)) if answer.meta.known_leader => {
                match link.answered(answer, change) {
                    Ok(Some(entries)) => {
                        failures = 0;
                        let now = tokio::time::Instant::now();
                        confirm_by = current.ttl.map(|ttl| now + ttl);
                        watch.hold_next_until(now + answer_pause(entries, current.wait));
                        continue;
                    }
                    Ok(None) => return,
                    Err(error) => {
                        tracing::warn!(
                            scope = ?link.target.scope,
                            category = error.category(),
                            "consul lock watch answer did not decode: {error}"
                        );
                        error.retry_after()
                    }
                }
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
        let due = tokio::time::Instant::now() + delay + query_budget(current.wait);
        if !link.expect_progress_by(due) {
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

    /// The cache after `answer`, from a copy of `previous`, and the keys that changed.
    fn next_cache_and_changes(
        previous: Option<&HashMap<String, Slot>>,
        answer: QueryResult<Vec<KvPair>>,
        change: IndexChange,
    ) -> (HashMap<String, Slot>, HashSet<String>) {
        let mut cache = previous.cloned().unwrap_or_default();
        let list = KvList::from_pairs(
            &answer.value,
            crate::consul::ErrorContext::new("kv list", "t"),
        );
        let changed = apply_answer(&mut cache, &list, answer.meta.index, change).unwrap();
        (cache, changed)
    }

    fn next_cache(
        previous: Option<&HashMap<String, Slot>>,
        answer: QueryResult<Vec<KvPair>>,
        change: IndexChange,
    ) -> HashMap<String, Slot> {
        next_cache_and_changes(previous, answer, change).0
    }

    fn election(name: &str) -> ElectionKey {
        ElectionKey {
            namespace: "ns".to_owned(),
            name: name.to_owned(),
        }
    }

    /// The moment every test group was last read.
    fn read_time() -> tokio::time::Instant {
        static AT: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
        tokio::time::Instant::from_std(*AT.get_or_init(std::time::Instant::now))
    }

    /// A group without a query task of its own (a finished dummy stands in).
    fn group(cache: Option<HashMap<String, Slot>>, early: HashMap<String, Slot>) -> Group {
        Group {
            id: 0,
            members: HashMap::new(),
            ttls: HashMap::new(),
            shortest_ttl: None,
            pace: watch::Sender::new(Pace {
                wait: Duration::from_secs(60),
                ttl: None,
            }),
            configured_wait: Duration::from_secs(60),
            overdue: false,
            cache,
            inherited: Vec::new(),
            early,
            read_at: Some(read_time()),
            failing: false,
            reads: watch::Sender::new(0),
            due: tokio::time::Instant::now(),
            task: tokio::spawn(async {}).abort_handle(),
        }
    }

    #[tokio::test]
    async fn a_merged_group_knows_what_its_predecessors_knew_and_keeps_direct_reads() {
        let slots = |entries: &[(&str, u64)]| -> HashMap<String, Slot> {
            entries
                .iter()
                .map(|(key, index)| ((*key).to_owned(), Slot::present(pair(key, *index, None))))
                .collect()
        };
        // a/ never answered but saw a direct read; b/ answered.
        let unanswered = group(None, slots(&[("e/a/x", 12)]));
        let answered = group(Some(slots(&[("e/b/y", 5)])), HashMap::new());
        let mut merged = group(None, HashMap::new());
        merged.read_at = None;
        merged.inherit(unanswered, "e/a/".to_owned());
        merged.inherit(answered, "e/b/".to_owned());
        assert_eq!(merged.inherited, vec!["e/b/".to_owned()]);
        assert_eq!(merged.read_at, Some(read_time()));
        assert!(merged.first_answer_pending());
        assert_eq!(merged.view("e/b/y"), LockView::Free { lock_index: 1 });
        assert_eq!(merged.view("e/b/gone"), LockView::Absent);
        assert_eq!(merged.view("e/a/x"), LockView::Unknown, "a/ was never read");
        // The direct read moved into the cache, so an older answer keeps it.
        let next = next_cache(
            merged.cache.as_ref(),
            answer(10, vec![pair("e/b/y", 5, None)]),
            IndexChange::Advanced,
        );
        assert_eq!(fingerprint(next.get("e/a/x")), Some((12, None)));
    }

    #[tokio::test]
    async fn the_shortest_ttl_of_the_members_paces_the_group() {
        let secs = Duration::from_secs;
        let mut g = group(None, HashMap::new());
        let pace = g.pace.subscribe();
        g.join(&election("a"), "k/a", secs(30));
        assert_eq!(g.shortest_ttl, Some(secs(30)));
        assert_eq!(pace.borrow().wait, secs(12));
        g.join(&election("b"), "k/b", secs(10));
        g.join(&election("c"), "k/c", secs(20));
        assert_eq!(
            *pace.borrow(),
            Pace {
                wait: secs(4),
                ttl: Some(secs(10))
            }
        );
        // The shortest lengthens its TTL: the next shortest paces.
        g.join(&election("b"), "k/b", secs(40));
        assert_eq!(g.shortest_ttl, Some(secs(20)));
        g.leave(&election("c"));
        assert_eq!(g.shortest_ttl, Some(secs(30)));
        g.leave(&election("a"));
        g.leave(&election("b"));
        assert_eq!(
            *pace.borrow(),
            Pace {
                wait: secs(60),
                ttl: None
            }
        );
        // A merge paces by the shortest of both.
        let mut other = group(None, HashMap::new());
        other.join(&election("d"), "k/d", secs(15));
        g.join(&election("e"), "k/e", secs(25));
        g.inherit(other, "k/".to_owned());
        assert_eq!(
            *pace.borrow(),
            Pace {
                wait: secs(6),
                ttl: Some(secs(15))
            }
        );
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
        let (after, changed_keys) = next_cache_and_changes(
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
        let mut changed = changed_members(&members, Some(&changed_keys), |_| true);
        changed.sort();
        let expected: Vec<ElectionKey> = ["bumped", "gone", "held", "new"]
            .into_iter()
            .map(election)
            .collect();
        assert_eq!(changed, expected);
        assert_eq!(
            changed_members(&members, None, |_| true).len(),
            members.len()
        );
        // Keys the previous cache did not cover count as changed.
        let unknown = changed_members(&members, Some(&changed_keys), |key| key != "same");
        assert_eq!(unknown.len(), expected.len() + 1);
        // An unchanged entry keeps its slot; a changed one is decoded anew.
        assert_eq!(after["same"], before["same"]);
        assert_eq!(fingerprint(after.get("held")), Some((4, Some("s2"))));
    }

    #[test]
    fn a_key_replaced_by_another_in_an_answer_of_the_same_size_is_gone() {
        let (mut cache, _) = next_cache_and_changes(
            None,
            answer(10, vec![pair("a", 10, None), pair("b", 10, None)]),
            IndexChange::Advanced,
        );
        let (after, changed) = next_cache_and_changes(
            Some(&cache),
            answer(11, vec![pair("a", 10, None), pair("c", 11, None)]),
            IndexChange::Advanced,
        );
        assert!(!after.contains_key("b"));
        assert_eq!(changed, HashSet::from(["b".to_owned(), "c".to_owned()]));
        // Every cached key named again, unchanged: nothing changes, nothing goes.
        cache.clone_from(&after);
        let (again, changed) = next_cache_and_changes(
            Some(&cache),
            answer(12, vec![pair("a", 10, None), pair("c", 11, None)]),
            IndexChange::Advanced,
        );
        assert!(changed.is_empty());
        assert_eq!(again, after);
    }

    #[test]
    fn an_answer_that_does_not_decode_changes_nothing() {
        let mut cache = next_cache(
            None,
            answer(10, vec![pair("a", 10, None)]),
            IndexChange::Advanced,
        );
        let before = cache.clone();
        let context = crate::consul::ErrorContext::new("kv list", "t");
        let body = r#"[{"Key":"a","ModifyIndex":11,"Value":"!!"}]"#;
        let list = KvList::from_json(body, context.clone());
        assert!(apply_answer(&mut cache, &list, 11, IndexChange::Advanced).is_err());
        assert_eq!(cache, before);
        let list = KvList::from_json(r#"{"Key":"a"}"#, context.clone());
        assert!(apply_answer(&mut cache, &list, 11, IndexChange::Advanced).is_err());
        // Escaped strings decode too (they cannot be borrowed from the body).
        let body =
            r#"[{"Key":"a\u002fb","ModifyIndex":12,"Value":"dj\u0045=","Session":"s\u0031"}]"#;
        let list = KvList::from_json(body, context);
        let changed = apply_answer(&mut cache, &list, 12, IndexChange::Advanced).unwrap();
        assert_eq!(changed.len(), 2, "a went, a/b came");
        let entry = cache["a/b"].entry.clone().unwrap();
        assert_eq!(
            (entry.value, entry.session),
            (b"v1".to_vec(), Some("s1".to_owned()))
        );
    }
}
