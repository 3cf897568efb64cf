//! A watch recorder that keeps every version of every pod of a namespace, so tests can
//! assert the safety rules over the whole history as seen through the API server
//! (docs/design.md §2, rule 1: at most one leader label per election at every instant).
//!
//! ```no_run
//! # async fn demo(client: kube::Client) -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use testkit::recorder::WatchRecorder;
//! let recorder = WatchRecorder::start(client, "shop").await?;
//! // ... run the operator, move the leader ...
//! recorder
//!     .wait_until(Duration::from_secs(10), |pods| {
//!         pods.values().any(|p| p.has_label("elector.dev/role", "leader"))
//!     })
//!     .await?;
//! recorder.assert_never_two("elector.dev/role", "leader");
//! recorder.stop().await;
//! # Ok(()) }
//! ```
//!
//! The recorder lists the namespace's pods, then watches from the list's resourceVersion
//! (with bookmarks), re-watching from the last resourceVersion seen whenever a stream
//! ends. When the server answers 410 (the resourceVersion is too old) it re-lists and
//! records a gap: versions in between may be missing, so [`WatchRecorder::assert_never_two`]
//! refuses to vouch for such a history. Pod incarnations the re-list no longer shows are
//! recorded as [`PodEvent::Vanished`].

mod history;
mod version;

use std::{
    collections::BTreeMap,
    fmt::Write as _,
    pin::pin,
    sync::{Arc, Mutex, MutexGuard, PoisonError},
    time::{Duration, Instant},
};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::{
    Api,
    api::{ListParams, WatchParams},
    core::WatchEvent,
};
use tokio::{sync::watch, task::JoinHandle};

pub use history::HistoryStep;
pub use version::{PodEvent, PodVersion};

/// Records every pod version of one namespace until stopped (or dropped).
pub struct WatchRecorder {
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

/// Why [`WatchRecorder::start`] failed.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The initial list failed.
    #[error("listing pods: {0}")]
    List(#[from] kube::Error),
    /// The initial list had no usable resourceVersion to watch from.
    #[error("the pod list has no usable resourceVersion: {0}")]
    ResourceVersion(String),
}

impl WatchRecorder {
    /// Lists the pods of `namespace` (with `client`), records them, and starts watching
    /// in the background. Returns once the list is recorded, so the recorder is running
    /// before the test acts.
    pub async fn start(client: kube::Client, namespace: &str) -> Result<WatchRecorder, StartError> {
        let api: Api<Pod> = Api::namespaced(client, namespace);
        let list = api.list(&ListParams::default()).await?;
        let resource_version = list.metadata.resource_version.unwrap_or_default();
        version::parse_resource_version(&resource_version).map_err(StartError::ResourceVersion)?;
        let shared = Arc::new(Shared::default());
        shared.relisted(&list.items, &resource_version);
        let task = tokio::spawn(follow(api, Arc::clone(&shared), resource_version));
        Ok(WatchRecorder { shared, task })
    }

    /// Every version recorded so far, in the order received.
    pub fn versions(&self) -> Vec<PodVersion> {
        self.shared.log().versions.clone()
    }

    /// How many times the history may have lost versions (a 410 and re-list, or a pod
    /// the server sent that could not be read).
    pub fn gaps(&self) -> usize {
        self.shared.log().gaps.len()
    }

    /// The pods of the namespace as of the latest recorded version, by name.
    pub fn current(&self) -> BTreeMap<String, PodVersion> {
        history::current(&self.shared.log().versions)
    }

    /// The largest number of pods that carried label `key=value` at one resourceVersion.
    pub fn max_simultaneous(&self, key: &str, value: &str) -> usize {
        self.max_simultaneous_among(key, value, |_| true)
    }

    /// Like [`max_simultaneous`](Self::max_simultaneous), counting only pods whose version
    /// at that resourceVersion `filter` accepts (e.g. the pods of one election).
    pub fn max_simultaneous_among(
        &self,
        key: &str,
        value: &str,
        filter: impl Fn(&PodVersion) -> bool,
    ) -> usize {
        history::max_simultaneous(&self.shared.log().versions, key, value, filter)
    }

