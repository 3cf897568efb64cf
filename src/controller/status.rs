//! Writing the election's status (server-side apply on the status subresource, only when it
//! changed) and the Warning events of elections that cannot act.

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::{Event, EventType};
use kube::{Resource, ResourceExt};
use serde_json::json;

use super::Context;
use crate::Error;
use crate::crd::conditions::{self, CONFLICT, SPEC_VALID};
use crate::crd::{
    API_VERSION, AppliedSpec, CandidateStatus, LeaderElection, LeaderElectionStatus, LeaderStatus,
    Phase, SpecProblem,
};
use crate::election::config::ElectionConfig;
use crate::election::plan::{self, ConditionState, Plan};

/// Writes the status implied by the last plan (SpecValid True, Conflict False).
pub async fn write(
    le: &LeaderElection,
    ctx: &Context,
    _config: &ElectionConfig,
    plan: Option<&Plan>,
) -> Result<(), Error> {
    let old = ctx.current_status(le);
    let Some(plan) = plan else {
        return Ok(());
    };
    let state = &plan.status;
    let mut new = LeaderElectionStatus {
        phase: Some(phase(state.phase)),
        leader: state.leader.as_ref().map(|l| LeaderStatus {
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
            })
            .collect(),
        observed_generation: le.metadata.generation,
        applied: old.applied.clone(),
        conditions: Vec::new(),
    };
    let mut fresh: Vec<Condition> = state.conditions.iter().map(|c| condition(le, c)).collect();
    fresh.push(condition(
        le,
        &ConditionState {
            type_: SPEC_VALID,
            status: true,
            reason: "Valid",
            message: "the spec is valid".into(),
        },
    ));
    fresh.push(condition(
        le,
        &ConditionState {
            type_: CONFLICT,
            status: false,
            reason: "NoConflict",
            message: "no older election selects these pods with the same label key".into(),
        },
    ));
    new.conditions = conditions::merge(&old.conditions, fresh, Timestamp::now());
    patch_if_changed(le, ctx, &old, new).await
}

/// Reports a spec that cannot be acted on: phase Invalid, SpecValid False, and a Warning
/// event when this is news (not on every requeue).
pub async fn invalid(
    le: &LeaderElection,
    ctx: &Context,
    problems: &[SpecProblem],
) -> Result<(), Error> {
    let message = problems
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ");
    stand_back(
        le,
        ctx,
        Phase::Invalid,
        ConditionState {
            type_: SPEC_VALID,
            status: false,
            reason: "InvalidSpec",
            message,
        },
        plan::EventReason::InvalidSpec,
    )
    .await
}

/// Reports that an older election claims the same pods: phase Conflict, Conflict True.
pub async fn conflict(le: &LeaderElection, ctx: &Context, older: &str) -> Result<(), Error> {
    stand_back(
        le,
        ctx,
        Phase::Conflict,
        ConditionState {
            type_: CONFLICT,
            status: true,
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
    new.conditions = conditions::merge(
        &old.conditions,
        vec![condition(le, &state)],
        Timestamp::now(),
    );
    patch_if_changed(le, ctx, &old, new).await?;
    if news {
        let event = Event {
            type_: EventType::Warning,
            reason: reason.as_str().to_owned(),
            note: Some(truncate(&state.message, 1024)),
            action: "Validate".to_owned(),
            secondary: None,
        };
        if let Err(error) = ctx.recorder.publish(&event, &le.object_ref(&())).await {
            tracing::warn!(%error, "publishing an event failed");
        }
    }
    Ok(())
}

/// Rule 6 across failures: before a pod is labelled with `token`, the status must already
/// hold it, so that a token handed out once is never handed out again even if the reconcile's
/// final status write is lost and the key is later re-created (its LockIndex restarts at 1;
/// the planner raises it above the recorded token). A merge patch of this one field, so the
/// rest of the status keeps its server-side-apply owner.
pub async fn record_token(le: &LeaderElection, ctx: &Context, token: u64) -> Result<(), Error> {
    let mut current = ctx.current_status(le);
    if current.fencing_token.is_some_and(|t| t >= token) {
        return Ok(());
    }
    let api: Api<LeaderElection> = Api::namespaced(
        ctx.client.clone(),
        &le.namespace().ok_or(Error::MissingMetadata("namespace"))?,
    );
    let patch = json!({ "status": { "fencingToken": token } });
    api.patch_status(
        &le.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await
    .map_err(Error::kube("patch status"))?;
    current.fencing_token = Some(token);
    ctx.remember_status(le, Some(current));
    Ok(())
}

/// Records what the operator is about to act with (see [`AppliedSpec`]), before it acts: a
/// merge patch of this one field, like [`record_token`].
pub async fn record_applied(
    le: &LeaderElection,
    ctx: &Context,
    applied: &AppliedSpec,
) -> Result<(), Error> {
    let mut current = ctx.current_status(le);
    if current.applied.as_ref() == Some(applied) {
        return Ok(());
    }
    let api: Api<LeaderElection> = Api::namespaced(
        ctx.client.clone(),
        &le.namespace().ok_or(Error::MissingMetadata("namespace"))?,
    );
    // One merge patch, every absent field explicitly null: a merge patch would otherwise keep
    // a recorded field the new value omits.
    let mut value = serde_json::to_value(applied)
        .map_err(|e| Error::kube("patch status")(kube::Error::SerdeError(e)))?;
    if let Some(fields) = value.as_object_mut() {
        for field in [
            "consulAddress",
            "datacenter",
            "tokenSecretName",
            "tokenSecretKey",
        ] {
            fields.entry(field).or_insert(serde_json::Value::Null);
        }
    }
    api.patch_status(
        &le.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&json!({ "status": { "applied": value } })),
    )
    .await
    .map_err(Error::kube("patch status"))?;
    current.applied = Some(applied.clone());
    ctx.remember_status(le, Some(current));
    Ok(())
}

async fn patch_if_changed(
    le: &LeaderElection,
    ctx: &Context,
    old: &LeaderElectionStatus,
    new: LeaderElectionStatus,
) -> Result<(), Error> {
    if *old == new {
        return Ok(());
    }
    let api: Api<LeaderElection> = Api::namespaced(
        ctx.client.clone(),
        &le.namespace().ok_or(Error::MissingMetadata("namespace"))?,
    );
    if new.candidates.is_empty() {
        // Server-side apply cannot say "no candidates": a 1.20 API server turns an applied
        // empty (or omitted, once owned) list into `candidates: null`, which the schema
        // rejects, so the status could never be written again once an election selects no
        // pod. Write such a status as a merge patch instead, every absent field explicit.
        let mut status = serde_json::to_value(&new)
            .map_err(|e| Error::kube("patch status")(kube::Error::SerdeError(e)))?;
        if let Some(fields) = status.as_object_mut() {
            for field in ["phase", "leader", "fencingToken", "observedGeneration"] {
                fields.entry(field).or_insert(serde_json::Value::Null);
            }
            fields.insert("candidates".to_owned(), json!([]));
            fields.entry("conditions").or_insert_with(|| json!([]));
        }
        api.patch_status(
            &le.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&json!({ "status": status })),
        )
        .await
        .map_err(Error::kube("patch status"))?;
    } else {
        let patch = json!({
            "apiVersion": API_VERSION,
            "kind": "LeaderElection",
            "status": &new,
        });
        api.patch_status(
            &le.name_any(),
            &PatchParams::apply(&ctx.settings.field_manager).force(),
            &Patch::Apply(&patch),
        )
        .await
        .map_err(Error::kube("patch status"))?;
    }
    ctx.remember_status(le, Some(new));
    Ok(())
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
