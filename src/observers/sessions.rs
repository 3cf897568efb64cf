//! The operator's Consul sessions: one per election, created for the pod the election chose,
//! renewed every TTL/2, adopted again after an operator restart, and watched for loss.
//!
//! # Names
//! A session is named `consul-elector/<cluster>/<namespace>/<election>/<pod>`
//! ([`session_name`]). Several Kubernetes clusters may share one Consul with elections of the
//! same namespace and name, so the cluster (see [`crate::cluster_identity`]) is part of the
//! name, and an operator adopts only sessions whose name it would have written
//! ([`crate::election::session_names::adoptable_pod`]): it never renews, releases or destroys
//! another cluster's lock.
//!
//! # Renewal rules (Consul's `RenewPeriodic`, reference §9.3)
//! - A renewal is sent TTL/2 after the *start* of the last successful request (create,
//!   adopt or renew), at the next tick of a 250 ms grid shared by all sessions. Measuring
//!   from the start is conservative: Consul resets its timer when it handles the request,
//!   which is never earlier. The grid delays a renewal by less than a tick (2.5 % of
//!   Consul's shortest TTL) and sends the renewals due within one tick together: one
//!   wake-up of the renewing thread per tick instead of one per session, which is most of
//!   a renewal's CPU cost. In steady state this is at most one request per session per TTL/2.
//!   The one exception is the first renewal of an adopted session, drawn from
//!   (TTL/4, TTL/2] so that sessions adopted together after a restart do not renew in one
//!   burst forever after.
//! - Any failure other than a 404 is retried one second after it happened, for as long as
//!   it lasts (without a cluster leader no session expires, and a new leader re-arms every
//!   timer, so giving up would only lose sessions Consul still has). Once a whole TTL has
//!   passed since the last success the health becomes [`SessionHealth::Unconfirmed`]; the
//!   next success makes it [`SessionHealth::Alive`] again.
//! - A 404 means the session is gone (expired or destroyed): [`SessionHealth::Lost`], and
//!   renewal stops.
//! - Every change of the health *kind* (Alive, Unconfirmed, Lost) is reported by sending
//!   the election's key on the manager's channel; a successful renewal that keeps a session
//!   Alive is not a change.
//!
//! # One task per session
//! Each session is renewed by its own tokio task, chosen over one scheduler task with a
//! timer queue because it needs no queue, no generation bookkeeping inside the scheduler
//! and no dispatching of concurrent requests: tokio's timer wheel already is the timer
//! queue. The task stays lean (a sleeping task holds its client handle, the session ID and
//! a few timestamps; the in-flight request future is boxed so its size is paid only while a
//! request runs), so 10,000 sessions cost a few megabytes. Every request goes through the
//! caller's [`ConsulClient`], whose session lane has its own connection budget per Consul
//! address: a burst of renewals queues for a connection instead of opening more, and never
//! behind long polls. The tasks run on the client's session runtime when it has one
//! ([`ConsulClient::with_session_runtime`]), so CPU-bound work elsewhere cannot delay them.
//!
//! Every time it keeps (when a confirmed request was sent) and all scheduling is on tokio's
//! monotonic clock, so tests can pause it and a wall clock stepped either way changes
//! nothing (docs/design.md rule 8).

use std::collections::HashMap;
use std::future::Future;
use std::mem::discriminant;
use std::pin::pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use tokio::sync::mpsc::UnboundedSender;
use tokio::task::AbortHandle;
use tokio::time::{Instant, sleep_until};

use crate::consul::{
    ConsulClient, ConsulError, ErrorContext, SessionBehavior, SessionEntry, SessionRequest,
};
use crate::election::adoption::FoundSettings;
use crate::election::config::{Behavior, ElectionKey, Owner, SessionConfig};
use crate::election::observe::{SessionHealth, SessionView};
use crate::election::session_names::session_name;

/// Pause after a renewal that failed with anything but a 404 (as Go's `RenewPeriodic`).
const RETRY_INTERVAL: Duration = Duration::from_secs(1);
/// The grid renewals are sent on: each is due at the first tick at or after TTL/2 since the
/// start of the last success (see the module docs).
const RENEWAL_TICK: Duration = Duration::from_millis(250);
/// How long one renewal (with the client's timeouts and retries) may take before its task
/// counts as stuck.
const REQUEST_BUDGET: Duration = Duration::from_secs(60);

