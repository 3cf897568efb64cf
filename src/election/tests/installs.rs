//! Two installs of the operator in one cluster (rule 8: one writer). The key held by another
//! install's session, for a pod of this cluster, means that install serves the election: this
//! one writes nothing (no pod, no status) and takes over only once that session is gone. Any
//! other holder (an application, an earlier version, another cluster) is handled as before:
//! every pod a follower.

use super::support::*;
use crate::election::observe::LockView;
use crate::election::plan::{Action, EventReason, Phase};
use crate::election::planner::LEADER_ELECTED;

/// The key held by `session` with a value written by install `install` of cluster `cluster`
/// for `pod`.
fn held_by_install(session: &str, pod: &str, cluster: &str, install: &str) -> LockView {
    let value = serde_json::json!({
        "pod": pod, "namespace": "shop", "uid": uid(pod), "election": "web",
        "cluster": cluster, "install": install,
    });
    LockView::Held {
        session: session.into(),
        lock_index: 9,
        value: Some(value.to_string().into_bytes()),
    }
}

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
        plan.managed_elsewhere.as_deref(),
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
