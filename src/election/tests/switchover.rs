//! Planned moves: switchover requests (`elector.dev/switchover-to`), the handover drain, and
//! failback to a higher priority. Every move keeps rule 1's order and uses no lock-delay.

use super::support::*;
use crate::election::config::ElectionConfig;
use crate::election::observe::{SwitchoverOutcome, SwitchoverRecord};
use crate::election::plan::{Action, EventReason};

fn last(world: &World) -> SwitchoverRecord {
    world
        .scene
        .recorded
        .last_switchover
        .clone()
        .expect("the status records the switchover")
}

/// The actions of every plan so far.
fn all_actions(world: &World) -> Vec<Action> {
    world
        .history
        .iter()
        .flat_map(|p| p.actions.clone())
        .collect()
}

#[test]
fn a_switchover_to_a_named_pod_moves_leadership_there_and_clears_the_request() {
    let mut world = World::new(Scene::elected("a", &["b", "c"], 5).switchover("b"));
    let first = world.step();
    let record = |r: &Action| matches!(r, Action::RecordSwitchover { record, .. } if record.from.as_deref() == Some("a"));
    assert!(
        record(&first.actions[0]),
        "the record is written first: {first:#?}"
    );
    assert_eq!(
        steps(&first)[1..],
        [follower("a"), release("s1"), destroy("s1"), create("b")],
        "demote, release explicitly (no lock-delay), then the new pod's session"
    );
    assert_eq!(
        warnings(&first),
        [],
        "a move asked for is no Warning: {first:#?}"
    );
    assert_eq!(last(&world).outcome, SwitchoverOutcome::InProgress);
    assert_eq!(last(&world).from.as_deref(), Some("a"));
    world.settle();
    assert_eq!(world.leaders(), vec!["b".to_owned()]);
    assert_eq!(world.scene.switchover, None, "the request was removed");
    let record = last(&world);
    assert_eq!(
        (record.outcome, record.leader.as_deref(), record.to.as_str()),
        (SwitchoverOutcome::Completed, Some("b"), "b")
    );
    assert_eq!(record.requested_at, t(100));
    assert_eq!(record.completed_at, Some(t(100)));
    assert_eq!(world.scene.recorded.transitions, 1);
    let completed: Vec<_> = world
        .history
        .iter()
        .flat_map(events)
        .filter(|(r, _)| *r == EventReason::SwitchoverCompleted)
        .collect();
    assert_eq!(
        completed,
        vec![(EventReason::SwitchoverCompleted, Some("b".into()))]
    );
}

#[test]
fn a_switchover_to_any_pod_picks_the_best_other_one_once() {
    let scene = Scene::elected("a", &["b", "c"], 5)
        .with_pod(pod("c").follower().priority(Some(3)))
        .switchover("*");
    let mut world = World::new(scene);
    world.settle();
    assert_eq!(world.leaders(), vec!["c".to_owned()]);
    assert_eq!(last(&world).outcome, SwitchoverOutcome::Completed);
    assert_eq!(last(&world).leader.as_deref(), Some("c"));
    let sessions = all_actions(&world)
        .iter()
        .filter(|a| matches!(a, Action::CreateSession { .. }))
        .count();
    assert_eq!(sessions, 1, "exactly one move, no bounce back");
}

#[test]
fn a_switchover_that_cannot_be_honoured_is_refused_and_nothing_moves() {
    for (request, reason) in [
        ("nope", "pod nope is not a candidate of this election"),
        ("b", "pod b cannot lead: NotReady"),
        ("c", "pod c cannot lead: NeverLeader"),
    ] {
        let scene = Scene::elected("a", &["b", "c"], 5)
            .with_pod(pod("b").follower().not_ready_since(50))
            .with_pod(pod("c").follower().priority(Some(-1)))
            .switchover(request);
        let plan = scene.plan();
        assert_eq!(steps(&plan), decide(&plan, request), "{request}: {plan:#?}");
        assert_eq!(events(&plan), vec![(EventReason::SwitchoverRefused, None)]);
        let record = plan.status.last_switchover.expect("recorded");
        assert_eq!(record.outcome, SwitchoverOutcome::Refused);
        assert_eq!(record.message, reason);
        assert_eq!(plan.status.leader.map(|l| l.pod).as_deref(), Some("a"));
    }
    let alone = Scene::elected("a", &[], 5).switchover("*").plan();
    assert_eq!(steps(&alone), decide(&alone, "*"));
    assert_eq!(
        alone.status.last_switchover.map(|r| r.message).as_deref(),
        Some("no pod other than a is eligible")
    );
}

#[test]
fn a_switchover_to_the_leader_completes_without_a_move() {
    let plan = Scene::elected("a", &["b"], 5).switchover("a").plan();
    assert_eq!(steps(&plan), decide(&plan, "a"));
    let record = plan.status.last_switchover.expect("recorded");
    assert_eq!(record.outcome, SwitchoverOutcome::Completed);
}