/// The settings of `entry`.
pub fn found_settings(entry: &SessionEntry) -> FoundSettings {
    FoundSettings {
        ttl: entry.ttl(),
        lock_delay: entry.lock_delay,
        behavior: match entry.behavior {
            SessionBehavior::Release => Behavior::Release,
            SessionBehavior::Delete => Behavior::Delete,
        },
    }
}

/// Keeps the operator's sessions alive and reports their health changes. Cheap to clone;
/// clones share the sessions. Dropping the last clone stops every renewal (without
/// destroying the sessions, which then expire in Consul after 2×TTL).
#[derive(Clone)]
pub struct SessionManager {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for SessionManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionManager")
            .field("sessions", &self.len())
            .finish_non_exhaustive()
    }
}

struct Inner {
    changes: UnboundedSender<ElectionKey>,
    sessions: Mutex<HashMap<ElectionKey, Entry>>,
    /// Tells a registration apart from a later one of the same election.
    next_generation: AtomicU64,
    /// Where the renewal grid ([`RENEWAL_TICK`]) starts.
    origin: Instant,
}

/// One registered session.
struct Entry {
    view: SessionView,
    generation: u64,
    renewer: AbortHandle,
    /// When its renewal task should next have made progress (its next attempt plus the time
    /// one request may take with its retries): liveness watches that tasks keep up.
    due: Instant,
}

impl Inner {
    fn sessions(&self) -> MutexGuard<'_, HashMap<ElectionKey, Entry>> {
        self.sessions.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        let sessions = self
            .sessions
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner);
        for entry in sessions.values() {
            entry.renewer.abort();
        }
    }
}

/// A session confirmed by Consul, about to be registered.
struct Confirmed {
    id: String,
    pod: String,
    pod_uid: String,
    ttl: Duration,
    /// When the confirming request was started.
    started: Instant,
    /// How long after `started` the first renewal is sent (at most TTL/2).
    first_renewal: Duration,
}

/// How long after its adoption an adopted session is first renewed: uniformly in
/// (TTL/4, TTL/2]. After an operator restart thousands of sessions are adopted within moments;
/// renewing each exactly TTL/2 later would repeat that burst forever. Spread over a quarter
/// TTL, the renewals keep that spread (each next one is TTL/2 after the previous, to the
/// renewal grid's tick), and none is later than the regular first renewal.
fn adopted_first_renewal(ttl: Duration, rng: &mut impl rand::Rng) -> Duration {
    let nanos = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
    let (quarter, half) = (nanos(ttl / 4), nanos(ttl / 2));
    if half <= quarter {
        return ttl / 2;
    }
    Duration::from_nanos(rng.random_range(quarter + 1..=half))
}

impl SessionManager {
    /// A manager that reports health changes on `changes`.
    pub fn new(changes: UnboundedSender<ElectionKey>) -> SessionManager {
        SessionManager {
            inner: Arc::new(Inner {
                changes,
                sessions: Mutex::new(HashMap::new()),
                next_generation: AtomicU64::new(0),
                origin: Instant::now(),
            }),
        }
    }

    /// Creates the session `consul-elector/<cluster>/<namespace>/<election>/<pod>`
    /// ([`session_name`]) with the config's TTL, lock-delay and behavior and no node checks
    /// (the operator is the liveness signal), registers it for `election` and starts renewing
    /// it. A session already registered for `election` is destroyed first; if that fails,
    /// nothing changes and the error is returned.
    pub async fn create(
        &self,
        election: &ElectionKey,
        client: &ConsulClient,
        owner: &Owner,
        pod: &str,
        pod_uid: &str,
        config: &SessionConfig,
    ) -> Result<String, ConsulError> {
        self.destroy(election, client).await?;
        let request = SessionRequest::new(session_name(owner, election, pod))
            .ttl(config.ttl)
            .lock_delay(config.lock_delay)
            .behavior(match config.behavior {
                Behavior::Release => SessionBehavior::Release,
                Behavior::Delete => SessionBehavior::Delete,
            });
        let started = Instant::now();
        let id = client.create_session(&request).await?;
        self.register(
            election,
            client,
            Confirmed {
                id: id.clone(),
                pod: pod.to_owned(),
                pod_uid: pod_uid.to_owned(),
                ttl: config.ttl,
                started,
                first_renewal: config.ttl / 2,
            },
        );
        Ok(id)
    }

