//! What a withdrawal observes (rule 7): what the election left on its pods and in Consul, as
//! the status recorded the values the operator acted with (see
//! [`crate::election::spec_edits`]), else as the spec says; and, for rule 2 on an election that
//! cannot act, what this process knows of its lock.

use std::sync::Arc;

use kube::ResourceExt;

use crate::cache::views;
use crate::consul::parse_go_duration;
use crate::context::Context;
use crate::crd::{LeaderElection, SKIP_CONSUL_CLEANUP_ANNOTATION, default_key};
use crate::election::config::ElectionKey;
use crate::election::machine::{ConsulWait, Left};
use crate::election::unusable::LockFacts;
use crate::election::withdrawal::{LabelledPod, Sessions, acted_with};
use crate::k8s::{self, Pod};

/// The election as the operator acted on it: what its withdrawal steps work on.
pub struct ActedOn {
    /// The election with the values the operator acted with.
    pub le: LeaderElection,
    /// The label key of its labels.
    pub label_key: String,
    /// Its Consul key.
    pub consul_key: String,
    /// The pods it labelled, each with the cached pod.
    pub pods: Vec<(LabelledPod, Arc<Pod>)>,
}

/// Reads what election `le` (its key `key`) left, for
/// [`crate::election::machine::Election::left`], and what its steps work on.
pub fn left(le: &LeaderElection, key: &ElectionKey, ctx: &Context) -> (Left, ActedOn) {
    let config = ctx.caches.validated.of(key, le).ok();
    let held = ctx.sessions.view(key).map(|s| s.id);
    let status = ctx.caches.current_status(le);
    let acted = acted_with(
        status.applied.as_ref(),
        config.as_deref(),
        held.is_some(),
        default_key(&key.namespace, &key.name),
    );
    let mut acted_on = le.clone();
    if let Some(applied) = &status.applied {
        acted_on.spec = crate::crd::applied::with_applied(&le.spec, applied);
    }
    let pods = labelled_pods(le, ctx, &acted.label_key);
    let left = Left {
        acted: acted.clone(),
        pods: pods.iter().map(|(view, _)| view.clone()).collect(),
        sessions: Sessions {
            held,
            recorded: status.leader_or_last().and_then(|l| l.session_id.clone()),
            owner: ctx.settings.owner.clone(),
            election: key.clone(),
        },
        wait: ConsulWait {
            skip: le
                .annotations()
                .get(SKIP_CONSUL_CLEANUP_ANNOTATION)
                .cloned(),
            deleted_at: le.metadata.deletion_timestamp.as_ref().map(|t| t.0),
            now: ctx.wall_now(),
            bound: ctx.settings.consul_cleanup_bound,
        },
    };
    let acted_on = ActedOn {
        le: acted_on,
        label_key: acted.label_key,
        consul_key: acted.consul_key,
        pods,
    };
    (left, acted_on)
}

/// What this process knows of `le`'s lock now, for a rule 2 judgement of an election that
/// cannot act.
pub fn lock_facts(le: &LeaderElection, key: &ElectionKey, ctx: &Context) -> LockFacts {
    let status = ctx.caches.current_status(le);
    LockFacts {
        lock: ctx.locks.lock(key),
        read_at: ctx.locks.read_at(key),
        held: ctx.sessions.view(key),
        recorded_session: status.leader_or_last().and_then(|l| l.session_id.clone()),
        applied_ttl: status
            .applied
            .as_ref()
            .and_then(|applied| applied.session.as_ref())
            .and_then(|s| parse_go_duration(&s.ttl).ok()),
        started_at: ctx.caches.written.started_at(),
        now: tokio::time::Instant::now(),
    }
}

/// The pods `le` labelled under `label_key` ([`views::labelled_by`]), as a withdrawal sees
/// them, each with the cached pod.
fn labelled_pods(
    le: &LeaderElection,
    ctx: &Context,
    label_key: &str,
) -> Vec<(LabelledPod, Arc<Pod>)> {
    views::pods_of(&ctx.caches, le)
        .into_values()
        .filter(|(pod, _)| views::labelled_by(&ctx.caches, le, pod))
        .filter_map(|(pod, _)| {
            let view = LabelledPod {
                pod: pod.name_any(),
                uid: pod.metadata.uid.clone()?,
                value: k8s::labels_of(&pod).get(label_key).cloned(),
            };
            Some((view, pod))
        })
        .collect()
}
