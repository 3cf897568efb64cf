//! Rule 6: the fencing token only grows. The token on the pod and in the status is the
//! `LockIndex` of the acquisition; when the key was deleted and re-created (its LockIndex
//! starts again at 1) the operator releases and re-acquires until the LockIndex is above every
//! token it recorded, before labelling anybody with it.

use super::support::*;
use crate::election::observe::LockView;
use crate::election::plan::{Action, Phase};
use crate::election::planner::LEADER_ELECTED;

fn labels(plans: &[crate::election::plan::Plan]) -> Vec<(String, u64)> {
    plans
        .iter()
        .flat_map(|p| p.actions.iter())
        .filter_map(|a| match a {
            Action::LabelLeader {
                pod, fencing_token, ..
            } => Some((pod.clone(), *fencing_token)),
            _ => None,
        })
        .collect()
}

#[test]
fn a_recreated_key_is_bumped_above_the_recorded_token_before_labelling() {
    // The key was deleted and re-acquired by our session: LockIndex 1, recorded token 5.
    let scene = Scene::elected("a", &["b"], 5)
        .with_pod(pod("a").follower())
        .lock(held("s1", 1, "a"));
    let plan = scene.plan();
    assert_eq!(
        steps(&plan),
        vec![release("s1"), confirm("s1"), acquire("s1", "a")]
    );
    assert_eq!(plan.status.phase, Phase::Electing);
    assert_eq!(
        condition(&plan.status, LEADER_ELECTED).reason,
        "RaisingFencingToken"
    );
    assert_eq!(
        plan.status.fencing_token,
        Some(5),
        "the recorded token stays"
    );

    let mut world = World::new(scene);
    let plans = world.settle();
    assert_eq!(labels(&plans), vec![("a".into(), 6)]);
    assert_eq!(world.scene.recorded.fencing_token, Some(6));
    // Every acquisition in between was released again: 1 -> 2 -> ... -> 6.
    let bumps = plans
        .iter()
        .filter(|p| steps(p) == vec![release("s1"), confirm("s1"), acquire("s1", "a")])
        .count();
    assert_eq!(bumps, 5);
}

#[test]
fn a_recreated_key_reaching_exactly_the_recorded_token_is_bumped_past_it() {
    // Regression: LockIndex 5 of a *new* acquisition (the key was re-created: `a` was
    // demoted meanwhile) equals the recorded token 5 of the *old* acquisition by the same
    // session. Labelling it 5 again would hand out one token for two acquisitions.
    let scene = Scene::elected("a", &["b"], 5)
        .with_pod(pod("a").follower())
        .lock(held("s1", 5, "a"));
    assert_eq!(
        steps(&scene.plan()),
        vec![release("s1"), confirm("s1"), acquire("s1", "a")]
    );
}

#[test]
fn the_deleted_key_sequence_end_to_end() {
    let mut world = World::new(Scene::elected("a", &["b"], 3));
    world.edit(|s| s.lock(LockView::Absent));
    let plans = world.settle();
    assert_eq!(
        steps(&plans[0]),
        vec![follower("a"), confirm("s1"), acquire("s1", "a")]
    );
    assert_eq!(labels(&plans), vec![("a".into(), 4)]);
    assert_eq!(world.scene.recorded.transitions, 0);
}

#[test]
fn the_adopted_acquisition_is_not_bumped() {
    // Same session, same token, pod labelled with it: the acquisition the status recorded.
    let plan = Scene::elected("a", &["b"], 5).plan();
    assert!(plan.actions.is_empty());
}

#[test]
fn a_normal_move_needs_no_bump() {
    let mut world = World::new(Scene::elected("a", &["b"], 5));
    world.edit(|s| s.without_pod("a"));
    let plans = world.settle();
    assert_eq!(labels(&plans), vec![("b".into(), 6)]);
    assert!(!plans.iter().any(|p| {
        p.actions
            .iter()
            .filter(|a| matches!(a, Action::Acquire { .. }))
            .count()
            > 1
    }));
}

#[test]
fn the_token_on_the_pod_and_in_the_status_is_the_lock_index() {
    let scene = Scene::new(vec![pod("a").follower()])
        .lock(held("s1", 42, "a"))
        .session(Some(session("s1", "a")));
    let plan = scene.plan();
    assert_eq!(steps(&plan), vec![label_leader("a", 42, t(100))]);
    assert_eq!(plan.status.fencing_token, Some(42));
}

