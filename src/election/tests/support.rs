//! Builders for the planner's inputs, helpers to read plans, and a tiny deterministic
//! "world" that executes plans the way the controller does (in order, re-observing between
//! plans) so multi-plan sequences such as a leader move can be followed step by step.

use std::time::Duration;

use jiff::Timestamp;

use crate::crd::{AppliedSession, AppliedSpec};
use tokio::time::Instant;

use crate::election::config::{
    Behavior, ElectionConfig, LabelConfig, Mode, Owner, SessionConfig, UnavailablePolicy,
    ValueFormat,
};
use crate::election::label_key_check::check_label_key;
use crate::election::memory::ElectionMemory;
use crate::election::observe::{
    LeaderRecord, LockView, NotReadySince, PodView, Recorded, SessionHealth, SessionView,
};
use crate::election::plan::{Action, ConditionState, EventReason, Plan, StatusState};
use crate::election::planner::{Observation, plan};

/// The label key of [`config`].
pub const ROLE: &str = "elector.dev/role";

/// `n` seconds after a fixed, arbitrary instant.
pub fn t(n: i64) -> Timestamp {
    Timestamp::from_second(1_700_000_000 + n).expect("valid timestamp")
}

/// How the executor reports `request` failing with an error no answer explains: a status
/// write's failure names its error, which counts in the run of failed status writes.
pub fn failed_outcome(
    request: &crate::election::request::Request,
) -> crate::election::request::Outcome {
    use crate::election::request::{Outcome, Request};
    match request {
        Request::WriteStatus(_) => Outcome::StatusFailed {
            category: "kube",
            error: "a fault injected into the status write".into(),
        },
        _ => Outcome::Failed,
    }
}

/// [`t`]`(n)` on the monotonic clock: `n` seconds after a fixed origin (a test's wall and
/// monotonic clocks agree unless it says otherwise, as with [`Scene::wall`]).
pub fn mono(at: Timestamp) -> Instant {
    static ORIGIN: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    let origin = Instant::from_std(*ORIGIN.get_or_init(std::time::Instant::now));
    let offset = at.duration_since(t(0));
    let magnitude = offset.unsigned_abs();
    if offset.is_negative() {
        origin.checked_sub(magnitude).unwrap_or(origin)
    } else {
        origin + magnitude
    }
}

/// NotReady since `at` (monotonic, see [`mono`]).
pub fn not_ready_from(at: Timestamp) -> NotReadySince {
    NotReadySince {
        seen_at: mono(at),
        before: Duration::ZERO,
    }
}

/// `n` seconds.
pub fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// The spec with every default of docs/design.md section 1.
pub fn config() -> ElectionConfig {
    ElectionConfig {
        mode: Mode::Managed,
        key: "elector/shop/web/leader".into(),
        session: SessionConfig {
            ttl: secs(15),
            lock_delay: secs(15),
            behavior: Behavior::Release,
        },
        labels: LabelConfig {
            key: ROLE.into(),
            leader: "leader".into(),
            follower: "follower".into(),
        },
        require_ready: true,
        failover_delay: Duration::ZERO,
        on_consul_unavailable: UnavailablePolicy::Fence,
        drain: Duration::ZERO,
        failback: None,
        paused: false,
        value_format: ValueFormat::default(),
    }
}

/// The UID the builders give pod `name`.
pub fn uid(name: &str) -> String {
    format!("uid-{name}")
}

/// A selected, Ready pod created at `t(0)`, without any label of the election.
pub fn pod(name: &str) -> PodView {
    PodView {
        name: name.into(),
        uid: uid(name),
        selected: true,
        ready: true,
        not_ready_since: None,
        deleting: false,
        finished: false,
        created_at: t(0),
        pod_ip: Some(format!("10.0.0.{}", name.len())),
        node: Some("node-1".into()),
        role: None,
        fencing_token: None,
        label_token: None,
        leader_since: None,
        priority: Some(0),
        handover: None,
        reclaim: false,
        shared: Default::default(),
    }
}

