//! A model world for the property tests: the API server's pods, a Consul that keeps
//! `LockIndex`, sessions, TTLs and lock-delays the way Consul does
//! (`docs/consul.md`), the operator's session manager (`sessions.rs`:
//! create, destroy, forget, adopt, Alive/Unconfirmed/Lost), a clock, and a driver of the real
//! machine ([`Election`]) that performs each request it hands out the way
//! `controller::executor::Executor` does (any of which may fail, before or after taking
//! effect), checking each against the action it stands for ([`Cause`]).
//!
//! Every executed action is followed by the safety checks of docs/design.md section 2; a
//! violation panics with the trace of the run (events, observations, plans, actions).
//!
//! The status is written twice at most per reconcile, as the controller does: before a leader
//! label (the token, with the status it leads to) and at the end, each rendered by the
//! controller's own `report` functions from the pods as they are labelled then; a status that
//! names a leader no pod carries the label of is a violation. The end write can be lost
//! ([`Event::LoseStatusWrite`]); the write before the label is what keeps rule 6 then
//! ([`Knobs::token_before_label`]).
//!
//! The election's life around the planner is in [`lifecycle`]: spec edits that move it to
//! another label key or Consul key, its mode switched, and its deletion.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use jiff::Timestamp;

use super::support::{failed_outcome, mono, not_ready_from, t};
use crate::crd::{
    AppliedSpec, FENCING_TOKEN_ANNOTATION, HANDOVER_ANNOTATION, LEADER_SINCE_ANNOTATION,
    LeaderElectionStatus, label_token_annotation,
};
use crate::election::adoption::FoundSettings;
use crate::election::config::{
    Behavior, ElectionConfig, ElectionKey, Mode, Owner, SessionConfig, UnavailablePolicy,
};
use crate::election::eligibility::{elapsed, eligibility};
use crate::election::first_look::{Adopting, KeyRead, Look, SessionRead};
use crate::election::key_memory::KeyMemory;
use crate::election::key_value::holder_from_value;
use crate::election::machine::{Cause, Election, Gathered, Input, Next, Observable, Opening};
use crate::election::observe::{
    LockView, PodView, Recorded, SessionHealth, SessionView, SwitchoverOutcome,
};
use crate::election::plan::{Action, Phase, Plan};
use crate::election::plan_loop::World;
use crate::election::pod_patch::PodPatch;
use crate::election::report;
use crate::election::request::{Outcome, Request};
use crate::election::session_names::session_name;
use crate::election::status_change::{Facts, StatusChange};

mod lifecycle;
mod other_install;
mod slow_read;

use lifecycle::Faults;
use slow_read::SlowRead;

/// Consul's cap on lock-delays applied at invalidation.
const MAX_LOCK_DELAY: Duration = Duration::from_secs(60);
/// Pod names the model draws from.
pub const MAX_PODS: usize = 5;

/// The election's key in the model Consul.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Key {
    /// Holding session.
    pub session: Option<String>,
    /// Consul's LockIndex.
    pub lock_index: u64,
    /// The value last written with an acquire.
    pub value: Option<Vec<u8>>,
    /// Which acquisition (of an unlocked or absent key) this LockIndex belongs to; unique
    /// over the run.
    pub acquisition: u64,
}

/// A Consul session.
#[derive(Debug, Clone)]
pub struct ConsulSession {
    ttl: Duration,
    lock_delay: Duration,
    behavior: Behavior,
    renewed_at: Timestamp,
    /// Sessions of applications (or of anybody but the operator): renewed by their owner
    /// until an event ends them.
    foreign: bool,
    /// The pod an operator session's name says it was created for.
    pod: Option<String>,
}

/// The model Consul. While `up` is false every call fails (a partition between the operator
/// and Consul: Consul itself keeps expiring sessions).
#[derive(Debug, Clone)]
pub struct Consul {
    pub up: bool,
    /// The KV endpoints answer (a partial outage: false while sessions still answer).
    pub kv_up: bool,
    /// The session endpoints answer (a partial outage: false while the KV still answers).
    pub sessions_up: bool,
    /// The operator's KV requests hang without an answer (a stalled long poll): the
    /// controller keeps its last cached view of the key and its writes fail, while outside
    /// clients and the session endpoints work.
    pub kv_stalled: bool,
    pub key: Option<Key>,
    pub sessions: BTreeMap<String, ConsulSession>,
    /// When the key's lock-delay ends.
    pub lock_delay_until: Option<Timestamp>,
    /// The session whose invalidation started the key's lock-delay.
    lock_delay_of: Option<String>,
    /// The other keys of the election's Consul (of earlier specs), by name, with their
    /// lock-delays: Consul keeps them when the operator moves to another key.
    stashed: BTreeMap<String, (Option<Key>, Option<Timestamp>)>,
    next_session: u64,
    acquisitions: u64,
}

/// A failed Consul call (unreachable, or `invalid session`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Failed;

impl Consul {
    fn new() -> Self {
        Self {
            up: true,
            kv_up: true,
            sessions_up: true,
            kv_stalled: false,
            key: None,
            sessions: BTreeMap::new(),
            lock_delay_until: None,
            lock_delay_of: None,
            stashed: BTreeMap::new(),
            next_session: 0,
            acquisitions: 0,
        }
    }

    /// Runs `f` as a client other than the operator: the operator's stalled KV requests
    /// ([`Consul::kv_stalled`]) do not stall it.
    fn as_outside_client<T>(&mut self, f: impl FnOnce(&mut Consul) -> T) -> T {
        let stalled = std::mem::replace(&mut self.kv_stalled, false);
        let result = f(self);
        self.kv_stalled = stalled;
        result
    }

    /// Every endpoint answers (what an outside actor needs in this model).
    fn all_up(&self) -> bool {
        self.up && self.kv_up && self.sessions_up
    }

    fn kv_reachable(&self) -> Result<(), Failed> {
        if self.up && self.kv_up && !self.kv_stalled {
            Ok(())
        } else {
            Err(Failed)
        }
    }

    fn sessions_reachable(&self) -> Result<(), Failed> {
        if self.up && self.sessions_up {
            Ok(())
        } else {
            Err(Failed)
        }
    }

    pub fn lock_delay_active(&self, now: Timestamp) -> bool {
        self.lock_delay_until.is_some_and(|u| u > now)
    }

    fn create_session(
        &mut self,
        now: Timestamp,
        ttl: Duration,
        lock_delay: Duration,
        behavior: Behavior,
        pod: Option<String>,
    ) -> Result<String, Failed> {
        let foreign = pod.is_none();
        self.sessions_reachable()?;
        self.next_session += 1;
        let id = format!("{}{}", if foreign { "f" } else { "s" }, self.next_session);
        self.sessions.insert(
            id.clone(),
            ConsulSession {
                ttl,
                lock_delay,
                behavior,
                renewed_at: now,
                foreign,
                pod,
            },
        );
        Ok(id)
    }

    /// `Ok(false)`: 404.
    fn renew(&mut self, id: &str, now: Timestamp) -> Result<bool, Failed> {
        self.sessions_reachable()?;
        Ok(match self.sessions.get_mut(id) {
            Some(s) => {
                s.renewed_at = now;
                true
            }
            None => false,
        })
    }

    fn destroy(&mut self, id: &str, now: Timestamp) -> Result<(), Failed> {
        self.sessions_reachable()?;
        self.invalidate(id, now);
        Ok(())
    }

    /// Session destroy or expiry: the key is released or deleted per the session's behavior
    /// and gets the session's lock-delay.
    fn invalidate(&mut self, id: &str, now: Timestamp) {
        let Some(session) = self.sessions.remove(id) else {
            return;
        };
        for (key, delay) in self.stashed.values_mut() {
            if key
                .as_ref()
                .is_some_and(|k| k.session.as_deref() == Some(id))
            {
                match session.behavior {
                    Behavior::Release => {
                        if let Some(k) = key {
                            k.session = None;
                        }
                    }
                    Behavior::Delete => *key = None,
                }
                *delay = now.checked_add(session.lock_delay.min(MAX_LOCK_DELAY)).ok();
            }
        }
        let holds = self
            .key
            .as_ref()
            .is_some_and(|k| k.session.as_deref() == Some(id));
        if !holds {
            return;
        }
        match session.behavior {
            Behavior::Release => {
                if let Some(k) = &mut self.key {
                    k.session = None;
                }
            }
            Behavior::Delete => self.key = None,
        }
        let d = session.lock_delay.min(MAX_LOCK_DELAY);
        if !d.is_zero() {
            self.lock_delay_until = Some(now.checked_add(d).expect("time"));
            self.lock_delay_of = Some(id.to_owned());
        }
    }

    /// Whether an acquisition now is refused by the lock-delay that `session`'s invalidation
    /// started.
    fn lock_delay_of(&self, session: &str, now: Timestamp) -> bool {
        self.lock_delay_active(now) && self.lock_delay_of.as_deref() == Some(session)
    }

    /// `?acquire=`: `Ok(false)` when refused (lock-delay, held by another session).
    fn acquire(&mut self, id: &str, now: Timestamp, value: Vec<u8>) -> Result<bool, Failed> {
        self.kv_reachable()?;
        if self.lock_delay_active(now) {
            return Ok(false);
        }
        if !self.sessions.contains_key(id) {
            return Err(Failed); // 500 invalid session
        }
        match &mut self.key {
            None => {
                self.acquisitions += 1;
                self.key = Some(Key {
                    session: Some(id.into()),
                    lock_index: 1,
                    value: Some(value),
                    acquisition: self.acquisitions,
                });
                Ok(true)
            }
            Some(k) if k.session.as_deref() == Some(id) => {
                k.value = Some(value);
                Ok(true)
            }
            Some(k) if k.session.is_some() => Ok(false),
            Some(k) => {
                self.acquisitions += 1;
                k.session = Some(id.into());
                k.lock_index += 1;
                k.value = Some(value);
                k.acquisition = self.acquisitions;
                Ok(true)
            }
        }
    }

