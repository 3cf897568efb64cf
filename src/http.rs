//! The admin HTTP server: `/metrics` (OpenMetrics text), `/livez` and `/readyz`.
//!
//! Health is real, not a constant and not fed by a timer: liveness fails when the controller
//! has stopped, when a reconcile has been running for longer than the liveness timeout, or
//! when a background loop with work to do (the session renewer, the lock watcher) is behind
//! its own schedule by more than the liveness timeout. An idle operator is live. Readiness
//! fails until every registered component (caches, Consul) reports ready.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use http::header::{ALLOW, CACHE_CONTROL, CONTENT_TYPE};
use http::{HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::metrics::Metrics;

/// Content type of `/metrics`.
pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Content type of every other response.
const TEXT_CONTENT_TYPE: &str = "text/plain; charset=utf-8";

/// How long open connections get to finish after shutdown before they are dropped.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Pause after a failed `accept` (for example too many open files) before accepting again.
const ACCEPT_ERROR_BACKOFF: Duration = Duration::from_millis(100);

/// Liveness and readiness of the process, updated by the controller. Cheap to clone: every
/// clone shares the same state.
#[derive(Clone)]
pub struct Health {
    inner: Arc<HealthInner>,
}

impl std::fmt::Debug for Health {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Health")
            .field("liveness_timeout", &self.inner.liveness_timeout)
            .finish_non_exhaustive()
    }
}

/// How far behind its schedule a background loop is (`None`: on time or idle).
pub type ProgressCheck = Arc<dyn Fn(Instant) -> Option<Duration> + Send + Sync>;

struct HealthInner {
    liveness_timeout: Duration,
    state: Mutex<HealthState>,
}

struct HealthState {
    stopped: Option<&'static str>,
    components: BTreeMap<&'static str, bool>,
    /// Background loops and how to ask each how late it is.
    loops: Vec<(&'static str, ProgressCheck)>,
    /// Start of every reconcile in flight.
    reconciles: BTreeMap<u64, Instant>,
    next_reconcile: u64,
}

/// Marks one reconcile in flight until dropped (see [`Health::reconcile_started`]).
#[must_use = "the reconcile counts as running until the guard is dropped"]
pub struct ReconcileInFlight {
    health: Health,
    id: u64,
}

impl Drop for ReconcileInFlight {
    fn drop(&mut self) {
        self.health.state().reconciles.remove(&self.id);
    }
}

impl Health {
    /// Health that is live and not ready: no component has registered yet.
    pub fn new(liveness_timeout: Duration) -> Health {
        Health {
            inner: Arc::new(HealthInner {
                liveness_timeout,
                state: Mutex::new(HealthState {
                    stopped: None,
                    components: BTreeMap::new(),
                    loops: Vec::new(),
                    reconciles: BTreeMap::new(),
                    next_reconcile: 0,
                }),
            }),
        }
    }

    /// Counts a reconcile as running until the returned guard is dropped: `/livez` fails
    /// while one has been running for the liveness timeout (a hung request, a deadlock).
    pub fn reconcile_started(&self) -> ReconcileInFlight {
        let mut state = self.state();
        let id = state.next_reconcile;
        state.next_reconcile += 1;
        state.reconciles.insert(id, Instant::now());
        ReconcileInFlight {
            health: self.clone(),
            id,
        }
    }

    /// Watches background loop `name`: `/livez` fails while `behind` says it is late by
    /// the liveness timeout or more.
    pub fn watch_loop(&self, name: &'static str, behind: ProgressCheck) {
        self.state().loops.push((name, behind));
    }

    /// Reports that the controller has stopped (its stream ended): `/livez` fails from now on,
    /// with `reason` in its body.
    pub fn mark_stopped(&self, reason: &'static str) {
        self.state().stopped = Some(reason);
    }

    /// Registers `component` (for example `pods-cache` or `consul`) and sets whether it is
    /// ready. `/readyz` succeeds only when at least one component is registered and all are
    /// ready.
    pub fn set_ready(&self, component: &'static str, ready: bool) {
        self.state().components.insert(component, ready);
    }

