//! Leadership moves: deleting the leader pod moves the label and the leader Service's
//! endpoints (the failover time is measured and printed), and scaling to one replica and back
//! keeps exactly one leader, the same one while it stays.

use std::time::{Duration, Instant};

use consul_elector::crd::FENCING_TOKEN_ANNOTATION;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::DeleteParams;
use testkit::recorder::WatchRecorder;

use crate::election::{ELECTION, REPLICAS, SELECTOR, web_elected};
use crate::harness::{self, CONVERGE, LEADER, ROLE};

#[tokio::test]
#[ignore = "needs a kind cluster with the operator installed (make demo); run with ELECTOR_E2E=1"]
async fn deleting_the_leader_moves_the_label_and_the_endpoints() {
    let Some(env) = harness::env("deleting_the_leader_moves_the_label_and_the_endpoints").await
    else {
        return;
    };
    env.with_namespace("failover", |env, ns| async move {
        let (before, old_leader) = web_elected(&env, &ns).await;
        env.wait_endpoints(&ns, "web-leader", &[&old_leader]).await;
        let recorder = WatchRecorder::start(env.client.clone(), &ns)
            .await
            .expect("the pod recorder starts");

        let deleted_at = Instant::now();
        env.api::<Pod>(&ns)
            .delete(&old_leader, &DeleteParams::default())
            .await
            .expect("delete the leader pod");

        // The first recorded version that shows another pod as leader.
        recorder
            .wait_until(CONVERGE, |pods| {
                pods.values().any(|p| {
                    p.name != old_leader && p.labels.get(ROLE).map(String::as_str) == Some(LEADER)
                })
            })
            .await
            .expect("a new leader is labelled");
        let versions = recorder.versions();
        let labelled = versions
            .iter()
            .find(|v| {
                v.at >= deleted_at
                    && v.name != old_leader
                    && v.labels.get(ROLE).map(String::as_str) == Some(LEADER)
            })
            .expect("the new leader's version");
        let new_leader = labelled.name.clone();
        let label_failover = labelled.at.duration_since(deleted_at);
        let endpoints_moved = env.wait_endpoints(&ns, "web-leader", &[&new_leader]).await;
        let endpoint_failover = endpoints_moved.duration_since(deleted_at);
        println!(
            "FAILOVER {old_leader} -> {new_leader}: label after {label_failover:?}, \
             web-leader endpoints after {endpoint_failover:?} (from the delete request)"
        );

        // Never two leaders at one resourceVersion, and the new token is higher.
        recorder.assert_never_two(ROLE, LEADER);
        let (after, leader) = env.elected(&ns, ELECTION, SELECTOR, REPLICAS).await;
        assert_eq!(leader.name_any(), new_leader);
        assert!(
            after.fencing_token > before.fencing_token,
            "fencing token {:?} -> {:?}",
            before.fencing_token,
            after.fencing_token
        );
        assert!(after.transitions > before.transitions, "{after:?}");
        let token = harness::annotation(&leader, FENCING_TOKEN_ANNOTATION);
        assert_eq!(
            token.map(str::to_owned),
            after.fencing_token.map(|t| t.to_string())
        );
        // The operator moves a leader it sees being deleted at once (docs/design.md §2 rule 4);
        // generous bound for a loaded CI machine, the printed time is the measurement.
        assert!(
            label_failover < Duration::from_secs(10),
            "failover took {label_failover:?}"
        );
        recorder.stop().await;
    })
    .await;
}

#[tokio::test]
#[ignore = "needs a kind cluster with the operator installed (make demo); run with ELECTOR_E2E=1"]
async fn scaling_to_one_replica_and_back_keeps_one_leader() {
    let Some(env) = harness::env("scaling_to_one_replica_and_back_keeps_one_leader").await else {
        return;
    };
    env.with_namespace("scale", |env, ns| async move {
        web_elected(&env, &ns).await;
        let recorder = WatchRecorder::start(env.client.clone(), &ns)
            .await
            .expect("the pod recorder starts");

        env.scale(&ns, "web", 1).await;
        // The ReplicaSet picks which pods go; whichever stays must end up the leader.
        let (_, single) = env.elected(&ns, ELECTION, SELECTOR, 1).await;
        let single = single.name_any();
        env.wait_endpoints(&ns, "web-leader", &[&single]).await;
        env.wait_endpoints(&ns, "web-followers", &[]).await;
        println!("scaled to 1: {single} leads");

        env.scale(&ns, "web", REPLICAS as i32).await;
        // Waits for the new pods to be Ready (image cached by now) and labelled.
        let (status, leader) = env.elected(&ns, ELECTION, SELECTOR, REPLICAS).await;
        // Stickiness (docs/design.md §2 rule 5): the leader keeps leading while eligible.
        assert_eq!(leader.name_any(), single, "{status:?}");
        let followers: Vec<String> = env
            .live_pods(&ns, SELECTOR)
            .await
            .iter()
            .map(|p| p.name_any())
            .filter(|n| n != &single)
            .collect();
        let followers: Vec<&str> = followers.iter().map(String::as_str).collect();
        env.wait_endpoints(&ns, "web-followers", &followers).await;
        env.wait_endpoints(&ns, "web-leader", &[&single]).await;
        println!("scaled to {REPLICAS}: {single} still leads, followers {followers:?}");
        recorder.assert_never_two(ROLE, LEADER);
        recorder.stop().await;
    })
    .await;
}
