//! Elections and pods for the plugin's unit tests.

use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

use crate::crd::LeaderElection;

/// Election `prod/web` selecting `app=web`, with `status` (JSON) and spec fields `spec`
/// merged over the selector.
pub fn election(spec: Value, status: Value) -> LeaderElection {
    let mut full_spec = json!({"selector": {"matchLabels": {"app": "web"}}});
    if let (Some(full), Some(extra)) = (full_spec.as_object_mut(), spec.as_object()) {
        full.extend(extra.clone());
    }
    serde_json::from_value(json!({
        "apiVersion": "elector.dev/v1alpha1",
        "kind": "LeaderElection",
        "metadata": {"name": "web", "namespace": "prod", "uid": "le-uid"},
        "spec": full_spec,
        "status": status,
    }))
    .expect("a valid LeaderElection")
}

/// The status of an election led by `web-1` (token 42) with candidates `web-0` (eligible,
/// priority 0), `web-1` (eligible, priority 0) and `web-2` (NotReady).
pub fn led_by_web_1() -> Value {
    json!({
        "phase": "Elected",
        "leader": {"pod": "web-1", "uid": "u1", "since": "2024-05-01T09:57:00Z", "sessionID": "s-1"},
        "fencingToken": 42,
        "transitions": 3,
        "candidates": [
            {"pod": "web-0", "eligible": true, "priority": 0},
            {"pod": "web-1", "eligible": true, "priority": 0},
            {"pod": "web-2", "eligible": false, "reason": "NotReady", "priority": 0},
        ],
    })
}

/// Pod `name` with `labels` and `annotations`.
pub fn pod(name: &str, labels: Value, annotations: Value) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "prod", "labels": labels, "annotations": annotations},
    }))
    .expect("a valid Pod")
}
