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

use std::time::Duration;

use kube::Resource;

use super::act::LOCK_FLAGS;
use super::pod_writes::PodWrites;
use crate::Error;
use crate::cache::keys::election_key;
use crate::consul::{ConsulClient, QueryOptions};
use crate::consul_access;
use crate::context::Context;
use crate::crd::LeaderElection;
use crate::election::cleanup_deadline::gave_up;
use crate::election::config::{ElectionKey, LabelConfig};
use crate::election::machine::{GiveUp, Left};
use crate::election::pod_patch::{PodPatch, PodRole};
use crate::election::unusable::UnusableLabel;
use crate::election::withdrawal::{self, Performed, SessionToEnd, Step};
use crate::inputs::{self, shared::shared_pod, withdrawal::ActedOn};

/// Performs an election's withdrawal steps on the election as the operator acted on it.
pub struct Withdrawer {
    acted: ActedOn,
    key: ElectionKey,
    /// The election's own Consul client, opened at the first Consul step (`Some(None)`: its
    /// access cannot be used).
    client: Option<Option<ConsulClient>>,
}

impl Withdrawer {
    /// Reads what `le` left, for [`crate::election::machine::Election::left`].
    pub fn read(le: &LeaderElection, ctx: &Context) -> Result<(Left, Withdrawer), Error> {
        let key = election_key(le)?;
        let (left, acted) = inputs::withdrawal::left(le, &key, ctx);
        let withdrawer = Withdrawer {
            acted,
            key,
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
                let key = &self.acted.consul_key;
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
        let opened = match consul_access::client_for(&self.acted.le, &self.acted.consul_key, ctx)
            .await
        {
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
        let Some((view, pod)) = self.acted.pods.iter().find(|(view, _)| view.pod == name) else {
            return Ok(());
        };
        let labels = LabelConfig {
            key: self.acted.label_key.clone(),
            leader: String::new(),
            follower: String::new(),
        };
        let (me, role) = (self.key.name.as_str(), PodRole::None);
        let shared = shared_pod(ctx, me, &labels.key, pod, false);
        // The withdrawal does not plan again on the pod: its own event may wake it.
        let writes = PodWrites::new(ctx, &self.key, false);
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
