//! The plan/act loop of a reconcile ([`PlanLoop`]): when it plans again, what an answer
//! changes for the next plan and for the election's memory, and when it stops. The controller
//! and the model both drive it.

use super::support::*;
use crate::election::first_look::{KeyRead, Look};
use crate::election::memory::ElectionMemory;
use crate::election::observe::{LockView, Recorded};
use crate::election::plan::Action;
use crate::election::plan_loop::{Answer, Elected, Next, PlanLoop};
use crate::election::refusal::ConsulRefusal;

/// A loop over `scene`'s status and switchover request.
fn plans_of(scene: &Scene, max_plans: usize) -> PlanLoop {
    scene.plan_loop(max_plans)
}

/// Hands out every action of the current plan, reporting each as done; returns them.
fn act_all(plans: &mut PlanLoop, memory: &mut ElectionMemory) -> Vec<Action> {
    let mut done = Vec::new();
    while let Next::Act(action) = plans.poll(memory) {
        done.push(action);
        plans.handle(Answer::Done, memory, mono(t(100)));
    }
    done
}

#[test]
fn a_plan_without_actions_ends_the_loop_complete() {
    let scene = Scene::elected("a", &["b"], 5);
    let mut plans = plans_of(&scene, 16);
    let mut memory = scene.memory();
    assert_eq!(plans.poll(&mut memory), Next::Observe);
    assert!(plans.plan(&scene.world(), &mut memory).actions.is_empty());
    assert_eq!(plans.poll(&mut memory), Next::Done);
    assert!(!plans.unfinished());
}

#[test]
fn actions_are_handed_out_one_at_a_time_in_order_then_the_world_is_observed_again() {
    let scene = Scene::new(vec![pod("a").created(0), pod("b").created(10)]);
    let mut plans = plans_of(&scene, 16);
    let mut memory = scene.memory();
    assert_eq!(plans.poll(&mut memory), Next::Observe);
    let planned = plans.plan(&scene.world(), &mut memory).actions.clone();
    assert_eq!(planned, vec![follower("a"), create("b")]);
    assert_eq!(plans.poll(&mut memory), Next::Act(follower("a")));
    // No second action before the first one's outcome.
    assert_eq!(plans.poll(&mut memory), Next::Done);
    plans.handle(Answer::Done, &mut memory, mono(t(100)));
    assert_eq!(plans.poll(&mut memory), Next::Act(create("b")));
    plans.handle(Answer::Done, &mut memory, mono(t(100)));
    assert_eq!(plans.poll(&mut memory), Next::Observe);
}

#[test]
fn a_world_that_never_settles_ends_the_loop_unfinished_after_its_plans() {
    // Nothing the loop hands out changes this world: every plan repeats the first.
    let scene = Scene::new(vec![pod("a").created(0), pod("b").created(10)]);
    let mut plans = plans_of(&scene, 3);
    let mut memory = scene.memory();
    let mut made = 0;
    while plans.poll(&mut memory) == Next::Observe {
        plans.plan(&scene.world(), &mut memory);
        made += 1;
        act_all(&mut plans, &mut memory);
    }
    assert_eq!(made, 3);
    assert_eq!(plans.poll(&mut memory), Next::Done);
    assert!(plans.unfinished());
}

#[test]
fn a_failed_action_ends_the_loop_and_voids_the_rest_of_its_plan() {
    let scene = Scene::new(vec![pod("a").created(0), pod("b").created(10)]);
    let mut plans = plans_of(&scene, 16);
    let mut memory = scene.memory();
    plans.poll(&mut memory);
    plans.plan(&scene.world(), &mut memory);
    assert_eq!(plans.poll(&mut memory), Next::Act(follower("a")));
    plans.handle(Answer::Failed, &mut memory, mono(t(100)));
    assert_eq!(plans.poll(&mut memory), Next::Done);
    assert!(!plans.unfinished());
}

