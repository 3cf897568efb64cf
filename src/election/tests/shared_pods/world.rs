//! The pod world of several elections, and what each election's operator reads of it: the
//! facts between elections (claims, who labelled a pod, who owns its annotations), the views
//! its planner plans from, and the checks of the property.

mod driver;

use driver::Faults;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use jiff::Timestamp;

use crate::crd::{
    ELECTION_ANNOTATION, FENCING_TOKEN_ANNOTATION, HANDOVER_ANNOTATION, LEADER_SINCE_ANNOTATION,
    LeaderElectionStatus, default_key, label_token_annotation,
};
use crate::election::admission::{Access, Input};
use crate::election::annotation_owner::{Owner as AnnotationOwner, SharedPod, shared_view};
use crate::election::config::{ElectionConfig, ElectionKey, LabelConfig, Mode, Owner};
use crate::election::conflict::{
    self, Claim, Writer, YieldingLabel, label_to_wait_for, yielding_to_me, yields_to,
};
use crate::election::machine::{ConsulWait, Election, Left};
use crate::election::observe::{LockView, PodView, SessionHealth, SessionView};

use crate::election::pod_patch::PodPatch;
use crate::election::reconcile::Found;
use crate::election::tests::support::{spec_valid, t};
use crate::election::withdrawal::{LabelledPod, Sessions, acted_with};

const NAMESPACE: &str = "shop";
const KEYS: [&str; 2] = ["elector.dev/role", "example.com/role"];
const LEADER: &str = "leader";
const FOLLOWER: &str = "follower";

fn owner() -> Owner {
    Owner::new("model-cluster", "ops.consul-elector")
}

/// A pod of the one world.
#[derive(Debug, Clone)]
struct Pod {
    name: String,
    uid: String,
    created_at: Timestamp,
    ready: bool,
    /// Which elections' selectors match it.
    selected_by: Vec<bool>,
    labels: BTreeMap<String, String>,
    annotations: BTreeMap<String, String>,
}

/// The operator's session for one election.
#[derive(Debug, Clone)]
struct Registered {
    id: String,
    pod: String,
    pod_uid: String,
    health: SessionHealth,
}

/// One election, the operator's state for it, and its Consul key.
struct Sim {
    name: String,
    created_at: Timestamp,
    config: ElectionConfig,
    machine: Election,
    status: LeaderElectionStatus,
    registered: Option<Registered>,
    /// The key: the holding session, Consul's LockIndex.
    holder: Option<String>,
    lock_index: u64,
    deleted: bool,
    finalized: bool,
}

impl Sim {
    fn key(&self) -> ElectionKey {
        ElectionKey {
            namespace: NAMESPACE.into(),
            name: self.name.clone(),
        }
    }

    fn live(&self) -> bool {
        !self.deleted
    }

    fn leads(&self, pod: &Pod) -> bool {
        pod.labels.get(&self.config.labels.key).map(String::as_str) == Some(LEADER)
    }
}

/// A world event.
#[derive(Debug, Clone)]
pub enum Event {
    /// A pod appears, Ready or not, selected by the elections of the mask's bits.
    AddPod { ready: bool, mask: u8 },
    /// The `i`th pod's Ready condition.
    Ready(usize, bool),
    /// The `i`th pod starts or stops matching election `e`'s selector.
    Select(usize, usize, bool),
    /// The `i`th pod is gone.
    Gone(usize),
    /// Consul invalidates election `e`'s session (its key is released).
    Invalidate(usize),
    /// Election `e` is deleted.
    Delete(usize),
    /// Election `e`, deleted and gone, is created again (younger than every other).
    Recreate(usize),
    /// One reconcile of election `e`; the `fail_at`-th write fails (before or after it took
    /// effect).
    Loop {
        e: usize,
        fail_at: Option<usize>,
        after_effect: bool,
    },
    /// Time passes.
    Advance(u64),
}

/// The world.
pub struct Shared {
    pods: Vec<Pod>,
    sims: Vec<Sim>,
    /// Consul's sessions: the election each belongs to.
    sessions: BTreeMap<String, usize>,
    next_uid: u64,
    next_session: u64,
    now: Timestamp,
    /// Writes that changed the world (pod patches, Consul writes), for the fixed point.
    writes: u64,
    pub trace: String,
    /// How often each situation occurred (for the coverage test).
    pub seen: BTreeMap<String, u32>,
}

