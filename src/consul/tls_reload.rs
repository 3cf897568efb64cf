//! The TLS files, re-read while the operator runs (see [`super::reload`]): cert-manager and
//! Secret mounts rotate the client certificate and the CA bundle in place.
//!
//! The rustls configuration is built once; its client-certificate resolver and its server
//! certificate verifier read the newest usable material at every handshake. So new connections
//! use the new certificate and CA set, connections already open keep going (TLS checks
//! certificates at the handshake only), and the HTTP clients and their pools are never rebuilt.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use rustls::client::ResolvesClientCert;
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::sign::CertifiedKey;
use rustls::{DigitallySignedStruct, RootCertStore, SignatureScheme};

use super::reload::{CredentialSource, LoadError, ReloadOutcome, Reloading};

/// The reloading TLS files of a configuration (those it has).
#[derive(Debug, Default, Clone)]
pub(crate) struct TlsReload {
    /// `CONSUL_CLIENT_CERT` and `CONSUL_CLIENT_KEY`.
    pub(crate) client_cert: Option<Arc<Reloading<ClientCertFiles>>>,
    /// `CONSUL_CACERT` and `CONSUL_CAPATH`.
    pub(crate) ca: Option<Arc<Reloading<CaFiles>>>,
}

impl TlsReload {
    /// Refreshes every file set: each one's name and what its refresh did.
    pub(crate) fn refresh(&self, now: Instant) -> Vec<(&'static str, ReloadOutcome)> {
        let client_cert = self
            .client_cert
            .iter()
            .map(|files| (files.name(), files.refresh(now)));
        let ca = self
            .ca
            .iter()
            .map(|files| (files.name(), files.refresh(now)));
        client_cert.chain(ca).collect()
    }

    /// Makes the next refresh read every file (a handshake just failed).
    pub(crate) fn reload_soon(&self) {
        if let Some(files) = &self.client_cert {
            files.reload_soon();
        }
        if let Some(files) = &self.ca {
            files.reload_soon();
        }
    }
}

/// The client certificate chain and its private key.
pub(crate) struct ClientCertFiles {
    pub(crate) cert: PathBuf,
    pub(crate) key: PathBuf,
    pub(crate) provider: Arc<CryptoProvider>,
}

impl CredentialSource for ClientCertFiles {
    type Material = Arc<CertifiedKey>;

    fn name(&self) -> &'static str {
        "client_certificate"
    }

    fn read(&self) -> Result<Vec<Vec<u8>>, LoadError> {
        Ok(vec![read(&self.cert)?, read(&self.key)?])
    }

    /// Refuses a chain without a certificate, a key that cannot be parsed, and a key that does
    /// not belong to the certificate (a rotation caught between its two writes).
    fn parse(
        &self,
        files: &[Vec<u8>],
        _previous: Option<&Self::Material>,
    ) -> Result<Self::Material, LoadError> {
        let [cert, key] = files else {
            return Err(LoadError::new("unreadable", "expected two files"));
        };
        let chain = certificates(&self.cert, cert)?;
        let key = PrivateKeyDer::from_pem_slice(key).map_err(|error| {
            LoadError::new(
                "invalid_key",
                format!("client key {}: {error}", self.key.display()),
            )
        })?;
        let certified = CertifiedKey::from_der(chain, key, &self.provider).map_err(|error| {
            let reason = match error {
                rustls::Error::InconsistentKeys(_) => "key_mismatch",
                _ => "invalid_key",
            };
            LoadError::new(
                reason,
                format!("client certificate {}: {error}", self.cert.display()),
            )
        })?;
        Ok(Arc::new(certified))
    }
}

/// The CA certificates: a PEM file, and/or every file of a directory.
pub(crate) struct CaFiles {
    pub(crate) file: Option<PathBuf>,
    pub(crate) dir: Option<PathBuf>,
    pub(crate) provider: Arc<CryptoProvider>,
}

