//! Several Kubernetes clusters on one Consul: the cluster name in the operator's session names
//! keeps every operator to its own sessions.
//!
//! Two clusters with an election of the same namespace and name share its default key. The
//! cluster that holds the key keeps its leader, label, token and session through restarts of
//! either operator; the other cluster labels no leader and its status names the holder. A
//! session named as an earlier version or another cluster would name it, holding the key, is
//! never adopted, renewed or released.

use crate::harness;

use std::time::Duration;

use consul_elector::crd::LeaderElection;
use harness::{Elected, Harness, HarnessOptions, ROLE, SOON, condition, phase, with_role};
use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube::api::{ObjectMeta, PostParams};
use serde_json::json;
use testkit::cluster::{ClusterOptions, TestCluster, with_namespace};

const CLUSTER_A: &str = "cluster-a";
const CLUSTER_B: &str = "cluster-b";
/// The session TTL of the elections here.
const TTL: Duration = Duration::from_secs(10);

fn spec() -> serde_json::Value {
    json!({
        "selector": {"matchLabels": {"app": "web"}},
        "session": {"ttl": "10s"},
    })
}

fn named(cluster: &str) -> HarnessOptions {
    HarnessOptions {
        cluster_name: cluster.into(),
        ..HarnessOptions::default()
    }
}

/// The name of the Consul session `id`.
fn session_name(h: &Harness, id: &str) -> String {
    h.emu().session(id).expect("the session exists").name
}

/// The key's value, as JSON.
fn key_value(h: &Harness, key: &str) -> serde_json::Value {
    let entry = h.emu().kv_entry(key).expect("the key exists");
    serde_json::from_slice(&entry.value).expect("the key's value is JSON")
}

/// Waits until the (re)started operator of `h` has reconciled, the election reports the key
/// held elsewhere with a message naming every one of `holder`, and every pod is a follower.
async fn wait_held_elsewhere(h: &Harness, holder: &[&str]) -> LeaderElection {
    h.wait_reconciled().await;
    let le = h
        .wait_status("web", |le| {
            phase(le).as_deref() == Some("Pending")
                && condition(le, "LeaderElected").is_some_and(|c| {
                    c.status == "False"
                        && c.reason == "LockHeldElsewhere"
                        && holder.iter().all(|part| c.message.contains(part))
                })
        })
        .await;
    let pods = h.current().len();
    h.wait_pods(SOON, "every pod a follower", |now| {
        with_role(now, "follower").len() == pods
    })
    .await;
    le
}

