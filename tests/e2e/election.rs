//! An election happens, Consul holds the lock for the leader, and the leader Service reaches
//! the leader only.

use consul_elector::crd::default_key;
use kube::ResourceExt;

use crate::harness::{self, Env, IGNORE_REASON};

/// examples/web.yaml: Deployment `web` (3 replicas, app=web), LeaderElection `web`,
/// Services `web-leader` and `web-followers`.
pub const WEB: &str = "web.yaml";
pub const ELECTION: &str = "web";
pub const SELECTOR: &str = "app=web";
pub const REPLICAS: usize = 3;

/// Applies the web example into `ns` and waits for its election; returns the leader pod.
pub async fn web_elected(
    env: &Env,
    ns: &str,
) -> (consul_elector::crd::LeaderElectionStatus, String) {
    env.apply_example(WEB, ns).await;
    let (status, leader) = env.elected(ns, ELECTION, SELECTOR, REPLICAS).await;
    (status, leader.name_any())
}

#[tokio::test]
#[ignore = "needs a kind cluster with the operator installed (make demo); run with ELECTOR_E2E=1"]
async fn an_election_happens_and_consul_holds_the_lock_for_the_leader() {
    assert!(IGNORE_REASON.contains("ELECTOR_E2E=1"));
    let Some(env) = harness::env("an_election_happens").await else {
        return;
    };
    env.with_namespace("elect", |env, ns| async move {
        let started = std::time::Instant::now();
        let (status, leader) = web_elected(&env, &ns).await;
        println!(
            "elected {leader} (token {:?}) {:?} after applying the example (includes pod start-up)",
            status.fencing_token,
            started.elapsed()
        );
        let leader_status = status.leader.clone().expect("a leader");
        // Pods turn ready one by one, and the status follows them: the leader can be elected
        // before the last candidate's readiness reaches the status.
        let status = harness::wait_for(
            &format!("{ELECTION}: {REPLICAS} eligible candidates in the status"),
            harness::CONVERGE,
            || async {
                let status = env.status(&ns, ELECTION).await;
                (status.candidates.len() == REPLICAS
                    && status.candidates.iter().all(|c| c.eligible))
                .then_some(status)
            },
        )
        .await;
        assert_eq!(status.leader.as_ref(), Some(&leader_status), "{status:?}");

        // The Consul key names the leader and is held by the session in the status.
        let key = default_key(&ns, ELECTION);
        let entry = env
            .consul_key(&key)
            .await
            .unwrap_or_else(|| panic!("Consul has no key {key}"));
        assert_eq!(entry.value["pod"], leader.as_str(), "{entry:?}");
        assert_eq!(entry.value["namespace"], ns.as_str(), "{entry:?}");
        assert_eq!(entry.value["uid"], leader_status.uid.as_str(), "{entry:?}");
        assert_eq!(entry.session, leader_status.session_id, "{entry:?}");
        // The fencing token is the lock's LockIndex.
        assert_eq!(Some(entry.lock_index), status.fencing_token, "{entry:?}");
        let session = entry.session.expect("the key is locked");
        assert!(env.consul_session_exists(&session).await);
    })
    .await;
}

#[tokio::test]
#[ignore = "needs a kind cluster with the operator installed (make demo); run with ELECTOR_E2E=1"]
async fn the_leader_service_routes_only_to_the_leader() {
    let Some(env) = harness::env("the_leader_service_routes_only_to_the_leader").await else {
        return;
    };
    env.with_namespace("service", |env, ns| async move {
        let (_, leader) = web_elected(&env, &ns).await;
        env.wait_endpoints(&ns, "web-leader", &[&leader]).await;
        let followers: Vec<String> = env
            .live_pods(&ns, SELECTOR)
            .await
            .iter()
            .map(|p| p.name_any())
            .filter(|name| name != &leader)
            .collect();
        assert_eq!(followers.len(), REPLICAS - 1);
        let followers: Vec<&str> = followers.iter().map(String::as_str).collect();
        env.wait_endpoints(&ns, "web-followers", &followers).await;
        println!("web-leader -> {leader}; web-followers -> {followers:?}");
    })
    .await;
}
