//! Watches every pod and LeaderElection of one scenario (cluster-wide, so any number of
//! namespaces costs two watches) and keeps, per election, who carries the leader label and
//! what the status says; records every role-label change and status change with the time
//! its watch event arrived; and checks the safety rules as the history arrives.
//!
//! Events of one watch arrive in resourceVersion order, each carrying one object, so
//! counting leader labels per election after every event sees every resourceVersion the
//! API server exposed, in O(1) per event however many pods there are.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::pin::pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use futures::{StreamExt, stream};
use k8s_openapi::api::core::v1::Pod;
use kube::api::DynamicObject;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::sandbox::objects::{LEADER, ROLE_LABEL, election_resource};
use crate::sandbox::snapshot::{ElectionState, LastSwitchover, SwitchoverState};

/// The pod label naming the election a bench pod is a candidate of (its selector).
pub(crate) const ELECTION_LABEL: &str = "app";
/// The annotation with the leader's fencing token.
const TOKEN_ANNOTATION: &str = "elector.dev/fencing-token";

/// `(namespace, name)`.
pub(crate) type Key = (String, String);

/// A role-label change of one pod, or the removal of a labelled pod.
#[derive(Debug, Clone)]
pub(crate) struct LabelChange {
    /// When the watch event arrived.
    pub(crate) at: Instant,
    /// The election `(namespace, name)`.
    pub(crate) election: Key,
    /// The pod.
    pub(crate) pod: String,
    /// The role label before.
    pub(crate) from: Option<String>,
    /// The role label after (`None` also when the pod is gone).
    pub(crate) to: Option<String>,
}

impl LabelChange {
    /// Whether this change made `pod` leader.
    pub(crate) fn made_leader(&self) -> bool {
        self.to.as_deref() == Some(LEADER)
    }
}

/// A change of an election's switchover request annotation or `status.lastSwitchover`.
#[derive(Debug, Clone)]
pub(crate) struct SwitchoverChange {
    /// When the watch event arrived.
    pub(crate) at: Instant,
    /// The election.
    pub(crate) election: Key,
    /// What it shows now.
    pub(crate) switchover: SwitchoverState,
}

/// A change of an election's status leader, fencing token or transitions.
#[derive(Debug, Clone)]
pub(crate) struct StatusChange {
    /// When the watch event arrived.
    pub(crate) at: Instant,
    /// The election.
    pub(crate) election: Key,
    /// What it says now.
    pub(crate) status: ElectionState,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct PodEntry {
    election: String,
    role: Option<String>,
    token: Option<u64>,
}

impl PodEntry {
    fn is_leader(&self) -> bool {
        self.role.as_deref() == Some(LEADER)
    }
}

/// One election as observed.
#[derive(Debug, Clone, Default)]
pub(crate) struct ElectionEntry {
    /// Whether the LeaderElection object exists.
    pub(crate) exists: bool,
    /// Its status.
    pub(crate) status: ElectionState,
    /// The pods labelled leader now.
    pub(crate) leaders: BTreeSet<String>,
    /// Candidate pods now.
    pub(crate) pods: usize,
    max_status_token: u64,
    max_pod_token: u64,
    converged: bool,
}

impl ElectionEntry {
    /// The leader when exactly one pod is labelled leader and the status names it.
    pub(crate) fn settled_leader(&self) -> Option<&str> {
        let leader = self.leaders.first().filter(|_| self.leaders.len() == 1)?;
        (self.exists && self.status.leader.as_deref() == Some(leader.as_str()))
            .then_some(leader.as_str())
    }
}

/// Everything observed so far.
#[derive(Debug, Default)]
pub(crate) struct State {
    pods: HashMap<Key, PodEntry>,
    /// Every election, by `(namespace, name)`.
    pub(crate) elections: HashMap<Key, ElectionEntry>,
    existing: usize,
    converged: usize,
    /// Since when every existing election has had a settled leader (see
    /// [`ElectionEntry::settled_leader`]); `None` while one has not.
    pub(crate) converged_since: Option<Instant>,
    /// Every role-label change, in arrival order.
    pub(crate) label_changes: Vec<LabelChange>,
    /// Every status change, in arrival order.
    pub(crate) status_changes: Vec<StatusChange>,
    /// Every switchover request and outcome change, in arrival order.
    pub(crate) switchover_changes: Vec<SwitchoverChange>,
    /// Safety violations: two leaders at once, a fencing token going backwards.
    pub(crate) violations: Vec<String>,
    /// Times a watch had to re-list (the history may have lost versions then).
    pub(crate) gaps: usize,
    pod_lists: usize,
    election_lists: usize,
    relisted_pods: Option<HashSet<Key>>,
    relisted_elections: Option<HashSet<Key>>,
}

impl State {
    /// How many elections exist, and how many of them have a settled leader.
    pub(crate) fn counts(&self) -> (usize, usize) {
        (self.existing, self.converged)
    }

