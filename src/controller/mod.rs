//! The `LeaderElection` reconcile: observe -> decide (`election::admission`,
//! `election::planner`) -> act, in the order of docs/design.md rule 1.
//!
//! [`crate::operator`] runs it: one kube-runtime `Controller` over LeaderElections, woken by
//! pod events, Consul-side changes and the takeover. A reconcile first waits until this
//! replica may write (it holds the Lease, its caches are complete and it adopted this
//! cluster's sessions); until then it returns at once, writing nothing.
//!
//! A reconcile runs the planner in a loop: execute the plan's actions in order, stop at the
//! first failure, re-observe (patched pods, the session manager, a fresh read of the key) and
//! plan again, until a plan has no actions. The status is then written from the last plan.

mod act;
pub(crate) mod applied;
mod cleanup;
pub(crate) mod consul_access;
mod context;
mod gather;
mod migrate;
mod sharing;
pub(crate) mod status_write;
mod switchover;

use std::sync::Arc;
use std::time::Duration;

use kube::runtime::controller::Action;
use kube::runtime::finalizer;
use kube::{Api, ResourceExt};

use crate::Error;
use crate::cache::keys::election_key;
use crate::crd::{FINALIZER, LeaderElection};
use crate::election::admission::{Access, Admission, Input, Observed, admit, served_elsewhere};
use crate::election::config::ElectionKey;
use crate::election::label_key_check::check_label_key;
use crate::election::plan::{ConditionState, EventReason};
use crate::election::report::StandBack;
pub use context::{Context, Settings};

/// Requeue after a failed reconcile.
const ERROR_REQUEUE: Duration = Duration::from_secs(2);
/// Requeue of an election whose spec cannot be acted on (it is re-read on every change).
const INVALID_REQUEUE: Duration = Duration::from_secs(300);
/// Requeue of an election whose token Secret is missing or unreadable: Secrets are not
/// watched (the operator may only `get` the one it needs), so look again soon, but calmly.
const SECRET_REQUEUE: Duration = Duration::from_secs(30);
/// The longest an election using a token Secret goes without a look at that Secret: the
/// operator stops using a token within this long of its Secret withdrawing the opt-in.
const SECRET_RECHECK: Duration = Duration::from_secs(60);
/// Requeue of an election waiting for a younger conflicting one to take its leader label off.
const YIELD_WAIT: Duration = Duration::from_secs(1);
/// Periodic re-check of a healthy election (Consul and pod changes trigger it anyway).
const RESYNC: Duration = Duration::from_secs(600);
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
            finalizer::Event::Apply(le) => apply(&le, &ctx).await,
            finalizer::Event::Cleanup(le) => cleanup::cleanup(&le, &ctx).await,
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
    Action::requeue(error.retry_after().unwrap_or(ERROR_REQUEUE))
}

