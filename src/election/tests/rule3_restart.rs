//! Rule 3: the operator's own restarts change no leader. After a restart the operator adopts
//! the session named in `status.leader.sessionID`; when that session still holds the key and
//! the labels agree, the plan is empty and the status is exactly what was recorded.

use super::support::*;
use crate::election::observe::LockView;
use crate::election::plan::Phase;
use crate::election::planner::{CONSUL_AVAILABLE, LEADER_ELECTED};

#[test]
fn an_adopted_session_holding_the_key_plans_nothing_and_keeps_the_status() {
    let scene = Scene::elected("a", &["b", "c"], 5).recorded(recorded("a", "s1", 5, t(0), 3));
    let plan = scene.plan();
    assert!(plan.actions.is_empty(), "{plan:#?}");
    assert_eq!(plan.requeue_after, None);
    assert_eq!(plan.status.phase, Phase::Elected);
    // Writing this status back changes nothing: same leader, since, session, token,
    // transitions.
    assert_eq!(record(&plan.status), scene.recorded);
    assert!(condition(&plan.status, LEADER_ELECTED).status);
    assert!(condition(&plan.status, CONSUL_AVAILABLE).status);
}

#[test]
fn restarts_repeated_many_times_change_nothing() {
    let mut world =
        World::new(Scene::elected("a", &["b", "c"], 9).recorded(recorded("a", "s1", 9, t(0), 2)));
    let before = world.scene.clone();
    for n in 0..5 {
        world.edit(|s| s.now(t(100 + n * 7)));
        let plan = world.step();
        assert!(plan.actions.is_empty(), "{plan:#?}");
    }
    assert_eq!(world.scene.pods, before.pods);
    assert_eq!(world.scene.recorded, before.recorded);
    assert_eq!(world.scene.lock, before.lock);
}

#[test]
fn a_restart_while_consul_kv_is_unreadable_changes_nothing() {
    let scene = Scene::elected("a", &["b"], 5).lock(LockView::Unknown);
    let plan = scene.plan();
    assert!(plan.actions.is_empty(), "{plan:#?}");
    assert_eq!(record(&plan.status), scene.recorded);
}

#[test]
fn a_restart_that_finds_the_leader_within_its_failover_delay_waits() {
    let config = crate::election::config::ElectionConfig {
        failover_delay: secs(30),
        ..config()
    };
    let scene = Scene::elected("a", &["b"], 5)
        .config(config)
        .with_pod(pod("a").leader(5, t(0)).not_ready_since(90));
    let plan = scene.plan();
    assert!(plan.actions.is_empty(), "{plan:#?}");
    assert_eq!(plan.requeue_after, Some(secs(20)));
    assert_eq!(record(&plan.status), scene.recorded);
}

#[test]
fn an_interrupted_first_election_resumes_with_the_label() {
    // The sequence stopped between "acquire" and "label leader" (a failed patch); the
    // status recorded nothing yet and the session still holds the key.
    let scene = Scene::new(vec![pod("a").follower(), pod("b").follower()])
        .lock(held("s1", 1, "a"))
        .session(Some(session("s1", "a")));
    let plan = scene.plan();
    assert_eq!(steps(&plan), vec![label_leader("a", 1, t(100))]);
    assert_eq!(plan.status.transitions, 0);
}

#[test]
fn a_session_that_could_not_be_adopted_is_waited_out() {
    // The operator died between "acquire" and the status write, so the status names no
    // session to adopt: the key is held by a session the new process does not know. It
    // labels nobody and waits for Consul to expire that session.
    let scene = Scene::new(vec![pod("a").follower(), pod("b").follower()]).lock(held("s1", 1, "a"));
    let plan = scene.plan();
    assert!(plan.actions.is_empty(), "{plan:#?}");
    assert_eq!(plan.status.phase, Phase::Pending);
}

#[test]
fn a_leader_since_annotation_is_kept_across_restarts() {
    // The status and the pod agree on `since`; the restart happens much later.
    let scene = Scene::elected("a", &["b"], 5).now(t(100_000));
    let plan = scene.plan();
    assert!(plan.actions.is_empty());
    assert_eq!(plan.status.leader.map(|l| l.since), Some(t(0)));
}
