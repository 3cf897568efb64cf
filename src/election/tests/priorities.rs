//! Priorities (`elector.dev/priority`): the eligible pod of highest priority is preferred as
//! a successor, before the rule-5 order; a negative priority never leads; a priority that is
//! not an integer makes the pod ineligible (and says so) rather than silently 0.

use super::support::*;
use crate::election::eligibility::{Ineligible, eligibility, successor};
use crate::election::observe::Recorded;
use crate::election::plan::Action;

#[test]
fn the_highest_priority_wins_over_newest_and_over_the_previous_leader() {
    let pods = vec![
        pod("a").priority(Some(5)).created(0),
        pod("b").priority(Some(1)).created(50),
        pod("c").created(90),
    ];
    let none = Recorded::default();
    assert_eq!(
        successor(&pods, &config(), &none, None).map(|p| p.name.as_str()),
        Some("a")
    );
    let previous_b = recorded("b", "s1", 3, t(0), 0);
    assert_eq!(
        successor(&pods, &config(), &previous_b, None).map(|p| p.name.as_str()),
        Some("a"),
        "the previous leader is preferred only among pods of the highest priority"
    );
    let tied = vec![
        pod("a").priority(Some(5)).created(0),
        pod("b").priority(Some(5)).created(50),
    ];
    assert_eq!(
        successor(&tied, &config(), &none, None).map(|p| p.name.as_str()),
        Some("b"),
        "then the newest"
    );
    let previous_a = recorded("a", "s1", 3, t(0), 0);
    assert_eq!(
        successor(&tied, &config(), &previous_a, None).map(|p| p.name.as_str()),
        Some("a"),
        "then the previous leader"
    );
}

#[test]
fn negative_and_malformed_priorities_never_lead() {
    assert_eq!(
        eligibility(&pod("a").priority(Some(-1)), &config()),
        Err(Ineligible::NeverLeader)
    );
    assert_eq!(
        eligibility(&pod("a").priority(None), &config()),
        Err(Ineligible::InvalidPriority)
    );
    let pods = vec![pod("a").priority(Some(-1)), pod("b").priority(None)];
    assert!(successor(&pods, &config(), &Recorded::default(), None).is_none());
    let plan = Scene::new(pods).plan();
    assert!(
        steps(&plan)
            .iter()
            .all(|a| matches!(a, Action::LabelFollower { .. })),
        "nobody is elected: {plan:#?}"
    );
    let reasons: Vec<_> = plan
        .status
        .candidates
        .iter()
        .map(|c| (c.pod.as_str(), c.reason, c.priority))
        .collect();
    assert_eq!(
        reasons,
        vec![
            ("a", Some("NeverLeader"), -1),
            ("b", Some("InvalidPriority"), 0)
        ]
    );
}

#[test]
fn a_leader_given_a_negative_priority_is_moved_away() {
    let mut world = World::new(
        Scene::elected("a", &["b"], 5).with_pod(pod("a").leader(5, t(0)).priority(Some(-1))),
    );
    let first = world.step();
    assert_eq!(steps(&first)[..2], [follower("a"), release("s1")]);
    world.settle();
    assert_eq!(world.leaders(), vec!["b".to_owned()]);
}

#[test]
fn a_new_leader_is_chosen_by_priority_at_first_election() {
    let mut world = World::new(Scene::new(vec![
        pod("a").created(90),
        pod("b").priority(Some(2)).created(0),
    ]));
    world.settle();
    assert_eq!(world.leaders(), vec!["b".to_owned()]);
    assert!(
        world
            .history
            .iter()
            .flat_map(|p| &p.actions)
            .all(|a| !matches!(a, Action::CreateSession { pod, .. } if pod == "a")),
        "the lower priority pod never got a session"
    );
}
