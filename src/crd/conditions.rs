//! The condition types of a `LeaderElection` and the rule that keeps `lastTransitionTime`
//! meaningful: it changes only when a condition's status changes.

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

/// A pod leads and holds the Consul lock (`True`), or none does (`False`, with the reason).
pub const LEADER_ELECTED: &str = "LeaderElected";
/// Consul answered the operator's last requests for this election.
pub const CONSUL_AVAILABLE: &str = "ConsulAvailable";
/// The spec can be used (`False` with reason `InvalidSpec` and every problem in the message,
/// or reason `LabelKeySelectedByOwner` when `spec.labels.key` is in the selector of a
/// candidate pod's controller).
pub const SPEC_VALID: &str = "SpecValid";
/// The `SpecValid` reason (and the event's) of a label key the pods' controller selects on
/// (see [`crate::election::label_key_check`]).
pub const SELECTED_BY_OWNER: &str = "LabelKeySelectedByOwner";
/// No older election selects this one's pods with the same label key (`True`, reason
/// `Exclusive`); `False` (reason `Conflict`, the older election named in the message) when one
/// does: this one then stands back and writes nothing.
pub const EXCLUSIVE: &str = "Exclusive";
/// Condition types that versions before [`EXCLUSIVE`] wrote, with the opposite polarity
/// (`Conflict`: `True` when bad). Every condition of the election's own is now `True` when all
/// is well (only [`STALLED`] and [`RECONCILING`], kstatus' conventions, are `True` when not),
/// so a stored one of these types is dropped at the next status write.
pub const RETIRED: [&str; 1] = ["Conflict"];
/// The status is written as the operator decides it (`True`, reason `Written`); after status
/// writes failed, the first write that succeeds says how many failed before it (reason
/// `WrittenAfterFailures`).
pub const STATUS_WRITTEN: &str = "StatusWritten";
/// The election's Consul session outlives a failover of the operator's own replicas
/// (`True`, reason `SessionOutlivesFailover`); `False` (reason `SessionTTLTooShort`) when a
/// crash of the active replica can let the session expire before a standby adopts it, which
/// demotes and re-elects the leader. Only for managed elections.
pub const LEASE_TIMING_SAFE: &str = "LeaseTimingSafe";

/// Whether the election is where it should be, derived from the others: `True` when a pod
/// leads (reason `LeaderElected`) or nobody leads on purpose (reason `Idle`: no pod selected,
/// the key held by another cluster or tool, another install serving the election, or the
/// election paused);
/// `False` otherwise, with the reason of the condition that says why. For `kubectl wait
/// --for=condition=Ready`, Flux's kstatus and Argo CD health checks.
pub const READY: &str = "Ready";

/// kstatus' (Flux's) condition for an election that cannot progress until the user changes
/// something: `True` (with [`READY`]'s reason and message) for an invalid spec, a label key the
/// pods' controller selects, or a conflict with an older election; `False` otherwise. Without
/// it kstatus reads such an election as in progress until its timeout.
pub const STALLED: &str = "Stalled";
/// kstatus' condition for an election on its way to [`READY`]: `True` (with its reason and
/// message) while a leader is being elected, no selected pod is eligible yet, Consul does not
/// answer, or the operator has not acted yet; `False` once Ready, and while stalled.
pub const RECONCILING: &str = "Reconciling";

/// The reason of `LeaderElected` (and [`READY`]) of an election the operator's uninstall
/// released: nothing acts on it until the operator is installed again.
pub const RELEASED: &str = "Released";

/// The reasons of [`READY`] that only a change by the user ends ([`STALLED`]).
const STALLING: [&str; 4] = ["InvalidSpec", SELECTED_BY_OWNER, "Conflict", RELEASED];

/// The [`READY`] condition's status, reason and message, derived from `conditions` (the
/// election's other conditions) and how many pods it selects (`candidates`).
pub fn readiness(conditions: &[Condition], candidates: usize) -> (bool, &'static str, String) {
    let find = |type_: &str| conditions.iter().find(|c| c.type_ == type_);
    if let Some(invalid) = find(SPEC_VALID).filter(|c| c.status != "True") {
        let reason = if invalid.reason == SELECTED_BY_OWNER {
            SELECTED_BY_OWNER
        } else {
            "InvalidSpec"
        };
        return (false, reason, invalid.message.clone());
    }
    if let Some(conflict) = find(EXCLUSIVE).filter(|c| c.status != "True") {
        return (false, "Conflict", conflict.message.clone());
    }
    let Some(elected) = find(LEADER_ELECTED) else {
        return (
            false,
            "NotReconciled",
            "the operator has not acted on this election yet".into(),
        );
    };
    if elected.status == "True" {
        return (true, "LeaderElected", elected.message.clone());
    }
    match elected.reason.as_str() {
        "LockHeldElsewhere" | "ManagedElsewhere" | "Paused" => (
            true,
            "Idle",
            format!("nobody leads here on purpose: {}", elected.message),
        ),
        "NoCandidates" if candidates == 0 => (
            true,
            "Idle",
            "no pod is selected (scaled to zero); a leader is elected when one is".into(),
        ),
        "NoCandidates" => (false, "NoCandidates", elected.message.clone()),
        RELEASED => (false, RELEASED, elected.message.clone()),
        _ => (false, "NoLeader", elected.message.clone()),
    }
}

