//! The standing invariant: the pods carrying the leader label, the Consul lock and the status
//! agree. A second leader label made by hand is taken off at once; a disagreement the operator
//! cannot heal right away (its pod patches fail) is reported as a Warning event and a metric,
//! and healed once it can act again.

use crate::harness;

use std::time::Instant;

use harness::{Harness, ROLE, SOON, role_in};
use kube::api::{Patch, PatchParams};
use serde_json::json;
use testkit::cluster::with_namespace;

fn web() -> serde_json::Value {
    json!({"selector": {"matchLabels": {"app": "web"}}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_leader_label_made_by_hand_is_taken_off_at_once() {
    with_namespace("inv-hand", |admin, ns| async move {
        let (h, first) = Harness::web_elected(admin, ns, web()).await;
        let stray = a_follower(&h, &first.pod);
        let labelled = Instant::now();
        let patch = json!({"metadata": {"labels": {ROLE: "leader"}}});
        let hand_made: u64 = h
            .pods()
            .patch(&stray, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .expect("label by hand")
            .metadata
            .resource_version
            .and_then(|v| v.parse().ok())
            .expect("resourceVersion");
        // Wait on the recorder until it has seen a version of the pod after the hand-made one
        // that carries no leader label (the recorder may lag behind the API server).
        let stray_name = stray.clone();
        h.wait_pods(SOON, "the hand-made label is gone", move |pods| {
            pods.get(&stray_name).is_some_and(|v| {
                v.resource_version > hand_made && role_in(pods, &stray_name) == Some("follower")
            })
        })
        .await;
        let healed = h
            .recorder
            .versions()
            .into_iter()
            .find(|v| {
                v.name == stray
                    && v.resource_version > hand_made
                    && v.labels.get(ROLE).map(String::as_str) == Some("follower")
            })
            .map(|v| v.at - labelled)
            .expect("the healing version was recorded");
        eprintln!("a hand-made second leader label was taken off after {healed:?}");
        // The real leader was never touched.
        assert_eq!(role_in(&h.current(), &first.pod), Some("leader"));
        assert_eq!(h.wait_elected("web", None).await, first);
        h.finish_among(move |v| v.name != stray).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disagreement_that_outlives_a_reconcile_is_reported_and_healed() {
    with_namespace("inv-report", |admin, ns| async move {
        let (h, first) = Harness::web_elected(admin, ns, web()).await;
        // Every pod patch of the operator fails, and somebody labels a follower leader: the
        // operator cannot take the label off for now.
        let fault = h.kube_faults.add(harness::pod_patches_fail());
        let stray = a_follower(&h, &first.pod);
        h.set_pod_label(&stray, ROLE, Some("leader")).await;
        let notes = h.wait_event("web", "Disagreement").await;
        assert!(
            notes.iter().any(|n| n.contains("two_leader_labels")),
            "{notes:?}"
        );
        let metrics = h.operator().metrics.encode();
        let reported = metrics
            .lines()
            .find(|l| {
                l.starts_with(r#"consul_elector_disagreements_total{kind="two_leader_labels"}"#)
            })
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse::<f64>().ok());
        assert!(reported.is_some_and(|n| n >= 1.0), "{metrics}");
        // The operator can patch again: healed, the real leader untouched.
        h.kube_faults.remove(fault);
        let stray_name = stray.clone();
        h.wait_pods(SOON, "the stray label is gone", move |pods| {
            role_in(pods, &stray_name) == Some("follower")
        })
        .await;
        assert_eq!(h.wait_elected("web", None).await, first);
        h.finish_among(move |v| v.name != stray).await;
    })
    .await;
}

/// A pod of the namespace other than `leader`.
fn a_follower(h: &Harness, leader: &str) -> String {
    h.current()
        .keys()
        .find(|p| *p != leader)
        .cloned()
        .expect("a follower")
}
