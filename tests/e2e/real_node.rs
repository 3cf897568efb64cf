//! What only a real node shows: requests through the leader Service's ClusterIP (kube-proxy)
//! from this host, a container killed under the kubelet, a readiness probe that fails, a
//! rolling update, and the active operator replica deleted. Each failover is measured as a
//! client of the leader Service sees it (`traffic`), and asserted over the recorded history.
//!
//! These run under `node-e2e` (`ELECTOR_E2E_NODE` set: ClusterIPs are routed on this host and
//! containerd's socket is known); elsewhere, on kind for example, they print SKIPPED. A node
//! that falls silent is in `silent_node`.
//! `ELECTOR_E2E_RUNS=N` repeats each failover N times (default 3) and prints p50/p99.

use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::ResourceExt;
use kube::api::{DeleteParams, Patch, PatchParams};
use serde_json::json;
use testkit::recorder::WatchRecorder;

use crate::election::{ELECTION, REPLICAS, SELECTOR, web_elected};
use crate::harness::{self, CONVERGE, Env, LEADER, PODS_READY, ROLE, is_ready, wait_for};
use crate::traffic::{self, Failover, LeaderClient};

/// The suite's environment and the real node's containerd socket, or `None` (printing why)
/// when the suite is off or runs elsewhere.
pub async fn real_node(test: &str) -> Option<(Env, String)> {
    let env = harness::env(test).await?;
    match std::env::var("ELECTOR_E2E_CONTAINERD") {
        Ok(socket) if std::env::var_os("ELECTOR_E2E_NODE").is_some() => Some((env, socket)),
        _ => {
            println!(
                "SKIPPED {test}: needs the real node of node-e2e (ClusterIPs routed on this host, \
                 containerd's socket); on kind the rest of the suite runs"
            );
            None
        }
    }
}

