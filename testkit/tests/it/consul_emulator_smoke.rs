//! Smoke tests of the Consul emulator over real HTTP: sessions, locks, blocking queries,
//! virtual-time TTL expiry, fault injection and stats. Synchronisation goes through
//! `wait_for_blocked_queries` and `advance`, never through sleeps.

use std::net::SocketAddr;
use std::time::Duration;

use serde_json::Value;
use testkit::consul::{ClockMode, Emulator, EmulatorConfig, Endpoint, Fault, FaultAction};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

/// A raw HTTP/1.1 answer.
#[derive(Debug)]
struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    fn index(&self) -> u64 {
        self.header("X-Consul-Index")
            .and_then(|v| v.parse().ok())
            .expect("X-Consul-Index")
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).expect("JSON body")
    }
}

/// Sends one request on a fresh connection (`Connection: close`); `None` when the server
/// closed the connection without answering.
async fn send(addr: SocketAddr, method: &str, path: &str, body: &[u8]) -> Option<Reply> {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: consul\r\nConnection: close\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.expect("write head");
    stream.write_all(body).await.expect("write body");
    let mut raw = Vec::new();
    // A reset counts as "no answer" too.
    let _ = stream.read_to_end(&mut raw).await;
    if raw.is_empty() {
        return None;
    }
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("end of headers");
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .expect("status line");
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    Some(Reply {
        status,
        headers,
        body: raw[split + 4..].to_vec(),
    })
}

async fn req(emu: &Emulator, method: &str, path: &str, body: &[u8]) -> Reply {
    send(emu.addr(), method, path, body)
        .await
        .unwrap_or_else(|| panic!("{method} {path}: no answer"))
}

async fn start() -> Emulator {
    Emulator::start(EmulatorConfig {
        jitter: false,
        ..EmulatorConfig::default()
    })
    .await
    .expect("start")
}

async fn create_session(emu: &Emulator, body: &str) -> String {
    let r = req(emu, "PUT", "/v1/session/create", body.as_bytes()).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.header("X-Consul-Index").is_none());
    r.json()["ID"].as_str().expect("ID").to_string()
}

#[tokio::test]
async fn session_create_acquire_and_read() {
    let emu = start().await;
    assert!(emu.url().starts_with("http://127.0.0.1:"));
    let sid = create_session(&emu, "").await;
    assert_eq!(sid.len(), 36);

    let info = req(&emu, "GET", &format!("/v1/session/info/{sid}"), b"").await;
    assert_eq!(info.status, 200);
    let s = emu.session(&sid).expect("session");
    assert_eq!(
        info.text(),
        format!(
            r#"[{{"ID":"{sid}","Name":"","Node":"node1","LockDelay":15000000000,"Behavior":"release","TTL":"","NodeChecks":["serfHealth"],"ServiceChecks":null,"CreateIndex":{i},"ModifyIndex":{i}}}]"#,
            i = s.create_index
        )
    );
    assert_eq!(info.index(), s.create_index);
    assert_eq!(info.header("X-Consul-Default-ACL-Policy"), Some("allow"));

    let r = req(
        &emu,
        "PUT",
        &format!("/v1/kv/svc/leader?acquire={sid}"),
        b"v1",
    )
    .await;
    assert_eq!((r.status, r.text().as_str()), (200, "true"));
    let r = req(&emu, "GET", "/v1/kv/svc/leader", b"").await;
    let entry = &r.json()[0];
    assert_eq!(entry["LockIndex"], 1);
    assert_eq!(entry["Session"], sid.as_str());
    assert_eq!(entry["Value"], "djE=");
    assert_eq!(
        r.index(),
        entry["ModifyIndex"].as_u64().expect("ModifyIndex")
    );
    assert_eq!(r.header("X-Consul-KnownLeader"), Some("true"));
    assert_eq!(r.header("X-Consul-LastContact"), Some("0"));

    let missing = req(&emu, "GET", "/v1/kv/absent", b"").await;
    assert_eq!(missing.status, 404);
    assert!(missing.body.is_empty());
    assert!(missing.index() >= 1);

    let wrong = req(&emu, "GET", &format!("/v1/session/renew/{sid}"), b"").await;
    assert_eq!(
        (wrong.status, wrong.text().as_str()),
        (405, "method GET not allowed")
    );
    assert_eq!(wrong.header("Allow"), Some("OPTIONS,PUT"));
    emu.shutdown().await;
}