/// Builder methods on [`PodView`].
pub trait PodExt: Sized {
    /// Created at `t(s)`.
    fn created(self, s: i64) -> Self;
    /// NotReady since `t(s)`.
    fn not_ready_since(self, s: i64) -> Self;
    /// Ready (again).
    fn ready(self) -> Self;
    /// Has a deletion timestamp.
    fn terminating(self) -> Self;
    /// Phase Succeeded or Failed.
    fn finished(self) -> Self;
    /// Its `elector.dev/priority` (`None`: not an integer).
    fn priority(self, priority: Option<i32>) -> Self;
    /// No longer matches the selector.
    fn unselected(self) -> Self;
    /// Another incarnation of the name.
    fn with_uid(self, uid: &str) -> Self;
    /// Labelled follower.
    fn follower(self) -> Self;
    /// Labelled leader with its annotations.
    fn leader(self, token: u64, since: Timestamp) -> Self;
    /// Carries leader annotations (whatever its label).
    fn annotated(self, token: u64, since: Timestamp) -> Self;
}

impl PodExt for PodView {
    fn created(mut self, s: i64) -> Self {
        self.created_at = t(s);
        self
    }
    fn not_ready_since(mut self, s: i64) -> Self {
        self.ready = false;
        self.not_ready_since = Some(not_ready_from(t(s)));
        self
    }
    fn ready(mut self) -> Self {
        self.ready = true;
        self.not_ready_since = None;
        self
    }
    fn terminating(mut self) -> Self {
        self.deleting = true;
        self
    }
    fn finished(mut self) -> Self {
        self.finished = true;
        self
    }
    fn priority(mut self, priority: Option<i32>) -> Self {
        self.priority = priority;
        self
    }
    fn unselected(mut self) -> Self {
        self.selected = false;
        self
    }
    fn with_uid(mut self, uid: &str) -> Self {
        self.uid = uid.into();
        self
    }
    fn follower(mut self) -> Self {
        self.role = Some("follower".into());
        self
    }
    fn leader(self, token: u64, since: Timestamp) -> Self {
        let mut p = self.annotated(token, since);
        p.role = Some("leader".into());
        p
    }
    fn annotated(mut self, token: u64, since: Timestamp) -> Self {
        self.fencing_token = Some(token.to_string());
        self.label_token = Some(token.to_string());
        self.leader_since = Some(since.to_string());
        self
    }
}

/// The key as the operator writes it for `pod`.
pub fn value_for(pod: &str, uid: &str) -> Vec<u8> {
    serde_json::json!({"pod": pod, "namespace": "shop", "uid": uid, "election": "web"})
        .to_string()
        .into_bytes()
}

/// The key held by `session` at `lock_index`, its value naming `pod`.
pub fn held(session: &str, lock_index: u64, pod: &str) -> LockView {
    LockView::Held {
        session: session.into(),
        lock_index,
        value: Some(value_for(pod, &uid(pod))),
    }
}

/// The key, unlocked, at `lock_index`.
/// The key held by `session` with a value written by install `install` of cluster `cluster`
/// for `pod`.
pub fn held_by_install(session: &str, pod: &str, cluster: &str, install: &str) -> LockView {
    let value = serde_json::json!({
        "pod": pod, "namespace": "shop", "uid": uid(pod), "election": "web",
        "cluster": cluster, "install": install,
    });
    LockView::Held {
        session: session.into(),
        lock_index: 9,
        value: Some(value.to_string().into_bytes()),
    }
}

pub fn free(lock_index: u64) -> LockView {
    LockView::Free { lock_index }
}

/// The operator's session `id`, created for `pod`, last renewed at `t(99)`.
pub fn session(id: &str, pod: &str) -> SessionView {
    SessionView {
        id: id.into(),
        pod: pod.into(),
        pod_uid: uid(pod),
        health: SessionHealth::Alive {
            renewed_at: mono(t(99)),
        },
        ttl: secs(15),
    }
}

/// Builder methods on [`SessionView`].
pub trait SessionExt: Sized {
    /// Consul answered 404.
    fn lost(self) -> Self;
    /// Renewals failing since `t(s)`.
    fn unconfirmed_since(self, s: i64) -> Self;
}

impl SessionExt for SessionView {
    fn lost(mut self) -> Self {
        self.health = SessionHealth::Lost;
        self
    }
    fn unconfirmed_since(mut self, s: i64) -> Self {
        self.health = SessionHealth::Unconfirmed {
            renewed_at: mono(t(s)),
        };
        self
    }
}

/// The install the scenes' operator is (see [`Scene::owner`]).
pub fn own_install() -> Owner {
    Owner::new("test-cluster", "ops.consul-elector")
}

