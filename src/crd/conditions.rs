//! The condition types of a `LeaderElection` and the rule that keeps `lastTransitionTime`
//! meaningful: it changes only when a condition's status changes.

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

/// A pod leads and holds the Consul lock (`True`), or none does (`False`, with the reason).
pub const LEADER_ELECTED: &str = "LeaderElected";
/// Consul answered the operator's last requests for this election.
pub const CONSUL_AVAILABLE: &str = "ConsulAvailable";
/// The spec can be used (`False` with reason `InvalidSpec` and every problem in the message).
pub const SPEC_VALID: &str = "SpecValid";
/// An older election selects the same pods with the same label key, so this one stands back.
pub const CONFLICT: &str = "Conflict";
/// The status is written as the operator decides it (`True`, reason `Written`); after status
/// writes failed, the first write that succeeds says how many failed before it (reason
/// `WrittenAfterFailures`).
pub const STATUS_WRITTEN: &str = "StatusWritten";
/// The election's Consul session outlives a failover of the operator's own replicas
/// (`True`, reason `SessionOutlivesFailover`); `False` (reason `SessionTTLTooShort`) when a
/// crash of the active replica can let the session expire before a standby adopts it, which
/// demotes and re-elects the leader. Only for managed elections.
pub const LEASE_TIMING_SAFE: &str = "LeaseTimingSafe";

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
            condition(CONFLICT, "False", "NoConflict", 3),
        ];
        let merged = merge(
            &old,
            vec![
                condition(CONFLICT, "True", "OlderElection", 0),
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
                (CONFLICT, "True", at(50)),
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
}
