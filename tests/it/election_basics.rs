//! The operator end to end on the test cluster: first election, failover when the leader is
//! deleted (explicit release, no lock-delay), and elections in several watched namespaces.

use crate::harness;

use std::collections::BTreeMap;
use std::time::Instant;

use harness::{Backend, ConsulUnderTest, Harness, HarnessOptions, SOON, pods_with_role};
use serde_json::json;
use testkit::cluster::{TestCluster, with_namespace};
use testkit::kube_faults::{FaultAction, KubeFault, Verb};

/// The first election, then a failover when the leader pod is deleted: released
/// explicitly, the next token.
async fn elects_and_fails_over_on_deletion(backend: Backend) {
    let Some(consul) = ConsulUnderTest::start(backend).await else {
        return;
    };
    with_namespace("basics", |admin, ns| async move {
        let mut h = Harness::with_consul(admin, ns, HarnessOptions::default(), consul).await;
        h.deployment("web", 3).await;
        h.start_operator().await;
        h.election("web", json!({"selector": {"matchLabels": {"app": "web"}}}))
            .await;

        let first = h.wait_leader(None).await;
        let le = h
            .wait_status("web", |le| {
                le.status
                    .as_ref()
                    .and_then(|s| s.leader.as_ref())
                    .is_some_and(|l| l.pod == first)
            })
            .await;
        let status = le.status.expect("status");
        let token = status.fencing_token.expect("token");
        assert_eq!(pods_with_role(&h, "follower").await.len(), 2);
        let entry = h.key_lock(&h.key("web")).await.expect("key");
        assert_eq!(entry.lock_index, token);
        assert_eq!(
            Some(entry.session.clone().expect("held")),
            status.leader.as_ref().and_then(|l| l.session_id.clone())
        );
        let first = h.wait_elected("web", None).await;

        let started = Instant::now();
        h.pods()
            .delete(&first.pod, &Default::default())
            .await
            .expect("delete leader");
        let second = h.wait_elected("web", Some(&first.pod)).await;
        eprintln!(
            "{backend:?}: failover after deleting the leader: {:?}",
            started.elapsed()
        );
        assert_eq!(second.transitions, 1);
        h.assert_explicit_release("web", &first, &second).await;
        h.finish().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elects_a_leader_and_fails_over_when_it_is_deleted_on_the_emulator() {
    elects_and_fails_over_on_deletion(Backend::Emulator).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elects_a_leader_and_fails_over_when_it_is_deleted_on_a_real_consul() {
    elects_and_fails_over_on_deletion(Backend::RealConsul).await;
}

/// The API writes of one election's cold start, by resource: the finalizer, one label per
/// pod, and one status write (the fencing token must be in the status before any pod carries
/// it, and that write is already the status of the outcome); events come on top. Five in all
/// (docs/design.md section 5).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cold_start_writes_only_what_the_outcome_needs() {
    with_namespace("basics-writes", |admin, ns| async move {
        let (h, first) = Harness::web_elected(
            admin,
            ns,
            json!({"selector": {"matchLabels": {"app": "web"}}}),
        )
        .await;
        assert_eq!(pods_with_role(&h, "follower").await.len(), 2);
        // Two reconciles after convergence: anything the cold start still had queued has
        // run by then, and a converged election writes nothing more.
        h.touch_and_wait_reconcile("web").await;
        h.touch_and_wait_reconcile("web").await;
        let mut writes: BTreeMap<String, usize> = BTreeMap::new();
        for request in h.kube_faults.seen() {
            let writing = matches!(
                request.verb,
                Some(Verb::Create | Verb::Update | Verb::Patch | Verb::Delete)
            );
            let resource = request.resource.unwrap_or_default();
            if writing && resource != "leases" {
                *writes.entry(resource).or_default() += 1;
            }
        }
        let count = |resource: &str| writes.get(resource).copied().unwrap_or(0);
        assert_eq!(count("leaderelections"), 1, "the finalizer: {writes:?}");
        assert_eq!(
            count("leaderelections/status"),
            1,
            "the token with the outcome: {writes:?}"
        );
        assert_eq!(count("pods"), 3, "one label per pod: {writes:?}");
        assert!(count("events") <= 2, "LeaderElected: {writes:?}");
        assert_eq!(
            writes.values().sum::<usize>(),
            count("leaderelections")
                + count("leaderelections/status")
                + count("pods")
                + count("events"),
            "nothing else is written: {writes:?}"
        );
        let _ = first;
        h.finish().await;
    })
    .await;
}

/// One operator watching two namespaces elects in both, and a relist of one namespace's pods
/// (its watch expired: `410 Expired`) leaves the other namespace's pods in the operator's
/// cache: that namespace's leader, token and labels stay as they were.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relist_of_one_watched_namespace_keeps_the_others_leader() {
    with_namespace("scoped-a", |admin, ns_a| async move {
        with_namespace("scoped-b", |admin_b, ns_b| async move {
            let cluster = TestCluster::shared().expect("cluster (with_namespace checked)");
            let options = HarnessOptions {
                extra_watch_namespaces: vec![ns_b.clone()],
                ..HarnessOptions::default()
            };
            let mut a = Harness::with_options(admin, ns_a, options).await;
            let b = Harness::on_cluster(
                cluster,
                admin_b,
                ns_b.clone(),
                a.consul.clone(),
                HarnessOptions::default(),
            )
            .await;
            a.deployment("web", 3).await;
            b.deployment("web", 3).await;
            // The operator's watch of b's pods expires at its first pod change: b relists.
            a.kube_faults.add(
                KubeFault::new(FaultAction::ExpireWatch { after_events: 1 })
                    .resource("pods")
                    .namespace(ns_b.clone())
                    .times(1),
            );
            let spec = json!({"selector": {"matchLabels": {"app": "web"}}});
            a.start_operator().await;
            a.election("web", spec.clone()).await;
            let first = a.wait_elected("web", None).await;
            let before = a.histories();

            b.election("web", spec).await;
            b.wait_elected("web", None).await;
            let pod_watches_of_b = || {
                a.kube_faults
                    .seen()
                    .iter()
                    .filter(|r| {
                        r.verb == Some(Verb::Watch)
                            && r.resource.as_deref() == Some("pods")
                            && r.namespace.as_deref() == Some(ns_b.as_str())
                    })
                    .count()
            };
            // A watch after the expired one starts only once the relist is in the cache.
            let relisted = a.poll_until(SOON, || pod_watches_of_b() >= 2).await;
            assert!(relisted, "b's pods were relisted and watched again");
            assert_eq!(a.kube_faults.injected().len(), 1, "the watch expired once");

            a.touch_and_wait_reconcile("web").await;
            assert_eq!(a.wait_elected("web", None).await, first);
            assert_eq!(
                a.histories(),
                before,
                "a's labels and annotations never changed"
            );
            b.finish().await;
            a.finish().await;
        })
        .await;
    })
    .await;
}
