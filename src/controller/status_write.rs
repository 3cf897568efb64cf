//! Writing the election's status: the core's [`StatusChange`], rendered on the status as this
//! process knows it now and sent (only when it changes the status) as a JSON patch of the
//! status subresource that first tests the revision and fencing token of the status the write
//! was based on.

use kube::api::{Api, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use serde_json::json;

use crate::Error;
use crate::cache::keys::election_key;
use crate::context::Context;
use crate::crd::applied::applied_of;
use crate::crd::{LeaderElection, LeaderElectionStatus, ReadElection};
use crate::election::config::ElectionConfig;
use crate::election::status_change::{Facts, StatusChange};

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

/// Writes `change` ([`StatusChange::render`] of the status as this process knows it now),
/// conditional on `basis` (the status the change was decided from; `None`: the status as this
/// process knows it now), and publishes the event it renders. `config` is the validated spec
/// (`None` when it is not valid). Returns the basis of the status written.
pub async fn write(
    le: &LeaderElection,
    ctx: &Context,
    config: Option<&ElectionConfig>,
    change: StatusChange<'_>,
    basis: Option<Basis>,
) -> Result<Basis, Error> {
    let current = ctx.caches.current_status(le);
    let facts = Facts {
        generation: le.metadata.generation,
        applied: config.map(|config| applied_of(le, config)),
        mode: config.map(|config| config.mode),
        lease_timing: config.map(|c| ctx.settings.lease.timing_condition(c.session.ttl)),
        failed_writes: election_key(le)
            .ok()
            .and_then(|key| ctx.caches.written.status_failures(&key)),
        now: ctx.wall_now(),
    };
    let rendered = change.render(&current, &facts);
    let basis = basis.unwrap_or_else(|| Basis::of(&current));
    let written =
        patch_if_changed(le, ctx, &current, rendered.status, rendered.whole, basis).await?;
    if let Some(event) = rendered.event {
        ctx.publish_election_event(&event, "Validate", &le.object_ref(&()), None);
    }
    Ok(written)
}

/// Writes `new` unless it is `old` (the status as this process knows it now), conditional on
/// `basis` (the status it was decided from). Returns the basis of what the status now is as far
/// as this write knows: `new` once written, `old` when nothing changed.
async fn patch_if_changed(
    le: &LeaderElection,
    ctx: &Context,
    old: &LeaderElectionStatus,
    mut new: LeaderElectionStatus,
    whole: bool,
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
            if whole {
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