#[test]
fn a_refusal_is_planned_once_more_for_the_status_and_nothing_of_that_plan_runs() {
    let scene = Scene::new(vec![pod("a").created(0), pod("b").created(10)]);
    let mut plans = plans_of(&scene, 16);
    let mut memory = scene.memory();
    plans.poll(&mut memory);
    plans.plan(&scene.world(), &mut memory);
    plans.poll(&mut memory);
    plans.handle(Answer::Refused(refusal()), &mut memory, mono(t(100)));
    assert_eq!(plans.poll(&mut memory), Next::Observe);
    assert!(!plans.plan(&scene.world(), &mut memory).actions.is_empty());
    assert_eq!(plans.poll(&mut memory), Next::Done);
}

#[test]
fn a_lost_session_voids_the_rest_of_the_plan_and_the_world_is_observed_again() {
    let scene = Scene::new(vec![pod("a").created(0), pod("b").created(10)]);
    let mut plans = plans_of(&scene, 16);
    let mut memory = scene.memory();
    plans.poll(&mut memory);
    plans.plan(&scene.world(), &mut memory);
    plans.poll(&mut memory);
    plans.handle(Answer::SessionGone, &mut memory, mono(t(100)));
    assert_eq!(plans.poll(&mut memory), Next::Observe);
}

#[test]
fn an_answer_owed_to_no_action_changes_nothing() {
    let scene = Scene::elected("a", &["b"], 5);
    let mut plans = plans_of(&scene, 16);
    let mut memory = scene.memory();
    plans.poll(&mut memory);
    plans.plan(&scene.world(), &mut memory);
    let written = Recorded {
        fencing_token: Some(9),
        ..scene.recorded.clone()
    };
    plans.handle(
        Answer::StatusWritten(Box::new(written)),
        &mut memory,
        mono(t(100)),
    );
    plans.poll(&mut memory);
    plans.plan(&scene.world(), &mut memory);
    assert_eq!(plans.recorded().fencing_token, Some(5));
}

#[test]
fn after_a_status_write_the_next_plan_decides_from_it_continuing_the_request_in_progress() {
    // A switchover to `b` starts at t(100): its record says since when and from whom.
    let scene = Scene::elected("a", &["b"], 5).switchover("b");
    let mut plans = plans_of(&scene, 16);
    let mut memory = scene.memory();
    plans.poll(&mut memory);
    let started = plans
        .plan(&scene.world(), &mut memory)
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
    let Next::Act(_) = plans.poll(&mut memory) else {
        panic!("the move has actions");
    };
    plans.handle(
        Answer::StatusWritten(Box::new(written)),
        &mut memory,
        mono(t(100)),
    );
    act_all(&mut plans, &mut memory);
    // Five seconds later, the next plan decides from the written status and the same request.
    let later = scene.clone().now(t(105));
    assert_eq!(plans.poll(&mut memory), Next::Observe);
    let next = plans
        .plan(&later.world(), &mut memory)
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
    let mut memory = scene.memory();
    plans.poll(&mut memory);
    let first = plans.plan(&scene.world(), &mut memory).actions.clone();
    assert!(first.contains(&clear("nope")), "{first:?}");
    while let Next::Act(action) = plans.poll(&mut memory) {
        let cleared = action == clear("nope");
        let answer = match cleared {
            true => Answer::RequestCleared,
            false => Answer::Done,
        };
        plans.handle(answer, &mut memory, mono(t(100)));
    }
    assert_eq!(plans.poll(&mut memory), Next::Observe);
    let next = plans.plan(&scene.world(), &mut memory);
    assert!(!next.actions.contains(&clear("nope")), "{next:#?}");
}

/// A loop over `scene` (`a` leads, a switchover to `b` asked) that planned the move and had
/// its release of the key answered at `t(101)`.
fn released_for_a_switchover(scene: &Scene) -> (PlanLoop, ElectionMemory) {
    let mut plans = plans_of(scene, 16);
    let mut memory = scene.memory();
    act_until(&mut plans, &mut memory, scene, |a| {
        matches!(a, Action::Release { .. })
    });
    plans.handle(Answer::Released, &mut memory, mono(t(101)));
    (plans, memory)
}

