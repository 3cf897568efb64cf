//! Per-address connection pools with one strict cap on both open connections and in-flight
//! requests, shared by every client handle derived from one root [`super::ConsulClient`].
//!
//! # Why not reqwest's pool
//!
//! The cap must hold however many callers there are, and it is measured on the server as
//! simultaneously open TCP connections. reqwest (through hyper-util's legacy pool) cannot
//! guarantee that: after a response body ends, the connection goes back to the idle pool from a
//! spawned task, and a request that finds the pool empty in that window races a *new* connect
//! against the checkout; when the checkout wins, the new connection is still completed in the
//! background and kept. A semaphore around requests therefore bounds in-flight requests but not
//! connections: measured against the emulator with 1,000 concurrent callers, reqwest with
//! `pool_max_idle_per_host(cap)`, HTTP/1 only and a `cap`-permit semaphore held until the body
//! was read reached 71 connections for a cap of 64 and 10 for a cap of 8. reqwest's
//! `connector_layer` cannot fix it either: a layer must return reqwest's
//! sealed `Conn` type, so it cannot attach a permit that lives as long as the connection.
//!
//! # How the cap is enforced here
//!
//! Each Consul address gets an [`AddressPool`] with two semaphores of `cap` permits:
//! - `requests`: taken before a connection is checked out, released only after the response body
//!   has been read completely (or the request failed). It bounds in-flight requests.
//! - `connections`: taken before a TCP connect and **moved into the task that drives the
//!   connection**, next to the socket. The permit is dropped right after the socket, when that task
//!   ends (the server closed the connection, an error, or [`tokio::task::JoinHandle::abort`]
//!   when the client discards it). The number of sockets this process has open to an address
//!   can therefore never exceed `cap`, by construction rather than by timing.
//!
//! A request holding a `requests` permit first reuses an idle connection; only when none is idle
//! does it wait for a `connections` permit, and it stops waiting as soon as a connection is
//! returned to the idle list. Because at most `cap - 1` other requests hold connections, one is
//! always idle or closing, so the wait is short. Connections are HTTP/1.1 with keep-alive and are
//! never closed on the success path, so the server sees at most `cap` connections; on error paths a
//! socket closed here may be noticed by the server a moment after the next one is accepted.
//!
//! Blocking queries hold their permits for the whole wait: run few of them (one recursive
//! query per prefix), or they starve other requests of the same address.

use std::collections::HashMap;
use std::pin::pin;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full, Limited};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use rustls::ClientConfig;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_rustls::TlsConnector;

use super::error::TransportFailure;
use super::settings::{ConsulAddress, TlsSettings};
use super::tls;

/// Largest response body accepted (a recursive read of 10,000 election keys is a few MiB).
const MAX_RESPONSE_BODY: usize = 64 * 1024 * 1024;

/// A transport failure: the phase and the underlying error text.
pub(crate) type TransportError = (TransportFailure, String);

/// Settings of every pool of a registry.
#[derive(Debug, Clone)]
pub(crate) struct PoolConfig {
    /// Cap on connections and on in-flight requests per address.
    pub max_connections: usize,
    /// TCP + TLS + HTTP handshake timeout.
    pub connect_timeout: Duration,
    /// Idle connections older than this are closed instead of reused.
    pub idle_timeout: Duration,
    /// TLS options for `https` addresses.
    pub tls: TlsSettings,
    /// The address `tls.server_name` applies to.
    pub default_address: ConsulAddress,
}

/// One pool per Consul address, created on first use and freed (its connections closed) once no
/// client handle uses it.
#[derive(Debug)]
pub(crate) struct PoolRegistry {
    config: PoolConfig,
    tls_config: OnceLock<Result<Arc<ClientConfig>, String>>,
    /// Weak: the handles own the pools, so an address no election uses any more costs nothing.
    pools: Mutex<HashMap<ConsulAddress, Weak<AddressPool>>>,
}

impl PoolRegistry {
    /// An empty registry.
    pub(crate) fn new(config: PoolConfig) -> Self {
        Self {
            config,
            tls_config: OnceLock::new(),
            pools: Mutex::new(HashMap::new()),
        }
    }