#[test]
fn with_a_drain_time_the_leader_is_told_first_and_the_move_waits_for_it() {
    let config = ElectionConfig {
        drain: secs(30),
        ..config()
    };
    let mut world = World::new(
        Scene::elected("a", &["b"], 5)
            .config(config)
            .switchover("b"),
    );
    let first = world.step();
    assert_eq!(
        steps(&first)[1..],
        [Action::AnnotateHandover {
            pod: "a".into(),
            uid: uid("a"),
            deadline: t(130),
        }]
    );
    assert_eq!(first.requeue_after, Some(secs(30)));
    assert_eq!(
        world.leaders(),
        vec!["a".to_owned()],
        "a leads while it drains"
    );
    let waiting = world.step();
    assert!(steps(&waiting).is_empty(), "{waiting:#?}");
    world.edit(|s| s.now(t(130)));
    world.settle();
    assert_eq!(world.leaders(), vec!["b".to_owned()]);
    assert_eq!(
        world.pod("a").handover,
        None,
        "the follower label removed it"
    );
}

#[test]
fn an_application_may_end_the_drain_early() {
    let config = ElectionConfig {
        drain: secs(30),
        ..config()
    };
    let scene = Scene::elected("a", &["b"], 5)
        .config(config)
        .switchover("b")
        .with_pod({
            let mut a = pod("a").leader(5, t(0));
            a.handover = Some("done".into());
            a
        });
    let plan = scene.plan();
    assert_eq!(steps(&plan)[1..3], [follower("a"), release("s1")]);
}

#[test]
fn a_withdrawn_move_clears_the_handover_and_the_leader_stays() {
    let scene = Scene::elected("a", &["b"], 5).with_pod({
        let mut a = pod("a").leader(5, t(0));
        a.handover = Some(t(130).to_string());
        a
    });
    let plan = scene.plan();
    assert_eq!(
        steps(&plan),
        vec![Action::ClearHandover {
            pod: "a".into(),
            uid: uid("a"),
        }]
    );
}

#[test]
fn failback_moves_to_a_higher_priority_once_the_interval_has_passed() {
    let failback = ElectionConfig {
        failback: Some(secs(60)),
        ..config()
    };
    let scene = Scene::elected("a", &["b"], 5)
        .with_pod(pod("b").follower().priority(Some(10)))
        .config(failback)
        .now(t(30));
    let early = scene.plan();
    assert!(steps(&early).is_empty(), "{early:#?}");
    assert_eq!(early.requeue_after, Some(secs(30)));
    let mut world = World::new(scene.now(t(60)));
    let first = world.step();
    assert_eq!(steps(&first)[..2], [follower("a"), release("s1")]);
    assert_eq!(
        events(&first).first(),
        Some(&(EventReason::Failback, Some("b".into())))
    );
    assert_eq!(warnings(&first), [], "a failback is planned: {first:#?}");
    world.settle();
    assert_eq!(world.leaders(), vec!["b".to_owned()]);
    let without = Scene::elected("a", &["b"], 5)
        .with_pod(pod("b").follower().priority(Some(10)))
        .now(t(1000))
        .plan();
    assert!(
        steps(&without).is_empty(),
        "failback is off by default: a leader keeps leading while eligible"
    );
}

#[test]
fn a_lost_status_write_does_not_move_a_star_switchover_twice() {
    // The status written at the end of each reconcile is lost; only the write-ahead record
    // of the move survives. The `*` request must still complete with one move.
    let mut world = World::new(Scene::elected("a", &["b"], 5).switchover("*"));
    for _ in 0..10 {
        let persisted = world.scene.recorded.clone();
        let plan = world.step();
        let written = world.scene.recorded.last_switchover.clone();
        world.scene.recorded = persisted;
        if plan
            .actions
            .iter()
            .any(|a| matches!(a, Action::RecordSwitchover { .. }))
        {
            world.scene.recorded.last_switchover = written;
        }
    }
    assert_eq!(world.leaders(), vec!["b".to_owned()]);
    assert_eq!(world.scene.switchover, None);
    let sessions = all_actions(&world)
        .iter()
        .filter(|a| matches!(a, Action::CreateSession { .. }))
        .count();
    assert_eq!(sessions, 1, "one move: {:#?}", world.history);
}

#[test]
fn a_switchover_to_any_pod_asked_while_nobody_leads_completes_with_the_first_leader() {
    let mut world = World::new(Scene::new(vec![pod("a"), pod("b").created(10)]).switchover("*"));
    world.settle();
    assert_eq!(world.leaders().len(), 1);
    let record = last(&world);
    assert_eq!(record.outcome, SwitchoverOutcome::Completed);
    assert_eq!(record.from, None);
    let sessions = all_actions(&world)
        .iter()
        .filter(|a| matches!(a, Action::CreateSession { .. }))
        .count();
    assert_eq!(sessions, 1, "the first leader is not moved again");
}
