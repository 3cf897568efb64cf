//! A model of several elections in one namespace over the same pods, for the decisions between
//! elections: which one yields ([`conflict::yields_to`]), which one waits for a younger one's
//! leader label to go ([`conflict::yielding_to_me`]), in [`admit`]'s precedence; the order of
//! a withdrawal ([`withdrawal::withdrawal`]); and which election writes the annotations of a
//! pod that elections with different label keys share ([`annotation_owner::annotations`]), and so which
//! election a label on such a pod belongs to ([`conflict::labelled_by`]).
//!
//! Election `a` writes `K1`, `c` writes `K2` and `b` one of the two; a run has two or all
//! three of them, so it has a pair that may conflict, a pair that shares pods under two keys,
//! or both (a pod whose annotations the third election owns).
//! Pods are selected and unselected, become Ready and NotReady; elections are deleted and
//! created again (younger than before); every patch may fail, before or after it took effect.
//!
//! What an admitted election does is the planner's business ([`super::model`] checks it):
//! here it is the planner's outline in rule 1's order (demote, then label one Ready selected
//! pod leader, keeping the one that leads, then followers), executed with the real sharing
//! decision. The oracle, after every patch the operator makes: no patch makes a second pod
//! carry the leader label in the selection of an election (one being deleted too) that
//! conflicts with the writer (or is the writer): a Service selecting that election's pods and
//! leader label would reach both.
//!
//! At the end the world quiesces: reconciles of every election must reach a fixed point
//! (nothing written in a whole pass: two elections must not undo each other's patches), where
//! each election that does not yield has one leader if any selected pod is Ready, one that
//! yields has left no label, every deleted election is gone without a trace, and a pod's
//! fencing-token annotation belongs to an election that labels it leader.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use jiff::Timestamp;
use proptest::prelude::*;

use crate::election::admission::{Access, Admission, Observed, admit};
use crate::election::annotation_owner::{self, Annotations, SharedPod};
use crate::election::conflict::{self, Claim, Writer};
use crate::election::label_key_check::check_label_key;
use crate::election::withdrawal::{self, Footprint, LabelledPod, Step};

const K1: &str = "elector.dev/role";
const K2: &str = "example.com/role";
const LEADER: &str = "leader";
const FOLLOWER: &str = "follower";
const NAMES: [&str; 3] = ["a", "b", "c"];
const PODS: usize = 4;

/// Which rules between elections the model's controller follows (each one off must make the
/// oracle fail, see the directed tests).
#[derive(Debug, Clone, Copy)]
struct Knobs {
    /// An election an older one conflicts with yields (withdraws) instead of acting.
    yield_to_older: bool,
    /// An election waits until a younger conflicting one's leader label is gone.
    wait_for_younger: bool,
    /// A label under a key that two elections write, on a pod whose annotations a third one
    /// owns, is the oldest selecting one's ([`conflict::labelled_by`]); off, it is every
    /// such election's (the rule before the model found the flapping it causes).
    one_writer_per_label: bool,
}

const RULES: Knobs = Knobs {
    yield_to_older: true,
    wait_for_younger: true,
    one_writer_per_label: true,
};

#[derive(Debug, Clone)]
struct Election {
    created: i64,
    key: &'static str,
    selects: BTreeSet<usize>,
    deleting: bool,
}

#[derive(Debug, Clone, Default)]
struct Pod {
    ready: bool,
    labels: BTreeMap<&'static str, &'static str>,
    /// `elector.dev/election`: the election that owns the operator's annotations.
    owner: Option<&'static str>,
    /// `elector.dev/fencing-token`: whose token it is.
    token: Option<&'static str>,
}

#[derive(Debug, Clone)]
enum Event {
    Reconcile {
        e: usize,
        fail_at: Option<usize>,
        after_effect: bool,
    },
    Select {
        e: usize,
        pod: usize,
        on: bool,
    },
    Ready {
        pod: usize,
        on: bool,
    },
    Delete {
        e: usize,
    },
    Create {
        e: usize,
        b_key_is_k1: bool,
    },
}

/// A patch failed: the reconcile stops there.
struct Stopped;

