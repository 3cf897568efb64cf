//! The status an election reports, rendered from a plan (or from a decision to stand back) and
//! the status written before: phase, leader, candidates, the switchover record and the
//! conditions with their transition times. Pure: the controller passes what it knows (the pod
//! that carries the leader label now, status writes that failed before, the clock) and writes
//! the result when it differs from the status before.

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use super::leadership_history;
use super::observe::{LeaderRecord, Recorded, SwitchoverOutcome, SwitchoverRecord};
use super::plan::{self, ConditionState, Plan};
use super::planner::LEADER_ELECTED;
use crate::crd::conditions::{self, EXCLUSIVE, RELEASED, SPEC_VALID, STATUS_WRITTEN};
use crate::crd::{
    AppliedSpec, CandidateStatus, LeaderElectionStatus, LeaderStatus, Phase, SpecProblem,
    SwitchoverResult, SwitchoverStatus,
};

/// What a status is rendered from, beside the plan.
#[derive(Debug, Clone)]
pub struct Rendering<'a> {
    /// The status as last written.
    pub old: &'a LeaderElectionStatus,
    /// The election's `metadata.generation`.
    pub generation: Option<i64>,
    /// The UID of the pod that carries the leader label now (or will, when rendered before
    /// the label is written).
    pub labelled: Option<&'a str>,
    /// What the operator acts with (`status.applied`).
    pub applied: Option<AppliedSpec>,
    /// The `SpecValid` condition (True: the spec is acted on).
    pub spec_valid: ConditionState,
    /// The `LeaseTimingSafe` condition of a managed election.
    pub lease_timing: Option<ConditionState>,
    /// Status writes that failed in a row before this one, with the last error's category.
    pub failed_writes: Option<(u32, &'static str)>,
    /// Now, for the transition times of conditions that change.
    pub now: Timestamp,
}

/// The status `plan` decides, as far as it was carried out: a plan whose leader is not
/// `labelled` reports phase Electing and `LeaderElected` False, never a leader no pod shows.
pub fn decided(plan: &Plan, r: Rendering<'_>) -> LeaderElectionStatus {
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
        observed_generation: r.generation,
        applied: r.applied,
        // The write raises it from the status it was based on.
        revision: r.old.revision,
        served_by: state.served_by.clone(),
        history: Vec::new(),
        conditions: Vec::new(),
    };
    let carried_out = state.phase != plan::Phase::Elected
        || state.leader.as_ref().map(|l| l.uid.as_str()) == r.labelled;
    let mut fresh: Vec<Condition> = state
        .conditions
        .iter()
        .map(|c| match c.type_ {
            LEADER_ELECTED if !carried_out => condition(
                r.generation,
                &ConditionState {
                    type_: LEADER_ELECTED,
                    status: false,
                    reason: "Electing",
                    message: "the leader is not labelled yet; retrying".into(),
                },
            ),
            _ => condition(r.generation, c),
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
        .is_some_and(|l| Some(l.uid.as_str()) == r.labelled)
    {
        new.leader = new.last_leader.take();
    }
    fresh.push(condition(r.generation, &r.spec_valid));
    fresh.push(condition(
        r.generation,
        &ConditionState {
            type_: EXCLUSIVE,
            status: true,
            reason: "Exclusive",
            message: "no older election selects these pods with the same label key".into(),
        },
    ));
    if let Some(lease_timing) = &r.lease_timing {
        fresh.push(condition(r.generation, lease_timing));
    }
    fresh.push(condition(r.generation, &status_written(r.failed_writes)));
    new.history = leadership_history::next(&r.old.history, &new, r.now);
    new.conditions = conditions::merge_with_ready(
        &r.old.conditions,
        fresh,
        new.candidates.len(),
        r.generation,
        r.now,
    );
    new
}

/// Why an election stands back instead of acting, as its status and event say it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StandBack {
    /// Invalid or Conflict.
    pub phase: Phase,
    /// The one condition that changes.
    pub condition: ConditionState,
    /// The reason of the Warning event, when the condition is news.
    pub reason: plan::EventReason,
}

