//! The plan loop's side of a reconcile against the API server and Consul: what the loop
//! starts from, the reads of its first look, the world each plan observes, each action the
//! election hands out (its outcome reported back), and the status write. The election
//! ([`Election`]) decides what comes next and what each outcome means.

use std::sync::Arc;

use kube::Resource;
use tokio::time::Instant;

use super::pod_writes::PodWrites;
use super::status_write::{self, Basis};
use crate::Error;
use crate::consul::QueryOptions;
use crate::consul::{ConsulClient, ConsulError};
use crate::context::Context;
use crate::crd::LeaderElection;
use crate::election::config::{ElectionConfig, ElectionKey};
use crate::election::first_look::{KeyRead, Look, SessionRead};
use crate::election::key_value;
use crate::election::machine::{Election, Opening};
use crate::election::observe::LockView;
use crate::election::plan::{Action, ElectionEvent};
use crate::election::plan_loop::Answer;
use crate::election::pod_patch::PodPatch;
use crate::election::report;
use crate::election::status_change::StatusChange;
use crate::inputs::{self, plan_loop::Pods, shared::shared_pod};
use crate::observers::sessions::found_settings;

/// Flags written with every acquisition and release: marks the key as an elector lock.
pub const LOCK_FLAGS: u64 = 0x0065_6c65_6374_6f72;

/// What one reconcile's plan loop works with.
pub struct Round<'a> {
    le: &'a LeaderElection,
    key: &'a ElectionKey,
    config: Arc<ElectionConfig>,
    consul: ConsulClient,
    ctx: &'a Context,
    pod_writes: PodWrites<'a>,
    pods: Pods,
    lock: LockView,
    /// The status the plans decide from was read from: what their status writes test.
    basis: Basis,
}

impl<'a> Round<'a> {
    /// Reads what the plan loop of `le` starts from: its pods, its status, its switchover
    /// request (removing one decided before), and whether the session manager holds its
    /// session.
    pub async fn open(
        le: &'a LeaderElection,
        key: &'a ElectionKey,
        config: Arc<ElectionConfig>,
        consul: ConsulClient,
        ctx: &'a Context,
    ) -> (Round<'a>, Opening) {
        let start = inputs::plan_loop::start(le, key, ctx, &config);
        let recorded = report::recorded(&start.status);
        let mut removal_failed = false;
        let last = recorded.last_switchover.as_ref();
        let switchover = match super::switchover::pending(ctx, key, le, last).await {
            Ok(request) => request,
            Err(error) => {
                tracing::warn!(election = %key, %error, "cannot remove a decided switchover request");
                removal_failed = true;
                None
            }
        };
        let round = Round {
            le,
            key,
            config,
            consul,
            ctx,
            pod_writes: PodWrites::new(ctx, key, true),
            pods: start.pods,
            lock: LockView::Unknown,
            basis: Basis::of(&start.status),
        };
        let opening = Opening {
            recorded,
            switchover,
            removal_failed,
            adopting: start.adopting,
        };
        (round, opening)
    }

    /// Performs a read or a take-over of the loop's first look, and reports its outcome.
    pub async fn look(&mut self, look: Look, election: &mut Election) {
        let (ctx, key, consul) = (self.ctx, self.key, &self.consul);
        match look {
            Look::ReadKey(read) => {
                // Without retries: the watch retries, and a Fence deadline must not wait for a
                // backoff.
                let direct = consul.without_retries();
                let read = match read {
                    KeyRead::Fresh => ctx.locks.refresh(key, &direct, &self.config.key).await,
                    KeyRead::Watched => match ctx.locks.lock(key) {
                        LockView::Unknown => {
                            // The group's first answer if under way, else a direct read.
                            ctx.locks.current(key, &direct, &self.config.key).await
                        }
                        cached => Ok(cached),
                    },
                };
                let read = read.map_err(|error| Error::from(error).consul_refusal());
                // A key that cannot be read is known no more: not as it was before a write.
                self.lock = read.clone().unwrap_or(LockView::Unknown);
                if let Some(event) = election.key_read(read) {
                    self.publish(&event);
                }
            }
            Look::ReadSession(session) => {
                let read = match consul.session_info(&session, QueryOptions::default()).await {
                    Ok(found) => {
                        found
                            .value
                            .map_or(SessionRead::Missing, |info| SessionRead::Found {
                                settings: found_settings(&info),
                                name: info.name,
                            })
                    }
                    Err(error) => {
                        tracing::warn!(election = %key, session, %error, "reading a session to adopt failed");
                        SessionRead::Missing
                    }
                };
                if let Some(why) = election.session_read(read) {
                    tracing::info!(election = %key, session, why = why.reason(), "leaving alone a session found after a start");
                }
            }
            Look::Adopt { session, pod, uid } => {
                let outcome = match ctx.sessions.adopt(key, consul, &session, &pod, &uid).await {
                    Ok(adopted) => {
                        if adopted {
                            tracing::info!(election = %key, session, pod, "adopted session");
                        }
                        Ok(adopted)
                    }
                    Err(error) => {
                        tracing::warn!(election = %key, %error, "adopting a session failed");
                        Err(())
                    }
                };
                election.adopted(outcome);
            }
        }
    }

