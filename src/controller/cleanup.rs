//! The withdrawal's side against the API server and Consul (rule 7; the machine decides it,
//! see [`crate::election::withdrawal`]): what the election left on its pods and in Consul,
//! each step performed through the election's own Consul access, giving up on Consul when the
//! machine says so. Also rule 2 for an election the operator cannot act on: its leader labels
//! go when [`crate::election::unusable`] says so.
//!
//! Consul that cannot be reached does not hold a deletion up for ever: the labels come off at
//! once, the release and destroy are retried with a growing delay, and
//! [`Settings::consul_cleanup_bound`] after the deletion (or at once when the election carries
//! [`SKIP_CONSUL_CLEANUP_ANNOTATION`] = `"true"`) the operator gives up on Consul, says in a
//! Warning event what it left there, and lets the object go.
//!
//! [`Settings::consul_cleanup_bound`]: crate::context::Settings::consul_cleanup_bound
//! [`SKIP_CONSUL_CLEANUP_ANNOTATION`]: crate::crd::SKIP_CONSUL_CLEANUP_ANNOTATION

use std::sync::Arc;
use std::time::Duration;

use kube::{Resource, ResourceExt};

use super::act::LOCK_FLAGS;
use super::pod_writes::PodWrites;
use crate::Error;
use crate::cache::keys::election_key;
use crate::cache::views as observe;
use crate::consul::{ConsulClient, QueryOptions, parse_go_duration};
use crate::consul_access;
use crate::context::Context;
use crate::crd::{LeaderElection, SKIP_CONSUL_CLEANUP_ANNOTATION, default_key};
use crate::election::cleanup_deadline::gave_up;
use crate::election::config::{ElectionKey, LabelConfig};
use crate::election::machine::{ConsulWait, GiveUp, Left};
use crate::election::pod_patch::{PodPatch, PodRole};
use crate::election::unusable::{LockFacts, UnusableLabel};
use crate::election::withdrawal::{
    self, LabelledPod, Performed, SessionToEnd, Sessions, Step, acted_with,
};
use crate::k8s::{self, Pod};

/// Performs an election's withdrawal steps: what it left is read once, as the status recorded
/// the values the operator acted with (see [`crate::election::spec_edits`]), else as the spec says.
pub struct Withdrawer {
    /// The election with the labels, key and Consul access it was acted on with.
    le: LeaderElection,
    key: ElectionKey,
    /// The label key of its labels.
    label_key: String,
    /// Its Consul key.
    consul_key: String,
    /// The pods it labelled, each with the cached pod.
    pods: Vec<(LabelledPod, Arc<Pod>)>,
    /// The election's own Consul client, opened at the first Consul step (`Some(None)`: its
    /// access cannot be used).
    client: Option<Option<ConsulClient>>,
}

impl Withdrawer {
    /// Reads what `le` left, for [`crate::election::machine::Election::left`].
    pub fn read(le: &LeaderElection, ctx: &Context) -> Result<(Left, Withdrawer), Error> {
        let key = election_key(le)?;
        let config = ctx.caches.validated.of(&key, le).ok();
        let held = ctx.sessions.view(&key).map(|s| s.id);
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
        let withdrawer = Withdrawer {
            le: acted_on,
            key,
            label_key: acted.label_key,
            consul_key: acted.consul_key,
            pods,
            client: None,
        };
        Ok((left, withdrawer))
    }

    /// Performs `step`; a step in Consul answers [`Performed::NoAccess`] when the election's own
    /// access cannot be used.
    pub async fn perform(&mut self, step: Step, ctx: &Context) -> Result<Performed, Error> {
        match step {
            Step::Unlabel { pod, .. } => self.unlabel(ctx, &pod).await?,
            Step::Forget => ctx.sessions.forget(&self.key),
            Step::ReadSession(id) => {
                let Some(consul) = self.client(ctx).await? else {
                    return Ok(Performed::NoAccess);
                };
                let info = consul.session_info(&id, QueryOptions::default()).await?;
                return Ok(Performed::SessionNamed(info.value.map(|info| info.name)));
            }
            Step::Release { session } => {
                let Some(consul) = self.client(ctx).await? else {
                    return Ok(Performed::NoAccess);
                };
                let key = &self.consul_key;
                consul.kv_release(key, &session, &[], LOCK_FLAGS).await?;
            }
            Step::Destroy(session) => {
                let Some(consul) = self.client(ctx).await? else {
                    return Ok(Performed::NoAccess);
                };
                match session {
                    SessionToEnd::Held(_) => ctx.sessions.destroy(&self.key, &consul).await?,
                    SessionToEnd::Recorded(id) => consul.destroy_session(&id).await?,
                }
            }
        }
        Ok(Performed::Done)
    }