    /// How many of the scenario's pods exist.
    pub(crate) fn pod_count(&self) -> usize {
        self.pods.len()
    }

    /// One line for failure messages.
    pub(crate) fn summary(&self) -> String {
        let two = self
            .elections
            .values()
            .filter(|e| e.leaders.len() > 1)
            .count();
        let none = self
            .elections
            .values()
            .filter(|e| e.exists && e.leaders.is_empty())
            .count();
        format!(
            "{} elections, {} settled, {none} without a leader label, {two} with several, \
             {} pods",
            self.existing,
            self.converged,
            self.pods.len()
        )
    }

    /// Every session the elections' statuses name.
    pub(crate) fn sessions(&self) -> BTreeSet<String> {
        self.elections
            .values()
            .filter_map(|e| e.status.session.clone())
            .collect()
    }

    /// The decision on the switchover request to `to` of `election` made after change
    /// `since` of [`Self::switchover_changes`], when `before` was the election's
    /// `status.lastSwitchover`: the first change after one that shows the request pending
    /// that shows it decided (see [`SwitchoverState::decided`]) with a record other than
    /// `before`. The operator may remove the annotation before it records the outcome: the
    /// record still shown then is an earlier request's, which may have had the same target.
    pub(crate) fn switchover_decided(
        &self,
        election: &Key,
        since: usize,
        to: &str,
        before: &LastSwitchover,
    ) -> Option<&SwitchoverChange> {
        let mut changes = self
            .switchover_changes
            .get(since..)?
            .iter()
            .filter(|c| &c.election == election);
        changes.find(|c| c.switchover.requested.as_deref() == Some(to))?;
        changes.find(|c| c.switchover.decided(to).is_some() && c.switchover.last != *before)
    }

    fn election(&mut self, key: &Key) -> &mut ElectionEntry {
        self.elections.entry(key.clone()).or_default()
    }

    /// Re-evaluates whether `key` is settled and keeps the counts and `converged_since`.
    fn reconcile(&mut self, key: &Key, at: Instant) {
        let entry = self.election(key);
        let settled = entry.settled_leader().is_some();
        let was = std::mem::replace(&mut entry.converged, settled);
        match (was, settled) {
            (false, true) => self.converged += 1,
            (true, false) => self.converged -= 1,
            _ => {}
        }
        let all = self.existing > 0 && self.converged == self.existing;
        self.converged_since = match (all, self.converged_since) {
            (true, None) => Some(at),
            (true, since) => since,
            (false, _) => None,
        };
    }

