//! The write gate: whether this replica may write right now, checked immediately before every
//! write to the API server and to Consul, on the monotonic clock (docs/design.md rule 8).
//!
//! [`crate::leadership`] opens the gate until a deadline: the monotonic instant at which the
//! last successful Lease renewal was *sent*, plus the renew deadline. A standby takes the Lease
//! no earlier than the Lease duration after it *observed* that renewal, on its own monotonic
//! clock, so the active replica stops writing `duration - renew_deadline` before anybody else
//! may start. Only clock *rates* enter that argument: a wall clock stepped backwards moves no
//! deadline, and a process paused past its deadline (SIGSTOP) finds the gate closed when it
//! resumes, because the monotonic clock ran on meanwhile. Whether a guest's monotonic clock
//! runs while its VM is frozen depends on the hypervisor, so the gate also closes once the
//! wall clock says the deadline passed (the deadline is carried over to it when the gate
//! opens): a frozen VM whose wall clock is set right on resume finds the gate closed too. A
//! wall clock stepped forwards can only close the gate early (writes refused until the next
//! renewal opens it again).
//!
//! Every write request is bounded by the time left: the kube client's [`GateLayer`] and the
//! Consul client refuse a write once the deadline has passed and cancel one still in flight at
//! the deadline, retries included (the retry layer sits outside the gate, so each attempt is
//! checked again). The gate is read again before every poll of a write (`Gated`). A request
//! reaches its socket in the task that drives its connection, not in the one that asked for
//! it, so the gate is read there too: the API server's writes travel on connections that are
//! driven only while the gate is open ([`crate::kube_client::ConnectionTasks`]), and a write to Consul carries a
//! body its connection reads only while the gate is open (`consul::gated_body`). A process
//! paused anywhere between the first check and the socket finds the gate closed when it
//! resumes and sends nothing, except over HTTP/2 to Consul, where a request's head may leave
//! before its body is read (docs/design.md, rule 8). Reads are never gated: a standby keeps
//! its caches warm.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use http::{Method, Request};
use tokio::sync::watch;
use tokio::time::Instant;
use tower::{BoxError, Layer, Service};

use crate::wall_clock::WallClock;

#[cfg(test)]
pub(crate) mod one_connection;

/// Stored deadline meaning "closed".
const CLOSED: u64 = 0;

/// Whether, and until when, this replica may write. Cheap to clone; every clone is the same
/// gate.
#[derive(Clone)]
pub struct WriteGate {
    inner: Arc<Inner>,
}

struct Inner {
    /// The instant deadlines are counted from.
    base: Instant,
    /// Nanoseconds after `base` until which writes are allowed; [`CLOSED`] when they are not.
    deadline: AtomicU64,
    /// The wall clock, read as a second opinion.
    wall: WallClock,
    /// The same deadline on `wall`, in nanoseconds since the Unix epoch.
    wall_deadline: AtomicI64,
    /// Whether the gate has been opened and not yet closed for good (for tasks that wait
    /// for this replica to become active).
    active: watch::Sender<bool>,
}

/// A write was refused (or cancelled) because this replica may not write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum NotActive {
    /// The gate was closed when the write was about to be sent.
    #[error("this replica is not the active one (it does not hold the Lease): write refused")]
    Refused,
    /// The write was still in flight when the deadline passed; it was cancelled.
    #[error("the write was still in flight at this replica's Lease deadline: cancelled")]
    Cancelled,
}

impl fmt::Debug for WriteGate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WriteGate")
            .field("remaining", &self.remaining().ok())
            .finish()
    }
}

impl Default for WriteGate {
    fn default() -> Self {
        Self::closed()
    }
}

impl WriteGate {
    /// A gate that refuses every write until [`open_until`](Self::open_until).
    pub fn closed() -> Self {
        Self::closed_with(WallClock::system())
    }

    /// [`closed`](Self::closed), reading `wall` as its wall clock (a test's stepped clock).
    pub fn closed_with(wall: WallClock) -> Self {
        let (active, _) = watch::channel(false);
        WriteGate {
            inner: Arc::new(Inner {
                base: Instant::now(),
                deadline: AtomicU64::new(CLOSED),
                wall,
                wall_deadline: AtomicI64::new(i64::MIN),
                active,
            }),
        }
    }

