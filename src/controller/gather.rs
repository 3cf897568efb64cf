//! Rule 2 while a reconcile gathers its inputs. Reading a token Secret or the pods' owners
//! takes a request each (bounded by the read timeout, and retried by the next reconcile when
//! it fails), and the election's lock may be lost meanwhile: the Fence must not wait for
//! them. While they are outstanding the leader label is judged as for an election that
//! cannot act ([`crate::election::unusable::waiting_label`]), again at the deadline that
//! judgement names and whenever a lock changes, and fenced as soon as it says so.
//!
//! Also the facts of a spec edit ([`crate::election::spec_edits`]): the values the status
//! records the operator acts with, against those the spec asks for now.

use std::future::Future;
use std::time::Duration;

use futures::FutureExt;

use super::cleanup::{fence_when, lock_facts};
use crate::Error;
use crate::context::Context;
use crate::crd::applied::applied_of;
use crate::crd::{AppliedSpec, LeaderElection};
use crate::election::config::{ElectionConfig, ElectionKey};
use crate::election::spec_edits::{needs_withdrawal, same_access};
use crate::election::status_change::StatusChange;
use crate::election::unusable::{UnusableLabel, waiting_label};

/// `inputs` (reads only, so nothing is lost by waiting on them after a fence), with `le`'s
/// leader label fenced meanwhile when rule 2 asks for it. A failure of the fence itself ends
/// the wait: the reconcile fails and is retried.
pub async fn fenced_while<T>(
    le: &LeaderElection,
    key: &ElectionKey,
    config: &ElectionConfig,
    ctx: &Context,
    written_since_read: bool,
    inputs: impl Future<Output = T>,
) -> Result<T, Error> {
    let mut inputs = std::pin::pin!(inputs);
    let mut locks = ctx.locks.subscribe();
    // Most inputs are cached and answer at once: judge only while one is awaited.
    if let Some(gathered) = (&mut inputs).now_or_never() {
        return Ok(gathered);
    }
    loop {
        let recheck = match verdict(le, key, config, ctx, written_since_read) {
            UnusableLabel::Keep(recheck) => recheck,
            UnusableLabel::Fence => Duration::ZERO,
        };
        tokio::select! {
            biased;
            gathered = &mut inputs => return Ok(gathered),
            changed = locks.changed() => {
                if changed.is_err() {
                    // The lock watcher is gone: the operator is stopping.
                    return Ok(inputs.await);
                }
            }
            () = tokio::time::sleep(recheck) => {
                if fence_if_due(le, key, config, ctx, written_since_read).await?.is_none() {
                    // Nothing more for rule 2 to take away until the planner runs.
                    return Ok(inputs.await);
                }
            }
        }
    }
}

/// Fences `le`'s leader label if rule 2 asks for it now; otherwise returns when to judge
/// again. For a reconcile whose inputs failed: a read that fails at once never waits, so
/// [`fenced_while`] may not have judged at all.
pub async fn fence_if_due(
    le: &LeaderElection,
    key: &ElectionKey,
    config: &ElectionConfig,
    ctx: &Context,
    written_since_read: bool,
) -> Result<Option<Duration>, Error> {
    fence_when(le, ctx, verdict(le, key, config, ctx, written_since_read)).await
}

fn verdict(
    le: &LeaderElection,
    key: &ElectionKey,
    config: &ElectionConfig,
    ctx: &Context,
    written_since_read: bool,
) -> UnusableLabel {
    lock_facts(le, key, ctx).judge(false, written_since_read, |lock, now, ttl| {
        waiting_label(lock, now, ttl, config.mode, config.on_consul_unavailable)
    })
}

/// Whether the Consul access the spec of `le` names (address, datacenter, token Secret) is
/// the one the operator acts with (`status.applied`): then a refusal of it means the access in
/// use was withdrawn, not that a new one cannot be used yet.
pub fn access_in_use(le: &LeaderElection, ctx: &Context, config: &ElectionConfig) -> bool {
    let Some(recorded) = ctx.caches.current_status(le).applied else {
        return true;
    };
    same_access(&recorded, &applied_of(le, config))
}

/// The spec's values for `le` (validated as `config`) when the status records other ones.
pub struct Edit {
    /// What the spec makes the operator act with.
    now: AppliedSpec,
    /// Whether what was done with the recorded values must be withdrawn first
    /// ([`needs_withdrawal`]).
    pub needs_withdrawal: bool,
}

/// The edit of `le`'s spec since the operator last acted on it, if any. Nothing recorded yet
/// is no edit: the reconcile's first status write records the values (sparing a write per new
/// election).
pub fn edit(le: &LeaderElection, ctx: &Context, config: &ElectionConfig) -> Option<Edit> {
    let now = applied_of(le, config);
    let recorded = ctx.caches.current_status(le).applied?;
    (recorded != now).then(|| Edit {
        needs_withdrawal: needs_withdrawal(&recorded, &now),
        now,
    })
}

/// Records the values of `edit` as the ones the operator acts with, before it acts with them
/// (see [`AppliedSpec`]).
pub async fn record(le: &LeaderElection, ctx: &Context, edit: &Edit) -> Result<(), Error> {
    let applied = StatusChange::Applied(&edit.now);
    super::status_write::write(le, ctx, None, applied, None)
        .await
        .map(|_| ())
}