    fn apply_pod(&mut self, key: Key, pod: Option<PodEntry>, at: Instant) {
        let old = match &pod {
            Some(new) => self.pods.insert(key.clone(), new.clone()),
            None => self.pods.remove(&key),
        };
        if old == pod {
            return;
        }
        let Some(group) = pod.as_ref().or(old.as_ref()).map(|p| p.election.clone()) else {
            return;
        };
        let election = (key.0.clone(), group);
        let (name, old_role) = (key.1.clone(), old.as_ref().and_then(|p| p.role.clone()));
        let new_role = pod.as_ref().and_then(|p| p.role.clone());
        if old_role != new_role {
            self.label_changes.push(LabelChange {
                at,
                election: election.clone(),
                pod: name.clone(),
                from: old_role,
                to: new_role,
            });
        }
        let entry = self.election(&election);
        entry.pods = entry.pods + usize::from(old.is_none()) - usize::from(pod.is_none());
        if !pod.as_ref().is_some_and(PodEntry::is_leader) {
            entry.leaders.remove(&name);
        } else if let Some(pod) = &pod {
            entry.leaders.insert(name.clone());
            let newly = !old
                .as_ref()
                .is_some_and(|o| o.is_leader() && o.token == pod.token);
            let mut violations = Vec::new();
            if entry.leaders.len() > 1 {
                violations.push(format!(
                    "{}/{}: pods {:?} labelled leader at once",
                    election.0, election.1, entry.leaders
                ));
            }
            if let Some(token) = pod.token.filter(|_| newly) {
                if token < entry.max_pod_token {
                    violations.push(format!(
                        "{}/{}: leader {name} labelled with fencing token {token} after {}",
                        election.0, election.1, entry.max_pod_token
                    ));
                }
                entry.max_pod_token = entry.max_pod_token.max(token);
            }
            self.violations.extend(violations);
        }
        self.reconcile(&election, at);
    }

    fn apply_election(&mut self, key: Key, status: Option<ElectionState>, at: Instant) {
        let entry = self.election(&key);
        let existed = std::mem::replace(&mut entry.exists, status.is_some());
        let status = status.unwrap_or_default();
        let relevant = |s: &ElectionState| (s.leader.clone(), s.token, s.transitions);
        let changed = relevant(&entry.status) != relevant(&status);
        let switchover_changed = entry.status.switchover != status.switchover;
        let mut violation = None;
        if let Some(token) = status.token {
            if token < entry.max_status_token {
                violation = Some(format!(
                    "{}/{}: status.fencingToken went from {} back to {token}",
                    key.0, key.1, entry.max_status_token
                ));
            }
            entry.max_status_token = entry.max_status_token.max(token);
        }
        entry.status = status.clone();
        let exists = entry.exists;
        self.existing =
            self.existing + usize::from(exists && !existed) - usize::from(existed && !exists);
        self.violations.extend(violation);
        if switchover_changed {
            self.switchover_changes.push(SwitchoverChange {
                at,
                election: key.clone(),
                switchover: (*status.switchover).clone(),
            });
        }
        if changed {
            self.status_changes.push(StatusChange {
                at,
                election: key.clone(),
                status,
            });
        }
        self.reconcile(&key, at);
    }
}

/// A watch event reduced to what the tracker keeps.
enum Change {
    Pod(watcher::Event<(Key, PodEntry)>),
    Election(watcher::Event<(Key, ElectionState)>),
}

/// The running watches and what they observed.
pub(crate) struct Tracker {
    state: Arc<Mutex<State>>,
    changes: watch::Receiver<u64>,
    task: JoinHandle<()>,
}

impl Tracker {
    /// Watches the pods labelled `selector` and the elections of the namespaces starting
    /// with `namespace_prefix`, cluster-wide; returns once both initial lists are applied.
    pub(crate) async fn start(
        client: Client,
        selector: &str,
        namespace_prefix: &str,
    ) -> Result<Self, String> {
        let state = Arc::new(Mutex::new(State::default()));
        let (sender, changes) = watch::channel(0);
        let pods = watcher(
            Api::<Pod>::all(client.clone()),
            watcher::Config::default().labels(selector),
        )
        .default_backoff()
        .filter_map(|event| async { event.ok() })
        .map(|event| Change::Pod(map_event(event, pod_entry)));
        let prefix = namespace_prefix.to_owned();
        let elections = Api::<DynamicObject>::all_with(client, &election_resource());
        let elections = watcher(elections, watcher::Config::default())
            .default_backoff()
            .filter_map(|event| async { event.ok() })
            .map(|event| Change::Election(map_event(event, election_entry)));
        let changes_in = stream::select(pods, elections);
        let task = tokio::spawn(follow(changes_in, Arc::clone(&state), sender, prefix));
        let mut listening = changes.clone();
        let listed = listening.wait_for(|_| {
            let state = state.lock().unwrap_or_else(PoisonError::into_inner);
            state.pod_lists > 0 && state.election_lists > 0
        });
        let listed = tokio::time::timeout(Duration::from_secs(60), listed)
            .await
            .is_ok_and(|listed| listed.is_ok());
        if !listed {
            task.abort();
            return Err("the pod and LeaderElection watches did not list within 60s".to_owned());
        }
        Ok(Self {
            state,
            changes,
            task,
        })
    }

