//! Kubernetes side effects on pods: reading a pod into the planner's [`PodView`] and the
//! label/annotation patches. Patches are JSON merge patches that name only the operator's own
//! keys (the user's labels and annotations are never touched) and carry the pod's UID, so a
//! patch meant for one incarnation of a pod name fails on another instead of labelling it.
//! Also the removal of an annotation only while it reads what was decided on, and the end of
//! a finalizer's cleanup.

use std::collections::BTreeMap;

use jiff::Timestamp;
use json_patch::jsonptr::PointerBuf;
use json_patch::{PatchOperation, RemoveOperation, TestOperation};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::finalizer;
use serde_json::{Value, json};

use crate::crd::{
    ELECTION_ANNOTATION, FENCING_TOKEN_ANNOTATION, HANDOVER_ANNOTATION, LEADER_SINCE_ANNOTATION,
    PRIORITY_ANNOTATION,
};
use crate::election::observe::PodView;
use crate::election::pod_patch::PodPatch;

mod cached_pod;

pub use cached_pod::{Pod, PodSpec, PodStatus};

/// The JSON merge patch that carries out `patch`: only the labels and annotations it names,
/// and the pod's UID, so that a patch meant for one incarnation of a pod name fails on another
/// instead of labelling it.
pub fn merge_patch(patch: &PodPatch) -> Value {
    let mut metadata = serde_json::Map::new();
    metadata.insert("uid".to_owned(), Value::from(patch.uid.as_str()));
    if !patch.labels.is_empty() {
        metadata.insert("labels".to_owned(), json!(patch.labels));
    }
    if !patch.annotations.is_empty() {
        metadata.insert("annotations".to_owned(), json!(patch.annotations));
    }
    json!({ "metadata": metadata })
}

/// Sends `patch` and returns the pod as the API server now has it (slimmed).
pub async fn patch_pod(pods: &Api<Pod>, patch: &PodPatch) -> Result<Pod, kube::Error> {
    let mut pod = pods
        .patch(
            &patch.pod,
            &PatchParams::default(),
            &Patch::Merge(&merge_patch(patch)),
        )
        .await?;
    pod.slim();
    Ok(pod)
}

/// Removes annotation `annotation` of object `name` if it still reads `value`: the JSON patch
/// tests the value before removing it, so a value written since is never lost (the API server
/// refuses the patch). Returns the object as it now is: without the annotation, or with
/// another value when the test failed (read again); `None` when the object is gone.
pub async fn remove_annotation_if<K>(
    api: &Api<K>,
    name: &str,
    annotation: &str,
    value: &str,
) -> Result<Option<K>, kube::Error>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let path = PointerBuf::from_tokens(["metadata", "annotations", annotation]);
    let patch = json_patch::Patch(vec![
        PatchOperation::Test(TestOperation {
            path: path.clone(),
            value: value.into(),
        }),
        PatchOperation::Remove(RemoveOperation { path }),
    ]);
    let params = PatchParams::default();
    match api.patch(name, &params, &Patch::Json::<()>(patch)).await {
        Ok(object) => Ok(Some(object)),
        Err(kube::Error::Api(status)) if status.is_not_found() => Ok(None),
        // The test failed (already removed, or another value).
        Err(kube::Error::Api(status)) if status.code == 422 || status.code == 409 => {
            api.get_opt(name).await
        }
        Err(error) => Err(error),
    }
}

/// Removes `finalizer` from object `name` as `object` read it: the JSON patch tests the
/// finalizer at its index before removing it, so a list changed since is never rewritten from
/// a stale copy (the API server refuses the patch, and the next reconcile reads it again).
/// Nothing is sent when `object` has no such finalizer, nor when the object is gone.
pub async fn remove_finalizer<K>(
    api: &Api<K>,
    name: &str,
    object: &K,
    finalizer: &str,
) -> Result<(), kube::Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let Some(index) = object
        .meta()
        .finalizers
        .iter()
        .flatten()
        .position(|f| f == finalizer)
    else {
        return Ok(());
    };
    let path = PointerBuf::from_tokens([
        "metadata".to_owned(),
        "finalizers".to_owned(),
        index.to_string(),
    ]);
    let patch = json_patch::Patch(vec![
        PatchOperation::Test(TestOperation {
            path: path.clone(),
            value: finalizer.into(),
        }),
        PatchOperation::Remove(RemoveOperation { path }),
    ]);
    match api
        .patch(name, &PatchParams::default(), &Patch::Json::<()>(patch))
        .await
    {
        Err(kube::Error::Api(status)) if status.is_not_found() => Ok(()),
        result => result.map(|_| ()),
    }
}