/// A status that recorded `pod` leading through `session` with `token`, written by this
/// install.
pub fn recorded(
    pod: &str,
    session: &str,
    token: u64,
    since: Timestamp,
    transitions: u64,
) -> Recorded {
    Recorded {
        leader: Some(LeaderRecord {
            pod: pod.into(),
            uid: uid(pod),
            pod_ip: Some(format!("10.0.0.{}", pod.len())),
            since,
            session_id: Some(session.into()),
        }),
        fencing_token: Some(token),
        transitions,
        last_switchover: None,
        served_by: Some(own_install().id()),
    }
}

/// What the next reconcile reads back after `status` was written.
pub fn record(status: &StatusState) -> Recorded {
    Recorded {
        leader: status.leader.clone(),
        fencing_token: status.fencing_token,
        transitions: status.transitions,
        last_switchover: status.last_switchover.clone(),
        served_by: status.served_by.clone(),
    }
}

/// One observation, owned.
#[derive(Debug, Clone)]
pub struct Scene {
    pub config: ElectionConfig,
    pub pods: Vec<PodView>,
    pub lock: LockView,
    pub session: Option<SessionView>,
    pub recorded: Recorded,
    pub lock_delay_until: Option<Timestamp>,
    /// `None`: the key was read at `now`.
    pub lock_confirmed_at: Option<Timestamp>,
    /// The election's `elector.dev/switchover-to` annotation.
    pub switchover: Option<String>,
    /// On the monotonic clock (see [`mono`]).
    pub now: Timestamp,
    /// The wall clock's reading; `None`: it agrees with [`Self::now`].
    pub wall: Option<Timestamp>,
    /// This operator: cluster `test-cluster`, install `ops.consul-elector`.
    pub owner: Owner,
    /// What its last decision said about standing back for another install.
    pub stood_back: Option<crate::election::plan::StoodBack>,
    /// Consul's last refusal of one of the election's writes.
    pub consul_refused: Option<crate::election::refusal::ConsulRefusal>,
}

impl Scene {
    /// `pods`, the default spec, no key, no session, an empty status, at `t(100)`.
    pub fn new(pods: Vec<PodView>) -> Self {
        Self {
            config: config(),
            pods,
            lock: LockView::Absent,
            session: None,
            recorded: Recorded::default(),
            lock_delay_until: None,
            lock_confirmed_at: None,
            switchover: None,
            now: t(100),
            wall: None,
            owner: own_install(),
            stood_back: None,
            consul_refused: None,
        }
    }

    /// A stable election: `leader` labelled with `token` since `t(0)`, every other pod a
    /// follower, session `s1` holding the key, the status agreeing.
    pub fn elected(leader: &str, others: &[&str], token: u64) -> Self {
        let mut pods = vec![pod(leader).leader(token, t(0))];
        pods.extend(others.iter().map(|n| pod(n).follower()));
        Self {
            lock: held("s1", token, leader),
            session: Some(session("s1", leader)),
            recorded: recorded(leader, "s1", token, t(0), 0),
            ..Self::new(pods)
        }
    }

    pub fn config(mut self, config: ElectionConfig) -> Self {
        self.config = config;
        self
    }
    pub fn lock(mut self, lock: LockView) -> Self {
        self.lock = lock;
        self
    }
    pub fn session(mut self, session: Option<SessionView>) -> Self {
        self.session = session;
        self
    }
    pub fn recorded(mut self, recorded: Recorded) -> Self {
        self.recorded = recorded;
        self
    }
    pub fn lock_delay_until(mut self, until: Option<Timestamp>) -> Self {
        self.lock_delay_until = until;
        self
    }
    pub fn now(mut self, now: Timestamp) -> Self {
        self.now = now;
        self
    }
    /// The wall clock reads `wall` (stepped away from the monotonic [`Self::now`]).
    pub fn wall(mut self, wall: Timestamp) -> Self {
        self.wall = Some(wall);
        self
    }
    /// Requests a switchover to `to` (a pod name or `*`).
    pub fn switchover(mut self, to: &str) -> Self {
        self.switchover = Some(to.into());
        self
    }
    /// Consul refused one of the election's writes with `refusal`.
    pub fn consul_refused(mut self, refusal: crate::election::refusal::ConsulRefusal) -> Self {
        self.consul_refused = Some(refusal);
        self
    }
    /// The key was last read (or this process started) at `at`.
    pub fn lock_confirmed_at(mut self, at: Timestamp) -> Self {
        self.lock_confirmed_at = Some(at);
        self
    }
    /// Replaces the pod named like `p`.
    pub fn with_pod(mut self, p: PodView) -> Self {
        match self.pods.iter_mut().find(|q| q.name == p.name) {
            Some(q) => *q = p,
            None => self.pods.push(p),
        }
        self
    }
    /// Removes pod `name` (it is gone from the API server).
    pub fn without_pod(mut self, name: &str) -> Self {
        self.pods.retain(|p| p.name != name);
        self
    }

