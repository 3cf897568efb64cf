//! Watches the sandbox namespace's pods and the `LeaderElection`, keeps the latest
//! [`Snapshot`] of both, prints a timeline row whenever what the timeline shows changes, and
//! lets the scenario wait for a state.
//!
//! Rows are printed by the watch task *before* the snapshot is published, so a line the
//! scenario prints after a wait always follows the row that ended the wait.

use std::collections::BTreeMap;
use std::pin::pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use futures::{StreamExt, stream};
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::error::SandboxError;
use super::objects::{self, APP, NAMESPACE};
use super::snapshot::{ElectionState, PodState, Snapshot};
use super::timeline::Timeline;

/// How long the first lists of pods and elections may take.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// A watch event with the object reduced to its name and what the sandbox keeps of it.
type Reduced<T> = watcher::Event<(String, T)>;

fn reduce<K: ResourceExt, T>(event: watcher::Event<K>, keep: fn(&K) -> T) -> Reduced<T> {
    let named = |object: K| (object.name_any(), keep(&object));
    match event {
        watcher::Event::Apply(object) => watcher::Event::Apply(named(object)),
        watcher::Event::Delete(object) => watcher::Event::Delete(named(object)),
        watcher::Event::Init => watcher::Event::Init,
        watcher::Event::InitApply(object) => watcher::Event::InitApply(named(object)),
        watcher::Event::InitDone => watcher::Event::InitDone,
    }
}

/// A watch-fed copy of the objects of one kind, by name, replaced atomically on every re-list.
struct Mirror<T> {
    objects: BTreeMap<String, T>,
    relisting: Option<BTreeMap<String, T>>,
    listed: bool,
}

impl<T> Mirror<T> {
    fn new() -> Self {
        Self {
            objects: BTreeMap::new(),
            relisting: None,
            listed: false,
        }
    }

    fn apply(&mut self, event: Reduced<T>) {
        match event {
            watcher::Event::Apply((name, object)) => {
                self.objects.insert(name, object);
            }
            watcher::Event::Delete((name, _)) => {
                self.objects.remove(&name);
            }
            watcher::Event::Init => self.relisting = Some(BTreeMap::new()),
            watcher::Event::InitApply((name, object)) => {
                if let Some(relisting) = self.relisting.as_mut() {
                    relisting.insert(name, object);
                }
            }
            watcher::Event::InitDone => {
                self.objects = self.relisting.take().unwrap_or_default();
                self.listed = true;
            }
        }
    }
}

/// What changed: one watch event of either watch.
enum Change {
    Pod(Result<Reduced<PodState>, watcher::Error>),
    Election(Result<Reduced<ElectionState>, watcher::Error>),
}

/// The running watches and the latest snapshot.
pub(crate) struct Observer {
    snapshots: watch::Receiver<Option<Snapshot>>,
    step: Arc<Mutex<&'static str>>,
    task: JoinHandle<()>,
}

impl Observer {
    /// Starts watching and printing rows with `timeline`; returns once both watches have
    /// listed and the first row is printed.
    pub(crate) async fn start(
        client: Client,
        timeline: Timeline,
        step: &'static str,
    ) -> Result<Self, SandboxError> {
        let (sender, mut snapshots) = watch::channel(None);
        let step = Arc::new(Mutex::new(step));
        let task = tokio::spawn(follow(client, timeline, Arc::clone(&step), sender));
        let listed = tokio::time::timeout(START_TIMEOUT, snapshots.wait_for(Option::is_some));
        if !matches!(listed.await, Ok(Ok(_))) {
            task.abort();
            return Err(SandboxError::Setup(format!(
                "could not list the pods and LeaderElections of namespace {NAMESPACE} within \
                 {START_TIMEOUT:?}"
            )));
        }
        Ok(Self {
            snapshots,
            step,
            task,
        })
    }

    /// Names the scenario step shown on the following rows.
    pub(crate) fn set_step(&self, step: &'static str) {
        *self.step.lock().unwrap_or_else(PoisonError::into_inner) = step;
    }

    /// The latest snapshot.
    pub(crate) fn current(&self) -> Snapshot {
        self.snapshots.borrow().clone().unwrap_or_else(|| Snapshot {
            at: Instant::now(),
            pods: Vec::new(),
            election: None,
        })
    }

    /// Waits until `decide` returns something for the latest snapshot (checked now and after
    /// every change) and returns it; after `timeout`, returns the last snapshot as `Err`.
    pub(crate) async fn wait_for<T>(
        &self,
        timeout: Duration,
        mut decide: impl FnMut(&Snapshot) -> Option<T>,
    ) -> Result<T, Snapshot> {
        let mut snapshots = self.snapshots.clone();
        let mut found = None;
        let wait = snapshots.wait_for(|snapshot| {
            found = snapshot.as_ref().and_then(&mut decide);
            found.is_some()
        });
        match tokio::time::timeout(timeout, wait).await {
            Ok(Ok(_)) => found.ok_or_else(|| self.current()),
            Ok(Err(_)) | Err(_) => Err(self.current()),
        }
    }

    /// Stops the watches.
    pub(crate) async fn stop(mut self) {
        self.task.abort();
        // Ends only by this abort, whose error carries nothing.
        let _ = (&mut self.task).await;
    }
}

impl Drop for Observer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The watch task: applies events, prints changed rows, publishes snapshots.
async fn follow(
    client: Client,
    mut timeline: Timeline,
    step: Arc<Mutex<&'static str>>,
    snapshots: watch::Sender<Option<Snapshot>>,
) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let pod_events = watcher(pods, watcher::Config::default())
        .default_backoff()
        .map(|event| Change::Pod(event.map(|event| reduce(event, PodState::from_pod))));
    let election_events = watcher(
        objects::elections(client, NAMESPACE),
        watcher::Config::default(),
    )
    .default_backoff()
    .map(|event| Change::Election(event.map(|event| reduce(event, ElectionState::from_object))));
    let mut changes = pin!(stream::select(pod_events, election_events));
    let mut pods = Mirror::new();
    let mut elections = Mirror::new();
    while let Some(change) = changes.next().await {
        let applied = match change {
            Change::Pod(event) => event.map(|event| pods.apply(event)),
            Change::Election(event) => event.map(|event| elections.apply(event)),
        };
        if let Err(error) = applied {
            tracing::warn!(%error, "sandbox: a watch failed; retrying");
            continue;
        }
        if !(pods.listed && elections.listed) {
            continue;
        }
        let snapshot = Snapshot {
            at: Instant::now(),
            pods: pods.objects.values().cloned().collect(),
            election: elections.objects.get(APP).cloned(),
        };
        let step = *step.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(row) = timeline.row(&snapshot, step) {
            println!("{row}");
        }
        snapshots.send_replace(Some(snapshot));
    }
}