/// Which patch of a reconcile fails.
struct Faults {
    fail_at: Option<usize>,
    after_effect: bool,
    patches: usize,
}

impl Faults {
    fn none() -> Self {
        Faults {
            fail_at: None,
            after_effect: false,
            patches: 0,
        }
    }

    /// (take effect, report success) for the next patch.
    fn next(&mut self) -> (bool, bool) {
        let this = self.patches;
        self.patches += 1;
        match self.fail_at {
            Some(n) if n == this => (self.after_effect, false),
            _ => (true, true),
        }
    }
}

struct World {
    /// The elections that may exist in this run.
    present: Vec<usize>,
    elections: BTreeMap<&'static str, Election>,
    pods: Vec<Pod>,
    knobs: Knobs,
    clock: i64,
    writes: usize,
    trace: String,
}

impl World {
    fn new(knobs: Knobs, ready: [bool; PODS], present: &[usize]) -> Self {
        World {
            present: present.to_vec(),
            elections: BTreeMap::new(),
            pods: ready
                .iter()
                .map(|&ready| Pod {
                    ready,
                    ..Pod::default()
                })
                .collect(),
            knobs,
            clock: 0,
            writes: 0,
            trace: String::new(),
        }
    }

    fn fail(&self, what: &str) -> ! {
        panic!(
            "{what}\nelections: {:?}\npods: {:?}\ntrace:\n{}",
            self.elections, self.pods, self.trace
        );
    }

    fn live(&self, name: &str) -> Option<&Election> {
        self.elections.get(name).filter(|e| !e.deleting)
    }

    fn apply(&mut self, event: &Event) {
        let _ = writeln!(self.trace, "{event:?}");
        match *event {
            Event::Reconcile {
                e,
                fail_at,
                after_effect,
            } => {
                let mut faults = Faults {
                    fail_at,
                    after_effect,
                    patches: 0,
                };
                self.reconcile(NAMES[e], &mut faults);
            }
            Event::Select { e, pod, on } => {
                if let Some(election) = self.elections.get_mut(NAMES[e]) {
                    if on {
                        election.selects.insert(pod);
                    } else {
                        election.selects.remove(&pod);
                    }
                }
            }
            Event::Ready { pod, on } => self.pods[pod].ready = on,
            Event::Delete { e } => {
                if let Some(election) = self.elections.get_mut(NAMES[e]) {
                    election.deleting = true;
                }
            }
            Event::Create { e, b_key_is_k1 } => {
                let name = NAMES[e];
                if self.present.contains(&e) && !self.elections.contains_key(name) {
                    // Creation times have one-second resolution: ties are broken by name.
                    self.clock += i64::from(e != 0);
                    let key = match name {
                        "a" => K1,
                        "b" if b_key_is_k1 => K1,
                        _ => K2,
                    };
                    self.elections.insert(
                        name,
                        Election {
                            created: self.clock,
                            key,
                            selects: (0..PODS).collect(),
                            deleting: false,
                        },
                    );
                }
            }
        }
    }

    /// Whether `name` labelled `pod` (`cache::views::labelled_by`, through
    /// [`conflict::labelled_by`]).
    fn labelled_by(&self, name: &str, pod: usize) -> bool {
        let Some(election) = self.elections.get(name) else {
            return false;
        };
        let p = &self.pods[pod];
        let same_key_owner = p
            .owner
            .filter(|o| *o != name)
            .and_then(|o| self.live(o))
            .is_some_and(|o| o.key == election.key);
        let selecting: Vec<Writer> = self
            .elections
            .iter()
            .filter(|(_, e)| !e.deleting && e.key == election.key && e.selects.contains(&pod))
            .map(|(n, e)| Writer {
                name: (*n).to_owned(),
                created_at: Timestamp::from_second(e.created).unwrap_or_default(),
            })
            .collect();
        let carries = p.labels.contains_key(election.key);
        if !self.knobs.one_writer_per_label {
            return p.owner == Some(name) || (carries && !same_key_owner);
        }
        conflict::labelled_by(
            name,
            p.owner == Some(name),
            same_key_owner,
            &selecting,
            carries,
        )
    }

