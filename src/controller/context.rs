//! What every reconcile shares: the clients, caches and indexes, the operator's settings,
//! and what this process remembers between reconciles (statuses and pods it wrote, lock
//! delays, refusals, ...).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::runtime::events::{Event, Recorder};
use kube::runtime::reflector::{ObjectRef, Store};
use tokio::sync::{mpsc, watch};

use super::keys::election_key;
use super::validated;
use crate::cache::{index, owner_selectors};
use crate::consul::{ConsulClient, TokenBucket};
use crate::crd::{LeaderElection, LeaderElectionStatus};
use crate::election::config::{ElectionKey, Owner};
use crate::election::plan::StoodBack;
use crate::election::refusal::ConsulRefusal;
use crate::http::Health;
use crate::k8s::Pod;
use crate::leadership::LeaseSettings;
use crate::locks::LockWatcher;
use crate::metrics::Metrics;
use crate::sessions::SessionManager;

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
    /// How long a deletion retries Consul before giving up (see [`CONSUL_CLEANUP_BOUND`](super::CONSUL_CLEANUP_BOUND)).
    pub consul_cleanup_bound: Duration,
}

/// A status this process wrote: the object's UID, the status, and the object's
/// resourceVersion the write produced (once the cache holds that version, it holds the status).
type RememberedStatus = (String, LeaderElectionStatus, Option<u64>);

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
    /// Cache of pods.
    pub pods: Store<Pod>,
    /// Cache of elections.
    pub elections: Store<LeaderElection>,
    /// Indexes over both caches.
    pub(super) index: Arc<index::Indexes>,
    /// The elections' validated configurations.
    pub(super) validated: validated::Validated,
    /// The selector keys of the candidate pods' controllers.
    pub(super) owner_selectors: owner_selectors::OwnerSelectors,
    /// Event publisher.
    pub recorder: Recorder,
    /// Metrics.
    pub metrics: Metrics,
    /// Health reported on /livez and /readyz.
    pub health: Health,
    /// Settings.
    pub settings: Settings,
    /// Queues a reconcile of another election (one this election waits for).
    pub(super) wake: mpsc::UnboundedSender<ElectionKey>,
    /// Until when an acquisition of an election's key is probably refused by a lock-delay.
    pub(super) lock_delays: Mutex<HashMap<ElectionKey, Timestamp>>,
    /// Becomes true once the pod and election caches hold their first complete list.
    pub(super) caches_ready: watch::Receiver<bool>,
    /// Elections to reconcile soon (the same channel Consul-side changes arrive on).
    pub(super) changes: mpsc::UnboundedSender<ElectionKey>,
    /// When this replica started deciding (became active): the Fence clock of a key it has
    /// never read runs from here (it cannot know a later confirmation).
    pub(super) started_at: Mutex<Timestamp>,
    /// Becomes true once this replica holds the Lease and adopted this cluster's sessions:
    /// until then reconciles write nothing.
    pub(super) may_write: watch::Receiver<bool>,
    /// The status this process last wrote per election (by object UID). The operator is the
    /// only writer of the status, so this is never older than the cache, which can lag behind
    /// the operator's own writes.
    pub(super) statuses: Mutex<HashMap<ElectionKey, RememberedStatus>>,
    /// Status writes that failed in a row per election, with the last error's category.
    pub(super) status_failures: Mutex<HashMap<ElectionKey, (u32, &'static str)>>,
    /// What the last plan of each election said about standing back, passed to the next
    /// (pruned with the elections).
    pub(super) stood_back: Mutex<HashMap<ElectionKey, StoodBack>>,
    /// Consul's last refusal (for lack of ACL rights) of each election's writes, until a
    /// write of the election succeeds (pruned with the elections).
    pub(super) refusals: Mutex<HashMap<ElectionKey, ConsulRefusal>>,
    /// The operator-wide event rate limit (see [`EVENT_RATE`](super::EVENT_RATE)).
    pub(super) event_budget: Mutex<TokenBucket>,
    /// Pods as this process last patched them, by UID, until the cache has caught up: the
    /// next reconcile often starts (woken by those very patches) before the pod watch has
    /// delivered them, and planning on the older versions would undo the patches (a leader
    /// that looks unlabelled is "re-elected", and rule 6 then raises its token).
    pub(super) pods_written: Mutex<HashMap<String, Arc<Pod>>>,
}

