//! The standing invariant checker of the active replica: every few seconds it compares, for each election, the pods
//! carrying the leader label, the Consul lock (as the lock watcher last read it) and the
//! status ([`crate::election::invariants`]). Reads caches only, never the API server or
//! Consul. A disagreement seen at two checks in a row has outlived a reconcile: it becomes a
//! Warning event on the election (once, until it clears), a count in
//! `consul_elector_disagreements_total{kind}`, and a reconcile of the election, which heals
//! what the planner can heal (a stray leader label, a stale status).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use kube::Resource;
use kube::runtime::events::{Event, EventType};

use crate::cache::keys::election_key;
use crate::cache::views as observe;
use crate::context::Context;
use crate::crd::{LeaderElection, Phase};
use crate::election::config::{ElectionConfig, ElectionKey};
use crate::election::invariants::{Disagreement, Snapshot, disagreements};

/// Time between two checks.
const CHECK_INTERVAL: Duration = Duration::from_secs(2);
/// The most elections one check looks at: with more, each check takes the next ones in
/// name order, so the checker's cost stays flat (every election is still looked at every
/// `ceil(N / CHECK_BATCH) * CHECK_INTERVAL`: 20 s at 10,000 elections).
const CHECK_BATCH: usize = 1000;

/// How many checks in a row each current disagreement has been seen at.
type Sightings = BTreeMap<(ElectionKey, Disagreement), u32>;

/// Runs the checker until the controller stops.
pub async fn run(ctx: Arc<Context>) {
    let mut sightings = Sightings::new();
    let mut after: Option<ElectionKey> = None;
    let mut tick = tokio::time::interval(CHECK_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        // Only the active replica checks (a standby's reconciles write nothing).
        if !*ctx.caches_ready.borrow() || !*ctx.may_write.borrow() {
            continue;
        }
        let batch = next_batch(&ctx, &mut after);
        let checked: BTreeSet<ElectionKey> = batch.iter().map(|(key, _)| key.clone()).collect();
        let found = check(&ctx, batch);
        for (election, kind, le) in record(&mut sightings, &checked, &found) {
            report(&ctx, &election, kind, &le);
        }
    }
}

/// The next [`CHECK_BATCH`] elections in name order after `after` (from the start once past
/// the last), with their keys; moves `after` to the last one taken.
fn next_batch(
    ctx: &Context,
    after: &mut Option<ElectionKey>,
) -> Vec<(ElectionKey, Arc<LeaderElection>)> {
    let mut all: Vec<(ElectionKey, Arc<LeaderElection>)> = ctx
        .caches
        .elections
        .state()
        .into_iter()
        .filter_map(|le| Some((election_key(&le).ok()?, le)))
        .collect();
    all.sort_by(|a, b| a.0.cmp(&b.0));
    let batch = take_after(&all, after.as_ref(), CHECK_BATCH);
    *after = batch.last().map(|(key, _)| key.clone());
    batch
}

/// Up to `n` items of the sorted `all` following `after`, wrapping around to the start.
fn take_after<T: Clone>(
    all: &[(ElectionKey, T)],
    after: Option<&ElectionKey>,
    n: usize,
) -> Vec<(ElectionKey, T)> {
    let start = after.map_or(0, |after| all.partition_point(|(key, _)| key <= after));
    let start = if start >= all.len() { 0 } else { start };
    all.iter()
        .cycle()
        .skip(start)
        .take(n.min(all.len()))
        .cloned()
        .collect()
}

/// The disagreements of the elections of `batch` not being deleted: all kinds for those that
/// act, rules 1 and 2 for those that cannot (invalid, in conflict).
fn check(
    ctx: &Context,
    batch: Vec<(ElectionKey, Arc<LeaderElection>)>,
) -> Vec<(ElectionKey, Disagreement, Arc<LeaderElection>)> {
    let mut found = Vec::new();
    for (key, le) in batch {
        if le.metadata.deletion_timestamp.is_some() {
            // Its cleanup takes the labels off in rule 7's order.
            continue;
        }
        let acting = !matches!(
            le.status.as_ref().and_then(|s| s.phase),
            Some(Phase::Conflict | Phase::Invalid)
        );
        let Some(config) = acted_with(ctx, &key, &le, acting) else {
            continue;
        };
        // The disagreements do not depend on readiness.
        let pods = observe::views(&observe::pods_of(&ctx.caches, &le), &config, |_| {
            HashMap::new()
        });
        let lock = ctx.locks.lock(&key);
        let session = ctx.sessions.view(&key);
        let recorded = crate::election::report::recorded(&ctx.caches.current_status(&le));
        let snapshot = Snapshot {
            mode: config.mode,
            leader_value: &config.labels.leader,
            pods: &pods,
            lock: &lock,
            session: session.as_ref(),
            recorded: &recorded,
            owner: &ctx.settings.owner,
            acting,
        };
        for kind in disagreements(&snapshot) {
            found.push((key.clone(), kind, le.clone()));
        }
    }
    found
}

