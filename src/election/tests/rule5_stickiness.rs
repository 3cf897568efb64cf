//! Rule 5: a leader keeps leading while it is eligible; a successor is the previous leader if
//! it is eligible again, else the newest eligible pod, ties broken by name. A rolling update
//! therefore moves the leader exactly once.

use super::support::*;
use crate::election::eligibility::successor;
use crate::election::observe::Recorded;
use crate::election::plan::Action;

fn names(p: Option<&crate::election::observe::PodView>) -> Option<&str> {
    p.map(|p| p.name.as_str())
}

#[test]
fn the_previous_leader_is_chosen_again_when_it_is_eligible() {
    let pods = vec![pod("a").created(0), pod("b").created(50)];
    let rec = recorded("a", "s1", 3, t(0), 0);
    assert_eq!(names(successor(&pods, &config(), &rec, None)), Some("a"));
    // Unless it is the pod being replaced.
    assert_eq!(
        names(successor(&pods, &config(), &rec, Some(&uid("a")))),
        Some("b")
    );
    // A new incarnation of the name is not the previous leader.
    let pods = vec![pod("a").with_uid("uid-a2").created(0), pod("b").created(50)];
    assert_eq!(names(successor(&pods, &config(), &rec, None)), Some("b"));
}

#[test]
fn otherwise_the_newest_eligible_pod_is_chosen_ties_by_name() {
    let none = Recorded::default();
    let pods = vec![
        pod("a").created(10),
        pod("b").created(30),
        pod("c").created(20),
        pod("d").created(40).not_ready_since(40),
        pod("e").created(50).terminating(),
        pod("f").created(60).unselected(),
        pod("g").created(70).finished(),
    ];
    assert_eq!(names(successor(&pods, &config(), &none, None)), Some("b"));
    let rec = recorded("d", "s1", 3, t(0), 0);
    assert_eq!(
        names(successor(&pods, &config(), &rec, None)),
        Some("b"),
        "a previous leader that is not eligible is not chosen"
    );
    // Ties: the smallest name, whatever the order of the list.
    let tied = vec![
        pod("m").created(5),
        pod("k").created(5),
        pod("z").created(5),
    ];
    assert_eq!(names(successor(&tied, &config(), &none, None)), Some("k"));
    let reversed: Vec<_> = tied.iter().rev().cloned().collect();
    assert_eq!(
        names(successor(&reversed, &config(), &none, None)),
        Some("k")
    );
    // Nobody eligible.
    let nobody = vec![pod("a").not_ready_since(1), pod("b").terminating()];
    assert_eq!(names(successor(&nobody, &config(), &none, None)), None);
}

#[test]
fn a_leader_keeps_leading_when_a_newer_pod_appears() {
    let scene = Scene::elected("a", &["b"], 5).with_pod(pod("z").created(90));
    let plan = scene.plan();
    assert_eq!(steps(&plan), vec![follower("z")]);
    assert_eq!(plan.status.leader.map(|l| l.pod), Some("a".into()));
}

#[test]
fn the_previous_leader_eligible_again_replaces_a_successor_that_does_not_hold_the_key_yet() {
    // `a` was NotReady, `c` was chosen and got a session; before `c` acquired, `a` is Ready.
    let scene = Scene::new(vec![
        pod("a").follower().ready(),
        pod("c").follower().created(30),
    ])
    .lock(free(5))
    .session(Some(session("s2", "c")))
    .recorded(recorded("a", "s1", 5, t(0), 0));
    assert_eq!(steps(&scene.plan()), vec![destroy("s2"), create("a")]);
}

#[test]
fn a_session_lost_is_followed_by_the_same_pod_even_with_newer_pods_around() {
    let scene = Scene::elected("a", &[], 5)
        .with_pod(pod("n").follower().created(90))
        .lock(free(5))
        .session(Some(session("s1", "a").lost()));
    let mut world = World::new(scene);
    world.settle();
    assert_eq!(world.leaders(), vec!["a".to_owned()]);
    assert_eq!(world.scene.recorded.transitions, 0);
}

#[test]
fn a_rolling_update_moves_the_leader_exactly_once() {
    // Three pods of the old revision; `o1` leads. The Deployment adds a new pod, then
    // deletes an old one, three times, deleting the leader second.
    let mut world = World::new(
        Scene::elected("o1", &["o2", "o3"], 4).with_pod(pod("o3").follower().created(5)),
    );
    assert!(world.settle().is_empty());
    let mut clock = 100;
    let mut leaders_seen = vec![world.leaders()];
    let steps_of_rollout: [(&str, i64, &str); 3] =
        [("n1", 200, "o3"), ("n2", 300, "o1"), ("n3", 400, "o2")];
    for (new, created, old) in steps_of_rollout {
        clock += 100;
        let now = t(clock);
        world.edit(|s| s.with_pod(pod(new).created(created)).now(now));
        world.settle();
        leaders_seen.push(world.leaders());
        world.edit(|s| {
            let leaving = s.pods.iter().find(|p| p.name == old).cloned().expect("pod");
            s.with_pod(leaving.terminating())
        });
        world.settle();
        leaders_seen.push(world.leaders());
        world.edit(|s| s.without_pod(old));
        world.settle();
        leaders_seen.push(world.leaders());
    }
    assert_eq!(world.scene.recorded.transitions, 1, "{leaders_seen:?}");
    // The successor was the newest pod when the leader left: n2.
    assert_eq!(world.leaders(), vec!["n2".to_owned()]);
    // Exactly one LeaderElected over the rollout.
    let elected: usize = world
        .history
        .iter()
        .flat_map(|p| p.actions.iter())
        .filter(|a| {
            matches!(a, Action::Emit(e) if e.reason == crate::election::plan::EventReason::LeaderElected)
        })
        .count();
    assert_eq!(elected, 1);
    assert!(leaders_seen.iter().all(|l| l.len() == 1));
}
