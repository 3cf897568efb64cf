//! One pod's simulated scheduler and kubelet: a level-triggered loop that compares the
//! newest known version of the pod with what the simulator wants and makes one API call
//! at a time to close the gap.

use std::{future, sync::Arc, time::Duration};

use k8s_openapi::{
    api::core::v1::{Binding, ObjectReference, Pod},
    apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time},
    jiff::Timestamp,
};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use serde_json::json;
use tokio::{sync::watch, time::Instant};

use super::{
    nodes,
    retry::{Backoff, api_code},
    shared::Shared,
    status::{self, Target},
};

/// Consecutive 409s re-decided at once before the worker falls back to its backoff.
const MAX_REFRESHES: u32 = 5;

/// Where a step left the pod.
enum Outcome {
    /// The pod is as the simulator wants it for now; step again at the instant, if any.
    Settled(Option<Instant>),
    /// A request was made whose result arrives as a watch event.
    Pending,
    /// The stored pod was newer than the worker's copy; the copy is refreshed: step again.
    Refreshed,
}

pub(super) struct Worker {
    shared: Arc<Shared>,
    uid: String,
    name: String,
    /// The newest version known: from the watch, a write's response or a re-read.
    pod: Pod,
    pod_rx: watch::Receiver<Pod>,
    changes: watch::Receiver<u64>,
    applied: watch::Sender<u64>,
    /// When the simulator first saw the pod bound (for `ready_delay`).
    running_since: Option<Instant>,
    /// When the simulator first saw the deletion (the grace period counts from here).
    terminating_since: Option<Instant>,
    force_deleted: bool,
    backoff: Backoff,
}

impl Worker {
    pub(super) fn new(
        shared: Arc<Shared>,
        uid: String,
        name: String,
        mut pod_rx: watch::Receiver<Pod>,
        changes: watch::Receiver<u64>,
        applied: watch::Sender<u64>,
    ) -> Self {
        let pod = pod_rx.borrow_and_update().clone();
        Self {
            shared,
            uid,
            name,
            pod,
            pod_rx,
            changes,
            applied,
            running_since: None,
            terminating_since: None,
            force_deleted: false,
            backoff: Backoff::new(),
        }
    }

    /// Steps until the pod is deleted (the dispatcher then drops the sender or aborts).
    pub(super) async fn run(mut self) {
        let mut refreshes = 0;
        loop {
            let epoch = *self.changes.borrow_and_update();
            let wake_at = match self.step().await {
                Ok(Outcome::Refreshed) if refreshes < MAX_REFRESHES => {
                    refreshes += 1;
                    continue;
                }
                Ok(Outcome::Refreshed) => Some(Instant::now() + self.backoff.next_delay()),
                Ok(Outcome::Settled(wake_at)) => {
                    self.applied.send_replace(epoch);
                    self.backoff.reset();
                    wake_at
                }
                Ok(Outcome::Pending) => {
                    self.backoff.reset();
                    None
                }
                Err(error) => {
                    let delay = self.backoff.next_delay();
                    tracing::warn!(
                        %error,
                        namespace = self.shared.namespace(),
                        pod = self.name,
                        ?delay,
                        "pod simulator: API call failed; retrying"
                    );
                    Some(Instant::now() + delay)
                }
            };
            refreshes = 0;
            if !self.wait(wake_at).await {
                return;
            }
        }
    }

    /// Waits for a new pod version (which it takes), a command or `wake_at`; false once
    /// the pod is gone.
    async fn wait(&mut self, wake_at: Option<Instant>) -> bool {
        let timer = async {
            match wake_at {
                Some(at) => tokio::time::sleep_until(at).await,
                None => future::pending().await,
            }
        };
        tokio::select! {
            changed = self.pod_rx.changed() => {
                if changed.is_err() {
                    return false;
                }
                self.pod = self.pod_rx.borrow_and_update().clone();
                true
            }
            changed = self.changes.changed() => changed.is_ok(),
            () = timer => true,
        }
    }

    async fn step(&mut self) -> Result<Outcome, kube::Error> {
        let node = self.pod.spec.as_ref().and_then(|s| s.node_name.as_deref());
        tracing::debug!(
            namespace = self.shared.namespace(),
            pod = self.name,
            resource_version = self.pod.metadata.resource_version,
            node,
            terminating = self.pod.metadata.deletion_timestamp.is_some(),
            "pod simulator: step"
        );
        let Some(node) = node else {
            if self.pod.metadata.deletion_timestamp.is_some() {
                // Unscheduled pods are deleted by the API server itself (or wait for
                // their finalizers); no kubelet is involved.
                return Ok(Outcome::Settled(None));
            }
            return self.bind().await;
        };
        let Some(index) = nodes::node_index(node) else {
            // Another kubelet's pod.
            return Ok(Outcome::Settled(None));
        };
        if self.pod.metadata.deletion_timestamp.is_some() {
            self.terminate(index).await
        } else {
            self.run_on(index).await
        }
    }

