//! The plan/act loop of a reconcile ([`PlanLoop`]): when it plans again, what an outcome
//! changes for the next plan, and when it stops. The controller and the model both drive it.

use super::support::*;
use crate::election::observe::Recorded;
use crate::election::plan::Action;
use crate::election::plan_loop::{Next, Outcome, PlanLoop};

/// A loop over `scene`'s status and switchover request.
fn plans_of(scene: &Scene, max_plans: usize) -> PlanLoop {
    PlanLoop::new(scene.recorded.clone(), scene.switchover.clone(), max_plans)
}

/// Hands out every action of the current plan, reporting each as done; returns them.
fn act_all(plans: &mut PlanLoop) -> Vec<Action> {
    let mut done = Vec::new();
    while let Next::Act(action) = plans.poll() {
        done.push(action);
        plans.handle(Outcome::Done);
    }
    done
}

#[test]
fn a_plan_without_actions_ends_the_loop_complete() {
    let scene = Scene::elected("a", &["b"], 5);
    let mut plans = plans_of(&scene, 16);
    assert_eq!(plans.poll(), Next::Observe);
    assert!(
        plans
            .plan(&scene.world(), &mut scene.memory())
            .actions
            .is_empty()
    );
    assert_eq!(plans.poll(), Next::Done);
    assert!(!plans.unfinished());
}

#[test]
fn actions_are_handed_out_one_at_a_time_in_order_then_the_world_is_observed_again() {
    let scene = Scene::new(vec![pod("a").created(0), pod("b").created(10)]);
    let mut plans = plans_of(&scene, 16);
    assert_eq!(plans.poll(), Next::Observe);
    let planned = plans
        .plan(&scene.world(), &mut scene.memory())
        .actions
        .clone();
    assert_eq!(planned, vec![follower("a"), create("b")]);
    assert_eq!(plans.poll(), Next::Act(follower("a")));
    // No second action before the first one's outcome.
    assert_eq!(plans.poll(), Next::Done);
    plans.handle(Outcome::Done);
    assert_eq!(plans.poll(), Next::Act(create("b")));
    plans.handle(Outcome::Done);
    assert_eq!(plans.poll(), Next::Observe);
}

#[test]
fn a_world_that_never_settles_ends_the_loop_unfinished_after_its_plans() {
    // Nothing the loop hands out changes this world: every plan repeats the first.
    let scene = Scene::new(vec![pod("a").created(0), pod("b").created(10)]);
    let mut plans = plans_of(&scene, 3);
    let mut made = 0;
    while plans.poll() == Next::Observe {
        plans.plan(&scene.world(), &mut scene.memory());
        made += 1;
        act_all(&mut plans);
    }
    assert_eq!(made, 3);
    assert_eq!(plans.poll(), Next::Done);
    assert!(plans.unfinished());
}

#[test]
fn a_failed_action_ends_the_loop_and_voids_the_rest_of_its_plan() {
    let scene = Scene::new(vec![pod("a").created(0), pod("b").created(10)]);
    let mut plans = plans_of(&scene, 16);
    plans.poll();
    plans.plan(&scene.world(), &mut scene.memory());
    assert_eq!(plans.poll(), Next::Act(follower("a")));
    plans.handle(Outcome::Failed { refused: false });
    assert_eq!(plans.poll(), Next::Done);
    assert!(!plans.unfinished());
}

#[test]
fn a_refusal_is_planned_once_more_for_the_status_and_nothing_of_that_plan_runs() {
    let scene = Scene::new(vec![pod("a").created(0), pod("b").created(10)]);
    let mut plans = plans_of(&scene, 16);
    plans.poll();
    plans.plan(&scene.world(), &mut scene.memory());
    plans.poll();
    plans.handle(Outcome::Failed { refused: true });
    assert_eq!(plans.poll(), Next::Observe);
    assert!(
        !plans
            .plan(&scene.world(), &mut scene.memory())
            .actions
            .is_empty()
    );
    assert_eq!(plans.poll(), Next::Done);
}

#[test]
fn a_lost_session_voids_the_rest_of_the_plan_and_the_world_is_observed_again() {
    let scene = Scene::new(vec![pod("a").created(0), pod("b").created(10)]);
    let mut plans = plans_of(&scene, 16);
    plans.poll();
    plans.plan(&scene.world(), &mut scene.memory());
    plans.poll();
    plans.handle(Outcome::SessionGone);
    assert_eq!(plans.poll(), Next::Observe);
}

#[test]
fn an_outcome_owed_to_no_action_changes_nothing() {
    let scene = Scene::elected("a", &["b"], 5);
    let mut plans = plans_of(&scene, 16);
    plans.poll();
    plans.plan(&scene.world(), &mut scene.memory());
    let written = Recorded {
        fencing_token: Some(9),
        ..scene.recorded.clone()
    };
    plans.handle(Outcome::StatusWritten(Box::new(written)));
    plans.poll();
    plans.plan(&scene.world(), &mut scene.memory());
    assert_eq!(plans.recorded().fencing_token, Some(5));
}

#[test]
fn after_a_status_write_the_next_plan_decides_from_it_continuing_the_request_in_progress() {
    // A switchover to `b` starts at t(100): its record says since when and from whom.
    let scene = Scene::elected("a", &["b"], 5).switchover("b");
    let mut plans = plans_of(&scene, 16);
    plans.poll();
    let started = plans
        .plan(&scene.world(), &mut scene.memory())
        .status
        .last_switchover
        .clone();
    let started = started.expect("the request is recorded");
    assert_eq!(
        (started.requested_at, started.from.as_deref()),
        (t(100), Some("a"))
    );
    // The status is written (with a newer token and transitions) while the move goes on.
    let written = Recorded {
        fencing_token: Some(9),
        transitions: 4,
        ..scene.recorded.clone()
    };
    let Next::Act(_) = plans.poll() else {
        panic!("the move has actions");
    };
    plans.handle(Outcome::StatusWritten(Box::new(written)));
    act_all(&mut plans);
    // Five seconds later, the next plan decides from the written status and the same request.
    let later = scene.clone().now(t(105));
    assert_eq!(plans.poll(), Next::Observe);
    let next = plans
        .plan(&later.world(), &mut later.memory())
        .status
        .last_switchover
        .clone();
    assert_eq!(plans.recorded().fencing_token, Some(9));
    assert_eq!(plans.recorded().transitions, 4);
    let next = next.expect("still recorded");
    assert_eq!(
        (next.requested_at, next.from.as_deref()),
        (t(100), Some("a")),
        "the request in progress was taken for a new one"
    );
}

#[test]
fn a_removed_request_is_not_seen_by_the_next_plans() {
    let scene = Scene::elected("a", &["b"], 5).switchover("nope");
    let mut plans = plans_of(&scene, 16);
    plans.poll();
    let first = plans
        .plan(&scene.world(), &mut scene.memory())
        .actions
        .clone();
    assert!(first.contains(&clear("nope")), "{first:?}");
    while let Next::Act(action) = plans.poll() {
        let cleared = action == clear("nope");
        plans.handle(match cleared {
            true => Outcome::RequestCleared,
            false => Outcome::Done,
        });
    }
    assert_eq!(plans.poll(), Next::Observe);
    let next = plans.plan(&scene.world(), &mut scene.memory());
    assert!(!next.actions.contains(&clear("nope")), "{next:#?}");
}
