//! Rule 7: deleting a LeaderElection (and an election yielding to an older conflicting one)
//! takes the leader label off first, then releases the key and destroys the session, then
//! removes the operator's remaining labels and annotations from every pod it labelled. In
//! Observe mode nothing is written to Consul.
//!
//! A pod patch that fails stops the cleanup before Consul is touched (retried), so a pod
//! never carries the leader label without the lock. Consul that cannot be reached does not
//! hold the deletion up for ever: the labels come off at once, the release and destroy are
//! retried with a growing delay, and [`Settings::consul_cleanup_bound`] after the deletion
//! (or at once when the election carries [`SKIP_CONSUL_CLEANUP_ANNOTATION`] = `"true"`) the
//! operator gives up on Consul, says in a Warning event what it left there, and lets the
//! object go.
//!
//! [`Settings::consul_cleanup_bound`]: super::Settings::consul_cleanup_bound

use std::sync::Arc;
use std::time::Duration;

use kube::api::Api;
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};

use super::act::LOCK_FLAGS;
use super::context::Context;
use super::{consul_access, sharing};
use crate::Error;
use crate::cache::keys::election_key;
use crate::cache::views as observe;
use crate::consul::{ConsulClient, QueryOptions, parse_go_duration};
use crate::crd::{LeaderElection, SKIP_CONSUL_CLEANUP_ANNOTATION, default_key};
use crate::election::cleanup_deadline::{Deadline, deadline, gave_up};
use crate::election::config::{ElectionKey, LabelConfig};
use crate::election::observe::SessionView;
use crate::election::unusable::{
    UnusableLabel, UnusableLock, judged_ttl, session_unconfirmed_since, unusable_label,
};
use crate::election::withdrawal::{self, LabelledPod, Performed, SessionToEnd, Sessions, Step};
use crate::k8s::{self, Pod, PodRole};

/// What the operator wrote on the election's pods, as far as it can still tell.
struct Labelled {
    /// The label key.
    key: String,
    /// The follower value; `None` when the spec cannot be read. Every labelled pod not
    /// carrying it is treated as a possible leader: also one still carrying a leader value
    /// the spec has since replaced.
    follower: Option<String>,
}

/// What an election left on its pods and in Consul: as the status recorded it (the values
/// the operator acted with, see [`super::migrate`]), else as the spec says.
pub struct Footprint {
    /// The election with the labels, key and Consul access it was acted on with.
    le: LeaderElection,
    /// Its labels.
    labelled: Labelled,
    /// Its Consul key.
    consul_key: String,
    /// Whether the operator may hold a session for it (not in Observe mode).
    pub managed: bool,
}

impl Footprint {
    /// As the pure withdrawal sees it.
    fn view(&self) -> withdrawal::Footprint<'_> {
        withdrawal::Footprint {
            follower: self.labelled.follower.as_deref(),
            managed: self.managed,
        }
    }

    /// The footprint of `le` ([`withdrawal::acted_with`]).
    pub fn of(le: &LeaderElection, ctx: &Context) -> Footprint {
        let config = crate::crd::validate(le).ok();
        let holds_session = election_key(le).is_ok_and(|key| ctx.sessions.view(&key).is_some());
        let applied = ctx.caches.current_status(le).applied;
        let (namespace, name) = (le.namespace().unwrap_or_default(), le.name_any());
        let acted = withdrawal::acted_with(
            applied.as_ref(),
            config.as_ref(),
            holds_session,
            default_key(&namespace, &name),
        );
        let mut acted_on = le.clone();
        if let Some(applied) = &applied {
            acted_on.spec = crate::crd::applied::with_applied(&le.spec, applied);
        }
        Footprint {
            le: acted_on,
            labelled: Labelled {
                key: acted.label_key,
                follower: acted.follower,
            },
            consul_key: acted.consul_key,
            managed: acted.managed,
        }
    }
}

/// What [`withdraw`] left to do.
pub struct Withdrawal {
    /// The election's key in Consul.
    consul_key: String,
    /// How releasing the key and destroying the session went (the labels are off anyway).
    consul: Result<(), Error>,
}