    /// `Ok` when live, else why not.
    fn liveness(&self) -> Result<(), String> {
        let timeout = self.inner.liveness_timeout;
        let now = Instant::now();
        let (stopped, oldest, loops) = {
            let state = self.state();
            (
                state.stopped,
                state.reconciles.values().min().copied(),
                state.loops.clone(),
            )
        };
        if let Some(reason) = stopped {
            return Err(format!("stopped: {reason}"));
        }
        if let Some(started) = oldest {
            let running = now.saturating_duration_since(started);
            if running >= timeout {
                return Err(format!(
                    "a reconcile has been running for {:.1}s (timeout {:.1}s)",
                    running.as_secs_f64(),
                    timeout.as_secs_f64()
                ));
            }
        }
        // Checked outside the lock: the checks take their own components' locks.
        for (name, behind) in loops {
            if let Some(late) = behind(now).filter(|late| *late >= timeout) {
                return Err(format!(
                    "{name} is {:.1}s behind its schedule (timeout {:.1}s)",
                    late.as_secs_f64(),
                    timeout.as_secs_f64()
                ));
            }
        }
        Ok(())
    }

    /// `Ok` when ready, else why not.
    fn readiness(&self) -> Result<(), String> {
        let state = self.state();
        if state.components.is_empty() {
            return Err("not ready: no component registered yet".to_owned());
        }
        let waiting: Vec<&str> = state
            .components
            .iter()
            .filter(|&(_, &ready)| !ready)
            .map(|(&name, _)| name)
            .collect();
        if waiting.is_empty() {
            Ok(())
        } else {
            Err(format!("not ready: {}", waiting.join(", ")))
        }
    }

    fn state(&self) -> MutexGuard<'_, HealthState> {
        // Every update is a single assignment, so a poisoned state is still consistent.
        self.inner
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// Binds `addr` and serves until `shutdown` resolves, then lets open requests finish (for a
/// few seconds at most).
pub async fn serve(
    addr: SocketAddr,
    metrics: Metrics,
    health: Health,
    shutdown: impl Future<Output = ()>,
) -> io::Result<()> {
    let (_, server) = bind(addr, metrics, health, shutdown).await?;
    server.await;
    Ok(())
}

/// Binds `addr` and returns the bound address (useful with port 0) and the server, which runs
/// when awaited, until `shutdown` resolves; open requests then get a few seconds to finish.
pub async fn bind(
    addr: SocketAddr,
    metrics: Metrics,
    health: Health,
    shutdown: impl Future<Output = ()>,
) -> io::Result<(SocketAddr, impl Future<Output = ()>)> {
    let listener = TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    Ok((bound, run(listener, metrics, health, shutdown)))
}

async fn run(
    listener: TcpListener,
    metrics: Metrics,
    health: Health,
    shutdown: impl Future<Output = ()>,
) {
    let graceful = GracefulShutdown::new();
    let mut connections = JoinSet::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let metrics = metrics.clone();
                    let health = health.clone();
                    let service = service_fn(move |request: Request<hyper::body::Incoming>| {
                        let response =
                            respond(request.method(), request.uri().path(), &metrics, &health);
                        async move { Ok::<_, Infallible>(response) }
                    });
                    let connection = http1::Builder::new()
                        .timer(TokioTimer::new())
                        .serve_connection(TokioIo::new(stream), service);
                    let connection = graceful.watch(connection);
                    connections.spawn(async move {
                        if let Err(error) = connection.await {
                            tracing::debug!(%peer, %error, "admin connection failed");
                        }
                    });
                }
                Err(error) => {
                    tracing::warn!(%error, "admin server cannot accept connections");
                    tokio::time::sleep(ACCEPT_ERROR_BACKOFF).await;
                }
            },
            // Reaps finished connections so the set does not grow.
            Some(_) = connections.join_next() => {}
            () = &mut shutdown => break,
        }
    }
    drop(listener);
    // Idle connections close at once, busy ones after their current response.
    if tokio::time::timeout(SHUTDOWN_GRACE, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            open = connections.len(),
            "admin connections did not finish in time; dropping them"
        );
    }
    connections.shutdown().await;
}

