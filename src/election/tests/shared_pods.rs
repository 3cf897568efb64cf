//! Several elections over one pod world: elections writing the same label key on overlapping
//! pods (the younger yields, the older waits for the younger's leader label to go) and
//! elections writing different label keys on the same pods (one election owns the operator's
//! annotations of a pod at a time). Each election is its own `machine::Election`, driven as
//! the controller drives it; the world answers each request the way the controller's caches,
//! the API server and Consul would, with the cross-election facts (which election is older and
//! overlaps, which labelled a pod, who owns its annotations) read from the one pod world.
//!
//! After every step that writes: no step puts a second leader label on the pods one election
//! selects (a Service selecting them and the leader label would reach two). Once the world is
//! quiet, every election that acts has one leader among its pods, no label is left that no
//! acting election wrote, and a leader pod carries the fencing token of an election that leads
//! it. (Meanwhile a pod may carry the annotations of an election that no longer leads it, until
//! that election or the one leading it reconciles.)
//!
//! The single-election model (`model.rs`) holds each election to every rule with far more
//! faults; this one is about what elections do to each other.

mod world;

use std::collections::BTreeMap;

use proptest::prelude::*;

use world::{Event, Shared};

fn event(elections: usize) -> impl Strategy<Value = Event> {
    let e = 0..elections;
    let i = 0usize..5;
    prop_oneof![
        2 => (prop::bool::weighted(0.8), 1u8..8).prop_map(|(ready, mask)| Event::AddPod { ready, mask }),
        2 => (i.clone(), prop::bool::weighted(0.6)).prop_map(|(i, r)| Event::Ready(i, r)),
        3 => (i.clone(), e.clone(), any::<bool>()).prop_map(|(i, e, s)| Event::Select(i, e, s)),
        1 => i.prop_map(Event::Gone),
        1 => e.clone().prop_map(Event::Invalidate),
        1 => e.clone().prop_map(Event::Delete),
        1 => e.clone().prop_map(Event::Recreate),
        8 => (e, prop::option::weighted(0.25, 0usize..6), any::<bool>())
            .prop_map(|(e, fail_at, after_effect)| Event::Loop { e, fail_at, after_effect }),
        2 => (1u64..20).prop_map(Event::Advance),
    ]
}

type Scenario = (Vec<usize>, Vec<(bool, u8)>, Vec<Event>);

fn scenario() -> impl Strategy<Value = Scenario> {
    prop::collection::vec(0usize..2, 2..=3).prop_flat_map(|keys| {
        let n = keys.len();
        (
            Just(keys),
            prop::collection::vec((prop::bool::weighted(0.85), 1u8..8), 1..=4),
            prop::collection::vec(event(n), 0..60),
        )
    })
}

fn run((keys, pods, events): &Scenario) -> Shared {
    let mut world = Shared::new(keys, pods);
    for e in events {
        world.apply(e);
    }
    world.quiesce();
    world
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 512,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// Elections over one pod world never put two leader labels under one key, never leave a
    /// fencing token with an election that does not lead the pod, and settle.
    #[test]
    fn elections_sharing_pods_never_show_two_leaders_under_one_key(scenario in scenario()) {
        run(&scenario);
    }
}

/// The generator reaches what the property is about: elections that yield and withdraw,
/// pods led under two keys at once, and the world leaving two leader labels for the
/// elections to repair.
#[test]
fn the_shared_world_generator_reaches_its_situations() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;

    let mut runner = TestRunner::deterministic();
    let mut seen: BTreeMap<String, u32> = BTreeMap::new();
    for _ in 0..256 {
        let scenario = scenario()
            .new_tree(&mut runner)
            .expect("a scenario")
            .current();
        for (k, v) in run(&scenario).seen {
            *seen.entry(k).or_default() += v;
        }
    }
    for situation in [
        "stood back: Conflict",
        "waited for a younger election's leader label to go",
        "withdrew a label",
        "a pod leads under two label keys",
        "two leader labels left by the world",
    ] {
        assert!(
            seen.get(situation).copied().unwrap_or(0) > 0,
            "the generator never produced {situation:?}: {seen:#?}"
        );
    }
}