    /// Panics with the offending resourceVersion and pod names if two pods ever carried
    /// `key=value` at one resourceVersion; also panics if [`gaps`](Self::gaps) > 0,
    /// because then the history is not known to be complete.
    pub fn assert_never_two(&self, key: &str, value: &str) {
        self.assert_never_two_among(key, value, |_| true);
    }

    /// Like [`assert_never_two`](Self::assert_never_two), among the pods `filter` accepts.
    pub fn assert_never_two_among(
        &self,
        key: &str,
        value: &str,
        filter: impl Fn(&PodVersion) -> bool,
    ) {
        let log = self.shared.log();
        assert!(
            log.gaps.is_empty(),
            "the pod history has {} gap(s), so it cannot prove {key}={value} was never on two pods: {:?}",
            log.gaps.len(),
            log.gaps
        );
        if let Some(overlap) = history::first_overlap(&log.versions, key, value, filter) {
            panic!(
                "{key}={value} was on {} pods at resourceVersion {}: {:?}",
                overlap.pods.len(),
                overlap.resource_version,
                overlap.pods
            );
        }
    }

    /// The values label `key` took on pods named `pod`, consecutive duplicates collapsed.
    /// `None` means the label was absent or no pod of that name existed, so a deleted and
    /// re-created pod shows a `None` between its incarnations; see
    /// [`label_timeline`](Self::label_timeline) for the uids.
    pub fn label_history(&self, pod: &str, key: &str) -> Vec<Option<String>> {
        history::values(&self.label_timeline(pod, key))
    }

    /// Each change of label `key` on pods named `pod`, with resourceVersion and incarnation.
    pub fn label_timeline(&self, pod: &str, key: &str) -> Vec<HistoryStep> {
        history::timeline(&self.shared.log().versions, pod, |v| v.labels.get(key))
    }

    /// Like [`label_history`](Self::label_history), for annotation `key`.
    pub fn annotation_history(&self, pod: &str, key: &str) -> Vec<Option<String>> {
        let log = self.shared.log();
        history::values(&history::timeline(&log.versions, pod, |v| {
            v.annotations.get(key)
        }))
    }

    /// Waits until `pred` holds for the current pods (re-checked on every recorded
    /// version), or `timeout` elapses; then `Err` describes the current pods.
    pub async fn wait_until(
        &self,
        timeout: Duration,
        pred: impl Fn(&BTreeMap<String, PodVersion>) -> bool,
    ) -> Result<(), String> {
        let mut changes = self.shared.changes.subscribe();
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            changes.borrow_and_update();
            let pods = self.current();
            if pred(&pods) {
                return Ok(());
            }
            if !matches!(
                tokio::time::timeout_at(deadline, changes.changed()).await,
                Ok(Ok(()))
            ) {
                return Err(format!(
                    "condition not met within {timeout:?}; pods now: {}",
                    describe(&pods)
                ));
            }
        }
    }

    /// Stops watching. The history stays readable until the recorder is dropped.
    pub async fn stop(mut self) {
        self.task.abort();
        // The task only ends by this abort; its JoinError says so and carries nothing.
        let _ = (&mut self.task).await;
    }
}

impl Drop for WatchRecorder {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The state shared by the recorder handle and its watch task.
struct Shared {
    log: Mutex<Log>,
    /// Bumped after every change of the log.
    changes: watch::Sender<u64>,
}

#[derive(Default)]
struct Log {
    versions: Vec<PodVersion>,
    /// Why versions may be missing, one entry per gap.
    gaps: Vec<String>,
}

impl Default for Shared {
    fn default() -> Self {
        Shared {
            log: Mutex::default(),
            changes: watch::Sender::new(0),
        }
    }
}

impl Shared {
    fn log(&self) -> MutexGuard<'_, Log> {
        self.log.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn update(&self, change: impl FnOnce(&mut Log)) {
        change(&mut self.log());
        self.changes.send_modify(|n| *n += 1);
    }

