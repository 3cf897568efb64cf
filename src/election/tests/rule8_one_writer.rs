//! Rule 8, one writer: two installs of the operator in one cluster (the Lease that lets one
//! replica of an install write is `leadership::elector`, tested there). The key held by another
//! install's session, for a pod of this cluster, means that install serves the election: this
//! one writes nothing (no pod, no status) and takes over only once that session is gone. Any
//! other holder (an application, an earlier version, another cluster) is handled as before:
//! every pod a follower.

use super::support::*;
use crate::election::observe::LockView;
use crate::election::plan::{Action, EventReason, Phase, Plan, StoodBack, TAKEOVER_GRACE};
use crate::election::planner::LEADER_ELECTED;

#[test]
fn another_install_holding_the_key_for_a_pod_here_is_left_alone() {
    // The other install labelled a leader; this one (which never wrote anything) sees it.
    let scene = Scene::new(vec![
        pod("a").leader(9, t(0)),
        pod("b"),
        pod("c").follower(),
    ])
    .lock(held_by_install(
        "theirs",
        "a",
        "test-cluster",
        "team.consul-elector",
    ));
    let plan = scene.plan();
    assert_eq!(
        events(&plan),
        vec![(EventReason::ManagedElsewhere, None)],
        "nothing but the event: {:?}",
        plan.actions
    );
    assert_eq!(
        warnings(&plan),
        vec![],
        "another install serving is a chosen state, not a Warning"
    );
    assert_eq!(
        plan.managed_elsewhere.map(|s| s.other).as_deref(),
        Some("test-cluster/team.consul-elector")
    );
    assert_eq!(plan.status.phase, Phase::Pending);
    assert_eq!(
        condition(&plan.status, LEADER_ELECTED).reason,
        "ManagedElsewhere"
    );
}

#[test]
fn a_session_of_this_install_left_from_a_lost_race_is_dropped() {
    let scene = Scene::new(vec![pod("a"), pod("b")])
        .lock(held_by_install(
            "theirs",
            "a",
            "test-cluster",
            "team.consul-elector",
        ))
        .session(Some(session("ours", "b")));
    let plan = scene.plan();
    assert_eq!(
        steps(&plan),
        vec![Action::DestroySession {
            session: "ours".into()
        }],
        "only this install's own session goes; no pod is touched"
    );
    assert!(plan.managed_elsewhere.is_some());
}

#[test]
fn other_holders_are_still_followed_as_before() {
    let pods = || vec![pod("a").leader(9, t(0)), pod("b").follower()];
    // An install of another cluster (its pod is not one of ours), an earlier version or an
    // application (no install in the value): every pod a follower, the status is ours.
    for lock in [
        held_by_install("theirs", "x", "other-cluster", "ops.consul-elector"),
        held("theirs", 9, "a"),
    ] {
        let plan = Scene::new(pods()).lock(lock.clone()).plan();
        assert_eq!(plan.managed_elsewhere, None, "{lock:?}");
        assert_eq!(steps(&plan), vec![follower("a")], "{lock:?}");
        assert_eq!(
            condition(&plan.status, LEADER_ELECTED).reason,
            "LockHeldElsewhere"
        );
    }
}

#[test]
fn a_value_of_this_install_is_not_another_install() {
    // This install's own value, held by a session it does not know (not adopted): as before.
    let plan = Scene::new(vec![pod("a").leader(9, t(0)), pod("b").follower()])
        .lock(held_by_install(
            "unknown",
            "a",
            "test-cluster",
            "ops.consul-elector",
        ))
        .plan();
    assert_eq!(plan.managed_elsewhere, None);
}

