//! One election's machine: a reconcile from its first question to when to look again, as one
//! sequence of requests, and what it carries to the next reconcile.

use super::support::*;
use crate::election::admission::{Access, Input as AdmissionInput};
use crate::election::config::LabelConfig;
use crate::election::config::{Mode, UnavailablePolicy};
use crate::election::first_look::{KeyRead, SessionRead};
use crate::election::look_again::{self, ERROR_REQUEUE, INVALID_REQUEUE};
use crate::election::machine::{
    ConsulWait, Election, Gathered, GiveUp, Input, Left, Next, Observable, Opening, Start,
};
use crate::election::observe::{LockView, SessionView, SwitchoverOutcome, SwitchoverRecord};
use crate::election::plan::{ConditionState, ElectionEvent, EventReason};
use crate::election::pod_patch::{PodPatch, PodRole};
use crate::election::reconcile::Found;
use crate::election::report::StandBack;
use crate::election::request::{Kept, Outcome, Request, Via};
use crate::election::status_change::StatusChange;
use crate::election::status_failures::STATUS_FAILURES_REPORTED;
use crate::election::unusable::LockFacts;
use crate::election::withdrawal::{Acted, LabelledPod, Sessions};

fn start() -> Start {
    Start {
        spec: Ok(()),
        served_elsewhere: None,
        paused: false,
        token_secret: false,
        deleted: false,
        released: false,
        acting: Some((Mode::Managed, UnavailablePolicy::Fence)),
    }
}

/// What an election elected with session `s1` for pod `a` left: `a` the leader, `b` a
/// follower; `deleted_at` its deletion, the wall clock read at `now`.
fn left(deleted_at: Option<jiff::Timestamp>, now: jiff::Timestamp) -> Left {
    let labelled = |name: &str, value: &str| LabelledPod {
        pod: name.to_owned(),
        uid: uid(name),
        value: Some(value.to_owned()),
        shared: Default::default(),
    };
    Left {
        acted: Acted {
            label_key: "role".into(),
            follower: Some("follower".into()),
            consul_key: "elector/default/web".into(),
            managed: true,
        },
        pods: vec![labelled("a", "leader"), labelled("b", "follower")],
        sessions: Sessions {
            held: Some("s1".into()),
            recorded: Some("s1".into()),
            owner: own_install(),
            election: crate::election::config::ElectionKey {
                namespace: "default".into(),
                name: "web".into(),
            },
        },
        wait: ConsulWait {
            skip: None,
            deleted_at,
            now,
            bound: secs(300),
        },
    }
}

/// The withdrawal's request that takes pod `name` off the election's label key.
fn unlabel(name: &str) -> Next {
    let labels = LabelConfig {
        key: "role".into(),
        ..LabelConfig::default()
    };
    let patch = PodPatch::for_role(
        name,
        &uid(name),
        &labels,
        "web",
        PodRole::None,
        Some(Default::default()),
    );
    Next::Perform(Request::PatchPod {
        patch,
        replans: false,
    })
}

/// The withdrawal's release of the key held by `s1`, through the access the operator acted
/// with.
fn release() -> Next {
    Next::Perform(Request::Release {
        session: "s1".into(),
        keeps: Kept::Nothing,
        via: Via::ActedWith,
    })
}

/// A step before planning.
fn step(request: Request) -> Next {
    Next::Perform(request)
}

/// The withdrawal of [`left`], every step taking effect.
fn withdrawn() -> [Next; 4] {
    [
        unlabel("a"),
        release(),
        Next::Perform(Request::DestroySession {
            recorded: None,
            via: Via::ActedWith,
        }),
        unlabel("b"),
    ]
}

/// Whether `request` is a withdrawal's in Consul.
fn in_consul(request: &Request) -> bool {
    matches!(
        request,
        Request::ReadSession { .. } | Request::Release { .. } | Request::DestroySession { .. }
    )
}