    pub fn observation(&self) -> Observation<'_> {
        Observation {
            config: &self.config,
            pods: &self.pods,
            lock: &self.lock,
            session: self.session.as_ref(),
            recorded: &self.recorded,
            lock_delay_until: self.lock_delay_until.map(mono),
            lock_confirmed_at: mono(self.lock_confirmed_at.unwrap_or(self.now)),
            switchover: self.switchover.as_deref(),
            now: mono(self.now),
            wall: self.wall.unwrap_or(self.now),
            owner: &self.owner,
            stood_back: self.stood_back.as_ref(),
            consul_refused: self.consul_refused.as_ref(),
        }
    }

    pub fn plan(&self) -> Plan {
        plan(&self.observation())
    }

    /// What a [`crate::election::plan_loop::PlanLoop`] plans from: the observation without
    /// the status and the switchover request, which the loop carries, and without what the
    /// election remembers ([`Self::memory`]).
    pub fn world(&self) -> crate::election::plan_loop::World<'_> {
        let obs = self.observation();
        crate::election::plan_loop::World {
            config: obs.config,
            pods: obs.pods,
            lock: obs.lock,
            session: obs.session,
            lock_confirmed_at: obs.lock_confirmed_at,
            now: obs.now,
            wall: obs.wall,
            owner: obs.owner,
        }
    }

    /// What the election remembers in this scene: its lock-delay, standing back, Consul's
    /// refusal.
    /// What the scene's plan loop adopts with: the spec's settings, this operator.
    pub fn adopting(&self) -> crate::election::first_look::Adopting {
        crate::election::first_look::Adopting {
            election: crate::election::config::ElectionKey {
                namespace: "shop".into(),
                name: "web".into(),
            },
            mode: self.config.mode,
            holds_session: self.session.is_some(),
            recorded_settings: None,
            spec_settings: self.config.session,
            owner: self.owner.clone(),
        }
    }

    /// A plan loop over the scene's status and switchover request, making at most `max_plans`
    /// plans with actions, past its first look: the key read as the scene has it, nothing
    /// adopted (on a memory of its own: the look's effects on memory are
    /// [`crate::election::first_look`]'s tests').
    pub fn plan_loop(&self, max_plans: usize) -> crate::election::plan_loop::PlanLoop {
        use crate::election::plan_loop::{Next, PlanLoop};
        let mut plans = PlanLoop::new(
            self.recorded.clone(),
            self.switchover.clone(),
            max_plans,
            crate::election::first_look::Adopting {
                holds_session: true,
                ..self.adopting()
            },
        );
        let mut memory = ElectionMemory::default();
        if let Next::Look(_) = plans.poll(&mut memory) {
            plans.key_read(Ok(self.lock.clone()), &mut memory);
        }
        plans
    }

    pub fn memory(&self) -> ElectionMemory {
        let mut memory = ElectionMemory::default();
        if let Some(until) = self.lock_delay_until {
            let now = mono(self.now);
            memory
                .key
                .session_forgotten(mono(until).saturating_duration_since(now), now);
        }
        memory.planned(self.stood_back.as_ref());
        if let Some(refusal) = &self.consul_refused {
            memory.refused(refusal.clone());
        }
        memory
    }
}

// ---- Reading plans ----

pub fn clear(request: &str) -> Action {
    Action::ClearSwitchover {
        request: request.into(),
    }
}

/// The steps that decide `request`: its outcome written as the plan records it, then its
/// removal.
pub fn decide(plan: &Plan, request: &str) -> Vec<Action> {
    let record = plan.status.last_switchover.clone().expect("a record");
    vec![
        Action::RecordSwitchover {
            record,
            decides: Some(request.into()),
        },
        clear(request),
    ]
}

