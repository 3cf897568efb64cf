//! Consul's own faults on a real Consul (`CONSUL_BIN`; skipped visibly without it): ACL tokens
//! lacking a right, and (in a three-server cluster) the Raft leader killed, the agent the
//! operator talks to restarted, and the whole cluster stopped and started. Every test ends
//! with the history check of [`Harness::finish`] (never two leader labels).

mod harness;

use std::time::{Duration, Instant};

use harness::{
    ConsulUnderTest, Harness, HarnessOptions, OperatorConsul, ROLE, condition, with_role,
};
use serde_json::json;
use testkit::cluster::with_namespace;
use testkit::real_consul::{AclRules, Options, Shape};

/// Bound for waits that include a TTL and its consequences.
const TTL_BOUND: Duration = Duration::from_secs(45);

fn selecting(app: &str) -> serde_json::Value {
    json!({"selector": {"matchLabels": {"app": app}}, "session": {"ttl": "10s", "lockDelay": "1s"}})
}

/// The operator's token holds `rules` only; a second election with a token of its own (all
/// rights) shows that nothing else breaks. The refused election reports `ConsulAvailable`
/// false naming `right`, publishes one `ConsulRefused` event, labels nobody, and does not
/// retry in a tight loop.
async fn a_token_lacking_a_right(prefix: &str, rules: &str, right: &str) {
    let Some(consul) = ConsulUnderTest::real(Shape::Dev, Options { acl: true }).await else {
        return;
    };
    let real = consul.real_consul();
    let lacking = real
        .create_token("operator", &AclRules(rules.into()))
        .await
        .expect("token");
    let full = real
        .create_token("tenant", &AclRules::operator())
        .await
        .expect("token");
    with_namespace(prefix, |admin, ns| async move {
        let options = HarnessOptions {
            operator_consul: OperatorConsul {
                token: Some(lacking),
                ..OperatorConsul::default()
            },
            secret_access: true,
            ..HarnessOptions::default()
        };
        let mut h = Harness::with_consul(admin, ns, options, consul).await;
        h.deployment("web", 2).await;
        h.deployment("api", 2).await;
        h.token_secret("tenant-token", &full, "api").await;
        h.start_operator().await;
        h.election("web", selecting("web")).await;
        let mut api = selecting("api");
        api["consul"] = json!({"tokenSecretRef": {"name": "tenant-token", "key": "token"}});
        h.election("api", api).await;

        let refused = h
            .wait_status("web", |le| {
                condition(le, "ConsulAvailable").is_some_and(|c| {
                    c.status == "False" && c.reason == "PermissionDenied"
                })
            })
            .await;
        let message = condition(&refused, "ConsulAvailable")
            .map(|c| c.message)
            .unwrap_or_default();
        assert!(message.contains(right), "{message}");
        let notes = h.wait_event("web", "ConsulRefused").await;
        assert!(notes.iter().any(|n| n.contains(right)), "{notes:?}");
        h.wait_elected("api", None).await;

        // No tight loop: over 10 s the refused election is tried again at most twice.
        let before = h.reconciles();
        let window = Instant::now();
        tokio::time::sleep(Duration::from_secs(10)).await;
        let during = h.reconciles() - before;
        assert!(
            during <= 3,
            "{during} reconciles in {:?} while Consul refuses",
            window.elapsed()
        );
        let (refusals, _) = h.events("web", "ConsulRefused").await;
        assert_eq!(refusals, 1, "one event for one refusal");
        let pods = h.current();
        let web_leaders: Vec<String> = with_role(&pods, "leader")
            .into_iter()
            .filter(|p| p.starts_with("web-"))
            .collect();
        assert!(web_leaders.is_empty(), "{web_leaders:?}");
        assert!(
            h.recorder
                .versions()
                .iter()
                .filter(|v| v.name.starts_with("web-"))
                .all(|v| v.labels.get(ROLE).map(String::as_str) != Some("leader")),
            "no web pod was ever labelled leader"
        );
        h.finish().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_without_session_write_is_reported_and_breaks_nothing_else() {
    a_token_lacking_a_right(
        "acl-session",
        r#"key "elector/" { policy = "write" }"#,
        "session:write",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_without_key_write_is_reported_and_breaks_nothing_else() {
    a_token_lacking_a_right(
        "acl-key",
        r#"key "elector/" { policy = "read" }
session "" { policy = "write" }"#,
        "key:write",
    )
    .await;
}