impl StandBack {
    /// A spec that cannot be acted on: the `SpecValid` condition `spec_valid` (False).
    pub fn invalid(spec_valid: ConditionState, reason: plan::EventReason) -> StandBack {
        StandBack {
            phase: Phase::Invalid,
            condition: spec_valid,
            reason,
        }
    }

    /// An older election, `older`, claims the same pods under the same label key: this one
    /// writes nothing (rule 1).
    pub fn conflict(older: &str) -> StandBack {
        StandBack {
            phase: Phase::Conflict,
            condition: ConditionState {
                type_: EXCLUSIVE,
                status: false,
                reason: "Conflict",
                message: format!(
                    "election {older} is older and selects the same pods with the same label key; this one writes nothing"
                ),
            },
            reason: plan::EventReason::Conflict,
        }
    }
}

/// The status of an election that stands back, and the Warning to publish when its condition
/// is news (not on every requeue).
pub fn standing_back(
    old: &LeaderElectionStatus,
    generation: Option<i64>,
    back: &StandBack,
    now: Timestamp,
) -> (LeaderElectionStatus, Option<plan::ElectionEvent>) {
    let state = &back.condition;
    let news = !old.conditions.iter().any(|c| {
        c.type_ == state.type_
            && c.status == bool_status(state.status)
            && c.message == state.message
    });
    let mut new = LeaderElectionStatus {
        phase: Some(back.phase),
        observed_generation: generation,
        ..old.clone()
    };
    new.conditions = conditions::merge_with_ready(
        &old.conditions,
        vec![condition(generation, state)],
        new.candidates.len(),
        generation,
        now,
    );
    let event = news.then(|| plan::ElectionEvent {
        reason: back.reason,
        pod: None,
        note: truncate(&state.message, 1024),
        warning: true,
        fenced: None,
    });
    (new, event)
}

/// The status of an election the operator's uninstall released and keeps: nobody leads (the
/// leader stays on record as the last one), no install serves it, and `LeaderElected` says
/// why; with the event that says so.
pub fn released(
    old: &LeaderElectionStatus,
    generation: Option<i64>,
    now: Timestamp,
) -> (LeaderElectionStatus, plan::ElectionEvent) {
    let message = "the operator was uninstalled and released this election (its labels off the \
                   pods, its key released, its session destroyed); installing it again elects \
                   again";
    let state = ConditionState {
        type_: LEADER_ELECTED,
        status: false,
        reason: RELEASED,
        message: message.into(),
    };
    let mut new = LeaderElectionStatus {
        phase: Some(Phase::Pending),
        leader: None,
        last_leader: old.leader.clone().or_else(|| old.last_leader.clone()),
        served_by: None,
        observed_generation: generation,
        history: leadership_history::closed(&old.history, now, leadership_history::RELEASED),
        ..old.clone()
    };
    new.conditions = conditions::merge_with_ready(
        &old.conditions,
        vec![condition(generation, &state)],
        new.candidates.len(),
        generation,
        now,
    );
    let event = plan::ElectionEvent {
        reason: plan::EventReason::Released,
        pod: None,
        note: message.into(),
        warning: false,
        fenced: None,
    };
    (new, event)
}