    fn claim(&self, name: &str) -> Option<Claim> {
        let election = self.elections.get(name)?;
        Some(Claim {
            name: name.to_owned(),
            created_at: Timestamp::from_second(election.created).ok()?,
            label_key: election.key.to_owned(),
            pods: election.selects.iter().map(|p| format!("p{p}")).collect(),
        })
    }

    fn claims(&self) -> Vec<Claim> {
        self.elections
            .iter()
            .filter(|(_, e)| !e.deleting)
            .filter_map(|(name, _)| self.claim(name))
            .collect()
    }

    fn reconcile(&mut self, name: &'static str, faults: &mut Faults) {
        let Some(election) = self.elections.get(name) else {
            return;
        };
        if election.deleting {
            if self.withdraw(name, faults).is_ok() {
                let _ = writeln!(self.trace, "  {name} is gone");
                self.elections.remove(name);
            }
            return;
        }
        match self.admission(name) {
            Admission::Yield { older } if self.knobs.yield_to_older => {
                let _ = writeln!(self.trace, "  {name} yields to {older}");
                let _ = self.withdraw(name, faults);
            }
            Admission::WaitFor { younger, pod } if self.knobs.wait_for_younger => {
                let _ = writeln!(self.trace, "  {name} waits for {younger} on {pod}");
            }
            Admission::Yield { .. } | Admission::WaitFor { .. } | Admission::Proceed => {
                let _ = self.act(name, faults);
            }
            other => self.fail(&format!(
                "{name}: admission {other:?} with every input usable"
            )),
        }
    }

    /// [`admit`] with the inputs `controller::apply` gathers.
    fn admission(&self, name: &str) -> Admission {
        let (Some(me), Some(election)) = (self.claim(name), self.elections.get(name)) else {
            self.fail(&format!("{name} has no claim"));
        };
        let others = self.claims();
        let younger_leader =
            conflict::yielding_to_me(&me, &others)
                .into_iter()
                .find_map(|younger| {
                    let younger: &'static str = NAMES.iter().find(|n| **n == younger.name)?;
                    (0..PODS)
                        .find(|&p| {
                            self.labelled_by(younger, p)
                                && self.pods[p].labels.get(election.key) == Some(&LEADER)
                        })
                        .map(|p| (format!("p{p}"), younger.to_owned()))
                });
        admit(&Observed {
            spec: Some(Ok(())),
            label_key: Some(check_label_key(election.key, &[])),
            older: Some(conflict::yields_to(&me, &others).map(|c| c.name.clone())),
            yielding_leader: Some(younger_leader),
            access: Some(Access::Usable),
            needs_withdrawal: Some(false),
            served_elsewhere: None,
            paused: false,
        })
    }

    /// Rule 7's withdrawal of `name` ([`withdrawal::withdrawal`]'s labels), as the controller's
    /// `cleanup::Withdrawer` performs them.
    fn withdraw(&mut self, name: &'static str, faults: &mut Faults) -> Result<(), Stopped> {
        let Some(key) = self.elections.get(name).map(|e| e.key) else {
            return Ok(());
        };
        let pods: Vec<LabelledPod> = (0..PODS)
            .filter(|&p| self.labelled_by(name, p))
            .map(|p| LabelledPod {
                pod: format!("p{p}"),
                uid: format!("p{p}"),
                value: self.pods[p].labels.get(key).map(|v| (*v).to_owned()),
            })
            .collect();
        let footprint = Footprint {
            follower: Some(FOLLOWER),
            managed: true,
        };
        // Without a session: the lock is not what this model is about ([`super::model`] is).
        for step in withdrawal::withdrawal(footprint, &pods, None) {
            if let Step::Unlabel { pod, .. } = step {
                let p = pod.trim_start_matches('p').parse().unwrap_or(PODS);
                self.patch(name, p, None, faults)?;
            }
        }
        Ok(())
    }