    /// Writes the status of the election's last plan, as far as it was carried out.
    pub async fn write_status(&self, election: &Election) -> Result<(), Error> {
        let Some(spec_valid) = election.spec_valid() else {
            return Err(Error::InvalidStatus(
                "a status to write without a label-key check".into(),
            ));
        };
        let Some(plan) = election.last_plan() else {
            return Ok(());
        };
        let labelled = inputs::plan_loop::labelled_leader(&self.pods, &self.config.labels);
        let labelled = labelled.as_deref();
        let change = StatusChange::Decided {
            plan,
            labelled,
            spec_valid,
        };
        self.write(change).await.map(|_| ())
    }

    /// Writes `change`, based on the status the plans decide from.
    async fn write(&self, change: StatusChange<'_>) -> Result<Basis, Error> {
        let basis = Some(self.basis);
        status_write::write(self.le, self.ctx, Some(&self.config), change, basis).await
    }

    /// Executes `action` and reports its outcome to `election`; returns the failure.
    pub async fn act(&mut self, action: Action, election: &mut Election) -> Result<(), Error> {
        let (answer, failure) = match self.execute(action, election).await {
            Ok(answer) => (answer, None),
            Err(error) => {
                let answer = error
                    .consul_refusal()
                    .map_or(Answer::Failed, Answer::Refused);
                (answer, Some(error))
            }
        };
        if let Some(event) = election.handle(answer, Instant::now()) {
            self.publish(&event);
        }
        if let Some(elected) = election.poll_elected() {
            if elected.transition {
                self.ctx.metrics.leader_transition();
            }
            if let Some(after) = elected.after_move {
                self.ctx.metrics.leader_elected(after);
            }
        }
        failure.map_or(Ok(()), Err)
    }

    /// Observes the world and lets the election plan from it.
    pub fn observe(&mut self, election: &mut Election) {
        let (key, ctx, config) = (self.key, self.ctx, &self.config);
        inputs::plan_loop::plan(election, key, ctx, config, &self.pods, &self.lock);
    }

    async fn execute(&mut self, action: Action, election: &Election) -> Result<Answer, Error> {
        tracing::debug!(election = %self.key, ?action, "executing");
        match action {
            Action::RecordToken {
                uid,
                fencing_token,
                whole,
            } => {
                // The action comes from this plan; without it nothing may be labelled.
                let (Some(plan), Some(spec_valid)) = (election.last_plan(), election.spec_valid())
                else {
                    return Err(Error::InvalidStatus(
                        "a fencing token to record without the plan it belongs to".into(),
                    ));
                };
                let token = StatusChange::Token {
                    plan,
                    uid: &uid,
                    token: fencing_token,
                    whole,
                    spec_valid,
                };
                self.basis = self.write(token).await?;
                let status = self.ctx.caches.current_status(self.le);
                Ok(Answer::StatusWritten(Box::new(report::recorded(&status))))
            }
            pod_action @ (Action::LabelFollower { .. }
            | Action::Unlabel { .. }
            | Action::LabelLeader { .. }
            | Action::AnnotateHandover { .. }
            | Action::ClearHandover { .. }) => self.patch_pod(&pod_action).await,
            Action::Release { session } => {
                let value = match &self.lock {
                    LockView::Held { value, .. } => value.clone().unwrap_or_default(),
                    _ => Vec::new(),
                };
                match self
                    .consul
                    .kv_release(&self.config.key, &session, &value, LOCK_FLAGS)
                    .await
                {
                    Ok(_) => Ok(Answer::Released),
                    Err(ConsulError::InvalidSession { .. }) => {
                        self.session_gone(&session);
                        Ok(Answer::SessionGone)
                    }
                    Err(error) => Err(error.into()),
                }
            }
            Action::DestroySession { .. } => {
                self.ctx.sessions.destroy(self.key, &self.consul).await?;
                Ok(Answer::Done)
            }
            Action::ForgetSession => {
                self.ctx.sessions.forget(self.key);
                Ok(Answer::Done)
            }
            Action::CreateSession { pod, uid } => {
                self.ctx
                    .sessions
                    .create(
                        self.key,
                        &self.consul,
                        &self.ctx.settings.owner,
                        &pod,
                        &uid,
                        &self.config.session,
                    )
                    .await?;
                Ok(Answer::Done)
            }
            Action::ConfirmSession { session } => match self.consul.renew_session(&session).await {
                Ok(_) => Ok(Answer::Done),
                Err(ConsulError::SessionNotFound { .. }) => {
                    self.session_gone(&session);
                    Ok(Answer::SessionGone)
                }
                Err(error) => Err(error.into()),
            },
            Action::Acquire { session, pod } => self.acquire(&session, &pod).await,
            Action::RecordSwitchover { record, decides } => {
                if let Some(request) = &decides {
                    // Decided from here on, even if this write or the removal fails.
                    self.ctx.caches.written.request_deciding(self.key, request);
                }
                self.basis = self.write(StatusChange::Switchover(&record)).await?;
                Ok(Answer::Done)
            }
            Action::ClearSwitchover { request } => {
                // Decided from here on, even if the removal fails.
                self.ctx.caches.written.request_deciding(self.key, &request);
                super::switchover::clear_request(self.ctx, self.key, &request).await?;
                Ok(Answer::RequestCleared)
            }
            Action::Emit(event) => {
                self.publish(&event);
                Ok(Answer::Done)
            }
        }
    }