/// Asserts that `first`'s session still holds `key` at its token.
fn assert_holds(h: &Harness, key: &str, first: &Elected) {
    let entry = h.emu().kv_entry(key).expect("the key exists");
    assert_eq!(entry.session.as_deref(), Some(first.session.as_str()));
    assert_eq!(entry.lock_index, first.token);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_clusters_on_one_consul_never_take_each_others_lock() {
    with_namespace("clusters", |admin, ns| async move {
        let mut a = Harness::with_options(admin, ns.clone(), named(CLUSTER_A)).await;
        a.deployment("web", 2).await;
        a.start_operator().await;
        a.election("web", spec()).await;
        let first = a.wait_elected("web", None).await;
        let key = a.key("web");
        assert_eq!(
            session_name(&a, &first.session),
            format!(
                "consul-elector/{CLUSTER_A}/{ns}.consul-elector/{ns}/web/{}",
                first.pod
            )
        );
        assert_eq!(key_value(&a, &key)["cluster"], CLUSTER_A);
        assert_eq!(key_value(&a, &key)["pod"], first.pod.as_str());

        // Cluster B: its own apiserver, the same namespace and election, the same Consul.
        let second = tokio::task::spawn_blocking(|| {
            TestCluster::start(ClusterOptions {
                build_if_missing: false,
                ..ClusterOptions::default()
            })
        })
        .await
        .expect("start thread")
        .expect("second cluster");
        let admin_b = second.client().await;
        let namespace = Namespace {
            metadata: ObjectMeta {
                name: Some(ns.clone()),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        };
        Api::<Namespace>::all(admin_b.clone())
            .create(&PostParams::default(), &namespace)
            .await
            .expect("namespace in cluster B");
        let mut b = Harness::on_cluster(
            &second,
            admin_b,
            ns.clone(),
            a.consul.clone(),
            named(CLUSTER_B),
        )
        .await;
        b.deployment("web", 2).await;
        assert_eq!(b.key("web"), key, "the same default key");

        let before = a.histories();
        let holder = [first.session.as_str(), CLUSTER_A, first.pod.as_str()];
        b.start_operator().await;
        b.election("web", spec()).await;
        wait_held_elsewhere(&b, &holder).await;
        assert_holds(&a, &key, &first);

        for _ in 0..3 {
            b.kill_operator().await;
            b.start_operator().await;
            wait_held_elsewhere(&b, &holder).await;
            assert_holds(&a, &key, &first);

            a.kill_operator().await;
            let killed_at = a.emu().now();
            a.start_operator().await;
            a.wait_reconciled().await;
            assert_eq!(a.wait_elected("web", None).await, first);
            // The new process adopted the session: renewed after the crash, it outlives the
            // 2×TTL it had left (only a renewal moves its deadline past that).
            let renewed = a
                .wait_session(&first.session, |s| {
                    s.deadline.is_some_and(|d| d > killed_at + 2 * TTL)
                })
                .await;
            assert!(renewed, "cluster A's new operator renews its session");
            assert_holds(&a, &key, &first);
        }

        assert_eq!(
            a.histories(),
            before,
            "A's labels and annotations never changed"
        );
        for pod in b.current().keys() {
            let history = b.recorder.label_history(pod, ROLE);
            assert!(
                !history.contains(&Some("leader".to_owned())),
                "cluster B labelled {pod} leader: {history:?}"
            );
        }
        // Only cluster A's session exists: B never created one, nor destroyed A's.
        let expected = format!(
            "consul-elector/{CLUSTER_A}/{ns}.consul-elector/{ns}/web/{}",
            first.pod
        );
        assert_eq!(a.session_names().await, vec![expected]);
        assert_eq!(key_value(&a, &key)["cluster"], CLUSTER_A);

        b.finish().await;
        a.finish().await;
        drop(second);
    })
    .await;
}

/// An outside session named by `name(namespace, pod)` (with TTL, so that renewals would show)
/// holds the key with `value(namespace, pod, uid)` before the operator starts: the operator
/// never adopts, renews or releases it, makes every pod a follower and names the session in
/// its status; once the session lets go, it elects with a session of its own cluster.
async fn an_outside_session_is_left_alone(
    prefix: &str,
    name: fn(&str, &str) -> String,
    value: fn(&str, &str, &str) -> serde_json::Value,
) {
    with_namespace(prefix, |admin, ns| async move {
        let mut h = Harness::new(admin, ns.clone()).await;
        h.deployment("web", 2).await;
        let pod = h.current().keys().next().cloned().expect("a pod");
        let uid = h
            .pods()
            .get(&pod)
            .await
            .expect("get pod")
            .metadata
            .uid
            .expect("uid");
        let key = h.key("web");
        let body = json!({"Name": name(&ns, &pod), "TTL": "60s", "LockDelay": "0s"});
        let reply = h
            .consul("PUT", "/v1/session/create", &body.to_string())
            .await;
        assert_eq!(reply.status, 200, "session create: {}", reply.body);
        let outside = reply.json()["ID"].as_str().expect("ID").to_owned();
        let written = value(&ns, &pod, &uid).to_string();
        assert!(h.app_acquire(&key, &outside, &written).await);
        let deadline = h.emu().session(&outside).and_then(|s| s.deadline);
        h.emu().reset_stats();

        h.start_operator().await;
        h.election("web", spec()).await;
        wait_held_elsewhere(&h, &[outside.as_str(), pod.as_str()]).await;
        h.kill_operator().await;
        h.start_operator().await;
        wait_held_elsewhere(&h, &[outside.as_str(), pod.as_str()]).await;

        let stats = h.emu().stats();
        for endpoint in [
            "session.renew",
            "session.destroy",
            "session.create",
            "kv.put",
        ] {
            assert_eq!(stats.requests_to(endpoint), 0, "{endpoint}: {stats:?}");
        }
        assert_eq!(
            h.emu().session(&outside).and_then(|s| s.deadline),
            deadline,
            "never renewed"
        );
        let entry = h.emu().kv_entry(&key).expect("key");
        assert_eq!(entry.session.as_deref(), Some(outside.as_str()));
        assert_eq!(entry.value, written.as_bytes());

        // The outside session lets go: the operator elects with a session of its cluster.
        assert!(h.app_release(&key, &outside).await);
        let elected = h.wait_elected("web", None).await;
        assert_ne!(elected.session, outside);
        assert_eq!(
            session_name(&h, &elected.session),
            format!(
                "consul-elector/test-cluster/{ns}.consul-elector/{ns}/web/{}",
                elected.pod
            )
        );
        assert_eq!(key_value(&h, &key)["cluster"], "test-cluster");
        assert!(h.emu().session(&outside).is_some(), "never destroyed");
        h.finish().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_with_the_name_of_an_earlier_version_holding_the_key_is_not_adopted() {
    an_outside_session_is_left_alone(
        "clusters-legacy",
        |ns, pod| format!("consul-elector/{ns}/web/{pod}"),
        |ns, pod, uid| json!({"pod": pod, "namespace": ns, "uid": uid, "election": "web"}),
    )
    .await;
}

/// A session named as this cluster's operator named sessions before installs had names,
/// holding the key: anybody can create a session so named (an outside client, or another
/// install of an earlier version), so holding the key does not make it adoptable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_forged_with_this_clusters_name_holding_the_key_is_not_adopted() {
    an_outside_session_is_left_alone(
        "clusters-forged",
        |ns, pod| format!("consul-elector/test-cluster/{ns}/web/{pod}"),
        |ns, pod, uid| {
            json!({"pod": pod, "namespace": ns, "uid": uid, "election": "web", "cluster": "test-cluster"})
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_of_another_cluster_holding_the_key_is_not_adopted() {
    an_outside_session_is_left_alone(
        "clusters-other",
        |ns, pod| format!("consul-elector/other-cluster/{ns}/web/{pod}"),
        |ns, pod, uid| {
            json!({"pod": pod, "namespace": ns, "uid": uid, "election": "web", "cluster": "other-cluster"})
        },
    )
    .await;
}
