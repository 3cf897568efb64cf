//! What a withdrawal observes (rule 7): what the election left on its pods and in Consul, as
//! the status recorded the values the operator acted with (see
//! [`crate::election::spec_edits`]), else as the spec says; and, for rule 2 on an election that
//! cannot act, what this process knows of its lock.

use kube::ResourceExt;

use crate::cache::views;
use crate::consul::parse_go_duration;
use crate::context::Context;
use crate::crd::{LeaderElection, SKIP_CONSUL_CLEANUP_ANNOTATION, default_key};
use crate::election::cleanup_deadline;
use crate::election::config::ElectionKey;
use crate::election::machine::{ConsulWait, Left};
use crate::election::unusable::LockFacts;
use crate::election::withdrawal::{LabelledPod, Sessions, acted_with};
use crate::k8s;

/// Reads what election `le` (its key `key`) left, for
/// [`crate::election::machine::Input::Left`], and the election with the values the operator
/// acted with: its withdrawal's Consul steps go through that election's access.
pub fn left(le: &LeaderElection, key: &ElectionKey, ctx: &Context) -> (Left, LeaderElection) {
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
    let pods = labelled_pods(le, ctx, &key.name, &acted.label_key);
    let left = Left {
        acted,
        pods,
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
            deleted_at: le
                .metadata
                .deletion_timestamp
                .as_ref()
                .map(|t| t.0)
                .or_else(|| ctx.releasing()),
            now: ctx.wall_now(),
            bound: cleanup_deadline::bound(
                ctx.releasing().is_some(),
                ctx.settings.consul_cleanup_bound,
            ),
        },
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

/// The pods `le` (named `me`) labelled under `label_key` ([`views::labelled_by`]), as a
/// withdrawal sees them.
fn labelled_pods(
    le: &LeaderElection,
    ctx: &Context,
    me: &str,
    label_key: &str,
) -> Vec<LabelledPod> {
    views::pods_of(&ctx.caches, le)
        .into_values()
        .filter(|(pod, _)| views::labelled_by(&ctx.caches, le, pod))
        .filter_map(|(pod, _)| {
            Some(LabelledPod {
                pod: pod.name_any(),
                uid: pod.metadata.uid.clone()?,
                value: k8s::labels_of(&pod).get(label_key).cloned(),
                shared: super::shared::shared_pod(ctx, me, label_key, &pod),
            })
        })
        .collect()
}