/// How many times each failover is repeated (`ELECTOR_E2E_RUNS`, default 3).
pub fn runs() -> usize {
    std::env::var("ELECTOR_E2E_RUNS")
        .ok()
        .and_then(|n| n.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(3)
}

/// The ClusterIP of Service `name`.
pub async fn cluster_ip(env: &Env, ns: &str, name: &str) -> String {
    let service = env.api::<Service>(ns).get(name).await.expect("the Service");
    service
        .spec
        .and_then(|spec| spec.cluster_ip)
        .expect("a ClusterIP")
}

/// The first pod other than `old` the recorder saw labelled leader (the recorder started while
/// `old` led).
async fn new_leader(recorder: &WatchRecorder, old: &str) -> String {
    recorder
        .wait_until(CONVERGE, |pods| {
            pods.values()
                .any(|p| p.name != old && p.has_label(ROLE, LEADER))
        })
        .await
        .expect("a new leader is labelled");
    recorder
        .versions()
        .iter()
        .find(|v| v.name != old && v.has_label(ROLE, LEADER))
        .map(|v| v.name.clone())
        .expect("the new leader's version")
}

/// Where a failover's time is counted from.
#[derive(Clone, Copy)]
pub enum EventClock {
    /// The test's action (a delete request, a kill).
    Action,
    /// The old leader reported NotReady after the action: by its kubelet, or for a node that
    /// fell silent by the node lifecycle controller.
    NotReady,
}

/// Runs `event` on the leader (returning when it happened) `runs()` times on the web example
/// in `ns`, each time measuring the failover through the leader Service ([`failover_once`]),
/// then letting `recover` undo what the event left on the old leader.
async fn measure<F, Fut, R, RFut>(
    env: &Env,
    ns: &str,
    scenario: &str,
    clock: EventClock,
    mut event: F,
    mut recover: R,
) -> Vec<Failover>
where
    F: FnMut(String) -> Fut,
    Fut: std::future::Future<Output = Instant>,
    R: FnMut(String) -> RFut,
    RFut: std::future::Future<Output = ()>,
{
    let ip = cluster_ip(env, ns, "web-leader").await;
    let mut results = Vec::new();
    for _ in 0..runs() {
        let (_, old) = env.elected(ns, ELECTION, SELECTOR, REPLICAS).await;
        let old = old.name_any();
        let (result, _) = failover_once(env, ns, &ip, &old, clock, event(old.clone())).await;
        results.push(result);
        recover(old).await;
    }
    traffic::report(scenario, &results);
    results
}

/// One failover as the client of the leader Service at `ip` sees it: once the client reaches
/// `old`, awaits `event` (which returns when it acted on `old`), waits for the new leader to
/// answer, and asserts the history recorded meanwhile. Returns the failover counted from
/// `clock`, and how long after the action that clock started.
pub async fn failover_once(
    env: &Env,
    ns: &str,
    ip: &str,
    old: &str,
    clock: EventClock,
    event: impl std::future::Future<Output = Instant>,
) -> (Failover, Duration) {
    env.wait_endpoints(ns, "web-leader", &[old]).await;
    let recorder = WatchRecorder::start(env.client.clone(), ns)
        .await
        .expect("the pod recorder starts");
    let client = LeaderClient::start(ip);
    // Only the leader for a second: kube-proxy applies an Endpoints change up to a second
    // later (its minimum sync period), so right after the leader moved (a switchover setting
    // the run up) the previous one may still answer; that is not this failover's.
    wait_for("the client reaches only the leader", CONVERGE, || {
        let answered = client.only_answered_by_since(old, Instant::now() - Duration::from_secs(1));
        async move { answered.then_some(()) }
    })
    .await;
    let settled = Instant::now();
    let acted = event.await;
    let at = match clock {
        EventClock::Action => acted,
        // When the recorder saw the report (the watch event), not when a poll did. Awaited
        // before the new leader: a silent node's pods turn NotReady only after the node
        // monitor grace period, which is not the operator's time to count against a bound.
        EventClock::NotReady => {
            let not_ready =
                |v: &testkit::recorder::PodVersion| v.name == old && v.at >= acted && !v.ready;
            recorder
                .wait_until(CONVERGE, |pods| pods.values().any(not_ready))
                .await
                .unwrap_or_else(|e| panic!("{old} is reported NotReady: {e}"));
            recorder
                .versions()
                .iter()
                .find(|v| not_ready(v))
                .map_or(acted, |v| v.at)
        }
    };
    let new = wait_for("a new leader answers through the Service", CONVERGE, || {
        let new = client.leader_answering_since(old, at, &recorder.versions());
        async move { new }
    })
    .await;
    // A little more traffic shows whether the old leader still answers afterwards.
    tokio::time::sleep(Duration::from_millis(300)).await;
    // What this failover did to the client: from the moment it reached only the old leader.
    let probes: Vec<_> = client
        .stop()
        .await
        .into_iter()
        .filter(|p| p.sent >= settled)
        .collect();
    let versions = recorder.versions();
    let result = traffic::failover(&probes, &versions, at, &new);
    harness::assert_history(&recorder);
    recorder.stop().await;
    (result, at - acted)
}

#[tokio::test]
#[ignore = "needs a kind cluster with the operator installed (make demo); run with ELECTOR_E2E=1"]
async fn requests_through_the_leader_service_reach_only_the_leader() {
    let test = "requests_through_the_leader_service_reach_only_the_leader";
    let Some((env, _)) = real_node(test).await else {
        return;
    };
    env.with_namespace("route", |env, ns| async move {
        let (_, leader) = web_elected(&env, &ns).await;
        env.wait_endpoints(&ns, "web-leader", &[&leader]).await;
        let ip = cluster_ip(&env, &ns, "web-leader").await;
        let client = LeaderClient::start(&ip);
        let since = Instant::now();
        wait_for("100 answers by the leader", CONVERGE, || {
            let client = &client;
            let leader = &leader;
            async move {
                (client.answered_by_since(leader, since)
                    && since.elapsed() > 100 * traffic::INTERVAL)
                    .then_some(())
            }
        })
        .await;
        let probes = client.stop().await;
        let answers: Vec<&str> = probes
            .iter()
            .filter_map(|p| p.outcome.as_deref().ok())
            .collect();
        assert!(
            answers.len() >= 50,
            "{} answers of {}",
            answers.len(),
            probes.len()
        );
        assert!(
            answers.iter().all(|pod| *pod == leader),
            "web-leader answered from others than {leader}: {answers:?}"
        );
        println!(
            "web-leader ({ip}) -> {leader}: {} of {} requests answered",
            answers.len(),
            probes.len()
        );
    })
    .await;
}

#[tokio::test]
#[ignore = "needs a kind cluster with the operator installed (make demo); run with ELECTOR_E2E=1"]
async fn the_client_reaches_the_new_leader_after_the_leader_pod_is_deleted() {
    let test = "the_client_reaches_the_new_leader_after_the_leader_pod_is_deleted";
    let Some((env, _)) = real_node(test).await else {
        return;
    };
    env.with_namespace("delete", |env, ns| async move {
        web_elected(&env, &ns).await;
        let pods = env.api::<Pod>(&ns);
        let results = measure(
            &env,
            &ns,
            "leader_pod_deleted",
            EventClock::Action,
            |old| {
                let pods = pods.clone();
                async move {
                    let at = Instant::now();
                    pods.delete(&old, &DeleteParams::default())
                        .await
                        .expect("delete the leader pod");
                    at
                }
            },
            |_| async {},
        )
        .await;
        assert!(results.iter().all(|r| r.to_new_leader < CONVERGE));
    })
    .await;
}

#[tokio::test]
#[ignore = "needs a kind cluster with the operator installed (make demo); run with ELECTOR_E2E=1"]
async fn a_killed_leader_container_is_replaced_and_returns_as_a_follower() {
    let test = "a_killed_leader_container_is_replaced_and_returns_as_a_follower";
    let Some((env, socket)) = real_node(test).await else {
        return;
    };
    env.with_namespace("kill", |env, ns| async move {
        web_elected(&env, &ns).await;
        let pods = env.api::<Pod>(&ns);
        measure(
            &env,
            &ns,
            "leader_container_killed",
            EventClock::Action,
            |old| {
                let pods = pods.clone();
                let socket = socket.clone();
                async move {
                    let pod = pods.get(&old).await.expect("the leader pod");
                    let container = container_id(&pod);
                    let at = Instant::now();
                    kill_container(&socket, &container);
                    at
                }
            },
            // The kubelet restarts the killed container in place: the same pod, a follower
            // once Ready again.
            |old| {
                let pods = pods.clone();
                async move {
                    wait_for(
                        &format!("{old} restarted as a Ready follower"),
                        PODS_READY,
                        || {
                            let pods = pods.clone();
                            let old = old.clone();
                            async move {
                                let pod = pods.get(&old).await.ok()?;
                                (is_ready(&pod)
                                    && restarts(&pod) >= 1
                                    && harness::role(&pod) == Some(harness::FOLLOWER))
                                .then_some(())
                            }
                        },
                    )
                    .await;
                    // Replaced, so that the next run's kill does not wait out the kubelet's
                    // crash-loop back-off (10 s, doubling) for a container killed again soon.
                    pods.delete(&old, &DeleteParams::default())
                        .await
                        .expect("replace the restarted follower");
                }
            },
        )
        .await;
    })
    .await;
}

#[tokio::test]
#[ignore = "needs a kind cluster with the operator installed (make demo); run with ELECTOR_E2E=1"]
async fn a_leader_whose_readiness_fails_is_replaced() {
    let test = "a_leader_whose_readiness_fails_is_replaced";
    let Some((env, _)) = real_node(test).await else {
        return;
    };
    env.with_namespace("ready", |env, ns| async move {
        // The test image's /readyz can be failed on request; the example probes /hostname.
        // Edited before the Deployment exists: a rollout would replace the pods under the test.
        env.apply_example_edited(crate::election::WEB, &ns, |document| {
            if document["kind"] == "Deployment" {
                let containers = &mut document["spec"]["template"]["spec"]["containers"];
                let web = containers
                    .as_array_mut()
                    .and_then(|all| all.iter_mut().find(|c| c["name"] == "web"))
                    .expect("the web container");
                web["readinessProbe"]["httpGet"]["path"] = json!("/readyz");
            }
        })
        .await;
        let client = env.client.clone();
        let ns2 = ns.clone();
        let results = measure(
            &env,
            &ns,
            "leader_readiness_failing",
            EventClock::NotReady,
            |old| {
                let client = client.clone();
                let ns = ns2.clone();
                async move {
                    let at = Instant::now();
                    pod_post(&client, &ns, &old, "/readyz/fail").await;
                    at
                }
            },
            |old| {
                let client = client.clone();
                let ns = ns2.clone();
                async move { pod_post(&client, &ns, &old, "/readyz/pass").await }
            },
        )
        .await;
        assert!(results.iter().all(|r| r.to_new_leader < CONVERGE));
    })
    .await;
}

#[tokio::test]
#[ignore = "needs a kind cluster with the operator installed (make demo); run with ELECTOR_E2E=1"]
async fn a_rolling_update_keeps_one_leader_for_the_client() {
    let test = "a_rolling_update_keeps_one_leader_for_the_client";
    let Some((env, _)) = real_node(test).await else {
        return;
    };
    env.with_namespace("rollout", |env, ns| async move {
        let (_, first) = web_elected(&env, &ns).await;
        env.wait_endpoints(&ns, "web-leader", &[&first]).await;
        let ip = cluster_ip(&env, &ns, "web-leader").await;
        let recorder = WatchRecorder::start(env.client.clone(), &ns)
            .await
            .expect("the pod recorder starts");
        let old_pods: Vec<String> = env
            .live_pods(&ns, SELECTOR)
            .await
            .iter()
            .map(|p| p.name_any())
            .collect();
        let client = LeaderClient::start(&ip);
        let started = Instant::now();
        env.api::<Deployment>(&ns)
            .patch(
                "web",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"template": {"metadata": {"annotations": {
                    "e2e.elector.dev/restartedAt": format!("{:?}", started)
                }}}}})),
            )
            .await
            .expect("restart the Deployment");
        let (_, leader) = wait_for(
            "the rollout replaced every pod and elected",
            PODS_READY,
            || {
                let env = &env;
                let ns = &ns;
                let old_pods = &old_pods;
                async move {
                    let pods = env.live_pods(ns, SELECTOR).await;
                    (pods.len() == REPLICAS
                        && pods.iter().all(|p| !old_pods.contains(&p.name_any())))
                    .then_some(())?;
                    Some(env.elected(ns, ELECTION, SELECTOR, REPLICAS).await)
                }
            },
        )
        .await;
        let leader = leader.name_any();
        env.wait_endpoints(&ns, "web-leader", &[&leader]).await;
        wait_for("the new leader answers", CONVERGE, || {
            let answered = client.answered_by_since(&leader, started);
            async move { answered.then_some(()) }
        })
        .await;
        let probes = client.stop().await;
        let versions = recorder.versions();
        let run = traffic::failover(&probes, &versions, started, &leader);
        traffic::report("rolling_update", &[run]);
        harness::assert_history(&recorder);
        recorder.stop().await;
        println!(
            "rolling update: {first} -> {leader} in {:?}",
            started.elapsed()
        );
    })
    .await;
}

