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

/// Answers every input as "nothing in the way", except the ones `answer` gives.
fn drive(
    reconcile: &mut Reconcile,
    mut answer: impl FnMut(Input) -> Option<Found>,
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
                steps.push(step);
                reconcile.done(None);
            }
            end => return (steps, end),
        }
    }
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
    assert_eq!(
        steps,
        [Step::Fence {
            in_use_refused: false
        }]
    );
    assert_eq!(end, Next::Stop(INVALID_REQUEUE));
}

#[test]
fn an_invalid_spec_is_reported_and_fenced_without_gathering_anything() {
    let mut reconcile = Reconcile::new(Err(condition(false)), None, false);
    let (steps, end) = drive(&mut reconcile, |input| panic!("gathered {input:?}"));
    assert_eq!(
        steps,
        [
            Step::Report(StandBack::invalid(
                condition(false),
                EventReason::InvalidSpec
            )),
            Step::Fence {
                in_use_refused: false
            }
        ]
    );
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
    let mut reconcile = valid();
    let answer = |input| {
        (input == Input::YieldingLeader)
            .then(|| Found::YieldingLeader(Some(("pod".into(), "young".into()))))
    };
    let mut steps = Vec::new();
    let end = loop {
        match reconcile.poll() {
            Next::Gather(input) => reconcile.gathered(answer(input).unwrap_or(match input {
                Input::LabelKey => Found::LabelKey(condition(true)),
                _ => Found::Older(None),
            })),
            Next::Do(step) => {
                let recheck =
                    matches!(step, Step::Fence { .. }).then(|| Duration::from_millis(300));
                steps.push(step);
                reconcile.done(recheck);
            }
            end => break end,
        }
    };
    assert_eq!(
        steps,
        [
            Step::Fence {
                in_use_refused: false
            },
            Step::Wake("young".into())
        ]
    );
    assert!(Duration::from_millis(300) < YIELD_WAIT);
    assert_eq!(end, Next::Stop(Duration::from_millis(300)));
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
    assert_eq!(
        steps,
        [
            Step::Report(StandBack::invalid(
                condition(false),
                EventReason::InvalidSpec
            )),
            Step::Fence {
                in_use_refused: true
            }
        ]
    );
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
