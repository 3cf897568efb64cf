//! Writing the election's status: the core's [`StatusChange`], rendered on the status as this
//! process knows it now and sent (only when it changes the status) as a JSON patch of the
//! status subresource that first tests the revision and fencing token of the status the write
//! was based on.

use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};

use crate::Error;
use crate::context::Context;
use crate::crd::applied::applied_of;
use crate::crd::status_basis::Basis;
use crate::crd::{LeaderElection, LeaderElectionStatus, ReadElection};
use crate::election::config::ElectionConfig;
use crate::election::plan::ElectionEvent;
use crate::election::status_change::{Facts, StatusChange};

/// A status write as sent.
pub struct Written {
    /// The basis of the status written.
    pub basis: Basis,
    /// The event the change renders, to publish.
    pub event: Option<ElectionEvent>,
}

/// Writes `change` ([`StatusChange::render`] of the status as this process knows it now),
/// conditional on `basis` (the status the change was decided from; `None`: the status as this
/// process knows it now). `config` is the validated spec (`None` when it is not valid);
/// `labelled` the UID of the one pod that carries the leader label now.
pub async fn write(
    le: &LeaderElection,
    ctx: &Context,
    config: Option<&ElectionConfig>,
    change: &StatusChange,
    basis: Option<Basis>,
    labelled: Option<String>,
) -> Result<Written, Error> {
    let current = ctx.caches.current_status(le);
    let facts = Facts {
        generation: le.metadata.generation,
        applied: config.map(|config| applied_of(le, config)),
        mode: config.map(|config| config.mode),
        lease_timing: config.map(|c| ctx.settings.lease.timing_condition(c.session.ttl)),
        labelled,
        now: ctx.wall_now(),
    };
    let rendered = change.render(&current, &facts);
    let basis = basis.unwrap_or_else(|| Basis::of(&current));
    let basis = patch_if_changed(le, ctx, &current, rendered.status, basis).await?;
    Ok(Written {
        basis,
        event: rendered.event,
    })
}

/// Writes `new` unless it is `old` (the status as this process knows it now), conditional on
/// `basis` (the status it was decided from). Returns the basis of what the status now is as far
/// as this write knows: `new` once written, `old` when nothing changed.
async fn patch_if_changed(
    le: &LeaderElection,
    ctx: &Context,
    old: &LeaderElectionStatus,
    mut new: LeaderElectionStatus,
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
    let patch = basis
        .patch(status_exists, &new)
        .map_err(|error| Error::InvalidStatus(error.to_string()))?;
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
    match written {
        Ok(written) => {
            let version = written.0.metadata.resource_version.as_deref();
            let basis = Basis::of(&new);
            ctx.caches.written.remember_status(le, Some((new, version)));
            Ok(basis)
        }
        Err(error) => {
            ctx.metrics.status_write_failed();
            Err(error)
        }
    }
}
