//! The ACL token never shows up in logs, `Debug` output or error messages, on success and on
//! every error path (403s, transport errors, retries); and the running operator never shows
//! its own token, a tenant's token or a wrong token in its logs, events, status or metrics.

// The integration tests' helpers (tests/it/), of which this binary uses a part.
#[allow(dead_code, unused_imports)]
#[path = "it/common/mod.rs"]
mod common;
#[allow(dead_code, unused_imports)]
#[path = "it/harness/mod.rs"]
mod harness;

use std::collections::HashMap;
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use consul_elector::consul::{
    ConsulAddress, ConsulClient, ConsulError, ConsulSettings, Overrides, QueryOptions,
    SessionRequest,
};
use testkit::consul::{AclPolicy, Endpoint, Fault, FaultAction};

const SECRET: &str = "7f3c9a2e-SECRET-b5d1-4e8a-9c6f-token";
const UNKNOWN_SECRET: &str = "0d1e2f3a-UNKNOWN-SECRET-token";

/// A `MakeWriter` appending every log line to a shared buffer.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<u8>>>);

impl Write for Capture {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Capture {
    type Writer = Capture;

    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

fn assert_clean(what: &str, text: &str) {
    assert!(!text.contains(SECRET), "{what} leaks the token: {text}");
    assert!(
        !text.contains(UNKNOWN_SECRET),
        "{what} leaks the token: {text}"
    );
}

fn assert_error_clean(error: &ConsulError) {
    assert_clean("error Display", &error.to_string());
    assert_clean("error Debug", &format!("{error:?}"));
}

#[tokio::test]
async fn the_token_never_leaks() {
    let capture = Capture::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(capture.clone())
        .with_max_level(tracing::Level::TRACE)
        .with_ansi(false)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let emu = common::emulator_with_tokens([(
        SECRET,
        AclPolicy {
            key_write: vec!["elector/".to_owned()],
            session_write: true,
            ..AclPolicy::default()
        },
    )])
    .await;

    let env: HashMap<&str, String> = HashMap::from([
        ("CONSUL_HTTP_ADDR", emu.url()),
        ("CONSUL_HTTP_TOKEN", SECRET.to_owned()),
        ("ELECTOR_CONSUL_RETRY_ATTEMPTS", "2".to_owned()),
        ("ELECTOR_CONSUL_RETRY_BASE_DELAY", "1ms".to_owned()),
    ]);
    let mut settings = ConsulSettings::from_env(|name| env.get(name).cloned()).unwrap();
    // An address the admin allowed, where nothing listens (for the connect error below).
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let nowhere_address =
        ConsulAddress::parse(&listener.local_addr().unwrap().to_string(), false).unwrap();
    drop(listener);
    settings.allowed_addresses = vec![nowhere_address.clone()];
    assert_clean("settings Debug", &format!("{settings:?}"));
    let consul = ConsulClient::new(&settings).unwrap();
    assert_clean("client Debug", &format!("{consul:?}"));

    // Success paths.
    let session = consul
        .create_session(&SessionRequest::new("leak").ttl(Duration::from_secs(15)))
        .await
        .unwrap();
    assert!(
        consul
            .kv_acquire("elector/k", &session, b"v", 0)
            .await
            .unwrap()
    );
    consul
        .kv_get("elector/k", QueryOptions::default())
        .await
        .unwrap();
    consul.renew_session(&session).await.unwrap();

    // 403 Permission denied.
    let error = consul.kv_put("forbidden/k", b"v", 0).await.unwrap_err();
    assert!(
        matches!(error, ConsulError::PermissionDenied { .. }),
        "{error:?}"
    );
    assert_error_clean(&error);

    // 403 ACL not found, through an override handle.
    let stranger = common::with_token(&consul, UNKNOWN_SECRET);
    assert_clean("override Debug", &format!("{stranger:?}"));
    let error = stranger
        .kv_get("elector/k", QueryOptions::default())
        .await
        .unwrap_err();
    assert!(
        matches!(error, ConsulError::AclNotFound { .. }),
        "{error:?}"
    );
    assert_error_clean(&error);

    // A server (or proxy) that echoes the token in an error body.
    emu.add_fault(Fault::times(
        Endpoint::Kv,
        FaultAction::Respond {
            status: 500,
            body: format!("bad token {SECRET}"),
            retry_after: None,
        },
        1,
    ));
    let error = consul
        .kv_get("elector/k", QueryOptions::default())
        .await
        .unwrap_err();
    assert_eq!(error.category(), "unexpected");
    assert_error_clean(&error);

    // Retried errors (logged at warn) and a dropped connection.
    emu.add_fault(Fault::times(Endpoint::Kv, FaultAction::NoLeaderError, 1));
    consul
        .kv_get("elector/k", QueryOptions::default())
        .await
        .unwrap();
    emu.add_fault(Fault::always(Endpoint::Kv, FaultAction::DropConnection));
    let error = consul
        .kv_get("elector/k", QueryOptions::default())
        .await
        .unwrap_err();
    assert_eq!(error.category(), "transport");
    assert_error_clean(&error);
    emu.clear_faults();

    // A connect error.
    let nowhere = consul
        .with_overrides(Overrides {
            address: Some(nowhere_address),
            ..Overrides::default()
        })
        .unwrap();
    let error = nowhere.destroy_session(&session).await.unwrap_err();
    assert_eq!(error.category(), "transport");
    assert_error_clean(&error);

    let logs = String::from_utf8(capture.0.lock().unwrap().clone()).unwrap();
    assert!(
        logs.contains("retrying"),
        "the capture must see the client's logs: {logs}"
    );
    assert!(logs.contains("consul request"), "{logs}");
    assert_clean("logs", &logs);
}

/// The operator's own token, a tenant's (from an opted-in Secret) and a wrong one (from another
/// opted-in Secret, unknown to Consul), through elections that succeed and fail, with a Consul
/// that echoes tokens in its error bodies: none of them appears in the operator's logs, in
/// the namespace's events, in any election's status or in the metrics.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_running_operator_never_shows_a_token() {
    const OPERATOR: &str = "5b2e-OPERATOR-SECRET-token";
    const TENANT: &str = "8c4d-TENANT-SECRET-token";
    const WRONG: &str = "1a9f-WRONG-SECRET-token";
    let capture = Capture::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(capture.clone())
        .with_env_filter("consul_elector=trace")
        .with_ansi(false)
        .finish();
    // Global: the operator's tasks run on the runtime's worker threads. The harness's own
    // subscriber then stays uninstalled.
    tracing::subscriber::set_global_default(subscriber).expect("no other global subscriber");
    let leaks = |what: &str, text: &str| {
        for token in [OPERATOR, TENANT, WRONG] {
            assert!(!text.contains(token), "{what} shows a token: {text}");
        }
    };

