//! The executor: performs each [`Request`] of an election's machine against the API server and
//! Consul, as it is, and reports its [`Outcome`]. Its branches are about I/O only: which client
//! a request goes through, what an answer or an error of the API server or Consul is, what
//! this process remembers it wrote. Also what the machine observes through it: what the plan
//! loop starts from, each plan's world, what a withdrawal finds (read in [`crate::inputs`]).

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use kube::Resource;
use kube::api::Api;
use kube::runtime::controller::Action;
use tokio::sync::watch;
use tokio::time::Instant;

use super::status_write;
use crate::Error;
use crate::consul::{ConsulClient, ConsulError, QueryOptions};
use crate::consul_access::Accesses;
use crate::context::Context;
use crate::crd::status_basis::Basis;
use crate::crd::{FINALIZER, LeaderElection, SWITCHOVER_ANNOTATION};
use crate::election::cleanup_deadline::gave_up;
use crate::election::config::{ElectionConfig, ElectionKey};
use crate::election::first_look::{KeyRead, SessionRead};
use crate::election::key_value;
use crate::election::machine::{Election, GiveUp, Input, Reported};
use crate::election::observe::LockView;
use crate::election::plan::ElectionEvent;
use crate::election::pod_patch::PodPatch;
use crate::election::report;
use crate::election::request::{Kept, Outcome, Request};
use crate::election::status_change::StatusChange;
use crate::inputs::admission::Answer;
use crate::inputs::plan_loop::{self, Pods};
use crate::k8s::{self, Pod};
use crate::observers::sessions::found_settings;

/// Flags written with every acquisition and release: marks the key as an elector lock.
pub const LOCK_FLAGS: u64 = 0x0065_6c65_6374_6f72;

/// Performs the requests of one reconcile of one election.
pub struct Executor<'a> {
    pub(super) le: &'a LeaderElection,
    pub(super) key: &'a ElectionKey,
    pub(super) ctx: &'a Context,
    /// The validated spec (`None`: it is not valid).
    pub config: Option<Arc<ElectionConfig>>,
    /// The Consul accesses: the spec's once admission opened it, the one acted with once a
    /// withdrawal read it.
    pub access: Accesses,
    /// The plan loop's pods, as this reconcile patched them.
    pub(super) pods: Pods,
    /// The key as last read.
    pub(super) lock: LockView,
    /// What status writes are based on once the plan loop opened (before: the status as this
    /// process knows it).
    pub(super) basis: Option<Basis>,
    /// The read of an admission input the machine awaits, and what wakes its wait when a
    /// lock changes.
    pub(super) reading: Option<(BoxFuture<'a, Answer>, watch::Receiver<()>)>,
    /// The error of the request performed last, until the machine says what it means.
    error: Option<Error>,
    /// The failure the reconcile returns, as the machine keeps it.
    failure: Option<Error>,
}

impl<'a> Executor<'a> {
    /// The executor of a reconcile of `le` (its key `key`; `config`: its validated spec).
    pub fn new(
        le: &'a LeaderElection,
        key: &'a ElectionKey,
        ctx: &'a Context,
        config: Option<Arc<ElectionConfig>>,
    ) -> Self {
        Executor {
            le,
            key,
            ctx,
            config,
            access: Accesses::default(),
            pods: Pods::new(),
            lock: LockView::Unknown,
            basis: None,
            reading: None,
            error: None,
            failure: None,
        }
    }

    /// Performs `request` and tells `election` how it went.
    pub async fn perform(&mut self, request: Request, election: &mut Election) {
        let outcome = self.outcome_of(request).await;
        let reported = election.handle(Input::Outcome(outcome), Instant::now());
        self.reported(reported);
    }

