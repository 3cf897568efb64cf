//! Writing the election's status (a JSON patch of the status subresource that first tests the
//! fencing token the write was based on, only when the status changed) and the Warning events
//! of elections that cannot act.

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::{Event, EventType};
use kube::{Resource, ResourceExt};
use serde_json::json;

use super::context::Context;
use super::keys::election_key;
use crate::Error;
use crate::crd::conditions::{self, EXCLUSIVE, LEASE_TIMING_SAFE, SPEC_VALID, STATUS_WRITTEN};
use crate::crd::{
    AppliedSpec, CandidateStatus, LeaderElection, LeaderElectionStatus, LeaderStatus, Phase,
    SpecProblem, SwitchoverResult, SwitchoverStatus,
};
use crate::election::config::{ElectionConfig, Mode};
use crate::election::observe::{SwitchoverOutcome, SwitchoverRecord};
use crate::election::plan::{self, ConditionState, Plan};
use crate::election::planner::LEADER_ELECTED;
use crate::leadership::LeaseSettings;

/// Writes the status of the last plan (`spec_valid`, which is True, and Exclusive True), as far
/// as it was carried out: `labelled` is the pod that carries the leader label now. A plan whose leader
/// is not labelled (an action failed) reports phase Electing and `LeaderElected` False, never
/// a leader that no pod shows.
pub async fn write(
    le: &LeaderElection,
    ctx: &Context,
    config: &ElectionConfig,
    labelled: Option<&str>,
    plan: Option<&Plan>,
    spec_valid: ConditionState,
) -> Result<(), Error> {
    let Some(plan) = plan else {
        return Ok(());
    };
    let (old, new) = decided(le, ctx, config, labelled, plan, spec_valid);
    patch_if_changed(le, ctx, &old, new, Write::Whole).await
}

/// Rule 6 across failures: before a pod is labelled with `token`, the status must already
/// hold it, so that a token handed out once is never handed out again even if the reconcile's
/// final status write is lost and the key is later re-created (its LockIndex restarts at 1;
/// the planner raises it above the recorded token).
///
/// For a pod the status does not name yet, that write is the whole status `plan` decides once
/// the pod with UID `uid` carries the label: it names the pod the lock is now held for, an
/// instant before its label is written, and the reconcile's final write then has nothing left
/// to change (one status write per leader change, not two). When the label cannot be written,
/// that final write reports phase Electing, and a retry for the same pod records only its new
/// token: a label that keeps failing is reported as leading once, never again.
pub async fn write_before_label(
    le: &LeaderElection,
    ctx: &Context,
    config: &ElectionConfig,
    plan: &Plan,
    uid: &str,
    token: u64,
    spec_valid: ConditionState,
) -> Result<(), Error> {
    let current = ctx.current_status(le);
    if current.fencing_token.is_some_and(|t| t >= token) {
        return Ok(());
    }
    if current.leader_or_last().is_some_and(|l| l.uid == uid) {
        let new = LeaderElectionStatus {
            fencing_token: Some(token),
            applied: Some(applied(le, config, &current)),
            ..current.clone()
        };
        return patch_if_changed(le, ctx, &current, new, Write::Record).await;
    }
    let (old, mut new) = decided(le, ctx, config, Some(uid), plan, spec_valid);
    new.fencing_token = new.fencing_token.max(Some(token));
    patch_if_changed(le, ctx, &old, new, Write::Whole).await
}

/// Writes how a switchover request was decided (`status.lastSwitchover`) before the request
/// annotation is removed, so whoever waits for the annotation to go finds the outcome at the
/// same moment, never the previous request's.
pub async fn record_switchover(
    le: &LeaderElection,
    ctx: &Context,
    record: &SwitchoverRecord,
) -> Result<(), Error> {
    let current = ctx.current_status(le);
    let new = LeaderElectionStatus {
        last_switchover: Some(switchover_status(record)),
        ..current.clone()
    };
    patch_if_changed(le, ctx, &current, new, Write::Record).await
}

/// What the status records as applied: the record, or for a new election what it acts with.
fn applied(
    le: &LeaderElection,
    config: &ElectionConfig,
    old: &LeaderElectionStatus,
) -> AppliedSpec {
    old.applied
        .clone()
        .unwrap_or_else(|| super::applied::applied_of(le, config))
}

