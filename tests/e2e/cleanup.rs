//! Deleting a LeaderElection removes the operator's labels and annotations from every pod,
//! releases the Consul key and destroys the session (docs/design.md §2 rule 7).

use consul_elector::crd::{LeaderElection, default_key};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::DeleteParams;

use crate::election::{ELECTION, REPLICAS, SELECTOR, web_elected};
use crate::harness::{self, CONVERGE, operator_marks, wait_for};

#[tokio::test]
#[ignore = "needs a kind cluster with the operator installed (make demo); run with ELECTOR_E2E=1"]
async fn deleting_the_election_cleans_labels_and_the_consul_key() {
    let Some(env) = harness::env("deleting_the_election_cleans_labels_and_the_consul_key").await
    else {
        return;
    };
    env.with_namespace("cleanup", |env, ns| async move {
        let (status, leader) = web_elected(&env, &ns).await;
        let session = status
            .leader
            .and_then(|l| l.session_id)
            .expect("the leader's session in the status");
        let key = default_key(&ns, ELECTION);
        assert_eq!(
            env.consul_key(&key)
                .await
                .and_then(|k| k.session)
                .as_deref(),
            Some(session.as_str()),
            "before: the key is held by the leader's session"
        );

        let elections = env.api::<LeaderElection>(&ns);
        elections
            .delete(ELECTION, &DeleteParams::default())
            .await
            .expect("delete the LeaderElection");
        // The finalizer (elector.dev/cleanup) holds the object until the cleanup is done.
        wait_for("the LeaderElection is gone", CONVERGE, || {
            let elections = &elections;
            async move {
                match elections.get_opt(ELECTION).await {
                    Ok(None) => Some(()),
                    Ok(Some(_)) => None,
                    Err(error) => panic!("get LeaderElection: {error}"),
                }
            }
        })
        .await;

        // No pod keeps any label or annotation of the operator; the pods themselves stay.
        let pods = env.live_pods(&ns, SELECTOR).await;
        assert_eq!(pods.len(), REPLICAS);
        for pod in &pods {
            assert!(
                operator_marks(pod).is_empty(),
                "{} still has {:?}",
                pod.name_any(),
                operator_marks(pod)
            );
        }
        let still_there: Pod = env
            .api::<Pod>(&ns)
            .get(&leader)
            .await
            .expect("the old leader pod");
        assert!(operator_marks(&still_there).is_empty());

        // Consul: the lock is released (the key, if it is kept, is not held) and the session
        // destroyed.
        match env.consul_key(&key).await {
            None => println!("the key {key} is gone"),
            Some(entry) => assert_eq!(entry.session, None, "the key is still locked: {entry:?}"),
        }
        assert!(
            !env.consul_session_exists(&session).await,
            "session {session} still exists"
        );
    })
    .await;
}