    /// The election's own Consul client; `None` when its access cannot be used. Never the
    /// operator's own client instead: that would send its token (or release keys) where this
    /// election was never allowed to reach.
    async fn client(&mut self, ctx: &Context) -> Result<Option<ConsulClient>, Error> {
        if let Some(client) = &self.client {
            return Ok(client.clone());
        }
        let opened = match consul_access::client_for(&self.le, &self.consul_key, ctx).await {
            Ok(consul) => Some(consul),
            Err(consul_access::AccessProblem::Invalid(problem)) => {
                tracing::warn!(election = %self.key, %problem, "withdrawing without Consul: the election has no usable Consul access");
                None
            }
            Err(consul_access::AccessProblem::Failed(error)) => return Err(error),
        };
        Ok(self.client.insert(opened).clone())
    }

    /// Gives pod `name` no role under the election's label key (a pod gone meanwhile needs
    /// nothing).
    async fn unlabel(&self, ctx: &Context, name: &str) -> Result<(), Error> {
        let Some((view, pod)) = self.pods.iter().find(|(view, _)| view.pod == name) else {
            return Ok(());
        };
        let labels = LabelConfig {
            key: self.label_key.clone(),
            leader: String::new(),
            follower: String::new(),
        };
        // The withdrawal does not plan again on the pod: its own event may wake it.
        let writes = PodWrites::new(ctx, &self.key, false);
        let shared = writes.shared(&labels.key, pod, false);
        let (me, role) = (self.key.name.as_str(), PodRole::None);
        let patch = PodPatch::for_role(name, &view.uid, &labels, me, role, Some(shared));
        match writes.send(&patch).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.is_not_found() => Ok(()),
            Err(error) => Err(Error::kube("patch pod")(error)),
        }
    }
}

/// Stops waiting for Consul, as [`Next::GiveUp`] says after `error`: the session is no longer
/// renewed (it expires after its TTL unless the key was released), and a Warning event names
/// what was left there.
///
/// [`Next::GiveUp`]: crate::election::machine::Next::GiveUp
pub fn give_up(
    le: &LeaderElection,
    key: &ElectionKey,
    ctx: &Context,
    give_up: GiveUp,
    error: Option<Error>,
) {
    ctx.sessions.forget(key);
    let error = error.map_or_else(String::new, |error| error.to_string());
    let event = gave_up(
        &give_up.consul_key,
        give_up.session.as_deref(),
        &give_up.why,
        &error,
    );
    tracing::warn!(election = %key, "{}", event.note);
    ctx.publish_election_event(&event, "Cleanup", &le.object_ref(&()), None);
}

/// Carries out rule 2's `verdict` on `le`'s leader label: takes it off for
/// [`UnusableLabel::Fence`] (and returns `None`), else returns when to judge again.
pub async fn fence_when(
    le: &LeaderElection,
    ctx: &Context,
    verdict: UnusableLabel,
) -> Result<Option<Duration>, Error> {
    match verdict {
        UnusableLabel::Keep(recheck) => Ok(Some(recheck)),
        UnusableLabel::Fence => {
            let (left, mut withdrawer) = Withdrawer::read(le, ctx)?;
            // Only labels: fencing plans no Consul step.
            let mut fence = withdrawal::Withdrawal::fence(left.footprint(false), &left.pods);
            while let Some(step) = fence.poll() {
                let performed = withdrawer.perform(step, ctx).await?;
                fence.done(performed);
            }
            Ok(None)
        }
    }
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

/// The pods `le` labelled under `label_key` ([`observe::labelled_by`]), as a withdrawal sees
/// them, each with the cached pod.
fn labelled_pods(
    le: &LeaderElection,
    ctx: &Context,
    label_key: &str,
) -> Vec<(LabelledPod, Arc<Pod>)> {
    observe::pods_of(&ctx.caches, le)
        .into_values()
        .filter(|(pod, _)| observe::labelled_by(&ctx.caches, le, pod))
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
