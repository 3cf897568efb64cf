//! The `LeaderElection` CRD as the API server sees it.

use consul_elector::crd::LeaderElection;
use kube::CustomResourceExt;
use serde_json::Value;

/// The CRD's openAPIV3Schema as JSON.
pub fn schema() -> Value {
    let crd = LeaderElection::crd();
    let version = crd.spec.versions.first().expect("the CRD has a version");
    let schema = version
        .schema
        .as_ref()
        .and_then(|s| s.open_api_v3_schema.as_ref())
        .expect("the CRD has an openAPIV3Schema");
    serde_json::to_value(schema).expect("the schema serializes")
}