/// Begins a reconcile from `start` and answers each request with `answer` until it says the
/// reconcile is over (`false`); returns the requests in order.
fn drive(
    election: &mut Election,
    start: Start,
    mut answer: impl FnMut(&mut Election, Next) -> bool,
) -> Vec<Next> {
    election.begin(start);
    let mut asked = Vec::new();
    loop {
        let next = election.poll();
        asked.push(next.clone());
        if !answer(election, next) {
            return asked;
        }
    }
}

/// Drives a reconcile of a deleted election whose Consul steps `consul` answers, at `now`
/// (deleted at `t(0)`); returns the requests in order.
fn delete(election: &mut Election, consul: Outcome, now: jiff::Timestamp) -> Vec<Next> {
    let deleted = Start {
        deleted: true,
        ..start()
    };
    withdraw(election, deleted, consul, now)
}

/// Drives a reconcile of an election released by an uninstall (asked at `t(0)`), as
/// [`delete`] does.
fn release_it(election: &mut Election, consul: Outcome, now: jiff::Timestamp) -> Vec<Next> {
    let released = Start {
        released: true,
        ..start()
    };
    withdraw(election, released, consul, now)
}

/// Drives a reconcile from `start` that only withdraws, as [`delete`] does.
fn withdraw(
    election: &mut Election,
    start: Start,
    consul: Outcome,
    now: jiff::Timestamp,
) -> Vec<Next> {
    drive(election, start, |election, next| {
        match next {
            Next::Observe(Observable::Left) => {
                election.handle(Input::Left(left(Some(t(0)), now)), mono(now));
            }
            Next::Perform(request) if in_consul(&request) => {
                election.handle(Input::Outcome(consul.clone()), mono(now));
            }
            Next::Perform(_) => {
                election.handle(Input::Outcome(Outcome::Done), mono(now));
            }
            Next::GiveUp(_) => {}
            Next::Stop(_) | Next::RetryConsul(_) => return false,
            other => panic!("a withdrawing election asked for {other:?}"),
        }
        true
    })
}

/// The spec as the status records it acted with.
const UNEDITED: Found = Found::Applied {
    edited: false,
    needs_withdrawal: false,
};

/// The spec edited: its labels, key, Consul access or session changed.
const EDITED: Found = Found::Applied {
    edited: true,
    needs_withdrawal: true,
};

/// Drives one reconcile of `election` over `scene`, a world nothing changes: every input is
/// "nothing in the way" unless `applied` is the edit found, every step and action takes
/// effect, the key reads as the scene has it, no session is found to adopt. Returns the
/// requests in order.
fn reconcile(election: &mut Election, scene: &Scene, applied: Found) -> Vec<Next> {
    reconcile_with(election, scene, applied, None, |_| Outcome::Done).0
}