impl Shared {
    /// Elections with these label keys (an index into two keys), created a second apart in
    /// this order, and `pods` (Ready, and the mask of elections selecting it).
    pub fn new(keys: &[usize], pods: &[(bool, u8)]) -> Self {
        let sims = keys
            .iter()
            .enumerate()
            .map(|(n, k)| {
                let name = format!("e{n}");
                let mut config = ElectionConfig {
                    mode: Mode::Managed,
                    key: default_key(NAMESPACE, &name),
                    labels: LabelConfig {
                        key: KEYS[*k % KEYS.len()].into(),
                        leader: LEADER.into(),
                        follower: FOLLOWER.into(),
                    },
                    ..crate::election::tests::support::config()
                };
                // The world's Consul keeps no lock-delay.
                config.session.lock_delay = Duration::ZERO;
                Sim {
                    created_at: t(i64::try_from(n).unwrap_or(0)),
                    name,
                    config,
                    machine: Election::new(),
                    status: LeaderElectionStatus::default(),
                    registered: None,
                    holder: None,
                    lock_index: 0,
                    deleted: false,
                    finalized: false,
                }
            })
            .collect();
        let mut world = Shared {
            pods: Vec::new(),
            sims,
            sessions: BTreeMap::new(),
            next_uid: 0,
            next_session: 0,
            now: t(1000),
            writes: 0,
            trace: String::new(),
            seen: BTreeMap::new(),
        };
        let elections: Vec<String> = world
            .sims
            .iter()
            .map(|s| format!("{} {}", s.name, s.config.labels.key))
            .collect();
        let _ = writeln!(world.trace, "elections {elections:?}");
        for &(ready, mask) in pods {
            world.apply(&Event::AddPod { ready, mask });
        }
        world
    }

    fn fail(&self, what: &str) -> ! {
        panic!("INVARIANT: {what}\n--- trace ---\n{}", self.trace);
    }

    fn see(&mut self, situation: &str) {
        *self.seen.entry(situation.to_owned()).or_default() += 1;
    }

    /// Applies one event, and checks what the reconciles of it did.
    pub fn apply(&mut self, event: &Event) {
        let _ = writeln!(self.trace, "@{} {event:?}", self.now.as_second() - 1000);
        let n = self.sims.len();
        match *event {
            Event::AddPod { ready, mask } => {
                self.next_uid += 1;
                let name = format!("p{}", self.next_uid);
                self.pods.push(Pod {
                    uid: format!("{name}-u"),
                    name,
                    created_at: self.now,
                    ready,
                    selected_by: (0..n).map(|e| mask & (1 << e) != 0).collect(),
                    labels: BTreeMap::new(),
                    annotations: BTreeMap::new(),
                });
            }
            Event::Ready(i, ready) => {
                if let Some(p) = self.pods.get_mut(i) {
                    p.ready = ready;
                }
            }
            Event::Select(i, e, selected) => {
                if let Some(flag) = self.pods.get_mut(i).and_then(|p| p.selected_by.get_mut(e)) {
                    *flag = selected;
                }
            }
            Event::Gone(i) => {
                if i < self.pods.len() {
                    self.pods.remove(i);
                }
            }
            Event::Invalidate(e) => {
                let Some(id) = self
                    .sims
                    .get(e)
                    .and_then(|s| s.registered.as_ref())
                    .map(|r| r.id.clone())
                else {
                    return;
                };
                self.sessions.remove(&id);
                let sim = &mut self.sims[e];
                if sim.holder.as_ref() == Some(&id) {
                    sim.holder = None;
                }
                if let Some(r) = sim.registered.as_mut() {
                    r.health = SessionHealth::Lost;
                }
            }
            Event::Delete(e) => {
                if let Some(sim) = self.sims.get_mut(e) {
                    sim.deleted = true;
                }
            }
            Event::Recreate(e) => {
                let now = self.now;
                if let Some(sim) = self.sims.get_mut(e).filter(|s| s.finalized) {
                    sim.created_at = now;
                    sim.machine = Election::new();
                    sim.status = LeaderElectionStatus::default();
                    sim.registered = None;
                    sim.deleted = false;
                    sim.finalized = false;
                }
            }
            Event::Loop {
                e,
                fail_at,
                after_effect,
            } => {
                if e < n && !self.sims[e].finalized {
                    let _ = self.reconcile(e, Faults::new(fail_at, after_effect));
                }
            }
            Event::Advance(secs) => self.now += Duration::from_secs(secs),
        }
        if self
            .leaders_per_election()
            .iter()
            .any(|n| n.unwrap_or(0) > 1)
        {
            // For the elections to repair: no step of theirs may add to it.
            self.see("two leader labels left by the world");
        }
    }

