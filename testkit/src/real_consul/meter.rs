//! An HTTP proxy in front of a real Consul that counts what its clients ask, with the
//! emulator's own counters ([`Stats`]: requests per endpoint, connections open at once), so
//! the benchmark driver reports the same figures on both. It also notes when each session
//! was last renewed (a real Consul does not say), and can drop every request's connection
//! as the emulator's `FaultAction::DropConnection` does.
//!
//! Each client connection gets exactly one connection to Consul, opened when the client
//! connects, so Consul sees as many connections as the client opens.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http::{Method, Request, Response};
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::error::RealConsulError;
use crate::consul::{Query, Route, Stats, StatsCollector, lock, request_token};

/// The proxy; it stops accepting and closes every connection when dropped.
#[derive(Debug)]
pub struct Meter {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop: watch::Sender<bool>,
    accept: JoinHandle<()>,
}

#[derive(Debug)]
struct Shared {
    upstream: SocketAddr,
    stats: StatsCollector,
    started: Instant,
    /// Session ID -> when (since `started`) its last successful renewal was asked for.
    renewals: Mutex<HashMap<String, Duration>>,
    dropping: AtomicBool,
}

/// Why a request was not forwarded; hyper closes the client's connection on it.
#[derive(Debug, thiserror::Error)]
enum ForwardError {
    #[error("connection dropped: Consul is cut off")]
    Dropped,
    #[error("forwarding to consul: {0}")]
    Upstream(#[from] hyper::Error),
}

impl Meter {
    /// Listens on a free loopback port and forwards to `upstream` (a Consul HTTP port).
    pub async fn start(upstream: SocketAddr) -> Result<Self, RealConsulError> {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(RealConsulError::io("binding the consul meter"))?;
        let addr = listener
            .local_addr()
            .map_err(RealConsulError::io("reading the meter's port"))?;
        let shared = Arc::new(Shared {
            upstream,
            stats: StatsCollector::default(),
            started: Instant::now(),
            renewals: Mutex::new(HashMap::new()),
            dropping: AtomicBool::new(false),
        });
        let stop = watch::Sender::new(false);
        let accept = tokio::spawn({
            let shared = Arc::clone(&shared);
            let stop = stop.subscribe();
            async move {
                while let Ok((client, _)) = listener.accept().await {
                    tokio::spawn(serve(Arc::clone(&shared), client, stop.clone()));
                }
            }
        });
        Ok(Self {
            addr,
            shared,
            stop,
            accept,
        })
    }

    /// `http://127.0.0.1:<port>`: what the operator is given.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The counters since the start or the last [`Meter::reset_stats`].
    pub fn stats(&self) -> Stats {
        self.shared.stats.snapshot()
    }

    /// Zeroes the counters (maxima restart from the current gauges).
    pub fn reset_stats(&self) {
        self.shared.stats.reset();
    }

    /// When (time since the meter started) the last renewal of `session` that Consul
    /// accepted was asked for; `None` when none was seen.
    pub fn last_renewal(&self, session: &str) -> Option<Duration> {
        lock(&self.shared.renewals).get(session).copied()
    }

    /// `true`: every request from now on is answered by closing its connection, as if Consul
    /// were unreachable; `false`: forwarded again.
    pub fn set_dropping(&self, dropping: bool) {
        self.shared.dropping.store(dropping, Ordering::SeqCst);
    }
}

impl Drop for Meter {
    fn drop(&mut self) {
        self.accept.abort();
        self.stop.send_replace(true);
    }
}

/// One client connection, with its own connection to Consul.
async fn serve(shared: Arc<Shared>, client: TcpStream, mut stop: watch::Receiver<bool>) {
    let _open = shared.stats.open_connection();
    let upstream = match TcpStream::connect(shared.upstream).await {
        Ok(upstream) => upstream,
        Err(error) => {
            tracing::debug!(%error, "meter: cannot connect to consul");
            return;
        }
    };
    let (sender, connection) =
        match hyper::client::conn::http1::handshake(TokioIo::new(upstream)).await {
            Ok(pair) => pair,
            Err(error) => {
                tracing::debug!(%error, "meter: handshake with consul failed");
                return;
            }
        };
    let driver = tokio::spawn(connection);
    let sender = Arc::new(tokio::sync::Mutex::new(sender));
    let service =
        service_fn(move |request| forward(Arc::clone(&shared), Arc::clone(&sender), request));
    let connection = http1::Builder::new().serve_connection(TokioIo::new(client), service);
    tokio::select! {
        result = connection => {
            if let Err(error) = result {
                tracing::debug!(%error, "meter: client connection ended with an error");
            }
        }
        _ = stop.wait_for(|stop| *stop) => {}
    }
    driver.abort();
}

/// Counts `request` as the emulator would, forwards it and notes accepted renewals.
async fn forward(
    shared: Arc<Shared>,
    sender: Arc<tokio::sync::Mutex<SendRequest<Incoming>>>,
    request: Request<Incoming>,
) -> Result<Response<Incoming>, ForwardError> {
    let route = Route::classify(request.uri().path());
    let token = request_token(&Query::parse(request.uri().query()), request.headers());
    let _in_flight = shared.stats.begin_request(
        route.stats_name(request.method()),
        token.as_deref(),
        request.method() != Method::GET,
    );
    if shared.dropping.load(Ordering::SeqCst) {
        return Err(ForwardError::Dropped);
    }
    let asked = shared.started.elapsed();
    let response = {
        let mut sender = sender.lock().await;
        sender.ready().await?;
        sender.send_request(request)
    }
    .await?;
    if let Route::SessionRenew(session) = route
        && response.status().is_success()
    {
        lock(&shared.renewals).insert(session, asked);
    }
    Ok(response)
}
