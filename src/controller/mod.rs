//! The `LeaderElection` reconcile: observe -> decide (`election::reconcile`,
//! `election::plan_loop`) -> act, in the order of docs/design.md rule 1.
//!
//! [`crate::operator`] runs it: one kube-runtime `Controller` over LeaderElections, woken by
//! pod events, Consul-side changes and the takeover. A reconcile first waits until this
//! replica may write (it holds the Lease, its caches are complete and it adopted this
//! cluster's sessions); until then it returns at once, writing nothing.
//!
//! A reconcile holds the election's machine ([`crate::election::machine::Election`]) and
//! answers what it asks, in the order it asks: admission inputs and the steps before planning
//! (`Inputs`), then what the plan loop starts from, its reads, observations, actions and the
//! status write (`act::Round`), until it says when to look again. An I/O failure ends the
//! reconcile (the machine decides whether the status is still written first); kube-runtime
//! retries it.

mod act;
mod cleanup;
mod gather;
mod pod_writes;
pub(crate) mod status_write;
mod switchover;

use std::sync::Arc;
use std::time::Duration;

use kube::runtime::controller::Action;
use kube::runtime::finalizer;
use kube::{Api, ResourceExt};

use crate::Error;
use crate::cache::keys::election_key;
use crate::cache::views;
use crate::consul::ConsulClient;
use crate::consul_access;
use crate::context::Context;
use crate::crd::{FINALIZER, LeaderElection};
use crate::election::admission::{Access, Input, served_elsewhere};
use crate::election::config::{ElectionConfig, ElectionKey};
use crate::election::label_key_check::check_label_key;
use crate::election::look_again;
use crate::election::machine::{Do, Next, Opening, Start};
use crate::election::reconcile::Found;
use crate::election::status_change::StatusChange;
use crate::election::withdrawal::Performed;
use crate::inputs::{self, admission::Edit};

/// How long after a LeaderElection's deletion (its `metadata.deletionTimestamp`) the operator
/// keeps retrying to release its key and destroy its session in Consul before it gives up,
/// removes the finalizer anyway and says in a Warning event what was left behind: a
/// namespace must never stay Terminating because Consul is unreachable.
pub const CONSUL_CLEANUP_BOUND: Duration = Duration::from_secs(300);

/// Reconciles one election (finalizer first: cleanup on deletion).
pub(crate) async fn reconcile(le: Arc<LeaderElection>, ctx: Arc<Context>) -> Result<Action, Error> {
    if !*ctx.may_write.borrow() {
        // A standby (or a replica still adopting): the takeover reconciles every election.
        return Ok(Action::await_change());
    }
    // Decide nothing on partial caches: right after a (re)start the controller already
    // reconciles the first elections while the pod list is still loading, and a leader
    // missing from the cache would be "moved" (rule 3), a conflicting older election
    // missing from it would be ignored, and a cleanup would skip pods it labelled. This
    // waits only at startup. (Not `Store::wait_until_ready`: its one-shot channel keeps a
    // single waker, so a reconcile waiting next to the readiness probe is never woken.)
    let mut caches = ctx.caches_ready.clone();
    if caches.wait_for(|ready| *ready).await.is_err() {
        // The readiness task is gone: the controller is shutting down.
        return Ok(Action::await_change());
    }
    let _in_flight = ctx.health.reconcile_started();
    let timer = ctx.metrics.count_and_measure();
    let api: Api<LeaderElection> = Api::namespaced(
        ctx.client.clone(),
        &le.namespace().ok_or(Error::MissingMetadata("namespace"))?,
    );
    let result = finalizer(&api, FINALIZER, le, |event| async {
        match event {
            finalizer::Event::Apply(le) => apply(&le, &ctx, false).await,
            finalizer::Event::Cleanup(le) => delete(&le, &ctx).await,
        }
    })
    .await;
    let result = done_when_gone(result).map_err(|e| Error::Finalizer(Box::new(e)));
    timer.finish(result.as_ref().map(|_| ()).map_err(Error::category));
    result
}

/// A cleanup whose finalizer removal found the election gone is done, not failed: the
/// helper removes the finalizer only after the cleanup succeeded, and the election can only
/// be gone once its finalizer went, by an earlier reconcile of the same deletion that saw a
/// newer copy. (Many of those follow a mass deletion; each would count as a failed
/// reconcile, log a warning and be retried for an election that no longer exists.)
fn done_when_gone(
    result: Result<Action, finalizer::Error<Error>>,
) -> Result<Action, finalizer::Error<Error>> {
    match result {
        Err(finalizer::Error::RemoveFinalizer(kube::Error::Api(status)))
            if status.is_not_found() =>
        {
            Ok(Action::await_change())
        }
        other => other,
    }
}

