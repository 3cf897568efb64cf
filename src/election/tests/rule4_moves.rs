//! Rule 4: a leader that stops being eligible (deleted, terminating, no longer selected,
//! finished, NotReady for at least `failover.delay`) is demoted first, then released
//! explicitly (no lock-delay), then its session is destroyed and one is created for the
//! successor; the successor acquires in the next plan and is labelled in the one after.

use super::support::*;
use crate::election::config::ElectionConfig;
use crate::election::observe::LockView;
use crate::election::plan::{Action, EventReason, Phase};
use crate::election::planner::LEADER_ELECTED;

/// `a` leads with token 5 through `s1`; `b` (older) and `c` (newest) follow.
fn base() -> Scene {
    Scene::elected("a", &["b", "c"], 5).with_pod(pod("c").follower().created(30))
}

fn with_delay(delay: u64) -> ElectionConfig {
    ElectionConfig {
        failover_delay: secs(delay),
        ..config()
    }
}

/// Follows the move to its end and checks the plans after the first one.
fn finish_move(scene: Scene, successor: &str) -> World {
    let mut world = World::new(scene);
    let first = world.step();
    assert!(
        !first
            .actions
            .iter()
            .any(|a| matches!(a, Action::Acquire { .. } | Action::LabelLeader { .. })),
        "the demoting plan neither acquires nor labels: {first:#?}"
    );
    let p2 = world.step();
    assert_eq!(steps(&p2), vec![acquire("s2", successor)]);
    let p3 = world.step();
    assert_eq!(steps(&p3), vec![label_leader(successor, 6, t(100))]);
    assert_eq!(
        events(&p3),
        vec![(EventReason::LeaderElected, Some(successor.into()))]
    );
    assert_eq!(p3.status.transitions, 1);
    assert_eq!(p3.status.fencing_token, Some(6));
    assert!(world.step().actions.is_empty());
    assert_eq!(world.leaders(), vec![successor.to_owned()]);
    world
}

#[test]
fn a_deleted_leader_is_released_and_replaced() {
    let scene = base().without_pod("a");
    let plan = scene.plan();
    assert_eq!(
        steps(&plan),
        vec![release("s1"), destroy("s1"), create("c")]
    );
    assert_eq!(plan.status.phase, Phase::Electing);
    finish_move(scene, "c");
}

#[test]
fn a_terminating_leader_is_demoted_released_and_replaced() {
    let scene = base().with_pod(pod("a").leader(5, t(0)).terminating());
    let plan = scene.plan();
    assert_eq!(
        steps(&plan),
        vec![follower("a"), release("s1"), destroy("s1"), create("c")]
    );
    assert_eq!(
        events(&plan),
        vec![(EventReason::LeaderLost, Some("a".into()))]
    );
    assert_eq!(warnings(&plan), [], "deleting the leader is no failure");
    assert_demotions_first(&scene, &plan);
    finish_move(scene, "c");
}

#[test]
fn an_unselected_leader_loses_every_label_and_is_replaced() {
    let scene = base().with_pod(pod("a").leader(5, t(0)).unselected());
    let plan = scene.plan();
    assert_eq!(
        steps(&plan),
        vec![unlabel("a"), release("s1"), destroy("s1"), create("c")]
    );
    let world = finish_move(scene, "c");
    let a = world.pod("a");
    assert_eq!(
        (&a.role, &a.fencing_token, &a.leader_since),
        (&None, &None, &None)
    );
}

#[test]
fn a_finished_leader_is_replaced() {
    let scene = base().with_pod(pod("a").leader(5, t(0)).finished());
    assert_eq!(
        steps(&scene.plan()),
        vec![follower("a"), release("s1"), destroy("s1"), create("c")]
    );
}

#[test]
fn a_leader_not_ready_beyond_the_failover_delay_is_replaced() {
    let scene = base()
        .config(with_delay(10))
        .with_pod(pod("a").leader(5, t(0)).not_ready_since(80));
    let plan = scene.plan();
    assert_eq!(
        steps(&plan),
        vec![follower("a"), release("s1"), destroy("s1"), create("c")]
    );
    assert_eq!(
        warnings(&plan),
        vec![(EventReason::LeaderLost, Some("a".into()))],
        "a leader that failed its readiness is a Warning"
    );
    finish_move(scene, "c");
}

#[test]
fn a_leader_not_ready_for_exactly_the_failover_delay_is_replaced() {
    let scene = base()
        .config(with_delay(10))
        .with_pod(pod("a").leader(5, t(0)).not_ready_since(90));
    assert_eq!(steps(&scene.plan())[0], follower("a"));
}

#[test]
fn a_leader_not_ready_with_no_failover_delay_is_replaced_at_once() {
    let scene = base().with_pod(pod("a").leader(5, t(0)).not_ready_since(100));
    assert_eq!(
        steps(&scene.plan()),
        vec![follower("a"), release("s1"), destroy("s1"), create("c")]
    );
}

