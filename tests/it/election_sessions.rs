//! The operator's Consul sessions as the server stores them, on the emulator and on a real
//! Consul (`CONSUL_BIN`): TTL-only, bound to no health check on any supported version.

use crate::harness;

use harness::{Backend, ConsulUnderTest, Harness, condition};
use serde_json::json;
use testkit::cluster::with_namespace;

fn web() -> serde_json::Value {
    json!({"selector": {"matchLabels": {"app": "web"}}, "session": {"ttl": "15s"}})
}

/// Reads the leader's session back: a TTL and no checks at all. Consul binds a session that
/// names no checks to the agent's `serfHealth`, which would tie the lock to the health of the
/// agent's node rather than to the operator's renewals; the check list is `NodeChecks` from
/// Consul 1.7 on and `Checks` before.
async fn sessions_are_check_less(backend: Backend) {
    let Some(consul) = ConsulUnderTest::start(backend).await else {
        return;
    };
    with_namespace("sess-checks", |admin, ns| async move {
        let (h, first) = Harness::web_elected_on(admin, ns, consul, web()).await;
        let reply = h
            .consul("GET", &format!("/v1/session/info/{}", first.session), "")
            .await;
        assert_eq!(reply.status, 200, "{}", reply.body);
        let session = &reply.json()[0];
        assert_eq!(session["TTL"], "15s", "{session}");
        for field in ["NodeChecks", "Checks", "ServiceChecks"] {
            let checks = &session[field];
            assert!(
                checks.is_null() || checks.as_array().is_some_and(Vec::is_empty),
                "the session is bound to {field} {checks}: {session}"
            );
        }
        h.finish().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_are_check_less_on_the_emulator() {
    sessions_are_check_less(Backend::Emulator).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_are_check_less_on_a_real_consul() {
    sessions_are_check_less(Backend::RealConsul).await;
}

/// A session an outsider creates for the first of `h`'s pods (by name), named as the
/// operator names its own and with a TTL of 3600 s: the pod's name and UID, and the session.
async fn impostor_session(h: &Harness) -> (String, String, String) {
    let mut pods: Vec<(String, String)> = h
        .pods()
        .list(&Default::default())
        .await
        .expect("list pods")
        .items
        .into_iter()
        .filter_map(|p| Some((p.metadata.name?, p.metadata.uid?)))
        .collect();
    pods.sort();
    let (pod, uid) = pods.swap_remove(0);
    let name = format!(
        "consul-elector/{}/{}/{}/web/{pod}",
        h.cluster_name(),
        h.install(),
        h.ns
    );
    let body = json!({"Name": name, "TTL": "3600s", "LockDelay": "0s"}).to_string();
    let reply = h.consul("PUT", "/v1/session/create", &body).await;
    assert_eq!(reply.status, 200, "session create: {}", reply.body);
    let impostor = reply.json()["ID"].as_str().expect("session ID").to_owned();
    (pod, uid, impostor)
}

/// Rule 3's adoption needs corroboration: a session anybody named like the operator's for a
/// leaderless election (an Observe-mode application has `session:write`), with a TTL of its
/// own choosing, is not adopted at a start, nor used to acquire the key; the operator elects
/// with a session of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_merely_named_like_the_operators_is_not_adopted() {
    with_namespace("sess-impostor", |admin, ns| async move {
        let mut h = Harness::new(admin, ns).await;
        h.deployment("web", 3).await;
        let (_, _, impostor) = impostor_session(&h).await;

        h.election("web", json!({"selector": {"matchLabels": {"app": "web"}}}))
            .await;
        h.start_operator().await;
        let elected = h.wait_elected("web", None).await;
        assert_ne!(
            elected.session, impostor,
            "the operator adopted a session anybody could have named so"
        );
        h.finish().await;
    })
    .await;
}

/// Rule 3's key witness is not enough by itself: an outsider with write access to the key can
/// hold it with a session named like the operator's and a value naming this install and a
/// pod. Such a session is adopted only when its settings are the ones the operator gives the
/// election's sessions; one with a TTL of the outsider's choosing is left alone, and the
/// status reports the key held elsewhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_holder_with_settings_the_operator_never_gives_is_not_adopted() {
    with_namespace("sess-settings", |admin, ns| async move {
        let mut h = Harness::new(admin, ns).await;
        h.deployment("web", 3).await;
        let (pod, uid, impostor) = impostor_session(&h).await;
        let value =
            json!({"pod": pod, "uid": uid, "cluster": h.cluster_name(), "install": h.install()});
        let path = format!("/v1/kv/{}?acquire={impostor}", h.key("web"));
        let reply = h.consul("PUT", &path, &value.to_string()).await;
        assert_eq!(reply.body.trim(), "true", "acquire: {}", reply.body);

        h.election("web", web()).await;
        h.start_operator().await;
        let le = h
            .wait_status("web", |le| {
                condition(le, "LeaderElected")
                    .is_some_and(|c| c.status == "True" || c.reason == "LockHeldElsewhere")
            })
            .await;
        let leader = le.status.as_ref().and_then(|s| s.leader.as_ref());
        assert_eq!(
            leader.and_then(|l| l.session_id.as_deref()),
            None,
            "the operator adopted a session with a TTL of 3600 s for an election whose TTL is 15 s"
        );
        h.finish().await;
    })
    .await;
}
