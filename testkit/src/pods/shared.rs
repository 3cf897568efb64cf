//! [`Shared`], the state the pod workers decide from (node pool, readiness overrides, pod IPs).

use std::{
    collections::HashMap,
    sync::{Mutex, MutexGuard, PoisonError},
};

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use tokio::{sync::watch, task::JoinHandle};

use super::{
    nodes::{self, NodePool},
    options::SimulatorOptions,
};

/// What the dispatcher, the workers and the commands share.
pub(super) struct Shared {
    pub(super) namespace: String,
    pub(super) api: Api<Pod>,
    pub(super) options: SimulatorOptions,
    pub(super) state: Mutex<State>,
    /// Bumped after every command; workers re-decide on each bump and acknowledge it.
    pub(super) changes: watch::Sender<u64>,
}

pub(super) struct State {
    pub(super) pool: NodePool,
    /// Every pod the watcher reported and that still exists, by UID.
    pub(super) pods: HashMap<String, PodRecord>,
    /// Set when the simulator stops; no worker starts afterwards.
    pub(super) stopped: bool,
}

/// One pod: its worker's plumbing and the simulator's decisions about it.
pub(super) struct PodRecord {
    pub(super) name: String,
    /// The newest version of the pod, for its worker.
    pub(super) pod: watch::Sender<Pod>,
    /// The last command epoch the worker acted on.
    pub(super) applied: watch::Receiver<u64>,
    pub(super) task: JoinHandle<()>,
    pub(super) ip: Option<String>,
    /// Set by [`PodSimulator::set_ready`](super::PodSimulator::set_ready); `None` means
    /// [`SimulatorOptions::start_ready`].
    pub(super) ready: Option<bool>,
}

impl PodRecord {
    pub(super) fn node(&self) -> Option<String> {
        self.pod.borrow().spec.as_ref()?.node_name.clone()
    }
}

impl Shared {
    pub(super) fn lock(&self) -> MutexGuard<'_, State> {
        // A worker that panicked cannot leave the state half-updated: every critical
        // section is a single insert or lookup.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The next node to bind a pod to, `None` while every node is failed.
    pub(super) fn pick_node(&self) -> Option<usize> {
        self.lock().pool.pick()
    }

    /// Whether the pod may be Ready on node `index` (its override, or `start_ready`, and
    /// a healthy node).
    pub(super) fn wants_ready(&self, uid: &str, index: usize) -> bool {
        let state = self.lock();
        let ready = state.pods.get(uid).and_then(|record| record.ready);
        ready.unwrap_or(self.options.start_ready) && !state.pool.is_failed(index)
    }

    /// The pod's IP: the one it already reports, else the one given before, else a new
    /// one on node `index`.
    pub(super) fn pod_ip(&self, uid: &str, index: usize, reported: Option<&str>) -> String {
        let mut state = self.lock();
        let record = state.pods.get_mut(uid);
        let ip = reported
            .map(str::to_owned)
            .or_else(|| record.as_ref().and_then(|record| record.ip.clone()))
            .unwrap_or_else(|| nodes::allocate_pod_ip(index));
        if let Some(record) = record {
            record.ip = Some(ip.clone());
        }
        ip
    }

    pub(super) fn namespace(&self) -> &str {
        &self.namespace
    }
}
