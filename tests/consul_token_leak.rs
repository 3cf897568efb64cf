//! The ACL token never shows up in logs, `Debug` output or error messages, on success and on
//! every error path (403s, transport errors, retries).

mod common;

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
        ("CONSUL_ELECTOR_RETRY_ATTEMPTS", "2".to_owned()),
        ("CONSUL_ELECTOR_RETRY_BASE_DELAY", "1ms".to_owned()),
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