#[tokio::test]
#[ignore = "needs a kind cluster with the operator installed (make demo); run with ELECTOR_E2E=1"]
async fn deleting_the_active_operator_replica_hands_over_to_the_standby() {
    let test = "deleting_the_active_operator_replica_hands_over_to_the_standby";
    let Some((env, _)) = real_node(test).await else {
        return;
    };
    env.with_namespace("standby", |env, ns| async move {
        let (before, leader) = web_elected(&env, &ns).await;
        let recorder = WatchRecorder::start(env.client.clone(), &ns)
            .await
            .expect("the pod recorder starts");
        let leases = env.api::<Lease>(&env.operator_namespace);
        let holder = || async {
            let lease = leases.get(crate::harness::OPERATOR_LEASE).await.ok()?;
            lease.spec?.holder_identity
        };
        let active = holder().await.expect("an active operator replica");
        env.api::<Pod>(&env.operator_namespace)
            .delete(&active, &DeleteParams::default())
            .await
            .expect("delete the active operator pod");
        let deleted = Instant::now();
        // The standby, or the Deployment's replacement for the deleted pod, whichever asks
        // first after the deleted replica released the Lease on SIGTERM.
        let successor = wait_for("another replica holds the Lease", CONVERGE, || async {
            holder().await.filter(|holder| *holder != active)
        })
        .await;
        println!(
            "operator {active} deleted; {successor} active after {:?}",
            deleted.elapsed()
        );
        // Nothing moved, and the new active replica fails over: delete the leader.
        let (after, same) = env.elected(&ns, ELECTION, SELECTOR, REPLICAS).await;
        assert_eq!(same.name_any(), leader);
        assert_eq!(after.fencing_token, before.fencing_token);
        env.api::<Pod>(&ns)
            .delete(&leader, &DeleteParams::default())
            .await
            .expect("delete the leader pod");
        let new = new_leader(&recorder, &leader).await;
        let (last, _) = env.elected(&ns, ELECTION, SELECTOR, REPLICAS).await;
        assert!(last.fencing_token > before.fencing_token, "{last:?}");
        println!("the new active replica moved the leader {leader} -> {new}");
        harness::assert_history(&recorder);
        recorder.stop().await;
    })
    .await;
}