    /// Allows writes until `deadline` (a later call may move it either way).
    pub fn open_until(&self, deadline: Instant) {
        let nanos = deadline
            .checked_duration_since(self.inner.base)
            .map_or(CLOSED, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
            .max(1);
        let left = deadline.saturating_duration_since(Instant::now());
        let wall_deadline = self
            .inner
            .wall
            .now()
            .as_nanosecond()
            .saturating_add(i128::try_from(left.as_nanos()).unwrap_or(i128::MAX));
        let wall_deadline = i64::try_from(wall_deadline).unwrap_or(i64::MAX);
        // The wall deadline first: a check between the two stores sees the old monotonic one.
        self.inner
            .wall_deadline
            .store(wall_deadline, Ordering::SeqCst);
        self.inner.deadline.store(nanos, Ordering::SeqCst);
        self.inner.active.send_if_modified(|active| {
            let changed = !*active;
            *active = true;
            changed
        });
    }

    /// Refuses every write from now on.
    pub fn close(&self) {
        self.inner.deadline.store(CLOSED, Ordering::SeqCst);
        self.inner.active.send_replace(false);
    }

    /// The time left until the deadline, read on the monotonic clock now; an error when the
    /// gate is closed or the deadline has passed.
    pub fn remaining(&self) -> Result<Duration, NotActive> {
        self.remaining_at(Instant::now())
    }

    /// [`remaining`](Self::remaining) as of `now`.
    pub fn remaining_at(&self, now: Instant) -> Result<Duration, NotActive> {
        let nanos = self.inner.deadline.load(Ordering::SeqCst);
        if nanos == CLOSED {
            return Err(NotActive::Refused);
        }
        let deadline = self.inner.base + Duration::from_nanos(nanos);
        let left = match deadline.checked_duration_since(now) {
            Some(left) if !left.is_zero() => left,
            _ => return Err(NotActive::Refused),
        };
        let wall_left = i128::from(self.inner.wall_deadline.load(Ordering::SeqCst))
            - self.inner.wall.now().as_nanosecond();
        // The wall clock only closes the gate; the time left (which bounds a write in
        // flight) is the monotonic clock's.
        if wall_left > 0 {
            Ok(left)
        } else {
            Err(NotActive::Refused)
        }
    }

    /// Whether the gate has been opened (and not closed since): it may still have expired.
    pub fn opened(&self) -> watch::Receiver<bool> {
        self.inner.active.subscribe()
    }

    /// Runs the write `request` if the gate is open, cancelling it when the deadline passes
    /// before it completes.
    pub async fn bound<T, E>(
        &self,
        request: impl Future<Output = Result<T, E>>,
    ) -> Result<Result<T, E>, NotActive> {
        let left = self.remaining()?;
        Gated::new(self.clone(), left, request).await
    }

    /// The tower layer that gates the writes of a kube client.
    pub fn layer(&self) -> GateLayer {
        GateLayer { gate: self.clone() }
    }
}

/// Gates every request of a kube client but GETs (reads, lists and watches): see the module
/// documentation.
#[derive(Clone)]
pub struct GateLayer {
    gate: WriteGate,
}

impl<S> Layer<S> for GateLayer {
    type Service = GateService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        GateService {
            inner,
            gate: self.gate.clone(),
        }
    }
}

/// The service of [`GateLayer`].
#[derive(Clone)]
pub struct GateService<S> {
    inner: S,
    gate: WriteGate,
}

impl<S, B> Service<Request<B>> for GateService<S>
where
    S: Service<Request<B>, Error = BoxError>,
    S::Response: Send + 'static,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        if request.method() == Method::GET {
            return Box::pin(self.inner.call(request));
        }
        // Checked here, before the request is handed to the connection, and again before
        // every poll of it (`Gated`).
        match self.gate.remaining() {
            Err(refused) => Box::pin(std::future::ready(Err(BoxError::from(refused)))),
            Ok(left) => {
                let response = Gated::new(self.gate.clone(), left, self.inner.call(request));
                Box::pin(async move { response.await.map_err(BoxError::from)? })
            }
        }
    }
}