    /// Takes over an existing session after an operator restart: renews it at once and, if
    /// Consul still has it, registers it for `election` with the TTL Consul reports and keeps
    /// renewing it. `Ok(false)` when the session is gone.
    ///
    /// The renewal doubles as the existence check (its answer carries the session and its
    /// TTL, a 404 means gone) and leaves no window between a lookup and the first renewal. A
    /// renewal keeps any session alive, so the caller must have checked first, from the
    /// session's name ([`crate::election::session_names::adoptable_pod`]), that the session is
    /// this cluster's. A registration the election already had is replaced without destroying
    /// its session.
    pub async fn adopt(
        &self,
        election: &ElectionKey,
        client: &ConsulClient,
        session_id: &str,
        pod: &str,
        pod_uid: &str,
    ) -> Result<bool, ConsulError> {
        let started = Instant::now();
        let entry = match client.renew_session(session_id).await {
            Ok(entry) => entry,
            Err(ConsulError::SessionNotFound { .. }) => return Ok(false),
            Err(error) => return Err(error),
        };
        let ttl = entry.ttl().ok_or_else(|| ConsulError::InvalidRequest {
            context: ErrorContext::new("session adopt", session_id),
            detail: "the session has no TTL, so it is not one this operator created".to_owned(),
        })?;
        self.register(
            election,
            client,
            Confirmed {
                id: entry.id,
                pod: pod.to_owned(),
                pod_uid: pod_uid.to_owned(),
                ttl,
                started,
                first_renewal: adopted_first_renewal(ttl, &mut rand::rng()),
            },
        );
        Ok(true)
    }

    /// The session registered for `election`, with its current health.
    pub fn view(&self, election: &ElectionKey) -> Option<SessionView> {
        self.inner
            .sessions()
            .get(election)
            .map(|entry| entry.view.clone())
    }

    /// Destroys the session registered for `election` in Consul (through `client`, which
    /// must address the Consul holding it), then stops renewing it and forgets it. Renewal
    /// continues until Consul has confirmed, so a failed destroy changes nothing and can be
    /// retried. Idempotent: without a registered session, nothing is sent.
    pub async fn destroy(
        &self,
        election: &ElectionKey,
        client: &ConsulClient,
    ) -> Result<(), ConsulError> {
        let Some((id, generation)) = self
            .inner
            .sessions()
            .get(election)
            .map(|entry| (entry.view.id.clone(), entry.generation))
        else {
            return Ok(());
        };
        client.destroy_session(&id).await?;
        let mut sessions = self.inner.sessions();
        if sessions
            .get(election)
            .is_some_and(|entry| entry.generation == generation)
            && let Some(entry) = sessions.remove(election)
        {
            entry.renewer.abort();
        }
        Ok(())
    }

    /// Stops renewing the session of `election` and forgets it, without destroying it (it
    /// expires in Consul 2×TTL after its last renewal).
    pub fn forget(&self, election: &ElectionKey) {
        if let Some(entry) = self.inner.sessions().remove(election) {
            entry.renewer.abort();
        }
    }

    /// Records that Consul no longer has session `id` of `election` although no renewal has
    /// said so yet (an acquire or release answered `invalid session`): the view reports
    /// [`SessionHealth::Lost`] from now on and renewal stops, exactly as after a renewal's
    /// 404. `false` (nothing changes) when `id` is not the session registered for `election`.
    pub fn mark_lost(&self, election: &ElectionKey, id: &str) -> bool {
        let mut sessions = self.inner.sessions();
        let Some(entry) = sessions
            .get_mut(election)
            .filter(|entry| entry.view.id == id)
        else {
            return false;
        };
        entry.renewer.abort();
        if entry.view.health != SessionHealth::Lost {
            tracing::info!(election = %election, session = id, "consul session lost");
            entry.view.health = SessionHealth::Lost;
        }
        true
    }

