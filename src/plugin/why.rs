//! `kubectl elector why`: why a pod leads or does not, from the election's status (the
//! operator's view of each candidate), the pod itself and the election's failback setting.

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use serde::Serialize;

use crate::crd::conditions;
use crate::crd::{
    CandidateStatus, LeaderElection, LeaderElectionStatus, PRIORITY_ANNOTATION, Phase,
    selector_matches, selector_string,
};

/// The answer of `why`.
#[derive(Serialize, Debug, Clone, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Explanation {
    /// The election.
    pub election: String,
    /// The pod asked about.
    pub pod: String,
    /// Whether it leads now.
    pub leads: bool,
    /// Whether the operator lists it as a candidate.
    pub candidate: bool,
    /// Whether it may lead (`None` when it is not a candidate).
    pub eligible: Option<bool>,
    /// Why it may not lead.
    pub reason: Option<String>,
    /// Its priority (the operator's, else its annotation's).
    pub priority: Option<i32>,
    /// The pod that leads now.
    pub leader: Option<String>,
    /// One or two sentences.
    pub explanation: String,
}

/// Explains why `pod_name` leads `election` or not; `pod` is the pod as read now (`None`
/// when it does not exist).
pub fn explain(election: &LeaderElection, pod_name: &str, pod: Option<&Pod>) -> Explanation {
    let status = election.status.clone().unwrap_or_default();
    let name = election.name_any();
    let leader = status.leader.as_ref().map(|l| l.pod.clone());
    let candidate = status.candidates.iter().find(|c| c.pod == pod_name);
    let priority = candidate
        .map(|c| c.priority)
        .or_else(|| pod.and_then(annotated_priority));
    let leads = leader.as_deref() == Some(pod_name);
    let explanation = if leads {
        leading(election, &status, pod_name, candidate)
    } else {
        match candidate {
            None => not_a_candidate(election, pod_name, pod),
            Some(c) if !c.eligible => not_eligible(c, pod),
            Some(c) => eligible_follower(election, &status, c),
        }
    };
    Explanation {
        election: name,
        pod: pod_name.to_owned(),
        leads,
        candidate: candidate.is_some(),
        eligible: candidate.map(|c| c.eligible),
        reason: candidate.and_then(|c| c.reason.clone()),
        priority,
        leader,
        explanation,
    }
}

/// The pod's `elector.dev/priority` annotation as an integer (0 when absent).
fn annotated_priority(pod: &Pod) -> Option<i32> {
    match pod.annotations().get(PRIORITY_ANNOTATION) {
        None => Some(0),
        Some(text) => text.trim().parse().ok(),
    }
}

fn leading(
    election: &LeaderElection,
    status: &LeaderElectionStatus,
    pod: &str,
    candidate: Option<&CandidateStatus>,
) -> String {
    let token = status
        .fencing_token
        .map_or_else(String::new, |t| format!(", fencing token {t}"));
    let since = status
        .leader
        .as_ref()
        .map_or_else(String::new, |l| format!(" since {}", l.since));
    let first = format!("{pod} leads{since}{token}.");
    match candidate {
        Some(c) if !c.eligible => {
            let reason = c.reason.as_deref().unwrap_or("unknown reason");
            let delay = if reason == "NotReady" {
                format!(
                    " once spec.failover.delay ({}) has passed",
                    election.spec.failover.delay
                )
            } else {
                String::new()
            };
            format!("{first} It is not eligible any more ({reason}) and will be replaced{delay}.")
        }
        _ => first,
    }
}

fn not_a_candidate(election: &LeaderElection, pod_name: &str, pod: Option<&Pod>) -> String {
    match pod {
        None => format!(
            "{pod_name} is not a candidate: there is no such pod in namespace {}.",
            election.namespace().unwrap_or_default()
        ),
        Some(pod) if selector_matches(&election.spec.selector, pod.labels()) => format!(
            "{pod_name} matches the selector but the operator has not listed it as a \
             candidate yet (the status lags behind the pod)."
        ),
        Some(_) => format!(
            "{pod_name} is not a candidate: its labels do not match the election's selector \
             ({}).",
            selector_string(&election.spec.selector)
        ),
    }
}