    /// The planner's outline, in rule 1's order.
    fn act(&mut self, name: &'static str, faults: &mut Faults) -> Result<(), Stopped> {
        let Some(election) = self.elections.get(name).cloned() else {
            return Ok(());
        };
        let candidates: Vec<usize> = election
            .selects
            .iter()
            .copied()
            .filter(|&p| self.pods[p].ready)
            .collect();
        // The planner sees the pods the election selects or labelled (`views::pods_of`), each
        // with the value it carries under the election's key, whoever wrote it.
        let leaders: Vec<usize> = (0..PODS)
            .filter(|&p| election.selects.contains(&p) || self.labelled_by(name, p))
            .filter(|&p| self.pods[p].labels.get(election.key) == Some(&LEADER))
            .collect();
        let chosen = leaders
            .iter()
            .copied()
            .find(|p| candidates.contains(p))
            .or_else(|| candidates.first().copied());
        for &p in leaders.iter().filter(|&&p| Some(p) != chosen) {
            let role = election.selects.contains(&p).then_some(FOLLOWER);
            self.patch(name, p, role, faults)?;
        }
        if let Some(p) = chosen {
            self.patch(name, p, Some(LEADER), faults)?;
        }
        for &p in election.selects.iter().filter(|&&p| Some(p) != chosen) {
            self.patch(name, p, Some(FOLLOWER), faults)?;
        }
        let strays: Vec<usize> = (0..PODS)
            .filter(|p| !election.selects.contains(p) && self.labelled_by(name, *p))
            .collect();
        for p in strays {
            self.patch(name, p, None, faults)?;
        }
        Ok(())
    }

    /// Gives `pod` the role `role` (`None`: no label) under `name`'s key, with the annotations
    /// [`annotation_owner::annotations`] decides, when that changes anything; then checks the oracle.
    fn patch(
        &mut self,
        name: &'static str,
        pod: usize,
        role: Option<&'static str>,
        faults: &mut Faults,
    ) -> Result<(), Stopped> {
        let Some(key) = self.elections.get(name).map(|e| e.key) else {
            return Ok(());
        };
        let p = &self.pods[pod];
        let foreign_owner_leads = p
            .owner
            .filter(|o| *o != name)
            .and_then(|o| self.live(o))
            .map(|o| p.labels.get(o.key) == Some(&LEADER));
        let led_by_another = p.labels.iter().any(|(k, v)| {
            *k != key
                && *v == LEADER
                && self
                    .elections
                    .iter()
                    .any(|(n, e)| *n != name && !e.deleting && e.key == *k)
        });
        let to_leader = role == Some(LEADER);
        let shared = SharedPod {
            foreign_owner_leads,
            owned_by_me: p.owner == Some(name),
            led_by_another,
        };
        let mut next = p.clone();
        match role {
            Some(value) => {
                next.labels.insert(key, value);
            }
            None => {
                next.labels.remove(key);
            }
        }
        match annotation_owner::annotations(shared, to_leader) {
            Annotations::Write if role.is_some() => {
                next.owner = Some(name);
                next.token = to_leader.then_some(name);
            }
            Annotations::Write | Annotations::GiveUp => {
                next.owner = None;
                next.token = None;
            }
            Annotations::Keep => {}
        }
        if (&next.labels, next.owner, next.token) == (&p.labels, p.owner, p.token) {
            return Ok(());
        }
        let (effect, ok) = faults.next();
        let _ = writeln!(
            self.trace,
            "  {name} patches p{pod} to {role:?} (effect {effect}, ok {ok})"
        );
        if effect {
            let before = self.leader_counts();
            self.pods[pod] = next;
            self.writes += 1;
            self.check_write(name, &before);
        }
        if ok { Ok(()) } else { Err(Stopped) }
    }

