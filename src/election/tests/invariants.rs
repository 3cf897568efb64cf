//! The standing invariants: pods, lock and status agree, or the kind of disagreement is named.

use super::support::*;
use crate::election::config::Mode;
use crate::election::invariants::{Disagreement, Snapshot, disagreements};
use crate::election::observe::LockView;

fn check(scene: &Scene) -> Vec<Disagreement> {
    check_as(scene, true)
}

/// [`check`] for an election that cannot plan (refused, in conflict).
fn check_standing(scene: &Scene) -> Vec<Disagreement> {
    check_as(scene, false)
}

fn check_as(scene: &Scene, acting: bool) -> Vec<Disagreement> {
    disagreements(&Snapshot {
        mode: scene.config.mode,
        leader_value: &scene.config.labels.leader,
        pods: &scene.pods,
        lock: &scene.lock,
        session: scene.session.as_ref(),
        recorded: &scene.recorded,
        owner: &scene.owner,
        acting,
    })
}

#[test]
fn an_election_that_cannot_plan_is_checked_for_rules_1_and_2_only() {
    let two = Scene::elected("a", &["b"], 5).with_pod(pod("b").leader(5, t(0)));
    assert_eq!(
        check_standing(&two),
        vec![
            Disagreement::TwoLeaderLabels,
            Disagreement::LabelWithoutLock
        ]
    );
    let lost = Scene::elected("a", &["b"], 5).lock(held("foreign", 6, "b"));
    assert_eq!(check_standing(&lost), vec![Disagreement::LabelWithoutLock]);
    // Its status and an unlabelled lock are nobody's promise while it stands back.
    let unlabelled = Scene::elected("a", &["b"], 5).with_pod(pod("a").follower());
    assert!(check_standing(&unlabelled).is_empty());
    let stale = Scene::elected("a", &["b"], 5).recorded(Default::default());
    assert!(check_standing(&stale).is_empty());
    assert_eq!(check(&stale), vec![Disagreement::StaleStatus]);
}

#[test]
fn a_settled_election_agrees() {
    assert!(check(&Scene::elected("a", &["b", "c"], 5)).is_empty());
    assert!(check(&Scene::new(vec![pod("a").follower()])).is_empty());
}

#[test]
fn a_hand_made_second_leader_label_is_two_labels_and_a_label_without_lock() {
    let scene = Scene::elected("a", &["b"], 5).with_pod(pod("b").leader(5, t(0)));
    assert_eq!(
        check(&scene),
        vec![
            Disagreement::TwoLeaderLabels,
            Disagreement::LabelWithoutLock
        ]
    );
}

#[test]
fn a_lock_without_its_label_and_a_label_without_its_lock() {
    let unlabelled = Scene::elected("a", &["b"], 5).with_pod(pod("a").follower());
    assert_eq!(check(&unlabelled), vec![Disagreement::LockWithoutLabel]);
    let lost = Scene::elected("a", &["b"], 5).lock(held("foreign", 6, "b"));
    assert_eq!(check(&lost), vec![Disagreement::LabelWithoutLock]);
    let lost = Scene::elected("a", &["b"], 5).session(Some(session("s1", "a").lost()));
    assert_eq!(check(&lost), vec![Disagreement::LabelWithoutLock]);
}

#[test]
fn an_unreadable_key_compares_only_labels_and_status() {
    let scene = Scene::elected("a", &["b"], 5)
        .lock(LockView::Unknown)
        .session(None);
    assert!(check(&scene).is_empty());
}

#[test]
fn an_unconfirmed_session_leaves_the_lock_to_fence_and_keep_leader() {
    let kept =
        Scene::elected("a", &["b"], 5).session(Some(session("s1", "a").unconfirmed_since(90)));
    assert!(check(&kept).is_empty());
    let fenced = kept.with_pod(pod("a").follower());
    assert!(check(&fenced).is_empty());
}

#[test]
fn a_status_naming_another_leader_is_stale() {
    let scene = Scene::elected("a", &["b"], 5).recorded(recorded("b", "s1", 5, t(0), 0));
    assert_eq!(check(&scene), vec![Disagreement::StaleStatus]);
}

#[test]
fn observe_mode_compares_labels_and_status_only() {
    let mut scene = Scene::elected("a", &["b"], 5).lock(held("app-session", 5, "a"));
    scene.config.mode = Mode::Observe;
    scene.session = None;
    assert!(check(&scene).is_empty());
}