/// [`reconcile`] with the switchover request `switchover` on the election, each write (a
/// request that reads nothing) answered by `written`. Also returns the events reported.
fn reconcile_with(
    election: &mut Election,
    scene: &Scene,
    applied: Found,
    switchover: Option<String>,
    written: impl Fn(&Request) -> Outcome,
) -> (Vec<Next>, Vec<ElectionEvent>) {
    election.begin(start());
    let mut asked = Vec::new();
    let mut events = Vec::new();
    loop {
        let next = election.poll();
        asked.push(next.clone());
        match next {
            Next::Observe(Observable::Input(input)) => {
                election.handle(
                    Input::Gathered(Gathered::Found(match input {
                        AdmissionInput::Spec | AdmissionInput::LabelKey => {
                            Found::LabelKey(spec_valid())
                        }
                        AdmissionInput::Older => Found::Older(None),
                        AdmissionInput::YieldingLeader => Found::YieldingLeader(None),
                        AdmissionInput::Access => Found::Access(Access::Usable),
                        AdmissionInput::Applied => applied.clone(),
                    })),
                    mono(t(0)),
                );
            }
            Next::Observe(Observable::Left) => {
                election.handle(Input::Left(left(None, scene.now)), mono(scene.now));
            }
            Next::Observe(Observable::Lock) => {
                panic!("nothing to fence, yet asked to judge the lock")
            }
            Next::GiveUp(_) | Next::RetryConsul(_) => return (asked, events),
            Next::Observe(Observable::Opening) => {
                election.handle(
                    Input::Opening(Opening {
                        recorded: scene.recorded.clone(),
                        switchover: switchover.clone(),
                        version: Some(1),
                        adopting: scene.adopting(),
                    }),
                    mono(t(0)),
                );
            }
            Next::Perform(Request::ReadKey(_)) => {
                election.handle(
                    Input::Outcome(Outcome::Key(Ok(scene.lock.clone()))),
                    mono(scene.now),
                );
            }
            // Consul no longer has it: nothing is adopted.
            Next::Perform(Request::ReadSession { .. }) => {
                let missing = Outcome::Session(SessionRead::Missing);
                election.handle(Input::Outcome(missing), mono(scene.now));
            }
            Next::Perform(adopt @ Request::AdoptSession { .. }) => {
                panic!("nothing to adopt, yet asked for {adopt:?}")
            }
            Next::Observe(Observable::World) => {
                election.handle(Input::World(scene.world()), mono(scene.now));
            }
            Next::Perform(request) => {
                let outcome = written(&request);
                let reported = election.handle(Input::Outcome(outcome), mono(scene.now));
                events.extend(reported.event);
            }
            Next::Stop(_) => return (asked, events),
            Next::Observe(Observable::Await(_)) => {
                panic!("every input answered at once, yet asked to await one")
            }
        }
    }
}

#[test]
fn status_writes_failing_in_a_row_are_reported_once_and_counted_until_a_whole_one_succeeds() {
    let scene = Scene::elected("a", &["b"], 5);
    let mut election = Election::new();
    let status_fails = |request: &Request| match request {
        Request::WriteStatus(_) => Outcome::StatusFailed {
            category: "kube",
            error: "the API server is away".into(),
        },
        _ => Outcome::Done,
    };
    let written_with = |asked: &[Next]| {
        asked.iter().find_map(|next| match next {
            Next::Perform(Request::WriteStatus(StatusChange::Decided {
                failed_writes, ..
            })) => Some(*failed_writes),
            _ => None,
        })
    };
    let mut warnings = Vec::new();
    for n in 0..STATUS_FAILURES_REPORTED + 1 {
        let (asked, events) = reconcile_with(&mut election, &scene, UNEDITED, None, status_fails);
        let before = (n > 0).then_some((n, "kube"));
        assert_eq!(written_with(&asked), Some(before), "write {n}");
        warnings.extend(events);
        election.end();
    }
    let [warning] = warnings.as_slice() else {
        panic!("one Warning for the run of failures: {warnings:?}");
    };
    assert_eq!(warning.reason, EventReason::StatusWriteFailed);
    assert!(warning.warning);
    assert!(
        warning.note.contains("the API server is away"),
        "{}",
        warning.note
    );
    let failed = STATUS_FAILURES_REPORTED + 1;

    // The status that succeeds reports the run it ends; the next one reports none.
    let (asked, _) = reconcile_with(&mut election, &scene, UNEDITED, None, |_| Outcome::Done);
    assert_eq!(written_with(&asked), Some(Some((failed, "kube"))));
    election.end();
    let asked = reconcile(&mut election, &scene, UNEDITED);
    assert_eq!(written_with(&asked), Some(None));
}

