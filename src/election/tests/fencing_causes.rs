//! Which leader labels count as fencing (`consul_elector_fencing_actions_total`): a label
//! taken because the lock was lost (key deleted or released, session invalidated) or could
//! not be confirmed, once per label; a planned move, a key held by another holder (a state
//! of its own, `lock_held_elsewhere`), or a session lost from a pod that carried no label, is
//! not fencing.

use super::support::*;
use crate::election::config::ElectionConfig;
use crate::election::observe::LockView;
use crate::election::plan::{Action, FencingCause, Plan};

/// The fencing causes of the plan's events, with the pod each concerns.
fn fenced(plan: &Plan) -> Vec<(FencingCause, Option<String>)> {
    plan.actions
        .iter()
        .filter_map(|a| match a {
            Action::Emit(e) => e.fenced.map(|cause| (cause, e.pod.clone())),
            _ => None,
        })
        .collect()
}

#[test]
fn a_deleted_or_released_key_is_a_lost_lock_and_a_foreign_holder_is_not_fencing() {
    for lock in [LockView::Absent, free(5)] {
        let plan = Scene::elected("a", &["b"], 5).lock(lock.clone()).plan();
        assert_eq!(
            fenced(&plan),
            vec![(FencingCause::Lost, Some("a".into()))],
            "{lock:?}"
        );
    }
    let foreign = Scene::elected("a", &["b"], 5).lock(held("foreign", 6, "b"));
    assert_eq!(fenced(&foreign.plan()), vec![]);
}

#[test]
fn an_invalidated_session_counts_once_and_only_with_a_label() {
    let labelled = Scene::elected("a", &["b"], 5)
        .lock(free(5))
        .session(Some(session("s1", "a").lost()));
    assert_eq!(
        fenced(&labelled.plan()),
        vec![(FencingCause::Lost, Some("a".into()))]
    );
    // The label already went: the session's loss takes nothing more.
    let unlabelled = labelled.with_pod(pod("a").follower());
    assert_eq!(fenced(&unlabelled.plan()), vec![]);
}

#[test]
fn an_unconfirmed_lock_is_unconfirmed_and_keep_leader_fences_nothing() {
    let scene = Scene::elected("a", &["b"], 5)
        .lock(LockView::Unknown)
        .session(Some(session("s1", "a").unconfirmed_since(80)));
    assert_eq!(
        fenced(&scene.plan()),
        vec![(FencingCause::Unconfirmed, Some("a".into()))]
    );
    let keep = scene.config(ElectionConfig {
        on_consul_unavailable: crate::election::config::UnavailablePolicy::KeepLeader,
        ..config()
    });
    assert_eq!(fenced(&keep.plan()), vec![]);
}

#[test]
fn a_planned_move_is_not_fencing() {
    let switchover = Scene::elected("a", &["b"], 5).switchover("b");
    assert_eq!(fenced(&switchover.plan()), vec![]);
    let deleted = Scene::elected("a", &["b"], 5).with_pod(pod("a").leader(5, t(0)).terminating());
    assert_eq!(fenced(&deleted.plan()), vec![]);
}