/// A failed reconcile is retried soon; its error was already counted by the reconcile timer.
pub(crate) fn error_policy(le: Arc<LeaderElection>, error: &Error, _ctx: Arc<Context>) -> Action {
    tracing::warn!(
        election = %format!("{}/{}", le.namespace().unwrap_or_default(), le.name_any()),
        category = error.category(),
        "reconcile failed: {error}"
    );
    Action::requeue(error.retry_after().unwrap_or(look_again::ERROR_REQUEUE))
}

/// Withdraws a deleted election (rule 7); once done, nothing decides for it again.
async fn delete(le: &LeaderElection, ctx: &Context) -> Result<Action, Error> {
    let key = election_key(le)?;
    apply(le, ctx, true).await?;
    ctx.caches.written.remember_status(le, None);
    ctx.caches.written.forget_election(&key);
    Ok(Action::await_change())
}

/// Brings one election's pods, session and lock in line with its spec (or, `deleted`, takes
/// it off them): drives the election's machine, performing each request it hands out.
async fn apply(le: &LeaderElection, ctx: &Context, deleted: bool) -> Result<Action, Error> {
    let key = election_key(le)?;
    let validation = ctx.caches.validated.of(&key, le);
    let mut election = ctx.caches.written.hold(&key);
    election.begin(Start {
        spec: validation
            .as_ref()
            .map(|_| ())
            .map_err(|problems| crate::election::report::spec_problems(problems)),
        served_elsewhere: served_elsewhere(
            ctx.caches.current_status(le).served_by.as_deref(),
            &ctx.settings.owner,
        ),
        paused: le.spec.paused,
        token_secret: le
            .spec
            .consul
            .as_ref()
            .is_some_and(|c| c.token_secret_ref.is_some()),
        deleted,
    });
    let mut inputs = Inputs {
        le,
        key: &key,
        ctx,
        config: validation.ok(),
        consul: None,
        edit: None,
    };
    let (mut round, mut withdrawer) = (None, None);
    let mut failure = None;
    loop {
        match election.poll() {
            Next::Gather(input) => {
                let found = inputs.gather(input, election.key_written_since_read());
                election.gathered(found.await?);
            }
            Next::Do(step) => {
                tracing::debug!(election = %key, ?step, why = election.why(), "step");
                inputs.perform(step).await?;
                election.done();
            }
            Next::Judge => election.judged(&inputs::withdrawal::lock_facts(le, &key, ctx)),
            Next::Left => {
                tracing::info!(election = %key, "withdrawing: {}", election.why());
                let (left, reader) = cleanup::Withdrawer::read(le, ctx)?;
                withdrawer = Some(reader);
                election.left(left);
            }
            Next::Withdraw(step) => {
                let Some(withdrawer) = withdrawer.as_mut() else {
                    return Err(Error::InvalidStatus(
                        "a withdrawal step before its read".into(),
                    ));
                };
                let performed = withdrawer.perform(step, ctx).await;
                election.withdrew(performed.unwrap_or_else(|error| {
                    failure = failure.take().or(Some(error));
                    Performed::Failed
                }));
            }
            Next::GiveUp(give_up) => cleanup::give_up(le, &key, ctx, give_up, failure.take()),
            Next::RetryConsul(after) => {
                return Err(Error::CleanupPending {
                    retry_after: after,
                    source: Box::new(failure.unwrap_or_else(|| {
                        Error::InvalidStatus("Consul failed without an error".into())
                    })),
                });
            }
            Next::Open => {
                let (opened, opening) = inputs.open().await?;
                round = Some(opened);
                election.opened(opening);
            }
            Next::Look(look) => opened(&mut round)?.look(look, &mut election).await,
            Next::Observe => opened(&mut round)?.observe(&mut election),
            Next::Act(action) => {
                let acted = opened(&mut round)?.act(action, &mut election).await;
                failure = failure.or(acted.err());
            }
            Next::WriteStatus => {
                opened(&mut round)?.write_status(&election).await?;
                election.status_written();
            }
            Next::Stop(look_again) => {
                return failure.map_or(Ok(Action::requeue(look_again)), Err);
            }
        }
    }
}

/// The plan loop's round, once [`Next::Open`] opened it.
fn opened<'r, 'a>(round: &'r mut Option<act::Round<'a>>) -> Result<&'r mut act::Round<'a>, Error> {
    round
        .as_mut()
        .ok_or_else(|| Error::InvalidStatus("a plan loop request before it opened".into()))
}

/// What a reconcile reads and opens before it plans: the validated spec, the Consul client,
/// the spec edit.
struct Inputs<'a> {
    le: &'a LeaderElection,
    key: &'a ElectionKey,
    ctx: &'a Context,
    config: Option<Arc<ElectionConfig>>,
    consul: Option<ConsulClient>,
    edit: Option<Edit>,
}