#[test]
fn a_reconcile_that_plans_asks_in_one_sequence_and_writes_the_status_last() {
    let scene = Scene::elected("a", &["b"], 5);
    let mut election = Election::new();
    let asked = reconcile(&mut election, &scene, UNEDITED);
    let planned = scene.plan().requeue_after;
    assert_eq!(
        asked,
        [
            Next::Observe(Observable::Input(AdmissionInput::LabelKey)),
            Next::Observe(Observable::Input(AdmissionInput::Older)),
            Next::Observe(Observable::Input(AdmissionInput::YieldingLeader)),
            Next::Observe(Observable::Input(AdmissionInput::Access)),
            Next::Observe(Observable::Input(AdmissionInput::Applied)),
            step(Request::Watch),
            Next::Observe(Observable::Opening),
            Next::Perform(Request::ReadKey(KeyRead::Watched)),
            Next::Observe(Observable::World),
            Next::Perform(Request::WriteStatus(StatusChange::Decided {
                plan: Box::new(election.last_plan().cloned().expect("a plan")),
                spec_valid: spec_valid(),
                failed_writes: None,
            })),
            Next::Stop(look_again::after(look_again::Round {
                planned,
                ..look_again::Round::default()
            })),
        ]
    );
    let last = election.end().expect("the reconcile planned");
    assert!(last.actions.is_empty(), "{:?}", last.actions);
    assert!(election.is_empty(), "nothing to carry: {election:?}");
}

/// What this process knows of a lock held by session `s1` and read at `t(0)`, at `now`; the
/// session renewed at `t(0)` with a TTL of 10 s.
fn facts(lock: LockView, now: jiff::Timestamp) -> LockFacts {
    LockFacts {
        lock,
        read_at: Some(mono(t(0))),
        held: Some(SessionView {
            ttl: secs(10),
            ..session("s1", "a")
        }),
        recorded_session: Some("s1".into()),
        applied_ttl: None,
        started_at: mono(t(0)),
        now: mono(now),
    }
}

/// Drives a reconcile of an election whose spec is invalid, answering the lock's judgement
/// with `facts` and every other request as taking effect; returns the requests in order.
fn cannot_act(election: &mut Election, facts: &LockFacts) -> Vec<Next> {
    let invalid = Start {
        spec: Err(inspec_valid()),
        ..start()
    };
    drive(election, invalid, |election, next| {
        match next {
            Next::Perform(_) => {
                election.handle(Input::Outcome(Outcome::Done), mono(t(0)));
            }
            Next::Observe(Observable::Lock) => {
                election.handle(Input::Lock(facts.clone()), mono(t(0)));
            }
            Next::Observe(Observable::Left) => {
                election.handle(Input::Left(left(None, t(0))), mono(t(0)));
            }
            Next::Stop(_) => return false,
            other => panic!("an election that cannot act asked for {other:?}"),
        }
        true
    })
}

/// Answers the admission's inputs up to the Consul access as "nothing in the way", and the
/// access as `access`.
fn admit(election: &mut Election, access: Access) {
    for input in [
        AdmissionInput::LabelKey,
        AdmissionInput::Older,
        AdmissionInput::YieldingLeader,
        AdmissionInput::Access,
    ] {
        assert_eq!(election.poll(), Next::Observe(Observable::Input(input)));
        election.handle(
            Input::Gathered(Gathered::Found(match input {
                AdmissionInput::LabelKey => Found::LabelKey(spec_valid()),
                AdmissionInput::Older => Found::Older(None),
                AdmissionInput::YieldingLeader => Found::YieldingLeader(None),
                _ => Found::Access(access.clone()),
            })),
            mono(t(0)),
        );
    }
}

fn inspec_valid() -> ConditionState {
    ConditionState {
        status: false,
        reason: "InvalidSpec",
        ..spec_valid()
    }
}

#[test]
fn a_reconcile_that_cannot_act_stops_without_opening_or_writing_a_status() {
    let mut election = Election::new();
    // The key read held by the election's session 4 s ago: the label stays for 6 s more,
    // and the next look comes no later than that.
    let asked = cannot_act(&mut election, &facts(held("s1", 5, "a"), t(4)));
    assert_eq!(
        asked,
        [
            step(Request::WriteStatus(StatusChange::StandBack(
                StandBack::invalid(inspec_valid(), EventReason::InvalidSpec)
            ))),
            Next::Observe(Observable::Lock),
            Next::Stop(secs(6).min(INVALID_REQUEUE)),
        ]
    );
    assert_eq!(election.end(), None);
}

