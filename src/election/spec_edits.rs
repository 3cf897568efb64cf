//! Spec edits of a live election: `spec.labels` (key, leader, follower), `spec.key` and
//! `spec.consul` (address, datacenter, Enterprise namespace and partition, tokenSecretRef) may
//! change while the election runs.
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
//!
//! Here: comparing that record with what the spec asks now tells whether the old labels, key
//! and session must be withdrawn first, and whether a refused Consul access is the one in use.

use crate::crd::AppliedSpec;

/// Whether `a` and `b` name the same Consul access (address, datacenter, Enterprise namespace
/// and partition, token Secret).
pub fn same_access(a: &AppliedSpec, b: &AppliedSpec) -> bool {
    let access = |s: &AppliedSpec| {
        (
            s.consul_address.clone(),
            s.datacenter.clone(),
            s.consul_namespace.clone(),
            s.consul_partition.clone(),
            s.token_secret_name.clone(),
            s.token_secret_key.clone(),
        )
    };
    access(a) == access(b)
}

/// Whether acting with `new` after `old` needs the old labels, key and session gone first:
/// any change but the leader and follower values (rewritten in place under the same key), and
/// new session settings (Consul keeps a session's TTL, lock-delay and behavior for its life,
/// so the held session is replaced). A record without session settings (made by an earlier
/// version, or in Observe mode) is not a change of them.
pub fn needs_withdrawal(old: &AppliedSpec, new: &AppliedSpec) -> bool {
    let session_changed = matches!((&old.session, &new.session), (Some(a), Some(b)) if a != b);
    let values_only = AppliedSpec {
        leader: new.leader.clone(),
        follower: new.follower.clone(),
        session: new.session.clone(),
        ..old.clone()
    };
    session_changed || values_only != *new
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::AppliedSession;

    /// The record of a default election `web` in `ns` (as `crd::applied` makes it).
    fn base() -> AppliedSpec {
        AppliedSpec {
            label_key: crate::crd::DEFAULT_ROLE_LABEL.into(),
            leader: "leader".into(),
            follower: "follower".into(),
            key: crate::crd::default_key("ns", "web"),
            session: Some(session("10s", "release")),
            ..AppliedSpec::default()
        }
    }

    /// `base` with another Consul address, datacenter, Enterprise namespace or partition.
    fn other_places(base: &AppliedSpec) -> Vec<AppliedSpec> {
        vec![
            AppliedSpec {
                consul_address: Some("consul:8500".into()),
                ..base.clone()
            },
            AppliedSpec {
                datacenter: Some("dc2".into()),
                ..base.clone()
            },
            AppliedSpec {
                consul_namespace: Some("team-a".into()),
                ..base.clone()
            },
            AppliedSpec {
                consul_partition: Some("team-a".into()),
                ..base.clone()
            },
        ]
    }

    fn session(ttl: &str, behavior: &str) -> AppliedSession {
        AppliedSession {
            ttl: ttl.into(),
            lock_delay: "15s".into(),
            behavior: behavior.into(),
        }
    }

    #[test]
    fn new_session_settings_replace_the_session_but_a_record_without_them_does_not() {
        let old = base();
        let with = |s: AppliedSession| AppliedSpec {
            session: Some(s),
            ..base()
        };
        assert!(needs_withdrawal(&old, &with(session("30s", "release"))));
        assert!(needs_withdrawal(&old, &with(session("10s", "delete"))));
        assert!(!needs_withdrawal(&old, &with(session("10s", "release"))));
        let earlier_version = AppliedSpec {
            session: None,
            ..old.clone()
        };
        assert!(!needs_withdrawal(&earlier_version, &old));
    }

    #[test]
    fn only_label_values_change_in_place() {
        let base = base();
        let values = AppliedSpec {
            leader: "primary".into(),
            follower: "standby".into(),
            ..base.clone()
        };
        assert!(!needs_withdrawal(&base, &values));
        assert!(!needs_withdrawal(&base, &base));
        let changes = [
            AppliedSpec {
                label_key: "example.com/role".into(),
                ..base.clone()
            },
            AppliedSpec {
                key: "elector/ns/web/other".into(),
                ..base.clone()
            },
            AppliedSpec {
                token_secret_name: Some("token".into()),
                token_secret_key: Some("t".into()),
                ..base.clone()
            },
        ];
        for changed in changes.into_iter().chain(other_places(&base)) {
            assert!(needs_withdrawal(&base, &changed), "{changed:?}");
            assert!(needs_withdrawal(&changed, &base), "{changed:?}");
        }
    }

    #[test]
    fn the_access_is_the_address_the_datacenter_the_tenancy_and_the_token_secret() {
        let base = base();
        let other_labels = AppliedSpec {
            label_key: "example.com/role".into(),
            key: "elector/ns/web/other".into(),
            session: None,
            ..base.clone()
        };
        assert!(same_access(&base, &other_labels));
        let changes = [
            AppliedSpec {
                token_secret_name: Some("token".into()),
                ..base.clone()
            },
            AppliedSpec {
                token_secret_key: Some("t".into()),
                ..base.clone()
            },
        ];
        for changed in changes.into_iter().chain(other_places(&base)) {
            assert!(!same_access(&base, &changed), "{changed:?}");
        }
    }
}
