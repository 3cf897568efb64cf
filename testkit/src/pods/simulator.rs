//! [`PodSimulator`]: the pod watcher, the registry of per-pod workers, the state the
//! workers decide from (node pool, readiness overrides, pod IPs) and the test commands.

use std::{
    collections::{HashMap, HashSet},
    sync::{Arc, Mutex, MutexGuard, PoisonError},
    time::Duration,
};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::{
    Api, Client,
    runtime::{WatchStreamExt, watcher},
};
use tokio::{sync::watch, task::JoinHandle};

use super::{
    nodes::{self, NodePool},
    worker::Worker,
};

/// How long [`PodSimulator::start`] waits for the Nodes to be created before it goes on
/// and leaves them to the background task that keeps trying.
const NODES_WAIT: Duration = Duration::from_secs(5);

/// How a [`PodSimulator`] behaves.
#[derive(Debug, Clone)]
pub struct SimulatorOptions {
    /// How many nodes (`sim-node-0..nodes`) pods are bound to round-robin; clamped to
    /// `1..=100`. Default 3.
    pub nodes: usize,
    /// Whether pods become Ready once running (else they stay NotReady until
    /// [`PodSimulator::set_ready`]). Default true.
    pub start_ready: bool,
    /// A cap on the grace period honoured for terminating pods. Default `None`: the pod's
    /// own `deletionGracePeriodSeconds`.
    pub max_grace: Option<Duration>,
    /// How long a running pod stays NotReady before it may become Ready (a readiness
    /// probe's initial delay). Default zero.
    pub ready_delay: Duration,
}

impl Default for SimulatorOptions {
    fn default() -> Self {
        Self {
            nodes: 3,
            start_ready: true,
            max_grace: None,
            ready_delay: Duration::ZERO,
        }
    }
}

/// Plays the scheduler's binding and the kubelet for every pod of one namespace, until
/// stopped or dropped. See the [module docs](super) for what it does to each pod.
pub struct PodSimulator {
    shared: Arc<Shared>,
    dispatcher: JoinHandle<()>,
    /// Still creating the Nodes (only when the API server failed at start).
    creating_nodes: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for PodSimulator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PodSimulator")
            .field("namespace", &self.shared.namespace)
            .finish_non_exhaustive()
    }
}

impl PodSimulator {
    /// Creates the simulated Nodes (if missing), then watches every pod of `namespace`
    /// and plays scheduler and kubelet for it. API errors are logged and retried; the
    /// simulator never gives up on a transient error.
    pub async fn start(client: Client, namespace: &str, options: SimulatorOptions) -> Self {
        let pool = NodePool::new(options.nodes);
        let mut creating =
            tokio::spawn(nodes::create_nodes(Api::all(client.clone()), pool.count()));
        let creating_nodes = match tokio::time::timeout(NODES_WAIT, &mut creating).await {
            Ok(_) => None,
            Err(_) => {
                tracing::error!("pod simulator: the nodes are not created yet; still trying");
                Some(creating)
            }
        };
        let shared = Arc::new(Shared {
            namespace: namespace.to_owned(),
            api: Api::namespaced(client, namespace),
            options,
            state: Mutex::new(State {
                pool,
                pods: HashMap::new(),
                stopped: false,
            }),
            changes: watch::Sender::new(0),
        });
        let dispatcher = tokio::spawn(dispatch(Arc::clone(&shared)));
        Self {
            shared,
            dispatcher,
            creating_nodes,
        }
    }

    /// Sets the readiness of the pod named `pod` (its `Ready` and `ContainersReady`
    /// conditions and every container's `ready`), and returns once that is written. A
    /// failed node or a termination still keeps the pod NotReady. The setting belongs to
    /// the current pod of that name; a pod the simulator has not seen is logged and ignored.
    pub async fn set_ready(&self, pod: &str, ready: bool) {
        self.command(|state| {
            let records: Vec<_> = state
                .pods
                .values_mut()
                .filter(|record| record.name == pod)
                .map(|record| {
                    record.ready = Some(ready);
                    record.applied.clone()
                })
                .collect();
            if records.is_empty() {
                tracing::warn!(pod, "pod simulator: set_ready on a pod it has not seen");
            }
            records
        })
        .await;
    }

    /// Fails the node named `node`: every pod on it goes NotReady (and stays so until
    /// [`Self::recover_node`]) and no new pod is bound to it. Returns once those pods are
    /// written NotReady. The Node object is shared by every namespace and is not changed.
    pub async fn fail_node(&self, node: &str) {
        self.set_node_failed(node, true).await;
    }

    /// Recovers a node failed by [`Self::fail_node`]; returns once its pods are written
    /// with their readiness restored.
    pub async fn recover_node(&self, node: &str) {
        self.set_node_failed(node, false).await;
    }

    /// The pod IP the simulator gave the pod named `pod`, if it has given one.
    pub fn pod_ip(&self, pod: &str) -> Option<String> {
        let state = self.shared.lock();
        let mut records = state.pods.values().filter(|record| record.name == pod);
        records.find_map(|record| record.ip.clone())
    }

    /// Stops watching and simulating; pods keep whatever status they have.
    pub async fn stop(mut self) {
        // Aborted tasks end with a cancellation error, which is what stopping means.
        for task in self.abort_all() {
            let _ = task.await;
        }
        let _ = (&mut self.dispatcher).await;
        if let Some(creating) = self.creating_nodes.take() {
            let _ = creating.await;
        }
    }