#[test]
fn an_election_that_cannot_act_loses_its_leader_label_once_the_key_is_read_lost() {
    let mut election = Election::new();
    let asked = cannot_act(&mut election, &facts(free(5), t(1)));
    // Only the labels that may lead go; nothing is sent to Consul.
    assert_eq!(
        asked[1..],
        [
            Next::Observe(Observable::Lock),
            Next::Observe(Observable::Left),
            unlabel("a"),
            Next::Stop(INVALID_REQUEUE),
        ]
    );
}

#[test]
fn a_refused_access_in_use_stops_the_renewals_and_the_watch_before_it_fences() {
    let mut election = Election::new();
    election.begin(Start {
        spec: Ok(()),
        ..start()
    });
    admit(
        &mut election,
        Access::Invalid {
            spec_valid: inspec_valid(),
            in_use: true,
        },
    );
    assert!(matches!(
        election.poll(),
        Next::Perform(Request::WriteStatus(StatusChange::StandBack(_)))
    ));
    election.handle(Input::Outcome(Outcome::Done), mono(t(0)));
    assert_eq!(election.poll(), Next::Observe(Observable::Lock));
    // The key read held a moment ago, but nothing watches it any more and the session went
    // unrenewed since t(0): the label goes a TTL after that renewal, not after the read.
    let mut known = facts(held("s1", 5, "a"), t(11));
    known.read_at = Some(mono(t(10)));
    election.handle(Input::Lock(known), mono(t(11)));
    assert_eq!(election.poll(), step(Request::ForgetSession));
    election.handle(Input::Outcome(Outcome::Done), mono(t(11)));
    assert_eq!(election.poll(), step(Request::Unwatch));
    election.handle(Input::Outcome(Outcome::Done), mono(t(11)));
    assert_eq!(election.poll(), Next::Observe(Observable::Left));
}

#[test]
fn after_a_withdrawal_the_first_look_reads_the_key_back_instead_of_trusting_the_watch() {
    // The withdrawal may have released the key: the watch may still show it held (rule 2).
    let scene = Scene::elected("a", &["b"], 5);
    let mut election = Election::new();
    let asked = reconcile(&mut election, &scene, EDITED);
    let withdrew = asked
        .iter()
        .position(|n| *n == Next::Observe(Observable::Left));
    let looked = asked
        .iter()
        .position(|n| matches!(n, Next::Perform(Request::ReadKey(_))));
    assert!(withdrew < looked, "{asked:?}");
    assert_eq!(
        asked[looked.expect("a look")],
        Next::Perform(Request::ReadKey(KeyRead::Fresh))
    );
    election.end();
    assert!(
        !election.memory().key.written_since_read(),
        "read back by that look"
    );
}

#[test]
fn an_election_another_install_serves_leaves_the_status_to_it() {
    let scene = Scene::new(vec![pod("a").leader(9, t(0)), pod("b")]).lock(held_by_install(
        "theirs",
        "a",
        "test-cluster",
        "team.consul-elector",
    ));
    let mut election = Election::new();
    let asked = reconcile(&mut election, &scene, UNEDITED);
    let writes_status = |n: &Next| matches!(n, Next::Perform(Request::WriteStatus(_)));
    assert!(!asked.iter().any(writes_status), "{asked:?}");
    let last = election.end().expect("the reconcile planned");
    assert!(last.leaves_status_to_another_install());
    // What the next reconcile needs to know: it stood back.
    assert!(election.memory().stood_back().is_some());
    assert!(!election.is_empty());
}

