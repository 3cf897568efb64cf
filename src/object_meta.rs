//! Object metadata read without its managed fields.
//!
//! Every object the API server sends carries `metadata.managedFields`: one entry per field
//! manager, each with the tree of fields it owns as free-form JSON. The operator never reads
//! them, and every status write and label patch makes them longer, so decoding them into
//! `serde_json::Value` trees (and dropping those again) was the largest single cost of
//! reading pods and elections. [`without_managed_fields`] reads the metadata with the
//! managed fields skipped by the parser: nothing of them is allocated.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use serde::{Deserialize, Deserializer};

/// `ObjectMeta`'s fields but `managedFields`, which the parser skips as an unknown field.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Wire {
    annotations: Option<BTreeMap<String, String>>,
    creation_timestamp: Option<Time>,
    deletion_grace_period_seconds: Option<i64>,
    deletion_timestamp: Option<Time>,
    finalizers: Option<Vec<String>>,
    generate_name: Option<String>,
    generation: Option<i64>,
    labels: Option<BTreeMap<String, String>>,
    name: Option<String>,
    namespace: Option<String>,
    owner_references: Option<Vec<OwnerReference>>,
    resource_version: Option<String>,
    self_link: Option<String>,
    uid: Option<String>,
}

/// Deserializes an `ObjectMeta` whose `managed_fields` is always `None` (for
/// `#[serde(deserialize_with = ...)]`).
pub fn without_managed_fields<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<ObjectMeta, D::Error> {
    let wire = Wire::deserialize(deserializer)?;
    Ok(ObjectMeta {
        annotations: wire.annotations,
        creation_timestamp: wire.creation_timestamp,
        deletion_grace_period_seconds: wire.deletion_grace_period_seconds,
        deletion_timestamp: wire.deletion_timestamp,
        finalizers: wire.finalizers,
        generate_name: wire.generate_name,
        generation: wire.generation,
        labels: wire.labels,
        managed_fields: None,
        name: wire.name,
        namespace: wire.namespace,
        owner_references: wire.owner_references,
        resource_version: wire.resource_version,
        self_link: wire.self_link,
        uid: wire.uid,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Deserialize)]
    struct Object {
        #[serde(deserialize_with = "without_managed_fields")]
        metadata: ObjectMeta,
    }

    /// A pod's metadata as the API server sends it after a label patch.
    const METADATA: &str = r#"{"metadata":{
        "name":"web-0","namespace":"shop","uid":"4f1c","resourceVersion":"812",
        "generation":1,"generateName":"web-","selfLink":"/api/v1/namespaces/shop/pods/web-0",
        "creationTimestamp":"2026-11-28T01:00:00Z","deletionTimestamp":"2026-11-28T02:00:00Z",
        "deletionGracePeriodSeconds":30,"finalizers":["example.com/keep"],
        "labels":{"app":"web","elector.dev/role":"leader"},
        "annotations":{"elector.dev/fencing-token":"7"},
        "ownerReferences":[{"apiVersion":"apps/v1","kind":"StatefulSet","name":"web",
            "uid":"9a2b","controller":true,"blockOwnerDeletion":true}],
        "managedFields":[
            {"manager":"kubectl","operation":"Update","apiVersion":"v1",
             "time":"2026-11-28T01:00:00Z","fieldsType":"FieldsV1",
             "fieldsV1":{"f:metadata":{"f:labels":{".":{},"f:app":{}}},
                         "f:spec":{"f:containers":{"k:{\"name\":\"web\"}":{".":{}}}}}},
            {"manager":"consul-elector","operation":"Apply","apiVersion":"v1",
             "fieldsType":"FieldsV1","fieldsV1":{"f:metadata":{"f:labels":{"f:elector.dev/role":{}}}}}
        ]}}"#;

    #[test]
    fn every_field_but_the_managed_fields_is_read() {
        let read: Object = serde_json::from_str(METADATA).unwrap();
        let mut full: ObjectMeta = serde_json::from_value(
            serde_json::from_str::<serde_json::Value>(METADATA).unwrap()["metadata"].clone(),
        )
        .unwrap();
        assert_eq!(full.managed_fields.as_ref().map(Vec::len), Some(2));
        full.managed_fields = None;
        assert_eq!(read.metadata, full);
    }

    #[test]
    fn metadata_that_has_no_managed_fields_is_read_as_sent() {
        let read: Object = serde_json::from_str(r#"{"metadata":{"name":"a","uid":"1"}}"#).unwrap();
        assert_eq!(read.metadata.name.as_deref(), Some("a"));
        assert_eq!(read.metadata.uid.as_deref(), Some("1"));
        assert_eq!(read.metadata.managed_fields, None);
        assert_eq!(read.metadata.labels, None);
    }
}