    /// The renewal task most behind its schedule, and by how much, if any is behind: a task
    /// that neither attempted nor finished a renewal by its due time is stuck (or starved).
    pub fn most_overdue(&self, now: Instant) -> Option<(ElectionKey, Duration)> {
        self.inner
            .sessions()
            .iter()
            .filter(|(_, entry)| entry.view.health != SessionHealth::Lost)
            .filter_map(|(election, entry)| {
                now.checked_duration_since(entry.due)
                    .map(|late| (election.clone(), late))
            })
            .max_by_key(|(_, late)| *late)
    }

    /// Number of registered sessions (including lost ones not yet forgotten).
    pub fn len(&self) -> usize {
        self.inner.sessions().len()
    }

    /// Whether no session is registered.
    pub fn is_empty(&self) -> bool {
        self.inner.sessions().is_empty()
    }

    /// Registers a confirmed session as Alive and starts its renewal task, replacing (and
    /// stopping) any earlier registration of `election`.
    fn register(&self, election: &ElectionKey, client: &ConsulClient, session: Confirmed) {
        let generation = self.inner.next_generation.fetch_add(1, Ordering::Relaxed);
        let view = SessionView {
            id: session.id.clone(),
            pod: session.pod,
            pod_uid: session.pod_uid,
            health: SessionHealth::Alive {
                renewed_at: session.started,
            },
            ttl: session.ttl,
        };
        let link = Link {
            manager: Arc::downgrade(&self.inner),
            election: election.clone(),
            generation,
        };
        let renewal = Renewal {
            ttl: session.ttl,
            last_success: session.started,
            confirmed: true,
            origin: self.inner.origin,
        };
        let first = on_tick(
            self.inner.origin,
            session.started + session.first_renewal.min(session.ttl / 2),
        );
        // Under the lock, so that the task cannot look for its entry before it exists.
        let mut sessions = self.inner.sessions();
        let renewer =
            client.spawn_session_task(renew_loop(link, client.clone(), session.id, renewal, first));
        let entry = Entry {
            view,
            generation,
            renewer,
            due: first + REQUEST_BUDGET,
        };
        if let Some(previous) = sessions.insert(election.clone(), entry) {
            previous.renewer.abort();
        }
    }
}

/// A renewal task's handle on its registration.
struct Link {
    manager: Weak<Inner>,
    election: ElectionKey,
    generation: u64,
}

impl Link {
    /// Records that the task expects to make its next attempt at `next`.
    fn expect_attempt_at(&self, next: Instant) {
        if let Some(inner) = self.manager.upgrade()
            && let Some(entry) = inner
                .sessions()
                .get_mut(&self.election)
                .filter(|entry| entry.generation == self.generation)
        {
            entry.due = next + REQUEST_BUDGET;
        }
    }

    /// Whether the manager still exists.
    fn manager_alive(&self) -> bool {
        self.manager.strong_count() > 0
    }

    /// Stores the session's health and TTL, reporting the election when the health kind
    /// changed. `false` when this registration no longer exists (the task should stop).
    fn update(&self, health: SessionHealth, ttl: Duration) -> bool {
        let Some(inner) = self.manager.upgrade() else {
            return false;
        };
        let changed = {
            let mut sessions = inner.sessions();
            let Some(entry) = sessions
                .get_mut(&self.election)
                .filter(|entry| entry.generation == self.generation)
            else {
                return false;
            };
            let changed = discriminant(&entry.view.health) != discriminant(&health);
            entry.view.health = health;
            entry.view.ttl = ttl;
            changed
        };
        if changed {
            tracing::info!(election = %self.election, ?health, "consul session health changed");
            // A closed channel means the controller is shutting down; nothing to tell.
            let _ = inner.changes.send(self.election.clone());
        }
        true
    }
}

/// What a renewal task knows about its session's last confirmation.
struct Renewal {
    ttl: Duration,
    /// Start of the last successful request.
    last_success: Instant,
    /// Still Alive (not yet a whole TTL without success).
    confirmed: bool,
    /// Where the renewal grid starts.
    origin: Instant,
}