    /// Leader labels within the selection of each election (one being deleted too: its
    /// Service may still be there), under its key.
    fn leader_counts(&self) -> BTreeMap<&'static str, usize> {
        self.elections
            .iter()
            .map(|(name, e)| {
                let count = e
                    .selects
                    .iter()
                    .filter(|&&p| self.pods[p].labels.get(e.key) == Some(&LEADER))
                    .count();
                (*name, count)
            })
            .collect()
    }

    /// Whether the elections `a` and `b` claim a pod under one key.
    fn conflicting(&self, a: &str, b: &str) -> bool {
        match (self.elections.get(a), self.elections.get(b)) {
            (Some(x), Some(y)) => {
                x.key == y.key && x.selects.intersection(&y.selects).next().is_some()
            }
            _ => false,
        }
    }

    fn check_write(&self, writer: &str, before: &BTreeMap<&'static str, usize>) {
        for (name, count) in self.leader_counts() {
            let concerned = name == writer || self.conflicting(name, writer);
            if concerned && count > 1 && count > before.get(name).copied().unwrap_or(0) {
                self.fail(&format!(
                    "{writer}'s patch put a second leader label into {name}'s selection"
                ));
            }
        }
    }

    /// Runs every election's reconcile, without faults, until a whole pass writes nothing;
    /// then checks where the elections stand.
    fn quiesce(&mut self) {
        let _ = writeln!(self.trace, "quiesce");
        let mut passes = 0;
        loop {
            let writes = self.writes;
            for name in NAMES {
                self.reconcile(name, &mut Faults::none());
            }
            if self.writes == writes {
                break;
            }
            passes += 1;
            if passes > 10 {
                self.fail("the elections keep undoing each other's patches");
            }
        }
        if let Some((name, _)) = self.elections.iter().find(|(_, e)| e.deleting) {
            self.fail(&format!("{name} was deleted but is still there"));
        }
        let claims = self.claims();
        for (name, election) in &self.elections {
            let mine: Vec<usize> = (0..PODS).filter(|&p| self.labelled_by(name, p)).collect();
            let Some(me) = claims.iter().find(|c| c.name == *name) else {
                continue;
            };
            if conflict::yields_to(me, &claims).is_some() {
                if !mine.is_empty() {
                    self.fail(&format!("{name} yields but still labels {mine:?}"));
                }
                continue;
            }
            let leaders: Vec<usize> = election
                .selects
                .iter()
                .copied()
                .filter(|&p| self.pods[p].labels.get(election.key) == Some(&LEADER))
                .collect();
            let any_ready = election.selects.iter().any(|&p| self.pods[p].ready);
            let expected = usize::from(any_ready);
            if leaders.len() != expected {
                self.fail(&format!("{name} acts and has leaders {leaders:?}"));
            }
        }
        for (i, pod) in self.pods.iter().enumerate() {
            let stale = pod
                .labels
                .keys()
                .any(|k| !self.elections.values().any(|e| e.key == *k));
            if stale || pod.owner.is_some_and(|o| !self.elections.contains_key(o)) {
                self.fail(&format!("p{i} keeps a label or annotation of no election"));
            }
        }
        for (i, pod) in self.pods.iter().enumerate() {
            if let Some(owner) = pod.token {
                let leads = self
                    .elections
                    .get(owner)
                    .is_some_and(|e| pod.labels.get(e.key) == Some(&LEADER));
                if !leads {
                    self.fail(&format!(
                        "p{i} carries {owner}'s token but {owner} does not label it leader"
                    ));
                }
            }
        }
    }
}

fn event() -> impl Strategy<Value = Event> {
    let e = 0..NAMES.len();
    prop_oneof![
        6 => (e.clone(), prop::option::weighted(0.3, 0..4usize), any::<bool>())
            .prop_map(|(e, fail_at, after_effect)| Event::Reconcile { e, fail_at, after_effect }),
        3 => (e.clone(), 0..PODS, any::<bool>()).prop_map(|(e, pod, on)| Event::Select { e, pod, on }),
        2 => (0..PODS, any::<bool>()).prop_map(|(pod, on)| Event::Ready { pod, on }),
        1 => e.clone().prop_map(|e| Event::Delete { e }),
        1 => (e, any::<bool>()).prop_map(|(e, b_key_is_k1)| Event::Create { e, b_key_is_k1 }),
    ]
}

fn run(knobs: Knobs, ready: [bool; PODS], b_key_is_k1: bool, events: &[Event]) {
    run_with(knobs, ready, b_key_is_k1, &[0, 1, 2], events);
}