    /// The state, locked.
    pub(crate) fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits until `decide` returns something (evaluated now and after every change), or
    /// fails after `timeout` saying `expected` and what was observed.
    pub(crate) async fn wait<T>(
        &self,
        expected: &str,
        timeout: Duration,
        mut decide: impl FnMut(&State) -> Option<T>,
    ) -> Result<T, String> {
        let mut changes = self.changes.clone();
        let waited = tokio::time::timeout(timeout, async {
            loop {
                if let Some(found) = decide(&self.state()) {
                    return Some(found);
                }
                changes.changed().await.ok()?;
            }
        })
        .await;
        match waited {
            Ok(Some(found)) => Ok(found),
            _ => Err(format!(
                "expected {expected} within {timeout:?}; observed {}",
                self.state().summary()
            )),
        }
    }

    /// Waits until at least `elections` elections exist and each has a settled leader;
    /// returns since when that holds.
    pub(crate) async fn converged(
        &self,
        elections: usize,
        timeout: Duration,
    ) -> Result<Instant, String> {
        self.wait(
            &format!(
                "{elections} elections each with one pod labelled leader and named by the status"
            ),
            timeout,
            |state| {
                state
                    .converged_since
                    .filter(|_| state.existing >= elections)
            },
        )
        .await
    }