#[test]
fn a_request_asked_again_before_its_answer_ends_the_reconcile() {
    let mut election = Election::new();
    election.begin(start());
    admit(&mut election, Access::Usable);
    assert_eq!(
        election.poll(),
        Next::Observe(Observable::Input(AdmissionInput::Applied))
    );
    election.handle(Input::Gathered(Gathered::Found(UNEDITED)), mono(t(0)));
    assert_eq!(election.poll(), step(Request::Watch));
    election.handle(Input::Outcome(Outcome::Done), mono(t(0)));
    assert_eq!(election.poll(), Next::Observe(Observable::Opening));
    assert_eq!(election.poll(), Next::Stop(ERROR_REQUEUE));
    // And one not begun has nothing to ask.
    assert_eq!(Election::new().poll(), Next::Stop(ERROR_REQUEUE));
}

#[test]
fn an_edit_withdraws_in_rule_7s_order_then_records_the_values_and_plans() {
    let scene = Scene::elected("a", &["b"], 5);
    let mut election = Election::new();
    let asked = reconcile(&mut election, &scene, EDITED);
    let left = asked
        .iter()
        .position(|n| *n == Next::Observe(Observable::Left))
        .expect("a withdrawal");
    let after = left + 1 + withdrawn().len();
    assert_eq!(asked[left + 1..after], withdrawn(), "{asked:?}");
    assert_eq!(
        asked[after],
        step(Request::WriteStatus(StatusChange::Applied))
    );
}

#[test]
fn a_deleted_election_is_withdrawn_and_nothing_else() {
    let mut election = Election::new();
    let asked = delete(&mut election, Outcome::Done, t(10));
    let mut expected = vec![step(Request::Unwatch), Next::Observe(Observable::Left)];
    expected.extend(withdrawn());
    expected.push(Next::Stop(INVALID_REQUEUE));
    assert_eq!(asked, expected);
}

#[test]
fn a_deletion_retries_consul_within_its_bound_and_then_gives_up() {
    let mut election = Election::new();
    let release_failed = [
        step(Request::Unwatch),
        Next::Observe(Observable::Left),
        unlabel("a"),
        release(),
        // Consul failing does not keep the other labels on.
        unlabel("b"),
    ];
    let within = delete(&mut election, Outcome::Failed, t(20));
    let mut expected = release_failed.to_vec();
    expected.push(Next::RetryConsul(secs(5)));
    assert_eq!(within, expected);
    let past = delete(&mut election, Outcome::Failed, t(300));
    let mut expected = release_failed.to_vec();
    expected.push(Next::GiveUp(GiveUp {
        why: past
            .iter()
            .find_map(|n| match n {
                Next::GiveUp(g) => Some(g.why.clone()),
                _ => None,
            })
            .unwrap_or_default(),
        consul_key: "elector/default/web".into(),
        session: Some("s1".into()),
    }));
    expected.push(Next::Stop(INVALID_REQUEUE));
    assert_eq!(past, expected);
}

#[test]
fn a_released_election_is_withdrawn_in_rule_7s_order_then_loses_its_finalizer() {
    let mut election = Election::new();
    let asked = release_it(&mut election, Outcome::Done, t(10));
    let mut expected = vec![step(Request::Unwatch), Next::Observe(Observable::Left)];
    expected.extend(withdrawn());
    expected.push(step(Request::WriteStatus(StatusChange::Released)));
    expected.push(step(Request::RemoveFinalizer));
    expected.push(Next::Stop(INVALID_REQUEUE));
    assert_eq!(asked, expected);
}

#[test]
fn a_released_election_another_install_serves_is_not_withdrawn() {
    let mut election = Election::new();
    let served = Start {
        released: true,
        served_elsewhere: Some("prod/team.consul-elector".into()),
        ..start()
    };
    let asked = withdraw(&mut election, served, Outcome::Done, t(10));
    assert_eq!(
        asked,
        [step(Request::Unwatch), Next::Stop(INVALID_REQUEUE)],
        "rule 8: its labels, key and finalizer are the other install's"
    );
}

