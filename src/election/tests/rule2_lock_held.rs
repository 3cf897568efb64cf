//! Rule 2: a labelled leader holds the Consul lock. A key held elsewhere, a session Consul
//! invalidated, a deleted key or (with `Fence`) a session Consul no longer confirms all take
//! the label away; `KeepLeader` keeps it while Consul is silent; while Consul does not answer
//! at all nothing is changed in Consul and no leader is made.

use super::support::*;
use crate::election::config::{Behavior, ElectionConfig, UnavailablePolicy};
use crate::election::observe::LockView;
use crate::election::plan::{Action, EventReason, Phase};
use crate::election::planner::{CONSUL_AVAILABLE, LEADER_ELECTED};

fn keep_leader() -> ElectionConfig {
    ElectionConfig {
        on_consul_unavailable: UnavailablePolicy::KeepLeader,
        ..config()
    }
}

#[test]
fn a_key_held_by_a_foreign_session_makes_everyone_a_follower() {
    let scene = Scene::elected("a", &["b"], 5).lock(held("foreign", 6, "b"));
    let plan = scene.plan();
    assert_eq!(steps(&plan), vec![follower("a"), destroy("s1")]);
    assert_eq!(
        events(&plan),
        vec![(EventReason::LeaderLost, Some("a".into()))]
    );
    assert_eq!(plan.status.phase, Phase::Pending);
    let elected = condition(&plan.status, LEADER_ELECTED);
    assert!(!elected.status);
    assert_eq!(elected.reason, "LockHeldElsewhere");
    assert_eq!(
        elected.message,
        "the key is held by session foreign for pod b, which the operator does not own"
    );
    assert!(condition(&plan.status, CONSUL_AVAILABLE).status);
    // The last leader stays on record (for transitions and stickiness).
    assert_eq!(
        plan.status.leader.as_ref().map(|l| l.pod.as_str()),
        Some("a")
    );
    assert_eq!(plan.status.fencing_token, Some(5));
    assert_eq!(plan.status.transitions, 0);
}

#[test]
fn another_clusters_holder_is_named_and_left_alone() {
    // Another cluster's operator holds the same key for a pod of the same name: nothing is
    // released or destroyed but our own session, and the status names the holder.
    let other = LockView::Held {
        session: "west-session".into(),
        lock_index: 9,
        value: Some(
            serde_json::json!({"pod": "a", "uid": "uid-in-west", "cluster": "west"})
                .to_string()
                .into_bytes(),
        ),
    };
    let scene = Scene::elected("a", &["b"], 5).lock(other);
    let plan = scene.plan();
    assert_eq!(steps(&plan), vec![follower("a"), destroy("s1")]);
    assert!(
        consul_steps(&plan)
            .iter()
            .all(|a| !matches!(a, Action::Release { .. })),
        "{plan:#?}"
    );
    assert_eq!(plan.status.phase, Phase::Pending);
    let elected = condition(&plan.status, LEADER_ELECTED);
    assert_eq!(elected.reason, "LockHeldElsewhere");
    assert_eq!(
        elected.message,
        "the key is held by session west-session for pod a of cluster west, \
         which the operator does not own"
    );
}

#[test]
fn a_foreign_holder_without_a_readable_value_is_named_by_its_session() {
    let bare = LockView::Held {
        session: "app".into(),
        lock_index: 3,
        value: Some(b"not json".to_vec()),
    };
    let scene = Scene::new(vec![pod("a").follower()]).lock(bare);
    let plan = scene.plan();
    assert!(plan.actions.is_empty(), "{plan:#?}");
    assert_eq!(
        condition(&plan.status, LEADER_ELECTED).message,
        "the key is held by session app, which the operator does not own"
    );
}

#[test]
fn a_foreign_holder_with_our_session_lost_forgets_it() {
    let scene = Scene::elected("a", &["b"], 5)
        .lock(held("foreign", 6, "b"))
        .session(Some(session("s1", "a").lost()));
    let plan = scene.plan();
    assert_eq!(steps(&plan), vec![follower("a"), Action::ForgetSession]);
    assert_eq!(
        events(&plan),
        vec![
            (EventReason::LeaderLost, Some("a".into())),
            (EventReason::SessionLost, Some("a".into()))
        ]
    );
}