    /// Every election's claim: the pods its selector matches, under its label key.
    fn claims(&self) -> Vec<Claim> {
        self.sims
            .iter()
            .filter(|s| s.live())
            .map(|s| Claim {
                name: s.name.clone(),
                created_at: s.created_at,
                label_key: s.config.labels.key.clone(),
                pods: self.selected(s).map(|p| p.uid.clone()).collect(),
            })
            .collect()
    }

    fn selected<'a>(&'a self, sim: &'a Sim) -> impl Iterator<Item = &'a Pod> + 'a {
        let e = self.index_of(&sim.name);
        self.pods
            .iter()
            .filter(move |p| p.selected_by.get(e).copied().unwrap_or(false))
    }

    fn index_of(&self, name: &str) -> usize {
        self.sims
            .iter()
            .position(|s| s.name == name)
            .unwrap_or(usize::MAX)
    }

    fn sim_named(&self, name: &str) -> Option<&Sim> {
        self.sims.iter().find(|s| s.name == name)
    }

    /// The live election, other than `me`, whose name the pod's annotations carry
    /// (`views::foreign_owner`).
    fn foreign_owner(&self, me: &str, pod: &Pod) -> Option<&Sim> {
        let named = pod.annotations.get(ELECTION_ANNOTATION)?;
        (named != me)
            .then(|| self.sim_named(named))
            .flatten()
            .filter(|s| s.live())
    }

    /// Whether a live election other than `me`, writing another key than `key`, labels the
    /// pod leader (`views::led_by_another`).
    fn led_by_another(&self, me: &str, key: &str, pod: &Pod) -> bool {
        self.sims
            .iter()
            .any(|s| s.name != me && s.live() && s.config.labels.key != key && s.leads(pod))
    }

    /// Whether election `sim` labelled `pod` (`views::labelled_by`, decided by
    /// `conflict::labelled_by`).
    fn labelled_by(&self, sim: &Sim, pod: &Pod) -> bool {
        if pod.annotations.get(ELECTION_ANNOTATION) == Some(&sim.name) {
            return true;
        }
        let key = &sim.config.labels.key;
        let value = pod.labels.get(key).map(String::as_str);
        if value != Some(LEADER) && value != Some(FOLLOWER) {
            return false;
        }
        let same_key_owner = self
            .foreign_owner(&sim.name, pod)
            .is_some_and(|o| o.config.labels.key == *key);
        let selecting: Vec<Writer> = self
            .sims
            .iter()
            .filter(|s| {
                s.live() && s.config.labels.key == *key && pod.selected_by[self.index_of(&s.name)]
            })
            .map(|s| Writer {
                name: s.name.clone(),
                created_at: s.created_at,
            })
            .collect();
        conflict::labelled_by(&sim.name, false, same_key_owner, &selecting, true)
    }

    /// The pods election `e` works on, each with whether it selects it (`views::pods_of`).
    fn pods_of(&self, e: usize) -> Vec<(Pod, bool)> {
        let sim = &self.sims[e];
        self.pods
            .iter()
            .filter_map(|p| {
                let selected = p.selected_by[e];
                (selected || self.labelled_by(sim, p)).then(|| (p.clone(), selected))
            })
            .collect()
    }

    /// What the planner of election `e` reads of its pods (`k8s::pod_view`, then
    /// `inputs::plan_loop::shared_views`).
    fn views(&self, e: usize) -> Vec<PodView> {
        let sim = &self.sims[e];
        let labels = &sim.config.labels;
        self.pods_of(e)
            .into_iter()
            .map(|(p, selected)| {
                let mut view = PodView {
                    name: p.name.clone(),
                    uid: p.uid.clone(),
                    selected,
                    ready: p.ready,
                    not_ready_since: None,
                    deleting: false,
                    finished: false,
                    created_at: p.created_at,
                    pod_ip: None,
                    node: None,
                    role: p.labels.get(&labels.key).cloned(),
                    fencing_token: p.annotations.get(FENCING_TOKEN_ANNOTATION).cloned(),
                    label_token: p
                        .annotations
                        .get(&label_token_annotation(&labels.key))
                        .cloned(),
                    leader_since: p.annotations.get(LEADER_SINCE_ANNOTATION).cloned(),
                    priority: Some(0),
                    handover: p.annotations.get(HANDOVER_ANNOTATION).cloned(),
                    reclaim: false,
                    shared: self.shared(e, &p, &labels.key),
                };
                let named = p.annotations.get(ELECTION_ANNOTATION).map(String::as_str);
                let owner = AnnotationOwner::of(named, &sim.name, || {
                    self.foreign_owner(&sim.name, &p).is_some()
                });
                let led = || self.led_by_another(&sim.name, &labels.key, &p);
                shared_view(
                    &mut view,
                    owner,
                    led,
                    labels,
                    sim.machine.leadership_of(&p.uid),
                );
                view
            })
            .collect()
    }

    /// What election `e` knows of `pod` as elections writing other label keys than `key`
    /// share it (`inputs::shared::shared_pod`).
    fn shared(&self, e: usize, pod: &Pod, key: &str) -> SharedPod {
        let sim = &self.sims[e];
        let foreign_owner_leads = self.foreign_owner(&sim.name, pod).map(|o| o.leads(pod));
        SharedPod {
            foreign_owner_leads,
            owned_by_me: pod.annotations.get(ELECTION_ANNOTATION) == Some(&sim.name),
            led_by_another: foreign_owner_leads.is_none()
                && self.led_by_another(&sim.name, key, pod),
        }
    }

    /// Applies `patch` as the API server applies a merge patch with the pod's UID.
    fn apply_patch(&mut self, patch: &PodPatch) -> bool {
        let Some(p) = self
            .pods
            .iter_mut()
            .find(|p| p.uid == patch.uid && p.name == patch.pod)
        else {
            return false;
        };
        let before = (p.labels.clone(), p.annotations.clone());
        for (key, value) in &patch.labels {
            match value {
                Some(v) => p.labels.insert(key.clone(), v.clone()),
                None => p.labels.remove(key),
            };
        }
        for (key, value) in &patch.annotations {
            match value {
                Some(v) => p.annotations.insert(key.clone(), v.clone()),
                None => p.annotations.remove(key),
            };
        }
        if (&p.labels, &p.annotations) != (&before.0, &before.1) {
            self.writes += 1;
        }
        true
    }

    fn lock_view(&self, e: usize) -> LockView {
        let sim = &self.sims[e];
        match &sim.holder {
            Some(session) => LockView::Held {
                session: session.clone(),
                lock_index: sim.lock_index,
                value: None,
            },
            None if sim.lock_index == 0 => LockView::Absent,
            None => LockView::Free {
                lock_index: sim.lock_index,
            },
        }
    }

    fn session_view(&self, e: usize) -> Option<SessionView> {
        let sim = &self.sims[e];
        sim.registered.as_ref().map(|r| SessionView {
            id: r.id.clone(),
            pod: r.pod.clone(),
            pod_uid: r.pod_uid.clone(),
            health: r.health,
            ttl: sim.config.session.ttl,
        })
    }

    /// What admission of election `e` gathers.
    fn gather(&self, e: usize, input: Input) -> Found {
        let claims = self.claims();
        let me = claims.iter().find(|c| c.name == self.sims[e].name);
        match input {
            Input::Spec | Input::LabelKey => Found::LabelKey(spec_valid()),
            Input::Older => Found::Older(
                me.and_then(|me| yields_to(me, &claims))
                    .map(|c| c.name.clone()),
            ),
            Input::YieldingLeader => {
                let waited = me.and_then(|me| {
                    let labels = self.yielding_labels(me, &claims);
                    label_to_wait_for(&me.name, &labels).map(|l| (l.pod.clone(), l.writer.clone()))
                });
                Found::YieldingLeader(waited)
            }
            Input::Access => Found::Access(Access::Usable),
            Input::Applied => Found::Applied {
                edited: false,
                needs_withdrawal: false,
            },
        }
    }

    /// The leader labels on the pods of the elections yielding to `me`, each with its writer,
    /// whether that writer yields and whether it selects the pod (`views::yielding_leader`).
    fn yielding_labels(&self, me: &Claim, claims: &[Claim]) -> Vec<YieldingLabel> {
        let mut labels = Vec::new();
        for claim in yielding_to_me(me, claims) {
            let Some(younger) = self.sim_named(&claim.name) else {
                continue;
            };
            let e = self.index_of(&younger.name);
            for p in &self.pods {
                let own = younger.leads(p) && self.labelled_by(younger, p);
                let writer = self.sims.iter().find(|s| {
                    s.live()
                        && s.config.labels.key == younger.config.labels.key
                        && s.leads(p)
                        && self.labelled_by(s, p)
                });
                let selected = p.selected_by[e];
                let Some(writer) = writer.filter(|_| own || selected) else {
                    continue;
                };
                let writes = claims.iter().find(|c| c.name == writer.name);
                labels.push(YieldingLabel {
                    pod: p.name.clone(),
                    writer: writer.name.clone(),
                    writer_yields: writes.is_some_and(|w| yields_to(w, claims).is_some()),
                    writer_selects: p.selected_by[self.index_of(&writer.name)],
                });
            }
        }
        labels
    }

    /// What election `e` left, for a withdrawal (`inputs::withdrawal::left`).
    fn left(&self, e: usize) -> Left {
        let sim = &self.sims[e];
        let held = sim.registered.as_ref().map(|r| r.id.clone());
        let acted = acted_with(
            sim.status.applied.as_ref(),
            Some(&sim.config),
            held.is_some(),
            default_key(NAMESPACE, &sim.name),
        );
        let pods = self
            .pods_of(e)
            .into_iter()
            .filter(|(p, _)| self.labelled_by(sim, p))
            .map(|(p, _)| LabelledPod {
                value: p.labels.get(&acted.label_key).cloned(),
                shared: self.shared(e, &p, &acted.label_key),
                pod: p.name,
                uid: p.uid,
            })
            .collect();
        Left {
            acted,
            pods,
            sessions: Sessions {
                held,
                recorded: sim
                    .status
                    .leader_or_last()
                    .and_then(|l| l.session_id.clone()),
                owner: owner(),
                election: sim.key(),
            },
            wait: ConsulWait {
                skip: None,
                deleted_at: sim.deleted.then_some(self.now),
                now: self.now,
                bound: Duration::from_secs(300),
            },
        }
    }

    /// How many of the pods each election selects carry the leader value under its key: what a
    /// Service selecting its pods and the leader label reaches. `None` where the conflict rules
    /// do not promise one leader: a deleted election (its labels are withdrawn, its pods are
    /// another election's to elect meanwhile), and one that overlaps two or more older
    /// elections, which may each lead pods it selects (it reports `Conflict`).
    fn leaders_per_election(&self) -> Vec<Option<usize>> {
        let claims = self.claims();
        (0..self.sims.len())
            .map(|e| {
                let sim = &self.sims[e];
                let me = claims.iter().find(|c| c.name == sim.name)?;
                let older = claims
                    .iter()
                    .filter(|o| {
                        o.label_key == me.label_key
                            && (o.created_at, &o.name) < (me.created_at, &me.name)
                            && o.pods.iter().any(|p| me.pods.contains(p))
                    })
                    .count();
                (older <= 1).then(|| {
                    self.pods
                        .iter()
                        .filter(|p| p.selected_by[e] && sim.leads(p))
                        .count()
                })
            })
            .collect()
    }

    /// After a step that may have written: no election's pods show a second leader label
    /// (unless the world made one, and the count only went down).
    fn check_step(&mut self, before: &[Option<usize>], step: &str) {
        let after = self.leaders_per_election();
        for (e, (had, has)) in before.iter().zip(&after).enumerate() {
            let (Some(had), Some(has)) = (*had, *has) else {
                continue;
            };
            if has > 1 && has > had {
                self.fail(&format!(
                    "{} selects {has} pods with its leader label after {step}",
                    self.sims[e].name
                ));
            }
        }
        let two_keys = self.pods.iter().any(|p| {
            let keys: std::collections::BTreeSet<&String> = self
                .sims
                .iter()
                .filter(|s| s.leads(p))
                .map(|s| &s.config.labels.key)
                .collect();
            keys.len() > 1
        });
        if two_keys {
            self.see("a pod leads under two label keys");
        }
    }

    /// No more events: sessions stay, every election reconciles until a whole pass writes
    /// nothing (else they undo each other); then every deleted election is gone, one that yields
    /// labels nothing, no label or annotation is left of no election, every acting election with a pod that may lead has exactly one leader label, no
    /// leader label is left that no acting election wrote, a leader pod carries the fencing
    /// token of an election that leads it (a pod no election leads carries none), and beside
    /// each leader label is the token its election's status records (beside no other label).
    pub fn quiesce(&mut self) {
        let _ = writeln!(self.trace, "--- quiesce ---");
        // Reconciles until a whole pass writes nothing: two elections must not undo each
        // other's patches.
        let mut passes = 0;
        loop {
            let writes = self.writes;
            let mut again = None;
            for e in 0..self.sims.len() {
                if !self.sims[e].finalized {
                    let requeue = self.reconcile(e, Faults::new(None, false));
                    again = again.max(requeue);
                }
            }
            self.now += again
                .unwrap_or(Duration::from_secs(1))
                .max(Duration::from_secs(1));
            if self.writes == writes && again.is_none() {
                break;
            }
            passes += 1;
            if passes > 12 {
                self.fail("the elections keep undoing each other's patches");
            }
        }
        if let Some(sim) = self.sims.iter().find(|s| s.deleted && !s.finalized) {
            self.fail(&format!("{} was deleted but is still there", sim.name));
        }
        let claims = self.claims();
        let mut accounted = 0;
        for (e, sim) in self.sims.iter().enumerate() {
            let Some(me) = claims.iter().find(|c| c.name == sim.name) else {
                continue;
            };
            if yields_to(me, &claims).is_some() {
                if let Some(p) = self.pods.iter().find(|p| self.labelled_by(sim, p)) {
                    self.fail(&format!("{} yields but still labels {}", sim.name, p.name));
                }
                continue;
            }
            let may_lead = self.pods.iter().any(|p| p.selected_by[e] && p.ready);
            let leaders = self
                .pods
                .iter()
                .filter(|p| p.selected_by[e] && sim.leads(p))
                .count();
            if leaders != usize::from(may_lead) {
                self.fail(&format!(
                    "{} acts and has {leaders} leader labels once quiet",
                    sim.name
                ));
            }
            accounted += leaders;
        }
        for p in &self.pods {
            let live = |name: &str| self.sims.iter().any(|s| s.live() && s.name == name);
            let stale = p.labels.keys().any(|k| {
                !self
                    .sims
                    .iter()
                    .any(|s| s.live() && s.config.labels.key == *k)
            }) || p
                .annotations
                .get(ELECTION_ANNOTATION)
                .is_some_and(|o| !live(o));
            if stale {
                self.fail(&format!(
                    "{} keeps a label or annotation of no election",
                    p.name
                ));
            }
            let leading: Vec<&str> = self
                .sims
                .iter()
                .filter(|s| s.live() && s.leads(p))
                .map(|s| s.name.as_str())
                .collect();
            let owner = p.annotations.get(ELECTION_ANNOTATION).map(String::as_str);
            let token = p.annotations.get(FENCING_TOKEN_ANNOTATION);
            let consistent = match (leading.is_empty(), owner, token) {
                (true, _, None) => true,
                (false, Some(owner), Some(_)) => leading.contains(&owner),
                _ => false,
            };
            if !consistent {
                self.fail(&format!(
                    "once quiet, pod {} led by {leading:?} carries the annotations of {owner:?} (token {token:?})",
                    p.name
                ));
            }
            // Beside each leader label, the token of the election that wrote it, whose status
            // names the pod leader.
            for key in KEYS {
                let token = p.annotations.get(&label_token_annotation(key));
                let expected = (p.labels.get(key).map(String::as_str) == Some(LEADER))
                    .then(|| {
                        self.sims.iter().find(|s| {
                            s.live()
                                && s.config.labels.key == key
                                && self.labelled_by(s, p)
                                && s.status.leader.as_ref().is_some_and(|l| l.pod == p.name)
                        })
                    })
                    .map(|leading| leading.and_then(|s| s.status.fencing_token));
                if token.map(|t| t.parse().ok()) != expected {
                    self.fail(&format!(
                        "once quiet, pod {} carries {token:?} under {key}'s token annotation, \
                         the status of its leader says {expected:?}",
                        p.name,
                    ));
                }
            }
        }
        let all: usize = KEYS
            .iter()
            .map(|key| {
                self.pods
                    .iter()
                    .filter(|p| p.labels.get(*key).map(String::as_str) == Some(LEADER))
                    .count()
            })
            .sum();
        if all != accounted {
            self.fail(&format!(
                "{all} leader labels once quiet, of which the acting elections wrote {accounted}"
            ));
        }
    }
}
