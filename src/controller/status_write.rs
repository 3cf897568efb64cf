//! Writing the election's status (a JSON patch of the status subresource that first tests the
//! revision and fencing token of the status the write was based on, only when the status
//! changed) and the Warning events
//! of elections that cannot act.

use kube::api::{Api, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use serde_json::json;

use crate::Error;
use crate::cache::keys::election_key;
use crate::context::Context;
use crate::crd::{AppliedSpec, LeaderElection, LeaderElectionStatus, ReadElection};
use crate::election::config::{ElectionConfig, Mode};
use crate::election::plan::{ConditionState, Plan};
use crate::election::report::{self, Rendering, StandBack};

/// What a status write is based on: the revision and fencing token of the status read when
/// the write was decided. The write is sent only if the status still has both, so a plan
/// made from an older status never replaces a newer one, even when the newer one arrived
/// while the plan was carried out.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Basis {
    revision: Option<u64>,
    fencing_token: Option<u64>,
}

impl Basis {
    /// The basis of a write decided from `status`.
    pub fn of(status: &LeaderElectionStatus) -> Self {
        Basis {
            revision: status.revision,
            fencing_token: status.fencing_token,
        }
    }
}

/// Writes the status of the last plan (`spec_valid`, which is True, and Exclusive True), as far
/// as it was carried out: `labelled` is the pod that carries the leader label now. A plan whose leader
/// is not labelled (an action failed) reports phase Electing and `LeaderElected` False, never
/// a leader that no pod shows. `basis` is the status the plan was made from.
pub async fn write(
    le: &LeaderElection,
    ctx: &Context,
    config: &ElectionConfig,
    labelled: Option<&str>,
    plan: Option<&Plan>,
    spec_valid: ConditionState,
    basis: Basis,
) -> Result<(), Error> {
    let Some(plan) = plan else {
        return Ok(());
    };
    let old = ctx.caches.current_status(le);
    let new = report::decided(plan, rendering(le, ctx, config, labelled, &old, spec_valid));
    patch_if_changed(le, ctx, &old, new, Write::Whole, basis)
        .await
        .map(|_| ())
}

/// What [`report::decided`] renders the status of a plan from, when the pod with UID
/// `labelled` carries the leader label and the status is `old` (as this process last wrote it).
fn rendering<'r>(
    le: &LeaderElection,
    ctx: &Context,
    config: &ElectionConfig,
    labelled: Option<&'r str>,
    old: &'r LeaderElectionStatus,
    spec_valid: ConditionState,
) -> Rendering<'r> {
    Rendering {
        old,
        generation: le.metadata.generation,
        labelled,
        // First written with the first status: until then nothing was done that an edit
        // of the spec would have to undo (see `election::spec_edits`).
        applied: applied(le, config, old),
        spec_valid,
        lease_timing: (config.mode == Mode::Managed)
            .then(|| ctx.settings.lease.timing_condition(config.session.ttl)),
        failed_writes: election_key(le)
            .ok()
            .and_then(|key| ctx.caches.written.status_failures(&key)),
        now: ctx.wall_now(),
    }
}

/// The status write before a leader label ([`crate::election::plan::Action::RecordToken`]).
pub struct TokenRecord<'a> {
    /// The pod about to be labelled.
    pub uid: &'a str,
    /// Its token.
    pub token: u64,
    /// Write the whole status the plan decides with the pod labelled (else only the token).
    pub whole: bool,
}

/// Rule 6 across failures: before a pod is labelled with a token, the status holds it, so
/// that a token handed out once is never handed out again even if the reconcile's final
/// status write is lost and the key is later re-created (its LockIndex restarts at 1; the
/// planner raises it above the recorded token). A `whole` record is the status `plan` decides
/// once the pod carries the label: it names the pod an instant before its label is written,
/// and the reconcile's final write then has nothing left to change. `basis` is the status
/// the plan was made from; returns the basis of the status written (what the reconcile's
/// later writes are based on).
pub async fn record_token(
    le: &LeaderElection,
    ctx: &Context,
    config: &ElectionConfig,
    plan: &Plan,
    record: TokenRecord<'_>,
    spec_valid: ConditionState,
    basis: Basis,
) -> Result<Basis, Error> {
    if !record.whole {
        let token = |current: &LeaderElectionStatus| {
            report::token_recorded(current, record.token, applied(le, config, current))
        };
        return self::record(le, ctx, Some(basis), token).await;
    }
    let current = ctx.caches.current_status(le);
    let rendering = rendering(le, ctx, config, Some(record.uid), &current, spec_valid);
    let new = report::decided_with_token(plan, rendering, record.token);
    patch_if_changed(le, ctx, &current, new, Write::Whole, basis).await
}

/// Writes a record made before acting (a fencing token, how a switchover request was decided,
/// what the operator acts with): the status as this process last wrote it, as `change` makes
/// it, conditional on `basis` (the status the record was decided from; `None`: the status as
/// this process knows it now). Returns the basis of the status written.
pub async fn record(
    le: &LeaderElection,
    ctx: &Context,
    basis: Option<Basis>,
    change: impl FnOnce(&LeaderElectionStatus) -> LeaderElectionStatus,
) -> Result<Basis, Error> {
    let current = ctx.caches.current_status(le);
    let new = change(&current);
    let basis = basis.unwrap_or_else(|| Basis::of(&current));
    patch_if_changed(le, ctx, &current, new, Write::Record, basis).await
}