    async fn set_node_failed(&self, node: &str, failed: bool) {
        let Some(index) = nodes::node_index(node) else {
            tracing::warn!(node, "pod simulator: not a simulated node");
            return;
        };
        self.command(|state| {
            state.pool.set_failed(index, failed);
            state
                .pods
                .values()
                .filter(|record| record.node().as_deref() == Some(node))
                .map(|record| record.applied.clone())
                .collect()
        })
        .await;
    }

    /// Applies `change` to the state (it returns the acknowledgements of the workers it
    /// affects), wakes every worker and waits until the affected ones have acted on it.
    async fn command(&self, change: impl FnOnce(&mut State) -> Vec<watch::Receiver<u64>>) {
        let affected = change(&mut self.shared.lock());
        let mut epoch = 0;
        self.shared.changes.send_modify(|e| {
            *e += 1;
            epoch = *e;
        });
        for mut applied in affected {
            // An error means the worker ended: its pod is gone, nothing left to wait for.
            let _ = applied.wait_for(|done| *done >= epoch).await;
        }
    }

    /// Aborts every task; returns the workers' handles.
    fn abort_all(&self) -> Vec<JoinHandle<()>> {
        self.dispatcher.abort();
        if let Some(creating) = &self.creating_nodes {
            creating.abort();
        }
        let records = {
            let mut state = self.shared.lock();
            // The dispatcher may be mid-event on another thread: it must not start a worker
            // after this drain.
            state.stopped = true;
            std::mem::take(&mut state.pods)
        };
        records
            .into_values()
            .map(|record| {
                record.task.abort();
                record.task
            })
            .collect()
    }
}

impl Drop for PodSimulator {
    /// Aborts every task, which also breaks the workers' references to the shared state.
    fn drop(&mut self) {
        drop(self.abort_all());
    }
}

/// Watches the namespace's pods and hands every version to its UID's worker. The watcher
/// re-lists after errors (with kube's default backoff); pods missing from a re-list are
/// treated as deleted.
async fn dispatch(shared: Arc<Shared>) {
    let mut events =
        std::pin::pin!(watcher(shared.api.clone(), watcher::Config::default()).default_backoff());
    let mut listed: Option<HashSet<String>> = None;
    while let Some(event) = events.next().await {
        match event {
            Ok(watcher::Event::Init) => listed = Some(HashSet::new()),
            Ok(watcher::Event::InitApply(pod)) => {
                if let (Some(listed), Some(uid)) = (&mut listed, &pod.metadata.uid) {
                    listed.insert(uid.clone());
                }
                shared.upsert(pod);
            }
            Ok(watcher::Event::InitDone) => {
                if let Some(listed) = listed.take() {
                    shared.retain(|uid| listed.contains(uid));
                }
            }
            Ok(watcher::Event::Apply(pod)) => shared.upsert(pod),
            Ok(watcher::Event::Delete(pod)) => {
                if let Some(uid) = &pod.metadata.uid {
                    shared.retain(|other| other != uid);
                }
            }
            Err(error) => {
                tracing::warn!(
                    %error,
                    namespace = shared.namespace,
                    "pod simulator: pod watch failed"
                );
            }
        }
    }
    tracing::error!(
        namespace = shared.namespace,
        "pod simulator: pod watch ended"
    );
}

/// What the dispatcher, the workers and the commands share.
pub(super) struct Shared {
    namespace: String,
    pub(super) api: Api<Pod>,
    pub(super) options: SimulatorOptions,
    state: Mutex<State>,
    /// Bumped after every command; workers re-decide on each bump and acknowledge it.
    changes: watch::Sender<u64>,
}

struct State {
    pool: NodePool,
    /// Every pod the watcher reported and that still exists, by UID.
    pods: HashMap<String, PodRecord>,
    /// Set when the simulator stops; no worker starts afterwards.
    stopped: bool,
}

/// One pod: its worker's plumbing and the simulator's decisions about it.
struct PodRecord {
    name: String,
    /// The newest version of the pod, for its worker.
    pod: watch::Sender<Pod>,
    /// The last command epoch the worker acted on.
    applied: watch::Receiver<u64>,
    task: JoinHandle<()>,
    ip: Option<String>,
    /// Set by [`PodSimulator::set_ready`]; `None` means [`SimulatorOptions::start_ready`].
    ready: Option<bool>,
}

impl PodRecord {
    fn node(&self) -> Option<String> {
        self.pod.borrow().spec.as_ref()?.node_name.clone()
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A worker that panicked cannot leave the state half-updated: every critical
        // section is a single insert or lookup.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Hands a new version of a pod to its worker, starting the worker for a new UID.
    fn upsert(self: &Arc<Self>, pod: Pod) {
        let Some(uid) = pod.metadata.uid.clone() else {
            return;
        };
        let mut state = self.lock();
        if state.stopped {
            return;
        }
        if let Some(record) = state.pods.get(&uid) {
            record.pod.send_replace(pod);
            return;
        }
        let name = pod.metadata.name.clone().unwrap_or_default();
        let (pod_tx, pod_rx) = watch::channel(pod);
        let (applied_tx, applied_rx) = watch::channel(0);
        let worker = Worker::new(
            Arc::clone(self),
            uid.clone(),
            name.clone(),
            pod_rx,
            self.changes.subscribe(),
            applied_tx,
        );
        let record = PodRecord {
            name,
            pod: pod_tx,
            applied: applied_rx,
            task: tokio::spawn(worker.run()),
            ip: None,
            ready: None,
        };
        state.pods.insert(uid, record);
    }

    /// Forgets (and stops the workers of) the pods whose UID fails `keep`.
    fn retain(&self, keep: impl Fn(&str) -> bool) {
        self.lock().pods.retain(|uid, record| {
            let kept = keep(uid);
            if !kept {
                record.task.abort();
            }
            kept
        });
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