#[test]
fn after_standing_back_a_free_key_is_taken_only_once_it_stayed_free() {
    // The other install is mid-move (or this install's view of the key is stale): the pod it
    // labelled keeps its label, and the key is left alone for the grace period.
    let scene = Scene::new(vec![
        pod("a").leader(9, t(0)),
        pod("b"),
        pod("c").follower(),
    ])
    .lock(LockView::Free { lock_index: 9 });
    let stood = |since: Option<i64>| {
        let mut s = scene.clone();
        s.stood_back = Some(StoodBack {
            other: "test-cluster/team.consul-elector".into(),
            key_free_since: since.map(|s| mono(t(s))),
        });
        s
    };
    let first_look = stood(None).plan();
    assert!(steps(&first_look).is_empty(), "{:?}", first_look.actions);
    assert_eq!(
        first_look.managed_elsewhere.and_then(|s| s.key_free_since),
        Some(mono(t(100))),
        "the key free since now"
    );
    assert_eq!(first_look.requeue_after, Some(TAKEOVER_GRACE));
    let within = stood(Some(99)).plan();
    assert!(steps(&within).is_empty(), "{:?}", within.actions);
    // Free for the whole grace: taken, and nothing relabelled before it is held.
    let taken = stood(Some(98)).plan();
    assert_eq!(taken.managed_elsewhere, None);
    assert!(
        steps(&taken)
            .iter()
            .all(|a| matches!(a, Action::CreateSession { .. } | Action::Acquire { .. })),
        "only a session and an acquisition: {:?}",
        taken.actions
    );
    assert!(!steps(&taken).is_empty());
    // Without the stand-back, the usual order: demote first.
    assert_eq!(steps(&scene.plan()).first(), Some(&follower("a")));
}

/// `scene` planned by this install after it stood back for another one while the key stayed
/// free for the whole grace: it takes over, first taking the leader label off `leader`.
fn taken_over_demoting(scene: &Scene, leader: &str) -> Plan {
    let mut taking_over = scene.clone();
    taking_over.stood_back = Some(StoodBack {
        other: "test-cluster/team.consul-elector".into(),
        key_free_since: Some(mono(t(98))),
    });
    let plan = taking_over.plan();
    assert_eq!(plan.managed_elsewhere, None, "taken over");
    assert_eq!(
        steps(&plan).first(),
        Some(&follower(leader)),
        "{:?}",
        plan.actions
    );
    plan
}

#[test]
fn a_takeover_takes_off_a_leader_label_it_does_not_acquire_for() {
    // The other install left its leader label on a pod that is going away, and no pod can
    // lead: once the key stayed free for the grace, nothing backs that label (rule 2).
    let scene = Scene::new(vec![pod("a").leader(9, t(0)).terminating()])
        .lock(LockView::Free { lock_index: 9 });
    taken_over_demoting(&scene, "a");
}

#[test]
fn a_takeover_held_back_by_a_lock_delay_takes_off_the_label_it_cannot_back_yet() {
    // The pod about to be elected carries a leader label, but the key's lock-delay holds its
    // acquisition back beyond this reconcile: meanwhile nothing backs that label (rule 2).
    let scene = Scene::new(vec![pod("a").leader(9, t(0)), pod("b")])
        .lock(LockView::Free { lock_index: 9 })
        .session(Some(session("s2", "a")))
        .lock_delay_until(Some(t(113)));
    let plan = taken_over_demoting(&scene, "a");
    assert!(
        !steps(&plan)
            .iter()
            .any(|a| matches!(a, Action::Acquire { .. })),
        "the lock-delay is waited out: {:?}",
        plan.actions
    );
    assert_eq!(plan.requeue_after, Some(secs(13)));
}

#[test]
fn standing_back_is_said_once_and_then_the_plan_settles() {
    let scene = Scene::new(vec![pod("a").leader(9, t(0)), pod("b")]).lock(held_by_install(
        "theirs",
        "a",
        "test-cluster",
        "team.consul-elector",
    ));
    let first = scene.plan();
    assert_eq!(events(&first), vec![(EventReason::ManagedElsewhere, None)]);
    // The next decision (in the same reconcile or the next) knows it stood back: a plan that
    // repeated the event would never be empty, and the reconcile would never settle.
    let mut again = scene.clone();
    again.stood_back = first.managed_elsewhere.clone();
    let plan = again.plan();
    assert!(plan.actions.is_empty(), "{:?}", plan.actions);
    assert!(plan.managed_elsewhere.is_some());
}
