//! The operator's connection to the API server (`operator::api_transport`): HTTP/2 on one
//! connection when the server offers it (as the API server does), HTTP/1.1 when it does not,
//! the kubeconfig's TLS server name honoured, and a connection that goes silent closed by
//! its pings instead of holding its requests forever.

mod pki;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use consul_elector::operator::KubeClients;
use consul_elector::operator::api_transport::{HTTP2_PING, HTTP2_READ_IDLE};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::TcpListener;

/// The `/version` answer of an API server.
const VERSION: &str = r#"{"major":"1","minor":"20","gitVersion":"v1.20.2","gitCommit":"x",
"gitTreeState":"clean","buildDate":"2021-01-13T13:20:00Z","goVersion":"go1.15.5",
"compiler":"gc","platform":"linux/amd64"}"#;

/// What a test server saw: the HTTP version of each request, and the connections accepted.
#[derive(Default)]
struct Seen {
    versions: Vec<http::Version>,
    connections: usize,
}

/// How a test server behaves once a connection is accepted.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Behaviour {
    /// Answers `/version` over whatever protocol ALPN chose.
    Answer,
    /// Completes the TLS handshake, then neither reads nor writes again.
    Silent,
}

/// A TLS server for `127.0.0.1`/`localhost` signed by `ca`, offering the ALPN protocols
/// `alpn`, behaving as `behaviour`, with what it saw.
async fn server(
    ca: &pki::Ca,
    alpn: &[&[u8]],
    behaviour: Behaviour,
) -> (std::net::SocketAddr, Arc<Mutex<Seen>>) {
    consul_elector::install_crypto_provider();
    let issued = ca.server();
    let chain = vec![CertificateDer::from_pem_slice(issued.cert.as_bytes()).unwrap()];
    let key = PrivateKeyDer::from_pem_slice(issued.key.as_bytes()).unwrap();
    let mut config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .unwrap();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Seen::default()));
    let record = seen.clone();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            record.lock().unwrap().connections += 1;
            let acceptor = acceptor.clone();
            let record = record.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                if behaviour == Behaviour::Silent {
                    // Hold the connection open without a byte more, as a peer that died
                    // without closing it would.
                    std::future::pending::<()>().await;
                }
                let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
                let service = hyper::service::service_fn(move |request: http::Request<_>| {
                    record.lock().unwrap().versions.push(request.version());
                    async {
                        http::Response::builder()
                            .header("Content-Type", "application/json")
                            .body(http_body_util::Full::new(bytes::Bytes::from_static(
                                VERSION.as_bytes(),
                            )))
                    }
                });
                let io = hyper_util::rt::TokioIo::new(tls);
                if h2 {
                    let _ = hyper::server::conn::http2::Builder::new(
                        hyper_util::rt::TokioExecutor::new(),
                    )
                    .serve_connection(io, service)
                    .await;
                } else {
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(io, service)
                        .await;
                }
            });
        }
    });
    (addr, seen)
}

/// A kubeconfig for `url` trusting `ca`.
fn config(url: &str, ca: &pki::Ca) -> kube::Config {
    let mut config = kube::Config::new(url.parse().unwrap());
    config.root_cert = Some(vec![
        CertificateDer::from_pem_slice(ca.pem().as_bytes())
            .unwrap()
            .to_vec(),
    ]);
    config
}

/// One request, then `n` at once, on `client`.
async fn requests(client: &kube::Client, n: usize) {
    client.apiserver_version().await.unwrap();
    let all = (0..n).map(|_| client.apiserver_version());
    for version in futures::future::join_all(all).await {
        assert_eq!(version.unwrap().git_version, "v1.20.2");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_server_is_spoken_to_over_http2_on_one_connection_per_client() {
    let ca = pki::Ca::new("api test CA");
    let (addr, seen) = server(&ca, &[b"h2", b"http/1.1"], Behaviour::Answer).await;
    let clients = KubeClients::from_config(config(&format!("https://{addr}"), &ca)).unwrap();
    requests(&clients.client, 20).await;
    {
        let seen = seen.lock().unwrap();
        assert_eq!(seen.versions.len(), 21);
        assert!(
            seen.versions.iter().all(|v| *v == http::Version::HTTP_2),
            "{:?}",
            seen.versions
        );
        assert_eq!(
            seen.connections, 1,
            "20 requests at once share one connection"
        );
    }
    // The Lease's client has its own connection, also HTTP/2.
    requests(&clients.lease, 5).await;
    let seen = seen.lock().unwrap();
    assert!(seen.versions.iter().all(|v| *v == http::Version::HTTP_2));
    assert_eq!(seen.connections, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_without_http2_is_spoken_to_in_http1() {
    let ca = pki::Ca::new("api test CA");
    let (addr, seen) = server(&ca, &[b"http/1.1"], Behaviour::Answer).await;
    let clients = KubeClients::from_config(config(&format!("https://{addr}"), &ca)).unwrap();
    requests(&clients.client, 5).await;
    let seen = seen.lock().unwrap();
    assert_eq!(seen.versions.len(), 6);
    assert!(
        seen.versions.iter().all(|v| *v == http::Version::HTTP_11),
        "{:?}",
        seen.versions
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kubeconfig_tls_server_name_is_the_name_checked() {
    let ca = pki::Ca::new("api test CA");
    let (addr, _) = server(&ca, &[b"h2"], Behaviour::Answer).await;
    // The certificate names `localhost` and 127.0.0.1, the address connected to.
    let mut named = config(&format!("https://{addr}"), &ca);
    named.tls_server_name = Some("localhost".to_owned());
    let clients = KubeClients::from_config(named).unwrap();
    clients.client.apiserver_version().await.unwrap();

    let mut misnamed = config(&format!("https://{addr}"), &ca);
    misnamed.tls_server_name = Some("elsewhere.test".to_owned());
    let clients = KubeClients::from_config(misnamed).unwrap();
    let error = clients.client.apiserver_version().await.unwrap_err();
    assert!(
        format!("{error:?}").contains("NotValidForName"),
        "checked against elsewhere.test, not the address: {error:?}"
    );
}

/// A connection whose peer went silent (a crashed node, a dropped route) fails its requests
/// once its ping goes unanswered, instead of holding them until the process restarts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_connection_fails_its_requests_after_an_unanswered_ping() {
    let ca = pki::Ca::new("api test CA");
    let (addr, seen) = server(&ca, &[b"h2"], Behaviour::Silent).await;
    let clients = KubeClients::from_config(config(&format!("https://{addr}"), &ca)).unwrap();
    let started = tokio::time::Instant::now();
    let bound = HTTP2_READ_IDLE + HTTP2_PING + Duration::from_secs(20);
    let outcome = tokio::time::timeout(bound, clients.client.apiserver_version()).await;
    let failed_after = started.elapsed();
    assert!(
        matches!(outcome, Ok(Err(_))),
        "the request fails within {bound:?}: {outcome:?}"
    );
    assert!(
        failed_after >= HTTP2_READ_IDLE,
        "not before the connection had been quiet for the idle time: {failed_after:?}"
    );
    assert_eq!(seen.lock().unwrap().versions.len(), 0);
}
