//! One recorded version of one pod.

use std::{collections::BTreeMap, time::Instant};

use k8s_openapi::api::core::v1::Pod;

/// How a pod version reached the recorder.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PodEvent {
    /// Part of a (re-)list: the pod's state at the list's resourceVersion.
    InitialList,
    /// A watch `ADDED` event.
    Added,
    /// A watch `MODIFIED` event.
    Modified,
    /// A watch `DELETED` event: the pod is gone from this resourceVersion on.
    Deleted,
    /// Not a server event: after a gap the re-list no longer had this pod incarnation, so
    /// it was deleted at some resourceVersion at or before this one. The other fields are
    /// the last version seen.
    Vanished,
}

/// A pod as one resourceVersion of the API server showed it.
#[derive(Clone, Debug, PartialEq)]
pub struct PodVersion {
    /// `metadata.name`.
    pub name: String,
    /// `metadata.uid`: tells incarnations of one name apart.
    pub uid: String,
    /// `metadata.resourceVersion` (etcd's revision, ordered across the whole cluster).
    pub resource_version: u64,
    /// How this version was observed.
    pub event: PodEvent,
    /// `metadata.labels`.
    pub labels: BTreeMap<String, String>,
    /// `metadata.annotations`.
    pub annotations: BTreeMap<String, String>,
    /// Whether the pod's `Ready` condition is `True`.
    pub ready: bool,
    /// Whether `metadata.deletionTimestamp` is set.
    pub deleting: bool,
    /// When the recorder received this version.
    pub at: Instant,
}

impl PodVersion {
    /// Extracts the recorded fields; fails (with a description) if the server sent a pod
    /// without name, uid or a numeric resourceVersion.
    pub fn from_pod(pod: &Pod, event: PodEvent, at: Instant) -> Result<PodVersion, String> {
        let meta = &pod.metadata;
        let name = meta.name.clone().ok_or("pod without metadata.name")?;
        let uid = meta
            .uid
            .clone()
            .ok_or_else(|| format!("pod {name} without metadata.uid"))?;
        let resource_version =
            parse_resource_version(meta.resource_version.as_deref().unwrap_or_default())
                .map_err(|err| format!("pod {name}: {err}"))?;
        let ready = pod
            .status
            .as_ref()
            .and_then(|status| status.conditions.as_ref())
            .is_some_and(|conditions| {
                conditions
                    .iter()
                    .any(|c| c.type_ == "Ready" && c.status == "True")
            });
        Ok(PodVersion {
            name,
            uid,
            resource_version,
            event,
            labels: meta.labels.clone().unwrap_or_default(),
            annotations: meta.annotations.clone().unwrap_or_default(),
            ready,
            deleting: meta.deletion_timestamp.is_some(),
            at,
        })
    }

    /// Whether this version ends the pod incarnation.
    pub(crate) fn removes(&self) -> bool {
        matches!(self.event, PodEvent::Deleted | PodEvent::Vanished)
    }

    /// Whether the pod carries label `key=value`.
    pub fn has_label(&self, key: &str, value: &str) -> bool {
        self.labels.get(key).is_some_and(|v| v == value)
    }
}

/// Parses the decimal resourceVersion the API server (etcd3 storage) hands out.
pub(crate) fn parse_resource_version(rv: &str) -> Result<u64, String> {
    rv.parse()
        .map_err(|_| format!("resourceVersion {rv:?} is not a decimal revision"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodCondition, PodStatus};
    use kube::api::ObjectMeta;

    #[test]
    fn extracts_the_recorded_fields() {
        let pod = Pod {
            metadata: ObjectMeta {
                name: Some("a".into()),
                uid: Some("u1".into()),
                resource_version: Some("42".into()),
                labels: Some([("role".to_string(), "leader".to_string())].into()),
                ..ObjectMeta::default()
            },
            status: Some(PodStatus {
                conditions: Some(vec![PodCondition {
                    type_: "Ready".into(),
                    status: "True".into(),
                    ..PodCondition::default()
                }]),
                ..PodStatus::default()
            }),
            ..Pod::default()
        };
        let version = PodVersion::from_pod(&pod, PodEvent::Added, Instant::now()).unwrap();
        assert_eq!((version.name.as_str(), version.uid.as_str()), ("a", "u1"));
        assert_eq!(version.resource_version, 42);
        assert!(version.ready && !version.deleting);
        assert!(version.has_label("role", "leader"));
        assert!(!version.has_label("role", "follower"));
    }

    #[test]
    fn rejects_pods_it_cannot_order() {
        let mut pod = Pod::default();
        assert!(PodVersion::from_pod(&pod, PodEvent::Added, Instant::now()).is_err());
        pod.metadata.name = Some("a".into());
        pod.metadata.uid = Some("u".into());
        pod.metadata.resource_version = Some("opaque".into());
        let err = PodVersion::from_pod(&pod, PodEvent::Added, Instant::now()).unwrap_err();
        assert!(err.contains("opaque"), "{err}");
    }
}