/// The response to `method path`.
fn respond(
    method: &Method,
    path: &str,
    metrics: &Metrics,
    health: &Health,
) -> Response<Full<Bytes>> {
    let endpoint = match path {
        "/metrics" => Endpoint::Metrics,
        "/livez" => Endpoint::Livez,
        "/readyz" => Endpoint::Readyz,
        _ => return text(StatusCode::NOT_FOUND, "not found".to_owned()),
    };
    if method != Method::GET {
        let mut response = text(
            StatusCode::METHOD_NOT_ALLOWED,
            "method not allowed".to_owned(),
        );
        response
            .headers_mut()
            .insert(ALLOW, HeaderValue::from_static("GET"));
        return response;
    }
    match endpoint {
        Endpoint::Metrics => {
            let mut response = Response::new(Full::new(Bytes::from(metrics.encode())));
            response.headers_mut().insert(
                CONTENT_TYPE,
                HeaderValue::from_static(OPENMETRICS_CONTENT_TYPE),
            );
            response
        }
        Endpoint::Livez => check(health.liveness()),
        Endpoint::Readyz => check(health.readiness()),
    }
}

/// The admin endpoints.
enum Endpoint {
    Metrics,
    Livez,
    Readyz,
}

/// `200 ok`, or `503` with the reason.
fn check(result: Result<(), String>) -> Response<Full<Bytes>> {
    match result {
        Ok(()) => text(StatusCode::OK, "ok".to_owned()),
        Err(reason) => text(StatusCode::SERVICE_UNAVAILABLE, reason),
    }
}