pub fn follower(pod: &str) -> Action {
    Action::LabelFollower {
        pod: pod.into(),
        uid: uid(pod),
    }
}
pub fn unlabel(pod: &str) -> Action {
    Action::Unlabel {
        pod: pod.into(),
        uid: uid(pod),
    }
}
pub fn release(session: &str) -> Action {
    Action::Release {
        session: session.into(),
    }
}
pub fn destroy(session: &str) -> Action {
    Action::DestroySession {
        session: session.into(),
    }
}
pub fn create(pod: &str) -> Action {
    Action::CreateSession {
        pod: pod.into(),
        uid: uid(pod),
    }
}
pub fn confirm(session: &str) -> Action {
    Action::ConfirmSession {
        session: session.into(),
    }
}

pub fn acquire(session: &str, pod: &str) -> Action {
    Action::Acquire {
        session: session.into(),
        pod: pod.into(),
    }
}
pub fn label_leader(pod: &str, fencing_token: u64, since: Timestamp) -> Action {
    Action::LabelLeader {
        pod: pod.into(),
        uid: uid(pod),
        fencing_token,
        since,
    }
}

/// The plan's actions without its events and status records.
pub fn steps(plan: &Plan) -> Vec<Action> {
    plan.actions
        .iter()
        .filter(|a| !matches!(a, Action::Emit(_) | Action::RecordToken { .. }))
        .cloned()
        .collect()
}

/// The plan's events, with the pod each concerns.
pub fn events(plan: &Plan) -> Vec<(EventReason, Option<String>)> {
    plan.actions
        .iter()
        .filter_map(|a| match a {
            Action::Emit(e) => Some((e.reason, e.pod.clone())),
            _ => None,
        })
        .collect()
}

/// The plan's events published as Warnings, with the pod each concerns.
pub fn warnings(plan: &Plan) -> Vec<(EventReason, Option<String>)> {
    plan.actions
        .iter()
        .filter_map(|a| match a {
            Action::Emit(e) if e.warning => Some((e.reason, e.pod.clone())),
            _ => None,
        })
        .collect()
}

/// Whether the action talks to Consul (or to the operator's session manager).
pub fn is_consul(action: &Action) -> bool {
    matches!(
        action,
        Action::Release { .. }
            | Action::DestroySession { .. }
            | Action::ForgetSession
            | Action::CreateSession { .. }
            | Action::ConfirmSession { .. }
            | Action::Acquire { .. }
    )
}

/// The plan's Consul actions.
pub fn consul_steps(plan: &Plan) -> Vec<Action> {
    plan.actions
        .iter()
        .filter(|a| is_consul(a))
        .cloned()
        .collect()
}

/// The condition `type_` of a status.
pub fn condition<'s>(status: &'s StatusState, type_: &str) -> &'s ConditionState {
    status
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .unwrap_or_else(|| panic!("no condition {type_} in {status:?}"))
}

/// Rule 1 inside one plan: every demotion of a pod that carries the leader label (in the
/// observation) comes before any lock step (release, destroy, create, acquire) and any
/// leader label, and a pod is labelled leader only if nobody else still carries the label
/// once the demotions before it ran.
pub fn assert_demotions_first(scene: &Scene, plan: &Plan) {
    let leader_uids: Vec<&str> = scene
        .pods
        .iter()
        .filter(|p| p.role.as_deref() == Some(scene.config.labels.leader.as_str()))
        .map(|p| p.uid.as_str())
        .collect();
    let mut first_move = None;
    let mut last_demotion = None;
    let mut demoted: Vec<&str> = Vec::new();
    for (i, a) in plan.actions.iter().enumerate() {
        match a {
            Action::LabelFollower { uid, .. } | Action::Unlabel { uid, .. }
                if leader_uids.contains(&uid.as_str()) =>
            {
                last_demotion = Some(i);
                demoted.push(uid.as_str());
            }
            Action::LabelLeader { uid, .. } => {
                first_move.get_or_insert(i);
                let others_still_leading = leader_uids
                    .iter()
                    .any(|u| *u != uid.as_str() && !demoted.contains(u));
                assert!(
                    !others_still_leading,
                    "leader label planned while another pod still carries it: {plan:#?}"
                );
            }
            Action::Release { .. }
            | Action::DestroySession { .. }
            | Action::CreateSession { .. }
            | Action::Acquire { .. } => {
                first_move.get_or_insert(i);
            }
            _ => {}
        }
    }
    if let (Some(d), Some(m)) = (last_demotion, first_move) {
        assert!(d < m, "a demotion comes after a lock step: {plan:#?}");
    }
}