/// `status.lastSwitchover` as the planner reads it.
pub(super) fn switchover_record(status: &SwitchoverStatus) -> SwitchoverRecord {
    SwitchoverRecord {
        to: status.to.clone(),
        from: status.from.clone(),
        leader: status.leader.clone(),
        requested_at: status.requested_at,
        completed_at: status.completed_at,
        outcome: match status.result {
            SwitchoverResult::InProgress => SwitchoverOutcome::InProgress,
            SwitchoverResult::Completed => SwitchoverOutcome::Completed,
            SwitchoverResult::Refused => SwitchoverOutcome::Refused,
        },
        message: status.message.clone(),
    }
}

/// `status.lastSwitchover` as the planner decided it.
fn switchover_status(record: &SwitchoverRecord) -> SwitchoverStatus {
    SwitchoverStatus {
        to: record.to.clone(),
        from: record.from.clone(),
        leader: record.leader.clone(),
        requested_at: record.requested_at,
        completed_at: record.completed_at,
        result: match record.outcome {
            SwitchoverOutcome::InProgress => SwitchoverResult::InProgress,
            SwitchoverOutcome::Completed => SwitchoverResult::Completed,
            SwitchoverOutcome::Refused => SwitchoverResult::Refused,
        },
        message: record.message.clone(),
    }
}

/// The status as this process last wrote it, and the one `plan` decides when the pod with UID
/// `labelled` carries the leader label.
fn decided(
    le: &LeaderElection,
    ctx: &Context,
    config: &ElectionConfig,
    labelled: Option<&str>,
    plan: &Plan,
    spec_valid: ConditionState,
) -> (LeaderElectionStatus, LeaderElectionStatus) {
    let old = ctx.current_status(le);
    let state = &plan.status;
    let mut new = LeaderElectionStatus {
        phase: Some(phase(state.phase)),
        leader: None,
        last_leader: state.leader.as_ref().map(|l| LeaderStatus {
            pod: l.pod.clone(),
            uid: l.uid.clone(),
            pod_ip: l.pod_ip.clone(),
            since: l.since,
            session_id: l.session_id.clone(),
        }),
        fencing_token: state.fencing_token,
        transitions: state.transitions,
        candidates: state
            .candidates
            .iter()
            .map(|c| CandidateStatus {
                pod: c.pod.clone(),
                eligible: c.eligible,
                reason: c.reason.map(str::to_owned),
                priority: c.priority,
            })
            .collect(),
        last_switchover: state.last_switchover.as_ref().map(switchover_status),
        observed_generation: le.metadata.generation,
        // First written with the first status: until then nothing was done that an edit of
        // the spec would have to undo (see `migrate`).
        applied: Some(applied(le, config, &old)),
        conditions: Vec::new(),
    };
    let carried_out = state.phase != plan::Phase::Elected
        || state.leader.as_ref().map(|l| l.uid.as_str()) == labelled;
    let mut fresh: Vec<Condition> = state
        .conditions
        .iter()
        .map(|c| match c.type_ {
            LEADER_ELECTED if !carried_out => condition(
                le,
                &ConditionState {
                    type_: LEADER_ELECTED,
                    status: false,
                    reason: "Electing",
                    message: "the leader is not labelled yet; retrying".into(),
                },
            ),
            _ => condition(le, c),
        })
        .collect();
    if !carried_out {
        new.phase = Some(Phase::Electing);
    }
    // The leader is the pod that carries the label now; the plan's leader otherwise stays on
    // record as the last one.
    if new
        .last_leader
        .as_ref()
        .is_some_and(|l| Some(l.uid.as_str()) == labelled)
    {
        new.leader = new.last_leader.take();
    }
    fresh.push(condition(le, &spec_valid));
    fresh.push(condition(
        le,
        &ConditionState {
            type_: EXCLUSIVE,
            status: true,
            reason: "Exclusive",
            message: "no older election selects these pods with the same label key".into(),
        },
    ));
    if config.mode == Mode::Managed {
        fresh.push(condition(le, &lease_timing(&ctx.settings.lease, config)));
    }
    fresh.push(condition(le, &status_written(le, ctx)));
    new.conditions = conditions::merge_with_ready(
        &old.conditions,
        fresh,
        new.candidates.len(),
        le.metadata.generation,
        Timestamp::now(),
    );
    (old, new)
}

