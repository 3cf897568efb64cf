//! One election's machine: a reconcile from its first question to when to look again, as one
//! sequence of requests, and what it carries to the next reconcile.

use super::support::*;
use crate::election::admission::{Access, Input};
use crate::election::first_look::{KeyRead, Look, SessionRead};
use crate::election::look_again::{self, ERROR_REQUEUE, INVALID_REQUEUE};
use crate::election::machine::{Election, Next, Opening, Start};
use crate::election::plan::{ConditionState, EventReason};
use crate::election::plan_loop::Answer;
use crate::election::reconcile::{Found, Step};
use crate::election::report::StandBack;

fn valid() -> ConditionState {
    ConditionState {
        type_: "SpecValid",
        status: true,
        reason: "Valid",
        message: String::new(),
    }
}

fn start() -> Start {
    Start {
        spec: Ok(()),
        served_elsewhere: None,
        paused: false,
        token_secret: false,
    }
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
    election.begin(start());
    let mut asked = Vec::new();
    loop {
        let next = election.poll();
        asked.push(next.clone());
        match next {
            Next::Gather(input) => election.gathered(match input {
                Input::Spec | Input::LabelKey => Found::LabelKey(valid()),
                Input::Older => Found::Older(None),
                Input::YieldingLeader => Found::YieldingLeader(None),
                Input::Access => Found::Access(Access::Usable),
                Input::Applied => applied.clone(),
            }),
            Next::Do(_) => election.done(None),
            Next::Open => election.opened(Opening {
                recorded: scene.recorded.clone(),
                switchover: None,
                removal_failed: false,
                adopting: scene.adopting(),
            }),
            Next::Look(Look::ReadKey(_)) => {
                election.key_read(Ok(scene.lock.clone()));
            }
            // Consul no longer has it: nothing is adopted.
            Next::Look(Look::ReadSession(_)) => {
                election.session_read(SessionRead::Missing);
            }
            Next::Look(look) => panic!("nothing to adopt, yet asked for {look:?}"),
            Next::Observe => {
                election.plan(&scene.world());
            }
            Next::Act(_) => {
                election.handle(Answer::Done, mono(scene.now));
            }
            Next::WriteStatus => election.status_written(),
            Next::Stop(_) => return asked,
        }
    }
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
            Next::Gather(Input::LabelKey),
            Next::Gather(Input::Older),
            Next::Gather(Input::YieldingLeader),
            Next::Gather(Input::Access),
            Next::Gather(Input::Applied),
            Next::Do(Step::Watch),
            Next::Open,
            Next::Look(Look::ReadKey(KeyRead::Watched)),
            Next::Observe,
            Next::WriteStatus,
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

#[test]
fn a_reconcile_that_cannot_act_stops_without_opening_or_writing_a_status() {
    let mut election = Election::new();
    let invalid = ConditionState {
        status: false,
        reason: "InvalidSpec",
        ..valid()
    };
    election.begin(Start {
        spec: Err(invalid.clone()),
        ..start()
    });
    let mut asked = Vec::new();
    loop {
        match election.poll() {
            Next::Do(step) => {
                asked.push(step);
                election.done(None);
            }
            Next::Stop(after) => {
                assert_eq!(after, INVALID_REQUEUE);
                break;
            }
            other => panic!("an election that cannot act asked for {other:?}"),
        }
    }
    assert_eq!(
        asked,
        [
            Step::Report(StandBack::invalid(invalid, EventReason::InvalidSpec)),
            Step::Fence {
                in_use_refused: false
            },
        ]
    );
    assert_eq!(election.end(), None);
}

#[test]
fn after_a_withdrawal_the_first_look_reads_the_key_back_instead_of_trusting_the_watch() {
    // The withdrawal may have released the key: the watch may still show it held (rule 2).
    let scene = Scene::elected("a", &["b"], 5);
    let mut election = Election::new();
    let asked = reconcile(&mut election, &scene, EDITED);
    let withdraw = Next::Do(Step::Withdraw {
        whatever_mode: true,
    });
    let withdrew = asked.iter().position(|n| *n == withdraw);
    let looked = asked.iter().position(|n| matches!(n, Next::Look(_)));
    assert!(withdrew < looked, "{asked:?}");
    assert_eq!(
        asked[looked.expect("a look")],
        Next::Look(Look::ReadKey(KeyRead::Fresh))
    );
    election.end();
    assert!(!election.key_written_since_read(), "read back by that look");
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
    assert!(!asked.contains(&Next::WriteStatus), "{asked:?}");
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
    for input in [
        Input::LabelKey,
        Input::Older,
        Input::YieldingLeader,
        Input::Access,
    ] {
        assert_eq!(election.poll(), Next::Gather(input));
        election.gathered(match input {
            Input::LabelKey => Found::LabelKey(valid()),
            Input::Older => Found::Older(None),
            Input::YieldingLeader => Found::YieldingLeader(None),
            _ => Found::Access(Access::Usable),
        });
    }
    assert_eq!(election.poll(), Next::Gather(Input::Applied));
    election.gathered(UNEDITED);
    assert_eq!(election.poll(), Next::Do(Step::Watch));
    election.done(None);
    assert_eq!(election.poll(), Next::Open);
    assert_eq!(election.poll(), Next::Stop(ERROR_REQUEUE));
    // And one not begun has nothing to ask.
    assert_eq!(Election::new().poll(), Next::Stop(ERROR_REQUEUE));
}