    fn gap(&self, reason: String) {
        tracing::warn!("pod recorder: history gap: {reason}");
        self.update(|log| log.gaps.push(reason));
    }

    /// Records a watch event's pod; returns its resourceVersion to resume from.
    fn watched(&self, pod: &Pod, event: PodEvent) -> Option<String> {
        match PodVersion::from_pod(pod, event, Instant::now()) {
            Ok(version) => self.update(|log| log.versions.push(version)),
            Err(reason) => self.gap(reason),
        }
        pod.metadata.resource_version.clone()
    }

    /// Records a (re-)list at `list_rv`: pods whose incarnation changed or disappeared
    /// since the last recorded state become `Vanished`, listed versions not yet
    /// recorded become `InitialList`.
    fn relisted(&self, pods: &[Pod], list_rv: &str) {
        let now = Instant::now();
        let mut listed = BTreeMap::new();
        for pod in pods {
            match PodVersion::from_pod(pod, PodEvent::InitialList, now) {
                Ok(version) => {
                    listed.insert(version.name.clone(), version);
                }
                Err(reason) => self.gap(reason),
            }
        }
        let list_rv = version::parse_resource_version(list_rv);
        self.update(|log| {
            let known = history::current(&log.versions);
            for (name, old) in &known {
                let vanished_at = match listed.get(name) {
                    Some(new) if new.uid == old.uid => continue,
                    Some(new) => Ok(new.resource_version),
                    None => list_rv.clone(),
                };
                match vanished_at {
                    Ok(resource_version) => log.versions.push(PodVersion {
                        event: PodEvent::Vanished,
                        resource_version,
                        at: now,
                        ..old.clone()
                    }),
                    Err(reason) => log.gaps.push(format!("pod {name} vanished: {reason}")),
                }
            }
            let new = listed.into_values().filter(|version| {
                known.get(&version.name).is_none_or(|old| {
                    (&old.uid, old.resource_version) != (&version.uid, version.resource_version)
                })
            });
            log.versions.extend(new);
        });
    }
}

/// Watches from `resource_version` until aborted, re-watching when a stream ends and
/// re-listing on 410.
async fn follow(api: Api<Pod>, shared: Arc<Shared>, mut resource_version: String) {
    let mut backoff = Backoff::default();
    loop {
        let stream = match api.watch(&WatchParams::default(), &resource_version).await {
            Ok(stream) => stream,
            Err(kube::Error::Api(status)) if status.code == 410 => {
                resource_version =
                    relist(&api, &shared, format!("watch refused: {}", status.message)).await;
                continue;
            }
            Err(err) => {
                tracing::warn!("pod recorder: starting a watch failed: {err}");
                backoff.wait().await;
                continue;
            }
        };
        let mut stream = pin!(stream);
        let mut received = false;
        while let Some(event) = stream.next().await {
            received = true;
            let seen = match event {
                Ok(WatchEvent::Added(pod)) => shared.watched(&pod, PodEvent::Added),
                Ok(WatchEvent::Modified(pod)) => shared.watched(&pod, PodEvent::Modified),
                Ok(WatchEvent::Deleted(pod)) => shared.watched(&pod, PodEvent::Deleted),
                Ok(WatchEvent::Bookmark(bookmark)) => Some(bookmark.metadata.resource_version),
                Ok(WatchEvent::Error(status)) if status.code == 410 => {
                    resource_version =
                        relist(&api, &shared, format!("watch expired: {}", status.message)).await;
                    break;
                }
                Ok(WatchEvent::Error(status)) => {
                    tracing::warn!("pod recorder: watch error event: {status}");
                    None
                }
                Err(err) => {
                    tracing::warn!("pod recorder: reading the watch failed: {err}");
                    None
                }
            };
            if let Some(rv) = seen.filter(|rv| !rv.is_empty()) {
                resource_version = rv;
            }
        }
        if received {
            backoff = Backoff::default();
        } else {
            backoff.wait().await;
        }
    }
}

/// Records a gap, then lists until it succeeds; returns the list's resourceVersion.
async fn relist(api: &Api<Pod>, shared: &Shared, reason: String) -> String {
    shared.gap(reason);
    let mut backoff = Backoff::default();
    loop {
        match api.list(&ListParams::default()).await {
            Ok(list) => {
                let resource_version = list.metadata.resource_version.unwrap_or_default();
                match version::parse_resource_version(&resource_version) {
                    Ok(_) => {
                        shared.relisted(&list.items, &resource_version);
                        return resource_version;
                    }
                    Err(err) => tracing::warn!("pod recorder: re-list unusable: {err}"),
                }
            }
            Err(err) => tracing::warn!("pod recorder: re-list failed: {err}"),
        }
        backoff.wait().await;
    }
}

/// Exponential retry delay, 50 ms doubling to 2 s.
struct Backoff(Duration);

impl Default for Backoff {
    fn default() -> Self {
        Backoff(Duration::from_millis(50))
    }
}

impl Backoff {
    async fn wait(&mut self) {
        tokio::time::sleep(self.0).await;
        self.0 = (self.0 * 2).min(Duration::from_secs(2));
    }
}

fn describe(pods: &BTreeMap<String, PodVersion>) -> String {
    if pods.is_empty() {
        return "none".into();
    }
    let mut out = String::new();
    for pod in pods.values() {
        let _ = write!(
            out,
            "\n  {} (uid {}, rv {}, ready {}, deleting {}) labels {:?} annotations {:?}",
            pod.name,
            pod.uid,
            pod.resource_version,
            pod.ready,
            pod.deleting,
            pod.labels,
            pod.annotations
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::api::ObjectMeta;

    fn pod(name: &str, uid: &str, rv: u64) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                uid: Some(uid.into()),
                resource_version: Some(rv.to_string()),
                ..ObjectMeta::default()
            },
            ..Pod::default()
        }
    }

