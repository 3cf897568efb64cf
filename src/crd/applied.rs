//! What the operator acts with for an election: the labels, key, Consul access and session
//! settings its status records (`status.applied`, written before the operator acts with new
//! values), made from a validated spec, and a spec made back from such a record.

use super::{
    AppliedSession, AppliedSpec, ConsulSpec, LabelsSpec, LeaderElection, LeaderElectionSpec,
    SecretKeyRef,
};
use crate::consul::{format_go_duration, parse_go_duration};
use crate::election::config::{Behavior, ElectionConfig, Mode, SessionConfig};

/// What the spec of `le`, validated as `config`, makes the operator act with.
pub fn applied_of(le: &LeaderElection, config: &ElectionConfig) -> AppliedSpec {
    let consul = le.spec.consul.as_ref();
    let token = consul.and_then(|c| c.token_secret_ref.as_ref());
    AppliedSpec {
        label_key: config.labels.key.clone(),
        leader: config.labels.leader.clone(),
        follower: config.labels.follower.clone(),
        key: config.key.clone(),
        consul_address: consul.and_then(|c| c.address.clone()),
        datacenter: consul.and_then(|c| c.datacenter.clone()),
        consul_namespace: consul.and_then(|c| c.namespace.clone()),
        consul_partition: consul.and_then(|c| c.partition.clone()),
        token_secret_name: token.map(|t| t.name.clone()),
        token_secret_key: token.map(|t| t.key.clone()),
        session: (config.mode == Mode::Managed).then(|| AppliedSession {
            ttl: format_go_duration(config.session.ttl),
            lock_delay: format_go_duration(config.session.lock_delay),
            behavior: match config.session.behavior {
                Behavior::Release => "release",
                Behavior::Delete => "delete",
            }
            .to_owned(),
        }),
    }
}

/// `spec` with the labels, key and Consul access of `applied`.
pub fn with_applied(spec: &LeaderElectionSpec, applied: &AppliedSpec) -> LeaderElectionSpec {
    let token_secret_ref = match (&applied.token_secret_name, &applied.token_secret_key) {
        (Some(name), Some(key)) => Some(SecretKeyRef {
            name: name.clone(),
            key: key.clone(),
        }),
        _ => None,
    };
    let consul = ConsulSpec {
        address: applied.consul_address.clone(),
        datacenter: applied.datacenter.clone(),
        namespace: applied.consul_namespace.clone(),
        partition: applied.consul_partition.clone(),
        token_secret_ref,
    };
    LeaderElectionSpec {
        labels: LabelsSpec {
            key: applied.label_key.clone(),
            leader: applied.leader.clone(),
            follower: applied.follower.clone(),
        },
        key: Some(applied.key.clone()),
        consul: (consul != ConsulSpec::default()).then_some(consul),
        ..spec.clone()
    }
}

/// The session settings `applied` records, when it records readable ones.
pub fn recorded_session(applied: Option<&AppliedSpec>) -> Option<SessionConfig> {
    let session = applied?.session.as_ref()?;
    Some(SessionConfig {
        ttl: parse_go_duration(&session.ttl).ok()?,
        lock_delay: parse_go_duration(&session.lock_delay).ok()?,
        behavior: match session.behavior.as_str() {
            "release" => Behavior::Release,
            "delete" => Behavior::Delete,
            _ => return None,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::election::spec_edits::needs_withdrawal;
    use std::time::Duration;

    fn with_session(ttl: &str, behavior: &str) -> AppliedSpec {
        AppliedSpec {
            session: Some(AppliedSession {
                ttl: ttl.into(),
                lock_delay: "0s".into(),
                behavior: behavior.into(),
            }),
            ..AppliedSpec::default()
        }
    }

    #[test]
    fn the_recorded_session_settings_are_read_back_or_not_at_all() {
        assert_eq!(
            recorded_session(Some(&with_session("1m30s", "delete"))),
            Some(SessionConfig {
                ttl: Duration::from_secs(90),
                lock_delay: Duration::ZERO,
                behavior: Behavior::Delete,
            })
        );
        assert_eq!(
            recorded_session(Some(&with_session("soon", "delete"))),
            None
        );
        assert_eq!(recorded_session(Some(&with_session("10s", "keep"))), None);
        assert_eq!(recorded_session(Some(&AppliedSpec::default())), None);
        assert_eq!(recorded_session(None), None);
    }

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
