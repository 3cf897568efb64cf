//! The HTTP transport to Consul: one reqwest pool per Consul address, with per-lane request
//! budgets, shared by every client handle derived from one root [`super::ConsulClient`].
//!
//! # Protocol, TLS and proxies
//!
//! Plain `http://` addresses speak HTTP/1.1 with keep-alive. Over TLS, ALPN offers HTTP/2
//! first, and when Consul accepts it one connection carries every session request of the
//! address and another one everything else (pinged, so a dead one is noticed). TLS uses
//! the rustls configuration built from Consul's variables ([`super::tls`]), whose client
//! certificate and CA set follow their files (a failed handshake has them re-read before the
//! next attempt), so the clients here are never rebuilt for a rotation. reqwest honours
//! `HTTP_PROXY`, `HTTPS_PROXY`, `ALL_PROXY` and `NO_PROXY` (and their lower-case forms), so a
//! Consul behind a forward proxy needs no setting of ours; put Consul's address in `NO_PROXY`
//! when the process has a proxy for other traffic. With `CONSUL_TLS_SERVER_NAME`, requests to
//! the default address carry the server name in their URL (it is what SNI sends and what the
//! certificate is checked against) and connect to the address's own host; through an HTTPS
//! proxy, the proxy is asked for the server name instead. A `unix://` address connects to
//! the agent's socket and bypasses proxies.
//!
//! # Lanes and budgets
//!
//! Every request takes a permit from one of three budgets of its address before it is sent and
//! gives it back once its response body has been read (or it failed or was cancelled):
//!
//! | Lane | Requests | Permits (of `max_connections`, at least 3) |
//! |---|---|---|
//! | [`Lane::LongPoll`] | blocking queries (reads with an `index`) | half |
//! | [`Lane::Session`] | session create, renew, destroy | a quarter (at least one) |
//! | [`Lane::General`] | everything else | the rest (at least one) |
//!
//! A blocking query holds its permit for up to its whole wait, so however many watches run,
//! session renewals and lock operations never queue behind them. Session requests use a
//! reqwest client of their own, so they never share a connection with long polls either, and,
//! when the root client was given a session runtime, they run (and their connections are
//! driven) on that runtime, where busy reconciles on the main runtime cannot delay them.
//!
//! The permits bound requests in flight, which with HTTP/1 is the number of busy
//! connections; `pool_max_idle_per_host` keeps at most as many idle ones. reqwest returns a
//! connection to its pool from a background task, so a request that starts in that short
//! window may open a new connection: the number of open connections can briefly exceed the
//! budget by a few.

use std::collections::HashMap;
use std::error::Error as _;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use http::{Request, Response};
use rustls::ClientConfig;
use tokio::runtime::Handle;
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;

use super::error::TransportFailure;
use super::gated_body::GatedBody;
use super::settings::{ConsulAddress, TlsSettings};
use super::tls;
use super::tls_reload::TlsReload;
use crate::write_gate::WriteGate;

/// How often an HTTP/2 connection is pinged. One connection carries every request of a lane,
/// and a request that times out does not close it (unlike HTTP/1), so a connection whose peer
/// vanished is found by its pings: within this interval plus the connect timeout.
const HTTP2_PING_INTERVAL: Duration = Duration::from_secs(5);

/// Largest response body accepted (a recursive read of 10,000 election keys is a few MiB).
const MAX_RESPONSE_BODY: usize = 64 * 1024 * 1024;

/// A transport failure: the phase and the underlying error text.
pub(crate) type TransportError = (TransportFailure, String);

/// The budget a request draws its permit from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lane {
    /// Blocking queries, which the server may hold for minutes.
    LongPoll,
    /// Session create, renew and destroy: what keeps leaders leading.
    Session,
    /// Everything else.
    General,
}

/// How `max_connections` is divided between the lanes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct LaneBudgets {
    long_polls: usize,
    sessions: usize,
    general: usize,
}

impl LaneBudgets {
    /// Half for long polls, a quarter (at least one) for sessions, the rest (at least one)
    /// for everything else; caps below 3 count as 3.
    fn split(max_connections: usize) -> Self {
        let total = max_connections.max(3);
        let long_polls = total / 2;
        let sessions = (total / 4).max(1);
        Self {
            long_polls,
            sessions,
            general: total - long_polls - sessions,
        }
    }
}