fn not_eligible(candidate: &CandidateStatus, pod: Option<&Pod>) -> String {
    let reason = candidate.reason.as_deref().unwrap_or("unknown reason");
    let detail = match reason {
        "NotReady" => "its Ready condition is not True and the election requires Ready \
                       candidates (spec.candidates.requireReady)"
            .to_owned(),
        "Terminating" => "it is being deleted".to_owned(),
        "Finished" => "it has Succeeded or Failed and will not run again".to_owned(),
        "NotSelected" => "it no longer matches the election's selector".to_owned(),
        "NeverLeader" => format!(
            "its priority {} ({PRIORITY_ANNOTATION}) is negative, which means it never leads",
            candidate.priority
        ),
        "InvalidPriority" => format!(
            "its annotation {PRIORITY_ANNOTATION} is {:?}, not an integer",
            pod.and_then(|p| p.annotations().get(PRIORITY_ANNOTATION).cloned())
                .unwrap_or_default()
        ),
        _ => String::new(),
    };
    if detail.is_empty() {
        format!("not eligible: {reason}.")
    } else {
        format!("not eligible: {reason} ({detail}).")
    }
}

/// Why no pod leads: the `LeaderElected` condition's reason when it says more than the phase
/// (the key held by another cluster or tool, another install, a pause), else the phase, with
/// the message of the condition that is `False` because of it (`Exclusive`, `SpecValid`).
fn nobody_leads(status: &LeaderElectionStatus) -> String {
    let find = |type_: &str| status.conditions.iter().find(|c| c.type_ == type_);
    let because = |type_: &str, what: &str| match find(type_).filter(|c| c.status != "True") {
        Some(c) => format!("{what}: {}", c.message),
        None => what.to_owned(),
    };
    let elected = find(conditions::LEADER_ELECTED);
    match elected.map(|c| (c.reason.as_str(), c.message.as_str())) {
        Some(("LockHeldElsewhere", message)) => {
            format!(
                "the key is held outside this operator, which elects nobody meanwhile: {message}"
            )
        }
        Some(("ManagedElsewhere", message)) => {
            format!("another install of the operator serves this election: {message}")
        }
        Some(("Paused", _)) => {
            "the election is paused (spec.paused); `kubectl elector resume` resumes it".to_owned()
        }
        _ => match status.phase {
            Some(Phase::Conflict) => because(
                conditions::EXCLUSIVE,
                "another election selects the same pods and wins",
            ),
            Some(Phase::Invalid) => {
                because(conditions::SPEC_VALID, "the election's spec is invalid")
            }
            Some(Phase::Fenced) => {
                "leadership is fenced: Consul cannot confirm the lock".to_owned()
            }
            Some(Phase::Observing) => {
                "in Observe mode the applications elect themselves".to_owned()
            }
            _ => "the operator is electing one".to_owned(),
        },
    }
}