#[test]
fn a_foreign_holder_and_no_session_of_ours_is_waited_out() {
    let scene =
        Scene::new(vec![pod("a").follower(), pod("b").follower()]).lock(held("foreign", 3, "a"));
    let plan = scene.plan();
    assert!(plan.actions.is_empty(), "{plan:#?}");
    assert_eq!(plan.status.phase, Phase::Pending);
    assert_eq!(plan.status.leader, None);
}

#[test]
fn a_session_consul_invalidated_is_replaced_after_the_lock_delay_by_the_same_pod() {
    // Consul invalidated s1 (TTL expiry): the key is unlocked with a lock-delay.
    let scene = Scene::elected("a", &["b"], 5)
        .with_pod(pod("b").follower().created(50))
        .lock(free(5))
        .session(Some(session("s1", "a").lost()))
        .lock_delay_until(Some(t(110)));
    let mut world = World::new(scene);

    let p1 = world.step();
    assert_eq!(
        steps(&p1),
        vec![follower("a"), Action::ForgetSession, create("a")]
    );
    assert_eq!(
        events(&p1),
        vec![
            (EventReason::LeaderLost, Some("a".into())),
            (EventReason::SessionLost, Some("a".into()))
        ]
    );
    assert_eq!(p1.status.phase, Phase::Electing);

    // The new session exists, but Consul's lock-delay would refuse the acquisition.
    let p2 = world.step();
    assert!(p2.actions.is_empty(), "{p2:#?}");
    assert_eq!(p2.requeue_after, Some(secs(10)));
    assert_eq!(condition(&p2.status, LEADER_ELECTED).reason, "LockDelay");

    world.edit(|s| s.now(t(104)));
    let p3 = world.step();
    assert!(p3.actions.is_empty());
    assert_eq!(p3.requeue_after, Some(secs(6)));

    world.edit(|s| s.now(t(110)));
    let p4 = world.step();
    assert_eq!(steps(&p4), vec![acquire("s2", "a")]);
    let p5 = world.step();
    assert_eq!(steps(&p5), vec![label_leader("a", 6, t(0))]);
    assert_eq!(
        events(&p5),
        vec![(EventReason::LeaderElected, Some("a".into()))]
    );
    assert_eq!(p5.status.transitions, 0, "the same pod leads again");
    assert_eq!(p5.status.fencing_token, Some(6));
    assert!(world.step().actions.is_empty());
}

#[test]
fn a_deleted_key_takes_the_label_before_the_key_is_acquired_again() {
    let scene = Scene::elected("a", &["b"], 5).lock(LockView::Absent);
    let plan = scene.plan();
    assert_eq!(
        steps(&plan),
        vec![follower("a"), confirm("s1"), acquire("s1", "a")]
    );
    assert_demotions_first(&scene, &plan);
}

#[test]
fn behavior_delete_invalidation_is_followed_like_a_release() {
    let config = ElectionConfig {
        session: crate::election::config::SessionConfig {
            behavior: Behavior::Delete,
            ..config().session
        },
        ..config()
    };
    let scene = Scene::elected("a", &["b"], 5)
        .config(config)
        .lock(LockView::Absent)
        .session(Some(session("s1", "a").lost()))
        .lock_delay_until(Some(t(115)));
    let plan = scene.plan();
    assert_eq!(
        steps(&plan),
        vec![follower("a"), Action::ForgetSession, create("a")]
    );
}

#[test]
fn the_leader_label_is_only_planned_for_the_holder_of_the_key() {
    // Our session exists but does not hold the key yet: acquire, do not label.
    let free_key = Scene::new(vec![pod("a").follower()])
        .lock(free(2))
        .session(Some(session("s1", "a")));
    assert_eq!(steps(&free_key.plan()), vec![acquire("s1", "a")]);

    // The key is held by a session that is not the one the operator has.
    let other = free_key.clone().lock(held("s0", 3, "a"));
    let plan = other.plan();
    assert!(
        !plan
            .actions
            .iter()
            .any(|a| matches!(a, Action::LabelLeader { .. })),
        "{plan:#?}"
    );
    assert_eq!(steps(&plan), vec![destroy("s1")]);
}

