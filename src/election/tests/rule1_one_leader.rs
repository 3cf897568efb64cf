//! Rule 1: at most one leader label per election, at every instant. The first election runs
//! "create session" -> "acquire" -> "label leader"; every demotion precedes every lock step;
//! labels of pods that left the selector and stale leader annotations are cleaned up.

use super::support::*;
use crate::election::observe::LockView;
use crate::election::plan::{EventReason, Phase};
use crate::election::planner::{CONSUL_AVAILABLE, LEADER_ELECTED};

#[test]
fn first_election_creates_a_session_then_acquires_then_labels() {
    let scene = Scene::new(vec![
        pod("a").created(0),
        pod("b").created(10),
        pod("c").created(20),
    ]);
    let mut world = World::new(scene);

    // Plan 1: every other selected pod becomes a follower; a session is created for the
    // newest (not labelled follower first: its next label is leader).
    let p1 = world.step();
    assert_eq!(steps(&p1), vec![follower("a"), follower("b"), create("c")]);
    assert!(events(&p1).is_empty());
    assert_eq!(p1.status.phase, Phase::Electing);
    assert_eq!(p1.status.leader, None);
    assert_eq!(p1.status.fencing_token, None);
    assert!(!condition(&p1.status, LEADER_ELECTED).status);
    assert!(condition(&p1.status, CONSUL_AVAILABLE).status);

    // Plan 2: the session acquires the key (a fresh key: LockIndex 1).
    let p2 = world.step();
    assert_eq!(steps(&p2), vec![acquire("s2", "c")]);
    assert_eq!(p2.status.phase, Phase::Electing);

    // Plan 3: the holder is labelled leader with the lock index as its fencing token.
    let p3 = world.step();
    assert_eq!(steps(&p3), vec![label_leader("c", 1, t(100))]);
    assert_eq!(
        events(&p3),
        vec![(EventReason::LeaderElected, Some("c".into()))]
    );
    assert_eq!(p3.status.phase, Phase::Elected);
    let leader = p3.status.leader.clone().expect("a leader");
    assert_eq!(
        (leader.pod.as_str(), leader.uid.as_str()),
        ("c", uid("c").as_str())
    );
    assert_eq!(leader.since, t(100));
    assert_eq!(leader.session_id.as_deref(), Some("s2"));
    assert_eq!(p3.status.fencing_token, Some(1));
    assert_eq!(
        p3.status.transitions, 0,
        "a first election is no transition"
    );
    assert!(condition(&p3.status, LEADER_ELECTED).status);
    assert_eq!(condition(&p3.status, LEADER_ELECTED).reason, "Elected");

    // Plan 4: nothing left to do.
    let p4 = world.step();
    assert!(p4.actions.is_empty(), "{p4:#?}");
    assert_eq!(p4.status, p3.status);
    assert_eq!(world.leaders(), vec!["c".to_owned()]);
}

#[test]
fn a_second_pod_carrying_the_leader_label_is_demoted_and_nothing_else_changes() {
    // `b` carries the label (a crashed move, a manual edit); `a` holds the lock.
    let scene = Scene::elected("a", &["c"], 5).with_pod(pod("b").leader(4, t(0)));
    let plan = scene.plan();
    assert_eq!(steps(&plan), vec![follower("b")]);
    assert_eq!(
        events(&plan),
        vec![(EventReason::LeaderLost, Some("b".into()))]
    );
    assert_eq!(plan.status.phase, Phase::Elected);
    assert_eq!(
        plan.status.leader.as_ref().map(|l| l.pod.as_str()),
        Some("a")
    );
    assert_demotions_first(&scene, &plan);
}

#[test]
fn no_pod_keeps_the_leader_label_while_nobody_holds_the_key() {
    // The key is unlocked (released behind the operator's back): the label goes first, then
    // the lock is taken again through a fresh session for the same pod.
    let scene = Scene::elected("a", &["b"], 5).lock(free(5)).session(None);
    let plan = scene.plan();
    assert_eq!(steps(&plan), vec![follower("a"), create("a")]);
    assert_eq!(
        events(&plan),
        vec![(EventReason::LeaderLost, Some("a".into()))]
    );
    assert_demotions_first(&scene, &plan);
    assert!(!condition(&plan.status, LEADER_ELECTED).status);
}

#[test]
fn a_labelled_pod_never_coexists_with_a_second_label_during_a_move() {
    // Every action of every plan is executed and checked by the world (at most one leader
    // label after each action, the leader label only on the holder of the lock).
    let mut world = World::new(Scene::elected("a", &["b", "c"], 7));
    world.edit(|s| s.with_pod(pod("a").leader(7, t(0)).terminating()));
    let plans = world.settle();
    assert_eq!(
        plans.len(),
        3,
        "demote+release+create, acquire, label: {plans:#?}"
    );
    assert_eq!(world.leaders(), vec!["b".to_owned()]);
}