    /// Performs `request`: how it went (its error is kept for [`Self::reported`]).
    async fn outcome_of(&mut self, request: Request) -> Outcome {
        let patches_pod = matches!(request, Request::PatchPod { .. });
        let writes_status = matches!(request, Request::WriteStatus(_));
        match self.send(request).await {
            Ok(outcome) => outcome,
            Err(error) => {
                let gone = patches_pod
                    && matches!(&error, Error::Kube { source: kube::Error::Api(s), .. } if s.is_not_found());
                let outcome = match error.consul_refusal() {
                    _ if gone => Outcome::Gone,
                    _ if writes_status => Outcome::StatusFailed {
                        category: error.category(),
                        error: error.to_string(),
                    },
                    Some(refusal) => Outcome::Refused(refusal),
                    None => Outcome::Failed,
                };
                self.error = Some(error);
                outcome
            }
        }
    }

    /// What the machine made of the request performed last: its event is published, and its
    /// error kept when it fails the reconcile.
    fn reported(&mut self, reported: Reported) {
        if let Some(event) = &reported.event {
            self.publish(event, "Elect");
        }
        if let Some(elected) = reported.elected {
            self.ctx.metrics.elected(elected);
        }
        if let Some(why) = reported.left_alone {
            let why = why.reason();
            tracing::info!(election = %self.key, why, "leaving alone a session found after a start");
        }
        match self.error.take() {
            Some(error) if reported.failed => self.keep(error),
            Some(error) => {
                tracing::info!(election = %self.key, %error, "a request failed; the election goes on without it");
            }
            None => {}
        }
    }

    /// Keeps `error` as the reconcile's failure, unless one is kept already.
    pub fn keep(&mut self, error: Error) {
        self.failure.get_or_insert(error);
    }

    /// How the reconcile ends when the machine says it is over: look again after
    /// `look_again`, or fail with the failure kept.
    pub fn stop(&mut self, look_again: Duration) -> Result<Action, Error> {
        self.failure
            .take()
            .map_or(Ok(Action::requeue(look_again)), Err)
    }

    /// The failure of a reconcile that could not clean Consul up yet, retried after `after`.
    pub fn retry_consul(&mut self, after: Duration) -> Error {
        let failure = self.failure.take();
        Error::CleanupPending {
            retry_after: after,
            source: Box::new(
                failure.unwrap_or_else(|| {
                    Error::InvalidStatus("Consul failed without an error".into())
                }),
            ),
        }
    }