/// The CRI id of the pod's (only) container.
fn container_id(pod: &Pod) -> String {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|c| c.first())
        .and_then(|c| c.container_id.as_deref())
        .and_then(|id| id.strip_prefix("containerd://"))
        .expect("a running containerd container")
        .to_owned()
}

/// How often the pod's container was restarted.
fn restarts(pod: &Pod) -> i32 {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|c| c.first())
        .map_or(0, |c| c.restart_count)
}

/// SIGKILLs container `id` through containerd, as the kernel's OOM killer would.
fn kill_container(socket: &str, id: &str) {
    let status = std::process::Command::new("ctr")
        .args([
            "--address",
            socket,
            "--namespace",
            "k8s.io",
            "tasks",
            "kill",
            "--signal",
            "SIGKILL",
            id,
        ])
        .status()
        .expect("run ctr");
    assert!(status.success(), "ctr tasks kill {id}: {status}");
}

/// POSTs to `path` on port 8080 of pod `name`, through the API server's pod proxy.
async fn pod_post(client: &kube::Client, ns: &str, name: &str, path: &str) {
    let url = format!("/api/v1/namespaces/{ns}/pods/{name}:8080/proxy{path}");
    let request = http::Request::post(&url)
        .body(Vec::new())
        .expect("a request");
    client
        .request_text(request)
        .await
        .unwrap_or_else(|error| panic!("POST {url}: {error}"));
}