/// Brings one election's pods, session and lock in line with its spec.
///
/// First whether it may act at all ([`admit`], the pure precedence): the inputs
/// are gathered one at a time, in the order the precedence asks for them, and none once a
/// step decided (the pods' controllers are read only for a valid spec, the Consul access is
/// built only when nothing earlier stood in the way).
async fn apply(le: &LeaderElection, ctx: &Context) -> Result<Action, Error> {
    let key = election_key(le)?;
    let mut observed = Observed {
        served_elsewhere: served_elsewhere(
            ctx.caches.current_status(le).served_by.as_deref(),
            &ctx.settings.owner,
        ),
        paused: le.spec.paused,
        ..Observed::default()
    };
    let validation = ctx.caches.validated.of(&key, le);
    observed.spec = Some(match &validation {
        Ok(_) => Ok(()),
        Err(problems) => Err(crate::election::report::spec_problems(problems)),
    });
    let config = match (admit(&observed), validation) {
        (Admission::Observe(Input::LabelKey), Ok(config)) => config,
        (decision, _) => return stand_back(le, &key, ctx, decision).await,
    };
    // A label key the pods' controller selects: writing it would make the controller disown
    // the pods and create others, without end.
    let mut selected = crate::cache::views::selected_pods(&ctx.caches, le, &key.namespace);
    selected.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    let owners = gather::fenced_while(
        le,
        &key,
        &config,
        ctx,
        ctx.caches.owner_selectors.of_pods(&ctx.client, &selected),
    )
    .await?;
    let spec_valid = check_label_key(&config.labels.key, &owners);
    observed.label_key = Some(spec_valid.clone());
    if let Some(outcome) = decided(&observed, Input::Older, le, &key, ctx).await {
        return outcome;
    }
    observed.older = Some(crate::cache::views::conflicting_election(
        &ctx.caches,
        le,
        &config,
    ));
    if let Some(outcome) = decided(&observed, Input::YieldingLeader, le, &key, ctx).await {
        return outcome;
    }
    observed.yielding_leader = Some(crate::cache::views::yielding_leader(
        &ctx.caches,
        le,
        &config,
    ));
    if let Some(outcome) = decided(&observed, Input::Access, le, &key, ctx).await {
        return outcome;
    }
    let access = consul_access::client_for(le, &config.key, ctx);
    let consul = match gather::fenced_while(le, &key, &config, ctx, access).await? {
        Ok(client) => {
            observed.access = Some(Access::Usable);
            Some(client)
        }
        Err(consul_access::AccessProblem::Invalid(problem)) => {
            observed.access = Some(Access::Invalid {
                spec_valid: crate::election::report::spec_problems(&[problem]),
                in_use: migrate::access_in_use(le, ctx, &config),
            });
            None
        }
        Err(consul_access::AccessProblem::Failed(error)) => {
            // Retried soon, and perhaps failing as fast again: rule 2 does not wait for it.
            gather::fence_if_due(le, &key, &config, ctx).await?;
            return Err(error);
        }
    };
    let consul = match (admit(&observed), consul) {
        (Admission::Observe(Input::Applied), Some(consul)) => consul,
        (decision, _) => return stand_back(le, &key, ctx, decision).await,
    };
    // Changed labels, key or Consul access: undo what was done with the old ones first (only
    // once the new access is known to be usable, so that a mistyped Secret name does not
    // take the leader away).
    let edit = migrate::edit(le, ctx, &config);
    observed.needs_withdrawal = Some(edit.as_ref().is_some_and(|e| e.needs_withdrawal));
    match admit(&observed) {
        Admission::Withdraw => migrate::withdraw(le, ctx).await?,
        Admission::Proceed => {}
        decision => return stand_back(le, &key, ctx, decision).await,
    }
    if let Some(edit) = &edit {
        migrate::record(le, ctx, edit).await?;
    }
    ctx.locks
        .watch(&key, &consul, &config.key, config.session.ttl);
    let mut round = act::Round::new(le, &key, &config, &consul, ctx, spec_valid.clone()).await;
    let outcome = round.run().await;
    let labelled = round.labelled_leader_uid();
    // Standing back for another install (rule 8): the status is that install's to write.
    let standing_back = round
        .last_plan()
        .is_some_and(|plan| plan.managed_elsewhere.is_some());
    if !standing_back {
        let plan = round.last_plan();
        let basis = round.basis();
        status_write::write(
            le,
            ctx,
            &config,
            labelled.as_deref(),
            plan,
            spec_valid,
            basis,
        )
        .await?;
    }
    outcome?;
    if round.unfinished() {
        return Ok(Action::requeue(Duration::ZERO));
    }
    let mut requeue = round
        .last_plan()
        .and_then(|p| p.requeue_after)
        .map_or(RESYNC, |d| d.min(RESYNC));
    if round.removal_failed() {
        requeue = requeue.min(ERROR_REQUEUE);
    }
    if le
        .spec
        .consul
        .as_ref()
        .is_some_and(|c| c.token_secret_ref.is_some())
    {
        // Secrets are not watched: a withdrawn opt-in is seen at the next look.
        requeue = requeue.min(SECRET_RECHECK);
    }
    Ok(Action::requeue(requeue))
}

/// `None` when the admission so far asks for `next` (gather it); otherwise executes the
/// decision and returns the reconcile's outcome.
async fn decided(
    observed: &Observed,
    next: Input,
    le: &LeaderElection,
    key: &ElectionKey,
    ctx: &Context,
) -> Option<Result<Action, Error>> {
    match admit(observed) {
        Admission::Observe(input) if input == next => None,
        decision => Some(stand_back(le, key, ctx, decision).await),
    }
}