    async fn send(&mut self, request: Request) -> Result<Outcome, Error> {
        let (ctx, key) = (self.ctx, self.key);
        match request {
            Request::PatchPod { patch, replans } => self.patch_pod(&patch, replans).await,
            Request::WriteStatus(change) => self.write_status(&change).await,
            Request::ReadKey(read) => self.read_key(read).await,
            Request::ReadSession { session, via } => {
                let Some((consul, _)) = self.access.of(via, ctx).await? else {
                    return Ok(Outcome::NoAccess);
                };
                let found = consul
                    .session_info(&session, QueryOptions::default())
                    .await?;
                let read = found.value.map_or(SessionRead::Missing, |info| {
                    let settings = found_settings(&info);
                    SessionRead::Found {
                        name: info.name,
                        settings,
                    }
                });
                Ok(Outcome::Session(read))
            }
            Request::AdoptSession { session, pod, uid } => {
                let (consul, _) = self.spec_access()?;
                let adopted = ctx
                    .sessions
                    .adopt(key, &consul, &session, &pod, &uid)
                    .await?;
                if adopted {
                    tracing::info!(election = %key, session, pod, "adopted session");
                }
                Ok(Outcome::Adopted(adopted))
            }
            Request::CreateSession { pod, uid } => {
                let (consul, _) = self.spec_access()?;
                let settings = &self
                    .config
                    .as_ref()
                    .ok_or(Error::MissingMetadata("spec"))?
                    .session;
                let owner = &ctx.settings.owner;
                ctx.sessions
                    .create(key, &consul, owner, &pod, &uid, settings)
                    .await?;
                Ok(Outcome::Done)
            }
            Request::RenewSession(session) => {
                let renewed = self.spec_access()?.0.renew_session(&session).await;
                renewed
                    .map(|_| Outcome::Done)
                    .or_else(|error| self.session_gone(&session, error))
            }
            Request::DestroySession { recorded, via } => {
                let Some((consul, _)) = self.access.of(via, ctx).await? else {
                    return Ok(Outcome::NoAccess);
                };
                match recorded {
                    None => ctx.sessions.destroy(key, &consul).await?,
                    Some(id) => consul.destroy_session(&id).await?,
                }
                Ok(Outcome::Done)
            }
            Request::ForgetSession => {
                ctx.sessions.forget(key);
                Ok(Outcome::Done)
            }
            Request::Acquire { session, pod } => {
                let (consul, consul_key) = self.spec_access()?;
                let value = self.lock_value(&pod);
                let acquired = consul.kv_acquire(&consul_key, &session, &value, LOCK_FLAGS);
                acquired
                    .await
                    .map(Outcome::Acquired)
                    .or_else(|error| self.session_gone(&session, error))
            }
            Request::Release {
                session,
                keeps,
                via,
            } => {
                let Some((consul, consul_key)) = self.access.of(via, ctx).await? else {
                    return Ok(Outcome::NoAccess);
                };
                let value = match (keeps, &self.lock) {
                    (Kept::Value, LockView::Held { value, .. }) => {
                        value.clone().unwrap_or_default()
                    }
                    _ => Vec::new(),
                };
                let released = consul.kv_release(&consul_key, &session, &value, LOCK_FLAGS);
                released
                    .await
                    .map(|_| Outcome::Done)
                    .or_else(|error| self.session_gone(&session, error))
            }
            Request::ClearRequest(request) => {
                let api: Api<LeaderElection> = Api::namespaced(ctx.client.clone(), &key.namespace);
                let annotation = SWITCHOVER_ANNOTATION;
                let now = k8s::remove_annotation_if(&api, &key.name, annotation, &request)
                    .await
                    .map_err(Error::kube("clear switchover request"))?;
                // The version without the request: a copy older than it still has it.
                let version = now.and_then(|le| k8s::resource_version(&le.metadata));
                Ok(Outcome::Removed(version))
            }
            Request::Publish(event) => {
                self.publish(&event, "Elect");
                Ok(Outcome::Done)
            }
            Request::Watch => {
                if let (Some(config), Ok((consul, consul_key))) = (&self.config, self.spec_access())
                {
                    ctx.locks
                        .watch(key, &consul, &consul_key, config.session.ttl);
                }
                Ok(Outcome::Done)
            }
            Request::Unwatch => {
                ctx.locks.unwatch(key);
                Ok(Outcome::Done)
            }
            Request::Wake(name) => {
                let namespace = key.namespace.clone();
                ctx.reconcile_soon(&ElectionKey { namespace, name });
                Ok(Outcome::Done)
            }
            Request::RemoveFinalizer => {
                let api: Api<LeaderElection> = Api::namespaced(ctx.client.clone(), &key.namespace);
                k8s::remove_finalizer(&api, &key.name, self.le, FINALIZER)
                    .await
                    .map_err(Error::kube("remove finalizer"))?;
                Ok(Outcome::Done)
            }
        }
    }

    /// Sends `patch` and remembers the pod as written (by the election when it `replans` on
    /// it); the plan loop plans on from the pod as patched.
    async fn patch_pod(&mut self, patch: &PodPatch, replans: bool) -> Result<Outcome, Error> {
        let api: Api<Pod> = Api::namespaced(self.ctx.client.clone(), &self.key.namespace);
        let patched = k8s::patch_pod(&api, patch)
            .await
            .map_err(Error::kube("patch pod"))?;
        let patched = Arc::new(patched);
        let by = replans.then_some(self.key.name.as_str());
        self.ctx.caches.written.remember_pod(&patched, by);
        if let Some((pod, _)) = self.pods.get_mut(&patch.pod) {
            *pod = patched;
        }
        Ok(Outcome::Done)
    }

