//! The running emulator: listener, connection tasks, the TTL reaper and the test hooks.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;

use super::clock::Clock;
use super::config::EmulatorConfig;
use super::faults::{Fault, FaultId, FaultSet};
use super::inner::Inner;
use super::mutex::lock;
use super::notify::Notifier;
use super::parked::Registry;
use super::state::{CheckStatus, KvEntry, SessionInfo, State, StateConfig};
use super::stats::{Stats, StatsCollector};

/// A running Consul HTTP API emulator. Cheap to clone; every clone drives the same server.
/// The server stops when [`Emulator::shutdown`] is called or the last clone is dropped.
#[derive(Debug, Clone)]
pub struct Emulator {
    inner: Arc<Inner>,
    lifetime: Arc<Lifetime>,
}

/// Owns the background tasks; dropping the last handle stops the server.
#[derive(Debug)]
struct Lifetime {
    inner: Arc<Inner>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
}

impl Drop for Lifetime {
    fn drop(&mut self) {
        self.inner.shutdown.send_replace(true);
    }
}

impl Emulator {
    /// Binds the listener and starts serving.
    pub async fn start(config: EmulatorConfig) -> std::io::Result<Emulator> {
        let listener = TcpListener::bind(config.listen).await?;
        let addr = listener.local_addr()?;
        let state = State::new(StateConfig {
            ttl_multiplier: config.ttl_multiplier,
            session_ttl_min: config.session_ttl_min,
            node_name: config.node_name.clone(),
        });
        let inner = Arc::new(Inner {
            clock: Clock::new(config.clock),
            config,
            state: Mutex::new(state),
            notifier: Notifier::default(),
            parked: Registry::default(),
            faults: Mutex::new(FaultSet::default()),
            stats: StatsCollector::default(),
            reaper_wake: Notify::new(),
            shutdown: watch::Sender::new(false),
            addr,
        });
        let mut tasks = vec![tokio::spawn(accept_loop(inner.clone(), listener))];
        if !inner.clock.is_manual() {
            tasks.push(tokio::spawn(reaper(inner.clone())));
        }
        tracing::info!(%addr, "consul emulator listening");
        Ok(Emulator {
            lifetime: Arc::new(Lifetime {
                inner: inner.clone(),
                tasks: Mutex::new(tasks),
            }),
            inner,
        })
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.inner.addr
    }

