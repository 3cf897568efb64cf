//! Kubernetes side effects on pods: reading a pod into the planner's [`PodView`] and the
//! label/annotation patches. Patches are JSON merge patches that name only the operator's own
//! keys (the user's labels and annotations are never touched) and carry the pod's UID, so a
//! patch meant for one incarnation of a pod name fails on another instead of labelling it.

use std::collections::BTreeMap;

use jiff::Timestamp;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};

use crate::crd::{
    FENCING_TOKEN_ANNOTATION, HANDOVER_ANNOTATION, LEADER_SINCE_ANNOTATION, PRIORITY_ANNOTATION,
};
use crate::election::config::LabelConfig;
use crate::election::observe::PodView;

mod cached_pod;

pub use cached_pod::{Pod, PodSpec, PodStatus};

/// Annotation naming the election that labelled the pod, so that a pod which stops matching
/// is cleaned by the election that labelled it and by no other.
pub const ELECTION_ANNOTATION: &str = "elector.dev/election";

/// How a pod should be labelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodRole {
    /// `<key>=<leader>` plus the fencing token and leader-since annotations.
    Leader {
        /// Consul `LockIndex`.
        fencing_token: u64,
        /// Leader since.
        since: Timestamp,
    },
    /// `<key>=<follower>`, leader annotations removed.
    Follower,
    /// No label, no annotation of the operator.
    None,
}

/// The merge patch that gives `uid` the `role` under `labels` for election `election`.
pub fn role_patch(uid: &str, labels: &LabelConfig, election: &str, role: PodRole) -> Value {
    let (label, token, since, owner) = match role {
        PodRole::Leader {
            fencing_token,
            since,
        } => (
            Value::from(labels.leader.as_str()),
            Value::from(fencing_token.to_string()),
            Value::from(since.to_string()),
            Value::from(election),
        ),
        PodRole::Follower => (
            Value::from(labels.follower.as_str()),
            Value::Null,
            Value::Null,
            Value::from(election),
        ),
        PodRole::None => (Value::Null, Value::Null, Value::Null, Value::Null),
    };
    json!({
        "metadata": {
            "uid": uid,
            "labels": { labels.key.as_str(): label },
            "annotations": {
                FENCING_TOKEN_ANNOTATION: token,
                LEADER_SINCE_ANNOTATION: since,
                ELECTION_ANNOTATION: owner,
                // A role change ends any planned move the handover announced.
                HANDOVER_ANNOTATION: Value::Null,
            },
        }
    })
}

/// Sets (`Some`) or removes (`None`) the pod's `elector.dev/handover` annotation, for the
/// incarnation `uid` only, and returns the pod as the API server now has it (slimmed).
pub async fn set_handover(
    pods: &Api<Pod>,
    name: &str,
    uid: &str,
    value: Option<&str>,
) -> Result<Pod, kube::Error> {
    let patch = json!({"metadata": {"uid": uid, "annotations": {HANDOVER_ANNOTATION: value}}});
    let mut pod = pods
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    pod.slim();
    Ok(pod)
}

/// When the pod's Ready condition last changed (its `lastTransitionTime`, on the kubelet's
/// wall clock), if it says.
pub fn ready_changed_at(pod: &Pod) -> Option<Timestamp> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")?
        .last_transition_time
        .as_ref()
        .map(|t| t.0)
}

/// Whether the pod's labels match the election's selector is decided by the caller; this
/// reads everything else the planner needs from the pod.
pub fn pod_view(pod: &Pod, selected: bool, label_key: &str) -> Option<PodView> {
    let meta = &pod.metadata;
    let name = meta.name.clone()?;
    let uid = meta.uid.clone()?;
    let created_at = meta.creation_timestamp.as_ref().map(|t| t.0)?;
    let status = pod.status.as_ref();
    let ready_condition = status
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"));
    let annotations = meta.annotations.as_ref();
    let annotation = |key: &str| annotations.and_then(|a| a.get(key)).cloned();
    Some(PodView {
        name,
        uid,
        selected,
        ready: ready_condition.is_some_and(|c| c.status == "True"),
        // Known only once the caller has seen the change ([`ready_changed_at`]).
        not_ready_since: None,
        deleting: meta.deletion_timestamp.is_some(),
        finished: status
            .and_then(|s| s.phase.as_deref())
            .is_some_and(|p| p == "Succeeded" || p == "Failed"),
        created_at,
        pod_ip: status.and_then(|s| s.pod_ip.clone()),
        node: pod.spec.as_ref().and_then(|s| s.node_name.clone()),
        role: meta.labels.as_ref().and_then(|l| l.get(label_key)).cloned(),
        fencing_token: annotation(FENCING_TOKEN_ANNOTATION),
        leader_since: annotation(LEADER_SINCE_ANNOTATION),
        priority: match annotations.and_then(|a| a.get(PRIORITY_ANNOTATION)) {
            None => Some(0),
            Some(text) => text.trim().parse().ok(),
        },
        handover: annotation(HANDOVER_ANNOTATION),
        // Decided with the other elections in view (`annotation_owner::shared_view`).
        reclaim: false,
    })
}