/// Settings of every address transport of a registry.
#[derive(Debug, Clone)]
pub(crate) struct TransportConfig {
    /// Cap on requests in flight per address, split between the lanes.
    pub max_connections: usize,
    /// TCP + TLS handshake timeout.
    pub connect_timeout: Duration,
    /// Idle connections are closed after this long.
    pub idle_timeout: Duration,
    /// TLS options for `https` addresses.
    pub tls: TlsSettings,
    /// The address `tls.server_name` applies to.
    pub default_address: ConsulAddress,
    /// How often the TLS files are re-read.
    pub credentials_reload: Duration,
    /// Where session requests run; `None`: on the caller's runtime.
    pub session_runtime: Option<Handle>,
}

/// One transport per Consul address, created on first use and freed (its connections
/// closed) once no client handle uses it.
#[derive(Debug)]
pub(crate) struct TransportRegistry {
    config: TransportConfig,
    tls_config: OnceLock<Result<(Arc<ClientConfig>, TlsReload), String>>,
    /// Weak: the handles own the transports, so an address no election uses any more costs
    /// nothing.
    transports: Mutex<HashMap<ConsulAddress, Weak<AddressTransport>>>,
}

impl TransportRegistry {
    /// An empty registry.
    pub(crate) fn new(config: TransportConfig) -> Self {
        Self {
            config,
            tls_config: OnceLock::new(),
            transports: Mutex::new(HashMap::new()),
        }
    }

    /// The transport of `address`, created if needed. Fails only on TLS configuration errors.
    pub(crate) fn transport(
        &self,
        address: &ConsulAddress,
    ) -> Result<Arc<AddressTransport>, String> {
        let mut transports = self
            .transports
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        if let Some(transport) = transports.get(address).and_then(Weak::upgrade) {
            return Ok(transport);
        }
        transports.retain(|_, transport| transport.strong_count() > 0);
        let (tls, tls_reload) = if address.is_tls() {
            let (config, reload) = self
                .tls_config
                .get_or_init(|| {
                    tls::client_config(
                        &self.config.tls,
                        self.config.credentials_reload,
                        Instant::now(),
                    )
                })
                .clone()?;
            (config, Some(reload))
        } else {
            (tls::plain_http_config()?, None)
        };
        let server_name = match &self.config.tls.server_name {
            Some(name) if address.is_tls() && *address == self.config.default_address => {
                Some(name.as_str())
            }
            _ => None,
        };
        let transport = Arc::new(AddressTransport::new(
            address.clone(),
            server_name,
            &tls,
            tls_reload,
            &self.config,
        )?);
        transports.insert(address.clone(), Arc::downgrade(&transport));
        Ok(transport)
    }

    /// The reloading TLS files, once a TLS transport exists.
    pub(crate) fn tls_reload(&self) -> Option<&TlsReload> {
        match self.tls_config.get() {
            Some(Ok((_, reload))) => Some(reload),
            _ => None,
        }
    }

    /// How many addresses have a transport that some handle still uses.
    pub(crate) fn live_transports(&self) -> usize {
        self.transports
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
            .values()
            .filter(|transport| transport.strong_count() > 0)
            .count()
    }
}

/// Connections to one Consul address: a reqwest client for session requests, one for the
/// rest, and the lane budgets.
pub(crate) struct AddressTransport {
    address: ConsulAddress,
    /// `scheme://authority` of every request URL, parsed once.
    base_url: reqwest::Url,
    general: reqwest::Client,
    sessions: reqwest::Client,
    long_poll_permits: Semaphore,
    session_permits: Semaphore,
    general_permits: Semaphore,
    session_runtime: Option<Handle>,
    /// Told to re-read the TLS files when a handshake fails.
    tls_reload: Option<TlsReload>,
}

/// The URL of a request whose URI is a path and query: `base` (scheme and authority) with
/// them. Only the path and query are parsed, not the whole URL again.
fn request_url(base: &reqwest::Url, uri: &http::Uri) -> reqwest::Url {
    let mut url = base.clone();
    url.set_path(uri.path());
    url.set_query(uri.query());
    url
}

impl std::fmt::Debug for AddressTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AddressTransport")
            .field("address", &self.address)
            .field("base_url", &self.base_url)
            .field("long_polls", &self.long_poll_permits.available_permits())
            .field("sessions", &self.session_permits.available_permits())
            .field("general", &self.general_permits.available_permits())
            .finish_non_exhaustive()
    }
}