impl<'a> Inputs<'a> {
    /// Gathers `input`. Reads that wait for the API server or a Secret are
    /// [`gather::fenced_while`]: rule 2 does not wait for them.
    async fn gather(&mut self, input: Input, written_since_read: bool) -> Result<Found, Error> {
        let (le, key, ctx) = (self.le, self.key, self.ctx);
        let Some(config) = &self.config else {
            return Err(Error::InvalidStatus(format!(
                "{input:?} asked for an election whose spec is invalid"
            )));
        };
        Ok(match input {
            Input::Spec => {
                return Err(Error::InvalidStatus(
                    "the spec's validation asked for twice".into(),
                ));
            }
            Input::LabelKey => {
                // A label key the pods' controller selects: writing it would make the
                // controller disown the pods and create others, without end.
                let selected = inputs::admission::selected_pods(le, ctx, &key.namespace);
                let owners = ctx.caches.owner_selectors.of_pods(&ctx.client, &selected);
                let owners =
                    gather::fenced_while(le, key, config, ctx, written_since_read, owners).await?;
                Found::LabelKey(check_label_key(&config.labels.key, &owners))
            }
            Input::Older => Found::Older(views::conflicting_election(&ctx.caches, le, config)),
            Input::YieldingLeader => {
                Found::YieldingLeader(views::yielding_leader(&ctx.caches, le, config))
            }
            Input::Access => {
                let access = consul_access::client_for(le, &config.key, ctx);
                Found::Access(
                    match gather::fenced_while(le, key, config, ctx, written_since_read, access)
                        .await?
                    {
                        Ok(client) => {
                            self.consul = Some(client);
                            Access::Usable
                        }
                        Err(consul_access::AccessProblem::Invalid(problem)) => Access::Invalid {
                            spec_valid: crate::election::report::spec_problems(&[problem]),
                            in_use: inputs::admission::access_in_use(le, ctx, config),
                        },
                        Err(consul_access::AccessProblem::Failed(error)) => {
                            // Retried soon, and perhaps failing as fast again: rule 2 does not
                            // wait for it.
                            gather::fence_if_due(le, key, config, ctx, written_since_read).await?;
                            return Err(error);
                        }
                    },
                )
            }
            Input::Applied => {
                self.edit = inputs::admission::edit(le, ctx, config);
                Found::Applied {
                    edited: self.edit.is_some(),
                    needs_withdrawal: self.edit.as_ref().is_some_and(|e| e.needs_withdrawal),
                }
            }
        })
    }

    /// Opens the plan loop's round with the spec and the Consul client admission gathered.
    async fn open(&mut self) -> Result<(act::Round<'a>, Opening), Error> {
        let (Some(config), Some(consul)) = (self.config.take(), self.consul.take()) else {
            return Err(Error::InvalidStatus(
                "planning without a valid spec or a Consul access".into(),
            ));
        };
        Ok(act::Round::open(self.le, self.key, config, consul, self.ctx).await)
    }

    /// Performs `step`.
    async fn perform(&mut self, step: Do) -> Result<(), Error> {
        let (le, key, ctx) = (self.le, self.key, self.ctx);
        match step {
            Do::Unwatch => ctx.locks.unwatch(key),
            Do::Watch => {
                if let (Some(config), Some(consul)) = (&self.config, &self.consul) {
                    ctx.locks
                        .watch(key, consul, &config.key, config.session.ttl);
                }
            }
            Do::Report(back) => {
                let change = StatusChange::StandBack(&back);
                status_write::write(le, ctx, None, change, None).await?;
            }
            Do::Forget => ctx.sessions.forget(key),
            Do::Wake(name) => ctx.reconcile_soon(&ElectionKey {
                namespace: key.namespace.clone(),
                name,
            }),
            Do::RecordApplied => {
                if let Some(edit) = &self.edit {
                    gather::record(le, ctx, edit).await?;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::Status;

    fn api_error(code: u16, reason: &str) -> kube::Error {
        kube::Error::Api(Status::failure("refused", reason).with_code(code).boxed())
    }

    #[test]
    fn a_finalizer_removal_that_finds_the_election_gone_is_done() {
        let gone = Err(finalizer::Error::RemoveFinalizer(api_error(
            404, "NotFound",
        )));
        assert_eq!(done_when_gone(gone).ok(), Some(Action::await_change()));
        // Anything else stays a failure: a changed finalizer list (422), an unreachable API
        // server, a missing election when adding the finalizer, a failed cleanup.
        let changed = Err(finalizer::Error::RemoveFinalizer(api_error(422, "Invalid")));
        assert!(done_when_gone(changed).is_err());
        let adding = Err(finalizer::Error::AddFinalizer(api_error(404, "NotFound")));
        assert!(done_when_gone(adding).is_err());
        let cleanup = Err(finalizer::Error::CleanupFailed(Error::MissingMetadata(
            "name",
        )));
        assert!(done_when_gone(cleanup).is_err());
    }
}
