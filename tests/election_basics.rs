//! The operator end to end on the test cluster: first election, and failover when the leader
//! is deleted (explicit release, no lock-delay).

mod harness;

use std::time::{Duration, Instant};

use harness::{Harness, pods_with_role};
use serde_json::json;
use testkit::cluster::with_namespace;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elects_a_leader_and_fails_over_when_it_is_deleted() {
    with_namespace("basics", |admin, ns| async move {
        let mut h = Harness::new(admin, ns).await;
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
        let entry = h
            .emu
            .kv_entry(&format!("elector/{}/web/leader", h.ns))
            .expect("key");
        assert_eq!(entry.lock_index, token);
        assert_eq!(
            Some(entry.session.clone().expect("held")),
            status.leader.as_ref().and_then(|l| l.session_id.clone())
        );

        let started = Instant::now();
        h.pods()
            .delete(&first, &Default::default())
            .await
            .expect("delete leader");
        let second = h.wait_leader(Some(&first)).await;
        eprintln!(
            "failover after deleting the leader: {:?}",
            started.elapsed()
        );
        assert_ne!(first, second);
        let le = h
            .wait_status("web", |le| {
                le.status
                    .as_ref()
                    .and_then(|s| s.leader.as_ref())
                    .is_some_and(|l| l.pod == second)
            })
            .await;
        let status = le.status.expect("status");
        assert!(status.fencing_token.expect("token") > token, "token grows");
        assert_eq!(status.transitions, 1);
        // An explicit release leaves no lock-delay behind.
        assert_eq!(
            h.emu
                .lock_delay_until(&format!("elector/{}/web/leader", h.ns)),
            None
        );
        let _ = Duration::ZERO;
        h.finish().await;
    })
    .await;
}