/// A reconcile of election `e` in which nothing fails.
fn reconcile(e: usize) -> Event {
    Event::Loop {
        e,
        fail_at: None,
        after_effect: false,
    }
}

/// `e0` leads one of its two pods; `e1` (younger, same key) leads one of its own two. Then
/// `e1` comes to select `e0`'s other pod and `e0`'s leader goes NotReady: `e0` would move its
/// leader into `e1`'s selection while `e1`'s leader label is still on, so it waits for `e1`
/// to withdraw.
#[test]
fn the_older_election_waits_for_the_younger_to_withdraw_and_then_leads() {
    let mut world = Shared::new(&[0, 0], &[(true, 1), (true, 1), (true, 2), (true, 2)]);
    for event in [
        reconcile(0),
        reconcile(1),
        Event::Select(1, 1, true),
        Event::Ready(0, false),
        reconcile(0),
        reconcile(1),
        reconcile(0),
    ] {
        world.apply(&event);
    }
    world.quiesce();
}

/// `e0` leads one of its two pods; `e1` (younger, same key) selects the other and two more,
/// and reconciles for the first time: it yields without touching `e0`'s pods.
#[test]
fn the_younger_election_yields_without_touching_the_older_ones_pods() {
    let mut world = Shared::new(&[0, 0], &[(true, 1), (true, 3), (true, 2), (true, 2)]);
    world.apply(&reconcile(0));
    world.apply(&reconcile(1));
    assert!(
        world.seen.contains_key("stood back: Conflict"),
        "{}",
        world.trace
    );
    world.quiesce();
}

/// `e2` (another key) owns the annotations of every pod; `e0` and `e1` write the same key over
/// the same pods, and `e1` yields to `e0`. Every label `e0` writes under the shared key carries
/// `e2`'s annotations, so the pod alone does not say whether `e0` or `e1` wrote it: `e1` must
/// leave `e0`'s labels alone, and neither may undo the other's.
#[test]
fn a_yielding_election_leaves_the_labels_of_the_one_that_acts_on_pods_a_third_one_owns() {
    let mut world = Shared::new(&[0, 0, 1], &[(true, 7), (true, 7), (true, 7)]);
    for event in [reconcile(2), reconcile(0), reconcile(1), reconcile(0)] {
        world.apply(&event);
    }
    world.quiesce();
}

/// Found by the randomized run: a chain of three elections on one key. `e2` leads its pod;
/// then `e1` comes to select that pod too, and `e1` already overlaps the older `e0`. Only `e0`
/// acts, `e1` and `e2` yield; `e0` must not label its leader while `e2`'s leader label is
/// still on a pod `e1` selects, or a Service selecting `e1`'s pods would reach two leaders.
#[test]
fn the_oldest_of_a_chain_waits_for_the_label_at_its_far_end() {
    let mut world = Shared::new(&[1, 1, 1], &[(true, 3), (true, 4)]);
    for event in [reconcile(2), Event::Select(1, 1, true)] {
        world.apply(&event);
    }
    world.quiesce();
}

/// An election whose selector no longer matches the pod it labelled leader keeps that label
/// until it reconciles; meanwhile an older election must not label a second leader among the
/// pods of a younger election that selects both.
#[test]
fn a_leader_label_its_election_no_longer_selects_is_waited_for() {
    let mut world = Shared::new(&[0, 0, 0], &[(true, 6), (false, 1), (false, 1)]);
    for event in [
        reconcile(1),
        Event::Gone(1),
        Event::Select(0, 1, false),
        Event::AddPod {
            ready: true,
            mask: 7,
        },
        Event::Select(2, 1, false),
    ] {
        world.apply(&event);
    }
    world.quiesce();
}
