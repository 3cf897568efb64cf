//! A leader whose node falls silent: its kubelet stops (SIGSTOP: hung, or cut off from the API
//! server) while the leader's container keeps running and answering. Only when the node
//! lifecycle controller gives up on the node (the node monitor grace period, 40 s by default)
//! are its pods marked NotReady, and only then may the leadership move. Measured as a client
//! of the leader Service sees it, and asserted over the recorded history.
//!
//! Runs under `node-e2e`, whose spare node (`ELECTOR_E2E_SPARE_*`) is tainted so that only
//! this test's pods run there: the operator and the dev Consul stay on the node that keeps
//! reporting. Elsewhere it prints SKIPPED.

use std::time::Instant;

use consul_elector::crd::{LeaderElection, SWITCHOVER_ANNOTATION};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::ResourceExt;
use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};

use crate::election::{ELECTION, REPLICAS, SELECTOR, WEB};
use crate::harness::{CONVERGE, Env, PODS_READY, is_ready, wait_for};
use crate::real_node::{EventClock, cluster_ip, failover_once, real_node, runs};
use crate::traffic;

/// node-e2e's spare node: tainted, so that only pods tolerating it run there, and with a
/// kubelet the test may stop.
struct SpareNode {
    name: String,
    /// The taint, `key=value:Effect`.
    taint: String,
    kubelet: u32,
}

impl SpareNode {
    /// From `ELECTOR_E2E_SPARE_NODE`, `_TAINT` and `_KUBELET` (its process id).
    fn from_env() -> Option<Self> {
        Some(Self {
            name: std::env::var("ELECTOR_E2E_SPARE_NODE").ok()?,
            taint: std::env::var("ELECTOR_E2E_SPARE_TAINT").ok()?,
            kubelet: std::env::var("ELECTOR_E2E_SPARE_KUBELET")
                .ok()?
                .parse()
                .ok()?,
        })
    }

    /// The toleration of the node's taint.
    fn toleration(&self) -> Value {
        let (key_value, effect) = self.taint.rsplit_once(':').expect("key=value:Effect");
        let (key, value) = key_value.split_once('=').expect("key=value");
        json!({"key": key, "operator": "Equal", "value": value, "effect": effect})
    }

    /// Stops the kubelet; it resumes when the returned guard drops (a failing test included).
    fn silence(&self) -> (Silenced, Instant) {
        signal(self.kubelet, "STOP");
        (Silenced(self.kubelet), Instant::now())
    }
}

/// A stopped kubelet, resumed on drop.
struct Silenced(u32);

impl Drop for Silenced {
    fn drop(&mut self) {
        signal(self.0, "CONT");
    }
}

/// `kill -<signal> <pid>`.
fn signal(pid: u32, signal: &str) {
    let status = std::process::Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -{signal} {pid}: {status}");
}

/// The node a pod was scheduled to.
fn node_of(pod: &Pod) -> Option<&str> {
    pod.spec.as_ref()?.node_name.as_deref()
}

/// Waits until `node` reports Ready itself. After a kubelet resumes, it first reports the node
/// NotReady (its pod lifecycle events are stale) and only later Ready again; silenced before
/// that, the node would never turn from Ready to not Ready, and the node lifecycle controller
/// marks pods NotReady only on that turn.
async fn node_ready(env: &Env, node: &str) {
    wait_for(&format!("{node} reports Ready"), PODS_READY, || async {
        let node = kube::Api::<Node>::all(env.client.clone())
            .get(node)
            .await
            .ok()?;
        node.status?
            .conditions?
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True")
            .then_some(())
    })
    .await;
}