#[test]
fn a_release_keeps_the_finalizer_while_consul_is_retried_and_not_after_giving_up() {
    let mut election = Election::new();
    let within = release_it(&mut election, Outcome::Failed, t(20));
    assert_eq!(within.last(), Some(&Next::RetryConsul(secs(5))));
    assert!(
        !within.contains(&step(Request::RemoveFinalizer)),
        "{within:?}"
    );
    let past = release_it(&mut election, Outcome::Failed, t(300));
    let gave_up = past
        .iter()
        .position(|n| matches!(n, Next::GiveUp(_)))
        .expect("it gives up on Consul");
    assert_eq!(
        past[gave_up + 1..],
        [
            step(Request::WriteStatus(StatusChange::Released)),
            step(Request::RemoveFinalizer),
            Next::Stop(INVALID_REQUEUE)
        ]
    );
}

#[test]
fn a_failed_pod_patch_ends_the_withdrawal_and_the_reconcile() {
    let mut election = Election::new();
    election.begin(Start {
        deleted: true,
        ..start()
    });
    assert_eq!(election.poll(), step(Request::Unwatch));
    election.handle(Input::Outcome(Outcome::Done), mono(t(1)));
    assert_eq!(election.poll(), Next::Observe(Observable::Left));
    election.handle(Input::Left(left(Some(t(0)), t(1))), mono(t(1)));
    assert_eq!(election.poll(), unlabel("a"));
    let reported = election.handle(Input::Outcome(Outcome::Failed), mono(t(1)));
    assert!(reported.failed, "the reconcile fails with it");
    // The key is not released while the leader label may still be on (rule 7).
    assert_eq!(election.poll(), Next::Stop(ERROR_REQUEUE));
    assert_eq!(election.poll(), Next::Stop(ERROR_REQUEUE));
}

#[test]
fn a_request_decided_before_is_removed_before_the_first_plan_and_not_decided_again() {
    let done = SwitchoverRecord {
        to: "b".into(),
        from: Some("a".into()),
        leader: Some("b".into()),
        requested_at: t(0),
        completed_at: Some(t(1)),
        outcome: SwitchoverOutcome::Completed,
        message: String::new(),
    };
    let mut recorded = record(&Scene::elected("b", &["a"], 6).plan().status);
    recorded.last_switchover = Some(done);
    let scene = Scene::elected("b", &["a"], 6).recorded(recorded);
    let unremoved = Some("b".to_owned());
    let mut election = Election::new();
    // Decided by this process, the removal's answer not known.
    election.memory_mut().decided_request.deciding("b");
    let (asked, _) = reconcile_with(&mut election, &scene, UNEDITED, unremoved.clone(), |_| {
        Outcome::Done
    });
    let opened = asked
        .iter()
        .position(|n| *n == Next::Observe(Observable::Opening))
        .expect("opened");
    assert_eq!(
        asked[opened + 1],
        Next::Perform(Request::ClearRequest("b".into()))
    );
    let plan = election.end().expect("a plan");
    assert_eq!(
        plan.status.last_switchover.map(|r| r.outcome),
        Some(SwitchoverOutcome::Completed)
    );
    // A removal that fails is retried soon, and the reconcile goes on.
    let removal_fails = |request: &Request| match request {
        Request::ClearRequest(_) => Outcome::Failed,
        _ => Outcome::Done,
    };
    let (asked, _) = reconcile_with(&mut election, &scene, UNEDITED, unremoved, removal_fails);
    let stop = asked.last().cloned();
    let soon = look_again::after(look_again::Round {
        planned: scene.plan().requeue_after,
        retry_soon: true,
        ..look_again::Round::default()
    });
    assert_eq!(stop, Some(Next::Stop(soon)));
}

/// Begins a reconcile whose first input that takes a request (the pods' owners) is awaited.
fn awaiting_the_owners(election: &mut Election, start: Start) {
    election.begin(start);
    assert_eq!(
        election.poll(),
        Next::Observe(Observable::Input(AdmissionInput::LabelKey))
    );
    election.handle(Input::Gathered(Gathered::Awaited), mono(t(0)));
}

