//! Rotated credentials reach the Consul client without a new client: the token file re-read
//! when Consul refuses the token and at the reload period, and the TLS client certificate and
//! CA files re-read at the period and after a failed handshake (against the emulator and small
//! TLS servers; tests/it/credentials_rotation.rs runs elections on a real Consul).

use crate::common;
use crate::pki;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use consul_elector::consul::{ConsulClient, ConsulSettings, QueryOptions, RequestObserver};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use testkit::consul::AclPolicy;
use tokio::net::TcpListener;

use common::emulator_with_tokens;
use pki::{Ca, Issued, write_atomically, write_pair};

/// A directory for one test's files, removed at the end.
struct Dir(PathBuf);

impl Dir {
    fn new(name: &str) -> Dir {
        let dir = std::env::temp_dir().join(format!("consul-cred-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Dir(dir)
    }

    fn file(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Counts credential reloads by `credential/result`.
#[derive(Default)]
struct Reloads(Mutex<Vec<String>>);

impl RequestObserver for Reloads {
    fn observe(&self, _: &'static str, _: Result<(), &'static str>, _: Duration, _: bool) {}

    fn credential_reload(&self, credential: &'static str, result: &'static str) {
        self.0
            .lock()
            .unwrap()
            .push(format!("{credential}/{result}"));
    }
}

impl Reloads {
    fn count(&self, what: &str) -> usize {
        self.0.lock().unwrap().iter().filter(|r| *r == what).count()
    }
}

fn settings(vars: &[(&str, String)]) -> ConsulSettings {
    ConsulSettings::from_env(|name| {
        vars.iter()
            .find(|(variable, _)| *variable == name)
            .map(|(_, value)| value.clone())
    })
    .unwrap()
}

fn writer() -> AclPolicy {
    AclPolicy {
        key_write: vec![String::new()],
        session_write: true,
        ..AclPolicy::default()
    }
}

#[tokio::test]
async fn a_refused_token_makes_the_client_reread_the_token_file_and_send_again_once() {
    let emu = emulator_with_tokens([("token-b", writer())]).await;
    let dir = Dir::new("refused");
    let file = dir.file("token");
    std::fs::write(&file, "token-a\n").unwrap();
    // A period far longer than the test: only a refusal makes the client read the file.
    let consul = ConsulClient::new(&settings(&[
        ("CONSUL_HTTP_ADDR", emu.url()),
        ("CONSUL_HTTP_TOKEN_FILE", file.display().to_string()),
        ("ELECTOR_CREDENTIALS_RELOAD", "1h".into()),
    ]))
    .unwrap();
    let reloads = Arc::new(Reloads::default());
    consul.observe_requests(reloads.clone());

    // Token A is unknown to Consul, and the file still holds it: refused, sent once only.
    let error = consul.kv_put("k", b"v", 0).await.unwrap_err();
    assert_eq!(error.category(), "acl_not_found", "{error:?}");
    assert!(!format!("{error} {error:?}").contains("token-a"));
    assert_eq!(emu.stats().requests_with_token("token-a"), 1);

    // The file now holds token B: the refusal has it read, and the request goes again with B.
    std::fs::write(&file, "token-b\n").unwrap();
    consul.kv_put("k", b"v", 0).await.unwrap();
    assert_eq!(emu.stats().requests_with_token("token-a"), 2);
    assert_eq!(emu.stats().requests_with_token("token-b"), 1);
    assert_eq!(reloads.count("token/reloaded"), 1);
    consul.kv_put("k", b"w", 0).await.unwrap();
    assert_eq!(emu.stats().requests_with_token("token-b"), 2);
    assert!(!format!("{consul:?}").contains("token-b"));
}

#[tokio::test]
async fn the_token_file_is_reread_at_the_period_and_a_broken_one_keeps_the_token() {
    let emu = emulator_with_tokens([("token-a", writer()), ("token-b", writer())]).await;
    let dir = Dir::new("period");
    let file = dir.file("token");
    std::fs::write(&file, "token-a").unwrap();
    let consul = ConsulClient::new(&settings(&[
        ("CONSUL_HTTP_ADDR", emu.url()),
        ("CONSUL_HTTP_TOKEN_FILE", file.display().to_string()),
        ("ELECTOR_CREDENTIALS_RELOAD", "200ms".into()),
    ]))
    .unwrap();
    let reloads = Arc::new(Reloads::default());
    consul.observe_requests(reloads.clone());
    consul.kv_put("k", b"v", 0).await.unwrap();

    write_atomically(&file, "token-b\n");
    let deadline = Instant::now() + Duration::from_secs(10);
    while emu.stats().requests_with_token("token-b") == 0 {
        assert!(Instant::now() < deadline, "token B never used");
        consul.kv_put("k", b"v", 0).await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(reloads.count("token/reloaded"), 1);

    // Half-written files: every request keeps going with token B.
    for broken in [&b""[..], &b"\xff\xfe"[..]] {
        write_atomically(&file, broken);
        let before = emu.stats().requests_with_token("token-b");
        let deadline = Instant::now() + Duration::from_secs(10);
        let refusals = reloads.count("token/empty") + reloads.count("token/not_utf8");
        while reloads.count("token/empty") + reloads.count("token/not_utf8") == refusals {
            assert!(Instant::now() < deadline, "the broken file was never read");
            consul.kv_put("k", b"v", 0).await.unwrap();
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        consul.kv_put("k", b"v", 0).await.unwrap();
        assert!(emu.stats().requests_with_token("token-b") > before);
    }
    assert_eq!(
        consul.token().map(|t| format!("{t:?}")),
        Some("ConsulToken(<redacted>)".into())
    );
    assert_eq!(emu.stats().requests_with_token(""), 0);
}

/// A TLS server answering every request with an empty session list and closing the
/// connection (so every request is a new handshake). Its certificate and the CA it checks
/// client certificates against can be swapped.
struct TlsServer {
    addr: std::net::SocketAddr,
    config: Arc<Mutex<Arc<rustls::ServerConfig>>>,
}

/// The server's TLS configuration: `server`'s certificate, client certificates of
/// `client_ca` required, HTTP/2 offered (as Consul does) besides HTTP/1.1.
fn server_config(server: &Issued, client_ca: &Ca) -> Arc<rustls::ServerConfig> {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(client_ca.pem().as_bytes()).unwrap())
        .unwrap();
    let verifier = WebPkiClientVerifier::builder(Arc::new(roots))
        .build()
        .unwrap();
    let chain = vec![CertificateDer::from_pem_slice(server.cert.as_bytes()).unwrap()];
    let key = PrivateKeyDer::from_pem_slice(server.key.as_bytes()).unwrap();
    let mut config = rustls::ServerConfig::builder()
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain, key)
        .unwrap();
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Arc::new(config)
}

impl TlsServer {
    async fn start(config: Arc<rustls::ServerConfig>) -> TlsServer {
        consul_elector::install_crypto_provider();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let config = Arc::new(Mutex::new(config));
        let current = config.clone();
        // Every request on a new connection: each one shows the server's current certificate
        // and checks the client's.
        pki::serve_empty_session_lists(listener, pki::Connections::OneRequestEach, move || {
            tokio_rustls::TlsAcceptor::from(current.lock().unwrap().clone())
        });
        TlsServer { addr, config }
    }

    fn swap(&self, config: Arc<rustls::ServerConfig>) {
        *self.config.lock().unwrap() = config;
    }
}

fn tls_settings(addr: std::net::SocketAddr, dir: &Dir, period: &str) -> ConsulSettings {
    let path = |name: &str| dir.file(name).display().to_string();
    let mut settings = settings(&[
        ("CONSUL_HTTP_ADDR", format!("https://{addr}")),
        ("CONSUL_CACERT", path("ca.pem")),
        ("CONSUL_CLIENT_CERT", path("client.pem")),
        ("CONSUL_CLIENT_KEY", path("client.key")),
        ("ELECTOR_CREDENTIALS_RELOAD", period.into()),
    ]);
    settings.retry.base_delay = Duration::from_millis(10);
    settings
}

fn client_files(dir: &Dir) -> (PathBuf, PathBuf) {
    (dir.file("client.pem"), dir.file("client.key"))
}

async fn lists_sessions(consul: &ConsulClient) -> bool {
    consul.list_sessions(QueryOptions::default()).await.is_ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_certificate_rotated_before_it_expires_keeps_requests_going() {
    let ca = Ca::new("ca");
    let server = TlsServer::start(server_config(&ca.server(), &ca)).await;
    let dir = Dir::new("client-cert");
    write_atomically(&dir.file("ca.pem"), ca.pem());
    let (cert, key) = client_files(&dir);
    let expires = Instant::now() + Duration::from_secs(3);
    write_pair(&cert, &key, &ca.client("first", Duration::from_secs(3)));
    let consul = ConsulClient::new(&tls_settings(server.addr, &dir, "300ms")).unwrap();
    let reloads = Arc::new(Reloads::default());
    consul.observe_requests(reloads.clone());
    assert!(lists_sessions(&consul).await);

    let second = ca.client("second", Duration::from_secs(3600));
    write_pair(&cert, &key, &second);
    // Waiting out the first certificate's real expiry is the point of this test.
    tokio::time::sleep_until((expires + Duration::from_secs(1)).into()).await;
    for _ in 0..3 {
        let result = consul.list_sessions(QueryOptions::default()).await;
        assert!(result.is_ok(), "{result:?}");
    }
    assert_eq!(reloads.count("client_certificate/reloaded"), 1);

    // A broken certificate file keeps the working one.
    write_atomically(&cert, "-----BEGIN CERTIFICATE-----\nnot base64\n");
    let deadline = Instant::now() + Duration::from_secs(10);
    while reloads.count("client_certificate/invalid_pem") == 0 {
        assert!(Instant::now() < deadline, "the broken file was never read");
        assert!(lists_sessions(&consul).await);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(lists_sessions(&consul).await);
    // And a key that does not belong to the certificate too.
    write_atomically(&cert, &second.cert);
    write_atomically(&key, ca.client("third", Duration::from_secs(3600)).key);
    let deadline = Instant::now() + Duration::from_secs(10);
    while reloads.count("client_certificate/key_mismatch") == 0 {
        assert!(
            Instant::now() < deadline,
            "the mismatched key was never read"
        );
        assert!(lists_sessions(&consul).await);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(lists_sessions(&consul).await);
}

/// A client connected to a fresh server, both of CA `ca`.
struct Connected {
    server: TlsServer,
    dir: Dir,
    consul: ConsulClient,
    reloads: Arc<Reloads>,
}

/// A server with a certificate of `ca` that requires client certificates of `ca`, and a client
/// whose files (in a directory named after `name`) are the bundle of `ca` and a client
/// certificate of `ca`, once a request went through. The reload period is far longer than a
/// test: only a failure has the files read.
async fn connected(name: &str, ca: &Ca) -> Connected {
    let server = TlsServer::start(server_config(&ca.server(), ca)).await;
    let dir = Dir::new(name);
    write_atomically(&dir.file("ca.pem"), ca.pem());
    let (cert, key) = client_files(&dir);
    write_pair(&cert, &key, &ca.client("client", Duration::from_secs(3600)));
    let consul = ConsulClient::new(&tls_settings(server.addr, &dir, "1h")).unwrap();
    let reloads = Arc::new(Reloads::default());
    consul.observe_requests(reloads.clone());
    assert!(lists_sessions(&consul).await);
    Connected {
        server,
        dir,
        consul,
        reloads,
    }
}

#[tokio::test]
async fn a_server_certificate_from_a_new_ca_is_trusted_once_the_ca_bundle_has_it() {
    let old = Ca::new("old-ca");
    let new = Ca::new("new-ca");
    let Connected {
        server,
        dir,
        consul,
        reloads,
    } = connected("ca-bundle", &old).await;
    let bundle = dir.file("ca.pem");

    // The server moves to a certificate of the new CA; the bundle gets the new CA too.
    server.swap(server_config(&new.server(), &old));
    write_atomically(&bundle, format!("{}{}", old.pem(), new.pem()));
    let result = consul.list_sessions(QueryOptions::default()).await;
    assert!(result.is_ok(), "{result:?}");
    assert_eq!(reloads.count("ca/reloaded"), 1);
    assert!(lists_sessions(&consul).await);
}

/// The server refuses the client certificate (its CA moved on). Under TLS 1.3 the refusal
/// is an alert that arrives after the client finished its side of the handshake, with the
/// request already sent; it still counts as a TLS failure: the files are read again at once,
/// not at the next period.
#[tokio::test]
async fn a_client_certificate_the_server_refuses_is_reread_at_once() {
    let old = Ca::new("old-client-ca");
    let new = Ca::new("new-client-ca");
    let Connected {
        server,
        dir,
        consul,
        reloads,
    } = connected("refused-client", &old).await;
    let (cert, key) = client_files(&dir);

    // The server now trusts only client certificates of the new CA; the Secret gets one.
    server.swap(server_config(&old.server(), &new));
    write_pair(
        &cert,
        &key,
        &new.client("client", Duration::from_secs(3600)),
    );
    let result = consul.list_sessions(QueryOptions::default()).await;
    assert!(result.is_ok(), "{result:?}");
    assert_eq!(reloads.count("client_certificate/reloaded"), 1);
}

#[tokio::test]
async fn unusable_files_at_start_fail_the_start_with_the_file_named() {
    let dir = Dir::new("start");
    let file: &Path = &dir.file("token");
    std::fs::write(file, "bad\u{7}token").unwrap();
    let error = ConsulClient::new(&settings(&[(
        "CONSUL_HTTP_TOKEN_FILE",
        file.display().to_string(),
    )]))
    .unwrap_err();
    assert_eq!(error.category(), "configuration");
    assert!(!error.to_string().contains("bad\u{7}token"), "{error}");
}
