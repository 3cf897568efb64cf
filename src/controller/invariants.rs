//! The standing invariant checker of the active replica: every few seconds it compares, for each election, the pods
//! carrying the leader label, the Consul lock (as the lock watcher last read it) and the
//! status ([`crate::election::invariants`]). Reads caches only, never the API server or
//! Consul. A disagreement seen at two checks in a row has outlived a reconcile: it becomes a
//! Warning event on the election (once, until it clears), a count in
//! `consul_elector_disagreements_total{kind}`, and a reconcile of the election, which heals
//! what the planner can heal (a stray leader label, a stale status).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use kube::Resource;
use kube::runtime::events::{Event, EventType};

use super::{Context, act, election_key, observe};
use crate::crd::{LeaderElection, Phase};
use crate::election::config::ElectionKey;
use crate::election::invariants::{Disagreement, Snapshot, disagreements};

/// Time between two checks.
const CHECK_INTERVAL: Duration = Duration::from_secs(2);

/// How many checks in a row each current disagreement has been seen at.
type Sightings = BTreeMap<(ElectionKey, Disagreement), u32>;

/// Runs the checker until the controller stops.
pub async fn run(ctx: Arc<Context>) {
    let mut sightings = Sightings::new();
    let mut tick = tokio::time::interval(CHECK_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        // Only the active replica checks (a standby's reconciles write nothing).
        if !*ctx.caches_ready.borrow() || !*ctx.may_write.borrow() {
            continue;
        }
        let found = check_all(&ctx);
        for (election, kind, le) in record(&mut sightings, &found) {
            report(&ctx, &election, kind, &le).await;
        }
    }
}

/// The disagreements of every election that acts (not deleting, valid, not in conflict).
fn check_all(ctx: &Context) -> Vec<(ElectionKey, Disagreement, Arc<LeaderElection>)> {
    let mut found = Vec::new();
    for le in ctx.elections.state() {
        let acting = le.metadata.deletion_timestamp.is_none()
            && !matches!(
                le.status.as_ref().and_then(|s| s.phase),
                Some(Phase::Conflict | Phase::Invalid)
            );
        let Ok(key) = election_key(&le) else {
            continue;
        };
        let Ok(config) = ctx.validated.of(&key, &le) else {
            continue;
        };
        if !acting {
            continue;
        }
        let pods = observe::views(&observe::pods_of(ctx, &le), &config);
        let lock = ctx.locks.lock(&key);
        let session = ctx.sessions.view(&key);
        let recorded = act::recorded(&ctx.current_status(&le));
        let snapshot = Snapshot {
            mode: config.mode,
            leader_value: &config.labels.leader,
            pods: &pods,
            lock: &lock,
            session: session.as_ref(),
            recorded: &recorded,
        };
        for kind in disagreements(&snapshot) {
            found.push((key.clone(), kind, le.clone()));
        }
    }
    found
}

/// Updates `sightings` with this check's `found` and returns the disagreements seen for the
/// second time in a row (each is reported once; it must clear before it is reported again).
fn record<T: Clone>(
    sightings: &mut Sightings,
    found: &[(ElectionKey, Disagreement, T)],
) -> Vec<(ElectionKey, Disagreement, T)> {
    let current: BTreeSet<(ElectionKey, Disagreement)> =
        found.iter().map(|(e, k, _)| (e.clone(), *k)).collect();
    sightings.retain(|seen, _| current.contains(seen));
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

async fn report(ctx: &Context, election: &ElectionKey, kind: Disagreement, le: &LeaderElection) {
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
    ctx.publish(&event, &le.object_ref(&())).await;
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

    #[test]
    fn a_disagreement_is_reported_at_its_second_sighting_once() {
        let mut sightings = Sightings::new();
        let stale = [(key("a"), Disagreement::StaleStatus, ())];
        assert!(record(&mut sightings, &stale).is_empty(), "first sighting");
        assert_eq!(record(&mut sightings, &stale).len(), 1, "outlived a check");
        assert!(record(&mut sightings, &stale).is_empty(), "reported once");
        assert!(record::<()>(&mut sightings, &[]).is_empty(), "cleared");
        assert!(record(&mut sightings, &stale).is_empty());
        assert_eq!(
            record(&mut sightings, &stale).len(),
            1,
            "back: reported again"
        );
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
            assert!(record(&mut sightings, &found).is_empty());
        }
    }
}
