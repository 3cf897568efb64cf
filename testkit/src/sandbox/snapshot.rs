//! What the sandbox sees of the pods and the election at one moment: [`Snapshot`] and its parts.

use std::time::Instant;

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::DynamicObject;
use serde_json::Value;

use super::objects::{FOLLOWER, LEADER, REPLICAS, ROLE_LABEL, SWITCHOVER_ANNOTATION};

/// One pod, as far as the election is concerned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PodState {
    /// Pod name.
    pub(crate) name: String,
    /// The role label's value, if any.
    pub(crate) role: Option<String>,
    /// Whether the `Ready` condition is true.
    pub(crate) ready: bool,
    /// Whether the pod has a `deletionTimestamp`.
    pub(crate) terminating: bool,
}

impl PodState {
    pub(crate) fn from_pod(pod: &Pod) -> Self {
        Self {
            name: pod.name_any(),
            role: pod.labels().get(ROLE_LABEL).cloned(),
            ready: crate::pods::is_pod_ready(pod),
            terminating: pod.metadata.deletion_timestamp.is_some(),
        }
    }

    /// Whether the pod carries the leader label.
    pub(crate) fn is_leader(&self) -> bool {
        self.role.as_deref() == Some(LEADER)
    }
}

/// The `LeaderElection`'s status, as far as the sandbox shows it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ElectionState {
    /// `status.phase`.
    pub(crate) phase: Option<String>,
    /// `status.leader.pod`.
    pub(crate) leader: Option<String>,
    /// `status.leader.sessionID`.
    pub(crate) session: Option<String>,
    /// `status.fencingToken`.
    pub(crate) token: Option<u64>,
    /// `status.transitions`.
    pub(crate) transitions: Option<u64>,
    /// The pending switchover request and the last one decided (boxed: most elections
    /// never see one, and watch events carry this state by value).
    pub(crate) switchover: Box<SwitchoverState>,
}

/// A switchover as the `LeaderElection` shows it: the request annotation while it is pending,
/// and `status.lastSwitchover`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct SwitchoverState {
    /// The `elector.dev/switchover-to` annotation: a request not decided yet.
    pub(crate) requested: Option<String>,
    /// `status.lastSwitchover`.
    pub(crate) last: LastSwitchover,
}

/// `status.lastSwitchover`: the operator's record of the latest request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct LastSwitchover {
    /// `to`: the pod asked for, or `*`.
    pub(crate) to: Option<String>,
    /// `from`: the leader when the operator first saw the request.
    pub(crate) from: Option<String>,
    /// `leader`: the leader once completed.
    pub(crate) leader: Option<String>,
    /// `requestedAt`: when the operator first saw the request.
    pub(crate) requested_at: Option<String>,
    /// `result`: `InProgress`, `Completed` or `Refused`.
    pub(crate) result: Option<String>,
    /// `message`.
    pub(crate) message: Option<String>,
}

impl SwitchoverState {
    /// The last request's result once it is decided and its annotation gone, if it asked for
    /// `to`. The operator may remove the annotation before it records the outcome, so a
    /// watcher that made several requests must also see the record change (see
    /// `bench::tracker::State::switchover_decided`).
    pub(crate) fn decided(&self, to: &str) -> Option<&str> {
        let last = &self.last;
        let result = last.result.as_deref().filter(|r| *r != "InProgress")?;
        (self.requested.is_none() && last.to.as_deref() == Some(to)).then_some(result)
    }
}

impl ElectionState {
    /// Reads the status fields the sandbox shows, ignoring any that have another shape.
    pub(crate) fn from_object(election: &DynamicObject) -> Self {
        let status = election.data.get("status").unwrap_or(&Value::Null);
        let text = |value: &Value| value.as_str().map(str::to_owned);
        let leader = status.get("leader").unwrap_or(&Value::Null);
        let last = status.get("lastSwitchover").unwrap_or(&Value::Null);
        Self {
            phase: status.get("phase").and_then(text),
            leader: leader.get("pod").and_then(text),
            session: leader.get("sessionID").and_then(text),
            token: status.get("fencingToken").and_then(Value::as_u64),
            transitions: status.get("transitions").and_then(Value::as_u64),
            switchover: Box::new(SwitchoverState {
                requested: election.annotations().get(SWITCHOVER_ANNOTATION).cloned(),
                last: LastSwitchover {
                    to: last.get("to").and_then(text),
                    from: last.get("from").and_then(text),
                    leader: last.get("leader").and_then(text),
                    requested_at: last.get("requestedAt").and_then(text),
                    result: last.get("result").and_then(text),
                    message: last.get("message").and_then(text),
                },
            }),
        }
    }
}

/// The pods and the election at one moment.
#[derive(Debug, Clone)]
pub(crate) struct Snapshot {
    /// When the watch event that produced it arrived.
    pub(crate) at: Instant,
    /// Every pod of the namespace, by name.
    pub(crate) pods: Vec<PodState>,
    /// The election, once it exists.
    pub(crate) election: Option<ElectionState>,
}

impl Snapshot {
    /// The pods labelled leader.
    pub(crate) fn leaders(&self) -> impl Iterator<Item = &PodState> {
        self.pods.iter().filter(|pod| pod.is_leader())
    }

    /// The pod labelled leader, if exactly one is.
    pub(crate) fn sole_leader(&self) -> Option<&PodState> {
        let mut leaders = self.leaders();
        let leader = leaders.next()?;
        leaders.next().is_none().then_some(leader)
    }

    /// The pod named `name`.
    pub(crate) fn pod(&self, name: &str) -> Option<&PodState> {
        self.pods.iter().find(|pod| pod.name == name)
    }

