//! Rotated Consul credentials on a real Consul (`CONSUL_BIN`; skipped visibly without it, a
//! failure with `CI=true`), while the operator holds a lock, with no leader change: its token
//! file (a broken file keeps the working token), and its TLS client certificate and CA bundle
//! on an HTTPS Consul that requires client certificates (tests/it/consul_credentials.rs covers
//! the TLS edge cases against small TLS servers). Every test ends with the history check of
//! [`Harness::finish`] (never two leader labels) and checks that no label or fencing token
//! changed.

use crate::harness;
use crate::pki;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use harness::{ConsulUnderTest, Elected, Harness, HarnessOptions, OperatorConsul};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use serde_json::json;
use testkit::cluster::with_namespace;
use testkit::real_consul::{AclRules, Options, Shape, Tls};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use pki::{Ca, Issued, SecretVolume, write_atomically, write_pair};

/// The session TTL of the tests' elections: the operator renews about twice per TTL, and
/// Consul drops a session that was not renewed for twice its TTL.
const TTL: Duration = Duration::from_secs(10);

fn web() -> serde_json::Value {
    json!({"selector": {"matchLabels": {"app": "web"}}, "session": {"ttl": "10s", "lockDelay": "1s"}})
}

/// A directory for one test's files, removed at the end.
struct Dir(PathBuf);