#[test]
fn an_unconfirmed_session_with_fence_loses_the_label() {
    for lock in [held("s1", 5, "a"), LockView::Unknown] {
        let scene = Scene::elected("a", &["b"], 5)
            .lock(lock.clone())
            .session(Some(session("s1", "a").unconfirmed_since(80)));
        let plan = scene.plan();
        assert_eq!(steps(&plan), vec![follower("a")], "lock {lock:?}");
        assert_eq!(
            events(&plan),
            vec![(EventReason::ConsulUnavailable, Some("a".into()))]
        );
        assert!(consul_steps(&plan).is_empty());
        assert_eq!(plan.status.phase, Phase::Fenced);
        let elected = condition(&plan.status, LEADER_ELECTED);
        assert!(!elected.status);
        assert_eq!(elected.reason, "Fenced");
        assert!(!condition(&plan.status, CONSUL_AVAILABLE).status);
        assert_eq!(plan.status.fencing_token, Some(5));
        assert_eq!(plan.status.transitions, 0);

        // Once fenced, nothing more happens while the session stays unconfirmed.
        let fenced = scene.with_pod(pod("a").follower());
        let plan = fenced.plan();
        assert!(plan.actions.is_empty(), "{plan:#?}");
        assert_eq!(plan.status.phase, Phase::Fenced);
    }
}

#[test]
fn an_unconfirmed_session_with_keep_leader_keeps_the_label() {
    for lock in [held("s1", 5, "a"), LockView::Unknown] {
        let scene = Scene::elected("a", &["b"], 5)
            .config(keep_leader())
            .lock(lock.clone())
            .session(Some(session("s1", "a").unconfirmed_since(80)));
        let plan = scene.plan();
        assert!(plan.actions.is_empty(), "lock {lock:?}: {plan:#?}");
        assert_eq!(plan.status.phase, Phase::Elected);
        let elected = condition(&plan.status, LEADER_ELECTED);
        assert!(elected.status);
        assert_eq!(elected.reason, "KeptWhileConsulUnavailable");
        assert!(!condition(&plan.status, CONSUL_AVAILABLE).status);
        assert_eq!(
            plan.status.leader.as_ref().map(|l| l.pod.as_str()),
            Some("a")
        );
    }
}

#[test]
fn a_fenced_leader_is_labelled_again_when_consul_confirms_the_session() {
    let mut world = World::new(
        Scene::elected("a", &["b"], 5).session(Some(session("s1", "a").unconfirmed_since(80))),
    );
    let fence = world.step();
    assert_eq!(fence.status.phase, Phase::Fenced);
    assert!(world.leaders().is_empty());
    // Consul answers again: the same session still holds the key.
    world.edit(|s| s.session(Some(session("s1", "a"))).now(t(120)));
    let plans = world.settle();
    assert!(!plans.is_empty());
    assert_eq!(world.leaders(), vec!["a".to_owned()]);
    let last = &plans.last().expect("plans").status;
    assert_eq!(last.phase, Phase::Elected);
    assert_eq!(
        last.transitions, 0,
        "the same pod leads again: no transition"
    );
    assert!(last.fencing_token >= Some(5));
}

#[test]
fn consul_unknown_changes_nothing_in_consul_and_no_leader() {
    // Adopted session, status agreeing, KV unreadable.
    let scene = Scene::elected("a", &["b"], 5).lock(LockView::Unknown);
    let plan = scene.plan();
    assert!(plan.actions.is_empty(), "{plan:#?}");
    assert_eq!(plan.status.phase, Phase::Elected);
    assert!(!condition(&plan.status, CONSUL_AVAILABLE).status);

    // No session at all: the labels stay as they are, only new pods become followers.
    let scene = Scene::elected("a", &["b"], 5)
        .lock(LockView::Unknown)
        .session(None)
        .with_pod(pod("c"));
    let plan = scene.plan();
    assert_eq!(steps(&plan), vec![follower("c")]);
    assert!(consul_steps(&plan).is_empty());
    assert_eq!(plan.status.phase, Phase::Electing);
    assert_eq!(
        condition(&plan.status, LEADER_ELECTED).reason,
        "ConsulUnavailable"
    );

    // Nobody leads: nobody is made leader.
    let scene = Scene::new(vec![pod("a").follower(), pod("b").follower()]).lock(LockView::Unknown);
    let plan = scene.plan();
    assert!(plan.actions.is_empty(), "{plan:#?}");
}