/// The election that labelled this pod, if any.
pub fn labelled_by(pod: &Pod) -> Option<&str> {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ELECTION_ANNOTATION))
        .map(String::as_str)
}

/// The pod's labels (empty when it has none).
pub fn labels_of(pod: &Pod) -> &BTreeMap<String, String> {
    static EMPTY: BTreeMap<String, String> = BTreeMap::new();
    pod.metadata.labels.as_ref().unwrap_or(&EMPTY)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels() -> LabelConfig {
        LabelConfig {
            key: "elector.dev/role".into(),
            leader: "leader".into(),
            follower: "follower".into(),
        }
    }

    #[test]
    fn leader_patch_names_only_our_keys_and_the_uid() {
        let since: Timestamp = "2026-11-21T10:00:00Z".parse().expect("timestamp");
        let p = role_patch(
            "u1",
            &labels(),
            "web",
            PodRole::Leader {
                fencing_token: 7,
                since,
            },
        );
        assert_eq!(
            p,
            json!({"metadata": {
                "uid": "u1",
                "labels": {"elector.dev/role": "leader"},
                "annotations": {
                    "elector.dev/fencing-token": "7",
                    "elector.dev/leader-since": "2026-11-21T10:00:00Z",
                    "elector.dev/election": "web",
                    "elector.dev/handover": null,
                },
            }})
        );
    }

    #[test]
    fn follower_patch_removes_leader_annotations_and_none_removes_everything() {
        let f = role_patch("u1", &labels(), "web", PodRole::Follower);
        assert_eq!(f["metadata"]["labels"]["elector.dev/role"], "follower");
        assert!(f["metadata"]["annotations"]["elector.dev/fencing-token"].is_null());
        assert_eq!(f["metadata"]["annotations"]["elector.dev/election"], "web");
        let n = role_patch("u1", &labels(), "web", PodRole::None);
        assert!(n["metadata"]["labels"]["elector.dev/role"].is_null());
        assert!(n["metadata"]["annotations"]["elector.dev/election"].is_null());
    }

    #[test]
    fn pod_view_reads_readiness_deletion_and_our_annotations() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {
                "name": "web-1", "uid": "u1",
                "creationTimestamp": "2026-11-21T09:00:00Z",
                "deletionTimestamp": "2026-11-21T10:00:00Z",
                "labels": {"app": "web", "elector.dev/role": "leader"},
                "annotations": {"elector.dev/fencing-token": "3"},
            },
            "spec": {"nodeName": "n1", "containers": []},
            "status": {
                "phase": "Running", "podIP": "10.0.0.1",
                "conditions": [{"type": "Ready", "status": "False",
                                "lastTransitionTime": "2026-11-21T09:30:00Z"}],
            },
        }))
        .expect("pod");
        let v = pod_view(&pod, true, "elector.dev/role").expect("view");
        assert!(!v.ready && v.deleting && !v.finished);
        assert_eq!(v.role.as_deref(), Some("leader"));
        assert_eq!(v.fencing_token.as_deref(), Some("3"));
        assert_eq!(v.pod_ip.as_deref(), Some("10.0.0.1"));
        assert_eq!(v.node.as_deref(), Some("n1"));
        assert_eq!(
            ready_changed_at(&pod),
            Some("2026-11-21T09:30:00Z".parse().expect("ts"))
        );
    }
}