/// Takes an election off its pods and out of Consul in the order
/// [`crate::election::withdrawal::Withdrawal`] decides (rule 7). A pod patch that fails stops
/// it (`Err`), before Consul when it was a leader label; Consul failing does not stop the
/// labels from coming off, and is reported in the [`Withdrawal`]. Used on deletion, by an
/// election that must yield to an older one, and before acting with changed labels, key or
/// Consul access. Nothing is written to Consul unless the footprint is `managed`.
pub async fn withdraw(footprint: &Footprint, ctx: &Context) -> Result<Withdrawal, Error> {
    let le = &footprint.le;
    let key = election_key(le)?;
    let sessions = Sessions {
        held: ctx.sessions.view(&key).map(|s| s.id),
        recorded: ctx
            .caches
            .current_status(le)
            .leader_or_last()
            .and_then(|l| l.session_id.clone()),
        owner: ctx.settings.owner.clone(),
        election: key,
    };
    let consul = execute(footprint, ctx, |footprint, pods| {
        withdrawal::Withdrawal::whole(footprint, pods, sessions)
    })
    .await?;
    Ok(Withdrawal {
        consul_key: footprint.consul_key.clone(),
        consul,
    })
}

/// Performs the withdrawal `decide` makes for the pods the election labelled, reporting each
/// step's outcome to it: `Err` when a pod patch failed (it ended the withdrawal), else the
/// outcome of the Consul steps.
async fn execute(
    footprint: &Footprint,
    ctx: &Context,
    decide: impl FnOnce(withdrawal::Footprint<'_>, &[LabelledPod]) -> withdrawal::Withdrawal,
) -> Result<Result<(), Error>, Error> {
    let le = &footprint.le;
    let key = election_key(le)?;
    let pods = labelled_pods(le, ctx, &footprint.labelled.key);
    let views: Vec<LabelledPod> = pods.iter().map(|(view, _)| view.clone()).collect();
    let mut withdrawal = decide(footprint.view(), &views);
    let (mut consul, mut patch, mut client) = (Ok(()), Ok(()), None);
    while let Some(step) = withdrawal.poll() {
        let in_consul = step.in_consul();
        let performed = match step {
            Step::Unlabel { pod, .. } => unlabel(le, ctx, &footprint.labelled, &pods, &pod)
                .await
                .map(|()| Performed::Done),
            Step::Forget => {
                ctx.sessions.forget(&key);
                Ok(Performed::Done)
            }
            step => match opened(&mut client, le, &key, &footprint.consul_key, ctx).await {
                Ok(Some(client)) => perform(step, &key, &footprint.consul_key, &client, ctx).await,
                Ok(None) => Ok(Performed::NoAccess),
                Err(error) => Err(error),
            },
        };
        withdrawal.done(performed.unwrap_or_else(|error| {
            *(if in_consul { &mut consul } else { &mut patch }) = Err(error);
            Performed::Failed
        }));
    }
    patch.map(|()| consul)
}

/// The election's own Consul client, opened at a withdrawal's first Consul step; `None` when
/// its access cannot be used. Never the operator's own client instead: that would send its
/// token (or release keys) where this election was never allowed to reach.
async fn opened(
    client: &mut Option<Option<ConsulClient>>,
    le: &LeaderElection,
    key: &ElectionKey,
    consul_key: &str,
    ctx: &Context,
) -> Result<Option<ConsulClient>, Error> {
    if let Some(client) = client {
        return Ok(client.clone());
    }
    let opened = match consul_access::client_for(le, consul_key, ctx).await {
        Ok(consul) => Some(consul),
        Err(consul_access::AccessProblem::Invalid(problem)) => {
            tracing::warn!(election = %key, %problem, "cleanup without Consul: the election has no usable Consul access");
            None
        }
        Err(consul_access::AccessProblem::Failed(error)) => return Err(error),
    };
    Ok(client.insert(opened).clone())
}

/// Performs a Consul step of a withdrawal of the election's key `consul_key`.
async fn perform(
    step: Step,
    key: &ElectionKey,
    consul_key: &str,
    consul: &ConsulClient,
    ctx: &Context,
) -> Result<Performed, Error> {
    match step {
        Step::ReadSession(id) => {
            let info = consul.session_info(&id, QueryOptions::default()).await?;
            return Ok(Performed::SessionNamed(info.value.map(|info| info.name)));
        }
        Step::Release { session } => {
            consul
                .kv_release(consul_key, &session, &[], LOCK_FLAGS)
                .await?;
        }
        Step::Destroy(SessionToEnd::Held(_)) => ctx.sessions.destroy(key, consul).await?,
        Step::Destroy(SessionToEnd::Recorded(id)) => consul.destroy_session(&id).await?,
        Step::Unlabel { .. } | Step::Forget => {
            return Err(Error::InvalidStatus(format!(
                "{step:?} is not a Consul step"
            )));
        }
    }
    Ok(Performed::Done)
}

/// After a [`withdraw`] of `le`: when Consul failed, asks for a retry with a growing delay
/// (`Err`), or gives up on Consul (the bound after a deletion passed, or the annotation says
/// so) with a Warning event naming what was left there.
pub async fn settle_consul(
    le: &LeaderElection,
    key: &ElectionKey,
    ctx: &Context,
    withdrawal: Withdrawal,
) -> Result<(), Error> {
    let Err(error) = withdrawal.consul else {
        return Ok(());
    };
    match consul_deadline(le, ctx) {
        Deadline::RetryIn(delay) => Err(Error::CleanupPending {
            retry_after: delay,
            source: Box::new(error),
        }),
        Deadline::GiveUp(why) => {
            give_up(le, key, &withdrawal.consul_key, ctx, why, &error);
            Ok(())
        }
    }
}

/// Cleans up after `le`; idempotent (a failure is retried by the finalizer helper).
pub async fn cleanup(le: &LeaderElection, ctx: &Context) -> Result<Action, Error> {
    let key = election_key(le)?;
    ctx.locks.unwatch(&key);
    let withdrawal = withdraw(&Footprint::of(le, ctx), ctx).await?;
    settle_consul(le, &key, ctx, withdrawal).await?;
    ctx.caches.written.remember_status(le, None);
    // Gone: nothing decides for it again.
    ctx.caches.written.forget_election(&key);
    Ok(Action::await_change())
}

/// Rule 2 for an election the operator cannot act on (invalid spec, unusable Consul access,
/// waiting for a younger election; see [`crate::election::unusable`]): its leader label goes
/// once the key is read lost, or went unconfirmed for a TTL. Returns when to look again, if
/// the label stays for now.
///
/// With `in_use_refused` (the Consul access the session was created with is the one now
/// refused: a token Secret that withdrew its opt-in or is gone, an address or datacenter no
/// longer allowed), that access is not used any more: the session is no longer renewed and the
/// key no longer watched, so the label goes a TTL after the session's last renewal.
pub async fn fence_unusable(
    le: &LeaderElection,
    key: &ElectionKey,
    ctx: &Context,
    in_use_refused: bool,
    written_since_read: bool,
) -> Result<Option<Duration>, Error> {
    let session = ctx.sessions.view(key);
    if in_use_refused {
        ctx.sessions.forget(key);
        ctx.locks.unwatch(key);
    }
    let verdict = judge_label(
        le,
        key,
        ctx,
        session.as_ref(),
        Known {
            in_use_refused,
            written_since_read,
        },
        unusable_label,
    );
    fence_when(le, ctx, verdict).await
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
            // Only labels: fencing plans no Consul step.
            execute(&Footprint::of(le, ctx), ctx, withdrawal::Withdrawal::fence).await??;
            Ok(None)
        }
    }
}