#[tokio::test]
async fn blocking_get_is_woken_by_a_write_and_times_out_on_virtual_time() {
    let emu = start().await;
    let r = req(&emu, "PUT", "/v1/kv/k", b"a").await;
    assert_eq!(r.status, 200);
    let index = req(&emu, "GET", "/v1/kv/k", b"").await.index();

    let addr = emu.addr();
    let path = format!("/v1/kv/k?index={index}&wait=60s");
    let blocked = tokio::spawn(async move { send(addr, "GET", &path, b"").await });
    emu.wait_for_blocked_queries(1).await;
    // A write to another key does not wake it.
    req(&emu, "PUT", "/v1/kv/other", b"x").await;
    assert_eq!(emu.blocked_queries().await, 1);
    req(&emu, "PUT", "/v1/kv/k", b"b").await;
    let woken = blocked.await.expect("task").expect("answer");
    assert_eq!(woken.status, 200);
    assert!(woken.index() > index);
    assert_eq!(woken.json()[0]["Value"], "Yg==");

    // No write: the query answers at its (virtual) timeout with the same index.
    let index = woken.index();
    let path = format!("/v1/kv/k?index={index}&wait=1s");
    let blocked = tokio::spawn(async move { send(addr, "GET", &path, b"").await });
    emu.wait_for_blocked_queries(1).await;
    emu.advance(Duration::from_millis(999)).await;
    assert_eq!(emu.blocked_queries().await, 1);
    emu.advance(Duration::from_millis(1)).await;
    assert_eq!(emu.blocked_queries().await, 0);
    let timed_out = blocked.await.expect("task").expect("answer");
    assert_eq!((timed_out.status, timed_out.index()), (200, index));
    emu.shutdown().await;
}