/// [`merge`], without the [`RETIRED`] condition types, plus the [`READY`] condition derived
/// from the merged conditions ([`readiness`]), with `generation` as its `observedGeneration`.
pub fn merge_with_ready(
    old: &[Condition],
    new: Vec<Condition>,
    candidates: usize,
    generation: Option<i64>,
    now: Timestamp,
) -> Vec<Condition> {
    let old: Vec<Condition> = old
        .iter()
        .filter(|c| !RETIRED.contains(&c.type_.as_str()))
        .cloned()
        .collect();
    let mut merged = merge(&old, new, now);
    let (ready, reason, message) = readiness(&merged, candidates);
    let stalled = !ready && STALLING.contains(&reason);
    let reconciling = !ready && !stalled;
    // The API server refuses an empty message (it reads as null): a False one says why.
    let derived = |type_: &str, status: bool, otherwise: (&str, &str)| {
        let (reason, message) = match status || type_ == READY {
            true => (reason, message.clone()),
            false => (otherwise.0, otherwise.1.to_owned()),
        };
        Condition {
            type_: type_.to_owned(),
            status: if status { "True" } else { "False" }.to_owned(),
            reason: reason.to_owned(),
            message,
            observed_generation: generation,
            last_transition_time: Time(now),
        }
    };
    merged.retain(|c| ![READY, STALLED, RECONCILING].contains(&c.type_.as_str()));
    merged.push(derived(READY, ready, (reason, "")));
    let not_stalled = ("NotStalled", "nothing needs a change by the user");
    merged.push(derived(STALLED, stalled, not_stalled));
    let not_reconciling = match stalled {
        true => ("NotReconciling", "stalled until the user changes something"),
        false => ("NotReconciling", "the election is where it should be"),
    };
    merged.push(derived(RECONCILING, reconciling, not_reconciling));
    merge(&old, merged, now)
}