fn refusal() -> ConsulRefusal {
    ConsulRefusal::permission_denied("kv put", "elector/ns/web")
}

/// Hands out actions, answering each `Done`, until `wanted` is handed out (and returned
/// unanswered); re-plans from `scene` when a plan runs out.
fn act_until(
    plans: &mut PlanLoop,
    memory: &mut ElectionMemory,
    scene: &Scene,
    wanted: impl Fn(&Action) -> bool,
) -> Action {
    for _ in 0..64 {
        match plans.poll(memory) {
            Next::Act(action) if wanted(&action) => return action,
            Next::Act(_) => {
                plans.handle(Answer::Done, memory, mono(scene.now));
            }
            Next::Observe => {
                plans.plan(&scene.world(), memory);
            }
            Next::Look(_) => {
                plans.key_read(Ok(scene.lock.clone()), memory);
            }
            Next::Done => break,
        }
    }
    panic!("never handed out");
}

#[test]
fn a_key_write_counts_from_when_it_is_handed_out_until_the_key_is_read_after_it() {
    let scene = Scene::new(vec![pod("a").created(0)]).session(Some(session("s1", "a")));
    let mut plans = plans_of(&scene, 16);
    let mut memory = scene.memory();
    let acquire = act_until(&mut plans, &mut memory, &scene, |a| {
        matches!(a, Action::Acquire { .. })
    });
    assert!(
        memory.key.written_since_read(),
        "before its answer: {acquire:?}"
    );
    plans.handle(Answer::Acquired(false), &mut memory, mono(scene.now));
    assert!(memory.key.written_since_read(), "answered, not read back");
    // Nothing is decided from the key until it is read after the write.
    assert_eq!(
        plans.poll(&mut memory),
        Next::Look(Look::ReadKey(KeyRead::Fresh))
    );
    plans.key_read(Ok(scene.lock.clone()), &mut memory);
    assert!(!memory.key.written_since_read());
    // Refused although nobody holds the key: a lock-delay the operator did not know of.
    assert!(memory.key.lock_delay_until().is_some());
    assert_eq!(plans.poll(&mut memory), Next::Observe);
}

#[test]
fn a_key_that_cannot_be_read_back_after_a_write_ends_the_loop() {
    let scene = Scene::elected("a", &["b"], 5).switchover("b");
    let (mut plans, mut memory) = released_for_a_switchover(&scene);
    assert_eq!(
        plans.poll(&mut memory),
        Next::Look(Look::ReadKey(KeyRead::Fresh))
    );
    plans.key_read(Err(None), &mut memory);
    // Nothing more is planned or done on a key unseen since the write; the next look reads it.
    assert_eq!(plans.poll(&mut memory), Next::Done);
    assert!(plans.read_back_failed());
    assert!(memory.key.written_since_read());
}

#[test]
fn a_forgotten_session_is_followed_by_its_lock_delay() {
    let scene = Scene::elected("a", &["b"], 5)
        .session(Some(session("s1", "a").lost()))
        .lock(LockView::Free { lock_index: 5 });
    let mut plans = plans_of(&scene, 16);
    let mut memory = scene.memory();
    act_until(&mut plans, &mut memory, &scene, |a| {
        *a == Action::ForgetSession
    });
    let now = mono(scene.now);
    plans.handle(Answer::Done, &mut memory, now);
    assert_eq!(
        memory.key.lock_delay_until(),
        Some(now + scene.config.session.lock_delay)
    );
}

