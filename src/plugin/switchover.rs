//! `kubectl elector switchover`: asks the operator to move leadership (the annotation
//! `elector.dev/switchover-to`), then watches the election until the operator decided this
//! request (the annotation removed, `status.lastSwitchover` Completed or Refused).

use std::time::{Duration, Instant};

use jiff::{SignedDuration, Timestamp};
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::wait::await_condition;
use kube::{Client, ResourceExt};
use serde::Serialize;

use super::error::PluginError;
use super::output::{or_dash, seconds};
use crate::crd::{LeaderElection, SWITCHOVER_ANNOTATION, SwitchoverResult, SwitchoverStatus};

/// How much earlier than the plugin's clock the operator's clock may be: a decision whose
/// `requestedAt` is older than the request by more than this answers an earlier request.
pub const CLOCK_SKEW: SignedDuration = SignedDuration::from_secs(5);

/// The `to` of a request that names no pod: any other eligible pod, best by priority.
pub const ANY_POD: &str = "*";

/// What became of a switchover request.
#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SwitchoverOutcome {
    /// Namespace of the election.
    pub namespace: String,
    /// The election.
    pub election: String,
    /// The pod asked for, or `*`.
    pub to: String,
    /// Completed or Refused.
    pub result: SwitchoverResult,
    /// The leader when the operator first saw the request.
    pub from: Option<String>,
    /// The leader now.
    pub leader: Option<String>,
    /// The operator's explanation.
    pub message: String,
    /// Seconds from the request to the decision, as measured by the plugin.
    pub elapsed_seconds: f64,
    /// When the operator first saw the request.
    pub requested_at: Timestamp,
    /// When the operator decided it.
    pub completed_at: Option<Timestamp>,
}

impl SwitchoverOutcome {
    /// Whether leadership moved as asked.
    pub fn completed(&self) -> bool {
        self.result == SwitchoverResult::Completed
    }

    /// The table output.
    pub fn render(&self) -> String {
        let verb = if self.completed() { "in" } else { "after" };
        let elapsed = seconds(SignedDuration::from_secs_f64(self.elapsed_seconds));
        let leader = match (&self.leader, &self.from) {
            (Some(now), Some(before)) if now != before => format!("{now} (was {before})"),
            (Some(now), Some(_)) => format!("{now} (unchanged)"),
            (now, _) => or_dash(now.as_ref()),
        };
        let mut out = format!(
            "Switchover of {}/{} to {}: {:?} {verb} {elapsed}\nLeader: {leader}\n",
            self.namespace, self.election, self.to, self.result
        );
        if !self.message.is_empty() {
            out.push_str(&format!("Message: {}\n", self.message));
        }
        out
    }
}

/// The operator's decision on a request for `to` made at `not_before` or later (minus the
/// clock skew already applied by the caller): the request annotation is gone and
/// `status.lastSwitchover` is final, for `to`, requested no earlier.
pub fn decision<'a>(
    election: &'a LeaderElection,
    to: &str,
    not_before: Timestamp,
) -> Option<&'a SwitchoverStatus> {
    if election.annotations().contains_key(SWITCHOVER_ANNOTATION) {
        return None;
    }
    let last = election.status.as_ref()?.last_switchover.as_ref()?;
    let decided = matches!(
        last.result,
        SwitchoverResult::Completed | SwitchoverResult::Refused
    );
    (decided && last.to == to && last.requested_at >= not_before).then_some(last)
}

/// The outcome of `decided` on `election`, `elapsed` after the request.
pub fn outcome(
    election: &LeaderElection,
    decided: &SwitchoverStatus,
    elapsed: Duration,
) -> SwitchoverOutcome {
    // The record names the pod that leads once the move completed; it is written before the
    // request annotation is removed, while `status.leader` may still show the old leader
    // until the reconcile's own status write.
    let leader = decided.leader.clone().or_else(|| {
        election
            .status
            .as_ref()
            .and_then(|s| s.leader.as_ref())
            .map(|l| l.pod.clone())
    });
    SwitchoverOutcome {
        namespace: election.namespace().unwrap_or_default(),
        election: election.name_any(),
        to: decided.to.clone(),
        result: decided.result,
        from: decided.from.clone(),
        leader,
        message: decided.message.clone(),
        elapsed_seconds: elapsed.as_secs_f64(),
        requested_at: decided.requested_at,
        completed_at: decided.completed_at,
    }
}