// ---- A tiny deterministic world ----

/// Executes plans against an idealised Consul and API server: every action succeeds, the
/// status is written after each plan, time stands still unless a test moves it.
#[derive(Debug, Clone)]
pub struct World {
    pub scene: Scene,
    /// Sessions created so far (names the next one `s<n+2>`, `s1` being the scene's).
    created: u32,
    /// Every plan executed, in order.
    pub history: Vec<Plan>,
}

impl World {
    pub fn new(scene: Scene) -> Self {
        Self {
            scene,
            created: 0,
            history: Vec::new(),
        }
    }

    /// The pod named `name`.
    pub fn pod(&self, name: &str) -> &PodView {
        self.scene
            .pods
            .iter()
            .find(|p| p.name == name)
            .unwrap_or_else(|| panic!("no pod {name}"))
    }

    /// Names of the pods that carry the leader label.
    pub fn leaders(&self) -> Vec<String> {
        self.scene
            .pods
            .iter()
            .filter(|p| p.role.as_deref() == Some("leader"))
            .map(|p| p.name.clone())
            .collect()
    }

    /// Lets the world change between plans.
    pub fn edit(&mut self, f: impl FnOnce(Scene) -> Scene) {
        self.scene = f(self.scene.clone());
    }

    /// Plans once, executes every action, writes the status; returns the plan.
    pub fn step(&mut self) -> Plan {
        let plan = self.scene.plan();
        assert_demotions_first(&self.scene, &plan);
        for action in &plan.actions {
            self.apply(action);
            assert!(
                self.leaders().len() <= 1,
                "two leaders after {action:?}: {:#?}",
                self.scene.pods
            );
        }
        self.scene.recorded = record(&plan.status);
        self.history.push(plan.clone());
        plan
    }

    /// Steps until a plan has no actions (at most `max` plans); returns the plans that had
    /// actions.
    pub fn settle(&mut self) -> Vec<Plan> {
        let mut plans = Vec::new();
        for _ in 0..20 {
            let plan = self.step();
            if plan.actions.is_empty() {
                return plans;
            }
            plans.push(plan);
        }
        panic!("no convergence after 20 plans: {:#?}", self.history);
    }

    fn pod_mut(&mut self, uid: &str) -> &mut PodView {
        self.scene
            .pods
            .iter_mut()
            .find(|p| p.uid == uid)
            .unwrap_or_else(|| panic!("no pod with uid {uid}"))
    }

