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
}
