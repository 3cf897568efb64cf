//! What the operator acts with for an election: the labels, key, Consul access and session
//! settings its status records (`status.applied`, see [`super::migrate`]), made from a
//! validated spec, and a spec made back from such a record.

use crate::consul::format_go_duration;
use crate::crd::{
    AppliedSession, AppliedSpec, ConsulSpec, LabelsSpec, LeaderElection, LeaderElectionSpec,
    SecretKeyRef,
};
use crate::election::config::{Behavior, ElectionConfig, Mode};

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