/// What a rule 2 judgement of an election that cannot act knows beside the caches.
#[derive(Debug, Clone, Copy)]
pub struct Known {
    /// The Consul access the session was created with is the one refused.
    pub in_use_refused: bool,
    /// This process wrote the key since it last read it back
    /// ([`crate::election::machine::Election::key_written_since_read`]).
    pub written_since_read: bool,
}

/// `judge` (a rule 2 judgement of [`crate::election::unusable`]) applied to what this process
/// knows of `le`'s lock now, `session` being the election's session as this process holds it.
pub fn judge_label(
    le: &LeaderElection,
    key: &ElectionKey,
    ctx: &Context,
    session: Option<&SessionView>,
    known: Known,
    judge: impl FnOnce(&UnusableLock<'_>, tokio::time::Instant, Duration) -> UnusableLabel,
) -> UnusableLabel {
    let now = tokio::time::Instant::now();
    let started_at = ctx.caches.written.started_at();
    let session_unconfirmed_since =
        session_unconfirmed_since(session.map(|s| s.health), known.in_use_refused, started_at);
    let status = ctx.caches.current_status(le);
    let recorded_session = status.leader_or_last().and_then(|l| l.session_id.clone());
    let lock = ctx.locks.lock(key);
    let lock = UnusableLock {
        lock: &lock,
        session: session
            .map(|s| s.id.as_str())
            .or(recorded_session.as_deref()),
        read_at: ctx.locks.read_at(key),
        session_unconfirmed_since,
        started_at,
        written_since_read: known.written_since_read,
    };
    let applied_ttl = status
        .applied
        .as_ref()
        .and_then(|applied| applied.session.as_ref())
        .and_then(|s| parse_go_duration(&s.ttl).ok());
    let ttl = judged_ttl(applied_ttl, session.map(|s| s.ttl));
    judge(&lock, now, ttl)
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

/// Gives pod `name` of `pods` no role under the election's label key (a pod gone meanwhile
/// needs nothing).
async fn unlabel(
    le: &LeaderElection,
    ctx: &Context,
    labelled: &Labelled,
    pods: &[(LabelledPod, Arc<Pod>)],
    name: &str,
) -> Result<(), Error> {
    let Some((view, pod)) = pods.iter().find(|(view, _)| view.pod == name) else {
        return Ok(());
    };
    let election = le.name_any();
    let labels = LabelConfig {
        key: labelled.key.clone(),
        leader: String::new(),
        follower: String::new(),
    };
    let pods_api = Api::namespaced(ctx.client.clone(), &le.namespace().unwrap_or_default());
    let annotations = sharing::annotations_for(ctx, &election, &labels.key, pod, PodRole::None);
    match sharing::set_role(
        &pods_api,
        name,
        &view.uid,
        &labels,
        &election,
        PodRole::None,
        annotations,
    )
    .await
    {
        Ok(patched) => {
            // The cleanup does not plan again on the pod: its own event may wake it.
            ctx.caches.written.remember_pod(&Arc::new(patched), None);
            Ok(())
        }
        Err(kube::Error::Api(s)) if s.is_not_found() => Ok(()),
        Err(error) => Err(Error::kube("patch pod")(error)),
    }
}

/// When to try Consul again for `le`, or why not any more ([`deadline`], on this instant).
fn consul_deadline(le: &LeaderElection, ctx: &Context) -> Deadline {
    deadline(
        le.annotations()
            .get(SKIP_CONSUL_CLEANUP_ANNOTATION)
            .map(String::as_str),
        le.metadata.deletion_timestamp.as_ref().map(|t| t.0),
        ctx.wall_now(),
        ctx.settings.consul_cleanup_bound,
    )
}

/// Stops waiting for Consul: the session is no longer renewed (it expires after its TTL
/// unless the key was released), and a Warning event names what was left there.
fn give_up(
    le: &LeaderElection,
    key: &ElectionKey,
    consul_key: &str,
    ctx: &Context,
    why: String,
    error: &Error,
) {
    let session = ctx.sessions.view(key).map(|s| s.id).or_else(|| {
        ctx.caches
            .current_status(le)
            .leader_or_last()
            .and_then(|l| l.session_id.clone())
    });
    ctx.sessions.forget(key);
    let event = gave_up(consul_key, session.as_deref(), &why, &error.to_string());
    tracing::warn!(election = %key, "{}", event.note);
    ctx.publish_election_event(&event, "Cleanup", &le.object_ref(&()), None);
}
