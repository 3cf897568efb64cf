//! `spec.paused`: a Managed election whose leadership does not move. The leader keeps leading
//! whatever its readiness; when it goes, nobody is elected and the session keeps the key;
//! switchover requests wait; the safety rules (no leader label without a confirmed lock) hold.
//! Resuming moves leadership the usual way.

use super::support::*;
use crate::election::config::ElectionConfig;
use crate::election::plan::{Action, Phase};
use crate::election::planner::LEADER_ELECTED;

fn paused() -> ElectionConfig {
    ElectionConfig {
        paused: true,
        ..config()
    }
}

/// Whether the plan writes to Consul (creates, acquires, releases or destroys).
fn creates_or_releases(plan: &crate::election::plan::Plan) -> bool {
    plan.actions.iter().any(Action::writes_consul)
}

/// The plan leaves the election's switchover request in place.
fn assert_request_stays(plan: &crate::election::plan::Plan) {
    assert!(
        !plan
            .actions
            .iter()
            .any(|a| matches!(a, Action::ClearSwitchover { .. })),
        "the request stays: {plan:#?}"
    );
}

#[test]
fn a_paused_leader_that_turns_not_ready_keeps_leading() {
    let scene = Scene::elected("a", &["b", "c"], 5)
        .config(paused())
        .with_pod(pod("a").leader(5, t(0)).not_ready_since(10));
    let plan = scene.plan();
    assert!(plan.actions.is_empty(), "{plan:#?}");
    assert_eq!(plan.status.phase, Phase::Paused);
    assert!(condition(&plan.status, LEADER_ELECTED).status);
    // Resumed, the NotReady leader is replaced at once.
    let resumed = scene.config(config()).plan();
    assert_eq!(steps(&resumed)[0], follower("a"), "{resumed:#?}");
}

#[test]
fn a_paused_leader_that_is_deleted_is_not_replaced_until_resumed() {
    let mut world = World::new(Scene::elected("a", &["b", "c"], 5).config(paused()));
    world.edit(|scene| scene.without_pod("a"));
    let plan = world.step();
    assert!(
        !creates_or_releases(&plan),
        "the session keeps the key, nobody is elected: {plan:#?}"
    );
    assert_eq!(world.leaders(), Vec::<String>::new());
    assert_eq!(plan.status.phase, Phase::Paused);
    let elected = condition(&plan.status, LEADER_ELECTED);
    assert!(!elected.status);
    assert_eq!(elected.reason, "Paused");
    assert!(world.step().actions.is_empty(), "and nothing more happens");
    world.edit(|scene| scene.config(config()));
    world.settle();
    assert_eq!(world.leaders().len(), 1, "resumed, a successor leads");
    assert_ne!(world.leaders(), vec!["a".to_owned()]);
}

#[test]
fn a_switchover_asked_while_paused_waits_for_the_resume() {
    let mut world = World::new(
        Scene::elected("a", &["b", "c"], 5)
            .config(paused())
            .switchover("b"),
    );
    let plan = world.step();
    assert!(!creates_or_releases(&plan), "{plan:#?}");
    assert_request_stays(&plan);
    assert_eq!(world.leaders(), vec!["a".to_owned()]);
    world.edit(|scene| scene.config(config()));
    world.settle();
    assert_eq!(world.leaders(), vec!["b".to_owned()]);
}

#[test]
fn paused_with_the_key_free_elects_nobody_and_labels_no_leader() {
    // The key is free (deleted by hand) while "a" still carries the label.
    let scene = Scene::elected("a", &["b"], 5)
        .config(paused())
        .lock(free(7))
        .session(None);
    let plan = scene.plan();
    assert!(!creates_or_releases(&plan), "{plan:#?}");
    assert_eq!(
        steps(&plan),
        vec![follower("a")],
        "no label without the lock"
    );
    assert_eq!(plan.status.phase, Phase::Paused);
}

#[test]
fn a_paused_leader_whose_lock_cannot_be_confirmed_is_fenced() {
    let scene = Scene::elected("a", &["b"], 5)
        .config(paused())
        .session(Some(session("s1", "a").unconfirmed_since(80)));
    let plan = scene.plan();
    assert_eq!(steps(&plan), vec![follower("a")]);
    assert_eq!(
        plan.status.phase,
        Phase::Fenced,
        "paused does not hide a fenced leader"
    );
}

/// A request made while paused waits even when the key is held outside the operator: it is
/// decided (and refused, if the key is still held elsewhere) only once the election resumes.
#[test]
fn a_switchover_asked_while_paused_waits_even_with_the_key_held_elsewhere() {
    let scene = Scene::new(vec![pod("a"), pod("b")])
        .config(paused())
        .lock(held("outsider", 3, "a"))
        .switchover("b");
    let plan = scene.clone().plan();
    assert!(
        plan.status.last_switchover.is_none(),
        "decided while paused: {:?}",
        plan.status.last_switchover
    );
    assert_request_stays(&plan);
    let resumed = scene.config(config()).plan();
    assert!(
        resumed.status.last_switchover.is_some(),
        "decided once resumed: {resumed:#?}"
    );
}
