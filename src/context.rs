//! What every reconcile shares: the clients, caches and indexes, the operator's settings,
//! and what this process remembers between reconciles (statuses and pods it wrote, lock
//! delays, refusals, ...).

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::runtime::events::{Event, EventType};
use tokio::sync::{mpsc, watch};

use crate::cache::caches::Caches;
use crate::consul::{ConsulClient, TokenBucket};
use crate::election::config::{ElectionKey, Owner};
use crate::election::plan::ElectionEvent;
use crate::event_queue::EventQueue;
use crate::http::Health;
use crate::leadership::LeaseSettings;
use crate::metrics::Metrics;
use crate::observers::locks::LockWatcher;
use crate::observers::sessions::SessionManager;

/// Operator-wide settings of the controller.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Namespaces to watch; empty means all.
    pub watch_namespaces: Vec<String>,
    /// Field manager for status patches, and the events' reporting controller.
    pub field_manager: String,
    /// This process, for events (`reportingInstance`).
    pub instance: String,
    /// Wait of the recursive blocking queries on the election keys.
    pub lock_watch_wait: Duration,
    /// Reconciles running at once.
    pub concurrency: u16,
    /// This cluster's identity (see [`crate::cluster_identity`]) and this install's, carried
    /// in session names and key values so that neither clusters sharing one Consul nor two
    /// installs in one cluster ever take each other's locks.
    pub owner: Owner,
    /// The Lease that chooses the one replica that writes.
    pub lease: LeaseSettings,
    /// How long a deletion retries Consul before giving up (see [`CONSUL_CLEANUP_BOUND`](crate::election::cleanup_deadline::CONSUL_CLEANUP_BOUND)).
    pub consul_cleanup_bound: Duration,
}

/// Everything a reconcile needs; shared by all reconciles.
pub struct Context {
    /// Kubernetes client.
    pub client: Client,
    /// Root Consul client (per-election overrides derive from it and share its limits).
    pub consul: ConsulClient,
    /// Sessions the operator holds, renewed in the background.
    pub sessions: SessionManager,
    /// Watches of the election keys.
    pub locks: LockWatcher,
    /// What the operator knows of the cluster between two reads.
    pub caches: Caches,
    /// Events, written in the background ([`crate::event_queue`]).
    pub events: EventQueue,
    /// Metrics.
    pub metrics: Metrics,
    /// Health reported on /livez and /readyz.
    pub health: Health,
    /// Settings.
    pub settings: Settings,
    /// Becomes true once the pod and election caches hold their first complete list.
    pub(crate) caches_ready: watch::Receiver<bool>,
    /// Elections to reconcile soon: Consul-side changes, and another election one waits on.
    pub(crate) changes: mpsc::UnboundedSender<ElectionKey>,
    /// Becomes true once this replica holds the Lease and adopted this cluster's sessions:
    /// until then reconciles write nothing.
    pub(crate) may_write: watch::Receiver<bool>,
    /// The release request on the install's Lease ([`crate::leadership::release`]).
    pub(crate) release_requested: watch::Receiver<Option<jiff::Timestamp>>,
    /// When this process started, on the wall clock: a release request older than it is an
    /// earlier install's.
    pub(crate) started: jiff::Timestamp,
    /// The operator-wide event rate limit (see [`crate::operator::EVENT_RATE`]).
    pub(crate) event_budget: Mutex<TokenBucket>,
}

impl Context {
    /// Whether a reconcile may decide now: this replica may write (it holds the Lease and
    /// adopted this cluster's sessions; a standby answers `false` at once, the takeover
    /// reconciles every election) and its caches are complete, which is waited for.
    ///
    /// Nothing is decided on partial caches: right after a (re)start the controller already
    /// reconciles the first elections while the pod list is still loading, and a leader
    /// missing from the cache would be "moved" (rule 3), a conflicting older election
    /// missing from it would be ignored, and a cleanup would skip pods it labelled. This
    /// waits only at startup. (Not `Store::wait_until_ready`: its one-shot channel keeps a
    /// single waker, so a reconcile waiting next to the readiness probe is never woken.)
    pub(crate) async fn ready_to_decide(&self) -> bool {
        if !*self.may_write.borrow() {
            return false;
        }
        // An error: the readiness task is gone, the controller is shutting down.
        let mut caches = self.caches_ready.clone();
        caches.wait_for(|ready| *ready).await.is_ok()
    }

    /// The last moment `key`'s lock was known as cached (see
    /// [`crate::election::planner::Observation::lock_confirmed_at`]).
    pub(crate) fn lock_confirmed_at(&self, key: &ElectionKey) -> tokio::time::Instant {
        self.locks
            .read_at(key)
            .unwrap_or_else(|| self.caches.written.started_at())
    }

    /// The wall clock's time: only to render, to persist, and to compare with times other
    /// processes wrote (docs/design.md rule 8). Tests step it.
    pub(crate) fn wall_now(&self) -> jiff::Timestamp {
        self.settings.lease.wall_clock.now()
    }

    /// When the uninstall asked this process to release every election it serves and keep
    /// the objects (`None`: it did not).
    pub(crate) fn releasing(&self) -> Option<jiff::Timestamp> {
        crate::leadership::release::applies(*self.release_requested.borrow(), self.started)
    }

    /// Asks for a reconcile of `key`.
    pub(crate) fn reconcile_soon(&self, key: &ElectionKey) {
        // A closed channel means the controller is shutting down.
        let _ = self.changes.send(key.clone());
    }

    /// Publishes `event` about an election (`election`) and, when it names one, its pod: each
    /// names the other as its related object (kube's recorder folds events into one series by
    /// type, reason and objects, not by note, so without the pod "pod B is leader" would count
    /// as a repeat of an earlier "pod A is leader" and show A's note).
    pub(crate) fn publish_election_event(
        &self,
        event: &ElectionEvent,
        action: &str,
        election: ObjectReference,
        pod: Option<ObjectReference>,
    ) {
        if let Some(cause) = event.fenced {
            self.metrics.fenced(cause);
        }
        let of = |related: Option<ObjectReference>| Event {
            type_: if event.warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: event.reason.as_str().to_owned(),
            note: Some(event.note.clone()),
            action: action.to_owned(),
            secondary: related,
        };
        self.publish(&of(pod.clone()), &election);
        if let Some(pod) = pod {
            self.publish(&of(Some(election)), &pod);
        }
    }

    /// Queues `event` about `target` for writing, without waiting for the write, unless the
    /// operator's event rate limit is spent or the queue is full (then it is counted as
    /// suppressed). A failed write is logged: an event is never worth failing, or delaying,
    /// a reconcile for.
    pub(crate) fn publish(&self, event: &Event, target: &ObjectReference) {
        let allowed = self
            .event_budget
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .try_take(tokio::time::Instant::now())
            .is_ok();
        if !allowed || !self.events.push(event, target) {
            self.metrics.event_suppressed();
        }
    }
}