    fn apply(&mut self, action: &Action) {
        let now = self.scene.now;
        match action {
            Action::LabelFollower { uid, .. } => {
                let p = self.pod_mut(uid);
                p.role = Some("follower".into());
                p.fencing_token = None;
                p.label_token = None;
                p.leader_since = None;
                p.handover = None;
            }
            Action::Unlabel { uid, .. } => {
                let p = self.pod_mut(uid);
                p.role = None;
                p.fencing_token = None;
                p.label_token = None;
                p.leader_since = None;
                p.handover = None;
            }
            Action::LabelLeader {
                uid,
                fencing_token,
                since,
                ..
            } => {
                if self.scene.config.mode == Mode::Managed {
                    let s = self.scene.session.clone().expect("a session");
                    assert_eq!(s.pod_uid, *uid, "labelled another pod than the session's");
                    assert!(
                        matches!(&self.scene.lock, LockView::Held { session, lock_index, .. }
                            if *session == s.id && lock_index == fencing_token),
                        "labelled without holding the lock: {:?}",
                        self.scene.lock
                    );
                }
                let p = self.pod_mut(uid);
                p.role = Some("leader".into());
                p.fencing_token = Some(fencing_token.to_string());
                p.label_token = Some(fencing_token.to_string());
                p.leader_since = Some(since.to_string());
                p.handover = None;
            }
            Action::Release { session } => {
                if let LockView::Held {
                    session: holder,
                    lock_index,
                    ..
                } = &self.scene.lock
                    && holder == session
                {
                    self.scene.lock = free(*lock_index);
                }
            }
            Action::DestroySession { session } => {
                if let LockView::Held {
                    session: holder,
                    lock_index,
                    ..
                } = &self.scene.lock
                    && holder == session
                {
                    // Invalidation of a holder: Consul's lock-delay.
                    self.scene.lock = free(*lock_index);
                    self.scene.lock_delay_until = Some(
                        now.checked_add(self.scene.config.session.lock_delay)
                            .unwrap(),
                    );
                }
                if self
                    .scene
                    .session
                    .as_ref()
                    .is_some_and(|s| s.id == *session)
                {
                    self.scene.session = None;
                }
            }
            Action::ForgetSession => self.scene.session = None,
            Action::AnnotateHandover { uid, deadline, .. } => {
                self.pod_mut(uid).handover = Some(deadline.to_string());
            }
            Action::ClearHandover { uid, .. } => self.pod_mut(uid).handover = None,
            Action::RecordSwitchover { record, .. } => {
                self.scene.recorded.last_switchover = Some(record.clone());
            }
            Action::RecordToken { fencing_token, .. } => {
                let recorded = &mut self.scene.recorded.fencing_token;
                *recorded = (*recorded).max(Some(*fencing_token));
            }
            Action::ClearSwitchover { request } => {
                if self.scene.switchover.as_deref() == Some(request.as_str()) {
                    self.scene.switchover = None;
                }
            }
            Action::CreateSession { pod, uid } => {
                self.created += 1;
                self.scene.session = Some(SessionView {
                    id: format!("s{}", self.created + 1),
                    pod: pod.clone(),
                    pod_uid: uid.clone(),
                    health: SessionHealth::Alive {
                        renewed_at: mono(now),
                    },
                    ttl: self.scene.config.session.ttl,
                });
            }
            Action::Acquire { session, pod } => {
                assert!(
                    self.scene.lock_delay_until.is_none_or(|u| u <= now),
                    "acquire during a known lock-delay"
                );
                let s = self.scene.session.clone().expect("a session");
                assert_eq!(
                    s.id, *session,
                    "acquire with a session the operator does not hold"
                );
                let lock_index = match &self.scene.lock {
                    LockView::Absent => 1,
                    LockView::Free { lock_index } => lock_index + 1,
                    LockView::Held {
                        session: holder,
                        lock_index,
                        ..
                    } if holder == session => *lock_index,
                    other => panic!("acquire of a key held elsewhere: {other:?}"),
                };
                self.scene.lock = LockView::Held {
                    session: session.clone(),
                    lock_index,
                    value: Some(value_for(pod, &s.pod_uid)),
                };
            }
            Action::Emit(_) | Action::ConfirmSession { .. } => {}
        }
    }
}

/// What the operator acts with for a spec that validates to `config`, as
/// `crd::applied::applied_of` records it in `status.applied`.
pub fn applied_of(config: &ElectionConfig) -> AppliedSpec {
    let session = &config.session;
    AppliedSpec {
        label_key: config.labels.key.clone(),
        leader: config.labels.leader.clone(),
        follower: config.labels.follower.clone(),
        key: config.key.clone(),
        session: (config.mode == Mode::Managed).then(|| AppliedSession {
            ttl: format!("{}s", session.ttl.as_secs()),
            lock_delay: format!("{}s", session.lock_delay.as_secs()),
            behavior: match session.behavior {
                Behavior::Release => "release".into(),
                Behavior::Delete => "delete".into(),
            },
        }),
        ..AppliedSpec::default()
    }
}

/// The `SpecValid` condition of a valid spec, as the core reports it
/// ([`check_label_key`] with no pod controller selecting the label key).
pub fn spec_valid() -> ConditionState {
    check_label_key(crate::crd::DEFAULT_ROLE_LABEL, &[])
}

/// What a status is rendered from for a managed election of the default spec, generation 1,
/// at `t(100)`, with no failed write before and a safe lease timing.
pub fn facts() -> crate::election::status_change::Facts {
    crate::election::status_change::Facts {
        generation: Some(1),
        applied: Some(applied_of(&config())),
        mode: Some(crate::election::config::Mode::Managed),
        lease_timing: Some(ConditionState {
            type_: crate::crd::conditions::LEASE_TIMING_SAFE,
            status: true,
            reason: "SessionOutlivesFailover",
            message: "safe".into(),
        }),
        labelled: None,
        now: t(100),
    }
}