/// The first tick of the renewal grid (every [`RENEWAL_TICK`] from `origin`) at or after
/// `due`: never earlier, less than one tick later.
fn on_tick(origin: Instant, due: Instant) -> Instant {
    let Some(since) = due.checked_duration_since(origin) else {
        return due;
    };
    let tick = RENEWAL_TICK.as_nanos();
    let ticks = since.as_nanos().div_ceil(tick);
    u32::try_from(ticks)
        .ok()
        .and_then(|ticks| origin.checked_add(RENEWAL_TICK.checked_mul(ticks)?))
        .unwrap_or(due)
}

impl Renewal {
    /// When the session stops being confirmed if no renewal succeeds first.
    fn unconfirmed_at(&self) -> Instant {
        self.last_success + self.ttl
    }

    /// Runs `work`; if the session is Alive and a whole TTL passes since the last success
    /// before `work` finishes, marks it Unconfirmed (reporting it) and keeps waiting for
    /// `work`. `None` when the registration is gone.
    async fn confirming<F: Future>(&mut self, link: &Link, work: F) -> Option<F::Output> {
        let mut work = pin!(work);
        if self.confirmed {
            tokio::select! {
                output = work.as_mut() => return Some(output),
                () = sleep_until(self.unconfirmed_at()) => {
                    self.confirmed = false;
                    let health = SessionHealth::Unconfirmed {
                        renewed_at: self.last_success,
                    };
                    if !link.update(health, self.ttl) {
                        return None;
                    }
                }
            }
        }
        Some(work.await)
    }
}

/// Renews one session, first at `first`, until it is lost, replaced or forgotten (then the
/// task is aborted).
async fn renew_loop(
    link: Link,
    client: ConsulClient,
    id: String,
    mut renewal: Renewal,
    first: Instant,
) {
    let mut next = first;
    loop {
        link.expect_attempt_at(next);
        if renewal.confirming(&link, sleep_until(next)).await.is_none() {
            return;
        }
        let started = Instant::now();
        if !link.manager_alive() {
            return;
        }
        // Boxed: the request future is large and only needed while it runs.
        let request = Box::pin(client.renew_session(&id));
        let Some(result) = renewal.confirming(&link, request).await else {
            return;
        };
        let health = match result {
            Ok(entry) => {
                // Consul may answer with another TTL (reference §2.2, D4); follow it.
                renewal.ttl = entry.ttl().unwrap_or(renewal.ttl);
                renewal.last_success = started;
                renewal.confirmed = true;
                next = on_tick(renewal.origin, started + renewal.ttl / 2);
                SessionHealth::Alive {
                    renewed_at: started,
                }
            }
            Err(ConsulError::SessionNotFound { .. }) => {
                link.update(SessionHealth::Lost, renewal.ttl);
                return;
            }
            Err(error) => {
                // Per attempt at debug level: an outage fails every session every second;
                // what matters (the switch to Unconfirmed) is logged by `update`.
                tracing::debug!(
                    election = %link.election,
                    session = %id,
                    category = error.category(),
                    "consul session renewal failed, retrying in {RETRY_INTERVAL:?}: {error}"
                );
                next = Instant::now() + RETRY_INTERVAL;
                continue;
            }
        };
        if !link.update(health, renewal.ttl) {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adopted_sessions_first_renew_spread_over_the_second_quarter_ttl() {
        use rand::SeedableRng;
        let ttl = Duration::from_secs(10);
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        let draws: Vec<Duration> = (0..1000)
            .map(|_| adopted_first_renewal(ttl, &mut rng))
            .collect();
        assert!(draws.iter().all(|d| *d > ttl / 4 && *d <= ttl / 2));
        let early = draws.iter().filter(|d| **d <= ttl * 3 / 8).count();
        assert!(
            (300..=700).contains(&early),
            "spread: {early} of 1000 early"
        );
        assert_eq!(
            adopted_first_renewal(Duration::ZERO, &mut rng),
            Duration::ZERO
        );
    }
}