impl AddressTransport {
    fn new(
        address: ConsulAddress,
        server_name: Option<&str>,
        tls: &ClientConfig,
        tls_reload: Option<TlsReload>,
        config: &TransportConfig,
    ) -> Result<Self, String> {
        let budgets = LaneBudgets::split(config.max_connections);
        let scheme = if address.is_tls() { "https" } else { "http" };
        let base_url = match server_name {
            Some(name) => format!("{scheme}://{name}:{}", address.port()),
            None => format!("{scheme}://{}", address.authority()),
        };
        let base_url = reqwest::Url::parse(&base_url)
            .map_err(|error| format!("{address}: invalid base URL {base_url:?}: {error}"))?;
        let client = |idle: usize| {
            let mut builder = reqwest::Client::builder()
                .tls_backend_preconfigured(tls.clone())
                .connect_timeout(config.connect_timeout)
                .pool_idle_timeout(config.idle_timeout)
                .pool_max_idle_per_host(idle)
                // Latency matters more than segment count for small API calls.
                .tcp_nodelay(true)
                .http2_keep_alive_interval(HTTP2_PING_INTERVAL)
                .http2_keep_alive_timeout(config.connect_timeout)
                .http2_keep_alive_while_idle(true)
                .redirect(reqwest::redirect::Policy::none());
            if let Some(socket) = address.unix_socket() {
                // Unix sockets exist on Unix only; the kubectl plugin also runs on Windows.
                #[cfg(unix)]
                {
                    builder = builder.unix_socket(socket);
                }
                #[cfg(not(unix))]
                return Err(format!(
                    "{address}: Unix sockets ({}) are not available on this system",
                    socket.display()
                ));
            }
            if server_name.is_some() {
                builder = builder.dns_resolver(Arc::new(ToAddressHost {
                    host: address.host().to_owned(),
                    port: address.port(),
                }));
            }
            builder
                .build()
                .map_err(|error| format!("HTTP client for {address}: {}", chain(&error)))
        };
        Ok(Self {
            general: client(budgets.long_polls + budgets.general)?,
            sessions: client(budgets.sessions)?,
            long_poll_permits: Semaphore::new(budgets.long_polls),
            session_permits: Semaphore::new(budgets.sessions),
            general_permits: Semaphore::new(budgets.general),
            session_runtime: config.session_runtime.clone(),
            tls_reload,
            base_url,
            address,
        })
    }

    /// The address this transport connects to.
    pub(crate) fn address(&self) -> &ConsulAddress {
        &self.address
    }

    /// Sends `request` (whose URI is a path and query) within `lane`'s budget and reads the
    /// whole response body. Cancel-safe: if the future is dropped mid-request, the request is
    /// abandoned and its permit released. A write passes its `gate`, which the caller also
    /// checks: handed to the session runtime, it is checked there too, before every step of
    /// the exchange (after the wait for a permit, say), whether or not the caller's runtime
    /// still polls it.
    pub(crate) async fn send(
        self: &Arc<Self>,
        lane: Lane,
        request: Request<Bytes>,
        gate: Option<WriteGate>,
    ) -> Result<Response<Bytes>, TransportError> {
        match (&self.session_runtime, lane) {
            // From a task of another runtime (a reconcile): run there. A renewal task already
            // runs on the session runtime and exchanges in place.
            (Some(runtime), Lane::Session)
                if Handle::try_current().map(|current| current.id()).ok() != Some(runtime.id()) =>
            {
                let transport = self.clone();
                let task = AbortOnDrop(runtime.spawn(async move {
                    let exchange = transport.exchange(lane, request, gate.clone());
                    match gate {
                        Some(gate) => gate.bound(exchange).await.unwrap_or_else(|stopped| {
                            Err((TransportFailure::Io, stopped.to_string()))
                        }),
                        None => exchange.await,
                    }
                }));
                task.await.unwrap_or_else(|error| {
                    Err((
                        TransportFailure::Io,
                        format!("the session runtime stopped the request: {error}"),
                    ))
                })
            }
            _ => self.exchange(lane, request, gate).await,
        }
    }

