//! Certificates made by the credential-rotation tests: CAs, server certificates for
//! `127.0.0.1`/`localhost`, and client certificates with validity windows of a few seconds,
//! written to files the way Kubernetes updates a mounted Secret (a new file renamed over the
//! old one, so a reader never sees half of it); and a small TLS server standing in for Consul.

use std::path::Path;
use std::time::Duration;

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose, SanType,
};
use time::OffsetDateTime;

/// A CA that signs the tests' certificates.
pub struct Ca {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

/// A certificate (PEM) and its private key (PEM).
pub struct Issued {
    pub cert: String,
    pub key: String,
}

impl Ca {
    /// A new CA named `name`, valid from a minute ago for a day.
    pub fn new(name: &str) -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let now = OffsetDateTime::now_utc();
        params.not_before = now - time::Duration::minutes(1);
        params.not_after = now + time::Duration::days(1);
        let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
        Ca { issuer }
    }

    /// The CA certificate (PEM).
    pub fn pem(&self) -> String {
        self.issuer.pem()
    }

    /// A server certificate for `127.0.0.1` and `localhost`, valid for a day.
    pub fn server(&self) -> Issued {
        let mut params = CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
        params
            .subject_alt_names
            .push(SanType::IpAddress([127, 0, 0, 1].into()));
        params.distinguished_name.push(DnType::CommonName, "server");
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        self.issue(params, Duration::from_secs(24 * 3600))
    }

    /// A client certificate named `name` that expires `valid_for` from now.
    pub fn client(&self, name: &str, valid_for: Duration) -> Issued {
        let mut params = CertificateParams::new(vec![name.to_owned()]).unwrap();
        params.distinguished_name.push(DnType::CommonName, name);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        self.issue(params, valid_for)
    }

    fn issue(&self, mut params: CertificateParams, valid_for: Duration) -> Issued {
        let now = OffsetDateTime::now_utc();
        params.not_before = now - time::Duration::minutes(1);
        params.not_after = now + valid_for;
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        Issued {
            cert: cert.pem(),
            key: key.serialize_pem(),
        }
    }
}

/// Writes `contents` to `path` atomically: a temporary file in the same directory, renamed
/// over `path`.
pub fn write_atomically(path: &Path, contents: impl AsRef<[u8]>) {
    let temporary = path.with_extension("tmp");
    std::fs::write(&temporary, contents).unwrap();
    std::fs::rename(&temporary, path).unwrap();
}

/// Writes a certificate and its key (each atomically; the key first, then the certificate).
pub fn write_pair(cert: &Path, key: &Path, issued: &Issued) {
    write_atomically(key, &issued.key);
    write_atomically(cert, &issued.cert);
}

/// How many requests a connection of [`serve_empty_session_lists`] serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Connections {
    /// One: every request needs a new connection, and so a new TLS handshake.
    OneRequestEach,
    /// As many as the client sends (HTTP/2 multiplexes them on one connection).
    KeptOpen,
}

/// Serves TLS on `listener`, each connection with the acceptor `acceptor` returns when it is
/// accepted (so a test can swap the server's certificate or count connections), answering
/// every request with an empty session list as Consul would: over HTTP/2 when the client and
/// the acceptor's configuration agree on it (ALPN `h2`), else over HTTP/1.1.
pub fn serve_empty_session_lists(
    listener: tokio::net::TcpListener,
    connections: Connections,
    acceptor: impl Fn() -> tokio_rustls::TlsAcceptor + Send + 'static,
) {
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                if tls.get_ref().1.alpn_protocol() == Some(b"h2") {
                    answer_over_http2(tls, connections).await;
                } else {
                    answer_over_http1(tls).await;
                }
            });
        }
    });
}

/// The response headers of an empty session list.
const EMPTY_LIST_HEADERS: [(&str, &str); 3] = [
    ("Content-Type", "application/json"),
    ("X-Consul-Index", "5"),
    ("X-Consul-KnownLeader", "true"),
];

async fn answer_over_http2(
    tls: tokio_rustls::server::TlsStream<tokio::net::TcpStream>,
    connections: Connections,
) {
    let served = std::sync::Arc::new(tokio::sync::Notify::new());
    let notify = served.clone();
    let service = hyper::service::service_fn(move |_request| {
        notify.notify_one();
        async {
            let mut response = http::Response::builder();
            for (name, value) in EMPTY_LIST_HEADERS {
                response = response.header(name, value);
            }
            response.body(http_body_util::Full::new(bytes::Bytes::from_static(b"[]")))
        }
    });
    let connection = hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
        .serve_connection(hyper_util::rt::TokioIo::new(tls), service);
    tokio::pin!(connection);
    if connections == Connections::KeptOpen {
        let _ = connection.await;
        return;
    }
    tokio::select! {
        _ = connection.as_mut() => {}
        () = served.notified() => {
            // GOAWAY: the request in flight completes, the next needs a new connection.
            connection.as_mut().graceful_shutdown();
            let _ = connection.await;
        }
    }
}

/// Answers one HTTP/1.1 request and closes the connection.
async fn answer_over_http1(mut tls: tokio_rustls::server::TlsStream<tokio::net::TcpStream>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut request = Vec::new();
    let mut buf = [0u8; 1024];
    while !request.windows(4).any(|w| w == b"\r\n\r\n") {
        match tls.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => request.extend_from_slice(&buf[..n]),
        }
    }
    let mut response = "HTTP/1.1 200 OK\r\n".to_owned();
    for (name, value) in EMPTY_LIST_HEADERS {
        response.push_str(&format!("{name}: {value}\r\n"));
    }
    response.push_str("Content-Length: 2\r\nConnection: close\r\n\r\n[]");
    let _ = tls.write_all(response.as_bytes()).await;
    let _ = tls.shutdown().await;
}

/// A directory laid out as the kubelet lays out a Secret volume: each file is a symlink
/// `name -> ..data/name`, `..data` a symlink to a timestamped directory, and an update writes
/// a new timestamped directory and renames a new `..data` link over the old one, so every
/// file of the Secret changes in one atomic step.
pub struct SecretVolume {
    dir: std::path::PathBuf,
    updates: u32,
}

impl SecretVolume {
    /// An empty volume in `dir` (which exists).
    pub fn new(dir: &Path) -> SecretVolume {
        SecretVolume {
            dir: dir.to_path_buf(),
            updates: 0,
        }
    }

    /// The path a reader is given for `name`.
    pub fn file(&self, name: &str) -> std::path::PathBuf {
        self.dir.join(name)
    }

    /// Replaces the volume's contents with `files` (name, contents) in one atomic swap.
    pub fn write(&mut self, files: &[(&str, &[u8])]) {
        self.updates += 1;
        let stamp = format!("..update-{}", self.updates);
        std::fs::create_dir(self.dir.join(&stamp)).unwrap();
        for (name, contents) in files {
            std::fs::write(self.dir.join(&stamp).join(name), contents).unwrap();
        }
        let link = self.dir.join("..data_tmp");
        std::os::unix::fs::symlink(&stamp, &link).unwrap();
        std::fs::rename(&link, self.dir.join("..data")).unwrap();
        for (name, _) in files {
            let path = self.dir.join(name);
            if std::fs::symlink_metadata(&path).is_err() {
                std::os::unix::fs::symlink(Path::new("..data").join(name), &path).unwrap();
            }
        }
        if self.updates > 1 {
            let previous = self.dir.join(format!("..update-{}", self.updates - 1));
            std::fs::remove_dir_all(previous).unwrap();
        }
    }
}