    fn events(shared: &Shared) -> Vec<(String, String, u64, PodEvent)> {
        let log = shared.log();
        let event = |v: &PodVersion| (v.name.clone(), v.uid.clone(), v.resource_version, v.event);
        log.versions.iter().map(event).collect()
    }

    #[test]
    fn relist_records_what_changed_during_the_gap() {
        let shared = Shared::default();
        shared.relisted(
            &[
                pod("kept", "k", 1),
                pod("gone", "g", 2),
                pod("again", "a1", 3),
            ],
            "3",
        );
        shared.watched(&pod("kept", "k", 4), PodEvent::Modified);
        let listed_before = events(&shared).len();

        shared.relisted(
            &[
                pod("kept", "k", 4),
                pod("again", "a2", 7),
                pod("new", "n", 8),
            ],
            "9",
        );

        let after: Vec<_> = events(&shared).split_off(listed_before);
        let expected = [
            ("again", "a1", 7, PodEvent::Vanished),
            ("gone", "g", 9, PodEvent::Vanished),
            ("again", "a2", 7, PodEvent::InitialList),
            ("new", "n", 8, PodEvent::InitialList),
        ];
        let expected: Vec<_> = expected
            .iter()
            .map(|(n, u, rv, e)| (n.to_string(), u.to_string(), *rv, *e))
            .collect();
        assert_eq!(after, expected);
        let now = history::current(&shared.log().versions);
        assert!(now.keys().eq(["again", "kept", "new"]));
        assert_eq!(now["again"].uid, "a2");
    }

    #[test]
    fn unreadable_pods_are_gaps() {
        let shared = Shared::default();
        shared.watched(&Pod::default(), PodEvent::Added);
        assert_eq!(shared.log().gaps.len(), 1);
        assert!(shared.log().versions.is_empty());
    }
}
