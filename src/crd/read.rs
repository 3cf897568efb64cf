//! [`ReadElection`]: a `LeaderElection` as the operator reads it from the API server, its
//! metadata without managed fields ([`crate::object_meta`]). Every status write of the
//! operator adds to an election's managed fields, and each watch event and each status
//! write's answer would decode them again only to drop them. The watches and the status
//! writes read this type and hand its election on.

use std::borrow::Cow;

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use kube::runtime::watcher;
use serde::{Deserialize, Deserializer};

use super::spec::{LeaderElection, LeaderElectionSpec};
use super::status::LeaderElectionStatus;

/// A [`LeaderElection`] read without its managed fields; the same resource for kube's
/// [`Api`](kube::Api) and watchers.
#[derive(Debug, Clone, PartialEq)]
pub struct ReadElection(pub LeaderElection);

/// The fields of a `LeaderElection` (`apiVersion` and `kind` are skipped, as kube's derived
/// type skips them).
#[derive(Deserialize)]
struct Wire {
    #[serde(deserialize_with = "crate::object_meta::without_managed_fields")]
    metadata: ObjectMeta,
    spec: LeaderElectionSpec,
    #[serde(default)]
    status: Option<LeaderElectionStatus>,
}

impl<'de> Deserialize<'de> for ReadElection {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let Wire {
            metadata,
            spec,
            status,
        } = Wire::deserialize(deserializer)?;
        Ok(ReadElection(LeaderElection {
            metadata,
            spec,
            status,
        }))
    }
}

/// A watch event of [`ReadElection`]s as one of the elections they hold.
pub fn election_event(event: watcher::Event<ReadElection>) -> watcher::Event<LeaderElection> {
    match event {
        watcher::Event::Apply(ReadElection(le)) => watcher::Event::Apply(le),
        watcher::Event::Delete(ReadElection(le)) => watcher::Event::Delete(le),
        watcher::Event::Init => watcher::Event::Init,
        watcher::Event::InitApply(ReadElection(le)) => watcher::Event::InitApply(le),
        watcher::Event::InitDone => watcher::Event::InitDone,
    }
}

impl Resource for ReadElection {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(dt: &()) -> Cow<'_, str> {
        LeaderElection::kind(dt)
    }

    fn group(dt: &()) -> Cow<'_, str> {
        LeaderElection::group(dt)
    }

    fn version(dt: &()) -> Cow<'_, str> {
        LeaderElection::version(dt)
    }

    fn api_version(dt: &()) -> Cow<'_, str> {
        LeaderElection::api_version(dt)
    }

    fn plural(dt: &()) -> Cow<'_, str> {
        LeaderElection::plural(dt)
    }

    fn meta(&self) -> &ObjectMeta {
        &self.0.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.0.metadata
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An election as the API server sends it after the operator's status write.
    const ELECTION: &str = r#"{
        "apiVersion":"elector.dev/v1alpha1","kind":"LeaderElection",
        "metadata":{"name":"db","namespace":"shop","uid":"77","resourceVersion":"90",
            "generation":2,"finalizers":["elector.dev/cleanup"],
            "managedFields":[
                {"manager":"kubectl","operation":"Apply","apiVersion":"elector.dev/v1alpha1",
                 "fieldsType":"FieldsV1","fieldsV1":{"f:spec":{"f:selector":{".":{}}}}},
                {"manager":"consul-elector","operation":"Update","subresource":"status",
                 "fieldsType":"FieldsV1","fieldsV1":{"f:status":{"f:phase":{}}}}]},
        "spec":{"selector":{"matchLabels":{"app":"db"}},"key":"service/db/leader"},
        "status":{"phase":"Elected","fencingToken":4,"observedGeneration":2}
    }"#;

    #[test]
    fn reads_what_kubes_type_reads_but_the_managed_fields() {
        let ReadElection(read) = serde_json::from_str(ELECTION).unwrap();
        let mut full: LeaderElection = serde_json::from_str(ELECTION).unwrap();
        assert_eq!(full.metadata.managed_fields.as_ref().map(Vec::len), Some(2));
        full.metadata.managed_fields = None;
        assert_eq!(read, full);
        assert!(read.status.is_some());
    }

    #[test]
    fn is_the_same_resource() {
        assert_eq!(
            ReadElection::url_path(&(), Some("shop")),
            LeaderElection::url_path(&(), Some("shop"))
        );
        assert_eq!(ReadElection::api_version(&()), "elector.dev/v1alpha1");
        assert_eq!(ReadElection::kind(&()), "LeaderElection");
    }
}