    /// One request/response on this runtime; a write's body reads `gate` ([`GatedBody`]).
    async fn exchange(
        &self,
        lane: Lane,
        request: Request<Bytes>,
        gate: Option<WriteGate>,
    ) -> Result<Response<Bytes>, TransportError> {
        let (permits, client) = match lane {
            Lane::LongPoll => (&self.long_poll_permits, &self.general),
            Lane::Session => (&self.session_permits, &self.sessions),
            Lane::General => (&self.general_permits, &self.general),
        };
        // The semaphores are never closed.
        let _permit = permits
            .acquire()
            .await
            .map_err(|error| (TransportFailure::Connect, error.to_string()))?;
        let (parts, body) = request.into_parts();
        let url = request_url(&self.base_url, &parts.uri);
        let mut outgoing = reqwest::Request::new(parts.method, url);
        *outgoing.headers_mut() = parts.headers;
        *outgoing.body_mut() = Some(match gate {
            Some(gate) => reqwest::Body::wrap(GatedBody::new(gate, body)),
            None => body.into(),
        });
        let mut response = client
            .execute(outgoing)
            .await
            .map_err(|error| self.failure(error))?;
        let mut builder = Response::builder()
            .status(response.status())
            .version(response.version());
        if let Some(headers) = builder.headers_mut() {
            *headers = std::mem::take(response.headers_mut());
        }
        let body = read_body(&mut response).await.map_err(|error| {
            self.reread_tls_files_soon();
            (TransportFailure::Io, error)
        })?;
        drop(response);
        // reqwest puts the connection back into its pool from a background task: give it a
        // chance to run before the permit lets the next request look for an idle connection.
        tokio::task::yield_now().await;
        builder
            .body(body)
            .map_err(|error| (TransportFailure::Io, error.to_string()))
    }

    /// After a failed exchange: the certificate or the CA set in use may just have been
    /// rotated out, so the next attempt reads the TLS files again (unchanged ones are not
    /// parsed again). After any failure, not only a recognised handshake error: under TLS
    /// 1.3 the server refuses a client certificate with an alert that comes after the
    /// handshake, and over HTTP/2 it reaches us as a connection error whose TLS cause is only
    /// text.
    fn reread_tls_files_soon(&self) {
        if let Some(reload) = &self.tls_reload {
            reload.reload_soon();
        }
    }

    /// Classifies a reqwest error: connect (TCP or TLS handshake; nothing was sent), timeout,
    /// or a broken exchange.
    fn failure(&self, error: reqwest::Error) -> TransportError {
        let address = &self.address;
        let error = error.without_url();
        let detail = chain(&error);
        self.reread_tls_files_soon();
        if is_tls_failure(&error) {
            (
                TransportFailure::Connect,
                format!("TLS handshake with {address}: {detail}"),
            )
        } else if error.is_connect() {
            (
                TransportFailure::Connect,
                format!("connect to {address}: {detail}"),
            )
        } else if error.is_timeout() {
            (
                TransportFailure::Timeout,
                format!("request to {address}: {detail}"),
            )
        } else {
            (
                TransportFailure::Io,
                format!("request to {address}: {detail}"),
            )
        }
    }
}

/// Reads a whole response body, refusing bodies over [`MAX_RESPONSE_BODY`].
async fn read_body(response: &mut reqwest::Response) -> Result<Bytes, String> {
    let expected = response
        .content_length()
        .and_then(|length| usize::try_from(length).ok())
        .unwrap_or(0);
    let mut body = BytesMut::with_capacity(expected.min(MAX_RESPONSE_BODY));
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|error| format!("reading response body: {}", chain(&error.without_url())))?
    {
        if body.len() + chunk.len() > MAX_RESPONSE_BODY {
            return Err(format!(
                "response body larger than {MAX_RESPONSE_BODY} bytes"
            ));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body.freeze())
}