/// A plain-text, uncacheable response (the body gets a trailing newline).
fn text(status: StatusCode, mut body: String) -> Response<Full<Bytes>> {
    body.push('\n');
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(TEXT_CONTENT_TYPE));
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;
    use tokio::sync::oneshot;
    use tokio::task::JoinHandle;

    use super::*;

    const TIMEOUT: Duration = Duration::from_secs(60);

    /// A response as the test sees it.
    #[derive(Debug)]
    struct Reply {
        status: u16,
        head: String,
        body: String,
    }

    impl Reply {
        fn header(&self, name: &str) -> Option<&str> {
            self.head.lines().skip(1).find_map(|line| {
                let (key, value) = line.split_once(':')?;
                key.eq_ignore_ascii_case(name).then(|| value.trim())
            })
        }
    }

    /// A running server and what stops it.
    struct Server {
        addr: SocketAddr,
        stop: oneshot::Sender<()>,
        task: JoinHandle<()>,
    }

    async fn start(metrics: Metrics, health: Health) -> Server {
        let (stop, stopped) = oneshot::channel::<()>();
        let shutdown = async move {
            let _ = stopped.await;
        };
        let (addr, server) = bind((Ipv4Addr::LOCALHOST, 0).into(), metrics, health, shutdown)
            .await
            .expect("bind to a free loopback port");
        Server {
            addr,
            stop,
            task: tokio::spawn(server),
        }
    }

    /// Sends one HTTP/1.1 request on a fresh connection and reads the whole response.
    async fn request(addr: SocketAddr, method: &str, path: &str) -> Reply {
        let mut stream = TcpStream::connect(addr).await.expect("connect");
        let head = format!("{method} {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n");
        stream.write_all(head.as_bytes()).await.expect("send");
        let mut raw = String::new();
        stream.read_to_string(&mut raw).await.expect("receive");
        let (head, body) = raw.split_once("\r\n\r\n").expect("a header block");
        let status = head
            .split(' ')
            .nth(1)
            .and_then(|code| code.parse().ok())
            .expect("a status line");
        Reply {
            status,
            head: head.to_owned(),
            body: body.to_owned(),
        }
    }

    /// Moves tokio's clock forward by `duration` while nothing waits on I/O, then lets it run on.
    async fn jump_clock(duration: Duration) {
        tokio::time::pause();
        tokio::time::advance(duration).await;
        tokio::time::resume();
    }

    #[tokio::test]
    async fn serves_metrics_in_the_openmetrics_format() {
        let metrics = Metrics::new();
        metrics.set_sessions(3);
        let server = start(metrics, Health::new(TIMEOUT)).await;

        let reply = request(server.addr, "GET", "/metrics").await;
        assert_eq!(reply.status, 200, "{reply:?}");
        assert_eq!(reply.header("content-type"), Some(OPENMETRICS_CONTENT_TYPE));
        assert!(
            reply.body.contains("\nconsul_elector_sessions 3\n"),
            "{}",
            reply.body
        );
        assert!(reply.body.ends_with("# EOF\n"), "{}", reply.body);
    }

    #[tokio::test]
    async fn unknown_paths_and_other_methods_are_refused() {
        let server = start(Metrics::new(), Health::new(TIMEOUT)).await;

        let reply = request(server.addr, "GET", "/").await;
        assert_eq!((reply.status, reply.body.as_str()), (404, "not found\n"));
        let reply = request(server.addr, "GET", "/metricsz").await;
        assert_eq!(reply.status, 404);
        for path in ["/metrics", "/livez", "/readyz"] {
            let reply = request(server.addr, "POST", path).await;
            assert_eq!(reply.status, 405, "POST {path}");
            assert_eq!(reply.header("allow"), Some("GET"));
        }
    }

    #[tokio::test]
    async fn liveness_fails_while_a_reconcile_hangs() {
        let health = Health::new(TIMEOUT);
        let server = start(Metrics::new(), health.clone()).await;

        let reply = request(server.addr, "GET", "/livez").await;
        assert_eq!((reply.status, reply.body.as_str()), (200, "ok\n"));

        // Idle for longer than the timeout: still live.
        jump_clock(TIMEOUT + Duration::from_secs(1)).await;
        let reply = request(server.addr, "GET", "/livez").await;
        assert_eq!(reply.status, 200, "an idle operator is live");

        let quick = health.reconcile_started();
        drop(quick);
        let hung = health.reconcile_started();
        jump_clock(TIMEOUT - Duration::from_secs(1)).await;
        let reply = request(server.addr, "GET", "/livez").await;
        assert_eq!(reply.status, 200);
        jump_clock(Duration::from_secs(2)).await;
        let reply = request(server.addr, "GET", "/livez").await;
        assert_eq!(reply.status, 503, "{reply:?}");
        assert!(
            reply.body.starts_with("a reconcile has been running for 6"),
            "{}",
            reply.body
        );
        assert!(reply.body.ends_with("(timeout 60.0s)\n"), "{}", reply.body);
        drop(hung);
        let reply = request(server.addr, "GET", "/livez").await;
        assert_eq!(reply.status, 200, "live again once it finished");
    }

    #[tokio::test]
    async fn liveness_fails_while_a_loop_is_behind() {
        let health = Health::new(TIMEOUT);
        let late = Arc::new(Mutex::new(None::<Duration>));
        let reported = late.clone();
        health.watch_loop(
            "session renewer",
            Arc::new(move |_| *reported.lock().unwrap_or_else(PoisonError::into_inner)),
        );
        assert_eq!(health.liveness(), Ok(()));
        *late.lock().unwrap_or_else(PoisonError::into_inner) = Some(TIMEOUT / 2);
        assert_eq!(health.liveness(), Ok(()), "late, but within the timeout");
        *late.lock().unwrap_or_else(PoisonError::into_inner) = Some(TIMEOUT);
        assert_eq!(
            health.liveness(),
            Err("session renewer is 60.0s behind its schedule (timeout 60.0s)".to_owned())
        );
    }

    #[tokio::test]
    async fn liveness_fails_once_stopped() {
        let health = Health::new(TIMEOUT);
        let server = start(Metrics::new(), health.clone()).await;

        health.mark_stopped("controller stream ended");
        let reply = request(server.addr, "GET", "/livez").await;
        assert_eq!(
            (reply.status, reply.body.as_str()),
            (503, "stopped: controller stream ended\n")
        );
    }

    #[tokio::test]
    async fn readiness_needs_every_registered_component() {
        let health = Health::new(TIMEOUT);
        let server = start(Metrics::new(), health.clone()).await;
        let readyz = || request(server.addr, "GET", "/readyz");

        let reply = readyz().await;
        assert_eq!(
            (reply.status, reply.body.as_str()),
            (503, "not ready: no component registered yet\n")
        );

        health.set_ready("pods-cache", false);
        health.set_ready("leaderelections-cache", false);
        health.set_ready("consul", true);
        let reply = readyz().await;
        assert_eq!(
            (reply.status, reply.body.as_str()),
            (503, "not ready: leaderelections-cache, pods-cache\n")
        );

        health.set_ready("leaderelections-cache", true);
        let reply = readyz().await;
        assert_eq!(
            (reply.status, reply.body.as_str()),
            (503, "not ready: pods-cache\n")
        );

        health.set_ready("pods-cache", true);
        let reply = readyz().await;
        assert_eq!((reply.status, reply.body.as_str()), (200, "ok\n"));

        health.set_ready("consul", false);
        let reply = readyz().await;
        assert_eq!(
            (reply.status, reply.body.as_str()),
            (503, "not ready: consul\n")
        );
    }

    #[tokio::test]
    async fn shutdown_stops_the_server_and_frees_the_port() {
        let server = start(Metrics::new(), Health::new(TIMEOUT)).await;
        assert_eq!(request(server.addr, "GET", "/livez").await.status, 200);

        let _ = server.stop.send(());
        tokio::time::timeout(Duration::from_secs(10), server.task)
            .await
            .expect("the server stops")
            .expect("the server task does not panic");
        assert!(TcpStream::connect(server.addr).await.is_err());
    }

    #[tokio::test]
    async fn shutdown_closes_idle_keep_alive_connections_at_once() {
        let server = start(Metrics::new(), Health::new(TIMEOUT)).await;
        let mut stream = TcpStream::connect(server.addr).await.expect("connect");
        stream
            .write_all(b"GET /livez HTTP/1.1\r\nHost: test\r\n\r\n")
            .await
            .expect("send");
        let mut received = Vec::new();
        while !received.ends_with(b"\r\n\r\nok\n") {
            let mut chunk = [0; 1024];
            let read = stream.read(&mut chunk).await.expect("receive");
            assert_ne!(
                read, 0,
                "the connection stays open after a keep-alive request"
            );
            received.extend_from_slice(&chunk[..read]);
        }

        let _ = server.stop.send(());
        // Well below SHUTDOWN_GRACE: the idle connection does not hold the server up.
        tokio::time::timeout(Duration::from_secs(3), server.task)
            .await
            .expect("the server stops without waiting for the grace period")
            .expect("the server task does not panic");
        let mut rest = Vec::new();
        stream.read_to_end(&mut rest).await.expect("receive");
        assert!(rest.is_empty(), "closed without another response");
    }

    #[tokio::test]
    async fn serve_reports_bind_errors() {
        let taken = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .await
            .expect("bind");
        let addr = taken.local_addr().expect("address");
        let error = serve(addr, Metrics::new(), Health::new(TIMEOUT), async {})
            .await
            .expect_err("the port is taken");
        assert_eq!(error.kind(), io::ErrorKind::AddrInUse);
    }

    #[tokio::test(start_paused = true)]
    async fn health_starts_live_and_not_ready() {
        let health = Health::new(Duration::from_secs(5));
        assert_eq!(health.liveness(), Ok(()));
        assert!(health.readiness().is_err());
        tokio::time::advance(Duration::from_secs(5)).await;
        assert_eq!(health.liveness(), Ok(()), "nothing to do is not a failure");
    }
}