    /// The pool of `address`, created if needed. Fails only on TLS configuration errors.
    pub(crate) fn pool(&self, address: &ConsulAddress) -> Result<Arc<AddressPool>, String> {
        let mut pools = self
            .pools
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        if let Some(pool) = pools.get(address).and_then(Weak::upgrade) {
            return Ok(pool);
        }
        pools.retain(|_, pool| pool.strong_count() > 0);
        let tls = if address.is_tls() {
            let config = self
                .tls_config
                .get_or_init(|| tls::client_config(&self.config.tls))
                .clone()?;
            let name = match &self.config.tls.server_name {
                Some(name) if *address == self.config.default_address => name.as_str(),
                _ => address.host(),
            };
            Some((TlsConnector::from(config), tls::server_name(name)?))
        } else {
            None
        };
        let pool = Arc::new(AddressPool::new(address.clone(), tls, &self.config));
        pools.insert(address.clone(), Arc::downgrade(&pool));
        Ok(pool)
    }

    /// How many addresses have a pool that some handle still uses.
    pub(crate) fn live_pools(&self) -> usize {
        self.pools
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
            .values()
            .filter(|pool| pool.strong_count() > 0)
            .count()
    }
}

/// Connections to one Consul address.
pub(crate) struct AddressPool {
    address: ConsulAddress,
    tls: Option<(TlsConnector, ServerName<'static>)>,
    requests: Arc<Semaphore>,
    connections: Arc<Semaphore>,
    idle: Mutex<Vec<IdleConnection>>,
    returned: Notify,
    connect_timeout: Duration,
    idle_timeout: Duration,
}

impl std::fmt::Debug for AddressPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AddressPool")
            .field("address", &self.address)
            .field("available_requests", &self.requests.available_permits())
            .field(
                "available_connections",
                &self.connections.available_permits(),
            )
            .finish_non_exhaustive()
    }
}

/// A live HTTP/1 connection: the request handle and the task that owns the socket (and the
/// `connections` permit).
struct Connection {
    sender: SendRequest<Full<Bytes>>,
    task: JoinHandle<()>,
}

impl Connection {
    /// Closes the socket (asynchronously; the permit goes with it).
    fn close(self) {
        self.task.abort();
    }
}

struct IdleConnection {
    connection: Connection,
    since: Instant,
}

/// The state moved into a connection's task. Fields drop in order: the socket first, then the
/// permit, so the permit is never free while the socket is open.
struct ConnectionTask<C> {
    connection: C,
    _permit: OwnedSemaphorePermit,
}

/// Byte streams a connection can run on (TCP or TLS over TCP).
trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// What went wrong with one request on one connection.
enum ExchangeError {
    /// The connection was unusable before the request was written; the request comes back.
    NotSent(Box<Request<Full<Bytes>>>, String),
    /// The request may have been sent.
    Failed(String),
}

impl Drop for AddressPool {
    /// Closes the idle connections of a pool no handle uses any more.
    fn drop(&mut self) {
        let idle = self
            .idle
            .get_mut()
            .unwrap_or_else(|poison| poison.into_inner());
        for entry in idle.drain(..) {
            entry.connection.close();
        }
    }
}

