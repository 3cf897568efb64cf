//! rustls client configuration from [`TlsSettings`]: custom CA and client certificate (both
//! re-read while the operator runs), optional verification bypass, and ALPN offering HTTP/2 before HTTP/1.1. The server-name override is
//! applied by the transport (`super::transport`), which puts the name in the request URL.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};

use super::reload::Reloading;
use super::settings::TlsSettings;
use super::tls_reload::{
    CaFiles, ClientCertFiles, ReloadingClientCert, ReloadingVerifier, TlsReload,
};

/// The process-default crypto provider (installed by `crate::install_crypto_provider`), or
/// ring when nothing was installed, so that building a client can never panic.
pub(crate) fn provider() -> Arc<CryptoProvider> {
    CryptoProvider::get_default()
        .cloned()
        .unwrap_or_else(|| Arc::new(rustls::crypto::ring::default_provider()))
}

/// The rustls configuration, and the reloading files behind it: the client certificate and
/// the CA files are re-read while the configuration is in use (see [`super::tls_reload`]), so
/// new connections use the newest usable material without a new client. Errors name the file
/// involved, never its contents.
pub(crate) fn client_config(
    settings: &TlsSettings,
    period: Duration,
    now: Instant,
) -> Result<(Arc<ClientConfig>, TlsReload), String> {
    let provider = provider();
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|error| format!("TLS setup: {error}"))?;
    let mut reload = TlsReload::default();

    let builder = if !settings.verify {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AcceptAnyCertificate(provider.clone())))
    } else if settings.ca_cert.is_some() || settings.ca_path.is_some() {
        let files = CaFiles {
            file: settings.ca_cert.clone(),
            dir: settings.ca_path.clone(),
            provider: provider.clone(),
        };
        let ca = Arc::new(Reloading::load(files, period, now, Err).map_err(|e| e.detail)?);
        reload.ca = Some(ca.clone());
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(ReloadingVerifier(ca)))
    } else {
        builder.with_root_certificates(native_roots()?)
    };

    let mut config = match (&settings.client_cert, &settings.client_key) {
        (Some(cert), Some(key)) => {
            let files = ClientCertFiles {
                cert: cert.clone(),
                key: key.clone(),
                provider,
            };
            let client_cert =
                Arc::new(Reloading::load(files, period, now, Err).map_err(|e| e.detail)?);
            reload.client_cert = Some(client_cert.clone());
            builder.with_client_cert_resolver(Arc::new(ReloadingClientCert(client_cert)))
        }
        (None, None) => builder.with_no_client_auth(),
        _ => return Err("a client certificate needs both a certificate and a key".to_owned()),
    };
    // HTTP/2 when the server offers it: every request to the address then shares one
    // connection. HTTP/1.1 otherwise.
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok((Arc::new(config), reload))
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

/// The system's roots, used when no CA is configured (not re-read: the system's trust store
/// changes with the image, not while the process runs).
fn native_roots() -> Result<RootCertStore, String> {
    let mut store = RootCertStore::empty();
    let native = rustls_native_certs::load_native_certs();
    store.add_parsable_certificates(native.certs);
    if store.is_empty() {
        return Err("no CA certificates found (set CONSUL_CACERT)".to_owned());
    }
    Ok(store)
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