/// Runs `events` with the elections `present` (by index in [`NAMES`]); the others never exist.
fn run_with(
    knobs: Knobs,
    ready: [bool; PODS],
    b_key_is_k1: bool,
    present: &[usize],
    events: &[Event],
) {
    let mut world = World::new(knobs, ready, present);
    for &e in present {
        world.apply(&Event::Create { e, b_key_is_k1 });
    }
    for event in events {
        world.apply(event);
    }
    world.quiesce();
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 512,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn elections_over_the_same_pods_never_show_a_service_two_leaders_and_settle(
        ready in prop::array::uniform4(prop::bool::weighted(0.8)),
        b_key_is_k1 in prop::bool::weighted(0.7),
        present in prop::sample::select(vec![vec![0usize, 1], vec![0, 2], vec![1, 2], vec![0, 1, 2]]),
        events in prop::collection::vec(event(), 1..60),
    ) {
        run_with(RULES, ready, b_key_is_k1, &present, &events);
    }
}

fn select(e: usize, pod: usize, on: bool) -> Event {
    Event::Select { e, pod, on }
}

fn reconcile(e: usize) -> Event {
    Event::Reconcile {
        e,
        fail_at: None,
        after_effect: false,
    }
}

/// `a` leads `p0` of `p0, p1`; `b` (younger, same key) leads `p2` of `p2, p3`. Then `b` comes to
/// select `p1` and `a`'s leader goes NotReady: `a` would move its leader to `p1`, into `b`'s
/// selection, while `b`'s leader label is still on `p2`.
fn overlap_begins() -> Vec<Event> {
    vec![
        select(0, 2, false),
        select(0, 3, false),
        select(1, 0, false),
        select(1, 1, false),
        reconcile(0),
        reconcile(1),
        select(1, 1, true),
        Event::Ready { pod: 0, on: false },
        reconcile(0),
        reconcile(1),
        reconcile(0),
    ]
}

#[test]
fn the_older_election_waits_for_the_younger_to_withdraw_and_then_leads() {
    run(RULES, [true; PODS], true, &overlap_begins());
}

#[test]
#[should_panic(expected = "second leader label")]
fn without_waiting_for_the_younger_the_model_sees_two_leaders() {
    let knobs = Knobs {
        wait_for_younger: false,
        ..RULES
    };
    run(knobs, [true; PODS], true, &overlap_begins());
}

/// `a` leads `p0` of `p0, p1`; `b` (younger, same key) selects `p1, p2, p3` and reconciles for
/// the first time: acting, it would label `p1` leader inside `a`'s selection.
fn younger_arrives() -> Vec<Event> {
    vec![
        select(0, 2, false),
        select(0, 3, false),
        select(1, 0, false),
        reconcile(0),
        reconcile(1),
    ]
}

#[test]
fn the_younger_election_yields_without_touching_the_older_ones_pods() {
    run(RULES, [true; PODS], true, &younger_arrives());
}

#[test]
#[should_panic(expected = "second leader label")]
fn without_yielding_the_model_sees_two_leaders() {
    let knobs = Knobs {
        yield_to_older: false,
        ..RULES
    };
    run(knobs, [true; PODS], true, &younger_arrives());
}

/// `c` (another key) owns the annotations of every pod; `a` and `b` write the same key over
/// the same pods, and `b` yields to `a`. Every label `a` writes under the shared key carries
/// `c`'s annotations, so the pod alone does not say whether `a` or `b` wrote it.
fn shared_annotations() -> Vec<Event> {
    vec![reconcile(2), reconcile(0), reconcile(1), reconcile(0)]
}

#[test]
fn a_yielding_election_leaves_the_labels_of_the_one_that_acts_on_pods_a_third_one_owns() {
    run(RULES, [true; PODS], true, &shared_annotations());
}

#[test]
#[should_panic(expected = "keep undoing each other")]
fn taking_every_label_under_ones_key_for_ones_own_makes_the_elections_flap() {
    let knobs = Knobs {
        one_writer_per_label: false,
        ..RULES
    };
    run(knobs, [true; PODS], true, &shared_annotations());
}