    testkit::cluster::with_namespace("leak", |admin, ns| async move {
        let tenant_consul = common::emulator_with_tokens([(
            TENANT,
            AclPolicy {
                key_write: vec!["elector/".to_owned()],
                session_write: true,
                ..AclPolicy::default()
            },
        )])
        .await;
        let mut h = harness::Harness::with_options(
            admin,
            ns,
            harness::HarnessOptions {
                secret_access: true,
                operator_consul: harness::OperatorConsul {
                    token: Some(OPERATOR.to_owned()),
                    allowed_addresses: vec![tenant_consul.url()],
                    ..harness::OperatorConsul::default()
                },
                ..harness::HarnessOptions::default()
            },
        )
        .await;
        // Both Consuls echo the token of a few requests in their error bodies.
        for emu in [h.emu(), &tenant_consul] {
            for endpoint in [Endpoint::Kv, Endpoint::SessionCreate] {
                emu.add_fault(Fault::times(
                    endpoint,
                    FaultAction::EchoToken { status: 500 },
                    4,
                ));
            }
        }
        for (name, token) in [("tenant", TENANT), ("wrong", WRONG)] {
            h.token_secret(name, token, "*").await;
        }
        h.deployment("web", 2).await;
        h.start_operator().await;
        let spec = |label: &str, secret: Option<&str>| {
            let mut spec = serde_json::json!({
                "selector": {"matchLabels": {"app": "web"}},
                "labels": {"key": label},
            });
            if let Some(secret) = secret {
                spec["consul"] = serde_json::json!({
                    "address": tenant_consul.url(),
                    "tokenSecretRef": {"name": secret, "key": "token"},
                });
            }
            spec
        };
        h.election("own", spec("example.com/own", None)).await;
        h.election("tenant", spec("example.com/tenant", Some("tenant")))
            .await;
        h.election("wrong", spec("example.com/wrong", Some("wrong")))
            .await;
        for name in ["own", "tenant"] {
            h.wait_status(name, |le| harness::status_leader(le).is_some())
                .await;
        }
        // The wrong token is refused by Consul: the election reports it without the token.
        h.wait_status("wrong", |le| {
            harness::condition(le, "ConsulAvailable").is_some_and(|c| c.status == "False")
        })
        .await;
        assert!(
            tenant_consul.stats().requests_with_token(WRONG) > 0,
            "the wrong token was tried"
        );

        let elections = h.elections().list(&Default::default()).await.expect("list");
        leaks(
            "status",
            &serde_json::to_string(&elections.items).expect("serialize"),
        );
        // Events are published after the status they report: wait for one before listing.
        h.wait_event("own", "LeaderElected").await;
        let events: kube::Api<k8s_openapi::api::events::v1::Event> =
            kube::Api::namespaced(h.admin.clone(), &h.ns);
        let events = events.list(&Default::default()).await.expect("events");
        assert!(!events.items.is_empty());
        leaks(
            "events",
            &serde_json::to_string(&events.items).expect("serialize"),
        );
        leaks("metrics", &h.operator().metrics.encode());
        h.finish().await;
    })
    .await;
    let logs = String::from_utf8(capture.0.lock().unwrap().clone()).unwrap();
    assert!(
        logs.contains("denied token"),
        "the capture sees the operator's errors with the echoing bodies: {logs}"
    );
    leaks("logs", &logs);
}