#[tokio::test]
async fn advance_expires_a_ttl_session_and_starts_its_lock_delay() {
    let emu = start().await;
    let sid = create_session(&emu, r#"{"TTL":"10s","NodeChecks":[]}"#).await;
    let r = req(&emu, "PUT", &format!("/v1/kv/k?acquire={sid}"), b"v").await;
    assert_eq!(r.text(), "true");
    let held = emu.kv_entry("k").expect("k");
    assert_eq!(
        emu.session(&sid).and_then(|s| s.deadline),
        Some(Duration::from_secs(20))
    );

    let addr = emu.addr();
    let path = format!("/v1/kv/k?index={}&wait=5m", held.modify_index);
    let watcher = tokio::spawn(async move { send(addr, "GET", &path, b"").await });
    emu.wait_for_blocked_queries(1).await;

    emu.advance(Duration::from_secs(20) - Duration::from_millis(100))
        .await;
    assert!(emu.session(&sid).is_some());
    assert_eq!(emu.blocked_queries().await, 1);
    emu.advance(Duration::from_millis(100)).await;
    assert!(emu.session(&sid).is_none());

    let released = watcher.await.expect("task").expect("answer");
    let entry = &released.json()[0];
    assert!(entry.get("Session").is_none());
    assert_eq!(entry["LockIndex"], 1);
    assert_eq!(entry["Value"], "dg==");
    assert!(released.index() > held.modify_index);
    assert_eq!(emu.lock_delay_until("k"), Some(Duration::from_secs(35)));

    let s2 = create_session(&emu, r#"{"NodeChecks":[]}"#).await;
    let r = req(&emu, "PUT", &format!("/v1/kv/k?acquire={s2}"), b"").await;
    assert_eq!(r.text(), "false");
    emu.advance(Duration::from_secs(15)).await;
    let r = req(&emu, "PUT", &format!("/v1/kv/k?acquire={s2}"), b"").await;
    assert_eq!(r.text(), "true");
    assert_eq!(emu.kv_entry("k").map(|e| e.lock_index), Some(2));
    emu.shutdown().await;
}

#[tokio::test]
async fn drop_connection_fault_and_stats() {
    let emu = start().await;
    let fault = emu.add_fault(Fault::times(Endpoint::Kv, FaultAction::DropConnection, 1));
    assert!(send(emu.addr(), "GET", "/v1/kv/k", b"").await.is_none());
    // Used up: the next request is served.
    assert_eq!(req(&emu, "GET", "/v1/kv/k", b"").await.status, 404);
    emu.remove_fault(fault);

    emu.add_fault(Fault::always(
        Endpoint::SessionRenew,
        FaultAction::Respond {
            status: 429,
            body: "rate limit exceeded".into(),
            retry_after: Some(3),
        },
    ));
    let r = req(&emu, "PUT", "/v1/session/renew/x", b"").await;
    assert_eq!((r.status, r.text().as_str()), (429, "rate limit exceeded"));
    assert_eq!(r.header("Retry-After"), Some("3"));
    emu.clear_faults();
    let r = req(&emu, "PUT", "/v1/session/renew/x", b"").await;
    assert_eq!(
        (r.status, r.text().as_str()),
        (404, "Session id 'x' not found")
    );

    let stats = emu.stats();
    assert_eq!(stats.requests_to("kv.get"), 2);
    assert_eq!(stats.requests_to("session.renew"), 2);
    assert_eq!(stats.total_requests(), 4);
    assert_eq!(stats.connections_total, 4);
    assert_eq!(stats.in_flight_total_max, 1);
    emu.reset_stats();
    assert_eq!(emu.stats().total_requests(), 0);

    emu.set_leader(false);
    let r = req(&emu, "PUT", "/v1/kv/k", b"x").await;
    assert_eq!((r.status, r.text().as_str()), (500, "No cluster leader"));
    let r = req(&emu, "GET", "/v1/kv/k?stale", b"").await;
    assert_eq!(r.status, 404);
    assert_eq!(r.header("X-Consul-KnownLeader"), Some("false"));
    let r = req(&emu, "GET", "/v1/status/leader", b"").await;
    assert_eq!(r.text(), "\"\"");
    emu.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn tokio_clock_reaper_expires_sessions_without_requests() {
    let emu = Emulator::start(EmulatorConfig {
        clock: ClockMode::Tokio,
        jitter: false,
        ..EmulatorConfig::default()
    })
    .await
    .expect("start");
    let sid = create_session(&emu, r#"{"TTL":"10s","NodeChecks":[]}"#).await;
    let r = req(&emu, "PUT", &format!("/v1/kv/k?acquire={sid}"), b"v").await;
    assert_eq!(r.text(), "true");
    let index = emu.kv_entry("k").expect("k").modify_index;
    // Paused time jumps to the next timer (the reaper's) while the query waits.
    let watched = req(
        &emu,
        "GET",
        &format!("/v1/kv/k?index={index}&wait=60s"),
        b"",
    )
    .await;
    assert!(watched.json()[0].get("Session").is_none());
    assert!(emu.now() >= Duration::from_secs(20));
    assert!(emu.now() < Duration::from_secs(60));
    emu.shutdown().await;
}

#[tokio::test]
async fn advance_applies_timeouts_and_expiries_in_time_order() {
    let emu = start().await;
    let sid = create_session(&emu, r#"{"TTL":"10s","NodeChecks":[]}"#).await;
    let r = req(&emu, "PUT", &format!("/v1/kv/k?acquire={sid}"), b"v").await;
    assert_eq!(r.text(), "true");
    let index = emu.kv_entry("k").expect("k").modify_index;
    let addr = emu.addr();
    let path = format!("/v1/kv/k?index={index}&wait=10s");
    let early = tokio::spawn(async move { send(addr, "GET", &path, b"").await });
    emu.wait_for_blocked_queries(1).await;
    // One advance past both instants: the query times out at 10s, before the expiry at
    // 20s, so it answers with the entry still held.
    emu.advance(Duration::from_secs(30)).await;
    let answer = early.await.expect("task").expect("answer");
    assert_eq!(answer.index(), index);
    assert_eq!(answer.json()[0]["Session"], sid.as_str());
    assert!(emu.session(&sid).is_none());
    assert_eq!(emu.lock_delay_until("k"), Some(Duration::from_secs(35)));
    assert_eq!(emu.now(), Duration::from_secs(30));
    emu.shutdown().await;
}