/// Judges the lock held by `s1` at `now`, a whole TTL after it was read, and carries out the
/// fence: only the label that may lead goes, and nothing is sent to Consul.
fn fenced_at(election: &mut Election, now: jiff::Timestamp) {
    assert_eq!(election.poll(), Next::Observe(Observable::Lock));
    election.handle(Input::Lock(facts(held("s1", 5, "a"), now)), mono(now));
    assert_eq!(election.poll(), Next::Observe(Observable::Left));
    election.handle(Input::Left(left(None, now)), mono(now));
    assert_eq!(election.poll(), unlabel("a"));
    election.handle(Input::Outcome(Outcome::Done), mono(now));
}

/// Only the owners are awaited; they answer (the label key is valid) and the next admission
/// input is asked for.
fn the_owners_answer_and_the_next_input_is_asked(election: &mut Election) {
    assert_eq!(election.poll(), Next::Observe(Observable::Await(None)));
    election.handle(
        Input::Gathered(Gathered::Found(Found::LabelKey(spec_valid()))),
        mono(t(0)),
    );
    assert_eq!(
        election.poll(),
        Next::Observe(Observable::Input(AdmissionInput::Older))
    );
}

/// Rule 2 judged while the owners are awaited: the lock held by the election's session, read
/// at t(0) and renewed then, judged at t(4): the label stays, judged again in 6 s.
fn judged_with_six_seconds_left(election: &mut Election) {
    assert_eq!(election.poll(), Next::Observe(Observable::Lock));
    election.handle(Input::Lock(facts(held("s1", 5, "a"), t(4))), mono(t(4)));
    assert_eq!(
        election.poll(),
        Next::Observe(Observable::Await(Some(secs(6))))
    );
}

#[test]
fn while_an_input_is_awaited_the_label_stays_until_rule_2_names_and_is_judged_again_then() {
    let mut election = Election::new();
    awaiting_the_owners(&mut election, start());
    judged_with_six_seconds_left(&mut election);
    // The time named passed (or a lock changed): judged again, and the label goes.
    election.handle(Input::Gathered(Gathered::Awaited), mono(t(0)));
    fenced_at(&mut election, t(10));
    // Nothing more for rule 2 to take away: only the input is awaited, and it decides.
    the_owners_answer_and_the_next_input_is_asked(&mut election);
}

#[test]
fn while_an_input_is_awaited_a_key_read_lost_takes_the_label_off_at_once() {
    let mut election = Election::new();
    awaiting_the_owners(&mut election, start());
    assert_eq!(election.poll(), Next::Observe(Observable::Lock));
    election.handle(Input::Lock(facts(free(5), t(1))), mono(t(1)));
    assert_eq!(election.poll(), Next::Observe(Observable::Left));
}

#[test]
fn an_input_that_fails_while_awaited_fails_the_reconcile_once_rule_2_is_carried_out() {
    let mut election = Election::new();
    awaiting_the_owners(&mut election, start());
    judged_with_six_seconds_left(&mut election);
    election.handle(Input::Gathered(Gathered::Failed), mono(t(0)));
    // Judged once more: the read may have failed after a whole TTL.
    fenced_at(&mut election, t(11));
    assert_eq!(election.poll(), Next::Stop(ERROR_REQUEUE));
    assert_eq!(election.end(), None);
}

#[test]
fn while_an_input_of_an_election_another_install_serves_is_awaited_its_labels_are_not_judged() {
    // Rule 8: the labels are that install's to take off; waiting judges nothing.
    let mut election = Election::new();
    let served = Start {
        served_elsewhere: Some("test-cluster/theirs.consul-elector".into()),
        ..start()
    };
    awaiting_the_owners(&mut election, served.clone());
    the_owners_answer_and_the_next_input_is_asked(&mut election);
    // A read that fails stops the reconcile without judging either.
    awaiting_the_owners(&mut election, served);
    election.handle(Input::Gathered(Gathered::Failed), mono(t(0)));
    assert_eq!(election.poll(), Next::Stop(ERROR_REQUEUE));
}