/// The [`STATUS_WRITTEN`] condition: after failed status writes, the write that succeeds
/// says so.
fn status_written(le: &LeaderElection, ctx: &Context) -> ConditionState {
    let failures = election_key(le)
        .ok()
        .and_then(|key| ctx.status_failures(&key));
    match failures {
        Some((count, category)) => ConditionState {
            type_: STATUS_WRITTEN,
            status: true,
            reason: "WrittenAfterFailures",
            message: format!(
                "{count} status write(s) failed before this one (last error: {category})"
            ),
        },
        None => ConditionState {
            type_: STATUS_WRITTEN,
            status: true,
            reason: "Written",
            message: "the status is written as the operator decides it".into(),
        },
    }
}

/// The [`LEASE_TIMING_SAFE`] condition of a managed election.
pub fn lease_timing(lease: &LeaseSettings, config: &ElectionConfig) -> ConditionState {
    let ttl = config.session.ttl.as_secs();
    if lease.session_survives_failover(config.session.ttl) {
        ConditionState {
            type_: LEASE_TIMING_SAFE,
            status: true,
            reason: "SessionOutlivesFailover",
            message: format!(
                "the session (TTL {ttl}s) outlives a failover of the operator's replicas \
                 (at most {}s)",
                lease.failover_bound().as_secs()
            ),
        }
    } else {
        ConditionState {
            type_: LEASE_TIMING_SAFE,
            status: false,
            reason: "SessionTTLTooShort",
            message: format!(
                "after a crash of the active operator replica the session (TTL {ttl}s) may \
                 expire before a standby adopts it (up to {}s: lease duration plus takeover), \
                 which would re-elect the leader; set spec.session.ttl to at least {}s",
                lease.failover_bound().as_secs(),
                lease.min_session_ttl().as_secs()
            ),
        }
    }
}

/// The `SpecValid` condition of a spec with `problems` (reason `InvalidSpec`, every problem
/// in the message).
pub fn spec_problems(problems: &[SpecProblem]) -> ConditionState {
    let message = problems
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ");
    ConditionState {
        type_: SPEC_VALID,
        status: false,
        reason: "InvalidSpec",
        message,
    }
}

/// Reports a spec that cannot be acted on: phase Invalid, the `SpecValid` condition
/// `spec_valid` (False), and a Warning event of `reason` when this is news (not on every
/// requeue).
pub async fn invalid(
    le: &LeaderElection,
    ctx: &Context,
    spec_valid: ConditionState,
    reason: plan::EventReason,
) -> Result<(), Error> {
    stand_back(le, ctx, Phase::Invalid, spec_valid, reason).await
}

/// Reports that an older election claims the same pods: phase Conflict, Exclusive False.
pub async fn conflict(le: &LeaderElection, ctx: &Context, older: &str) -> Result<(), Error> {
    stand_back(
        le,
        ctx,
        Phase::Conflict,
        ConditionState {
            type_: EXCLUSIVE,
            status: false,
            reason: "Conflict",
            message: format!(
                "election {older} is older and selects the same pods with the same label key; this one writes nothing"
            ),
        },
        plan::EventReason::Conflict,
    )
    .await
}

async fn stand_back(
    le: &LeaderElection,
    ctx: &Context,
    phase: Phase,
    state: ConditionState,
    reason: plan::EventReason,
) -> Result<(), Error> {
    let old = ctx.current_status(le);
    let news = !old.conditions.iter().any(|c| {
        c.type_ == state.type_
            && c.status == bool_status(state.status)
            && c.message == state.message
    });
    let mut new = LeaderElectionStatus {
        phase: Some(phase),
        observed_generation: le.metadata.generation,
        ..old.clone()
    };
    new.conditions = conditions::merge_with_ready(
        &old.conditions,
        vec![condition(le, &state)],
        new.candidates.len(),
        le.metadata.generation,
        Timestamp::now(),
    );
    patch_if_changed(le, ctx, &old, new, Write::Whole).await?;
    if news {
        let event = Event {
            type_: EventType::Warning,
            reason: reason.as_str().to_owned(),
            note: Some(truncate(&state.message, 1024)),
            action: "Validate".to_owned(),
            secondary: None,
        };
        ctx.publish(&event, &le.object_ref(&())).await;
    }
    Ok(())
}

