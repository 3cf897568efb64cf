//! The `LeaderElection` reconcile: observe -> decide (`election::reconcile`,
//! `election::plan_loop`) -> act, in the order of docs/design.md rule 1.
//!
//! [`crate::operator`] runs it: one kube-runtime `Controller` over LeaderElections, woken by
//! pod events, Consul-side changes and the takeover. A reconcile first waits until this
//! replica may write (it holds the Lease, its caches are complete and it adopted this
//! cluster's sessions); until then it returns at once, writing nothing.
//!
//! A reconcile holds the election's machine ([`crate::election::machine::Election`]) and
//! answers what it asks, in the order it asks: what it observes (read in [`crate::inputs`]),
//! and each request it hands out, which the executor performs as it is and whose outcome it
//! reports back, until the machine says when to look again. A failure the machine says fails
//! the reconcile is kept by the executor and returned then; kube-runtime retries it.

mod executor;
mod observe;
pub(crate) mod status_write;

use std::sync::Arc;

use kube::runtime::controller::Action;
use kube::runtime::finalizer;
use kube::{Api, ResourceExt};

use crate::Error;
use crate::cache::keys::election_key;
use crate::context::Context;
use crate::crd::{FINALIZER, LeaderElection};
use crate::election::look_again;
use crate::election::machine::Next;
use crate::inputs;
use crate::k8s;
use executor::Executor;

/// Reconciles one election (finalizer first: cleanup on deletion).
pub(crate) async fn reconcile(le: Arc<LeaderElection>, ctx: Arc<Context>) -> Result<Action, Error> {
    if !ctx.ready_to_decide().await {
        return Ok(Action::await_change());
    }
    let _in_flight = ctx.health.reconcile_started();
    let timer = ctx.metrics.count_and_measure();
    let api: Api<LeaderElection> = Api::namespaced(
        ctx.client.clone(),
        &le.namespace().ok_or(Error::MissingMetadata("namespace"))?,
    );
    // An uninstall that keeps the objects: each election withdraws and loses its finalizer,
    // and none gains one again (the operator's finalizer protocol, not a decision).
    if ctx.releasing().is_some() && le.metadata.deletion_timestamp.is_none() {
        let result = release(&le, &ctx).await;
        timer.finish(result.as_ref().map(|_| ()).map_err(Error::category));
        return result;
    }
    let result = finalizer(&api, FINALIZER, le, |event| async {
        match event {
            finalizer::Event::Apply(le) => apply(&le, &ctx, false).await,
            finalizer::Event::Cleanup(le) => delete(&le, &ctx).await,
        }
    })
    .await;
    let result = k8s::done_when_gone(result).map_err(|e| Error::Finalizer(Box::new(e)));
    timer.finish(result.as_ref().map(|_| ()).map_err(Error::category));
    result
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

/// Releases an election its install's uninstall keeps (`Start::released`): the machine
/// withdraws it and takes the finalizer off; one without the finalizer is left as it is.
async fn release(le: &LeaderElection, ctx: &Context) -> Result<Action, Error> {
    if !le.finalizers().iter().any(|f| f == FINALIZER) {
        return Ok(Action::await_change());
    }
    let key = election_key(le)?;
    let action = apply(le, ctx, false).await?;
    ctx.caches.written.forget_election(&key);
    Ok(action)
}

/// Brings one election's pods, session and lock in line with its spec (or, `deleted`, takes
/// it off them): drives the election's machine, observing what it asks for and performing each
/// request it hands out.
async fn apply(le: &LeaderElection, ctx: &Context, deleted: bool) -> Result<Action, Error> {
    let key = election_key(le)?;
    let validation = ctx.caches.validated.of(&key, le);
    let mut election = ctx.caches.written.hold(&key);
    election.begin(inputs::admission::start(le, ctx, &validation, deleted));
    let mut executor = Executor::new(le, &key, ctx, validation.ok());
    loop {
        match election.poll() {
            Next::Observe(what) => executor.observe(what, &mut election).await?,
            Next::Perform(request) => {
                tracing::debug!(election = %key, ?request, cause = ?election.cause(), "performing");
                executor.perform(request, &mut election).await;
            }
            Next::GiveUp(give_up) => executor.give_up(give_up),
            Next::RetryConsul(after) => return Err(executor.retry_consul(after)),
            Next::Stop(look_again) => return executor.stop(look_again),
        }
    }
}