    /// `status.phase`.
    pub(crate) fn phase(&self) -> Option<&str> {
        self.election.as_ref()?.phase.as_deref()
    }

    /// The leader when the election is at rest: [`REPLICAS`] pods, none terminating, one Ready
    /// pod labelled leader and named by the status, every other pod labelled follower, phase
    /// `Elected`.
    pub(crate) fn settled_leader(&self) -> Option<&PodState> {
        let leader = self.sole_leader()?;
        let election = self.election.as_ref()?;
        let at_rest = self.pods.len() == REPLICAS
            && self.pods.iter().all(|pod| {
                !pod.terminating && (pod.is_leader() || pod.role.as_deref() == Some(FOLLOWER))
            })
            && leader.ready
            && election.phase.as_deref() == Some("Elected")
            && election.leader.as_deref() == Some(leader.name.as_str());
        at_rest.then_some(leader)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::super::objects;
    use super::*;

    /// A pod with `role`, Ready and not terminating.
    pub(crate) fn pod(name: &str, role: Option<&str>) -> PodState {
        PodState {
            name: name.into(),
            role: role.map(str::to_owned),
            ready: true,
            terminating: false,
        }
    }

    /// A snapshot of `pods` with an election in `phase` led by `leader`.
    pub(crate) fn snapshot(pods: Vec<PodState>, phase: &str, leader: Option<&str>) -> Snapshot {
        Snapshot {
            at: Instant::now(),
            pods,
            election: Some(ElectionState {
                phase: Some(phase.into()),
                leader: leader.map(str::to_owned),
                session: None,
                token: Some(7),
                transitions: Some(1),
                switchover: Box::default(),
            }),
        }
    }

    #[test]
    fn settled_needs_one_ready_leader_named_by_the_status_and_labelled_followers() {
        let pods = || {
            vec![
                pod("web-a", Some(LEADER)),
                pod("web-b", Some(FOLLOWER)),
                pod("web-c", Some(FOLLOWER)),
            ]
        };
        let at_rest = snapshot(pods(), "Elected", Some("web-a"));
        assert_eq!(
            at_rest.settled_leader().map(|p| p.name.as_str()),
            Some("web-a")
        );

        let mut unlabelled = pods();
        unlabelled[2].role = None;
        let mut two = pods();
        two[1].role = Some(LEADER.into());
        let mut terminating = pods();
        terminating[1].terminating = true;
        for (what, snap) in [
            (
                "status names another",
                snapshot(pods(), "Elected", Some("web-b")),
            ),
            (
                "still electing",
                snapshot(pods(), "Electing", Some("web-a")),
            ),
            (
                "a pod unlabelled",
                snapshot(unlabelled, "Elected", Some("web-a")),
            ),
            ("two leaders", snapshot(two, "Elected", Some("web-a"))),
            (
                "a pod terminating",
                snapshot(terminating, "Elected", Some("web-a")),
            ),
            (
                "a pod missing",
                snapshot(pods()[..2].to_vec(), "Elected", Some("web-a")),
            ),
        ] {
            assert!(snap.settled_leader().is_none(), "{what}");
        }
    }

    #[test]
    fn election_status_is_read_without_trusting_its_shape() {
        let mut election = objects::sandbox_election().unwrap();
        assert_eq!(
            ElectionState::from_object(&election),
            ElectionState::default()
        );
        election.data["status"] = serde_json::json!({
            "phase": "Elected", "fencingToken": 12, "transitions": 2,
            "leader": {"pod": "web-a", "sessionID": "s-1"},
        });
        let state = ElectionState::from_object(&election);
        assert_eq!(state.phase.as_deref(), Some("Elected"));
        assert_eq!(state.leader.as_deref(), Some("web-a"));
        assert_eq!(state.session.as_deref(), Some("s-1"));
        assert_eq!((state.token, state.transitions), (Some(12), Some(2)));
        assert_eq!(*state.switchover, SwitchoverState::default());
        election.data["status"] = serde_json::json!({"lastSwitchover": {
            "to": "*", "from": "web-a", "leader": "web-b", "result": "Completed",
            "requestedAt": "2026-11-24T00:00:00Z", "message": "moved",
        }});
        let decided = ElectionState::from_object(&election).switchover;
        assert_eq!(decided.last.from.as_deref(), Some("web-a"));
        assert_eq!(decided.last.leader.as_deref(), Some("web-b"));
        assert_eq!(decided.last.message.as_deref(), Some("moved"));
        assert_eq!(
            decided.last.requested_at.as_deref(),
            Some("2026-11-24T00:00:00Z")
        );
        assert_eq!(decided.decided("*"), Some("Completed"));
        assert_eq!(decided.decided("web-c"), None, "another request");
        election
            .annotations_mut()
            .insert(SWITCHOVER_ANNOTATION.into(), "*".into());
        let pending = ElectionState::from_object(&election).switchover;
        assert_eq!(pending.requested.as_deref(), Some("*"));
        assert_eq!(pending.decided("*"), None, "the annotation is still there");
        election.annotations_mut().clear();
        election.data["status"]["lastSwitchover"]["result"] = "InProgress".into();
        let moving = ElectionState::from_object(&election).switchover;
        assert_eq!(moving.decided("*"), None, "still moving");
        election.data["status"] = serde_json::json!({"phase": 3, "leader": "web-a"});
        assert_eq!(
            ElectionState::from_object(&election),
            ElectionState::default()
        );
        election.data["status"] = serde_json::json!({"lastSwitchover": "web-b"});
        assert_eq!(
            ElectionState::from_object(&election),
            ElectionState::default()
        );
    }
}