impl CaFiles {
    /// The files to read: the CA file, then the directory's regular files by name (a Secret
    /// mount's `..data` link and its timestamped directory are not files).
    fn paths(&self) -> Result<Vec<PathBuf>, LoadError> {
        let mut paths: Vec<PathBuf> = self.file.iter().cloned().collect();
        if let Some(dir) = &self.dir {
            let unreadable = |error: std::io::Error| {
                LoadError::new(
                    "unreadable",
                    format!("CA directory {}: {error}", dir.display()),
                )
            };
            let mut entries = Vec::new();
            for entry in std::fs::read_dir(dir).map_err(unreadable)? {
                let path = entry.map_err(unreadable)?.path();
                if path.is_file() {
                    entries.push(path);
                }
            }
            entries.sort();
            paths.extend(entries);
        }
        Ok(paths)
    }
}

impl CredentialSource for CaFiles {
    type Material = Arc<WebPkiServerVerifier>;

    fn name(&self) -> &'static str {
        "ca"
    }

    fn read(&self) -> Result<Vec<Vec<u8>>, LoadError> {
        self.paths()?
            .iter()
            .map(|path| {
                // The path goes with the bytes: a file renamed is a change.
                let mut bytes = path.as_os_str().as_encoded_bytes().to_vec();
                bytes.push(0);
                bytes.extend(read(path)?);
                Ok(bytes)
            })
            .collect()
    }

    fn parse(
        &self,
        files: &[Vec<u8>],
        _previous: Option<&Self::Material>,
    ) -> Result<Self::Material, LoadError> {
        let mut store = RootCertStore::empty();
        for file in files {
            let (path, bytes) = match file.iter().position(|b| *b == 0) {
                Some(end) => (&file[..end], &file[end + 1..]),
                None => (&file[..0], &file[..]),
            };
            let path = Path::new(std::str::from_utf8(path).unwrap_or("?"));
            for cert in certificates(path, bytes)? {
                store.add(cert).map_err(|error| {
                    LoadError::new(
                        "invalid_ca",
                        format!("CA certificate in {}: {error}", path.display()),
                    )
                })?;
            }
        }
        if store.is_empty() {
            return Err(LoadError::new(
                "no_certificate",
                "no CA certificates found in CONSUL_CACERT or CONSUL_CAPATH",
            ));
        }
        WebPkiServerVerifier::builder_with_provider(Arc::new(store), self.provider.clone())
            .build()
            .map_err(|error| LoadError::new("invalid_ca", format!("CA certificates: {error}")))
    }
}

/// A file's bytes.
fn read(path: &Path) -> Result<Vec<u8>, LoadError> {
    std::fs::read(path).map_err(|error| {
        LoadError::new(
            "unreadable",
            format!("cannot read {}: {}", path.display(), error.kind()),
        )
    })
}

/// Every certificate of PEM `bytes` read from `path` (at least one).
fn certificates(path: &Path, bytes: &[u8]) -> Result<Vec<CertificateDer<'static>>, LoadError> {
    let certs = CertificateDer::pem_slice_iter(bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| {
            LoadError::new(
                "invalid_pem",
                format!("certificate file {}: {error}", path.display()),
            )
        })?;
    if certs.is_empty() {
        return Err(LoadError::new(
            "no_certificate",
            format!("certificate file {}: no certificate found", path.display()),
        ));
    }
    Ok(certs)
}

/// Presents the newest usable client certificate at every handshake.
#[derive(Debug)]
pub(crate) struct ReloadingClientCert(pub(crate) Arc<Reloading<ClientCertFiles>>);

impl ResolvesClientCert for ReloadingClientCert {
    fn resolve(
        &self,
        _root_hint_subjects: &[&[u8]],
        _sigschemes: &[SignatureScheme],
    ) -> Option<Arc<CertifiedKey>> {
        Some(self.0.current().0.as_ref().clone())
    }

    fn has_certs(&self) -> bool {
        true
    }
}

/// Verifies server certificates against the newest usable CA set.
#[derive(Debug)]
pub(crate) struct ReloadingVerifier(pub(crate) Arc<Reloading<CaFiles>>);

impl ReloadingVerifier {
    fn verifier(&self) -> Arc<WebPkiServerVerifier> {
        self.0.current().0.as_ref().clone()
    }
}

impl ServerCertVerifier for ReloadingVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        self.verifier().verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        )
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.verifier().verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.verifier().verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.verifier().supported_verify_schemes()
    }
}
