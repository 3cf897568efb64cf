//! rustls client configuration from [`TlsSettings`]: custom CA, client certificate, optional
//! verification bypass, and ALPN offering HTTP/2 before HTTP/1.1. The server-name override is
//! applied by the transport (`super::transport`), which puts the name in the request URL.

use std::path::Path;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};

use super::settings::TlsSettings;

/// The process-default crypto provider (installed by `crate::install_crypto_provider`), or
/// ring when nothing was installed, so that building a client can never panic.
fn provider() -> Arc<CryptoProvider> {
    CryptoProvider::get_default()
        .cloned()
        .unwrap_or_else(|| Arc::new(rustls::crypto::ring::default_provider()))
}

/// Builds the rustls configuration. Errors name the file involved, never its contents.
pub(crate) fn client_config(settings: &TlsSettings) -> Result<Arc<ClientConfig>, String> {
    let provider = provider();
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|error| format!("TLS setup: {error}"))?;

    let builder = if settings.verify {
        builder.with_root_certificates(root_store(settings)?)
    } else {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AcceptAnyCertificate(provider)))
    };

    let mut config = match (&settings.client_cert, &settings.client_key) {
        (Some(cert), Some(key)) => {
            let chain = read_certificates(cert)?;
            let key = PrivateKeyDer::from_pem_file(key)
                .map_err(|error| format!("client key {}: {error}", key.display()))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|error| format!("client certificate {}: {error}", cert.display()))?
        }
        (None, None) => builder.with_no_client_auth(),
        _ => return Err("a client certificate needs both a certificate and a key".to_owned()),
    };
    // HTTP/2 when the server offers it: every request to the address then shares one
    // connection. HTTP/1.1 otherwise.
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// The configuration of a client that only ever speaks plain HTTP: reqwest needs one to
/// build a client, and building it this way needs no CA files and no installed provider.
pub(crate) fn plain_http_config() -> Result<Arc<ClientConfig>, String> {
    let config = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|error| format!("TLS setup: {error}"))?
        .with_root_certificates(RootCertStore::empty())
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// The configured CAs, or the system's roots when none are configured.
fn root_store(settings: &TlsSettings) -> Result<RootCertStore, String> {
    let mut store = RootCertStore::empty();
    let mut configured = Vec::new();
    if let Some(file) = &settings.ca_cert {
        configured.extend(read_certificates(file)?);
    }
    if let Some(dir) = &settings.ca_path {
        let entries = std::fs::read_dir(dir)
            .map_err(|error| format!("CA directory {}: {error}", dir.display()))?;
        for entry in entries {
            let path = entry
                .map_err(|error| format!("CA directory {}: {error}", dir.display()))?
                .path();
            if path.is_file() {
                configured.extend(read_certificates(&path)?);
            }
        }
    }
    if settings.ca_cert.is_some() || settings.ca_path.is_some() {
        for cert in configured {
            store
                .add(cert)
                .map_err(|error| format!("CA certificate: {error}"))?;
        }
    } else {
        let native = rustls_native_certs::load_native_certs();
        store.add_parsable_certificates(native.certs);
    }
    if store.is_empty() {
        return Err("no CA certificates found (set CONSUL_CACERT)".to_owned());
    }
    Ok(store)
}

/// Every certificate of a PEM file (at least one).
fn read_certificates(file: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_file_iter(file)
        .and_then(|iter| iter.collect::<Result<Vec<_>, _>>())
        .map_err(|error| format!("certificate file {}: {error}", file.display()))?;
    if certs.is_empty() {
        return Err(format!(
            "certificate file {}: no certificate found",
            file.display()
        ));
    }
    Ok(certs)
}

/// `CONSUL_HTTP_SSL_VERIFY=false`: accepts any server certificate (signatures are still
/// checked, so the connection is encrypted to whoever holds the presented key).
#[derive(Debug)]
struct AcceptAnyCertificate(Arc<CryptoProvider>);

impl ServerCertVerifier for AcceptAnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