/// Executes an admission that keeps the election from acting (refused, yielding, waiting,
/// unusable Consul access).
async fn stand_back(
    le: &LeaderElection,
    key: &ElectionKey,
    ctx: &Context,
    decision: Admission,
) -> Result<Action, Error> {
    match decision {
        Admission::Refuse { spec_valid, event } => refuse(le, key, ctx, spec_valid, event).await,
        Admission::Yield { older } => yield_to(le, key, ctx, older).await,
        Admission::WaitFor { younger, pod } => {
            // This election cannot plan meanwhile: a leader label of its own stays only as
            // long as rule 2 allows.
            let recheck = cleanup::fence_unusable(le, key, ctx, false).await?;
            let wait = wait_for(key, ctx, younger, &pod);
            Ok(Action::requeue(recheck.map_or(wait, |d| d.min(wait))))
        }
        Admission::AccessInvalid { spec_valid, in_use } => {
            status_write::stand_back(
                le,
                ctx,
                &StandBack::invalid(spec_valid, EventReason::InvalidSpec),
            )
            .await?;
            let recheck = cleanup::fence_unusable(le, key, ctx, in_use).await?;
            Ok(Action::requeue(
                recheck.map_or(SECRET_REQUEUE, |d| d.min(SECRET_REQUEUE)),
            ))
        }
        Admission::EditWaits => {
            // Nothing moves while paused: the edit is carried out once resumed (a spec
            // change, which wakes the election).
            tracing::debug!(election = %key, "an edit of a paused election waits for the resume");
            let recheck = cleanup::fence_unusable(le, key, ctx, false).await?;
            Ok(Action::requeue(
                recheck.map_or(INVALID_REQUEUE, |d| d.min(INVALID_REQUEUE)),
            ))
        }
        Admission::StandBack { other } => {
            // Rule 8: nothing is written; a status change (the other install's writes, or its
            // claim going) wakes this election, the requeue is a fallback.
            tracing::debug!(election = %key, other, "another install serves this election");
            ctx.locks.unwatch(key);
            Ok(Action::requeue(INVALID_REQUEUE))
        }
        Admission::Observe(_) | Admission::Withdraw | Admission::Proceed => {
            // The inputs were gathered out of the admission's order: a bug, not the
            // election's fault. Look again soon rather than act on half an observation.
            tracing::error!(election = %key, ?decision, "admission out of step with its inputs");
            Ok(Action::requeue(ERROR_REQUEUE))
        }
    }
}

/// Yields to the `older` election that claims the same pods: whatever this election labelled
/// or held (it may have led before the older one came to select its pods) goes, in rule 7's
/// order.
async fn yield_to(
    le: &LeaderElection,
    key: &ElectionKey,
    ctx: &Context,
    older: String,
) -> Result<Action, Error> {
    ctx.locks.unwatch(key);
    status_write::stand_back(le, ctx, &StandBack::conflict(&older)).await?;
    let withdrawal = cleanup::withdraw(&cleanup::Footprint::of(le, ctx), ctx).await?;
    cleanup::settle_consul(le, key, ctx, withdrawal).await?;
    // The older election may be waiting for this withdrawal (it is not woken by the patches
    // of pods it does not select).
    ctx.reconcile_soon(&ElectionKey {
        namespace: key.namespace.clone(),
        name: older,
    });
    Ok(Action::requeue(INVALID_REQUEUE))
}

/// Waits for the `younger` election, which yields to this one, to take its leader label off
/// `pod`. Nothing else may wake it (this one writes nothing meanwhile): queue it. Its
/// withdrawal (a pod patch) wakes this one; the returned requeue is a fallback.
fn wait_for(key: &ElectionKey, ctx: &Context, younger: String, pod: &str) -> Duration {
    tracing::debug!(election = %key, pod, younger, "waiting for a younger conflicting election to withdraw its leader label");
    let younger = ElectionKey {
        namespace: key.namespace.clone(),
        name: younger,
    };
    if ctx.wake.send(younger).is_err() {
        tracing::debug!(election = %key, "the controller is stopping");
    }
    YIELD_WAIT
}

/// Stands back from an election whose spec cannot be acted on: phase Invalid with the
/// `SpecValid` condition `spec_valid` and an `event` when that is news; the leader label it
/// left stays only as long as rule 2 allows ([`cleanup::fence_unusable`]).
async fn refuse(
    le: &LeaderElection,
    key: &ElectionKey,
    ctx: &Context,
    spec_valid: ConditionState,
    event: EventReason,
) -> Result<Action, Error> {
    status_write::stand_back(le, ctx, &StandBack::invalid(spec_valid, event)).await?;
    let recheck = cleanup::fence_unusable(le, key, ctx, false).await?;
    Ok(Action::requeue(
        recheck.map_or(INVALID_REQUEUE, |d| d.min(INVALID_REQUEUE)),
    ))
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