/// The conditions to write: every condition of `new`, plus the conditions of `old` whose type
/// `new` does not mention (unchanged). Order: `old`'s order, then the types new in `new`.
///
/// A condition of `new` whose type is in `old` with the same `status` keeps `old`'s
/// `lastTransitionTime` (its reason, message and observedGeneration are `new`'s); any other
/// condition of `new` gets `now`. The `lastTransitionTime` given in `new` is ignored.
pub fn merge(old: &[Condition], new: Vec<Condition>, now: Timestamp) -> Vec<Condition> {
    let transition_time = |condition: &Condition| {
        old.iter()
            .find(|o| o.type_ == condition.type_ && o.status == condition.status)
            .map_or(Time(now), |o| o.last_transition_time.clone())
    };
    let mut updated: Vec<Option<Condition>> = new
        .into_iter()
        .map(|mut condition| {
            condition.last_transition_time = transition_time(&condition);
            Some(condition)
        })
        .collect();
    let mut merged: Vec<Condition> = old
        .iter()
        .map(|o| {
            updated
                .iter_mut()
                .find(|n| n.as_ref().is_some_and(|n| n.type_ == o.type_))
                .and_then(Option::take)
                .unwrap_or_else(|| o.clone())
        })
        .collect();
    merged.extend(updated.into_iter().flatten());
    merged
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(second).expect("a valid test timestamp")
    }

    fn condition(type_: &str, status: &str, reason: &str, time: i64) -> Condition {
        Condition {
            type_: type_.to_owned(),
            status: status.to_owned(),
            reason: reason.to_owned(),
            message: format!("{type_} is {status}"),
            observed_generation: Some(1),
            last_transition_time: Time(at(time)),
        }
    }

    #[test]
    fn unchanged_status_keeps_the_transition_time_but_takes_the_new_reason() {
        let old = [condition(LEADER_ELECTED, "True", "Elected", 10)];
        let merged = merge(
            &old,
            vec![condition(LEADER_ELECTED, "True", "StillElected", 0)],
            at(50),
        );
        assert_eq!(merged.len(), 1);
        assert_eq!(merged[0].last_transition_time, Time(at(10)));
        assert_eq!(merged[0].reason, "StillElected");
    }

    #[test]
    fn changed_status_gets_now() {
        let old = [condition(LEADER_ELECTED, "True", "Elected", 10)];
        let merged = merge(
            &old,
            vec![condition(LEADER_ELECTED, "False", "NoCandidate", 0)],
            at(50),
        );
        assert_eq!(merged[0].last_transition_time, Time(at(50)));
        assert_eq!(merged[0].status, "False");
    }

    #[test]
    fn a_new_type_gets_now_and_goes_last() {
        let old = [condition(LEADER_ELECTED, "True", "Elected", 10)];
        let merged = merge(
            &old,
            vec![condition(CONSUL_AVAILABLE, "True", "Answered", 0)],
            at(50),
        );
        let types: Vec<_> = merged.iter().map(|c| c.type_.as_str()).collect();
        assert_eq!(types, [LEADER_ELECTED, CONSUL_AVAILABLE]);
        assert_eq!(
            merged[0], old[0],
            "an unmentioned condition is kept as it was"
        );
        assert_eq!(merged[1].last_transition_time, Time(at(50)));
    }

    #[test]
    fn old_order_is_kept_whatever_the_order_of_new() {
        let old = [
            condition(SPEC_VALID, "True", "Valid", 1),
            condition(LEADER_ELECTED, "True", "Elected", 2),
            condition(EXCLUSIVE, "True", "Exclusive", 3),
        ];
        let merged = merge(
            &old,
            vec![
                condition(EXCLUSIVE, "False", "Conflict", 0),
                condition(SPEC_VALID, "True", "Valid", 0),
            ],
            at(50),
        );
        let summary: Vec<_> = merged
            .iter()
            .map(|c| {
                (
                    c.type_.as_str(),
                    c.status.as_str(),
                    c.last_transition_time.0,
                )
            })
            .collect();
        assert_eq!(
            summary,
            [
                (SPEC_VALID, "True", at(1)),
                (LEADER_ELECTED, "True", at(2)),
                (EXCLUSIVE, "False", at(50)),
            ]
        );
    }

    #[test]
    fn empty_inputs() {
        assert!(merge(&[], Vec::new(), at(1)).is_empty());
        let merged = merge(
            &[],
            vec![condition(SPEC_VALID, "False", "InvalidSpec", 7)],
            at(9),
        );
        assert_eq!(merged[0].last_transition_time, Time(at(9)));
    }

    #[test]
    fn ready_when_a_pod_leads_or_nobody_leads_on_purpose() {
        let ready = |conditions: &[Condition], candidates| {
            let (status, reason, _) = readiness(conditions, candidates);
            (status, reason)
        };
        let elected = condition(LEADER_ELECTED, "True", "Elected", 1);
        assert_eq!(
            ready(std::slice::from_ref(&elected), 3),
            (true, "LeaderElected")
        );
        for reason in ["LockHeldElsewhere", "ManagedElsewhere"] {
            let held = condition(LEADER_ELECTED, "False", reason, 1);
            assert_eq!(ready(&[held], 3), (true, "Idle"), "{reason}");
        }
        let none = condition(LEADER_ELECTED, "False", "NoCandidates", 1);
        assert_eq!(
            ready(std::slice::from_ref(&none), 0),
            (true, "Idle"),
            "scaled to zero"
        );
        assert_eq!(
            ready(&[none], 2),
            (false, "NoCandidates"),
            "pods selected, none eligible"
        );
        for reason in ["Electing", "Fenced", "ConsulUnavailable", "LockDelay"] {
            let moving = condition(LEADER_ELECTED, "False", reason, 1);
            assert_eq!(ready(&[moving], 3), (false, "NoLeader"), "{reason}");
        }
        assert_eq!(ready(&[], 3), (false, "NotReconciled"));
        let invalid = condition(SPEC_VALID, "False", "InvalidSpec", 1);
        assert_eq!(
            ready(&[elected.clone(), invalid], 3),
            (false, "InvalidSpec"),
            "an invalid spec is not ready whatever was elected before"
        );
        let refused = condition(SPEC_VALID, "False", SELECTED_BY_OWNER, 1);
        assert_eq!(
            ready(&[elected.clone(), refused], 3),
            (false, SELECTED_BY_OWNER)
        );
        let conflict = condition(EXCLUSIVE, "False", "Conflict", 1);
        assert_eq!(ready(&[elected.clone(), conflict], 3), (false, "Conflict"));
        let exclusive = condition(EXCLUSIVE, "True", "Exclusive", 1);
        assert_eq!(ready(&[elected, exclusive], 3), (true, "LeaderElected"));
    }

    #[test]
    fn the_ready_condition_keeps_its_transition_time_while_its_status_holds() {
        let elected = || vec![condition(LEADER_ELECTED, "True", "Elected", 0)];
        let first = merge_with_ready(&[], elected(), 3, Some(1), at(10));
        let ready = |conditions: &[Condition]| {
            conditions
                .iter()
                .find(|c| c.type_ == READY)
                .cloned()
                .expect("a Ready condition")
        };
        assert_eq!(ready(&first).status, "True");
        assert_eq!(ready(&first).last_transition_time, Time(at(10)));
        assert_eq!(ready(&first).observed_generation, Some(1));
        let again = merge_with_ready(&first, elected(), 3, Some(2), at(20));
        assert_eq!(ready(&again).last_transition_time, Time(at(10)));
        assert_eq!(ready(&again).observed_generation, Some(2));
        assert_eq!(again.iter().filter(|c| c.type_ == READY).count(), 1);
        let lost = vec![condition(LEADER_ELECTED, "False", "Electing", 0)];
        let moving = merge_with_ready(&again, lost, 3, Some(2), at(30));
        assert_eq!(ready(&moving).status, "False");
        assert_eq!(ready(&moving).last_transition_time, Time(at(30)));
    }

    #[test]
    fn a_stored_conflict_condition_of_an_older_version_is_dropped() {
        let old = [
            condition(LEADER_ELECTED, "True", "Elected", 1),
            condition("Conflict", "False", "NoConflict", 1),
        ];
        let new = vec![
            condition(LEADER_ELECTED, "True", "Elected", 0),
            condition(EXCLUSIVE, "True", "Exclusive", 0),
        ];
        let merged = merge_with_ready(&old, new, 3, Some(1), at(10));
        let types: Vec<_> = merged.iter().map(|c| c.type_.as_str()).collect();
        assert_eq!(
            types,
            [LEADER_ELECTED, EXCLUSIVE, READY, STALLED, RECONCILING]
        );
        assert_eq!(merged[0].last_transition_time, Time(at(1)));
        // Also when the new conditions do not mention it (an invalid spec's status).
        let old = [condition("Conflict", "True", "Conflict", 1)];
        let invalid = vec![condition(SPEC_VALID, "False", "InvalidSpec", 0)];
        let merged = merge_with_ready(&old, invalid, 3, Some(1), at(10));
        assert!(merged.iter().all(|c| c.type_ != "Conflict"), "{merged:?}");
    }

    #[test]
    fn stalled_and_reconciling_say_whether_the_user_or_time_ends_a_not_ready_election() {
        let status = |conditions: &[Condition], type_: &str| {
            let found = conditions.iter().find(|c| c.type_ == type_);
            found.map(|c| (c.status.clone(), c.reason.clone()))
        };
        let of = |new: Vec<Condition>| merge_with_ready(&[], new, 3, Some(1), at(10));
        let elected = of(vec![condition(LEADER_ELECTED, "True", "Elected", 0)]);
        let electing = of(vec![condition(LEADER_ELECTED, "False", "Electing", 0)]);
        let invalid = of(vec![condition(SPEC_VALID, "False", "InvalidSpec", 0)]);
        let conflict = of(vec![condition(EXCLUSIVE, "False", "Conflict", 0)]);
        let owner = of(vec![condition(SPEC_VALID, "False", SELECTED_BY_OWNER, 0)]);
        let no = |reason: &str| Some(("False".to_owned(), reason.to_owned()));
        let yes = |reason: &str| Some(("True".to_owned(), reason.to_owned()));
        for conditions in [&elected, &electing, &invalid, &conflict, &owner] {
            assert!(
                conditions.iter().all(|c| !c.message.is_empty()),
                "the API server refuses an empty message: {conditions:?}"
            );
        }
        assert_eq!(status(&elected, STALLED), no("NotStalled"));
        assert_eq!(status(&elected, RECONCILING), no("NotReconciling"));
        assert_eq!(status(&electing, STALLED), no("NotStalled"));
        assert_eq!(status(&electing, RECONCILING), yes("NoLeader"));
        for (stuck, reason) in [
            (&invalid, "InvalidSpec"),
            (&conflict, "Conflict"),
            (&owner, SELECTED_BY_OWNER),
        ] {
            assert_eq!(status(stuck, STALLED), yes(reason));
            assert_eq!(status(stuck, RECONCILING), no("NotReconciling"));
        }
    }
}