    /// Sends the pod patch of `action` ([`PodPatch::of`]) and plans on from the pod as
    /// patched.
    async fn patch_pod(&mut self, action: &Action) -> Result<Answer, Error> {
        let (labels, me) = (&self.config.labels, self.key.name.as_str());
        let (pods, ctx) = (&self.pods, self.ctx);
        let shared = |name: &str, to_leader: bool| {
            let (pod, _) = pods.get(name)?;
            Some(shared_pod(ctx, me, &labels.key, pod, to_leader))
        };
        let Some(patch) = PodPatch::of(action, labels, me, shared) else {
            return Err(Error::InvalidStatus(format!("{action:?} patches no pod")));
        };
        let patched = self
            .pod_writes
            .send(&patch)
            .await
            .map_err(Error::kube("patch pod"))?;
        let selected = self.pods.get(&patch.pod).is_some_and(|(_, s)| *s);
        self.pods.insert(patch.pod, (patched, selected));
        Ok(Answer::Done)
    }

    async fn acquire(&mut self, session: &str, pod: &str) -> Result<Answer, Error> {
        let value = self.lock_value(pod);
        match self
            .consul
            .kv_acquire(&self.config.key, session, &value, LOCK_FLAGS)
            .await
        {
            Ok(acquired) => Ok(Answer::Acquired(acquired)),
            Err(ConsulError::InvalidSession { .. }) => {
                self.session_gone(session);
                Ok(Answer::SessionGone)
            }
            Err(error) => Err(error.into()),
        }
    }

    /// Consul answered `invalid session` for the operator's session: it was invalidated
    /// (TTL expiry, destroyed from outside) and the renewal loop has not noticed yet. Mark it
    /// lost so the next plan handles it as Consul intends (SessionLost, lock-delay waited
    /// out, a new session), instead of failing the reconcile and retrying with a dead
    /// session until the next renewal reports the loss.
    fn session_gone(&mut self, session: &str) {
        if self.ctx.sessions.mark_lost(self.key, session) {
            tracing::info!(election = %self.key, session, "consul no longer has the session");
        }
    }

    /// The key's value for `pod` ([`key_value::value_for`]).
    fn lock_value(&self, pod: &str) -> Vec<u8> {
        let holding = inputs::plan_loop::holding(&self.pods, pod);
        let owner = &self.ctx.settings.owner;
        key_value::value_for(holding, self.key, owner, self.ctx.wall_now())
    }

    fn publish(&self, event: &ElectionEvent) {
        if let Some(cause) = event.fenced {
            self.ctx.metrics.fenced(cause);
        }
        let election = self.le.object_ref(&());
        let pod = event
            .pod
            .as_ref()
            .and_then(|p| inputs::plan_loop::pod_reference(&self.pods, p));
        // Each names the other as its related object. kube's recorder folds events into
        // one series by type, reason and objects, not by note: without the pod, "pod B is
        // leader" on the election would count as a repeat of an earlier "pod A is leader"
        // and show A's note.
        self.ctx
            .publish_election_event(event, "Elect", &election, pod.clone());
        if let Some(pod) = pod {
            self.ctx
                .publish_election_event(event, "Elect", &pod, Some(election));
        }
    }
}