impl Context {
    /// The last moment `key`'s lock was known as cached (see
    /// [`crate::election::planner::Observation::lock_confirmed_at`]).
    pub(super) fn lock_confirmed_at(&self, key: &ElectionKey) -> Timestamp {
        self.locks.read_at(key).unwrap_or_else(|| self.started_at())
    }

    /// When this replica started deciding (became active).
    pub(super) fn started_at(&self) -> Timestamp {
        self.started_at
            .lock()
            .map_or_else(|poison| *poison.into_inner(), |at| *at)
    }

    /// Status writes of `key` that failed in a row, with the last error's category.
    pub(super) fn status_failures(&self, key: &ElectionKey) -> Option<(u32, &'static str)> {
        self.status_failures.lock().ok()?.get(key).copied()
    }

    /// Records how a status write of `key` went; returns how many failed in a row now.
    pub(super) fn status_written(
        &self,
        key: &ElectionKey,
        result: Result<(), &'static str>,
    ) -> u32 {
        let Ok(mut failures) = self.status_failures.lock() else {
            return 0;
        };
        match result {
            Ok(()) => {
                failures.remove(key);
                0
            }
            Err(category) => {
                let entry = failures.entry(key.clone()).or_insert((0, category));
                *entry = (entry.0.saturating_add(1), category);
                entry.0
            }
        }
    }

    /// Asks for a reconcile of `key`.
    pub(super) fn reconcile_soon(&self, key: &ElectionKey) {
        // A closed channel means the controller is shutting down.
        let _ = self.changes.send(key.clone());
    }

    /// Publishes `event` about `target` unless the operator's event rate limit is spent (then
    /// it is counted as suppressed). A failure is logged: an event is never worth failing a
    /// reconcile for.
    pub(super) async fn publish(&self, event: &Event, target: &ObjectReference) {
        let allowed = self
            .event_budget
            .lock()
            .map(|mut budget| budget.try_take(tokio::time::Instant::now()).is_ok())
            .unwrap_or(false);
        if !allowed {
            self.metrics.event_suppressed();
            return;
        }
        if let Err(error) = self.recorder.publish(event, target).await {
            tracing::warn!(%error, reason = event.reason, "publishing an event failed");
        }
    }

    pub(super) fn lock_delay_until(&self, key: &ElectionKey) -> Option<Timestamp> {
        self.lock_delays.lock().ok()?.get(key).copied()
    }

    /// The election's current status: what this process last wrote for this object, else
    /// what the cache holds.
    pub fn current_status(&self, le: &LeaderElection) -> LeaderElectionStatus {
        let remembered = election_key(le).ok().and_then(|key| {
            let map = self.statuses.lock().ok()?;
            let (uid, status, _) = map.get(&key)?;
            (le.metadata.uid.as_ref() == Some(uid)).then(|| status.clone())
        });
        remembered.unwrap_or_else(|| le.status.clone().unwrap_or_default())
    }

    /// Whether this process remembers a status it wrote for `le` (then the object has one).
    pub(super) fn remembers_status(&self, le: &LeaderElection) -> bool {
        let Ok(key) = election_key(le) else {
            return false;
        };
        self.statuses.lock().is_ok_and(|map| {
            map.get(&key)
                .is_some_and(|(uid, _, _)| le.metadata.uid.as_ref() == Some(uid))
        })
    }

    /// What this install's last decision for `key` said about standing back.
    pub(super) fn stood_back(&self, key: &ElectionKey) -> Option<StoodBack> {
        self.stood_back.lock().ok()?.get(key).cloned()
    }

    /// Remembers what a decision for `key` said about standing back.
    pub(super) fn remember_stood_back(&self, key: &ElectionKey, stood: Option<StoodBack>) {
        if let Ok(mut map) = self.stood_back.lock() {
            match stood {
                Some(stood) => map.insert(key.clone(), stood),
                None => map.remove(key),
            };
        }
    }

    /// Consul's standing refusal of `key`'s writes, if any.
    pub(super) fn refusal(&self, key: &ElectionKey) -> Option<ConsulRefusal> {
        self.refusals.lock().ok()?.get(key).cloned()
    }

