//! The admission precedence: each step beats every later one, inputs are asked for in order
//! and only while undecided, and an election with nothing in the way proceeds.

use super::*;

fn condition(status: bool, reason: &'static str) -> ConditionState {
    ConditionState {
        type_: "SpecValid",
        status,
        reason,
        message: reason.to_owned(),
    }
}

/// Everything clear.
fn clear() -> Observed {
    Observed {
        spec: Some(Ok(())),
        label_key: Some(condition(true, "Valid")),
        older: Some(None),
        yielding_leader: Some(None),
        access: Some(Access::Usable),
        needs_withdrawal: Some(false),
        served_elsewhere: None,
        paused: false,
    }
}

/// Everything in the way at once.
fn blocked() -> Observed {
    Observed {
        spec: Some(Err(condition(false, "InvalidSpec"))),
        label_key: Some(condition(false, "LabelKeySelectedByOwner")),
        older: Some(Some("older".into())),
        yielding_leader: Some(Some(("pod-0".into(), "younger".into()))),
        access: Some(Access::Invalid {
            spec_valid: condition(false, "SecretNotOptedIn"),
            in_use: true,
        }),
        needs_withdrawal: Some(true),
        served_elsewhere: None,
        paused: false,
    }
}

/// Step `i` (in [`admit`]'s order) from `a` when `from_a(i)`, else from `b`.
fn mix(a: &Observed, b: &Observed, from_a: impl Fn(usize) -> bool) -> Observed {
    let pick = |i: usize| if from_a(i) { a } else { b };
    Observed {
        spec: pick(0).spec.clone(),
        label_key: pick(1).label_key.clone(),
        older: pick(2).older.clone(),
        yielding_leader: pick(3).yielding_leader.clone(),
        access: pick(4).access.clone(),
        needs_withdrawal: pick(5).needs_withdrawal,
        served_elsewhere: None,
        paused: false,
    }
}

#[test]
fn an_election_with_nothing_in_the_way_proceeds() {
    assert_eq!(admit(&clear()), Admission::Proceed);
}

#[test]
fn each_step_beats_every_later_one() {
    let expected = [
        Admission::Refuse {
            spec_valid: condition(false, "InvalidSpec"),
            event: EventReason::InvalidSpec,
        },
        Admission::Refuse {
            spec_valid: condition(false, "LabelKeySelectedByOwner"),
            event: EventReason::LabelKeySelectedByOwner,
        },
        Admission::Yield {
            older: "older".into(),
        },
        Admission::WaitFor {
            younger: "younger".into(),
            pod: "pod-0".into(),
        },
        Admission::AccessInvalid {
            spec_valid: condition(false, "SecretNotOptedIn"),
            in_use: true,
        },
        Admission::Withdraw,
    ];
    for (step, expected) in expected.into_iter().enumerate() {
        // Every later step in the way too: this one still wins.
        let all_later = mix(&clear(), &blocked(), |i| i < step);
        assert_eq!(admit(&all_later), expected, "step {step}");
        // Alone in the way: it decides.
        let alone = mix(&blocked(), &clear(), |i| i == step);
        assert_eq!(admit(&alone), expected, "step {step} alone");
    }
}

#[test]
fn inputs_are_asked_for_in_order_and_only_while_undecided() {
    let order = [
        Input::Spec,
        Input::LabelKey,
        Input::Older,
        Input::YieldingLeader,
        Input::Access,
        Input::Applied,
    ];
    let mut observed = Observed::default();
    let clear = clear();
    for (step, input) in order.into_iter().enumerate() {
        assert_eq!(admit(&observed), Admission::Observe(input), "step {step}");
        observed = mix(&clear, &observed, |i| i <= step);
    }
    assert_eq!(admit(&observed), Admission::Proceed);
    // A decided step asks for nothing later: an invalid spec is refused without the
    // pods' controllers being read, an older election yields without Consul being asked.
    let invalid = Observed {
        spec: Some(Err(condition(false, "InvalidSpec"))),
        ..Observed::default()
    };
    assert!(matches!(admit(&invalid), Admission::Refuse { .. }));
    let yielding = Observed {
        spec: Some(Ok(())),
        label_key: Some(condition(true, "Valid")),
        older: Some(Some("older".into())),
        ..Observed::default()
    };
    assert!(matches!(admit(&yielding), Admission::Yield { .. }));
}

#[test]
fn an_allowed_label_key_keeps_its_condition_for_the_status() {
    // The label-key check's condition is True when allowed: not a refusal.
    let observed = Observed {
        label_key: Some(condition(true, "Valid")),
        ..clear()
    };
    assert_eq!(admit(&observed), Admission::Proceed);
}

#[test]
fn an_unusable_access_not_in_use_is_reported_as_such() {
    let observed = Observed {
        access: Some(Access::Invalid {
            spec_valid: condition(false, "AddressNotAllowed"),
            in_use: false,
        }),
        needs_withdrawal: Some(true),
        ..clear()
    };
    assert_eq!(
        admit(&observed),
        Admission::AccessInvalid {
            spec_valid: condition(false, "AddressNotAllowed"),
            in_use: false,
        }
    );
}

#[test]
fn an_election_another_install_serves_is_left_alone_whatever_this_install_thinks_of_it() {
    let other = Some("prod/ops.consul-elector".to_owned());
    for step in 0..6 {
        let alone = Observed {
            served_elsewhere: other.clone(),
            ..mix(&blocked(), &clear(), |i| i == step)
        };
        assert_eq!(
            admit(&alone),
            Admission::StandBack {
                other: "prod/ops.consul-elector".into()
            },
            "step {step}"
        );
    }
    // Inputs are still gathered (reads), and proceeding is the planner's to decide: it takes
    // over only once that install's session no longer holds the key.
    let undecided = Observed {
        served_elsewhere: other.clone(),
        ..Observed::default()
    };
    assert_eq!(admit(&undecided), Admission::Observe(Input::Spec));
    let clear = Observed {
        served_elsewhere: other,
        ..clear()
    };
    assert_eq!(admit(&clear), Admission::Proceed);
}

#[test]
fn only_another_install_named_in_the_status_serves_elsewhere() {
    let owner = Owner::new("prod", "ops.consul-elector");
    assert_eq!(served_elsewhere(None, &owner), None);
    assert_eq!(
        served_elsewhere(Some("prod/ops.consul-elector"), &owner),
        None
    );
    assert_eq!(
        served_elsewhere(Some("prod/team.consul-elector"), &owner),
        Some("prod/team.consul-elector".into())
    );
    assert_eq!(
        served_elsewhere(Some("staging/ops.consul-elector"), &owner),
        Some("staging/ops.consul-elector".into())
    );
}

#[test]
fn a_paused_election_s_edit_waits_for_the_resume() {
    let edited = Observed {
        needs_withdrawal: Some(true),
        ..clear()
    };
    assert_eq!(admit(&edited), Admission::Withdraw);
    let paused = Observed {
        paused: true,
        ..edited
    };
    assert_eq!(admit(&paused), Admission::EditWaits);
    // Nothing else changes while paused: an edit recording nothing new proceeds.
    let unedited = Observed {
        paused: true,
        ..clear()
    };
    assert_eq!(admit(&unedited), Admission::Proceed);
}