    /// `?release=`: `Ok(false)` when the session does not hold the key.
    fn release(&mut self, id: &str) -> Result<bool, Failed> {
        self.kv_reachable()?;
        match &mut self.key {
            Some(k) if k.session.as_deref() == Some(id) => {
                k.session = None;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    /// Expires the operator's sessions 2×TTL after their last renewal.
    fn expire(&mut self, now: Timestamp) {
        let due: Vec<String> = self
            .sessions
            .iter()
            .filter(|(_, s)| !s.foreign && elapsed(s.renewed_at, now) >= 2 * s.ttl)
            .map(|(id, _)| id.clone())
            .collect();
        for id in &due {
            self.invalidate(id, now);
        }
    }

    fn lock_view(&self) -> LockView {
        if self.kv_reachable().is_err() {
            return LockView::Unknown;
        }
        match &self.key {
            None => LockView::Absent,
            Some(Key {
                session: None,
                lock_index,
                ..
            }) => LockView::Free {
                lock_index: *lock_index,
            },
            Some(Key {
                session: Some(s),
                lock_index,
                value,
                ..
            }) => LockView::Held {
                session: s.clone(),
                lock_index: *lock_index,
                value: value.clone(),
            },
        }
    }

    fn holder(&self) -> Option<&str> {
        self.key.as_ref().and_then(|k| k.session.as_deref())
    }

    /// The foreign sessions holding a key of an earlier spec.
    pub fn foreign_holders_of_stashed_keys(&self) -> Vec<String> {
        self.stashed
            .values()
            .filter_map(|(key, _)| key.as_ref()?.session.clone())
            .filter(|id| self.sessions.get(id).is_some_and(|s| s.foreign))
            .collect()
    }

    /// The election's key is `to` from now on; `from`, the key so far, stays in Consul as it
    /// is.
    pub fn switch_key(&mut self, from: &str, to: &str) {
        let (key, delay) = self.stashed.remove(to).unwrap_or_default();
        let old = (
            std::mem::replace(&mut self.key, key),
            std::mem::replace(&mut self.lock_delay_until, delay),
        );
        self.lock_delay_of = None;
        self.stashed.insert(from.to_owned(), old);
    }
}

/// The session registered in the operator's session manager.
#[derive(Debug, Clone)]
pub struct Registered {
    pub id: String,
    pub pod: String,
    pub pod_uid: String,
    pub ttl: Duration,
    pub health: SessionHealth,
    last_success: Timestamp,
}

/// The install the model's operator is.
fn model_owner() -> Owner {
    Owner::new("model-cluster", "ops.consul-elector")
}

/// Another install of the operator in the model's cluster (`<cluster>/<install>`).
const OTHER_INSTALL: &str = "model-cluster/other.consul-elector";

/// The model's election.
fn model_election() -> ElectionKey {
    ElectionKey {
        namespace: "default".into(),
        name: "model".into(),
    }
}

/// World events (between controller loops) and controller loops.
#[derive(Debug, Clone)]
pub enum Event {
    /// A new pod (a free name), Ready or not.
    AddPod { ready: bool },
    /// The pod gets a deletion timestamp.
    Delete(usize),
    /// The pod is gone from the API server.
    Gone(usize),
    /// Gone, and created again under the same name with a new UID and no labels.
    Recreate(usize),
    /// Ready condition changes.
    Ready(usize, bool),
    /// Starts or stops matching the selector.
    Select(usize, bool),
    /// Phase Succeeded/Failed.
    Finish(usize),
    /// The clock moves (1 s ticks: renewals, expiries).
    Advance(u64),
    /// Every Consul call fails from now on.
    ConsulDown,
    /// Consul answers again.
    ConsulUp,
    /// Consul's KV endpoints fail (500) while its session endpoints answer.
    KvDown,
    /// The KV endpoints answer again.
    KvUp,
    /// The operator's KV requests stall (see [`Consul::kv_stalled`]); `KvUp` ends it.
    KvStall,
    /// Consul's session endpoints fail while its KV answers.
    SessionsDown,
    /// The session endpoints answer again.
    SessionsUp,
    /// Somebody destroys the operator's registered session.
    DestroyOurSession,
    /// Somebody deletes the key: in Observe mode the applications' next acquisition
    /// re-creates it, restarting its LockIndex at 1.
    DeleteKey,
    /// An application deletes the key and acquires it again for the `i`th pod: its LockIndex
    /// starts again at 1 (Observe mode's tokens must still grow, rule 6).
    RecreateKey(usize),
    /// Another session acquires the key (if it can), naming the pod in its value.
    ForeignAcquire(usize),
    /// The foreign holder releases the key and destroys its session.
    ForeignRelease,
    /// The foreign holder's session is invalidated (lock-delay).
    ForeignExpire,
    /// Somebody else (a user, a stale operator replica) puts the leader label on a pod.
    StrayLeaderLabel(usize),
    /// The operator process restarts: registry and lock-delay estimates are lost; the
    /// session named in the status is adopted once Consul answers.
    Restart,
    /// Another operator replica takes over (the Lease moved: the old one stopped writing
    /// before, possibly in the middle of a plan): like a restart, but the new replica adopts
    /// the session at once, before its first reconcile, when Consul's sessions answer.
    Handover,
    /// The user edits the spec's policies on a live election: the unavailable policy, the
    /// readiness requirement and the failover delay (seconds).
    EditSpec {
        keep_leader: bool,
        require_ready: bool,
        failover_delay: u64,
    },
    /// The pod's `elector.dev/priority` changes (negative: never leader).
    Priority(usize, i32),
    /// An older election comes to claim the same pods under the same label key (`true`), or
    /// stops claiming them (`false`).
    OlderElection(bool),
    /// Another install of the operator names itself in the status as serving the election
    /// (`true`, rule 8), or its claim is gone from the status (`false`).
    ServedElsewhere(bool),
    /// Another install of the operator takes the free key for the `i`th pod (unless the status
    /// names this install), see [`other_install`].
    OtherInstallAcquires(usize),
    /// The other install, holding the key, records itself in the status and labels its pod.
    OtherInstallLabels,
    /// A younger election claiming the same pods under the same label key still carries its
    /// leader label on the pod (`Some`), until its withdrawal takes it off (`None`).
    YoungerLeader(Option<usize>),
    /// The Consul access stops being usable (a token Secret withdraws its opt-in: `true`), or
    /// can be used again (`false`).
    AccessRefused(bool),
    /// The next reconcile's read of the pods' owners or of its Consul access takes this many
    /// seconds, and fails at its end (`fails`): rule 2 is judged meanwhile.
    SlowRead { secs: u64, fails: bool },
    /// A user asks for a switchover to the pod (`None`: to `*`).
    Switchover(Option<usize>),
    /// The user switches failback (minimum interval in seconds) and the drain time.
    EditMoves { failback: Option<u64>, drain: u64 },
    /// The user deletes the LeaderElection: from then on every loop runs its cleanup
    /// (rule 7) until the finalizer goes.
    DeleteElection,
    /// The operator is uninstalled and keeps the LeaderElection: from then on every loop
    /// releases it (rule 7) until the finalizer goes; the object stays.
    Uninstall,
    /// The user edits `spec.labels.key` (between two keys).
    EditLabelKey,
    /// The user edits `spec.key` (between two keys) or the Consul access, which moves the
    /// election to keys and sessions of another Consul: either way its lock lives under
    /// another key from then on. Managed mode only: in Observe mode the applications, not
    /// the user, decide which key they lock (a key they re-create is `DeleteKey`).
    EditKey,
    /// The user switches the mode, at any time and whatever happened to the key.
    EditMode(Mode),
    /// The next loop's final status write is lost (the operator dies before it, or the write
    /// fails).
    LoseStatusWrite,
    /// One reconcile; its `fail_at`-th action fails, before or after taking effect.
    Loop {
        fail_at: Option<usize>,
        after_effect: bool,
    },
}

/// Knobs of one run that are not part of the spec.
#[derive(Debug, Clone)]
pub struct Knobs {
    /// The controller passes the lock-delay it saw starting to the planner.
    pub tell_lock_delay: bool,
    /// The controller executes the planner's [`Action::RecordToken`] (the fencing token
    /// written into the status before a pod is labelled with it); off only to show what it
    /// prevents.
    pub token_before_label: bool,
}

/// The world.
#[derive(Debug, Clone)]
pub struct Model {
    pub config: ElectionConfig,
    pub knobs: Knobs,
    pub now: Timestamp,
    pub pods: Vec<PodView>,
    next_uid: u64,
    pub consul: Consul,
    pub registered: Option<Registered>,
    /// The election's status as last written.
    status: LeaderElectionStatus,
    /// When this controller process last read the key (the lock watch's last answer).
    kv_read_at: Option<Timestamp>,
    /// The key as this controller process last read it (its lock watch's cache).
    cached_lock: LockView,
    /// What the operator's decisions carry from one reconcile to the next (as the controller
    /// keeps it): after a write of the key, the cache may predate the write, so the
    /// controller reads the key directly instead; the lock-delay it saw starting.
    election: Election,
    /// The lost session this controller process last let go of ([`Action::ForgetSession`]).
    forgotten: Option<String>,
    /// When this controller process started.
    started_at: Timestamp,
    /// The election's `elector.dev/switchover-to` annotation.
    switchover: Option<String>,
    /// The election's resourceVersion: it grows with each write of the switchover request.
    version: u64,
    /// The request of the user's last [`Event::Switchover`] was decided: once the status
    /// holds its outcome, it must never be decided again (recorded as in progress once more).
    request_decided: bool,
    /// Highest fencing token put on a pod, and the acquisition it belongs to.
    max_label: Option<(u64, u64)>,
    /// What the status records the operator acts with (`status.applied`).
    applied: Option<AppliedSpec>,
    /// When the LeaderElection was deleted.
    deleted_at: Option<Timestamp>,
    /// The operator's uninstall asked for the elections' release.
    released: bool,
    /// A later install took the released election over ([`Model::reinstall`]).
    reinstalled: bool,
    /// The other install labelled a pod after this one's release had finished: that label is
    /// the other install's, which the reinstall takes over.
    labelled_elsewhere_after_release: bool,
    /// An older election that claims the same pods under the same label key.
    older: Option<String>,
    /// The pod on which a younger election claiming the same pods still carries its leader
    /// label.
    younger: Option<String>,
    /// The Consul access cannot be used.
    access_refused: bool,
    /// A slow read for the next reconcile, or under way.
    slow_read: Option<SlowRead>,
    /// Its cleanup is done and the finalizer gone.
    finalized: bool,
    /// The next loop's final status write is lost.
    lose_status_write: bool,
    pub trace: String,
    /// How often each situation occurred (for the generator's coverage test).
    pub seen: BTreeMap<String, u32>,
}

/// The result of one reconcile.
pub struct LoopResult {
    /// The last plan (whose status was written); none when the loop stopped before the
    /// planner (a withdrawal after a spec edit that did not finish).
    pub plan: Option<Plan>,
    /// The reconcile ended with a plan without actions.
    pub complete: bool,
    /// Actions attempted.
    pub actions: usize,
}

impl Model {
    pub fn new(config: ElectionConfig, knobs: Knobs, initial: &[(bool, i64)]) -> Self {
        let mut m = Self {
            config,
            knobs,
            now: t(1000),
            pods: Vec::new(),
            next_uid: 0,
            consul: Consul::new(),
            registered: None,
            status: LeaderElectionStatus::default(),
            kv_read_at: None,
            cached_lock: LockView::Unknown,
            election: Election::new(),
            forgotten: None,
            started_at: t(1000),
            switchover: None,
            version: 1,
            request_decided: false,
            max_label: None,
            applied: None,
            deleted_at: None,
            released: false,
            reinstalled: false,
            labelled_elsewhere_after_release: false,
            older: None,
            younger: None,
            access_refused: false,
            slow_read: None,
            finalized: false,
            lose_status_write: false,
            trace: String::new(),
            seen: BTreeMap::new(),
        };
        for &(ready, age) in initial {
            let created = t(1000 - age);
            m.add_pod(ready, created);
        }
        let _ = writeln!(m.trace, "config {:?}\nknobs {:?}", m.config, m.knobs);
        let _ = writeln!(m.trace, "pods {:?}", m.pod_summary());
        m
    }

    fn fail(&self, what: &str) -> ! {
        panic!("INVARIANT: {what}\n--- trace ---\n{}", self.trace);
    }

    fn leader_value(&self) -> &str {
        &self.config.labels.leader
    }

    fn pod_summary(&self) -> Vec<String> {
        self.pods
            .iter()
            .map(|p| {
                format!(
                    "{}/{}{}{}{}{} role={:?} tok={:?}",
                    p.name,
                    p.uid,
                    if p.selected { "" } else { " unselected" },
                    if p.ready { "" } else { " notready" },
                    if p.deleting { " deleting" } else { "" },
                    if p.finished { " finished" } else { "" },
                    p.role,
                    p.fencing_token
                )
            })
            .collect()
    }

    fn add_pod(&mut self, ready: bool, created: Timestamp) {
        let Some(name) = (0..MAX_PODS)
            .map(|i| format!("p{i}"))
            .find(|n| !self.pods.iter().any(|p| &p.name == n))
        else {
            return;
        };
        self.push_pod(name, ready, created);
    }

    fn push_pod(&mut self, name: String, ready: bool, created: Timestamp) {
        self.next_uid += 1;
        self.pods.push(PodView {
            uid: format!("{name}-u{}", self.next_uid),
            name,
            selected: true,
            ready,
            not_ready_since: (!ready).then(|| not_ready_from(created)),
            deleting: false,
            finished: false,
            created_at: created,
            pod_ip: Some(format!("10.0.0.{}", self.next_uid)),
            node: Some("node".into()),
            role: None,
            fencing_token: None,
            label_token: None,
            leader_since: None,
            priority: Some(0),
            handover: None,
            reclaim: false,
            shared: Default::default(),
        });
    }

    fn pod_at(&mut self, i: usize) -> Option<&mut PodView> {
        let n = self.pods.len();
        if n == 0 {
            None
        } else {
            self.pods.get_mut(i % n)
        }
    }

    // ---- World events ----

    pub fn apply(&mut self, event: &Event) {
        let _ = writeln!(self.trace, "@{} {event:?}", self.secs());
        let managed = self.config.mode == Mode::Managed;
        let now = self.now;
        match event {
            Event::AddPod { ready } => self.add_pod(*ready, now),
            Event::Delete(i) => {
                if let Some(p) = self.pod_at(*i) {
                    p.deleting = true;
                }
            }
            Event::Gone(i) => {
                if !self.pods.is_empty() {
                    let n = self.pods.len();
                    self.pods.remove(i % n);
                }
            }
            Event::Recreate(i) => {
                if !self.pods.is_empty() {
                    let n = self.pods.len();
                    let old = self.pods.remove(i % n);
                    self.push_pod(old.name, false, now);
                }
            }
            Event::Ready(i, ready) => {
                if let Some(p) = self.pod_at(*i)
                    && p.ready != *ready
                {
                    p.ready = *ready;
                    p.not_ready_since = (!*ready).then(|| not_ready_from(now));
                }
            }
            Event::Select(i, selected) => {
                if let Some(p) = self.pod_at(*i) {
                    p.selected = *selected;
                }
            }
            Event::Finish(i) => {
                if let Some(p) = self.pod_at(*i) {
                    p.finished = true;
                    p.ready = false;
                    p.not_ready_since = Some(not_ready_from(now));
                }
            }
            Event::Advance(s) => self.advance(Duration::from_secs(*s)),
            Event::ConsulDown => self.consul.up = false,
            Event::ConsulUp => {
                self.consul.up = true;
                self.tick_sessions();
            }
            Event::KvDown => {
                self.consul.kv_up = false;
                self.seen_under_a_leader("kv down under a leader");
            }
            Event::KvUp => {
                self.consul.kv_up = true;
                self.consul.kv_stalled = false;
            }
            Event::KvStall => {
                self.consul.kv_stalled = true;
                self.seen_under_a_leader("kv stalled under a leader");
            }
            Event::SessionsDown => self.consul.sessions_up = false,
            Event::SessionsUp => {
                self.consul.sessions_up = true;
                self.tick_sessions();
            }
            Event::DestroyOurSession => {
                if self.consul.all_up()
                    && let Some(r) = &self.registered
                {
                    let id = r.id.clone();
                    // The operator learns of it from the renewal loop, not from Consul.
                    self.consul.invalidate(&id, now);
                }
            }
            Event::DeleteKey => {
                if self.consul.all_up() {
                    self.consul.key = None;
                }
            }
            Event::RecreateKey(i) => {
                self.apply(&Event::DeleteKey);
                self.apply(&Event::ForeignAcquire(*i));
            }
            Event::ForeignAcquire(i) => {
                if self.consul.all_up() && self.consul.holder().is_none() {
                    let (name, uid) = match self.pod_at(*i) {
                        Some(p) => (p.name.clone(), p.uid.clone()),
                        None => ("ghost".into(), "ghost-uid".into()),
                    };
                    let id = self
                        .consul
                        .create_session(
                            now,
                            Duration::from_secs(15),
                            Duration::from_secs(15),
                            Behavior::Release,
                            None,
                        )
                        .expect("up");
                    let value = serde_json::json!({"pod": name, "uid": uid}).to_string();
                    let acquired = self
                        .consul
                        .as_outside_client(|c| c.acquire(&id, now, value.into_bytes()));
                    if acquired != Ok(true) {
                        self.consul.sessions.remove(&id);
                    }
                }
            }
            Event::ForeignRelease => {
                if self.consul.all_up()
                    && let Some(h) = self.consul.holder().map(str::to_owned)
                    && self.consul.sessions.get(&h).is_some_and(|s| s.foreign)
                {
                    self.consul
                        .as_outside_client(|c| c.release(&h))
                        .expect("up");
                    self.consul.destroy(&h, now).expect("up");
                }
            }
            Event::ForeignExpire => {
                if let Some(h) = self.consul.holder().map(str::to_owned)
                    && self.consul.sessions.get(&h).is_some_and(|s| s.foreign)
                {
                    // Another client's lock-delay: the operator learns of it only from a
                    // refused acquisition.
                    self.consul.invalidate(&h, now);
                }
            }
            // Once the election is gone, a label put by hand is nobody's business here.
            Event::StrayLeaderLabel(_) if self.finalized => {}
            Event::StrayLeaderLabel(i) => {
                let leader = self.config.labels.leader.clone();
                if let Some(p) = self.pod_at(*i) {
                    p.role = Some(leader);
                }
            }
            Event::Priority(i, priority) => {
                if let Some(p) = self.pod_at(*i) {
                    p.priority = Some(*priority);
                }
            }
            Event::Switchover(i) => {
                let to = match i {
                    Some(i) => self.pod_at(*i).map(|p| p.name.clone()),
                    None => Some("*".to_owned()),
                };
                if self.switchover != to {
                    // A new request (writing the pending one again changes nothing).
                    self.request_decided = false;
                    self.version += 1;
                }
                self.switchover = to;
            }
            Event::EditMoves { failback, drain } => {
                self.config.failback = failback.map(Duration::from_secs);
                self.config.drain = Duration::from_secs(*drain);
            }
            Event::Handover => {
                self.apply(&Event::Restart);
                self.tick_sessions();
                if self.registered.is_some() {
                    *self.seen.entry("handover adopted".into()).or_default() += 1;
                }
            }
            Event::EditSpec {
                keep_leader,
                require_ready,
                failover_delay,
            } => {
                self.config.on_consul_unavailable = if *keep_leader {
                    UnavailablePolicy::KeepLeader
                } else {
                    UnavailablePolicy::Fence
                };
                self.config.require_ready = *require_ready;
                self.config.failover_delay = Duration::from_secs(*failover_delay);
                if !self.leaders().is_empty() {
                    *self
                        .seen
                        .entry("spec edited under a leader".into())
                        .or_default() += 1;
                }
            }
            Event::Restart => {
                self.registered = None;
                self.kv_read_at = None;
                self.cached_lock = LockView::Unknown;
                self.election = Election::new();
                self.forgotten = None;
                self.started_at = now;
                // A new process cannot tell a request it finds from one written again after
                // the removal: one whose removal failed is decided again (docs/design.md).
                self.request_decided = false;
                // The new process adopts the sessions of the elections that exist
                // (`operator::takeover`), once, before reconciling, when Consul's sessions
                // answer; a finalized election is gone. What it could not adopt is the
                // reconciles' to adopt.
                if !self.finalized {
                    self.take_over();
                }
            }
            Event::Uninstall => {
                if !self.released {
                    self.seen_under_a_leader("uninstalled under a leader");
                    self.released = true;
                }
            }
            Event::DeleteElection => {
                if self.deleted_at.is_none() {
                    self.seen_under_a_leader("deleted under a leader");
                    self.deleted_at = Some(now);
                }
            }
            Event::EditLabelKey => {
                self.config.labels.key = lifecycle::other_label_key(&self.config.labels.key);
                self.seen_under_a_leader("label key edited under a leader");
            }
            Event::EditKey => {
                if managed {
                    self.config.key = lifecycle::other_key(&self.config.key);
                    self.seen_under_a_leader("key edited under a leader");
                }
            }
            Event::EditMode(mode) => {
                if self.config.mode != *mode {
                    self.seen_under_a_leader("mode switched under a leader");
                }
                self.config.mode = *mode;
            }
            Event::LoseStatusWrite => self.lose_status_write = true,
            Event::OlderElection(claims) => {
                if *claims && self.older.is_none() {
                    self.seen_under_a_leader("an older election came under a leader");
                }
                self.older = claims.then(|| "older".to_owned());
            }
            Event::YoungerLeader(pod) => {
                let pod = pod.and_then(|i| self.pods.get(i)).map(|p| p.name.clone());
                if pod.is_some() && self.younger.is_none() {
                    self.seen_under_a_leader(
                        "a younger election's leader label came under a leader",
                    );
                }
                self.younger = pod;
            }
            Event::AccessRefused(refused) => {
                if *refused && !self.access_refused {
                    self.seen_under_a_leader("consul access refused under a leader");
                }
                self.access_refused = *refused;
            }
            Event::SlowRead { secs, fails } => self.slow_read = Some(SlowRead::new(*secs, *fails)),
            Event::OtherInstallAcquires(i) => self.other_install_acquires(*i),
            Event::OtherInstallLabels => self.other_install_labels(),
            Event::ServedElsewhere(claims) => {
                if *claims {
                    self.status.served_by = Some(OTHER_INSTALL.into());
                } else if self.served_elsewhere() {
                    self.status.served_by = None;
                }
            }
            Event::Loop {
                fail_at,
                after_effect,
            } => {
                let faults = Faults::new(*fail_at, *after_effect);
                if self.deleted_at.is_some() || self.released {
                    self.finalize(faults);
                } else {
                    self.drive_machine(faults);
                }
            }
        }
    }

    /// Counts `situation` (for the generator's coverage test) when a pod leads.
    fn seen_under_a_leader(&mut self, situation: &str) {
        if !self.leaders().is_empty() {
            *self.seen.entry(situation.into()).or_default() += 1;
        }
    }

    /// What the controller passes as `lock_confirmed_at`: its last read, or its start.
    fn lock_confirmed_at(&self) -> Timestamp {
        self.kv_read_at.unwrap_or(self.started_at)
    }

    fn secs(&self) -> i64 {
        self.now.as_second() - t(1000).as_second()
    }

    /// Moves the clock in 1 s ticks: Consul expires sessions, the manager renews.
    pub fn advance(&mut self, d: Duration) {
        let ticks = d.as_secs().max(1);
        for _ in 0..ticks {
            self.now = self.now.checked_add(Duration::from_secs(1)).expect("time");
            self.consul.expire(self.now);
            self.tick_sessions();
        }
    }

    /// A new process's takeover (`operator::takeover`): the session the status records for
    /// its leader, when Consul's sessions answer and still have it under this install's
    /// name for that pod ([`session_names`]' `Found::InStatus`, `adoption::vouched_by_status`).
    fn take_over(&mut self) {
        let Some(leader) = self.recorded().leader.clone() else {
            return;
        };
        let Some(id) = leader.session_id.clone() else {
            return;
        };
        let ours = self
            .consul
            .sessions
            .get(&id)
            .is_some_and(|s| s.pod.as_deref() == Some(leader.pod.as_str()));
        if ours && self.consul.renew(&id, self.now) == Ok(true) {
            let _ = writeln!(self.trace, "   took over {id}");
            *self.seen.entry("handover adopted".into()).or_default() += 1;
            self.register(id, leader.pod, leader.uid);
        }
    }

    /// The first look's reads and take-over ([`Look`]), answered from this world as the
    /// controller's executor answers them. Returns the key when it was read.
    fn look(&mut self, look: Look) -> Option<LockView> {
        let (lock, outcome) = self.look_outcome(look);
        let reported = self
            .election
            .handle(Input::Outcome(outcome), mono(self.now));
        if let Some(why) = reported.left_alone {
            let _ = writeln!(self.trace, "   left a session alone: {}", why.reason());
        }
        lock
    }

    fn look_outcome(&mut self, look: Look) -> (Option<LockView>, Outcome) {
        match look {
            Look::ReadKey(read) => {
                // A stalled watch brings no answer, and the operator's own read after its
                // write fails while the KV stalls.
                if !self.consul.kv_stalled {
                    self.read_back();
                }
                let lock = match read {
                    KeyRead::Fresh if self.consul.kv_stalled => LockView::Unknown,
                    _ => self.cached_lock.clone(),
                };
                let read = match lock.clone() {
                    LockView::Unknown => Err(None),
                    lock => Ok(lock),
                };
                (Some(lock), Outcome::Key(read))
            }
            Look::ReadSession(session) => (None, self.read_session(&session)),
            Look::Adopt { session, pod, uid } => {
                let outcome = self.consul.renew(&session, self.now);
                if outcome == Ok(true) {
                    let _ = writeln!(self.trace, "   adopted {session}");
                    *self.seen.entry("adopted".into()).or_default() += 1;
                    self.register(session, pod, uid);
                }
                (None, outcome.map_or(Outcome::Failed, Outcome::Adopted))
            }
        }
    }

    /// Reads session `id` as the executor does (`Request::ReadSession`), without renewing it.
    pub(super) fn read_session(&self, id: &str) -> Outcome {
        if self.consul.sessions_reachable().is_err() {
            return Outcome::Failed;
        }
        let found = self.consul.sessions.get(id);
        Outcome::Session(
            found.map_or(SessionRead::Missing, |found| SessionRead::Found {
                name: match &found.pod {
                    Some(pod) => session_name(&model_owner(), &model_election(), pod),
                    None => "an application's session".into(),
                },
                settings: FoundSettings {
                    ttl: Some(found.ttl),
                    lock_delay: found.lock_delay,
                    behavior: found.behavior,
                },
            }),
        )
    }

    /// What the first look adopts with: the settings `status.applied` records, the spec's.
    fn adopting(&self) -> Adopting {
        let recorded_settings = self.applied.as_ref().and_then(|a| {
            let s = a.session.as_ref()?;
            Some(SessionConfig {
                ttl: crate::consul::parse_go_duration(&s.ttl).ok()?,
                lock_delay: crate::consul::parse_go_duration(&s.lock_delay).ok()?,
                behavior: if s.behavior == "delete" {
                    Behavior::Delete
                } else {
                    Behavior::Release
                },
            })
        });
        Adopting {
            election: model_election(),
            mode: self.config.mode,
            holds_session: self.registered.is_some(),
            recorded_settings,
            spec_settings: self.config.session,
            owner: model_owner(),
        }
    }

    /// Whether the status names another install as serving the election (the model's own
    /// reading, not the core's `served_elsewhere`).
    fn served_elsewhere(&self) -> bool {
        self.recorded().served_by.as_deref() == Some(OTHER_INSTALL)
    }

    /// Rule 5, judged on the model's own terms (not the core's eligibility): the pod that leads
    /// when a reconcile starts must still lead when it ends, if nothing asks the leadership to
    /// move. That is: a Managed election whose only leader label is the operator's own (with
    /// the token the status records) on the recorded leader, which is selected, not going
    /// away, Ready (or NotReady for less than the failover delay, or readiness not required),
    /// announces no handover, shares its priority with every pod (no failback), whose key the
    /// operator's live session for it holds, with Consul answering (no stalled watch either)
    /// and no switchover requested. Returns that leader's UID.
    fn sticky_leader(&self) -> Option<String> {
        let consul_answers = self.consul.all_up() && !self.consul.kv_stalled;
        if self.config.mode != Mode::Managed || !consul_answers || self.switchover.is_some() {
            return None;
        }
        let [leader] = self.leaders()[..] else {
            return None;
        };
        // The operator's own label: it carries the token the status records (a label put
        // there by someone else is re-elected with a token of its own).
        let recorded = self
            .recorded()
            .leader
            .as_ref()
            .is_some_and(|l| l.uid == leader.uid)
            && leader.fencing_token.is_some()
            && leader.fencing_token == self.recorded().fencing_token.map(|t| t.to_string());
        let session = self.registered.as_ref().is_some_and(|r| {
            matches!(r.health, SessionHealth::Alive { .. })
                && r.pod_uid == leader.uid
                && self.consul.holder() == Some(r.id.as_str())
        });
        let not_ready_for = leader
            .not_ready_since
            .map(|since| mono(self.now).saturating_duration_since(since.seen_at) + since.before);
        let ready_enough = !self.config.require_ready
            || not_ready_for.is_none_or(|d| d < self.config.failover_delay);
        let same_priority = self.pods.iter().all(|p| p.priority == leader.priority)
            && leader.priority.unwrap_or(0) >= 0;
        let eligible = leader.selected
            && !leader.deleting
            && !leader.finished
            && leader.handover.is_none()
            && !leader.reclaim
            && ready_enough
            && same_priority;
        (recorded && session && eligible).then(|| leader.uid.clone())
    }

    /// Rule 4, judged on the model's own terms: a move the operator decides is over within the
    /// reconcile (released explicitly, so no lock-delay holds the successor back). That is: a
    /// Managed, unpaused election without drain whose only leader label is on a pod that is
    /// no longer eligible (going away, finished, unselected, or NotReady for the failover
    /// delay), whose key the operator's live session for it holds, with an eligible successor,
    /// Consul answering, no lock-delay on the key, no switchover requested and no fault
    /// injected into the reconcile. Returns the old leader's UID.
    fn operator_move_due(&self, faults: &Faults) -> Option<String> {
        let consul_answers = self.consul.all_up() && !self.consul.kv_stalled;
        let quiet = consul_answers
            && faults.none()
            && !self.consul.lock_delay_active(self.now)
            && self.switchover.is_none()
            && !self.served_elsewhere();
        let plain =
            self.config.mode == Mode::Managed && !self.config.paused && self.config.drain.is_zero();
        if !quiet || !plain {
            return None;
        }
        let [leader] = self.leaders()[..] else {
            return None;
        };
        let session = self.registered.as_ref().is_some_and(|r| {
            matches!(r.health, SessionHealth::Alive { .. })
                && r.pod_uid == leader.uid
                && self.consul.holder() == Some(r.id.as_str())
        });
        let not_ready_for = |p: &PodView| {
            p.not_ready_since
                .map(|since| mono(self.now).saturating_duration_since(since.seen_at) + since.before)
        };
        let gone = leader.deleting
            || leader.finished
            || !leader.selected
            || (self.config.require_ready
                && not_ready_for(leader).is_some_and(|d| d >= self.config.failover_delay));
        let successor = self.pods.iter().any(|p| {
            p.uid != leader.uid
                && p.selected
                && !p.deleting
                && !p.finished
                && (p.ready || !self.config.require_ready)
                && p.priority.unwrap_or(0) >= 0
        });
        (session && gone && successor).then(|| leader.uid.clone())
    }

    /// Rule 4 after a reconcile that started with a move due from `old` ([`Self::operator_move_due`]).
    fn check_operator_move(&mut self, old: Option<String>) {
        let Some(old) = old else {
            return;
        };
        if !self.leaders().iter().any(|p| p.uid != old) {
            self.fail(&format!(
                "rule 4: the move away from {old} that the operator decided did not label a successor within the reconcile"
            ));
        }
    }

    /// Rule 5 after a reconcile that started with `sticky` leading ([`Self::sticky_leader`]).
    fn check_sticky(&mut self, sticky: Option<String>) {
        let Some(uid) = sticky else {
            return;
        };
        if !self.leaders().iter().any(|p| p.uid == uid) {
            self.fail(&format!(
                "rule 5: the eligible leader {uid} lost its label although nothing asked it to"
            ));
        }
    }

    /// Rule 5's choice of a successor, judged on the model's own terms: with no switchover
    /// requested or in progress, a session is created only for the previous leader (the one the
    /// status records) when it may lead (selected, not going away, Ready when required, a
    /// valid priority of at least 0 and the highest among the pods that may lead) and no
    /// planned move takes it away (its handover annotation).
    fn check_successor(&mut self, action: &Action) {
        let Action::CreateSession { pod, uid } = action else {
            return;
        };
        let recorded = self.recorded();
        let in_progress = recorded
            .last_switchover
            .as_ref()
            .is_some_and(|r| r.outcome == SwitchoverOutcome::InProgress);
        let (Some(previous), None, false) = (recorded.leader, &self.switchover, in_progress) else {
            return;
        };
        let may_lead = |p: &PodView| {
            p.selected
                && !p.deleting
                && !p.finished
                && p.priority.is_some_and(|priority| priority >= 0)
                && (p.ready || !self.config.require_ready)
        };
        let top = self
            .pods
            .iter()
            .filter(|p| may_lead(p))
            .map(|p| p.priority)
            .max();
        let preferred = self.pods.iter().any(|p| {
            p.uid == previous.uid
                && may_lead(p)
                && p.priority == top.flatten()
                && p.handover.is_none()
        });
        if preferred && *uid != previous.uid {
            self.fail(&format!(
                "rule 5: a session for {pod} while the previous leader {} may lead",
                previous.pod
            ));
        }
    }

    /// Rule 3: with Consul answering, a reconcile that holds no session has adopted the live
    /// session of this install that holds the key for the leader its status records.
    fn check_adopted(&mut self) {
        if self.config.mode != Mode::Managed || self.registered.is_some() || !self.consul.all_up() {
            return;
        }
        let Some(leader) = &self.recorded().leader else {
            return;
        };
        let holder = self.consul.holder().map(str::to_owned);
        let ours = holder.as_deref().is_some_and(|id| {
            leader.session_id.as_deref() == Some(id)
                && self
                    .consul
                    .sessions
                    .get(id)
                    .is_some_and(|s| s.pod.as_deref() == Some(leader.pod.as_str()))
        });
        if ours {
            self.fail(&format!(
                "rule 3: the live session {holder:?} of this install holds the key for the recorded leader {}, and was not adopted",
                leader.pod
            ));
        }
    }

    /// Registers session `id` of `pod` with the session manager, renewed just now.
    fn register(&mut self, id: String, pod: String, pod_uid: String) {
        self.registered = Some(Registered {
            id,
            pod,
            pod_uid,
            ttl: self.config.session.ttl,
            health: SessionHealth::Alive {
                renewed_at: mono(self.now),
            },
            last_success: self.now,
        });
    }

    /// The session manager: renew at TTL/2 (at once after an outage), 404 -> Lost, a whole
    /// TTL without success -> Unconfirmed; pending adoptions are resolved when Consul answers.
    fn tick_sessions(&mut self) {
        let now = self.now;
        let Some(r) = &mut self.registered else {
            return;
        };
        if r.health == SessionHealth::Lost {
            return;
        }
        if self.consul.sessions_reachable().is_ok() {
            let due = matches!(r.health, SessionHealth::Unconfirmed { .. })
                || elapsed(r.last_success, now) >= r.ttl / 2;
            if due {
                match self.consul.renew(&r.id, now) {
                    Ok(true) => {
                        r.health = SessionHealth::Alive {
                            renewed_at: mono(now),
                        };
                        r.last_success = now;
                    }
                    Ok(false) => r.health = SessionHealth::Lost,
                    Err(Failed) => unreachable!("up"),
                }
            }
        } else if elapsed(r.last_success, now) >= r.ttl {
            r.health = SessionHealth::Unconfirmed {
                renewed_at: mono(r.last_success),
            };
        }
    }

    // ---- The controller ----

    fn observed_pods(&self) -> Vec<PodView> {
        self.pods
            .iter()
            .filter(|p| {
                p.selected
                    || p.role.is_some()
                    || p.fencing_token.is_some()
                    || p.label_token.is_some()
                    || p.leader_since.is_some()
            })
            .cloned()
            .collect()
    }

    fn session_view(&self) -> Option<SessionView> {
        self.registered.as_ref().map(|r| SessionView {
            id: r.id.clone(),
            pod: r.pod.clone(),
            pod_uid: r.pod_uid.clone(),
            health: r.health,
            ttl: r.ttl,
        })
    }

    /// One reconcile: the controller's own [`PlanLoop`] over this world (the model observes
    /// and executes; the `fail_at`-th action of the reconcile fails, before or after taking
    /// effect); then the status of the last plan is written (also after a failure).
    ///
    /// The final status write may be lost ([`Event::LoseStatusWrite`]); before a leader
    /// label the status already holds its token ([`Action::RecordToken`]).
    pub fn reconcile(&mut self, fail_at: Option<usize>, after_effect: bool) -> LoopResult {
        self.drive_machine(Faults::new(fail_at, after_effect))
    }

    /// [`Self::reconcile`] with the failures of `faults`: the election's machine driven as the
    /// controller drives it, the model answering each request from its world.
    fn drive_machine(&mut self, mut faults: Faults) -> LoopResult {
        self.tick_sessions();
        let spec = self.spec_applied();
        let start = self.start();
        self.election.begin(start);
        let mut opened = None;
        let mut told = None;
        let mut looked = false;
        // As the controller keeps the failure of a withdrawal step: the reconcile fails with it
        // unless the machine gives up on Consul.
        let mut failed = false;
        // A withdrawal was read and has not been seen to end yet.
        let mut withdrawing = false;
        // The lock was judged for rule 2: a withdrawal that follows only fences.
        let mut fencing = false;
        // The key as the reconcile last read it, as the controller's executor keeps it.
        let mut lock = LockView::Unknown;
        loop {
            let (action, request) = match self.election.poll() {
                Next::Observe(Observable::Input(input)) => {
                    let gathered = self.start_reading(input, &spec);
                    self.election
                        .handle(Input::Gathered(gathered), mono(self.now));
                    continue;
                }
                Next::Observe(Observable::Await(recheck)) => {
                    let gathered = self.go_on_reading(recheck, &spec);
                    // As the controller keeps the read's failure: the reconcile fails with it.
                    failed |= gathered == Gathered::Failed;
                    self.election
                        .handle(Input::Gathered(gathered), mono(self.now));
                    continue;
                }
                Next::Observe(Observable::Lock) => {
                    if self.served_elsewhere() {
                        self.fail("rule 8: fenced an election another install serves");
                    }
                    fencing = true;
                    let facts = self.lock_facts();
                    self.election.handle(Input::Lock(facts), mono(self.now));
                    continue;
                }
                Next::Observe(Observable::Left) => {
                    if self.served_elsewhere() && self.deleted_at.is_none() {
                        self.fail("rule 8: withdrew an election another install serves");
                    }
                    if std::mem::take(&mut fencing) {
                        let situation = match self.slow_read.is_some() {
                            true => "fenced while an input was awaited",
                            false => "fenced an election that cannot act",
                        };
                        *self.seen.entry(situation.into()).or_default() += 1;
                    } else {
                        withdrawing = true;
                    }
                    let left = self.left();
                    self.election.handle(Input::Left(left), mono(self.now));
                    continue;
                }
                Next::Perform(request) => match self.election.cause() {
                    Some(Cause::Withdrawal(step)) => {
                        let step = step.clone();
                        let outcome = self.withdrawal_step(&step, &request, &mut faults);
                        failed |= self
                            .election
                            .handle(Input::Outcome(outcome), mono(self.now))
                            .failed;
                        continue;
                    }
                    Some(Cause::Step) => {
                        if std::mem::take(&mut withdrawing) {
                            self.withdrew(&request);
                        }
                        let _ = writeln!(self.trace, "   step {request:?}");
                        self.perform(&request, &spec);
                        let outcome = match request {
                            Request::ClearRequest(_) => Outcome::Removed(Some(self.version)),
                            _ => Outcome::Done,
                        };
                        self.election
                            .handle(Input::Outcome(outcome), mono(self.now));
                        continue;
                    }
                    Some(Cause::Look(look)) => {
                        if let Some(read) = self.look(look.clone()) {
                            lock = read;
                        }
                        continue;
                    }
                    Some(Cause::Status) => {
                        let outcome = if std::mem::take(&mut self.lose_status_write) {
                            let _ = writeln!(self.trace, "   status write lost");
                            *self.seen.entry("status write lost".into()).or_default() += 1;
                            Outcome::Done
                        } else {
                            self.write_status(&request);
                            Outcome::StatusWritten(Box::new(self.recorded()))
                        };
                        self.election
                            .handle(Input::Outcome(outcome), mono(self.now));
                        continue;
                    }
                    Some(Cause::Action(action)) => (action.clone(), request),
                    None => self.fail(&format!("{request:?} without a cause")),
                },
                Next::GiveUp(give_up) => {
                    failed = false;
                    let _ = writeln!(self.trace, "   gave up on Consul: {}", give_up.why);
                    *self.seen.entry("cleanup gave up".into()).or_default() += 1;
                    self.registered = None;
                    continue;
                }
                Next::RetryConsul(_) => return self.stopped_before_planning(&faults),
                Next::Stop(_) if failed => return self.stopped_before_planning(&faults),
                Next::Stop(look_again) if opened.is_none() => {
                    if self.deleted_at.is_some() {
                        self.finalized = true;
                        let _ = writeln!(self.trace, "   finalizer removed");
                    } else {
                        self.stood_back(look_again);
                    }
                    return self.stopped_before_planning(&faults);
                }
                Next::Stop(_) => break,
                Next::Observe(Observable::Opening) => {
                    self.check_may_plan();
                    opened = Some((self.sticky_leader(), self.operator_move_due(&faults)));
                    let opening = Opening {
                        recorded: self.recorded(),
                        switchover: self.switchover.clone(),
                        // The model's copy of the election is never older than the removal.
                        version: Some(self.version),
                        adopting: self.adopting(),
                    };
                    self.election
                        .handle(Input::Opening(opening), mono(self.now));
                    continue;
                }
                Next::Observe(Observable::World) if !looked => {
                    looked = true;
                    self.check_adopted();
                    continue;
                }
                Next::Observe(Observable::World) => {
                    told = self.election.memory().key.lock_delay_until();
                    self.plan_once(&lock);
                    continue;
                }
            };
            let before = self.unbacked_labels();
            let leaders_before = self.leaders().len();
            if matches!(action, Action::Acquire { .. })
                && told.is_some_and(|u| u > mono(self.now))
                && self.consul.lock_delay_active(self.now)
            {
                self.fail("Acquire executed during a lock-delay the planner was told about");
            }
            let in_process = matches!(action, Action::ForgetSession | Action::Emit(_));
            let (executed, failing) = faults.next(in_process);
            if let Action::ClearSwitchover { .. }
            | Action::RecordSwitchover {
                decides: Some(_), ..
            } = &action
            {
                self.request_decided = true;
            }
            let mut answer = Outcome::Done;
            let ok = match &action {
                Action::RecordToken { fencing_token, .. } => {
                    if executed && self.knobs.token_before_label {
                        self.record_token(&request, *fencing_token);
                        answer = Outcome::StatusWritten(Box::new(self.recorded()));
                    }
                    executed && !failing
                }
                Action::ClearSwitchover { .. } => {
                    let removed = executed && self.execute(&action, &request);
                    if removed {
                        answer = Outcome::Removed(Some(self.version));
                    }
                    removed && !failing
                }
                Action::ConfirmSession { session } => match executed {
                    true => match self.consul.renew(session, self.now) {
                        Ok(alive) => {
                            if !alive {
                                *self
                                    .seen
                                    .entry("session gone at its confirmation".into())
                                    .or_default() += 1;
                                // As the controller's executor: Consul no longer has it.
                                if let Some(r) =
                                    self.registered.as_mut().filter(|r| r.id == *session)
                                {
                                    r.health = SessionHealth::Lost;
                                }
                                answer = Outcome::SessionGone;
                            }
                            !failing
                        }
                        Err(Failed) => false,
                    },
                    false => false,
                },
                // As the executor: a refusal is an answer, not a failure (the machine then
                // asks for the key to be read back).
                Action::Acquire { session, pod } => {
                    match executed.then(|| self.acquire(session, pod)) {
                        Some(Ok(acquired)) if !failing => {
                            answer = Outcome::Acquired(acquired);
                            true
                        }
                        _ => false,
                    }
                }
                _ => executed && self.execute(&action, &request) && !failing,
            };
            self.count_action(&action, ok);
            self.check_action(&action, executed, leaders_before, &before);
            let answer = if ok { answer } else { failed_outcome(&request) };
            self.election.handle(Input::Outcome(answer), mono(self.now));
            if !self.knobs.tell_lock_delay {
                // The controller as it would be if it learned of no lock-delay.
                let memory = self.election.memory_mut();
                let written = memory.key.written_since_read();
                memory.key = KeyMemory::default();
                if written {
                    memory.key.writing();
                }
            }
        }
        let (sticky, moving) = opened.expect("the plan loop opened");
        let plan = self.election.end().expect("at least one plan");
        let complete = plan.actions.is_empty();
        self.check_after_reconcile(complete);
        self.check_sticky(sticky);
        self.check_operator_move(moving);
        LoopResult {
            plan: Some(plan),
            complete,
            actions: faults.index,
        }
    }

    /// Admission, judged on the model's own terms: no plan while an older election claims
    /// the pods, a younger one's leader label stands on one of them (rule 1 across
    /// elections), or the Consul access cannot be used.
    fn check_may_plan(&mut self) {
        if self.older.is_some() {
            self.fail("planned while an older election claims the pods");
        }
        if self.younger.is_some() {
            self.fail("rule 1: planned while a younger election's leader label stands");
        }
        if self.access_refused {
            self.fail("planned with a Consul access that cannot be used");
        }
    }

    /// The reconcile ended before its plan loop (stood back, or a step failed).
    fn stopped_before_planning(&mut self, faults: &Faults) -> LoopResult {
        self.election.end();
        LoopResult {
            plan: None,
            complete: false,
            actions: faults.index,
        }
    }

    /// A read of the key: the watch's answer, or the direct read the machine asks for after
    /// the operator's own acquire or release (`controller::executor::Executor::read_key`). When it
    /// succeeds the cache takes the answer, which shows the operator's writes before it.
    /// Whether the read succeeded.
    fn read_back(&mut self) -> bool {
        self.cached_lock = self.consul.lock_view();
        let read = self.cached_lock != LockView::Unknown;
        if read {
            self.kv_read_at = Some(self.now);
        }
        read
    }

    /// Observes the world and lets the loop plan from it, on the key as the reconcile last
    /// read it (`lock`: its first look, or the read after its own acquire or release).
    fn plan_once(&mut self, lock: &LockView) {
        let pods = self.observed_pods();
        let session = self.session_view();
        let owner = model_owner();
        let recorded = self.election.recorded().cloned().expect("a plan loop");
        self.election.handle(
            Input::World(World {
                config: &self.config,
                pods: &pods,
                lock,
                session: session.as_ref(),
                lock_confirmed_at: mono(self.lock_confirmed_at()),
                // The model's clocks agree: its processes' wall clocks are never stepped.
                now: mono(self.now),
                wall: self.now,
                owner: &owner,
            }),
            mono(self.now),
        );
        let plan = self
            .election
            .last_plan()
            .cloned()
            .expect("a plan asked for");
        self.check_standing_back(lock, &pods, &plan);
        let _ = writeln!(
            self.trace,
            "   observe lock={lock:?} session={session:?} recorded={recorded:?} lock_delay_for={:?}\n   pods {:?}\n   plan {:?} phase={:?} requeue={:?} stood_back={:?}",
            self.election
                .memory()
                .key
                .lock_delay_until()
                .map(|u| u.saturating_duration_since(mono(self.now))),
            self.pod_summary(),
            plan.actions,
            plan.status.phase,
            plan.requeue_after,
            plan.managed_elsewhere
        );
        let reason = plan
            .status
            .conditions
            .iter()
            .find(|c| c.type_ == crate::election::planner::LEADER_ELECTED)
            .map_or("", |c| c.reason);
        *self.seen.entry(format!("reason {reason}")).or_default() += 1;
        if plan.status.transitions > recorded.transitions {
            *self.seen.entry("transition".into()).or_default() += 1;
        }
        // In Observe mode the operator's only Consul writes undo its own session left from
        // Managed mode (release, destroy).
        let own = |a: &Action| match a {
            Action::Release { session } | Action::DestroySession { session } => {
                self.registered.as_ref().is_some_and(|r| r.id == *session)
            }
            Action::ForgetSession => true,
            _ => false,
        };
        if self.config.mode == Mode::Observe
            && let Some(a) = plan
                .actions
                .iter()
                .find(|a| super::support::is_consul(a) && !own(a))
        {
            self.fail(&format!("Observe mode planned a Consul action {a:?}"));
        }
    }

    fn count_action(&mut self, action: &Action, ok: bool) {
        let kind = format!("{action:?}");
        let kind = kind.split([' ', '(']).next().unwrap_or_default();
        *self
            .seen
            .entry(format!("{} {kind}", if ok { "ok" } else { "failed" }))
            .or_default() += 1;
        if ok && self.config.mode == Mode::Observe {
            *self.seen.entry(format!("observed {kind}")).or_default() += 1;
            if let Action::LabelLeader { fencing_token, .. } = action
                && self
                    .consul
                    .key
                    .as_ref()
                    .is_some_and(|k| *fencing_token > k.lock_index)
            {
                *self
                    .seen
                    .entry("observed token above a re-created key".into())
                    .or_default() += 1;
            }
        }
        let _ = writeln!(
            self.trace,
            "   {} {action:?}",
            if ok { "ok  " } else { "FAIL" }
        );
    }

    fn write_status(&mut self, request: &Request) {
        let labelled = self.leaders().first().map(|p| p.uid.clone());
        let labelled = labelled.filter(|_| self.leaders().len() == 1);
        let Request::WriteStatus(decided) = request else {
            self.fail(&format!("the status write is {request:?}"));
        };
        let before = self.status.clone();
        self.write(decided, labelled.clone());
        let new = std::mem::replace(&mut self.status, before);
        if new.fencing_token < self.status.fencing_token {
            self.fail(&format!(
                "status fencing token decreased: {:?} -> {:?}",
                self.status.fencing_token, new.fencing_token
            ));
        }
        if new.transitions < self.status.transitions {
            self.fail("status transitions decreased");
        }
        if let Some(leader) = &new.leader
            && labelled.as_deref() != Some(leader.uid.as_str())
        {
            self.fail(&format!(
                "the status names leader {} but no pod, or another, carries the label",
                leader.pod
            ));
        }
        self.check_history(&new);
        self.status = new;
        if self.applied.is_none() {
            self.applied = Some(self.spec_applied());
        }
    }

    /// The leader a written status names is the leadership its history holds open, and the
    /// history's tokens never decrease.
    fn check_history(&self, new: &LeaderElectionStatus) {
        let open = new.history.last().filter(|r| r.until.is_none());
        if let Some(leader) = &new.leader {
            let holds = open.is_some_and(|r| {
                r.uid == leader.uid
                    && r.since == leader.since
                    && r.fencing_token == new.fencing_token
            });
            if !holds {
                self.fail(&format!(
                    "the history {:?} does not hold leader {}",
                    new.history, leader.pod
                ));
            }
        }
        let tokens: Vec<_> = new.history.iter().filter_map(|r| r.fencing_token).collect();
        if tokens.windows(2).any(|w| w[0] > w[1]) {
            self.fail(&format!("the history's tokens decrease: {tokens:?}"));
        }
        if new.history.len() > crate::election::leadership_history::HISTORY_LIMIT {
            self.fail("the history grows past its limit");
        }
    }

    /// The election's status as the core reads it back ([`report::recorded`]).
    pub fn recorded(&self) -> Recorded {
        report::recorded(&self.status)
    }

    /// Renders `change` on the status as the controller does ([`StatusChange::render`]) and
    /// writes it.
    fn write(&mut self, change: &StatusChange, labelled: Option<String>) {
        let facts = Facts {
            generation: Some(1),
            applied: Some(self.spec_applied()),
            mode: Some(self.config.mode),
            lease_timing: None,
            labelled,
            now: self.now,
        };
        self.status = change.render(&self.status, &facts).status;
    }

    /// Applies `patch` as the API server applies the operator's merge patch: to the pod of that
    /// name and UID only (false when there is none), each named label and annotation set or
    /// removed. The model's pods carry one election's label, under whichever key it acts with:
    /// a label the patch names is that one.
    fn apply_patch(&mut self, patch: &PodPatch) -> bool {
        let Some(p) = self.pods.iter_mut().find(|p| p.uid == patch.uid) else {
            return false;
        };
        if p.name != patch.pod {
            return false;
        }
        for value in patch.labels.values() {
            p.role.clone_from(value);
        }
        let beside_label = |key: &str| {
            patch
                .labels
                .keys()
                .any(|l| label_token_annotation(l) == key)
        };
        for (annotation, value) in &patch.annotations {
            let field = match annotation.as_str() {
                FENCING_TOKEN_ANNOTATION => &mut p.fencing_token,
                LEADER_SINCE_ANNOTATION => &mut p.leader_since,
                HANDOVER_ANNOTATION => &mut p.handover,
                key if beside_label(key) => &mut p.label_token,
                _ => continue,
            };
            field.clone_from(value);
        }
        true
    }

    /// Executes one action, as `request` carries it out, against the world; false when it
    /// failed.
    fn execute(&mut self, action: &Action, request: &Request) -> bool {
        let now = self.now;
        match action {
            Action::LabelFollower { .. }
            | Action::Unlabel { .. }
            | Action::LabelLeader { .. }
            | Action::AnnotateHandover { .. }
            | Action::ClearHandover { .. } => match request {
                Request::PatchPod { patch, .. } => self.apply_patch(patch),
                other => self.fail(&format!("{action:?} sent as {other:?}")),
            },
            Action::RecordSwitchover { record, .. } => {
                let outcome_recorded = self.recorded().last_switchover.as_ref().is_some_and(|r| {
                    r.to == record.to && r.outcome != SwitchoverOutcome::InProgress
                });
                if record.outcome == SwitchoverOutcome::InProgress
                    && self.request_decided
                    && outcome_recorded
                {
                    self.fail("a switchover request whose outcome is recorded is decided again");
                }
                // Written at once, like the controller's write-ahead status patch.
                match request {
                    Request::WriteStatus(change) => self.write(change, None),
                    other => self.fail(&format!("{action:?} sent as {other:?}")),
                }
                true
            }
            Action::ClearSwitchover { request } => {
                if self.switchover.as_deref() == Some(request.as_str()) {
                    *self.seen.entry("switchover decided".into()).or_default() += 1;
                    self.switchover = None;
                    self.version += 1;
                }
                true
            }
            Action::Release { session } => self.consul.release(session).is_ok(),
            Action::DestroySession { session } => {
                let Some(r) = &self.registered else {
                    return true; // nothing registered, nothing sent
                };
                if r.id != *session {
                    self.fail(&format!("destroy of {session}, registered {}", r.id));
                }
                match self.consul.destroy(session, now) {
                    Ok(()) => {
                        self.registered = None;
                        true
                    }
                    Err(Failed) => false,
                }
            }
            Action::ForgetSession => {
                self.forgotten = self.registered.take().map(|r| r.id);
                true
            }
            Action::CreateSession { pod, uid } => {
                // sessions.rs: a registered session is destroyed first.
                if let Some(r) = &self.registered {
                    let id = r.id.clone();
                    if self.consul.destroy(&id, now).is_err() {
                        return false;
                    }
                    self.registered = None;
                }
                let s = &self.config.session;
                match self.consul.create_session(
                    now,
                    s.ttl,
                    s.lock_delay,
                    s.behavior,
                    Some(pod.clone()),
                ) {
                    Ok(id) => {
                        self.registered = Some(Registered {
                            id,
                            pod: pod.clone(),
                            pod_uid: uid.clone(),
                            ttl: s.ttl,
                            health: SessionHealth::Alive {
                                renewed_at: mono(now),
                            },
                            last_success: now,
                        });
                        true
                    }
                    Err(Failed) => false,
                }
            }
            Action::Acquire { session, pod } => self.acquire(session, pod).is_ok(),
            Action::Emit(_) | Action::RecordToken { .. } | Action::ConfirmSession { .. } => true,
        }
    }

    /// Sends an acquisition of the key with `session` for `pod`: Consul's answer.
    fn acquire(&mut self, session: &str, pod: &str) -> Result<bool, Failed> {
        let now = self.now;
        let uid = match &self.registered {
            Some(r) if r.id == *session => r.pod_uid.clone(),
            _ => self.fail(&format!(
                "acquire with {session}, not the registered session"
            )),
        };
        let value = serde_json::json!({"pod": pod, "uid": uid}).to_string();
        let answer = self.consul.acquire(session, now, value.into_bytes());
        if answer == Ok(false)
            && self.knobs.tell_lock_delay
            && self
                .forgotten
                .as_ref()
                .is_some_and(|lost| self.consul.lock_delay_of(lost, now))
        {
            self.fail(
                "an acquisition refused by the lock-delay of the session the operator itself \
                 let go of: it knew when that delay ends",
            );
        }
        answer
    }

    // ---- Invariants ----

    fn leaders(&self) -> Vec<&PodView> {
        self.pods
            .iter()
            .filter(|p| p.role.as_deref() == Some(self.leader_value()))
            .collect()
    }

    /// Rule 2 for one leader-labelled pod. Managed: the operator's registered session, created
    /// for this pod, holds the key, and the pod's token is the key's LockIndex. Observe: the
    /// key is held and its value names this (selected) pod; the token is the LockIndex.
    fn backed(&self, pod: &PodView) -> bool {
        self.lock_backed(pod) && self.token_backed(pod)
    }

    /// The key is held on behalf of `pod` (first half of [`Self::backed`]).
    fn lock_backed(&self, pod: &PodView) -> bool {
        let Some(holder) = self.consul.holder() else {
            return false;
        };
        match self.config.mode {
            Mode::Managed => self
                .registered
                .as_ref()
                .is_some_and(|r| r.id == holder && r.pod_uid == pod.uid),
            Mode::Observe => {
                pod.selected
                    && self
                        .consul
                        .key
                        .as_ref()
                        .and_then(|k| k.value.as_deref())
                        .and_then(holder_from_value)
                        .is_some_and(|h| h.pod == pod.name && h.uid.is_none_or(|u| u == pod.uid))
            }
        }
    }

    /// The pod's token is the key's LockIndex (second half of [`Self::backed`]); in Observe
    /// mode at least that, for a re-created key restarts its LockIndex while the token only
    /// grows (`election::observed_token`).
    fn token_backed(&self, pod: &PodView) -> bool {
        let token = pod
            .fencing_token
            .as_deref()
            .and_then(|t| t.parse::<u64>().ok());
        self.consul
            .key
            .as_ref()
            .is_some_and(|k| match self.config.mode {
                Mode::Managed => token == Some(k.lock_index),
                Mode::Observe => token >= Some(k.lock_index),
            })
    }

    /// `KeepLeader` lets a label stand while Consul cannot confirm it.
    fn keep_leader_excuse(&self) -> bool {
        self.config.on_consul_unavailable == UnavailablePolicy::KeepLeader
            && self.config.mode == Mode::Managed
            && (self.consul.kv_reachable().is_err()
                || self
                    .registered
                    .as_ref()
                    .is_some_and(|r| matches!(r.health, SessionHealth::Unconfirmed { .. })))
    }

    /// Whether the leader labels are another install's to back or take off: while the status
    /// names it, while its session holds the key, or while this install still stands back for
    /// it (until the key stayed free for the takeover grace). Rule 8 forbids this install to
    /// touch them: rules 1 and 2 are judged again once this install takes over.
    fn labels_are_another_installs(&self) -> bool {
        self.served_elsewhere()
            || self.election.memory().stood_back().is_some()
            || self.other_install_holds_the_key()
    }

    /// Leader-labelled pods failing rule 2 (by UID), each with what fails (the lock or the
    /// token); none while [`Self::labels_are_another_installs`].
    fn rule2_violators(&self) -> Vec<(String, &'static str)> {
        if self.labels_are_another_installs() {
            return Vec::new();
        }
        self.unbacked_labels()
    }

    /// What an action is checked against: every leader-labelled pod failing rule 2 before it,
    /// whoever put the label there. A label another install wrote, and this install keeps
    /// as it takes the election over, was unbacked before this install's first write (the
    /// token it records names this install in the status): that write did not make it so.
    fn unbacked_labels(&self) -> Vec<(String, &'static str)> {
        let mut v = Vec::new();
        for p in self.leaders() {
            if !self.lock_backed(p) {
                v.push((p.uid.clone(), "lock"));
            }
            if !self.token_backed(p) {
                v.push((p.uid.clone(), "token"));
            }
        }
        v
    }

    /// Observe mode mirrors the holder of the operator's last answer about the key, and an
    /// answer younger than a TTL confirms the lock (rule 2). While the watch stalls, that
    /// answer may name a holder that has let go since: a label put on `pod` from it is within
    /// rule 2, and [`Self::check_after_reconcile`] bounds how long it stays. Not so once the
    /// operator wrote the key after the answer: then it knows better.
    fn mirrors_a_confirmed_answer(&self, pod: &PodView) -> bool {
        self.config.mode == Mode::Observe
            && self.consul.kv_stalled
            && !self.election.memory().key.written_since_read()
            && elapsed(self.lock_confirmed_at(), self.now) < self.config.session.ttl
            && match &self.cached_lock {
                LockView::Held { value, .. } => value
                    .as_deref()
                    .and_then(holder_from_value)
                    .is_some_and(|h| h.pod == pod.name && h.uid.is_none_or(|u| u == pod.uid)),
                _ => false,
            }
    }

    fn check_action(
        &mut self,
        action: &Action,
        executed: bool,
        leaders_before: usize,
        before: &[(String, &'static str)],
    ) {
        self.check_successor(action);
        // Rule 1: no action makes a second leader label (only a world event can, see
        // `StrayLeaderLabel`; then the count may only go down until it is 1).
        let leaders = self.leaders();
        if leaders.len() > 1 && leaders.len() > leaders_before {
            self.fail(&format!(
                "two leader labels after {action:?}: {:?}",
                leaders.iter().map(|p| &p.name).collect::<Vec<_>>()
            ));
        }
        // Rule 2: no action of the operator makes a label unbacked (world events can; those
        // are the planner's to repair), and a leader label is only ever put on a backed pod,
        // or in Observe mode on the holder a confirmed answer names. A label that failed rule 2
        // before the action was not made to fail by it, whichever half fails now: an
        // acquisition for a labelled pod whose lock was gone backs its lock and leaves its
        // token behind until the relabel that follows (the label is checked then).
        if !self.keep_leader_excuse() {
            let after = self.rule2_violators();
            if let Some((uid, what)) = after.iter().find(|(uid, _)| {
                !before.iter().any(|(was, _)| was == uid)
                    && !self
                        .pods
                        .iter()
                        .any(|p| p.uid == *uid && self.mirrors_a_confirmed_answer(p))
            }) {
                self.fail(&format!(
                    "{action:?} left the leader label on {uid} without its {what}"
                ));
            }
        }
        if self.config.paused && executed && matches!(action, Action::CreateSession { .. }) {
            self.fail(&format!(
                "{action:?}: a pod was elected while the election is paused"
            ));
        }
        if let Action::LabelLeader {
            uid, fencing_token, ..
        } = action
            && executed
            && let Some(p) = self.pods.iter().find(|p| &p.uid == uid)
            && p.role.as_deref() == Some(self.leader_value())
        {
            if !self.backed(p) && !self.mirrors_a_confirmed_answer(p) {
                self.fail(&format!(
                    "{action:?}: labelled a pod that does not hold the lock ({:?})",
                    self.consul.key
                ));
            }
            if leaders.len() != 1 {
                self.fail(&format!(
                    "{action:?} while another pod carries the leader label"
                ));
            }
            if self.knobs.token_before_label && self.recorded().fencing_token < Some(*fencing_token)
            {
                self.fail(&format!(
                    "{action:?}: labelled before the status held the token ({:?})",
                    self.recorded().fencing_token
                ));
            }
            // Rule 6: tokens never decrease; one token, one acquisition.
            let acquisition = self.consul.key.as_ref().map_or(0, |k| k.acquisition);
            match self.max_label {
                Some((max, _)) if *fencing_token < max => self.fail(&format!(
                    "fencing token decreased: {max} -> {fencing_token}"
                )),
                Some((max, acq)) if *fencing_token == max && acquisition != acq => self.fail(
                    &format!("fencing token {max} handed out for two acquisitions"),
                ),
                _ => self.max_label = Some((*fencing_token, acquisition)),
            }
        }
    }

    fn check_after_reconcile(&mut self, complete: bool) {
        if !complete || self.labels_are_another_installs() {
            return;
        }
        if self.leaders().len() > 1 {
            self.fail("two leader labels after a complete plan");
        }
        // A completed plan leaves no unbacked label behind while Consul answers.
        if self.consul.kv_reachable().is_ok() {
            let v = self.rule2_violators();
            if !v.is_empty() && !self.keep_leader_excuse() {
                self.fail(&format!(
                    "unbacked leader label after a complete plan: {v:?}"
                ));
            }
        }
        // While the key cannot be read, or its watch stalls (the cached view, however old,
        // still says held), a label whose lock is gone stays at most a TTL after the last read
        // (Fence; in Observe mode too), and never once the session is known lost (any policy).
        if self.consul.kv_reachable().is_err() {
            let lost = self
                .registered
                .as_ref()
                .is_some_and(|r| r.health == SessionHealth::Lost);
            let stale = elapsed(self.lock_confirmed_at(), self.now) >= self.config.session.ttl;
            let fence = self.config.on_consul_unavailable == UnavailablePolicy::Fence;
            let unbacked: Vec<String> = self
                .leaders()
                .into_iter()
                .filter(|p| !self.lock_backed(p))
                .map(|p| p.uid.clone())
                .collect();
            if !unbacked.is_empty() && (lost || (fence && stale)) {
                self.fail(&format!(
                    "a leader label without its lock outlived the Fence window (lost: {lost}, \
                     unread since {}): {unbacked:?}",
                    self.lock_confirmed_at()
                ));
            }
        }
        // Fence: a session unconfirmed for a whole TTL leaves no leader label.
        if self.config.mode == Mode::Managed
            && self.config.on_consul_unavailable == UnavailablePolicy::Fence
            && self
                .registered
                .as_ref()
                .is_some_and(|r| matches!(r.health, SessionHealth::Unconfirmed { .. }))
            && !self.leaders().is_empty()
        {
            self.fail(
                "Fence: the leader label survived a complete plan with the session unconfirmed",
            );
        }
    }

    // ---- Quiescence ----

    /// Ends every disturbance, lets time pass and runs the controller until nothing is left
    /// to do; then checks the end state and that it is stable.
    pub fn quiesce(&mut self) {
        let _ = writeln!(self.trace, "@{} --- quiesce ---", self.secs());
        if self.deleted_at.is_some() {
            self.quiesce_deleted();
            return;
        }
        if self.released {
            // An election another install serves is that install's to release: its claim
            // goes first, as below, so this install's release finishes.
            if self.served_elsewhere() {
                self.status.served_by = None;
            }
            self.quiesce_deleted();
            self.reinstall();
        }
        if self.older.take().is_some() {
            let _ = writeln!(self.trace, "@{} the older election goes", self.secs());
        }
        if self.younger.take().is_some() {
            let _ = writeln!(
                self.trace,
                "@{} the younger election's leader label goes",
                self.secs()
            );
        }
        if std::mem::take(&mut self.access_refused) {
            let _ = writeln!(
                self.trace,
                "@{} the Consul access is usable again",
                self.secs()
            );
        }
        if self.served_elsewhere() {
            // An election whose serving install is gone for good, with a step only that
            // install may take, waits for ever (docs/design.md rule 8): its claim goes.
            let _ = writeln!(
                self.trace,
                "@{} the other install's claim goes",
                self.secs()
            );
            self.status.served_by = None;
        }
        if self.config.paused {
            // Resumed: from here on the election must converge as any other.
            let _ = writeln!(self.trace, "@{} resume (paused: false)", self.secs());
            self.config.paused = false;
        }
        if !self.consul.up {
            self.apply(&Event::ConsulUp);
        }
        self.apply(&Event::KvUp);
        self.apply(&Event::SessionsUp);
        if self.config.mode == Mode::Managed {
            self.apply(&Event::ForeignRelease);
            // The applications holding a key of an earlier spec (which an edit may return to)
            // stop too.
            let now = self.now;
            for id in self.consul.foreign_holders_of_stashed_keys() {
                self.consul.destroy(&id, now).expect("up");
            }
        }
        // Let orphaned sessions expire and lock-delays pass, with the controller running.
        for _ in 0..30 {
            let r = self.reconcile(None, false);
            let step = r
                .plan
                .and_then(|p| p.requeue_after)
                .unwrap_or(Duration::from_secs(5));
            self.advance(step.clamp(Duration::from_secs(1), Duration::from_secs(5)));
        }
        let mut converged = None;
        for _ in 0..60 {
            let r = self.reconcile(None, false);
            if let (true, Some(plan)) = (r.complete, r.plan) {
                match plan.requeue_after {
                    None => {
                        converged = Some(plan);
                        break;
                    }
                    Some(d) => self.advance(d),
                }
            } else {
                self.advance(Duration::from_secs(1));
            }
        }
        let Some(last) = converged else {
            self.fail("no convergence: plans never became empty");
        };
        self.check_end_state(&last);
        if self.reinstalled && self.status.leader.is_some() {
            *self
                .seen
                .entry("elected again after a reinstall".into())
                .or_default() += 1;
        }
        // No flapping: with nothing changing, plans stay empty and the status stays put.
        let mut previous = last;
        for _ in 0..3 {
            self.advance(Duration::from_secs(3));
            let r = self.reconcile(None, false);
            let Some(plan) = r.plan.filter(|_| r.complete && r.actions == 0) else {
                self.fail("a converged election planned actions again");
            };
            if plan.status != previous.status {
                self.fail(&format!(
                    "status flapped: {:?} -> {:?}",
                    previous.status, plan.status
                ));
            }
            previous = plan;
        }
    }

    fn check_end_state(&self, last: &Plan) {
        let leaders = self.leaders();
        let label = &self.config.labels;
        for p in &self.pods {
            let is_leader = p.role.as_deref() == Some(label.leader.as_str());
            if !p.selected
                && (p.role.is_some() || p.fencing_token.is_some() || p.label_token.is_some())
            {
                self.fail(&format!(
                    "unselected pod {} kept the election's labels",
                    p.name
                ));
            }
            if p.selected && !is_leader {
                if p.role.as_deref() != Some(label.follower.as_str()) {
                    self.fail(&format!("selected pod {} is not a follower", p.name));
                }
                if p.fencing_token.is_some() || p.label_token.is_some() || p.leader_since.is_some()
                {
                    self.fail(&format!("follower {} kept leader annotations", p.name));
                }
            }
        }
        match self.config.mode {
            Mode::Managed => {
                let eligible: Vec<&PodView> = self
                    .pods
                    .iter()
                    .filter(|p| eligibility(p, &self.config).is_ok())
                    .collect();
                if eligible.is_empty() {
                    if !leaders.is_empty() {
                        self.fail("a leader although no pod is eligible");
                    }
                    if last.status.phase != Phase::Pending {
                        self.fail("no eligible pod, yet the phase is not Pending");
                    }
                } else {
                    if leaders.len() != 1 {
                        self.fail(&format!(
                            "{} leaders with {} eligible pods",
                            leaders.len(),
                            eligible.len()
                        ));
                    }
                    let leader = leaders[0];
                    if eligibility(leader, &self.config).is_err() {
                        self.fail("the leader is not eligible");
                    }
                    if !self.backed(leader) {
                        self.fail("the leader does not hold the lock");
                    }
                    if last.status.phase != Phase::Elected {
                        self.fail("a leader, yet the phase is not Elected");
                    }
                    let status_leader = last.status.leader.as_ref().expect("status leader");
                    if status_leader.uid != leader.uid
                        || last.status.fencing_token.map(|t| t.to_string()) != leader.fencing_token
                        || leader.label_token != leader.fencing_token
                        || status_leader.session_id.as_deref() != self.consul.holder()
                    {
                        self.fail("the status disagrees with the labelled leader");
                    }
                }
            }
            Mode::Observe => {
                let named = self.pods.iter().find(|p| {
                    self.consul.holder().is_some()
                        && p.selected
                        && self
                            .consul
                            .key
                            .as_ref()
                            .and_then(|k| k.value.as_deref())
                            .and_then(holder_from_value)
                            .is_some_and(|h| h.pod == p.name && h.uid.is_none_or(|u| u == p.uid))
                });
                let got: Vec<&str> = leaders.iter().map(|p| p.uid.as_str()).collect();
                let want: Vec<&str> = named.iter().map(|p| p.uid.as_str()).collect();
                if got != want {
                    self.fail(&format!("Observe mirrors {got:?}, the key names {want:?}"));
                }
                if named.is_some_and(|p| !self.backed(p)) {
                    self.fail("mirrored leader without the key's token");
                }
            }
        }
    }
}