#[test]
fn a_refusal_is_said_once_and_a_consul_write_that_succeeds_ends_it() {
    let scene = Scene::new(vec![pod("a").created(0), pod("b").created(10)]);
    let mut memory = scene.memory();
    for (round, news) in [(1, true), (2, false)] {
        let mut plans = plans_of(&scene, 16);
        let create = act_until(&mut plans, &mut memory, &scene, |a| {
            matches!(a, Action::CreateSession { .. })
        });
        let event = plans.handle(Answer::Refused(refusal()), &mut memory, mono(scene.now));
        assert_eq!(event.is_some(), news, "round {round}: {create:?}");
        assert_eq!(memory.refusal(), Some(&refusal()));
    }
    let mut plans = plans_of(&scene, 16);
    act_until(&mut plans, &mut memory, &scene, |a| {
        matches!(a, Action::CreateSession { .. })
    });
    plans.handle(Answer::Done, &mut memory, mono(scene.now));
    assert_eq!(memory.refusal(), None);
}

#[test]
fn a_leader_labelled_in_this_reconcile_is_led_with_the_token_it_was_labelled_with() {
    let elected = Scene::elected("a", &["b"], 5);
    let plans = plans_of(&elected, 16);
    // As recorded, until this reconcile labels a leader.
    assert_eq!(plans.leadership_of(&uid("a")), Some((5, t(0))));
    assert_eq!(plans.leadership_of(&uid("b")), None);
    // An interrupted first election: the session holds the key, no pod is labelled.
    let scene = Scene::new(vec![pod("a").follower(), pod("b").follower()])
        .lock(held("s1", 1, "a"))
        .session(Some(session("s1", "a")));
    let mut plans = plans_of(&scene, 16);
    let mut memory = scene.memory();
    plans.poll(&mut memory);
    plans.plan(&scene.world(), &mut memory);
    loop {
        match plans.poll(&mut memory) {
            Next::Act(action) => {
                let labels = matches!(action, Action::LabelLeader { .. });
                // Not before the answer says it took effect.
                assert_eq!(plans.leadership_of(&uid("a")), None);
                plans.handle(Answer::Done, &mut memory, mono(t(100)));
                if labels {
                    break;
                }
            }
            next => panic!("no leader label handed out: {next:?}"),
        }
    }
    assert_eq!(plans.leadership_of(&uid("a")), Some((1, t(100))));
}

#[test]
fn a_leader_labelled_after_a_move_reports_the_transition_and_how_long_the_move_took() {
    // A switchover from `a` to `b` at t(100): the move starts when the key is released.
    let scene = Scene::elected("a", &["b"], 5).switchover("b");
    let (mut plans, mut memory) = released_for_a_switchover(&scene);
    assert_eq!(plans.poll_elected(), None);
    // Three seconds later `b`'s session holds the key: `b` is labelled leader.
    let moved = Scene::new(vec![pod("a").follower(), pod("b").follower()])
        .recorded(scene.recorded.clone())
        .lock(held("s2", 6, "b"))
        .session(Some(session("s2", "b")))
        .switchover("b")
        .now(t(103));
    let label = act_until(&mut plans, &mut memory, &moved, |a| {
        matches!(a, Action::LabelLeader { .. })
    });
    assert!(matches!(label, Action::LabelLeader { ref pod, .. } if pod == "b"));
    plans.handle(Answer::Done, &mut memory, mono(t(103)));
    assert_eq!(
        plans.poll_elected(),
        Some(Elected {
            transition: true,
            after_move: Some(secs(3)),
        })
    );
    assert_eq!(plans.poll_elected(), None, "reported once");
}

#[test]
fn a_first_leader_is_no_transition_and_no_move() {
    let scene = Scene::new(vec![pod("a").created(0)])
        .lock(held("s1", 1, "a"))
        .session(Some(session("s1", "a")));
    let mut plans = plans_of(&scene, 16);
    let mut memory = scene.memory();
    act_until(&mut plans, &mut memory, &scene, |a| {
        matches!(a, Action::LabelLeader { .. })
    });
    plans.handle(Answer::Done, &mut memory, mono(t(100)));
    assert_eq!(
        plans.poll_elected(),
        Some(Elected {
            transition: false,
            after_move: None,
        })
    );
}
