//! The pod as the operator reads it from the API server: metadata, the node it runs on, and
//! the three status fields the planner looks at. Everything else in a pod's JSON is skipped
//! while deserializing, so neither the watch caches nor the reconcile copies ever hold a
//! `PodSpec` (1.4 KB inline in `k8s_openapi::Pod` even when empty, plus its containers).
//!
//! It is a [`kube::Resource`] for the `v1` `pods` endpoint, so the same type is watched,
//! cached, indexed and patched (a patch's answer deserializes into it too).

use std::borrow::Cow;

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::PodCondition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use serde::{Deserialize, Serialize};

/// A pod, reduced to what the operator reads. See the module documentation.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
pub struct Pod {
    /// The pod's metadata, read without its managed fields, and with only its controller's
    /// owner reference once [`Pod::slim`] ran.
    #[serde(
        default,
        deserialize_with = "crate::object_meta::without_managed_fields"
    )]
    pub metadata: ObjectMeta,
    /// `spec.nodeName` only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<PodSpec>,
    /// `status.phase`, `status.podIP` and `status.conditions`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<PodStatus>,
}

/// The part of a pod's spec the operator reads.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodSpec {
    /// The node the pod was scheduled to (shown in the election's status).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
}

/// The part of a pod's status the operator reads.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodStatus {
    /// `Pending`, `Running`, `Succeeded`, `Failed` or `Unknown`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// The pod's IP (shown in the election's status).
    #[serde(default, rename = "podIP", skip_serializing_if = "Option::is_none")]
    pub pod_ip: Option<String>,
    /// The pod's conditions; only `Ready` is kept once [`Pod::slim`] ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<PodCondition>>,
}

impl Pod {
    /// Drops what deserialization kept but the operator never reads: owner references other
    /// than the controller's (whose selector the election's label key must stay out of), the
    /// generate-name prefix, kubectl's last-applied annotation and every condition but
    /// `Ready`. Applied to every pod before it is cached.
    pub fn slim(&mut self) {
        let meta = &mut self.metadata;
        meta.owner_references = meta
            .owner_references
            .take()
            .and_then(|refs| refs.into_iter().find(|r| r.controller == Some(true)))
            .map(|mut controller| {
                controller.block_owner_deletion = None;
                vec![controller]
            });
        meta.generate_name = None;
        if let Some(annotations) = meta.annotations.as_mut() {
            annotations.remove("kubectl.kubernetes.io/last-applied-configuration");
        }
        if let Some(conditions) = self.status.as_mut().and_then(|s| s.conditions.as_mut()) {
            conditions.retain(|c| c.type_ == "Ready");
        }
    }
}

impl Resource for Pod {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("Pod")
    }

    fn group(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("")
    }

    fn version(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("v1")
    }

    fn api_version(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("v1")
    }

    fn plural(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("pods")
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_full_pod_reads_into_what_the_planner_needs_and_slims_further() {
        let mut pod: Pod = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "uid": "u", "creationTimestamp": "2026-11-21T09:00:00Z",
                         "generateName": "p-", "labels": {"a": "b"},
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                                              "name": "rs", "uid": "r"},
                                             {"apiVersion": "apps/v1", "kind": "ReplicaSet",
                                              "name": "rs2", "uid": "r2", "controller": true,
                                              "blockOwnerDeletion": true}],
                         "managedFields": [{"manager": "kubectl", "operation": "Apply"}]},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i"}]},
            "status": {"podIP": "10.0.0.2", "containerStatuses": [], "phase": "Running",
                       "hostIP": "192.168.0.1",
                       "conditions": [
                           {"type": "Ready", "status": "True",
                            "lastTransitionTime": "2026-11-21T09:30:00Z"},
                           {"type": "PodScheduled", "status": "True"}]},
        }))
        .expect("a pod's JSON deserializes");
        pod.slim();
        let expected: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "uid": "u", "creationTimestamp": "2026-11-21T09:00:00Z",
                         "labels": {"a": "b"},
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                                              "name": "rs2", "uid": "r2", "controller": true}]},
            "spec": {"nodeName": "n1"},
            "status": {"podIP": "10.0.0.2", "phase": "Running",
                       "conditions": [{"type": "Ready", "status": "True",
                                       "lastTransitionTime": "2026-11-21T09:30:00Z"}]},
        }))
        .expect("the expected pod deserializes");
        assert_eq!(pod, expected);
        let status = pod.status.as_ref().expect("the status is kept");
        assert_eq!(status.pod_ip.as_deref(), Some("10.0.0.2"));
        assert_eq!(status.phase.as_deref(), Some("Running"));
        assert_eq!(status.conditions.as_ref().map(Vec::len), Some(1));
        assert_eq!(pod.spec.and_then(|s| s.node_name).as_deref(), Some("n1"));
    }

    #[test]
    fn the_cached_pod_is_a_fraction_of_the_full_one() {
        let full = std::mem::size_of::<k8s_openapi::api::core::v1::Pod>();
        let cached = std::mem::size_of::<Pod>();
        assert!(
            cached * 2 < full,
            "cached pod {cached} bytes, full pod {full} bytes"
        );
    }

    #[test]
    fn it_addresses_the_core_pods_endpoint() {
        assert_eq!(
            Pod::url_path(&(), Some("ns")),
            k8s_openapi::api::core::v1::Pod::url_path(&(), Some("ns"))
        );
    }
}