#[test]
fn a_leader_without_its_label_keys_token_gets_it_with_the_same_token() {
    // Labelled by a version that wrote only the shared `elector.dev/fencing-token`.
    let mut a = pod("a").leader(5, t(0));
    a.label_token = None;
    let plan = Scene::elected("a", &["b"], 5).with_pod(a).plan();
    assert_eq!(steps(&plan), vec![label_leader("a", 5, t(0))]);
    assert_eq!(plan.status.fencing_token, Some(5));
    assert!(
        events(&plan).is_empty(),
        "the same leadership: {:?}",
        events(&plan)
    );
}

#[test]
fn the_recorded_token_survives_while_nobody_leads() {
    let plan = Scene::elected("a", &["b"], 5).without_pod("a").plan();
    assert_eq!(plan.status.fencing_token, Some(5));
    let plan = Scene::elected("a", &["b"], 5)
        .lock(held("foreign", 9, "b"))
        .plan();
    assert_eq!(plan.status.fencing_token, Some(5));
}

#[test]
fn tokens_grow_over_repeated_moves() {
    let mut world = World::new(Scene::elected("a", &["b", "c"], 1));
    let mut tokens = vec![1];
    for n in 0..3 {
        let gone = world.leaders().pop().expect("a leader");
        let new = format!("n{n}");
        world.edit(|s| s.without_pod(&gone).with_pod(pod(&new).created(10 + n)));
        world.settle();
        tokens.push(world.scene.recorded.fencing_token.expect("token"));
    }
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
}

#[test]
fn a_labelled_holder_is_demoted_before_its_key_is_bumped() {
    // Regression: somebody else put the leader label (without a token) on the pod whose
    // session holds a key that must be bumped. Releasing it while the label is on would leave
    // a labelled leader without the lock (rules 1 and 2): the label goes first.
    let scene = Scene::elected("a", &["b"], 5)
        .with_pod(pod("a").follower())
        .lock(held("s1", 5, "a"));
    let mut labelled = pod("a");
    labelled.role = Some("leader".into());
    let scene = scene.with_pod(labelled);
    let plan = scene.plan();
    assert_eq!(
        steps(&plan),
        vec![
            follower("a"),
            release("s1"),
            confirm("s1"),
            acquire("s1", "a")
        ]
    );
    assert_demotions_first(&scene, &plan);
    let mut world = World::new(scene);
    world.settle();
    assert_eq!(world.leaders(), vec!["a".to_owned()]);
    assert_eq!(world.scene.recorded.fencing_token, Some(6));
}

#[test]
fn an_acquisition_whose_final_status_write_was_lost_is_not_bumped() {
    // The token was recorded and `a` labelled with it, then the status write naming the
    // leader was lost (the operator crashed, or the write failed): the status names nobody.
    let mut scene = Scene::elected("a", &["b"], 5);
    scene.recorded.leader = None;
    let plan = scene.plan();
    assert!(
        !plan
            .actions
            .iter()
            .any(|a| matches!(a, Action::Release { .. } | Action::Acquire { .. })),
        "no re-acquisition: {:?}",
        plan.actions
    );
    assert_eq!(
        labels(std::slice::from_ref(&plan)),
        Vec::<(String, u64)>::new(),
        "no relabel"
    );
    assert_eq!(plan.status.fencing_token, Some(5));
    assert_eq!(
        plan.status.leader.as_ref().map(|l| l.pod.as_str()),
        Some("a")
    );
}

#[test]
fn a_move_whose_final_status_write_was_lost_is_not_bumped() {
    // `b` led with session s0 and token 4; the move to `a` recorded token 5 and labelled `a`,
    // then the status write naming `a` was lost: the status still names `b` and s0.
    let mut scene = Scene::elected("a", &["b"], 5);
    if let Some(leader) = scene.recorded.leader.as_mut() {
        leader.pod = "b".into();
        leader.uid = uid("b");
        leader.session_id = Some("s0".into());
    }
    let plan = scene.plan();
    assert!(
        !plan
            .actions
            .iter()
            .any(|a| matches!(a, Action::Release { .. } | Action::Acquire { .. })),
        "no re-acquisition: {:?}",
        plan.actions
    );
    assert_eq!(plan.status.fencing_token, Some(5));
    assert_eq!(
        plan.status.leader.as_ref().map(|l| l.pod.as_str()),
        Some("a")
    );
}

/// The status records and the label, as the plan orders them.
fn records_and_labels(plan: &crate::election::plan::Plan) -> Vec<Action> {
    plan.actions
        .iter()
        .filter(|a| matches!(a, Action::RecordToken { .. } | Action::LabelLeader { .. }))
        .cloned()
        .collect()
}