    /// Writes `change` and answers the status as it now reads.
    async fn write_status(&mut self, change: &StatusChange) -> Result<Outcome, Error> {
        let (ctx, le) = (self.ctx, self.le);
        let config = self.config.as_deref();
        let labelled = config.and_then(|c| plan_loop::labelled_leader(&self.pods, &c.labels));
        let written = status_write::write(le, ctx, config, change, self.basis, labelled).await?;
        if self.basis.is_some() {
            self.basis = Some(written.basis);
        }
        if let Some(event) = written.event {
            self.publish(&event, "Validate");
        }
        let status = ctx.caches.current_status(le);
        Ok(Outcome::StatusWritten(Box::new(report::recorded(&status))))
    }

    /// Reads the key (without retries: the watch retries, and a Fence deadline must not wait
    /// for a backoff); the watch's answer when it has one.
    async fn read_key(&mut self, read: KeyRead) -> Result<Outcome, Error> {
        let (ctx, key) = (self.ctx, self.key);
        let (consul, consul_key) = self.spec_access()?;
        let (direct, consul_key) = (consul.without_retries(), &consul_key);
        let read = match read {
            KeyRead::Fresh => ctx.locks.refresh(key, &direct, consul_key).await,
            KeyRead::Watched => match ctx.locks.lock(key) {
                LockView::Unknown => ctx.locks.current(key, &direct, consul_key).await,
                cached => Ok(cached),
            },
        };
        let read = read.map_err(|error| Error::from(error).consul_refusal());
        // A key that cannot be read is known no more: not as it was before a write.
        self.lock = read.clone().unwrap_or(LockView::Unknown);
        Ok(Outcome::Key(read))
    }

    /// Consul's `error` for a request with the operator's `session`. When it says the session
    /// is gone (invalidated by TTL expiry or destroyed from outside, and the renewal loop has
    /// not noticed yet), it is marked lost, so the next plan handles it as Consul intends
    /// instead of retrying with a dead session.
    fn session_gone(&self, session: &str, error: ConsulError) -> Result<Outcome, Error> {
        let (ConsulError::InvalidSession { .. } | ConsulError::SessionNotFound { .. }) = error
        else {
            return Err(error.into());
        };
        if self.ctx.sessions.mark_lost(self.key, session) {
            tracing::info!(election = %self.key, session, "consul no longer has the session");
        }
        Ok(Outcome::SessionGone)
    }

    /// The key's value for `pod` ([`key_value::value_for`]).
    fn lock_value(&self, pod: &str) -> Vec<u8> {
        let holding = plan_loop::holding(&self.pods, pod);
        let owner = &self.ctx.settings.owner;
        key_value::value_for(holding, self.key, owner, self.ctx.wall_now())
    }

    /// The spec's Consul client and key, which admission opened.
    fn spec_access(&self) -> Result<(ConsulClient, String), Error> {
        let access = self.access.spec().cloned();
        access.ok_or_else(|| Error::InvalidStatus("a Consul request before admission".into()))
    }

    /// Stops waiting for Consul, as [`GiveUp`] says after the failure kept: the session is no
    /// longer renewed (it expires after its TTL unless the key was released), and a Warning
    /// event names what was left there.
    pub fn give_up(&mut self, give_up: GiveUp) {
        self.ctx.sessions.forget(self.key);
        let error = self.failure.take();
        let error = error.map_or_else(String::new, |error| error.to_string());
        let session = give_up.session.as_deref();
        let event = gave_up(&give_up.consul_key, session, &give_up.why, &error);
        tracing::warn!(election = %self.key, "{}", event.note);
        self.publish(&event, "Cleanup");
    }

    /// Publishes `event` on the election, and on the pod it names.
    pub fn publish(&self, event: &ElectionEvent, action: &'static str) {
        let pod = event.pod.as_ref();
        let pod = pod.and_then(|p| plan_loop::pod_reference(&self.pods, p));
        let election = self.le.object_ref(&());
        self.ctx
            .publish_election_event(event, action, election, pod);
    }
}