#[test]
fn pods_that_leave_the_selector_lose_every_label_and_annotation() {
    let scene = Scene::elected("a", &["b"], 5)
        .with_pod(pod("x").follower().unselected())
        .with_pod(pod("y").annotated(3, t(0)).unselected());
    let plan = scene.plan();
    assert_eq!(steps(&plan), vec![unlabel("x"), unlabel("y")]);
    // Unselected pods are no candidates.
    let names: Vec<&str> = plan
        .status
        .candidates
        .iter()
        .map(|c| c.pod.as_str())
        .collect();
    assert_eq!(names, vec!["a", "b"]);
}

#[test]
fn an_unselected_pod_without_our_labels_is_left_alone() {
    let scene = Scene::elected("a", &["b"], 5).with_pod(pod("x").unselected());
    assert!(scene.plan().actions.is_empty());
}

#[test]
fn followers_with_stale_leader_annotations_are_cleaned() {
    let scene = Scene::elected("a", &["b"], 5).with_pod(pod("b").follower().annotated(4, t(0)));
    let plan = scene.plan();
    assert_eq!(steps(&plan), vec![follower("b")]);
    assert!(
        events(&plan).is_empty(),
        "cleaning annotations is no leadership change"
    );
    // A token left beside the label alone is one too.
    let mut b = pod("b").follower();
    b.label_token = Some("4".into());
    let plan = Scene::elected("a", &["b"], 5).with_pod(b).plan();
    assert_eq!(steps(&plan), vec![follower("b")]);
}

#[test]
fn selected_pods_with_a_foreign_value_in_the_label_key_become_followers() {
    let mut odd = pod("b");
    odd.role = Some("something-else".into());
    let plan = Scene::elected("a", &[], 5).with_pod(odd).plan();
    assert_eq!(steps(&plan), vec![follower("b")]);
}

#[test]
fn every_demotion_comes_before_every_lock_step() {
    let base = Scene::elected("a", &["b", "c"], 5);
    let scenes = [
        base.clone()
            .with_pod(pod("a").leader(5, t(0)).terminating()),
        base.clone().with_pod(pod("a").leader(5, t(0)).unselected()),
        base.clone()
            .with_pod(pod("a").leader(5, t(0)).not_ready_since(50)),
        base.clone().with_pod(pod("a").leader(5, t(0)).finished()),
        base.clone().lock(LockView::Absent),
        base.clone().lock(free(5)),
        base.clone().lock(held("foreign", 6, "b")),
        base.clone()
            .session(Some(session("s1", "a").lost()))
            .lock(free(5)),
        base.clone()
            .with_pod(pod("b").leader(4, t(0)))
            .with_pod(pod("a").leader(5, t(0)).terminating()),
    ];
    for scene in &scenes {
        let plan = scene.plan();
        assert_demotions_first(scene, &plan);
        assert!(
            !plan
                .actions
                .iter()
                .any(|a| matches!(a, crate::election::plan::Action::LabelLeader { .. })),
            "a plan that must demote labels nobody: {plan:#?}"
        );
    }
}

#[test]
fn while_consul_is_unknown_a_second_leader_label_still_goes() {
    // Regression: two pods carry the leader label (one put there by somebody else) and the
    // key cannot be read. Only the leader the status recorded may keep it.
    let two = Scene::elected("a", &["c"], 5)
        .with_pod(pod("b").leader(4, t(0)))
        .lock(LockView::Unknown)
        .session(None);
    let plan = two.plan();
    assert_eq!(steps(&plan), vec![follower("b")]);
    assert!(consul_steps(&plan).is_empty());

    // Nobody recorded: nobody can be told apart, both go.
    let plan = two.clone().recorded(Default::default()).plan();
    assert_eq!(steps(&plan), vec![follower("a"), follower("b")]);

    // A single label stays as it is (no leader changes while Consul is unknown).
    let one = Scene::elected("a", &["c"], 5)
        .lock(LockView::Unknown)
        .session(None)
        .recorded(Default::default());
    assert!(one.plan().actions.is_empty());

    // The same in Observe mode.
    let observe = crate::election::config::ElectionConfig {
        mode: crate::election::config::Mode::Observe,
        ..config()
    };
    let plan = two.config(observe).recorded(Default::default()).plan();
    assert_eq!(steps(&plan), vec![follower("a"), follower("b")]);
}

#[test]
fn a_follower_whose_annotations_nobody_owns_is_labelled_again_to_claim_them() {
    let mut unowned = pod("b").follower();
    unowned.reclaim = true;
    let plan = Scene::elected("a", &["c"], 5).with_pod(unowned).plan();
    assert_eq!(steps(&plan), vec![follower("b")], "{plan:#?}");
    let settled = Scene::elected("a", &["b", "c"], 5).plan();
    assert!(steps(&settled).is_empty(), "{settled:#?}");
}