#[test]
fn consul_unknown_never_labels_a_leader() {
    // `a` was fenced (or its leader label failed) and the status still names its session;
    // Consul's KV cannot be read, so the lock cannot be confirmed: no leader label, and no
    // fencing token taken from the status (the key may have been deleted meanwhile).
    let scene = Scene::elected("a", &["b"], 5)
        .with_pod(pod("a").follower())
        .lock(LockView::Unknown);
    let plan = scene.plan();
    assert!(
        !plan
            .actions
            .iter()
            .any(|a| matches!(a, Action::LabelLeader { .. })),
        "{plan:#?}"
    );
    assert!(consul_steps(&plan).is_empty());
    assert!(!condition(&plan.status, LEADER_ELECTED).status);

    // Same with a label whose token differs from the recorded one.
    let scene = Scene::elected("a", &["b"], 5)
        .with_pod(pod("a").leader(7, t(0)))
        .lock(LockView::Unknown);
    let plan = scene.plan();
    assert!(
        !plan
            .actions
            .iter()
            .any(|a| matches!(a, Action::LabelLeader { .. })),
        "{plan:#?}"
    );
}

#[test]
fn an_unconfirmed_session_fences_even_a_leader_the_status_does_not_name() {
    // Regression: the status lags behind (its write failed after `b` was labelled), so it
    // names neither `b` nor the session; Consul does not answer and the session has gone a
    // whole TTL unconfirmed. With Fence no leader label may stay.
    let scene = Scene::new(vec![pod("a").follower(), pod("b").leader(6, t(50))])
        .lock(LockView::Unknown)
        .session(Some(session("s2", "b").unconfirmed_since(70)))
        .recorded(recorded("a", "s1", 5, t(0), 0));
    let plan = scene.plan();
    assert_eq!(steps(&plan), vec![follower("b")]);
    assert_eq!(
        events(&plan),
        vec![(EventReason::ConsulUnavailable, Some("b".into()))]
    );
    assert!(consul_steps(&plan).is_empty());
    assert_eq!(plan.status.phase, Phase::Fenced);

    // KeepLeader keeps it.
    let plan = scene.config(keep_leader()).plan();
    assert!(plan.actions.is_empty(), "{plan:#?}");

    // A session still confirmed (renewed within its TTL) keeps it too.
    let scene = Scene::new(vec![pod("a").follower(), pod("b").leader(6, t(50))])
        .lock(LockView::Unknown)
        .session(Some(session("s2", "b")))
        .recorded(recorded("a", "s1", 5, t(0), 0));
    assert!(scene.plan().actions.is_empty());
}

/// A key answering errors while the session renews: the renewals prove the session, not the
/// lock (the key may have been taken or deleted meanwhile). The label stays for at most a TTL
/// after the key was last read, and the next look is planned for that moment.
#[test]
fn a_key_unread_for_a_whole_ttl_fences_however_well_the_session_renews() {
    let unreadable = Scene::elected("a", &["b"], 5).lock(LockView::Unknown);

    let fresh = unreadable.clone().lock_confirmed_at(t(95)).plan();
    assert!(steps(&fresh).is_empty(), "{:?}", fresh.actions);
    assert_eq!(fresh.status.phase, Phase::Elected);
    assert_eq!(fresh.requeue_after, Some(secs(10)));

    let stale = unreadable.clone().lock_confirmed_at(t(85)).plan();
    assert_eq!(steps(&stale), vec![follower("a")]);
    assert_eq!(stale.status.phase, Phase::Fenced);
    assert_eq!(
        events(&stale),
        vec![(EventReason::ConsulUnavailable, Some("a".into()))]
    );
    assert!(!condition(&stale.status, CONSUL_AVAILABLE).status);

    // KeepLeader keeps it, as for an unconfirmed session.
    let kept = unreadable
        .config(keep_leader())
        .lock_confirmed_at(t(85))
        .plan();
    assert!(steps(&kept).is_empty(), "{:?}", kept.actions);
    assert_eq!(kept.status.phase, Phase::Elected);
}

/// Restarted during an outage: no session could be adopted, the key cannot be read. The
/// Fence clock runs from the last confirmation this process knows (its start), so the label
/// goes one TTL later instead of staying for the whole outage.
#[test]
fn after_a_restart_in_an_outage_the_label_goes_a_ttl_after_start() {
    let restarted = Scene::elected("a", &["b"], 5)
        .session(None)
        .lock(LockView::Unknown);

    let early = restarted.clone().lock_confirmed_at(t(99)).plan();
    assert!(steps(&early).is_empty(), "{:?}", early.actions);
    assert_eq!(early.requeue_after, Some(secs(14)));

    let late = restarted.clone().lock_confirmed_at(t(85)).plan();
    assert_eq!(steps(&late), vec![follower("a")]);
    assert_eq!(late.status.phase, Phase::Fenced);

    let kept = restarted
        .config(keep_leader())
        .lock_confirmed_at(t(85))
        .plan();
    assert!(steps(&kept).is_empty(), "{:?}", kept.actions);
}