fn eligible_follower(
    election: &LeaderElection,
    status: &LeaderElectionStatus,
    candidate: &CandidateStatus,
) -> String {
    let priority = candidate.priority;
    let Some(leader) = status.leader.as_ref().map(|l| l.pod.as_str()) else {
        return format!(
            "eligible, priority {priority}; no pod leads now ({}).",
            nobody_leads(status)
        );
    };
    let leader_priority = status
        .candidates
        .iter()
        .find(|c| c.pod == leader)
        .map_or(0, |c| c.priority);
    let failback = &election.spec.failback;
    let reason = if !failback.enabled {
        "stickiness: a leader keeps leading while eligible; failback is off".to_owned()
    } else if priority > leader_priority {
        format!(
            "failback is on and {leader} has the lower priority {leader_priority}: leadership \
             moves here once {leader} has led for failback.minInterval ({})",
            failback.min_interval
        )
    } else {
        format!(
            "failback only moves to a higher priority and {leader} has priority \
             {leader_priority}"
        )
    };
    format!(
        "eligible, priority {priority}, but {leader} leads ({reason}). `kubectl elector \
         switchover {} --to {}` moves leadership now.",
        election.name_any(),
        candidate.pod
    )
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::plugin::fixtures::{election, led_by_web_1, pod};

    fn web(name: &str) -> Pod {
        pod(name, json!({"app": "web"}), json!({}))
    }

    #[test]
    fn a_yielding_election_names_the_older_one_from_its_exclusive_condition() {
        let mut status = led_by_web_1();
        status["phase"] = json!("Conflict");
        status["leader"] = json!(null);
        status["conditions"] = json!([{
            "type": "Exclusive", "status": "False", "reason": "Conflict",
            "message": "election web-a is older and selects the same pods",
            "lastTransitionTime": "2024-05-01T09:57:00Z",
        }]);
        let answer = explain(&election(json!({}), status), "web-0", Some(&web("web-0")));
        assert!(
            answer.explanation.contains(
                "another election selects the same pods and wins: election web-a is older"
            ),
            "{}",
            answer.explanation
        );
    }

    #[test]
    fn with_the_key_held_by_another_cluster_nobody_is_being_elected() {
        let mut status = led_by_web_1();
        status["phase"] = json!("Pending");
        status["leader"] = json!(null);
        status["conditions"] = json!([{
            "type": "LeaderElected", "status": "False", "reason": "LockHeldElsewhere",
            "message": "session s-9 of cluster east holds the key for pod web-0",
            "lastTransitionTime": "2024-05-01T09:57:00Z",
        }]);
        let answer = explain(
            &election(json!({}), status.clone()),
            "web-0",
            Some(&web("web-0")),
        );
        assert!(
            answer
                .explanation
                .contains("the key is held outside this operator, which elects nobody meanwhile: session s-9 of cluster east"),
            "{}",
            answer.explanation
        );
        assert!(!answer.explanation.contains("electing one"));
        status["conditions"][0]["reason"] = json!("Paused");
        let answer = explain(&election(json!({}), status), "web-0", Some(&web("web-0")));
        assert!(
            answer.explanation.contains("paused"),
            "{}",
            answer.explanation
        );
    }

    #[test]
    fn the_leader_is_told_it_leads_with_its_token() {
        let le = election(json!({}), led_by_web_1());
        let answer = explain(&le, "web-1", Some(&web("web-1")));
        assert!(answer.leads);
        assert_eq!(
            answer.explanation,
            "web-1 leads since 2024-05-01T09:57:00Z, fencing token 42."
        );
    }

    #[test]
    fn an_eligible_follower_is_kept_out_by_stickiness_when_failback_is_off() {
        let le = election(json!({}), led_by_web_1());
        let answer = explain(&le, "web-0", Some(&web("web-0")));
        assert!(!answer.leads);
        assert_eq!(answer.eligible, Some(true));
        assert_eq!(answer.leader.as_deref(), Some("web-1"));
        assert!(
            answer.explanation.starts_with(
                "eligible, priority 0, but web-1 leads (stickiness: a leader keeps leading \
                 while eligible; failback is off)."
            ),
            "{}",
            answer.explanation
        );
        assert!(
            answer
                .explanation
                .contains("`kubectl elector switchover web --to web-0`")
        );
    }

    #[test]
    fn failback_names_the_interval_for_a_higher_priority_and_refuses_a_lower_one() {
        let mut status = led_by_web_1();
        status["candidates"][0]["priority"] = json!(10);
        let spec = json!({"failback": {"enabled": true, "minInterval": "60s"}});
        let le = election(spec, status);
        let higher = explain(&le, "web-0", Some(&web("web-0")));
        assert!(
            higher
                .explanation
                .contains("failback is on and web-1 has the lower priority 0")
                && higher.explanation.contains("failback.minInterval (60s)"),
            "{}",
            higher.explanation
        );
        let mut status = led_by_web_1();
        status["candidates"][0]["priority"] = json!(-0);
        status["candidates"][1]["priority"] = json!(5);
        let le = election(
            json!({"failback": {"enabled": true, "minInterval": "60s"}}),
            status,
        );
        let lower = explain(&le, "web-0", Some(&web("web-0")));
        assert!(
            lower
                .explanation
                .contains("failback only moves to a higher priority and web-1 has priority 5"),
            "{}",
            lower.explanation
        );
    }

    #[test]
    fn ineligible_pods_get_the_operators_reason_explained() {
        let le = election(json!({}), led_by_web_1());
        let answer = explain(&le, "web-2", Some(&web("web-2")));
        assert_eq!(answer.eligible, Some(false));
        assert_eq!(answer.reason.as_deref(), Some("NotReady"));
        assert!(
            answer.explanation.starts_with("not eligible: NotReady ("),
            "{}",
            answer.explanation
        );

        let mut status = led_by_web_1();
        status["candidates"][0] =
            json!({"pod": "web-0", "eligible": false, "reason": "NeverLeader", "priority": -1});
        status["candidates"][2] =
            json!({"pod": "web-2", "eligible": false, "reason": "InvalidPriority", "priority": 0});
        let le = election(json!({}), status);
        let never = explain(&le, "web-0", Some(&web("web-0")));
        assert_eq!(never.priority, Some(-1));
        assert!(
            never.explanation.contains("priority -1") && never.explanation.contains("never leads"),
            "{}",
            never.explanation
        );
        let bad = pod(
            "web-2",
            json!({"app": "web"}),
            json!({PRIORITY_ANNOTATION: "high"}),
        );
        let invalid = explain(&le, "web-2", Some(&bad));
        assert!(
            invalid.explanation.contains("\"high\", not an integer"),
            "{}",
            invalid.explanation
        );
    }

    #[test]
    fn pods_outside_the_candidates_are_told_why() {
        let le = election(json!({}), led_by_web_1());
        let missing = explain(&le, "web-9", None);
        assert!(!missing.candidate);
        assert_eq!(
            missing.explanation,
            "web-9 is not a candidate: there is no such pod in namespace prod."
        );
        let other = pod(
            "db-0",
            json!({"app": "db"}),
            json!({"elector.dev/priority": "3"}),
        );
        let unselected = explain(&le, "db-0", Some(&other));
        assert_eq!(unselected.priority, Some(3), "read from the annotation");
        assert!(
            unselected
                .explanation
                .contains("do not match the election's selector (app=web)"),
            "{}",
            unselected.explanation
        );
        let new = explain(&le, "web-3", Some(&web("web-3")));
        assert!(
            new.explanation
                .contains("has not listed it as a candidate yet"),
            "{}",
            new.explanation
        );
    }

    #[test]
    fn a_leader_that_lost_eligibility_is_told_it_will_be_replaced() {
        let mut status = led_by_web_1();
        status["candidates"][1] =
            json!({"pod": "web-1", "eligible": false, "reason": "NotReady", "priority": 0});
        let le = election(json!({"failover": {"delay": "30s"}}), status);
        let answer = explain(&le, "web-1", Some(&web("web-1")));
        assert!(answer.leads);
        assert!(
            answer
                .explanation
                .ends_with("It is not eligible any more (NotReady) and will be replaced once spec.failover.delay (30s) has passed."),
            "{}",
            answer.explanation
        );
    }

    #[test]
    fn with_no_leader_the_phase_says_why() {
        let mut status = led_by_web_1();
        status["phase"] = json!("Fenced");
        status.as_object_mut().expect("object").remove("leader");
        let le = election(json!({}), status);
        let answer = explain(&le, "web-0", Some(&web("web-0")));
        assert_eq!(
            answer.explanation,
            "eligible, priority 0; no pod leads now (leadership is fenced: Consul cannot \
             confirm the lock)."
        );
    }
}