/// Makes a pod on `node` the leader (a switchover when the leader runs elsewhere) and returns
/// its name.
async fn leader_on(env: &Env, ns: &str, node: &str) -> String {
    let (_, leader) = env.elected(ns, ELECTION, SELECTOR, REPLICAS).await;
    if node_of(&leader) == Some(node) {
        return leader.name_any();
    }
    let target = env
        .live_pods(ns, SELECTOR)
        .await
        .into_iter()
        .find(|pod| node_of(pod) == Some(node) && is_ready(pod))
        .unwrap_or_else(|| panic!("no Ready web pod on {node}"))
        .name_any();
    env.api::<LeaderElection>(ns)
        .patch(
            ELECTION,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {SWITCHOVER_ANNOTATION: target}}})),
        )
        .await
        .expect("ask for a switchover");
    wait_for(
        &format!("{target} leads after the switchover"),
        CONVERGE,
        || async {
            let status = env.status(ns, ELECTION).await;
            (status.leader.is_some_and(|leader| leader.pod == target)).then_some(())
        },
    )
    .await;
    let (_, leader) = env.elected(ns, ELECTION, SELECTOR, REPLICAS).await;
    assert_eq!(leader.name_any(), target);
    target
}

#[tokio::test]
#[ignore = "needs a kind cluster with the operator installed (make demo); run with ELECTOR_E2E=1"]
async fn a_leader_whose_node_falls_silent_is_replaced() {
    let test = "a_leader_whose_node_falls_silent_is_replaced";
    let Some((env, _)) = real_node(test).await else {
        return;
    };
    let Some(spare) = SpareNode::from_env() else {
        println!("SKIPPED {test}: needs node-e2e's spare node (ELECTOR_E2E_SPARE_NODE)");
        return;
    };
    env.with_namespace("silent", |env, ns| async move {
        // The example spread over both nodes (at most one pod more on either), tolerating the
        // spare node's taint and preferring that node: two of the three pods run there, so the
        // node takes a follower down with the leader, and the leadership may pass through that
        // follower before the node lifecycle controller has marked it too.
        let toleration = spare.toleration();
        let spare_name = spare.name.clone();
        env.apply_example_edited(WEB, &ns, |document| {
            if document["kind"] == "Deployment" {
                let pod = &mut document["spec"]["template"]["spec"];
                pod["tolerations"] = json!([toleration]);
                pod["affinity"] = json!({"nodeAffinity": {
                    "preferredDuringSchedulingIgnoredDuringExecution": [{
                        "weight": 100,
                        "preference": {"matchExpressions": [{
                            "key": "kubernetes.io/hostname",
                            "operator": "In",
                            "values": [spare_name],
                        }]},
                    }],
                }});
                pod["topologySpreadConstraints"] = json!([{
                    "maxSkew": 1,
                    "topologyKey": "kubernetes.io/hostname",
                    "whenUnsatisfiable": "DoNotSchedule",
                    "labelSelector": {"matchLabels": {"app": "web"}},
                }]);
            }
        })
        .await;
        let ip = cluster_ip(&env, &ns, "web-leader").await;
        let mut results = Vec::new();
        for run in 1..=runs() {
            node_ready(&env, &spare.name).await;
            let old = leader_on(&env, &ns, &spare.name).await;
            let on_spare = env
                .live_pods(&ns, SELECTOR)
                .await
                .iter()
                .filter(|pod| node_of(pod) == Some(spare.name.as_str()))
                .count();
            assert_eq!(on_spare, 2, "two web pods on {}", spare.name);
            let silenced = std::cell::OnceCell::new();
            let (result, not_ready_after) =
                failover_once(&env, &ns, &ip, &old, EventClock::NotReady, async {
                    let (guard, at) = spare.silence();
                    let _ = silenced.set(guard);
                    at
                })
                .await;
            println!(
                "NODE_SILENT run={run} {} stopped reporting; {old} NotReady after \
                 {not_ready_after:?}, the new leader answered {:?} later",
                spare.name, result.to_new_leader
            );
            results.push(result);
            drop(silenced);
            // Back: the node reports again and its pods turn Ready (the next run waits).
            wait_for(
                &format!("{old} Ready again on {}", spare.name),
                PODS_READY,
                || async {
                    let pod = env.api::<Pod>(&ns).get(&old).await.ok()?;
                    is_ready(&pod).then_some(())
                },
            )
            .await;
        }
        traffic::report("leader_node_silent", &results);
        assert!(results.iter().all(|r| r.to_new_leader < CONVERGE));
    })
    .await;
}
