//! The operator's connection to the API server: HTTP/2 when the server offers it.
//!
//! kube's default stack speaks HTTP/1.1 only, so each request in flight holds a TLS
//! connection of its own and each answer is a read and a wake-up of its own. The API server
//! offers HTTP/2, which is what `client-go` speaks to it: all requests and watches of a
//! client share one connection, and one read brings the frames of many answers. This is
//! kube's stack (base URL, authentication, extra headers, TLS and server name from the
//! kubeconfig or the service account, connect/read/write timeouts) over a connector that
//! offers both versions; a server that does not offer HTTP/2 is spoken to in HTTP/1.1. As
//! with `client-go`, an HTTP/2 connection that has received nothing for
//! [`HTTP2_READ_IDLE`] is pinged and closed when no answer comes within [`HTTP2_PING`], so a
//! connection that died silently fails its requests and watches instead of holding them.
//! With a proxy configured, kube's own stack is used unchanged.

use std::time::Duration;

use http::{Request, Response};
use hyper_rustls::{FixedServerNameResolver, HttpsConnectorBuilder};
use hyper_timeout::TimeoutConnector;
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use kube::client::{Body, ClientBuilder, ConfigExt, DynBody};
use tower::util::BoxService;
use tower::{BoxError, ServiceBuilder, ServiceExt};

/// Quiet time after which an HTTP/2 connection is pinged (`client-go`'s default).
pub const HTTP2_READ_IDLE: Duration = Duration::from_secs(30);
/// How long a ping may go unanswered before its connection is closed (`client-go`'s
/// default).
pub const HTTP2_PING: Duration = Duration::from_secs(15);

/// The service under a [`ClientBuilder`] (the type kube's own builder has).
pub type ApiService = BoxService<Request<Body>, Response<Box<DynBody>>, BoxError>;

/// A [`ClientBuilder`] for `config` whose connections offer HTTP/2, or kube's default
/// builder when `config` names a proxy.
pub fn client_builder(config: &kube::Config) -> Result<ClientBuilder<ApiService>, kube::Error> {
    if config.proxy_url.is_some() {
        return ClientBuilder::try_from(config.clone());
    }
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    let tls = HttpsConnectorBuilder::new()
        .with_tls_config(config.rustls_client_config()?)
        .https_or_http();
    let https = match &config.tls_server_name {
        Some(name) => {
            let name = name.clone().try_into().map_err(|error| {
                kube::Error::RustlsTls(kube::client::RustlsTlsError::InvalidServerName(error))
            })?;
            tls.with_server_name_resolver(FixedServerNameResolver::new(name))
                .enable_all_versions()
                .wrap_connector(http)
        }
        None => tls.enable_all_versions().wrap_connector(http),
    };
    let mut connector = TimeoutConnector::new(https);
    connector.set_connect_timeout(config.connect_timeout);
    connector.set_read_timeout(config.read_timeout);
    connector.set_write_timeout(config.write_timeout);
    connector.set_reset_reader_on_write(config.reset_reader_on_write);
    let hyper: HyperClient<_, Body> = HyperClient::builder(TokioExecutor::new())
        .timer(TokioTimer::new())
        .http2_keep_alive_interval(HTTP2_READ_IDLE)
        .http2_keep_alive_timeout(HTTP2_PING)
        .http2_keep_alive_while_idle(true)
        .build(connector);
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(BoxError::from)
        .service(hyper)
        .map_response(|response| {
            response.map(|body| {
                Box::new(http_body_util::BodyExt::map_err(body, BoxError::from)) as Box<DynBody>
            })
        })
        .boxed();
    Ok(ClientBuilder::new(
        service,
        config.default_namespace.clone(),
    ))
}