impl Dir {
    fn new(name: &str) -> Dir {
        let dir = std::env::temp_dir().join(format!("elector-cred-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Dir(dir)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// For `window` (which covers several renewals), checks every second that the key is still
/// held by the first session and that no pod's label or annotation changed; then that Consul
/// still has the session (it drops one not renewed for twice its TTL).
async fn holds_without_change(h: &Harness, first: &Elected, window: Duration) {
    let before = h.histories();
    let end = Instant::now() + window;
    while Instant::now() < end {
        let reply = h
            .consul("GET", &format!("/v1/kv/{}", h.key("web")), "")
            .await;
        assert_eq!(reply.status, 200, "{}", reply.body);
        let key = &reply.json()[0];
        assert_eq!(key["Session"], first.session.as_str(), "{key}");
        assert_eq!(key["LockIndex"], first.token, "{key}");
        assert_eq!(h.histories(), before, "a label or annotation changed");
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let reply = h
        .consul("GET", &format!("/v1/session/info/{}", first.session), "")
        .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(
        reply.json()[0]["ID"],
        first.session.as_str(),
        "{}",
        reply.body
    );
    let status = h.status("web").await;
    assert_eq!(status.fencing_token, Some(first.token));
}

/// The value of the operator's credential reload counter for `credential` and `result`.
fn reloads(h: &Harness, credential: &str, result: &str) -> u64 {
    let series = format!(
        "consul_elector_consul_credential_reloads_total{{credential=\"{credential}\",result=\"{result}\"}} "
    );
    h.operator()
        .metrics
        .encode()
        .lines()
        .find_map(|line| line.strip_prefix(&series))
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_token_file_keeps_the_lock_without_a_leader_change() {
    let Some(consul) = ConsulUnderTest::real(
        Shape::Dev,
        Options {
            acl: true,
            ..Options::default()
        },
    )
    .await
    else {
        return;
    };
    let real = consul.real_consul();
    let token_a = real
        .create_token("operator-a", &AclRules::operator())
        .await
        .unwrap();
    let token_b = real
        .create_token("operator-b", &AclRules::operator())
        .await
        .unwrap();
    let token_c = real
        .create_token("operator-c", &AclRules::operator())
        .await
        .unwrap();
    let dir = Dir::new("token");
    let file = dir.0.join("token");
    write_atomically(&file, format!("{token_a}\n"));
    let options = HarnessOptions {
        operator_consul: OperatorConsul {
            env: vec![
                ("CONSUL_HTTP_TOKEN_FILE".into(), file.display().to_string()),
                ("ELECTOR_CREDENTIALS_RELOAD".into(), "1s".into()),
            ],
            ..OperatorConsul::default()
        },
        ..HarnessOptions::default()
    };
    with_namespace("cred-token", |admin, ns| async move {
        let (h, first) = Harness::web_elected_on_with(admin, ns, consul, options, web()).await;
        let real = h.consul.real_consul();

        // Vault agent writes token B, and token A is revoked.
        write_atomically(&file, format!("{token_b}\n"));
        real.destroy_token(&token_a).await.unwrap();
        holds_without_change(&h, &first, TTL * 5 / 2).await;
        assert!(reloads(&h, "token", "reloaded") >= 1);

        // A file that is not a token keeps token B in use.
        write_atomically(&file, b"\xff\xfe\x00garbage");
        holds_without_change(&h, &first, TTL * 5 / 2).await;
        assert!(reloads(&h, "token", "not_utf8") >= 1);

        // Fixed with token C, and B revoked: C is used.
        write_atomically(&file, format!("{token_c}\n"));
        real.destroy_token(&token_b).await.unwrap();
        holds_without_change(&h, &first, TTL * 5 / 2).await;
        assert!(reloads(&h, "token", "reloaded") >= 2);

        assert_token_never_backwards(&h, &first.pod);
        h.finish().await;
    })
    .await;
}

/// How long the operator's first client certificate is valid once issued: the election must be
/// won with it before it expires (that takes a few seconds, more on a loaded machine), and
/// the test waits its expiry out.
const FIRST_CERT_VALIDITY: Duration = Duration::from_secs(12);

/// Bound for Consul's own start and restarts.
const CONSUL_BOUND: Duration = Duration::from_secs(60);

/// One request over a new TLS connection to `addr`, presenting `client` and trusting `ca`:
/// the status line of the answer, or why there was none (Consul refuses a client certificate
/// during the handshake, or, with TLS 1.3, with an alert at the first read).
async fn https_status_line(addr: SocketAddr, ca: &str, client: &Issued) -> Result<String, String> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let chain = vec![CertificateDer::from_pem_slice(client.cert.as_bytes()).unwrap()];
    let key = PrivateKeyDer::from_pem_slice(client.key.as_bytes()).unwrap();
    let config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)
        .unwrap();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let exchange = async {
        let tcp = tokio::net::TcpStream::connect(addr)
            .await
            .map_err(|e| format!("connect: {e}"))?;
        let name = ServerName::IpAddress(addr.ip().into());
        let mut tls = connector
            .connect(name, tcp)
            .await
            .map_err(|e| format!("handshake: {e}"))?;
        tls.write_all(
            b"GET /v1/status/leader HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
        )
        .await
        .map_err(|e| format!("write: {e}"))?;
        let mut answer = Vec::new();
        let mut buf = [0u8; 1024];
        while !answer.windows(2).any(|w| w == b"\r\n") {
            match tls.read(&mut buf).await {
                Ok(0) => return Err("closed without an answer".to_string()),
                Ok(n) => answer.extend_from_slice(&buf[..n]),
                Err(e) => return Err(format!("read: {e}")),
            }
        }
        let answer = String::from_utf8_lossy(&answer);
        Ok(answer.lines().next().unwrap_or_default().to_owned())
    };
    tokio::time::timeout(Duration::from_secs(10), exchange)
        .await
        .unwrap_or_else(|_| Err("no answer within 10s".into()))
}

/// The value of the operator's counter of successful session renewals.
fn renewals(h: &Harness) -> u64 {
    h.operator()
        .metrics
        .encode()
        .lines()
        .find_map(|line| {
            line.strip_prefix(
                r#"consul_elector_consul_requests_total{operation="session_renew",outcome="ok"} "#,
            )
        })
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or(0)
}

/// The operator talks HTTPS to the client agent of a three-server Consul that requires client
/// certificates. Its first client certificate expires a few seconds after the election is
/// won; before that, its Secret volume is updated at once with a new client certificate and a
/// CA bundle that also holds the CA of the agent's next server certificate. Once the first
/// certificate has expired, the agent is restarted with a server certificate from the new CA:
/// every connection of the operator is gone, and a new one needs both the new client
/// certificate and the new CA. The same session keeps the key with no label, annotation or
/// fencing token changing, and Consul still has the session more than two TTLs later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_client_certificate_and_ca_keep_the_lock_without_a_leader_change() {
    consul_elector::install_crypto_provider();
    let dir = Dir::new("tls");
    let ca1 = Ca::new("consul-ca-1");
    let ca2 = Ca::new("consul-ca-2");
    // Consul's files: its server certificate (from CA 1 for now) and the client CA.
    let consul_dir = dir.0.join("consul");
    std::fs::create_dir_all(&consul_dir).unwrap();
    let tls = Tls {
        cert_file: consul_dir.join("server.pem"),
        key_file: consul_dir.join("server.key"),
        ca_file: consul_dir.join("client-ca.pem"),
        require_client_cert: true,
    };
    write_pair(&tls.cert_file, &tls.key_file, &ca1.server());
    write_atomically(&tls.ca_file, ca1.pem());
    let options = Options {
        tls: Some(tls.clone()),
        ..Options::default()
    };
    let Some(consul) = ConsulUnderTest::real(Shape::Cluster, options).await else {
        return;
    };
    let agent_https = consul.real_consul().agent().https_url().unwrap();
    let agent_addr: SocketAddr = agent_https.trim_start_matches("https://").parse().unwrap();

    with_namespace("cred-tls", |admin, ns| async move {
        // The operator's files, as a mounted Secret.
        let secret_dir = dir.0.join("secret");
        std::fs::create_dir_all(&secret_dir).unwrap();
        let mut secret = SecretVolume::new(&secret_dir);
        let issued = Instant::now();
        let first_cert = ca1.client("operator-1", FIRST_CERT_VALIDITY);
        secret.write(&[
            ("ca.pem", ca1.pem().as_bytes()),
            ("tls.crt", first_cert.cert.as_bytes()),
            ("tls.key", first_cert.key.as_bytes()),
        ]);
        let path = |name: &str| secret.file(name).display().to_string();
        let options = HarnessOptions {
            operator_consul: OperatorConsul {
                env: vec![
                    ("CONSUL_HTTP_ADDR".into(), agent_https.clone()),
                    ("CONSUL_CACERT".into(), path("ca.pem")),
                    ("CONSUL_CLIENT_CERT".into(), path("tls.crt")),
                    ("CONSUL_CLIENT_KEY".into(), path("tls.key")),
                    ("ELECTOR_CREDENTIALS_RELOAD".into(), "1s".into()),
                ],
                ..OperatorConsul::default()
            },
            ..HarnessOptions::default()
        };
        let (h, first) = Harness::web_elected_on_with(admin, ns, consul, options, web()).await;
        let elected = issued.elapsed();
        eprintln!("elected {elected:?} after the first client certificate was issued");
        assert!(
            elected + Duration::from_secs(2) < FIRST_CERT_VALIDITY,
            "the election took {elected:?}: the first certificate (valid for \
             {FIRST_CERT_VALIDITY:?}) must still be valid when it is rotated"
        );
        let histories = h.histories();
        let real = h.consul.real_consul();

        // Before the first certificate expires: the new client certificate and a bundle of
        // both CAs arrive in one Secret update, and the agent's next server certificate comes
        // from CA 2 (Consul reads it at its next start).
        let second_cert = ca1.client("operator-2", Duration::from_secs(3600));
        let bundle = format!("{}{}", ca1.pem(), ca2.pem());
        secret.write(&[
            ("ca.pem", bundle.as_bytes()),
            ("tls.crt", second_cert.cert.as_bytes()),
            ("tls.key", second_cert.key.as_bytes()),
        ]);
        write_pair(&tls.cert_file, &tls.key_file, &ca2.server());

        // Waiting out the first certificate's real expiry is the point of this test; the lock
        // is checked every second meanwhile.
        let expired = issued + FIRST_CERT_VALIDITY + Duration::from_secs(1);
        holds_without_change(
            &h,
            &first,
            expired.saturating_duration_since(Instant::now()),
        )
        .await;

        // The agent restarts (a crash: its node, and the session on it, stay): every
        // connection of the operator is gone, and the agent now presents a certificate of CA 2.
        real.agent().kill();
        real.agent().restart().unwrap();
        real.wait_ready(CONSUL_BOUND).await.unwrap();
        let restarted = Instant::now();
        let renewed = renewals(&h);
        eprintln!("agent restarted with a server certificate of CA 2; renewals so far: {renewed}");
        // Consul refuses the expired certificate and takes the new one, on new connections.
        let refused = https_status_line(agent_addr, &bundle, &first_cert).await;
        assert!(
            refused.is_err(),
            "the expired certificate was accepted: {refused:?}"
        );
        let accepted = https_status_line(agent_addr, &bundle, &second_cert).await;
        assert_eq!(accepted.as_deref(), Ok("HTTP/1.1 200 OK"), "{accepted:?}");

        // A renewal succeeds over a new connection within a TTL (the operator renews twice per
        // TTL), and nothing changes for more than two TTLs after it (Consul drops a session
        // not renewed for two TTLs).
        let resumed = h.poll_until(TTL, || renewals(&h) > renewed).await;
        assert!(
            resumed,
            "no session renewal succeeded within {TTL:?} of the restart (operator's failed \
             requests: {})",
            errors(&h)
        );
        eprintln!("renewed {:?} after the restart", restarted.elapsed());
        holds_without_change(&h, &first, TTL * 5 / 2).await;
        assert_eq!(h.histories(), histories, "a label or annotation changed");
        assert!(reloads(&h, "client_certificate", "reloaded") >= 1);
        assert!(reloads(&h, "ca", "reloaded") >= 1);

        assert_token_never_backwards(&h, &first.pod);
        h.finish().await;
    })
    .await;
}

/// The fencing token on `pod` never went backwards over the recorded history.
fn assert_token_never_backwards(h: &Harness, pod: &str) {
    let tokens: Vec<u64> = h
        .recorder
        .annotation_history(pod, consul_elector::crd::FENCING_TOKEN_ANNOTATION)
        .into_iter()
        .flatten()
        .map(|t| t.parse().expect("numeric token"))
        .collect();
    assert!(tokens.windows(2).all(|w| w[0] <= w[1]), "{tokens:?}");
}

/// The operator's failed Consul requests by operation and outcome, for a failure message.
fn errors(h: &Harness) -> String {
    h.operator()
        .metrics
        .encode()
        .lines()
        .filter(|line| {
            line.starts_with("consul_elector_consul_requests_total")
                && !line.contains("outcome=\"ok\"")
        })
        .collect::<Vec<_>>()
        .join("; ")
}