/// The [`STATUS_WRITTEN`] condition: after failed status writes, the write that succeeds
/// says so.
fn status_written(failed: Option<(u32, &'static str)>) -> ConditionState {
    match failed {
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

/// Rule 6 before a pod is labelled with `token`, as a whole record: the status `plan` decides
/// once the pod carries the label (its UID in `r.labelled`), holding the token (never a lower
/// one than the plan's: a stale request must not move it backwards).
pub fn decided_with_token(plan: &Plan, r: Rendering<'_>, token: u64) -> LeaderElectionStatus {
    let mut new = decided(plan, r);
    new.fencing_token = new.fencing_token.max(Some(token));
    new
}

/// Rule 6 before a pod is labelled with `token`: the status as it is, holding the token
/// (never a lower one than it holds: a stale request must not move it backwards) and what
/// the operator acts with.
pub fn token_recorded(
    current: &LeaderElectionStatus,
    token: u64,
    applied: Option<AppliedSpec>,
) -> LeaderElectionStatus {
    LeaderElectionStatus {
        fencing_token: current.fencing_token.max(Some(token)),
        applied,
        ..current.clone()
    }
}

/// The status as it is, with how a switchover request was decided.
pub fn switchover_recorded(
    current: &LeaderElectionStatus,
    record: &SwitchoverRecord,
) -> LeaderElectionStatus {
    LeaderElectionStatus {
        last_switchover: Some(switchover_status(record)),
        ..current.clone()
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

/// `status.lastSwitchover` as the planner reads it.
pub fn switchover_record(status: &SwitchoverStatus) -> SwitchoverRecord {
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
pub fn switchover_status(record: &SwitchoverRecord) -> SwitchoverStatus {
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

/// A condition of `generation` (its transition time is set when merged).
fn condition(generation: Option<i64>, c: &ConditionState) -> Condition {
    Condition {
        type_: c.type_.to_owned(),
        status: bool_status(c.status).to_owned(),
        reason: c.reason.to_owned(),
        message: truncate(&c.message, 32_768),
        observed_generation: generation,
        last_transition_time: Time(Timestamp::UNIX_EPOCH),
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

/// `s` cut to at most `max` bytes, at a character boundary.
pub fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_owned()
}

/// What the election's status recorded.
pub fn recorded(status: &LeaderElectionStatus) -> Recorded {
    Recorded {
        leader: status.leader_or_last().map(|l| LeaderRecord {
            pod: l.pod.clone(),
            uid: l.uid.clone(),
            pod_ip: l.pod_ip.clone(),
            since: l.since,
            session_id: l.session_id.clone(),
        }),
        fencing_token: status.fencing_token,
        transitions: status.transitions,
        last_switchover: status.last_switchover.as_ref().map(switchover_record),
        served_by: status.served_by.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncation_keeps_whole_characters() {
        assert_eq!(truncate("héllo", 2), "h");
        assert_eq!(truncate("héllo", 3), "hé");
        assert_eq!(truncate("abc", 10), "abc");
    }

    #[test]
    fn a_condition_standing_back_is_news_only_when_its_message_changes() {
        let invalid = StandBack::invalid(
            ConditionState {
                type_: SPEC_VALID,
                status: false,
                reason: "InvalidSpec",
                message: "spec.key: empty".into(),
            },
            plan::EventReason::InvalidSpec,
        );
        let now = Timestamp::UNIX_EPOCH;
        let (first, news) = standing_back(&LeaderElectionStatus::default(), Some(2), &invalid, now);
        let news = news.expect("a first condition is news");
        assert_eq!(news.reason, plan::EventReason::InvalidSpec);
        assert_eq!(news.note, "spec.key: empty");
        assert_eq!(first.phase, Some(Phase::Invalid));
        assert_eq!(first.observed_generation, Some(2));
        let (again, news) = standing_back(&first, Some(2), &invalid, now);
        assert_eq!(news, None);
        assert_eq!(again, first);
        // Another election, older, taking the pods: Conflict, with the new condition.
        let (conflict, news) = standing_back(&first, Some(2), &StandBack::conflict("a"), now);
        assert!(news.is_some());
        assert_eq!(conflict.phase, Some(Phase::Conflict));
        assert!(
            conflict
                .conditions
                .iter()
                .any(|c| c.type_ == EXCLUSIVE && c.status == "False" && c.message.contains("a"))
        );
    }

    #[test]
    fn a_token_record_never_moves_the_token_backwards() {
        let current = LeaderElectionStatus {
            fencing_token: Some(7),
            ..LeaderElectionStatus::default()
        };
        let applied = AppliedSpec::default();
        assert_eq!(
            token_recorded(&current, 5, Some(applied.clone())).fencing_token,
            Some(7)
        );
        let raised = token_recorded(&current, 9, Some(applied.clone()));
        assert_eq!(raised.fencing_token, Some(9));
        assert_eq!(raised.applied, Some(applied));
    }
}