    /// `http://<addr>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.inner.addr)
    }

    /// Time since the emulator started (virtual with the manual clock).
    pub fn now(&self) -> Duration {
        self.inner.clock.now()
    }

    /// Moves the manual clock forward by `by`: fires every TTL expiry in deadline order
    /// (each stamped at its own deadline, so lock-delays start at the expiry instant),
    /// times out blocking queries whose deadline passed, and returns once all of that is
    /// applied and every parked query has re-evaluated.
    ///
    /// # Panics
    /// With [`ClockMode::Tokio`](super::ClockMode::Tokio) (a test-only API misuse).
    pub async fn advance(&self, by: Duration) {
        assert!(
            self.inner.clock.is_manual(),
            "Emulator::advance needs ClockMode::Manual"
        );
        self.inner.advance(by).await;
    }

    /// Number of blocking queries currently parked.
    pub async fn blocked_queries(&self) -> usize {
        self.inner.parked.len()
    }

    /// Resolves once at least `n` blocking queries are parked.
    pub async fn wait_for_blocked_queries(&self, n: usize) {
        self.inner.parked.wait_for_len(n).await;
    }

    /// Resolves once no blocking query is parked: every query that was waiting has answered
    /// (queries held up by a [`FaultAction::Latency`](super::FaultAction::Latency) are not
    /// parked yet).
    pub async fn wait_for_no_blocked_queries(&self) {
        self.inner.parked.wait_for_len_at_most(0).await;
    }

    /// Registers a catalog node with a passing `serfHealth` (like an agent joining the
    /// cluster); an existing node is left as it is.
    pub fn register_node(&self, node: &str) {
        self.inner.register_node(node);
    }

    /// Deregisters a node and its checks, invalidating every session on it.
    pub fn deregister_node(&self, node: &str) {
        self.inner.deregister_node(node);
    }

    /// Registers (or updates) a check on a node, registering the node if needed.
    pub fn register_check(&self, node: &str, check_id: &str, status: CheckStatus) {
        self.inner.set_check(node, check_id, status);
    }

    /// Sets a check's status (registering it if needed). Critical invalidates every
    /// session bound to it, all in one Raft index.
    pub fn set_check_status(&self, node: &str, check_id: &str, status: CheckStatus) {
        self.inner.set_check(node, check_id, status);
    }

    /// Deregisters a check, invalidating the sessions bound to it.
    pub fn deregister_check(&self, node: &str, check_id: &str) {
        self.inner.deregister_check(node, check_id);
    }

    /// Invalidates a session as if its TTL expired now (release/delete and lock-delay).
    /// `false` if it does not exist.
    pub fn invalidate_session(&self, id: &str) -> bool {
        self.inner.invalidate_session(id)
    }

    /// A leader election: re-arms every TTL timer at `now + multiplier × TTL`.
    pub fn simulate_leader_election(&self) {
        self.inner.simulate_leader_election();
    }

    /// `false`: no cluster leader (writes and non-stale reads get 500 `No cluster leader`,
    /// `?stale` reads answer with `X-Consul-KnownLeader: false`, no TTL fires).
    /// `true` again re-arms every TTL timer like an election.
    pub fn set_leader(&self, present: bool) {
        self.inner.set_leader(present);
    }

    /// Adds a fault rule.
    pub fn add_fault(&self, fault: Fault) -> FaultId {
        self.inner.add_fault(fault)
    }

    /// Removes a fault rule.
    pub fn remove_fault(&self, id: FaultId) {
        self.inner.remove_fault(id);
    }

    /// Removes every fault rule.
    pub fn clear_faults(&self) {
        self.inner.clear_faults();
    }

    /// A snapshot of the request and connection counters.
    pub fn stats(&self) -> Stats {
        self.inner.stats.snapshot()
    }

    /// Zeroes the counters (maxima restart from the current gauges).
    pub fn reset_stats(&self) {
        self.inner.stats.reset();
    }

    /// The stored KV entry.
    pub fn kv_entry(&self, key: &str) -> Option<KvEntry> {
        self.inner.with_state(|st, _| st.kv_entry(key).cloned())
    }

    /// A session's stored state.
    pub fn session(&self, id: &str) -> Option<SessionInfo> {
        self.inner
            .with_state(|st, _| st.session(id).map(|s| s.info()))
    }

    /// Every session's stored state.
    pub fn sessions(&self) -> Vec<SessionInfo> {
        self.inner
            .with_state(|st, _| st.sessions().map(|s| s.info()).collect())
    }

    /// The active lock-delay expiry of a key (time since start), if any.
    pub fn lock_delay_until(&self, key: &str) -> Option<Duration> {
        self.inner
            .with_state(|st, now| st.lock_delay_until(key, now))
    }

    /// The global Raft index.
    pub fn index(&self) -> u64 {
        self.inner.index()
    }

    /// Stops accepting, closes the listener and every open connection.
    pub async fn shutdown(self) {
        self.inner.shutdown.send_replace(true);
        let tasks: Vec<JoinHandle<()>> = lock(&self.lifetime.tasks).drain(..).collect();
        for task in tasks {
            let _ = task.await;
        }
    }
}

async fn accept_loop(inner: Arc<Inner>, listener: TcpListener) {
    let mut shutdown = inner.shutdown.subscribe();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    tracing::trace!(%peer, "connection accepted");
                    tokio::spawn(serve_connection(inner.clone(), stream));
                }
                Err(e) => {
                    // Typically EMFILE: back off briefly instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            () = stopped(&mut shutdown) => return,
        }
    }
}

async fn serve_connection(inner: Arc<Inner>, stream: TcpStream) {
    let _open = inner.stats.open_connection();
    let mut shutdown = inner.shutdown.subscribe();
    let svc_inner = inner.clone();
    let service = service_fn(move |req| super::api::handle(svc_inner.clone(), req));
    let conn = http1::Builder::new().serve_connection(TokioIo::new(stream), service);
    tokio::select! {
        result = conn => {
            if let Err(e) = result {
                tracing::debug!(error = %e, "connection ended with an error");
            }
        }
        () = stopped(&mut shutdown) => {}
    }
}

/// Tokio clock only: fires TTL timers when they are due, without waiting for a request.
async fn reaper(inner: Arc<Inner>) {
    let mut shutdown = inner.shutdown.subscribe();
    loop {
        let next = lock(&inner.state).next_deadline();
        let due = async {
            match next {
                Some(deadline) => inner.clock.sleep_until(deadline).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = due => inner.with_state(|_, _| ()),
            () = inner.reaper_wake.notified() => {}
            () = stopped(&mut shutdown) => return,
        }
    }
}

/// Resolves once shutdown was requested.
async fn stopped(rx: &mut watch::Receiver<bool>) {
    let _ = rx.wait_for(|stop| *stop).await;
}