    /// Records (`Some`) or clears (`None`) Consul's refusal of `key`'s writes; true when the
    /// refusal is new or differs from the one recorded (worth an event).
    pub(super) fn remember_refusal(
        &self,
        key: &ElectionKey,
        refusal: Option<ConsulRefusal>,
    ) -> bool {
        let Ok(mut map) = self.refusals.lock() else {
            return false;
        };
        match refusal {
            Some(refusal) => map.insert(key.clone(), refusal.clone()).as_ref() != Some(&refusal),
            None => {
                map.remove(key);
                false
            }
        }
    }

    /// Records `pod` as this process just wrote it.
    pub(super) fn remember_pod(&self, pod: &Arc<Pod>) {
        if let (Some(uid), Ok(mut map)) = (pod.metadata.uid.clone(), self.pods_written.lock()) {
            map.insert(uid, pod.clone());
        }
    }

    /// The newer of a cached pod and the version this process last wrote of it.
    pub(super) fn freshest(&self, cached: Arc<Pod>) -> Arc<Pod> {
        let version = |p: &Pod| {
            p.metadata
                .resource_version
                .as_deref()
                .and_then(|v| v.parse::<u64>().ok())
        };
        let (Some(uid), Ok(mut map)) = (cached.metadata.uid.as_deref(), self.pods_written.lock())
        else {
            return cached;
        };
        match map.get(uid) {
            Some(written) if version(written) > version(&cached) => written.clone(),
            Some(_) => {
                // The cache has caught up.
                map.remove(uid);
                cached
            }
            None => cached,
        }
    }

    /// The names of the pods of `namespace` this process wrote and the cache does not show
    /// yet.
    pub(super) fn written_pods_in(&self, namespace: &str) -> Vec<String> {
        let Ok(map) = self.pods_written.lock() else {
            return Vec::new();
        };
        map.values()
            .filter(|p| p.metadata.namespace.as_deref() == Some(namespace))
            .filter_map(|p| p.metadata.name.clone())
            .collect()
    }

    /// Forgets the written pods the cache has caught up with or no longer has.
    pub(super) fn prune_written_pods(&self) {
        let Ok(mut map) = self.pods_written.lock() else {
            return;
        };
        if map.is_empty() {
            return;
        }
        let version = |v: Option<&str>| v.and_then(|v| v.parse::<u64>().ok());
        map.retain(|uid, written| {
            let (Some(namespace), Some(name)) = (
                written.metadata.namespace.as_deref(),
                written.metadata.name.as_deref(),
            ) else {
                return false;
            };
            self.pods
                .get(&ObjectRef::new(name).within(namespace))
                .filter(|cached| cached.metadata.uid.as_deref() == Some(uid.as_str()))
                .is_some_and(|cached| {
                    version(written.metadata.resource_version.as_deref())
                        > version(cached.metadata.resource_version.as_deref())
                })
        });
    }

    /// Forgets the statuses the cache has caught up with (it then holds the same) or no longer
    /// has an election for: at 10,000 elections they would otherwise keep a second copy of
    /// every status.
    pub(super) fn prune_statuses(&self) {
        let Ok(mut map) = self.statuses.lock() else {
            return;
        };
        map.retain(|key, (uid, _, written)| {
            let reference = ObjectRef::new(&key.name).within(&key.namespace);
            self.elections.get(&reference).is_some_and(|cached| {
                let cached_version = cached
                    .metadata
                    .resource_version
                    .as_deref()
                    .and_then(|v| v.parse::<u64>().ok());
                // Kept until the cache shows the written version (or a later one).
                cached.metadata.uid.as_ref() == Some(uid)
                    && (written.is_none() || cached_version < *written)
            })
        });
    }

    /// Records `status` as written by this process, in the object's `version` (the
    /// resourceVersion the write returned); `None` forgets the election.
    pub(super) fn remember_status(
        &self,
        le: &LeaderElection,
        status: Option<(LeaderElectionStatus, Option<&str>)>,
    ) {
        let (Ok(key), Some(uid)) = (election_key(le), le.metadata.uid.clone()) else {
            return;
        };
        if let Ok(mut map) = self.statuses.lock() {
            match status {
                Some((status, version)) => {
                    let version = version.and_then(|v| v.parse::<u64>().ok());
                    map.insert(key, (uid, status, version))
                }
                None => map.remove(&key),
            };
        }
    }

    pub(super) fn set_lock_delay(&self, key: &ElectionKey, until: Option<Timestamp>) {
        if let Ok(mut map) = self.lock_delays.lock() {
            match until {
                Some(t) => map.insert(key.clone(), t),
                None => map.remove(key),
            };
        }
    }
}