/// The configuration whose labels `le`'s pods carry: the spec's for an election that acts; for
/// one that cannot (`acting` false), the values recorded in `status.applied` over the spec
/// (an election refused after an edit still carries the labels of before), else the spec's.
/// `None` when neither validates.
fn acted_with(
    ctx: &Context,
    key: &ElectionKey,
    le: &LeaderElection,
    acting: bool,
) -> Option<Arc<ElectionConfig>> {
    if !acting && let Some(applied) = ctx.caches.current_status(le).applied {
        let mut acted_on = le.clone();
        acted_on.spec = crate::crd::applied::with_applied(&le.spec, &applied);
        if let Ok(config) = crate::crd::validate(&acted_on) {
            return Some(Arc::new(config));
        }
    }
    ctx.caches.validated.of(key, le).ok()
}

/// Updates `sightings` with this check's `found` among the `checked` elections and returns the
/// disagreements seen at two checks of their election in a row (each is reported once; it
/// must clear before it is reported again). Elections this check did not look at keep theirs.
fn record<T: Clone>(
    sightings: &mut Sightings,
    checked: &BTreeSet<ElectionKey>,
    found: &[(ElectionKey, Disagreement, T)],
) -> Vec<(ElectionKey, Disagreement, T)> {
    let current: BTreeSet<(ElectionKey, Disagreement)> =
        found.iter().map(|(e, k, _)| (e.clone(), *k)).collect();
    sightings.retain(|seen, _| !checked.contains(&seen.0) || current.contains(seen));
    let mut outlived = Vec::new();
    for (election, kind, item) in found {
        let count = sightings.entry((election.clone(), *kind)).or_insert(0);
        *count = count.saturating_add(1);
        if *count == 2 {
            outlived.push((election.clone(), *kind, item.clone()));
        }
    }
    outlived
}

fn report(ctx: &Context, election: &ElectionKey, kind: Disagreement, le: &LeaderElection) {
    tracing::warn!(
        election = %election,
        kind = kind.as_str(),
        "leader labels, the Consul lock and the status disagree; reconciling"
    );
    ctx.metrics.disagreement(kind);
    ctx.reconcile_soon(election);
    let event = Event {
        type_: EventType::Warning,
        reason: "Disagreement".to_owned(),
        note: Some(format!(
            "leader labels, the Consul lock and the status disagree ({}); reconciling",
            kind.as_str()
        )),
        action: "Check".to_owned(),
        secondary: None,
    };
    ctx.publish(&event, &le.object_ref(&()));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> ElectionKey {
        ElectionKey {
            namespace: "ns".into(),
            name: name.into(),
        }
    }

    fn only(name: &str) -> BTreeSet<ElectionKey> {
        BTreeSet::from([key(name)])
    }

    #[test]
    fn a_disagreement_is_reported_at_its_second_sighting_once() {
        let mut sightings = Sightings::new();
        let a = only("a");
        let stale = [(key("a"), Disagreement::StaleStatus, ())];
        assert!(
            record(&mut sightings, &a, &stale).is_empty(),
            "first sighting"
        );
        assert_eq!(
            record(&mut sightings, &a, &stale).len(),
            1,
            "outlived a check"
        );
        assert!(
            record(&mut sightings, &a, &stale).is_empty(),
            "reported once"
        );
        assert!(record::<()>(&mut sightings, &a, &[]).is_empty(), "cleared");
        assert!(record(&mut sightings, &a, &stale).is_empty());
        assert_eq!(
            record(&mut sightings, &a, &stale).len(),
            1,
            "back: reported again"
        );
    }

    #[test]
    fn a_check_that_skips_an_election_keeps_its_sightings() {
        let mut sightings = Sightings::new();
        let stale = [(key("a"), Disagreement::StaleStatus, ())];
        assert!(record(&mut sightings, &only("a"), &stale).is_empty());
        // A check of other elections in between: "a" was not looked at.
        assert!(record::<()>(&mut sightings, &only("b"), &[]).is_empty());
        assert_eq!(record(&mut sightings, &only("a"), &stale).len(), 1);
    }

    #[test]
    fn batches_go_round_in_name_order() {
        let all: Vec<(ElectionKey, ())> = ["a", "b", "c", "d", "e"]
            .iter()
            .map(|n| (key(n), ()))
            .collect();
        let names = |batch: Vec<(ElectionKey, ())>| -> Vec<String> {
            batch.into_iter().map(|(k, _)| k.name).collect()
        };
        assert_eq!(names(take_after(&all, None, 2)), ["a", "b"]);
        assert_eq!(names(take_after(&all, Some(&key("b")), 2)), ["c", "d"]);
        assert_eq!(names(take_after(&all, Some(&key("d")), 2)), ["e", "a"]);
        assert_eq!(names(take_after(&all, Some(&key("e")), 2)), ["a", "b"]);
        assert_eq!(
            names(take_after(&all, Some(&key("bb")), 9)),
            ["c", "d", "e", "a", "b"]
        );
        assert!(take_after::<()>(&[], None, 2).is_empty());
    }

    #[test]
    fn a_transient_disagreement_is_never_reported() {
        let mut sightings = Sightings::new();
        for i in 0..6 {
            let found = if i % 2 == 0 {
                vec![(key("a"), Disagreement::LockWithoutLabel, ())]
            } else {
                Vec::new()
            };
            assert!(record(&mut sightings, &only("a"), &found).is_empty());
        }
    }
}