    /// Stops the watches.
    pub(crate) fn stop(self) {
        self.task.abort();
    }
}

impl Drop for Tracker {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The event with its object replaced by what `keep` takes of it.
fn map_event<K, T>(event: watcher::Event<K>, keep: fn(&K) -> T) -> watcher::Event<T> {
    match event {
        watcher::Event::Apply(object) => watcher::Event::Apply(keep(&object)),
        watcher::Event::Delete(object) => watcher::Event::Delete(keep(&object)),
        watcher::Event::Init => watcher::Event::Init,
        watcher::Event::InitApply(object) => watcher::Event::InitApply(keep(&object)),
        watcher::Event::InitDone => watcher::Event::InitDone,
    }
}

fn pod_entry(pod: &Pod) -> (Key, PodEntry) {
    let key = (pod.namespace().unwrap_or_default(), pod.name_any());
    let entry = PodEntry {
        election: pod
            .labels()
            .get(ELECTION_LABEL)
            .cloned()
            .unwrap_or_default(),
        role: pod.labels().get(ROLE_LABEL).cloned(),
        token: pod
            .annotations()
            .get(TOKEN_ANNOTATION)
            .and_then(|token| token.parse().ok()),
    };
    (key, entry)
}

fn election_entry(election: &DynamicObject) -> (Key, ElectionState) {
    let key = (
        election.namespace().unwrap_or_default(),
        election.name_any(),
    );
    (key, ElectionState::from_object(election))
}

/// Applies the watch events to `state` until aborted, bumping `sender` after each.
async fn follow(
    changes: impl futures::Stream<Item = Change>,
    state: Arc<Mutex<State>>,
    sender: watch::Sender<u64>,
    namespace_prefix: String,
) {
    let mut changes = pin!(changes);
    while let Some(change) = changes.next().await {
        let at = Instant::now();
        {
            let mut state = state.lock().unwrap_or_else(PoisonError::into_inner);
            match change {
                Change::Pod(event) => apply_pods(&mut state, event, at),
                Change::Election(event) => {
                    apply_elections(&mut state, event, at, &namespace_prefix);
                }
            }
        }
        sender.send_modify(|n| *n += 1);
    }
}

fn apply_pods(state: &mut State, event: watcher::Event<(Key, PodEntry)>, at: Instant) {
    match event {
        watcher::Event::Apply((key, pod)) => state.apply_pod(key, Some(pod), at),
        watcher::Event::Delete((key, _)) => state.apply_pod(key, None, at),
        watcher::Event::Init => {
            state.gaps += usize::from(state.pod_lists > 0);
            state.relisted_pods = Some(HashSet::new());
        }
        watcher::Event::InitApply((key, pod)) => {
            if let Some(seen) = state.relisted_pods.as_mut() {
                seen.insert(key.clone());
            }
            state.apply_pod(key, Some(pod), at);
        }
        watcher::Event::InitDone => {
            let seen = state.relisted_pods.take().unwrap_or_default();
            let gone: Vec<Key> = state
                .pods
                .keys()
                .filter(|k| !seen.contains(*k))
                .cloned()
                .collect();
            for key in gone {
                state.apply_pod(key, None, at);
            }
            state.pod_lists += 1;
        }
    }
}

fn apply_elections(
    state: &mut State,
    event: watcher::Event<(Key, ElectionState)>,
    at: Instant,
    prefix: &str,
) {
    let ours = |key: &Key| key.0.starts_with(prefix);
    match event {
        watcher::Event::Apply((key, status)) if ours(&key) => {
            state.apply_election(key, Some(status), at);
        }
        watcher::Event::Delete((key, _)) if ours(&key) => state.apply_election(key, None, at),
        watcher::Event::Apply(_) | watcher::Event::Delete(_) => {}
        watcher::Event::Init => {
            state.gaps += usize::from(state.election_lists > 0);
            state.relisted_elections = Some(HashSet::new());
        }
        watcher::Event::InitApply((key, status)) => {
            if ours(&key) {
                if let Some(seen) = state.relisted_elections.as_mut() {
                    seen.insert(key.clone());
                }
                state.apply_election(key, Some(status), at);
            }
        }
        watcher::Event::InitDone => {
            let seen = state.relisted_elections.take().unwrap_or_default();
            let gone: Vec<Key> = state
                .elections
                .iter()
                .filter(|(k, e)| e.exists && !seen.contains(*k))
                .map(|(k, _)| k.clone())
                .collect();
            for key in gone {
                state.apply_election(key, None, at);
            }
            state.election_lists += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(election: &str, role: Option<&str>, token: Option<u64>) -> Option<PodEntry> {
        Some(PodEntry {
            election: election.into(),
            role: role.map(str::to_owned),
            token,
        })
    }

    fn key(name: &str) -> Key {
        ("ns".into(), name.into())
    }

    fn elected(leader: &str, token: u64) -> Option<ElectionState> {
        Some(ElectionState {
            phase: Some("Elected".into()),
            leader: Some(leader.into()),
            session: Some("s".into()),
            token: Some(token),
            transitions: Some(1),
            switchover: Box::default(),
        })
    }

    #[test]
    fn converges_when_every_election_has_one_leader_named_by_its_status() {
        let mut state = State::default();
        let t = Instant::now();
        state.apply_pod(key("e1-0"), pod("e1", None, None), t);
        state.apply_pod(key("e1-1"), pod("e1", None, None), t);
        state.apply_election(key("e1"), Some(ElectionState::default()), t);
        assert_eq!(state.counts(), (1, 0));
        state.apply_pod(key("e1-0"), pod("e1", Some(LEADER), Some(3)), t);
        assert!(
            state.converged_since.is_none(),
            "the status does not name it yet"
        );
        state.apply_election(key("e1"), elected("e1-0", 3), t);
        assert_eq!(state.counts(), (1, 1));
        assert_eq!(state.converged_since, Some(t));
        assert_eq!(state.label_changes.len(), 1);
        assert!(state.label_changes[0].made_leader());
        state.apply_pod(key("e1-0"), None, t);
        assert!(state.converged_since.is_none(), "its leader is gone");
        assert!(state.violations.is_empty());
    }

    #[test]
    fn two_leaders_and_a_token_going_back_are_violations() {
        let mut state = State::default();
        let t = Instant::now();
        state.apply_pod(key("e1-0"), pod("e1", Some(LEADER), Some(5)), t);
        state.apply_pod(key("e2-0"), pod("e2", Some(LEADER), Some(1)), t);
        assert!(state.violations.is_empty(), "leaders of two elections");
        state.apply_pod(key("e1-1"), pod("e1", Some(LEADER), Some(6)), t);
        assert_eq!(state.violations.len(), 1, "{:?}", state.violations);
        state.apply_pod(key("e1-0"), pod("e1", None, None), t);
        state.apply_pod(key("e1-1"), pod("e1", None, None), t);
        state.apply_pod(key("e1-0"), pod("e1", Some(LEADER), Some(4)), t);
        assert_eq!(state.violations.len(), 2, "{:?}", state.violations);
        state.apply_election(key("e1"), elected("e1-0", 7), t);
        state.apply_election(key("e1"), elected("e1-0", 6), t);
        assert_eq!(state.violations.len(), 3, "{:?}", state.violations);
        assert_eq!(state.status_changes.len(), 2);
    }

    #[test]
    fn a_switchover_counts_as_decided_only_after_its_request_with_a_new_record() {
        let mut state = State::default();
        let t = Instant::now();
        let record = |from: &str, result: &str| LastSwitchover {
            to: Some("*".into()),
            from: Some(from.into()),
            result: Some(result.into()),
            ..LastSwitchover::default()
        };
        let with = |requested: Option<&str>, last: &LastSwitchover| {
            let mut status = elected("e1-0", 3);
            if let Some(status) = status.as_mut() {
                *status.switchover = SwitchoverState {
                    requested: requested.map(str::to_owned),
                    last: last.clone(),
                };
            }
            status
        };
        let earlier = record("e1-1", "Completed");
        state.apply_election(key("e1"), elected("e1-0", 3), t);
        state.apply_election(key("e1"), with(None, &earlier), t);
        let since = state.switchover_changes.len();
        let decided = |state: &State| {
            state
                .switchover_decided(&key("e1"), since, "*", &earlier)
                .map(|c| c.switchover.last.clone())
        };
        assert_eq!(decided(&state), None, "an earlier request's outcome");
        state.apply_election(key("e1"), with(Some("*"), &earlier), t);
        state.apply_election(key("e1"), with(None, &earlier), t);
        assert_eq!(
            decided(&state),
            None,
            "the annotation removed before the outcome is recorded"
        );
        state.apply_election(key("e1"), with(None, &record("e1-0", "InProgress")), t);
        assert_eq!(decided(&state), None, "still moving");
        state.apply_election(key("e2"), with(None, &record("e1-0", "Completed")), t);
        assert_eq!(decided(&state), None, "another election");
        state.apply_election(key("e1"), with(None, &record("e1-0", "Completed")), t);
        assert_eq!(decided(&state), Some(record("e1-0", "Completed")));
        assert_eq!(
            state.status_changes.len(),
            2,
            "the status leader never changed"
        );
    }
}
