//! Rule 2 while a reconcile gathers its inputs. Reading a token Secret or the pods' owners
//! takes a request each (bounded by the read timeout, and retried by the next reconcile when
//! it fails), and the election's lock may be lost meanwhile: the Fence must not wait for
//! them. While they are outstanding the leader label is judged as for an election that
//! cannot act ([`crate::election::unusable::waiting_label`]), again at the deadline that
//! judgement names and whenever a lock changes, and fenced as soon as it says so.
//!
//! Also the record of a spec edit ([`crate::election::spec_edits`]).

use std::future::Future;
use std::time::Duration;

use futures::FutureExt;

use super::cleanup::fence_when;
use crate::Error;
use crate::context::Context;
use crate::crd::LeaderElection;
use crate::election::config::{ElectionConfig, ElectionKey};
use crate::election::status_change::StatusChange;
use crate::election::unusable::{UnusableLabel, waiting_label};
use crate::inputs::admission::Edit;
use crate::inputs::withdrawal::lock_facts;

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

/// Records the values of `edit` as the ones the operator acts with, before it acts with them
/// (see [`crate::crd::AppliedSpec`]).
pub async fn record(le: &LeaderElection, ctx: &Context, edit: &Edit) -> Result<(), Error> {
    let applied = StatusChange::Applied(&edit.now);
    super::status_write::write(le, ctx, None, applied, None)
        .await
        .map(|_| ())
}