/// What the status records as applied: the record, or for a new election what it acts with.
fn applied(
    le: &LeaderElection,
    config: &ElectionConfig,
    old: &LeaderElectionStatus,
) -> AppliedSpec {
    old.applied
        .clone()
        .unwrap_or_else(|| crate::crd::applied::applied_of(le, config))
}

/// Reports that the election stands back (an invalid spec, an older election claiming the
/// same pods), with a Warning event when its condition is news (not on every requeue).
pub async fn stand_back(le: &LeaderElection, ctx: &Context, back: &StandBack) -> Result<(), Error> {
    let old = ctx.caches.current_status(le);
    let (new, news) = report::standing_back(&old, le.metadata.generation, back, ctx.wall_now());
    patch_if_changed(le, ctx, &old, new, Write::Whole, Basis::of(&old)).await?;
    if let Some(event) = news {
        ctx.publish_election_event(&event, "Validate", &le.object_ref(&()), None);
    }
    Ok(())
}

/// What a status write is.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Write {
    /// The status decided by a reconcile (it carries the `StatusWritten` condition).
    Whole,
    /// A record made before acting (the fencing token, what the operator acts with).
    Record,
}

/// Writes `new` unless it is `old` (the status as this process knows it now), conditional on
/// `basis` (the status it was decided from). Returns the basis of what the status now is as far
/// as this write knows: `new` once written, `old` when nothing changed.
async fn patch_if_changed(
    le: &LeaderElection,
    ctx: &Context,
    old: &LeaderElectionStatus,
    mut new: LeaderElectionStatus,
    write: Write,
    basis: Basis,
) -> Result<Basis, Error> {
    new.revision = old.revision;
    if *old == new {
        return Ok(Basis::of(old));
    }
    new.revision = Some(basis.revision.map_or(1, |r| r.saturating_add(1)));
    let api: Api<ReadElection> = Api::namespaced(
        ctx.client.clone(),
        &le.namespace().ok_or(Error::MissingMetadata("namespace"))?,
    );
    let status_exists = ctx.caches.status_exists(le);
    let patch = conditional_status_patch(basis, status_exists, &new)?;
    let written = api
        .patch_status(
            &le.name_any(),
            &PatchParams {
                field_manager: Some(ctx.settings.field_manager.clone()),
                ..PatchParams::default()
            },
            &Patch::<()>::Json(patch),
        )
        .await
        .map_err(|source| match &source {
            // The test operation failed: the status is not the one this write was based on.
            kube::Error::Api(status) if status.code == 422 || status.code == 409 => {
                ctx.caches.written.remember_status(le, None);
                let none = || "none".to_owned();
                Error::StatusStale {
                    expected: format!(
                        "revision {}, fencing token {}",
                        basis.revision.map_or_else(none, |r| r.to_string()),
                        basis.fencing_token.map_or_else(none, |t| t.to_string())
                    ),
                    source,
                }
            }
            _ => Error::kube("patch status")(source),
        });
    let key = election_key(le)?;
    match written {
        Ok(written) => {
            // A record keeps the count: the whole status written next reports it.
            if write == Write::Whole {
                ctx.caches.written.status_written(&key);
            }
            let version = written.0.metadata.resource_version.as_deref();
            let basis = Basis::of(&new);
            ctx.caches.written.remember_status(le, Some((new, version)));
            Ok(basis)
        }
        Err(error) => {
            let text = error.to_string();
            let report = ctx
                .caches
                .written
                .status_write_failed(&key, error.category(), &text);
            ctx.metrics.status_write_failed();
            if let Some(report) = report {
                ctx.publish_election_event(&report, "WriteStatus", &le.object_ref(&()), None);
            }
            Err(error)
        }
    }
}

/// The status write: a JSON patch that replaces the whole status only if its revision and
/// fencing token are still those of `basis`, the status the write was decided from
/// (docs/design.md rules 6 and 8: a late write, based on an older status, is refused by the API
/// server instead of replacing a newer leader, record or switchover outcome, or moving the
/// token backwards). A field `basis` lacks is tested absent; when no status existed (and none
/// was based on), the patch tests that there is none.
fn conditional_status_patch(
    basis: Basis,
    status_exists: bool,
    new: &LeaderElectionStatus,
) -> Result<json_patch::Patch, Error> {
    let mut ops = if status_exists || basis != Basis::default() {
        vec![
            json!({"op": "test", "path": "/status/fencingToken", "value": basis.fencing_token}),
            json!({"op": "test", "path": "/status/revision", "value": basis.revision}),
        ]
    } else {
        vec![json!({"op": "test", "path": "/status", "value": null})]
    };
    ops.push(json!({"op": "add", "path": "/status", "value": new}));
    serde_json::from_value(serde_json::Value::Array(ops))
        .map_err(|error| Error::InvalidStatus(error.to_string()))
}