#[test]
fn a_leader_not_ready_within_the_failover_delay_keeps_leading() {
    let scene = base()
        .config(with_delay(10))
        .with_pod(pod("a").leader(5, t(0)).not_ready_since(96));
    let plan = scene.plan();
    assert!(plan.actions.is_empty(), "{plan:#?}");
    assert_eq!(plan.requeue_after, Some(secs(6)));
    assert_eq!(plan.status.phase, Phase::Elected);
    assert!(condition(&plan.status, LEADER_ELECTED).status);
    // Its candidate entry says why it could not be elected now.
    let a = &plan.status.candidates[0];
    assert_eq!(
        (a.pod.as_str(), a.eligible, a.reason),
        ("a", false, Some("NotReady"))
    );
}

#[test]
fn a_leader_that_recovers_within_the_failover_delay_keeps_leading() {
    let mut world = World::new(
        base()
            .config(with_delay(10))
            .with_pod(pod("a").leader(5, t(0)).not_ready_since(96)),
    );
    assert_eq!(world.step().requeue_after, Some(secs(6)));
    world.edit(|s| s.with_pod(pod("a").leader(5, t(0)).ready()).now(t(102)));
    let plan = world.step();
    assert!(plan.actions.is_empty(), "{plan:#?}");
    assert_eq!(plan.requeue_after, None);
    assert_eq!(world.leaders(), vec!["a".to_owned()]);
    assert_eq!(plan.status.transitions, 0);
}

#[test]
fn without_require_ready_a_not_ready_leader_keeps_leading() {
    let config = ElectionConfig {
        require_ready: false,
        ..config()
    };
    let scene = base()
        .config(config)
        .with_pod(pod("a").leader(5, t(0)).not_ready_since(10));
    let plan = scene.plan();
    assert!(plan.actions.is_empty());
    assert_eq!(plan.requeue_after, None);
}

#[test]
fn a_leader_without_an_eligible_successor_is_still_released() {
    let scene = base()
        .with_pod(pod("a").leader(5, t(0)).terminating())
        .with_pod(pod("b").follower().not_ready_since(50))
        .with_pod(pod("c").follower().created(30).not_ready_since(50));
    let plan = scene.plan();
    assert_eq!(
        steps(&plan),
        vec![follower("a"), release("s1"), destroy("s1")]
    );
    assert_eq!(plan.status.phase, Phase::Pending);
    assert_eq!(
        condition(&plan.status, LEADER_ELECTED).reason,
        "NoCandidates"
    );
    // Then nothing, until a pod becomes eligible.
    let mut world = World::new(scene);
    world.step();
    let idle = world.step();
    assert!(idle.actions.is_empty(), "{idle:#?}");
    assert_eq!(idle.status.phase, Phase::Pending);
}

#[test]
fn the_move_releases_before_destroying_so_no_lock_delay_applies() {
    let scene = base().without_pod("a");
    let plan = scene.plan();
    let pos = |a: &Action| plan.actions.iter().position(|b| b == a).expect("present");
    assert!(pos(&release("s1")) < pos(&destroy("s1")));
    // The world applies Consul's lock-delay to a destroyed holder: none was set.
    let mut world = World::new(scene);
    world.step();
    assert_eq!(world.scene.lock_delay_until, None);
}

#[test]
fn a_leader_recreated_under_the_same_name_is_a_new_pod() {
    // `a` was deleted and re-created (a StatefulSet): new UID, no labels, newest pod.
    let scene = base().with_pod(pod("a").with_uid("uid-a2").created(50));
    let plan = scene.plan();
    assert_eq!(
        steps(&plan),
        vec![
            release("s1"),
            destroy("s1"),
            Action::LabelFollower {
                pod: "a".into(),
                uid: "uid-a2".into()
            },
            Action::CreateSession {
                pod: "a".into(),
                uid: "uid-a2".into()
            },
        ]
    );
}

#[test]
fn a_failed_step_stops_the_move_and_the_next_plan_resumes_it() {
    // Only the demotion ran (the release failed): the next plan no longer demotes, it
    // releases.
    let scene = base().with_pod(pod("a").follower().terminating());
    let plan = scene.plan();
    assert_eq!(
        steps(&plan),
        vec![release("s1"), destroy("s1"), create("c")]
    );
    // Release and destroy ran, the create failed: the next plan creates.
    let scene = base()
        .with_pod(pod("a").follower().terminating())
        .lock(free(5))
        .session(None);
    assert_eq!(steps(&scene.plan()), vec![create("c")]);
}

#[test]
fn a_session_acquiring_again_the_key_it_held_is_confirmed_first() {
    // The key went without a release (deleted from outside): if Consul invalidated the
    // session, an acquisition would meet the lock-delay before Consul even looks at the
    // session, so the session is asked for first.
    let lost = Scene::elected("a", &["b"], 5).lock(LockView::Absent);
    assert_eq!(
        consul_steps(&lost.plan()),
        vec![confirm("s1"), acquire("s1", "a")]
    );
    // A session that never held the key acquires at once.
    let fresh = Scene::new(vec![pod("a").follower()])
        .lock(free(2))
        .session(Some(session("s2", "a")));
    assert_eq!(consul_steps(&fresh.plan()), vec![acquire("s2", "a")]);
}