impl AddressPool {
    fn new(
        address: ConsulAddress,
        tls: Option<(TlsConnector, ServerName<'static>)>,
        config: &PoolConfig,
    ) -> Self {
        let cap = config.max_connections.max(1);
        Self {
            address,
            tls,
            requests: Arc::new(Semaphore::new(cap)),
            connections: Arc::new(Semaphore::new(cap)),
            idle: Mutex::new(Vec::new()),
            returned: Notify::new(),
            connect_timeout: config.connect_timeout,
            idle_timeout: config.idle_timeout,
        }
    }

    /// The address this pool connects to.
    pub(crate) fn address(&self) -> &ConsulAddress {
        &self.address
    }

    /// Sends `request` and reads the whole response body, within the cap. Cancel-safe: if the
    /// future is dropped mid-request, the connection is closed and both permits are released.
    pub(crate) async fn send(
        &self,
        mut request: Request<Full<Bytes>>,
    ) -> Result<Response<Bytes>, TransportError> {
        let _request_permit = self
            .requests
            .acquire()
            .await
            .map_err(|error| (TransportFailure::Connect, error.to_string()))?;
        loop {
            let (mut lease, reused) = self.checkout().await?;
            match lease.exchange(request).await {
                Ok(response) => {
                    self.check_in(lease);
                    return Ok(response);
                }
                // A pooled connection that the server closed while idle: try a fresh one.
                Err(ExchangeError::NotSent(unsent, _)) if reused => request = *unsent,
                Err(ExchangeError::NotSent(_, detail)) => {
                    return Err((TransportFailure::Connect, detail));
                }
                Err(ExchangeError::Failed(detail)) => return Err((TransportFailure::Io, detail)),
            }
        }
    }

    /// An idle connection (`true`) or a new one (`false`).
    async fn checkout(&self) -> Result<(Lease, bool), TransportError> {
        loop {
            let mut returned = pin!(self.returned.notified());
            returned.as_mut().enable();
            if let Some(connection) = self.take_idle() {
                return Ok((Lease(Some(connection)), true));
            }
            tokio::select! {
                permit = self.connections.clone().acquire_owned() => {
                    let permit = permit
                        .map_err(|error| (TransportFailure::Connect, error.to_string()))?;
                    return Ok((Lease(Some(self.connect(permit).await?)), false));
                }
                () = returned => {}
            }
        }
    }

    /// The most recently returned live idle connection; stale ones are closed on the way.
    fn take_idle(&self) -> Option<Connection> {
        let mut idle = self
            .idle
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        while let Some(entry) = idle.pop() {
            if entry.since.elapsed() < self.idle_timeout && !entry.connection.sender.is_closed() {
                return Some(entry.connection);
            }
            entry.connection.close();
        }
        None
    }

    /// Returns a connection whose exchange completed to the idle list.
    fn check_in(&self, mut lease: Lease) {
        let Some(connection) = lease.0.take() else {
            return;
        };
        if connection.sender.is_closed() {
            connection.close();
        } else {
            self.idle
                .lock()
                .unwrap_or_else(|poison| poison.into_inner())
                .push(IdleConnection {
                    connection,
                    since: Instant::now(),
                });
        }
        self.returned.notify_one();
    }

    /// Opens a connection that owns `permit` until its socket is closed.
    async fn connect(&self, permit: OwnedSemaphorePermit) -> Result<Connection, TransportError> {
        let connect = async {
            let tcp = TcpStream::connect((self.address.host(), self.address.port()))
                .await
                .map_err(|error| format!("connect to {}: {error}", self.address))?;
            // Latency matters more than segment count for small API calls.
            tcp.set_nodelay(true)
                .map_err(|error| format!("connect to {}: {error}", self.address))?;
            let io: Box<dyn Io> = match &self.tls {
                Some((connector, name)) => Box::new(
                    connector
                        .connect(name.clone(), tcp)
                        .await
                        .map_err(|error| format!("TLS handshake with {}: {error}", self.address))?,
                ),
                None => Box::new(tcp),
            };
            hyper::client::conn::http1::handshake(TokioIo::new(io))
                .await
                .map_err(|error| format!("HTTP handshake with {}: {error}", self.address))
        };
        let (sender, connection) = tokio::time::timeout(self.connect_timeout, connect)
            .await
            .map_err(|_| {
                (
                    TransportFailure::Connect,
                    format!(
                        "connect to {} timed out after {:?}",
                        self.address, self.connect_timeout
                    ),
                )
            })?
            .map_err(|detail| (TransportFailure::Connect, detail))?;
        let mut task = ConnectionTask {
            connection,
            _permit: permit,
        };
        let task = tokio::spawn(async move {
            if let Err(error) = (&mut task.connection).await {
                tracing::debug!(%error, "consul connection closed with an error");
            }
        });
        Ok(Connection { sender, task })
    }
}

/// A connection checked out by one request. Dropping it without [`AddressPool::check_in`]
/// (error, timeout, cancellation) closes the connection: its state is unknown.
struct Lease(Option<Connection>);

impl Lease {
    /// One request/response on this connection, reading the whole body.
    async fn exchange(
        &mut self,
        request: Request<Full<Bytes>>,
    ) -> Result<Response<Bytes>, ExchangeError> {
        let Some(connection) = self.0.as_mut() else {
            return Err(ExchangeError::NotSent(
                Box::new(request),
                "no connection".to_owned(),
            ));
        };
        if let Err(error) = connection.sender.ready().await {
            return Err(ExchangeError::NotSent(Box::new(request), error.to_string()));
        }
        let response = match connection.sender.try_send_request(request).await {
            Ok(response) => response,
            Err(mut error) => {
                return Err(match error.take_message() {
                    Some(request) => {
                        ExchangeError::NotSent(Box::new(request), error.into_error().to_string())
                    }
                    None => ExchangeError::Failed(error.into_error().to_string()),
                });
            }
        };
        let (parts, body) = response.into_parts();
        let body = Limited::new(body, MAX_RESPONSE_BODY)
            .collect()
            .await
            .map_err(|error| ExchangeError::Failed(format!("reading response body: {error}")))?
            .to_bytes();
        Ok(Response::from_parts(parts, body))
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Some(connection) = self.0.take() {
            connection.close();
        }
    }
}