#[test]
fn a_new_token_is_recorded_in_the_status_right_before_its_label() {
    // `a` holds the key with LockIndex 1 and is not labelled; the status holds no token.
    let scene = Scene::new(vec![pod("a"), pod("b")])
        .lock(held("s1", 1, "a"))
        .session(Some(session("s1", "a")));
    let plan = scene.plan();
    let labelled = records_and_labels(&plan);
    assert_eq!(
        labelled.first(),
        Some(&Action::RecordToken {
            uid: uid("a"),
            fencing_token: 1,
            whole: true,
        }),
        "{labelled:?}"
    );
    assert!(matches!(
        labelled.get(1),
        Some(Action::LabelLeader {
            fencing_token: 1,
            ..
        })
    ));
    assert_eq!(labelled.len(), 2);
}

#[test]
fn a_token_already_recorded_is_not_written_again_and_a_retry_records_only_the_token() {
    // The leader's annotations are rewritten (its leader-since differs from the status'):
    // the status holds the token already.
    let rewritten = Scene::elected("a", &["b"], 1).with_pod(pod("a").leader(1, t(5)));
    assert!(
        matches!(
            records_and_labels(&rewritten.plan()).as_slice(),
            [Action::LabelLeader { .. }]
        ),
        "{:?}",
        rewritten.plan().actions
    );
    // The status names `a` with an older token (its label failed, the token was raised):
    // the new token alone is recorded.
    let mut retry = Scene::elected("a", &["b"], 2).with_pod(pod("a"));
    retry.recorded.fencing_token = Some(1);
    assert_eq!(
        records_and_labels(&retry.plan()).first(),
        Some(&Action::RecordToken {
            uid: uid("a"),
            fencing_token: 2,
            whole: false,
        })
    );
}

/// Observe mode: the applications re-created the key, so its LockIndex restarted. The pod the
/// key names next gets a token above the recorded one, recorded before its label, and never
/// a Consul write to get there.
#[test]
fn observe_mode_tokens_stay_above_a_re_created_key() {
    let observe = crate::election::config::ElectionConfig {
        mode: crate::election::config::Mode::Observe,
        ..config()
    };
    // A, B, A held LockIndex 1, 2, 3; the key was re-created and B holds it (1).
    let scene = Scene::new(vec![pod("a").follower(), pod("b").follower()])
        .config(observe)
        .lock(LockView::Held {
            session: "app".into(),
            lock_index: 1,
            value: Some(value_for("b", &uid("b"))),
        })
        .recorded(recorded("a", "app", 3, t(50), 2));
    let plan = scene.plan();
    let labelled = records_and_labels(&plan);
    assert_eq!(
        labelled.first(),
        Some(&Action::RecordToken {
            uid: uid("b"),
            fencing_token: 4,
            whole: true,
        }),
        "{labelled:?}"
    );
    assert!(
        matches!(labelled.get(1), Some(Action::LabelLeader { pod, fencing_token: 4, .. }) if pod == "b"),
        "{labelled:?}"
    );
    assert!(consul_steps(&plan).is_empty(), "{:?}", plan.actions);
    assert_eq!(plan.status.fencing_token, Some(4));

    // Its tenure goes on: the next plan, with the label written, keeps token 4.
    let next = Scene::new(vec![pod("a").follower(), pod("b").leader(4, t(100))])
        .config(scene.config.clone())
        .lock(scene.lock.clone())
        .recorded(record(&plan.status))
        .plan();
    assert!(steps(&next).is_empty(), "{:?}", next.actions);
    assert_eq!(next.status.fencing_token, Some(4));
}

/// The status written before a leader label, as a whole record, holds the token about to be
/// labelled, and never a lower one than the plan's: a stale request must not move it back.
/// The record of the token alone never lowers it either.
#[test]
fn a_token_record_holds_the_new_token_and_never_a_lower_one() {
    use crate::crd::LeaderElectionStatus;
    use crate::election::status_change::StatusChange;

    let plan = Scene::elected("a", &["b"], 5).plan();
    assert_eq!(plan.status.fencing_token, Some(5));
    let old = LeaderElectionStatus {
        fencing_token: Some(4),
        ..LeaderElectionStatus::default()
    };
    let recorded = |token, whole| {
        let change = StatusChange::Token {
            plan: Box::new(plan.clone()),
            uid: uid("a"),
            token,
            whole,
            spec_valid: spec_valid(),
            failed_writes: None,
        };
        change.render(&old, &facts()).status.fencing_token
    };
    assert_eq!(recorded(7, true), Some(7));
    assert_eq!(recorded(3, true), Some(5));
    assert_eq!(recorded(7, false), Some(7));
    assert_eq!(recorded(3, false), Some(4));
}