/// A write that is polled only while the gate is open: the gate is read on the monotonic clock
/// before every poll of the write (a process paused between an earlier check and the send
/// finds it closed when it resumes), and the write is cancelled when the time left at its start
/// runs out.
struct Gated<F> {
    gate: WriteGate,
    write: Pin<Box<F>>,
    deadline: Pin<Box<tokio::time::Sleep>>,
    /// Whether the write was polled at least once (and may have sent something).
    started: bool,
}

impl<F: Future> Gated<F> {
    fn new(gate: WriteGate, left: Duration, write: F) -> Self {
        Gated {
            gate,
            write: Box::pin(write),
            deadline: Box::pin(tokio::time::sleep(left)),
            started: false,
        }
    }
}

impl<F: Future> Future for Gated<F> {
    type Output = Result<F::Output, NotActive>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let stopped = if self.started {
            NotActive::Cancelled
        } else {
            NotActive::Refused
        };
        if self.gate.remaining().is_err() {
            return Poll::Ready(Err(stopped));
        }
        self.started = true;
        if let Poll::Ready(output) = self.write.as_mut().poll(cx) {
            return Poll::Ready(Ok(output));
        }
        match self.deadline.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(NotActive::Cancelled)),
            Poll::Pending => Poll::Pending,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn closed_until_opened_and_closed_after_the_deadline() {
        let gate = WriteGate::closed();
        let now = Instant::now();
        assert_eq!(gate.remaining_at(now), Err(NotActive::Refused));
        gate.open_until(now + Duration::from_secs(2));
        assert_eq!(gate.remaining_at(now), Ok(Duration::from_secs(2)));
        assert_eq!(
            gate.remaining_at(now + Duration::from_millis(1500)),
            Ok(Duration::from_millis(500))
        );
        assert_eq!(
            gate.remaining_at(now + Duration::from_secs(2)),
            Err(NotActive::Refused)
        );
        // A process resumed long after its deadline finds the gate closed.
        assert_eq!(
            gate.remaining_at(now + Duration::from_secs(3600)),
            Err(NotActive::Refused)
        );
        gate.close();
        assert_eq!(gate.remaining_at(now), Err(NotActive::Refused));
        assert!(!*gate.opened().borrow());
    }

    #[test]
    fn a_deadline_already_past_keeps_the_gate_closed() {
        let gate = WriteGate::closed();
        let now = Instant::now();
        gate.open_until(now);
        assert_eq!(gate.remaining_at(now), Err(NotActive::Refused));
    }

    #[test]
    fn either_clock_past_the_deadline_closes_the_gate() {
        let wall = Arc::new(std::sync::Mutex::new(jiff::Timestamp::UNIX_EPOCH));
        let read = Arc::clone(&wall);
        let gate = WriteGate::closed_with(WallClock::from_fn(move || {
            *read
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
        }));
        let step = |by: i64| {
            let mut now = wall.lock().unwrap();
            *now = now
                .checked_add(jiff::SignedDuration::from_secs(by))
                .unwrap();
        };
        let now = Instant::now();
        gate.open_until(now + Duration::from_secs(10));
        assert!(gate.remaining_at(now).is_ok());
        // A frozen VM whose monotonic clock stood still: its wall clock says 11 s passed.
        step(11);
        assert_eq!(gate.remaining_at(now), Err(NotActive::Refused));
        // A wall clock stepped back moves no deadline: the monotonic one still counts.
        step(-100);
        assert!(gate.remaining_at(now).is_ok());
        assert_eq!(
            gate.remaining_at(now + Duration::from_secs(10)),
            Err(NotActive::Refused)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_in_flight_at_the_deadline_is_cancelled() {
        let gate = WriteGate::closed();
        gate.open_until(Instant::now() + Duration::from_secs(1));
        let slow = async {
            tokio::time::sleep(Duration::from_secs(5)).await;
            Ok::<_, ()>(())
        };
        assert_eq!(gate.bound(slow).await, Err(NotActive::Cancelled));
        let fast = async { Ok::<_, ()>(7) };
        assert_eq!(gate.bound(fast).await, Err(NotActive::Refused));
    }

    /// An inner service that records the requests that reached it.
    #[derive(Clone, Default)]
    struct Recording {
        seen: Arc<std::sync::Mutex<Vec<Method>>>,
    }

    impl Service<Request<()>> for Recording {
        type Response = ();
        type Error = BoxError;
        type Future = Pin<Box<dyn Future<Output = Result<(), BoxError>> + Send>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, request: Request<()>) -> Self::Future {
            if let Ok(mut seen) = self.seen.lock() {
                seen.push(request.method().clone());
            }
            Box::pin(std::future::ready(Ok(())))
        }
    }

    /// A gate whose wall clock stands still: only the (paused) monotonic clock moves, so no
    /// scheduling delay of the test's own thread can close it early.
    fn gate_on_a_still_wall_clock() -> WriteGate {
        WriteGate::closed_with(WallClock::from_fn(|| jiff::Timestamp::UNIX_EPOCH))
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_resumed_after_its_deadline_is_not_sent() {
        let gate = gate_on_a_still_wall_clock();
        gate.open_until(Instant::now() + Duration::from_millis(50));
        // A permit already there: the write would go out at its first poll.
        let inner = SendsAfterAWait::default();
        inner.permit.notify_one();
        let mut service = gate.layer().layer(inner.clone());
        let request = Request::builder().method(Method::POST).body(()).unwrap();
        // The gate was open when the write was handed over...
        let pending = service.call(request);
        // ...then the process stopped (SIGSTOP, a frozen VM) past its deadline and resumed:
        // time passes while nothing polls the write.
        tokio::time::advance(Duration::from_millis(100)).await;
        let refused = pending.await.unwrap_err();
        assert_eq!(
            refused.downcast_ref::<NotActive>(),
            Some(&NotActive::Refused)
        );
        assert!(
            !inner.sent.load(Ordering::SeqCst),
            "the write went out after the deadline"
        );
    }

    /// An inner service whose response future waits for a permit (a connection, say) and then
    /// records that it sent the request: at its first poll when the permit is there, else on a
    /// later one.
    #[derive(Clone, Default)]
    struct SendsAfterAWait {
        permit: Arc<tokio::sync::Notify>,
        sent: Arc<std::sync::atomic::AtomicBool>,
    }

    impl Service<Request<()>> for SendsAfterAWait {
        type Response = ();
        type Error = BoxError;
        type Future = Pin<Box<dyn Future<Output = Result<(), BoxError>> + Send>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, _: Request<()>) -> Self::Future {
            let (permit, sent) = (Arc::clone(&self.permit), Arc::clone(&self.sent));
            Box::pin(async move {
                permit.notified().await;
                sent.store(true, Ordering::SeqCst);
                Ok(())
            })
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_that_waited_past_its_deadline_is_not_sent() {
        let gate = gate_on_a_still_wall_clock();
        gate.open_until(Instant::now() + Duration::from_millis(50));
        let inner = SendsAfterAWait::default();
        let mut service = gate.layer().layer(inner.clone());
        let request = Request::builder().method(Method::POST).body(()).unwrap();
        let mut pending = service.call(request);
        // First poll: the gate is open, the write waits for its permit.
        assert!(futures::poll!(&mut pending).is_pending());
        // The process stops past its deadline; when it resumes, the permit is there.
        tokio::time::advance(Duration::from_millis(100)).await;
        inner.permit.notify_one();
        let stopped = pending.await.unwrap_err();
        assert_eq!(
            stopped.downcast_ref::<NotActive>(),
            Some(&NotActive::Cancelled)
        );
        assert!(
            !inner.sent.load(Ordering::SeqCst),
            "the write went out after the deadline"
        );
    }

    #[tokio::test]
    async fn the_layer_lets_reads_through_and_refuses_writes_of_a_closed_gate() {
        let gate = WriteGate::closed();
        let inner = Recording::default();
        let mut service = gate.layer().layer(inner.clone());
        let request = |method: Method| Request::builder().method(method).body(()).unwrap();
        assert!(service.call(request(Method::GET)).await.is_ok());
        let refused = service.call(request(Method::PATCH)).await.unwrap_err();
        assert_eq!(
            refused.downcast_ref::<NotActive>(),
            Some(&NotActive::Refused)
        );
        gate.open_until(Instant::now() + Duration::from_secs(10));
        assert!(service.call(request(Method::PATCH)).await.is_ok());
        assert_eq!(
            *inner.seen.lock().unwrap(),
            vec![Method::GET, Method::PATCH],
            "the refused write never reached the connection"
        );
    }
}