    /// Binds the pod to the next healthy node, as the scheduler does.
    async fn bind(&mut self) -> Result<Outcome, kube::Error> {
        let Some(index) = self.shared.pick_node() else {
            // Every node is failed: a recover_node command wakes the worker.
            return Ok(Outcome::Settled(None));
        };
        let binding = Binding {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                uid: Some(self.uid.clone()),
                ..ObjectMeta::default()
            },
            target: ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Node".into()),
                name: Some(nodes::node_name(index)),
                ..ObjectReference::default()
            },
        };
        let bound = self
            .shared
            .api
            .create_subresource::<_, serde_json::Value>(
                "binding",
                &self.name,
                &PostParams::default(),
                &binding,
            )
            .await;
        match bound {
            Ok(_) => Ok(Outcome::Pending),
            // Deleted; or already bound, or another pod now has the name. Either way the
            // watch brings the news.
            Err(error) if matches!(api_code(&error), Some(404 | 409)) => Ok(Outcome::Pending),
            Err(error) => Err(error),
        }
    }

    /// Keeps a bound pod running, Ready as the simulator's state says.
    async fn run_on(&mut self, index: usize) -> Result<Outcome, kube::Error> {
        let ready_at =
            *self.running_since.get_or_insert_with(Instant::now) + self.shared.options.ready_delay;
        let delayed = Instant::now() < ready_at;
        let ready = !delayed && self.shared.wants_ready(&self.uid, index);
        Ok(match self.write_status(index, ready).await? {
            Outcome::Settled(_) if delayed => Outcome::Settled(Some(ready_at)),
            outcome => outcome,
        })
    }

    /// Stops a terminating pod: NotReady at once, deleted for good after the grace period.
    async fn terminate(&mut self, index: usize) -> Result<Outcome, kube::Error> {
        let since = *self.terminating_since.get_or_insert_with(Instant::now);
        if self.force_deleted {
            return Ok(Outcome::Settled(None));
        }
        match self.write_status(index, false).await? {
            Outcome::Settled(_) => {}
            outcome => return Ok(outcome),
        }
        let deadline = since + self.grace_period();
        if Instant::now() < deadline {
            return Ok(Outcome::Settled(Some(deadline)));
        }
        self.force_delete().await
    }

    fn grace_period(&self) -> Duration {
        let seconds = self.pod.metadata.deletion_grace_period_seconds.unwrap_or(0);
        let grace = Duration::from_secs(u64::try_from(seconds).unwrap_or(0));
        self.shared
            .options
            .max_grace
            .map_or(grace, |cap| grace.min(cap))
    }

    /// The kubelet's last step: delete with grace 0, only this pod (UID precondition).
    async fn force_delete(&mut self) -> Result<Outcome, kube::Error> {
        let params = DeleteParams::default()
            .grace_period(0)
            .preconditions(Preconditions {
                uid: Some(self.uid.clone()),
                resource_version: None,
            });
        match self.shared.api.delete(&self.name, &params).await {
            // 404: already gone; 409: the name belongs to another pod now.
            Err(error) if !matches!(api_code(&error), Some(404 | 409)) => Err(error),
            _ => {
                self.force_deleted = true;
                Ok(Outcome::Settled(None))
            }
        }
    }

    /// Writes the running status with the given readiness unless the pod already has it.
    async fn write_status(&mut self, index: usize, ready: bool) -> Result<Outcome, kube::Error> {
        let target = Target {
            host_ip: nodes::host_ip(index),
            pod_ip: self
                .shared
                .pod_ip(&self.uid, index, status::existing_pod_ip(&self.pod)),
            ready,
        };
        if status::is_current(&self.pod, &target) {
            return Ok(Outcome::Settled(None));
        }
        // uid and resourceVersion make the merge patch conditional: it never lands on a
        // newer version (409) or on another pod that took the name.
        let patch = json!({
            "metadata": {"uid": self.uid, "resourceVersion": self.pod.metadata.resource_version},
            "status": status::render(&self.pod, &target, &Time(Timestamp::now())),
        });
        let written = self
            .shared
            .api
            .patch_status(&self.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await;
        match written {
            Ok(pod) => {
                self.pod = pod;
                Ok(Outcome::Settled(None))
            }
            Err(error) => match api_code(&error) {
                Some(409) => self.refresh().await,
                Some(404) => Ok(Outcome::Pending),
                _ => Err(error),
            },
        }
    }

    /// Re-reads the pod after a conflict.
    async fn refresh(&mut self) -> Result<Outcome, kube::Error> {
        tracing::debug!(
            namespace = self.shared.namespace(),
            pod = self.name,
            "pod simulator: status write conflicted; re-reading"
        );
        match self.shared.api.get_opt(&self.name).await? {
            Some(pod) if pod.metadata.uid.as_deref() == Some(&self.uid) => {
                self.pod = pod;
                Ok(Outcome::Refreshed)
            }
            // Deleted, or replaced by another pod of the same name: the watch brings the
            // deletion, which ends this worker.
            _ => Ok(Outcome::Pending),
        }
    }
}