/// Records what the operator is about to act with (see [`AppliedSpec`]), before it acts:
/// the status as this process last wrote it, with `applied`, applied like every other status
/// write.
pub async fn record_applied(
    le: &LeaderElection,
    ctx: &Context,
    applied: &AppliedSpec,
) -> Result<(), Error> {
    let current = ctx.current_status(le);
    if current.applied.as_ref() == Some(applied) {
        return Ok(());
    }
    let new = LeaderElectionStatus {
        applied: Some(applied.clone()),
        ..current.clone()
    };
    patch_if_changed(le, ctx, &current, new, Write::Record).await
}

/// What a status write is.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Write {
    /// The status decided by a reconcile (it carries the [`STATUS_WRITTEN`] condition).
    Whole,
    /// A record made before acting (the fencing token, what the operator acts with).
    Record,
}

async fn patch_if_changed(
    le: &LeaderElection,
    ctx: &Context,
    old: &LeaderElectionStatus,
    new: LeaderElectionStatus,
    write: Write,
) -> Result<(), Error> {
    if *old == new {
        return Ok(());
    }
    let api: Api<LeaderElection> = Api::namespaced(
        ctx.client.clone(),
        &le.namespace().ok_or(Error::MissingMetadata("namespace"))?,
    );
    let status_exists = le.status.is_some() || ctx.remembers_status(le);
    let patch = conditional_status_patch(old.fencing_token, status_exists, &new)?;
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
                ctx.remember_status(le, None);
                Error::StatusStale {
                    expected: old
                        .fencing_token
                        .map_or_else(|| "none".to_owned(), |t| t.to_string()),
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
                ctx.status_written(&key, Ok(()));
            }
            let version = written.metadata.resource_version.as_deref();
            ctx.remember_status(le, Some((new, version)));
            Ok(())
        }
        Err(error) => {
            let failed = ctx.status_written(&key, Err(error.category()));
            ctx.metrics.status_write_failed();
            if failed == STATUS_FAILURES_REPORTED {
                report_status_failures(le, ctx, failed, &error).await;
            }
            Err(error)
        }
    }
}

/// The status write: a JSON patch that replaces the whole status only if the fencing token is
/// still `believed` (docs/design.md rule 6: a deposed replica's late write, based on an older
/// token, is refused by the API server instead of moving the token backwards). Without a
/// believed token the patch tests that the token is absent (or, when no status exists yet,
/// that there is no status).
fn conditional_status_patch(
    believed: Option<u64>,
    status_exists: bool,
    new: &LeaderElectionStatus,
) -> Result<json_patch::Patch, Error> {
    let test = match believed {
        Some(token) => json!({"op": "test", "path": "/status/fencingToken", "value": token}),
        None if status_exists => {
            json!({"op": "test", "path": "/status/fencingToken", "value": null})
        }
        None => json!({"op": "test", "path": "/status", "value": null}),
    };
    let patch = json!([test, {"op": "add", "path": "/status", "value": new}]);
    serde_json::from_value(patch).map_err(|error| Error::InvalidStatus(error.to_string()))
}

/// After this many status writes failed in a row, a Warning event says so (once per run of
/// failures; the metric counts every one).
const STATUS_FAILURES_REPORTED: u32 = 3;

async fn report_status_failures(le: &LeaderElection, ctx: &Context, failed: u32, error: &Error) {
    let event = Event {
        type_: EventType::Warning,
        reason: "StatusWriteFailed".to_owned(),
        note: Some(truncate(
            &format!("{failed} status writes failed in a row; the last: {error}"),
            1024,
        )),
        action: "WriteStatus".to_owned(),
        secondary: None,
    };
    ctx.publish(&event, &le.object_ref(&())).await;
}

fn condition(le: &LeaderElection, c: &ConditionState) -> Condition {
    Condition {
        type_: c.type_.to_owned(),
        status: bool_status(c.status).to_owned(),
        reason: c.reason.to_owned(),
        message: truncate(&c.message, 32_768),
        observed_generation: le.metadata.generation,
        last_transition_time: Time(Timestamp::now()),
    }
}

fn bool_status(b: bool) -> &'static str {
    if b { "True" } else { "False" }
}

fn phase(p: plan::Phase) -> Phase {
    match p {
        plan::Phase::Pending => Phase::Pending,
        plan::Phase::Electing => Phase::Electing,
        plan::Phase::Elected => Phase::Elected,
        plan::Phase::Fenced => Phase::Fenced,
        plan::Phase::Observing => Phase::Observing,
        plan::Phase::Paused => Phase::Paused,
    }
}

fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_owned()
}