/// Requests a switchover of `namespace/name` to `to` (`None`: any other eligible pod) and
/// waits up to `timeout` for the operator's decision.
pub async fn request(
    client: Client,
    namespace: &str,
    name: &str,
    to: Option<&str>,
    timeout: Duration,
) -> Result<SwitchoverOutcome, PluginError> {
    let api: Api<LeaderElection> = Api::namespaced(client, namespace);
    let to = to.unwrap_or(ANY_POD).to_owned();
    let patch = serde_json::json!({"metadata": {"annotations": {SWITCHOVER_ANNOTATION: to}}});
    let not_before = Timestamp::now() - CLOCK_SKEW;
    let started = Instant::now();
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|e| PluginError::election_call(namespace, name, "annotate", e))?;
    let target = to.clone();
    // A deleted election ends the wait too (`None`), to be reported as such.
    let done = move |le: Option<&LeaderElection>| {
        le.is_none_or(|le| decision(le, &target, not_before).is_some())
    };
    let waited = tokio::time::timeout(timeout, await_condition(api, name, done)).await;
    let elapsed = started.elapsed();
    let election = match waited {
        Err(_) => {
            return Err(PluginError::SwitchoverTimeout {
                namespace: namespace.to_owned(),
                name: name.to_owned(),
                timeout,
                annotation: SWITCHOVER_ANNOTATION,
            });
        }
        Ok(Err(source)) => {
            return Err(PluginError::Watch {
                operation: format!("watch LeaderElection {namespace}/{name}"),
                source,
            });
        }
        Ok(Ok(found)) => found,
    };
    let deleted = || PluginError::ElectionDeleted {
        namespace: namespace.to_owned(),
        name: name.to_owned(),
    };
    let election = election.ok_or_else(deleted)?;
    let decided = decision(&election, &to, not_before).ok_or_else(deleted)?;
    Ok(outcome(&election, decided, elapsed))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::plugin::fixtures::{election, led_by_web_1};

    fn at(text: &str) -> Timestamp {
        text.parse().expect("timestamp")
    }

    fn decided(to: &str, result: &str, requested_at: &str, annotated: bool) -> LeaderElection {
        let mut status = led_by_web_1();
        status["lastSwitchover"] = json!({
            "to": to, "from": "web-0", "leader": "web-1", "requestedAt": requested_at,
            "result": result, "message": "",
        });
        let mut le = election(json!({}), status);
        if annotated {
            le.metadata.annotations =
                Some([(SWITCHOVER_ANNOTATION.to_owned(), to.to_owned())].into());
        }
        le
    }

    #[test]
    fn only_a_final_decision_on_this_request_ends_the_wait() {
        let request = at("2024-05-01T10:00:00Z") - CLOCK_SKEW;
        let fresh = "2024-05-01T09:59:58Z";
        assert!(
            decision(
                &decided("web-1", "Completed", fresh, false),
                "web-1",
                request
            )
            .is_some()
        );
        assert!(decision(&decided("web-1", "Refused", fresh, false), "web-1", request).is_some());
        assert!(
            decision(
                &decided("web-1", "Completed", fresh, true),
                "web-1",
                request
            )
            .is_none(),
            "the annotation is still there"
        );
        assert!(
            decision(
                &decided("web-1", "InProgress", fresh, false),
                "web-1",
                request
            )
            .is_none()
        );
        assert!(
            decision(
                &decided("web-2", "Completed", fresh, false),
                "web-1",
                request
            )
            .is_none(),
            "another request's decision"
        );
        assert!(
            decision(
                &decided("web-1", "Completed", "2024-05-01T09:59:00Z", false),
                "web-1",
                request
            )
            .is_none(),
            "an earlier request's decision"
        );
        assert!(decision(&election(json!({}), led_by_web_1()), "*", request).is_none());
    }

    #[test]
    fn the_outcome_reports_the_move_and_the_time_it_took() {
        let le = decided("web-1", "Completed", "2024-05-01T09:59:58Z", false);
        let status = le.status.as_ref().and_then(|s| s.last_switchover.clone());
        let completed = outcome(&le, &status.expect("decided"), Duration::from_millis(1234));
        assert!(completed.completed());
        assert_eq!(
            completed.render(),
            "Switchover of prod/web to web-1: Completed in 1.234s\nLeader: web-1 (was web-0)\n"
        );
        let le = decided("web-9", "Refused", "2024-05-01T09:59:58Z", false);
        let mut status = le
            .status
            .as_ref()
            .and_then(|s| s.last_switchover.clone())
            .expect("decided");
        status.from = Some("web-1".into());
        status.message = "web-9 is not a candidate".into();
        let refused = outcome(&le, &status, Duration::from_millis(80));
        assert!(!refused.completed());
        assert_eq!(
            refused.render(),
            "Switchover of prod/web to web-9: Refused after 0.080s\nLeader: web-1 \
             (unchanged)\nMessage: web-9 is not a candidate\n"
        );
    }
}