/// Consul said the session is gone (404) and the key cannot be read: the lock is known lost,
/// so the label goes at once, whatever `onConsulUnavailable` says.
#[test]
fn a_known_lost_session_fences_at_once_even_while_the_key_is_unreadable() {
    for config in [config(), keep_leader()] {
        let plan = Scene::elected("a", &["b"], 5)
            .config(config)
            .session(Some(session("s1", "a").lost()))
            .lock(LockView::Unknown)
            .plan();
        assert_eq!(steps(&plan), vec![follower("a"), Action::ForgetSession]);
        assert_eq!(plan.status.phase, Phase::Fenced);
    }
}

/// The key's cached view still says held by the operator's session, but no answer covering
/// the key has arrived for a whole TTL (a blocking query stalled in the network while the
/// session renews): the view may hide a deletion or a takeover, so it confirms nothing.
#[test]
fn a_held_view_no_answer_confirmed_for_a_ttl_fences() {
    let held_view = Scene::elected("a", &["b"], 5);

    // Confirmed recently: nothing to do, and no extra look while confirmations are prompt.
    let fresh = held_view.clone().lock_confirmed_at(t(97)).plan();
    assert!(fresh.actions.is_empty(), "{:?}", fresh.actions);
    assert_eq!(fresh.requeue_after, None);

    // Confirmed more than TTL/2 ago: still leads, and looks again when the TTL runs out.
    let lagging = held_view.clone().lock_confirmed_at(t(91)).plan();
    assert!(lagging.actions.is_empty(), "{:?}", lagging.actions);
    assert_eq!(lagging.status.phase, Phase::Elected);
    assert_eq!(lagging.requeue_after, Some(secs(6)));

    // A whole TTL (15 s) without a confirmation: Fence takes the label away.
    let stale = held_view.clone().lock_confirmed_at(t(85)).plan();
    assert_eq!(steps(&stale), vec![follower("a")]);
    assert!(
        consul_steps(&stale).is_empty(),
        "nothing is written to Consul"
    );
    assert_eq!(stale.status.phase, Phase::Fenced);
    assert_eq!(
        events(&stale),
        vec![(EventReason::ConsulUnavailable, Some("a".into()))]
    );
    assert!(!condition(&stale.status, CONSUL_AVAILABLE).status);

    // KeepLeader keeps it, without extra looks.
    let kept = held_view
        .clone()
        .config(keep_leader())
        .lock_confirmed_at(t(85))
        .plan();
    assert!(steps(&kept).is_empty(), "{:?}", kept.actions);
    assert_eq!(kept.status.phase, Phase::Elected);
    let lagging_kept = held_view
        .config(keep_leader())
        .lock_confirmed_at(t(91))
        .plan();
    assert_eq!(lagging_kept.requeue_after, None);
}

/// A fenced leader whose stale view still says held is not labelled again until an answer
/// confirms the key; then, as after any fence, it leads again with a higher token (rule 6:
/// once its label is gone, an equal LockIndex may name a re-created key).
#[test]
fn a_fenced_stale_view_waits_for_a_confirming_answer() {
    let fenced = Scene::new(vec![pod("a").follower(), pod("b").follower()])
        .lock(held("s1", 5, "a"))
        .session(Some(session("s1", "a")))
        .recorded(recorded("a", "s1", 5, t(0), 0));
    let still_stale = fenced.clone().lock_confirmed_at(t(80)).plan();
    assert!(steps(&still_stale).is_empty(), "{:?}", still_stale.actions);
    assert_eq!(still_stale.status.phase, Phase::Fenced);

    let confirmed = fenced.lock_confirmed_at(t(100)).plan();
    assert_eq!(
        steps(&confirmed),
        vec![release("s1"), confirm("s1"), acquire("s1", "a")]
    );
}

/// Rule 8: no decision reads a wall clock. Fifteen seconds after the key was last read, in a
/// Consul outage, the wall clock was stepped back a minute (an NTP correction): the label goes
/// as it would have, a TTL after the last read.
#[test]
fn a_wall_clock_stepped_back_does_not_delay_the_fence() {
    let stepped = Scene::elected("a", &["b"], 5)
        .lock(LockView::Unknown)
        .lock_confirmed_at(t(85))
        .wall(t(40))
        .plan();
    assert_eq!(steps(&stepped), vec![follower("a")]);
    assert_eq!(stepped.status.phase, Phase::Fenced);
}
