//! The gauges that describe the whole operator: elections per phase, elections without a
//! leader by reason, sessions held. Updated every few seconds from the caches.

use crate::context::Context;
use crate::crd::{LeaderElection, Phase};
use crate::metrics;

/// Every phase, so that phases with no election report 0 rather than a stale count.
const PHASES: [Phase; 8] = [
    Phase::Pending,
    Phase::Electing,
    Phase::Elected,
    Phase::Fenced,
    Phase::Observing,
    Phase::Conflict,
    Phase::Invalid,
    Phase::Paused,
];

/// The phase as a metric label (lower case, like every label value).
fn phase_name(phase: Phase) -> &'static str {
    match phase {
        Phase::Pending => "pending",
        Phase::Electing => "electing",
        Phase::Elected => "elected",
        Phase::Fenced => "fenced",
        Phase::Observing => "observing",
        Phase::Conflict => "conflict",
        Phase::Invalid => "invalid",
        Phase::Paused => "paused",
    }
}

/// Why `le` has no leader ([`metrics::without_leader_reason`]), or `None` when it has one or
/// when its own phase says why nobody leads (Invalid, Conflict).
fn without_leader(le: &LeaderElection) -> Option<&'static str> {
    let status = le.status.as_ref();
    if matches!(
        status.and_then(|s| s.phase),
        Some(Phase::Invalid | Phase::Conflict)
    ) {
        return None;
    }
    let elected = status.and_then(|s| {
        s.conditions
            .iter()
            .find(|c| c.type_ == crate::crd::conditions::LEADER_ELECTED)
    });
    match elected {
        Some(c) if c.status == "True" => None,
        Some(c) => Some(metrics::without_leader_reason(Some(&c.reason))),
        None => Some(metrics::without_leader_reason(None)),
    }
}

/// Updates the gauges that describe the whole operator: elections per phase and without a
/// leader by reason, sessions held.
pub(super) fn report(ctx: &Context) {
    let elections = ctx.caches.elections.state();
    let gauge = |count: usize| i64::try_from(count).unwrap_or(i64::MAX);
    for phase in PHASES {
        let count = elections
            .iter()
            .filter(|le| le.status.as_ref().and_then(|s| s.phase) == Some(phase))
            .count();
        ctx.metrics.set_phase_count(phase_name(phase), gauge(count));
    }
    let reasons: Vec<&'static str> = elections
        .iter()
        .filter_map(|le| without_leader(le.as_ref()))
        .collect();
    for reason in metrics::WITHOUT_LEADER_REASONS.into_iter().chain(["other"]) {
        let count = reasons.iter().filter(|r| **r == reason).count();
        ctx.metrics.set_without_leader(reason, gauge(count));
    }
    ctx.metrics
        .set_sessions(i64::try_from(ctx.sessions.len()).unwrap_or(i64::MAX));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn election(status: serde_json::Value) -> LeaderElection {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "elector.dev/v1alpha1",
            "kind": "LeaderElection",
            "metadata": {"name": "web", "namespace": "shop"},
            "spec": {"selector": {"matchLabels": {"app": "web"}}},
            "status": status,
        }))
        .expect("a LeaderElection")
    }

    fn elected(status: &str, reason: &str, phase: &str) -> LeaderElection {
        election(serde_json::json!({
            "phase": phase,
            "conditions": [{
                "type": "LeaderElected", "status": status, "reason": reason, "message": "",
                "lastTransitionTime": "2026-01-01T00:00:00Z",
            }],
        }))
    }

    #[test]
    fn elections_without_a_leader_are_counted_by_the_condition_reason() {
        assert_eq!(without_leader(&elected("True", "Elected", "Elected")), None);
        assert_eq!(
            without_leader(&elected("False", "NoCandidates", "Pending")),
            Some("no_candidates")
        );
        assert_eq!(
            without_leader(&elected("False", "LockHeldElsewhere", "Pending")),
            Some("lock_held_elsewhere")
        );
        assert_eq!(
            without_leader(&elected("False", "Electing", "Electing")),
            Some("electing")
        );
        assert_eq!(
            without_leader(&election(serde_json::json!({}))),
            Some("not_reconciled")
        );
        // Their own phase (and alert) says why nobody leads.
        assert_eq!(
            without_leader(&elected("False", "InvalidSpec", "Invalid")),
            None
        );
        assert_eq!(
            without_leader(&elected("False", "Conflict", "Conflict")),
            None
        );
    }
}