/// A cleanup whose finalizer removal found the object gone is done, not failed: kube's
/// finalizer helper removes the finalizer only after the cleanup succeeded, and the object can
/// only be gone once its finalizer went, by an earlier reconcile of the same deletion that saw a
/// newer copy. (Many of those follow a mass deletion; each would count as a failed
/// reconcile, log a warning and be retried for an object that no longer exists.)
pub fn done_when_gone<E>(
    result: Result<Action, finalizer::Error<E>>,
) -> Result<Action, finalizer::Error<E>>
where
    E: std::error::Error + 'static,
{
    match result {
        Err(finalizer::Error::RemoveFinalizer(kube::Error::Api(status)))
            if status.is_not_found() =>
        {
            Ok(Action::await_change())
        }
        other => other,
    }
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
/// reads everything else the planner needs from the pod, whose token annotation beside
/// `label_key` is `token_annotation` ([`crate::crd::label_token_annotation`]).
pub fn pod_view(
    pod: &Pod,
    selected: bool,
    label_key: &str,
    token_annotation: &str,
) -> Option<PodView> {
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
        label_token: annotation(token_annotation),
        leader_since: annotation(LEADER_SINCE_ANNOTATION),
        priority: match annotations.and_then(|a| a.get(PRIORITY_ANNOTATION)) {
            None => Some(0),
            Some(text) => text.trim().parse().ok(),
        },
        handover: annotation(HANDOVER_ANNOTATION),
        // Decided with the other elections in view (`annotation_owner::shared_view`).
        reclaim: false,
        shared: Default::default(),
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

/// An object's resourceVersion as a number (etcd's revision; `None` when it is not one).
pub fn resource_version(meta: &ObjectMeta) -> Option<u64> {
    meta.resource_version
        .as_deref()
        .and_then(|v| v.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_merge_patch_names_the_uid_and_only_the_keys_of_the_patch() {
        let patch = PodPatch {
            pod: "web-1".into(),
            uid: "u1".into(),
            labels: BTreeMap::from([("elector.dev/role".to_owned(), Some("leader".to_owned()))]),
            annotations: BTreeMap::from([
                (FENCING_TOKEN_ANNOTATION.to_owned(), Some("7".to_owned())),
                (HANDOVER_ANNOTATION.to_owned(), None),
            ]),
        };
        assert_eq!(
            merge_patch(&patch),
            json!({"metadata": {
                "uid": "u1",
                "labels": {"elector.dev/role": "leader"},
                "annotations": {"elector.dev/fencing-token": "7", "elector.dev/handover": null},
            }})
        );
        let handover = PodPatch {
            labels: BTreeMap::new(),
            annotations: BTreeMap::from([(HANDOVER_ANNOTATION.to_owned(), None)]),
            ..patch
        };
        assert_eq!(
            merge_patch(&handover),
            json!({"metadata": {"uid": "u1", "annotations": {"elector.dev/handover": null}}})
        );
    }

    #[test]
    fn pod_view_reads_readiness_deletion_and_our_annotations() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {
                "name": "web-1", "uid": "u1",
                "creationTimestamp": "2026-11-21T09:00:00Z",
                "deletionTimestamp": "2026-11-21T10:00:00Z",
                "labels": {"app": "web", "elector.dev/role": "leader"},
                "annotations": {"elector.dev/fencing-token": "3",
                                "fencing-token.elector.dev/role": "3"},
            },
            "spec": {"nodeName": "n1", "containers": []},
            "status": {
                "phase": "Running", "podIP": "10.0.0.1",
                "conditions": [{"type": "Ready", "status": "False",
                                "lastTransitionTime": "2026-11-21T09:30:00Z"}],
            },
        }))
        .expect("pod");
        let token = "fencing-token.elector.dev/role";
        let v = pod_view(&pod, true, "elector.dev/role", token).expect("view");
        assert!(!v.ready && v.deleting && !v.finished);
        assert_eq!(v.role.as_deref(), Some("leader"));
        assert_eq!(v.fencing_token.as_deref(), Some("3"));
        assert_eq!(v.label_token.as_deref(), Some("3"));
        assert_eq!(v.pod_ip.as_deref(), Some("10.0.0.1"));
        assert_eq!(v.node.as_deref(), Some("n1"));
        assert_eq!(
            ready_changed_at(&pod),
            Some("2026-11-21T09:30:00Z".parse().expect("ts"))
        );
    }

    fn api_error(code: u16, reason: &str) -> kube::Error {
        let status = kube::core::Status::failure("refused", reason).with_code(code);
        kube::Error::Api(status.boxed())
    }

    type Finalized = Result<Action, finalizer::Error<crate::Error>>;

    #[test]
    fn a_finalizer_removal_that_finds_the_election_gone_is_done() {
        let gone: Finalized = Err(finalizer::Error::RemoveFinalizer(api_error(
            404, "NotFound",
        )));
        assert_eq!(done_when_gone(gone).ok(), Some(Action::await_change()));
        // Anything else stays a failure: a changed finalizer list (422), an unreachable API
        // server, a missing election when adding the finalizer, a failed cleanup.
        let changed: Finalized = Err(finalizer::Error::RemoveFinalizer(api_error(422, "Invalid")));
        assert!(done_when_gone(changed).is_err());
        let adding: Finalized = Err(finalizer::Error::AddFinalizer(api_error(404, "NotFound")));
        assert!(done_when_gone(adding).is_err());
        let cleanup: Finalized = Err(finalizer::Error::CleanupFailed(
            crate::Error::MissingMetadata("name"),
        ));
        assert!(done_when_gone(cleanup).is_err());
    }
}
