//! Spec edits of a live election: `spec.labels` (key, leader, follower), `spec.key` and
//! `spec.consul` (address, datacenter, tokenSecretRef) may change while the election runs.
//!
//! The object alone cannot tell what changed, so the status records what the operator acts
//! with ([`AppliedSpec`]) before it acts with other values. A new election records them with
//! its first status write (the fencing token's, before any pod is labelled leader), which
//! spares a write per election; the price: if the operator crashes between that election's
//! first acquisition and that write, and the spec's key is edited before it restarts, the
//! first key stays held by the election's session until the session goes (the election is
//! deleted, or its leader moves to another pod). A changed leader or follower value
//! only needs recording: the planner rewrites the value of the one label key in place, so a
//! pod never carries both, and the leader keeps its lock meanwhile. When the label key, the
//! Consul key or the Consul access differs from that record, the operator first withdraws
//! what it did with the recorded values, in rule 7's order
//! (leader label off, old key released, old session destroyed in the old Consul, remaining
//! old labels removed), then records the new values and elects again under them. No pod
//! keeps a label a Service may select without holding the lock, and the old key is free
//! before the new one is acquired.
//!
//! While the old Consul cannot be reached the labels are already off and the release is
//! retried; the annotation `elector.dev/skip-consul-cleanup: "true"` lets the election go on
//! without it (the old session, no longer renewed, expires after its TTL).

use super::context::Context;
use super::status_write;
use crate::Error;
use crate::crd::applied::applied_of;
use crate::crd::{AppliedSpec, LeaderElection};
use crate::election::config::ElectionConfig;
use crate::election::spec_edits::{needs_withdrawal, same_access};

/// Whether the Consul access the spec of `le` names (address, datacenter, token Secret) is
/// the one the operator acts with (`status.applied`): then a refusal of it means the access in
/// use was withdrawn, not that a new one cannot be used yet.
pub fn access_in_use(le: &LeaderElection, ctx: &Context, config: &ElectionConfig) -> bool {
    let Some(recorded) = ctx.caches.current_status(le).applied else {
        return true;
    };
    same_access(&recorded, &applied_of(le, config))
}

/// The spec's values for `le` (validated as `config`) when the status records other ones.
pub struct Edit {
    /// What the spec makes the operator act with.
    now: AppliedSpec,
    /// Whether what was done with the recorded values must be withdrawn first
    /// ([`needs_withdrawal`]).
    pub needs_withdrawal: bool,
}

/// The edit of `le`'s spec since the operator last acted on it, if any. Nothing recorded yet
/// is no edit: the reconcile's first status write records the values (sparing a write per new
/// election).
pub fn edit(le: &LeaderElection, ctx: &Context, config: &ElectionConfig) -> Option<Edit> {
    let now = applied_of(le, config);
    let recorded = ctx.caches.current_status(le).applied?;
    (recorded != now).then(|| Edit {
        needs_withdrawal: needs_withdrawal(&recorded, &now),
        now,
    })
}

/// Records the values of `edit` as the ones the operator acts with.
pub async fn record(le: &LeaderElection, ctx: &Context, edit: &Edit) -> Result<(), Error> {
    status_write::record_applied(le, ctx, &edit.now).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::applied::with_applied;

    fn election(spec: serde_json::Value) -> LeaderElection {
        let le = serde_json::json!({
            "apiVersion": "elector.dev/v1alpha1",
            "kind": "LeaderElection",
            "metadata": {"name": "web", "namespace": "ns"},
            "spec": spec,
        });
        serde_json::from_value(le).unwrap_or_else(|e| panic!("election: {e}"))
    }

    fn applied(le: &LeaderElection) -> AppliedSpec {
        let config = crate::crd::validate(le).unwrap_or_else(|e| panic!("valid: {e:?}"));
        applied_of(le, &config)
    }

    #[test]
    fn the_record_round_trips_through_the_spec() {
        let old = election(serde_json::json!({
            "selector": {"matchLabels": {"app": "web"}},
            "labels": {"key": "example.com/role", "leader": "primary", "follower": "standby"},
            "key": "elector/ns/web/custom",
            "consul": {
                "address": "http://consul.example:8500",
                "datacenter": "dc2",
                "tokenSecretRef": {"name": "token", "key": "t"},
            },
        }));
        let record = applied(&old);
        let new = election(serde_json::json!({"selector": {"matchLabels": {"app": "web"}}}));
        assert_ne!(applied(&new), record);
        let restored = with_applied(&new.spec, &record);
        assert_eq!(restored.labels, old.spec.labels);
        assert_eq!(restored.key, old.spec.key);
        assert_eq!(restored.consul, old.spec.consul);
        assert_eq!(restored.selector, new.spec.selector);
    }

    #[test]
    fn session_settings_are_recorded_in_canonical_form() {
        // `needs_withdrawal` (election::spec_edits) compares records: the same durations
        // written differently must make the same record, other settings another one.
        let web = |session: serde_json::Value| {
            applied(&election(serde_json::json!({
                "selector": {"matchLabels": {"app": "web"}},
                "session": session,
            })))
        };
        let old = web(serde_json::json!({"ttl": "10s"}));
        assert_eq!(old, web(serde_json::json!({"ttl": "10000ms"})));
        assert!(needs_withdrawal(
            &old,
            &web(serde_json::json!({"ttl": "30s"}))
        ));
        assert!(needs_withdrawal(
            &old,
            &web(serde_json::json!({"ttl": "10s", "behavior": "Delete"}))
        ));
    }

    #[test]
    fn defaults_are_recorded_resolved_and_restore_without_a_consul_section() {
        let le = election(serde_json::json!({"selector": {"matchLabels": {"app": "web"}}}));
        let record = applied(&le);
        assert_eq!(record.label_key, crate::crd::DEFAULT_ROLE_LABEL);
        assert_eq!(record.key, crate::crd::default_key("ns", "web"));
        let restored = with_applied(&le.spec, &record);
        assert_eq!(restored.consul, None);
        assert_eq!(restored.key, Some(crate::crd::default_key("ns", "web")));
    }
}
