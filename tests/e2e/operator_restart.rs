//! Deleting the operator pod changes no leader (docs/design.md §2 rule 3): the Deployment starts a
//! new operator, which adopts the Consul session from the status and keeps renewing it; no
//! label, token or transition changes, and the session outlives 2 x TTL after the old
//! operator's last renewal.

use std::time::{Duration, Instant};

use consul_elector::consul::parse_go_duration;
use consul_elector::crd::{FENCING_TOKEN_ANNOTATION, LeaderElection, default_key};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::DeleteParams;
use testkit::recorder::WatchRecorder;

use crate::election::{ELECTION, REPLICAS, SELECTOR, web_elected};
use crate::harness::{self, PODS_READY, ROLE, is_ready, wait_for};

#[tokio::test]
#[ignore = "needs a kind cluster with the operator installed (make demo); run with ELECTOR_E2E=1"]
async fn deleting_the_operator_pod_changes_no_leader() {
    let Some(env) = harness::env("deleting_the_operator_pod_changes_no_leader").await else {
        return;
    };
    env.with_namespace("restart", |env, ns| async move {
        let (before, leader) = web_elected(&env, &ns).await;
        let election = env
            .api::<LeaderElection>(&ns)
            .get(ELECTION)
            .await
            .expect("the LeaderElection");
        let ttl = parse_go_duration(&election.spec.session.ttl).expect("a valid TTL");
        let recorder = WatchRecorder::start(env.client.clone(), &ns)
            .await
            .expect("the pod recorder starts");

        let operators = env.operator_pods().await;
        let old_uids: Vec<String> = operators.iter().filter_map(|p| p.uid()).collect();
        let operator_api = env.api::<Pod>(&env.operator_namespace);
        let deleted_at = Instant::now();
        for pod in &operators {
            operator_api
                .delete(&pod.name_any(), &DeleteParams::default())
                .await
                .expect("delete the operator pod");
        }
        let replacement = wait_for("a new operator pod is Ready", PODS_READY, || {
            let env = &env;
            let old_uids = &old_uids;
            async move {
                env.operator_pods().await.into_iter().find(|p| {
                    p.uid().is_some_and(|uid| !old_uids.contains(&uid))
                        && is_ready(p)
                        && p.metadata.deletion_timestamp.is_none()
                })
            }
        })
        .await;
        println!(
            "operator {} replaced by {} after {:?}",
            operators[0].name_any(),
            replacement.name_any(),
            deleted_at.elapsed()
        );

        // Past 2 x TTL after the deletion (and so after the old operator's last renewal) a
        // session nobody adopted would be gone and its lock with it.
        let settle = deleted_at + 2 * ttl + Duration::from_secs(10);
        tokio::time::sleep_until(settle.into()).await;

        let (after, still) = env.elected(&ns, ELECTION, SELECTOR, REPLICAS).await;
        assert_eq!(still.name_any(), leader, "the leader changed");
        let (before_leader, after_leader) = (before.leader.unwrap(), after.leader.clone().unwrap());
        assert_eq!(after_leader.uid, before_leader.uid);
        assert_eq!(
            after_leader.session_id, before_leader.session_id,
            "a new session"
        );
        assert_eq!(
            after.fencing_token, before.fencing_token,
            "the token changed"
        );
        assert_eq!(
            after.transitions, before.transitions,
            "a transition happened"
        );
        let entry = env
            .consul_key(&default_key(&ns, ELECTION))
            .await
            .expect("the key exists");
        assert_eq!(
            entry.session, after_leader.session_id,
            "the lock is held by the same session"
        );

        // No pod's role label or token changed while the operator was replaced.
        for pod in env.live_pods(&ns, SELECTOR).await {
            let name = pod.name_any();
            let roles = recorder.label_history(&name, ROLE);
            assert_eq!(roles.len(), 1, "{name}'s role changed: {roles:?}");
            let tokens = recorder.annotation_history(&name, FENCING_TOKEN_ANNOTATION);
            assert_eq!(tokens.len(), 1, "{name}'s token changed: {tokens:?}");
        }
        recorder.assert_never_two(ROLE, harness::LEADER);
        recorder.stop().await;
    })
    .await;
}