/// The error and its sources, `: `-separated.
fn chain(error: &reqwest::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// Whether rustls refused the handshake: a [`rustls::Error`] among the error's sources or
/// inside an I/O error among them.
fn is_tls_failure(error: &reqwest::Error) -> bool {
    fn is_rustls(error: &(dyn std::error::Error + 'static)) -> bool {
        if error.is::<rustls::Error>() {
            return true;
        }
        let wrapped = error
            .downcast_ref::<std::io::Error>()
            .and_then(std::io::Error::get_ref)
            .is_some_and(|inner| is_rustls(inner));
        wrapped || error.source().is_some_and(is_rustls)
    }
    error.source().is_some_and(is_rustls)
}

/// Resolves every name to the Consul address's own host, so that the URL can carry the TLS
/// server name while connections go where the address says.
struct ToAddressHost {
    host: String,
    port: u16,
}

impl reqwest::dns::Resolve for ToAddressHost {
    fn resolve(&self, _name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let target = (self.host.clone(), self.port);
        Box::pin(async move {
            let addrs = tokio::net::lookup_host(target).await?;
            let addrs: reqwest::dns::Addrs = Box::new(addrs.collect::<Vec<_>>().into_iter());
            Ok(addrs)
        })
    }
}

/// A task that is aborted when its awaiting caller goes away.
struct AbortOnDrop<T>(JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl<T> std::future::Future for AbortOnDrop<T> {
    type Output = Result<T, tokio::task::JoinError>;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        std::pin::Pin::new(&mut self.0).poll(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_url_is_the_one_its_whole_text_parses_to() {
        let bases = [
            "http://127.0.0.1:8500",
            "https://consul.example:8501",
            "http://[::1]:8500",
        ];
        let uris = [
            "/v1/session/renew/0c1b2a3d-1111-2222-3333-444455556666",
            "/v1/kv/elector/shop/web/leader?acquire=abc&flags=3304740253564472344",
            "/v1/kv/elector/shop/?recurse=&index=42&wait=6000ms&stale",
            "/v1/kv/a%20b/c%2Fd?dc=east%2D1",
            "/",
        ];
        for base in bases {
            let parsed = reqwest::Url::parse(base).unwrap();
            for uri in uris {
                let whole = reqwest::Url::parse(&format!("{base}{uri}")).unwrap();
                let uri: http::Uri = uri.parse().unwrap();
                assert_eq!(request_url(&parsed, &uri), whole, "{base} {uri}");
            }
        }
    }

    #[test]
    fn lanes_share_the_cap() {
        let default = LaneBudgets::split(64);
        assert_eq!(
            default,
            LaneBudgets {
                long_polls: 32,
                sessions: 16,
                general: 16
            }
        );
        for cap in 3..200 {
            let budgets = LaneBudgets::split(cap);
            assert_eq!(
                budgets.long_polls + budgets.sessions + budgets.general,
                cap,
                "{cap}"
            );
            assert!(budgets.long_polls >= 1 && budgets.sessions >= 1 && budgets.general >= 1);
            assert!(budgets.long_polls <= cap / 2, "{cap}");
        }
        for tiny in 0..3 {
            assert_eq!(LaneBudgets::split(tiny), LaneBudgets::split(3));
        }
    }

    /// Transports of a registry whose default address is `address`.
    fn registry(address: &ConsulAddress) -> TransportRegistry {
        TransportRegistry::new(TransportConfig {
            max_connections: 8,
            connect_timeout: Duration::from_secs(5),
            idle_timeout: Duration::from_secs(60),
            tls: TlsSettings::default(),
            default_address: address.clone(),
            credentials_reload: Duration::from_secs(60),
            session_runtime: None,
        })
    }

    #[tokio::test]
    async fn a_write_handed_to_its_connection_before_a_pause_is_not_sent_after_it() {
        let (address, server) = crate::write_gate::one_connection::serve().await;
        let address = ConsulAddress::parse(&format!("http://{address}"), false).expect("address");
        let registry = registry(&address);
        let transport = registry.transport(&address).expect("a transport");
        let gate = WriteGate::closed();
        gate.open_until(tokio::time::Instant::now() + Duration::from_secs(60));
        let renew = || {
            Request::put("/v1/session/renew/0c1b2a3d-1111-2222-3333-444455556666")
                .body(Bytes::new())
                .expect("a request")
        };
        let first = gate
            .bound(transport.send(Lane::General, renew(), Some(gate.clone())))
            .await
            .expect("the gate is open")
            .expect("the first write");
        assert_eq!(first.status(), 201);

        // The second one goes to the same (pooled) connection; the process stops right after
        // handing it over and resumes past its deadline. Its connection runs before the
        // write's own task does.
        let second = gate.bound(transport.send(Lane::General, renew(), Some(gate.clone())));
        let mut second = std::pin::pin!(second);
        assert!(futures::poll!(&mut second).is_pending());
        gate.close();
        let arrived = server.await.expect("the server");
        assert_eq!(
            arrived, "",
            "the write reached the socket after the gate closed"
        );
        assert_eq!(
            second.await.map(|_| ()),
            Err(crate::write_gate::NotActive::Cancelled)
        );
    }
}
