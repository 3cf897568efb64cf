//! The reconcile up to its plan loop: inputs asked for in the admission's order, the steps of
//! each way of standing back in their order, and what comes before planning.

use super::*;
use crate::election::look_again::{ERROR_REQUEUE, YIELD_WAIT};

fn condition(status: bool) -> ConditionState {
    ConditionState {
        type_: "SpecValid",
        status,
        reason: if status { "Valid" } else { "InvalidSpec" },
        message: "m".into(),
    }
}

/// Answers every input as "nothing in the way", except the ones `answer` gives; every step
/// names no later judgement.
fn drive(
    reconcile: &mut Reconcile,
    answer: impl FnMut(Input) -> Option<Found>,
) -> (Vec<Step>, Next) {
    drive_with(reconcile, answer, |_| None)
}

/// [`drive`], with `recheck` naming when each step judges again.
fn drive_with(
    reconcile: &mut Reconcile,
    mut answer: impl FnMut(Input) -> Option<Found>,
    recheck: impl Fn(&Step) -> Option<Duration>,
) -> (Vec<Step>, Next) {
    let mut steps = Vec::new();
    loop {
        match reconcile.poll() {
            Next::Gather(input) => reconcile.gathered(answer(input).unwrap_or(match input {
                Input::Spec => unreachable!("the spec comes with the reconcile"),
                Input::LabelKey => Found::LabelKey(condition(true)),
                Input::Older => Found::Older(None),
                Input::YieldingLeader => Found::YieldingLeader(None),
                Input::Access => Found::Access(Access::Usable),
                Input::Applied => Found::Applied {
                    edited: false,
                    needs_withdrawal: false,
                },
            })),
            Next::Do(step) => {
                reconcile.done(recheck(&step));
                steps.push(step);
            }
            end => return (steps, end),
        }
    }
}

/// Reported Invalid, then the leader label judged by rule 2.
fn invalid_and_fenced(in_use_refused: bool) -> [Step; 2] {
    [
        Step::Report(StandBack::invalid(
            condition(false),
            EventReason::InvalidSpec,
        )),
        fenced(in_use_refused),
    ]
}

fn fenced(in_use_refused: bool) -> Step {
    Step::Fence { in_use_refused }
}

fn valid() -> Reconcile {
    Reconcile::new(Ok(()), None, false)
}

#[test]
fn an_election_with_nothing_in_the_way_watches_its_key_and_plans() {
    let mut reconcile = valid();
    let mut asked = Vec::new();
    let (steps, end) = drive(&mut reconcile, |input| {
        asked.push(input);
        None
    });
    assert_eq!(
        asked,
        [
            Input::LabelKey,
            Input::Older,
            Input::YieldingLeader,
            Input::Access,
            Input::Applied
        ]
    );
    assert_eq!(steps, [Step::Watch]);
    assert_eq!(end, Next::Plan);
    assert_eq!(reconcile.spec_valid(), Some(&condition(true)));
}

#[test]
fn an_edit_is_withdrawn_whatever_the_mode_then_recorded_before_planning() {
    let edit = |needs_withdrawal| {
        move |input| {
            (input == Input::Applied).then_some(Found::Applied {
                edited: true,
                needs_withdrawal,
            })
        }
    };
    let (steps, end) = drive(&mut valid(), edit(true));
    assert_eq!(
        steps,
        [
            Step::Unwatch,
            Step::Withdraw {
                whatever_mode: true
            },
            Step::RecordApplied,
            Step::Watch
        ]
    );
    assert_eq!(end, Next::Plan);
    // A changed leader value needs only its record.
    let (steps, _) = drive(&mut valid(), edit(false));
    assert_eq!(steps, [Step::RecordApplied, Step::Watch]);
    // Paused: nothing moves until the resume, the label staying only as rule 2 allows.
    let (steps, end) = drive(&mut Reconcile::new(Ok(()), None, true), edit(true));
    assert_eq!(steps, [fenced(false)]);
    assert_eq!(end, Next::Stop(INVALID_REQUEUE));
}

#[test]
fn an_invalid_spec_is_reported_and_fenced_without_gathering_anything() {
    let mut reconcile = Reconcile::new(Err(condition(false)), None, false);
    let (steps, end) = drive(&mut reconcile, |input| panic!("gathered {input:?}"));
    assert_eq!(steps, invalid_and_fenced(false));
    assert_eq!(end, Next::Stop(INVALID_REQUEUE));
    assert!(!reconcile.why().is_empty());
}

#[test]
fn a_yielding_election_reports_before_it_withdraws_and_wakes_the_older_one_last() {
    let (steps, end) = drive(&mut valid(), |input| {
        (input == Input::Older).then(|| Found::Older(Some("old".into())))
    });
    assert_eq!(
        steps,
        [
            Step::Unwatch,
            Step::Report(StandBack::conflict("old")),
            Step::Withdraw {
                whatever_mode: false
            },
            Step::Wake("old".into()),
        ]
    );
    assert_eq!(end, Next::Stop(INVALID_REQUEUE));
}

#[test]
fn a_fence_that_names_an_earlier_judgement_brings_the_look_forward() {
    let soon = Duration::from_millis(300);
    assert!(soon < YIELD_WAIT);
    let (steps, end) = drive_with(
        &mut valid(),
        |input| {
            (input == Input::YieldingLeader)
                .then(|| Found::YieldingLeader(Some(("pod".into(), "young".into()))))
        },
        |step| matches!(step, Step::Fence { .. }).then_some(soon),
    );
    assert_eq!(steps, [fenced(false), Step::Wake("young".into())]);
    assert_eq!(end, Next::Stop(soon));
}

#[test]
fn an_unusable_access_in_use_is_dropped_before_the_label_is_judged() {
    let refused = Access::Invalid {
        spec_valid: condition(false),
        in_use: true,
    };
    let (steps, end) = drive(&mut valid(), |input| {
        (input == Input::Access).then(|| Found::Access(refused.clone()))
    });
    assert_eq!(steps, invalid_and_fenced(true));
    assert_eq!(end, Next::Stop(SECRET_REQUEUE));
}

#[test]
fn an_election_another_install_serves_gets_no_write() {
    let mut reconcile = Reconcile::new(Err(condition(false)), Some("c/other".into()), false);
    let (steps, end) = drive(&mut reconcile, |_| None);
    assert_eq!(steps, [Step::Unwatch]);
    assert_eq!(end, Next::Stop(INVALID_REQUEUE));
}

#[test]
fn a_step_is_handed_out_once_until_it_is_done() {
    let mut reconcile = valid();
    let (_, _) = drive(&mut reconcile, |_| None);
    let mut edited = Reconcile::new(Err(condition(false)), None, false);
    assert!(matches!(edited.poll(), Next::Do(Step::Report(_))));
    assert_eq!(edited.poll(), Next::Stop(ERROR_REQUEUE));
}
