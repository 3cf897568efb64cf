//! [`PodSimulator`]: the pod watcher, the registry of per-pod workers and the test commands.

use std::{
    collections::{HashMap, HashSet},
    sync::{Arc, Mutex},
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
    options::SimulatorOptions,
    shared::{PodRecord, Shared, State},
    worker::Worker,
};

/// How long [`PodSimulator::start`] waits for the Nodes to be created before it goes on
/// and leaves them to the background task that keeps trying.
const NODES_WAIT: Duration = Duration::from_secs(5);

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

impl Shared {
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
}
