//! Per-test namespaces: creation, bounded deletion, and a dump of their pods and events when a
//! test fails.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::time::Duration;

use futures::FutureExt;
use k8s_openapi::api::core::v1::{Event, Namespace, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::runtime::wait::{await_condition, conditions};
use kube::{Api, Client, ResourceExt};
use rand::Rng;
use rand::distr::Alphanumeric;

use super::test_cluster::TestCluster;

/// Label on every namespace made here.
pub const TEST_NAMESPACE_LABEL: &str = "testkit.elector.dev/test";
/// How long a namespace deletion is awaited.
const DELETE_TIMEOUT: Duration = Duration::from_secs(60);
/// Length of the random namespace suffix.
const SUFFIX_LEN: usize = 6;

impl TestCluster {
    /// A fresh namespace `<prefix>-<random>` labelled `testkit.elector.dev/test=true`.
    ///
    /// # Panics
    /// When the apiserver refuses to create it (for example an invalid prefix).
    pub async fn namespace(&self, prefix: &str) -> String {
        let suffix: String = rand::rng()
            .sample_iter(Alphanumeric)
            .take(SUFFIX_LEN)
            .map(|c| char::from(c).to_ascii_lowercase())
            .collect();
        let name = format!("{prefix}-{suffix}");
        let namespace = Namespace {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                labels: Some([(TEST_NAMESPACE_LABEL.into(), "true".into())].into()),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        };
        let namespaces: Api<Namespace> = Api::all(self.client().await);
        if let Err(error) = namespaces.create(&PostParams::default(), &namespace).await {
            panic!("testkit: cannot create namespace {name}: {error}");
        }
        name
    }

    /// Deletes a namespace and waits (at most a minute) until it is gone.
    ///
    /// Pods are deleted with a zero grace period too: without a kubelet, a pod bound to a node
    /// would otherwise stay `Terminating` and hold the namespace forever. A namespace still
    /// present after the bound is reported on stderr, not panicked on: its random name cannot
    /// disturb other tests. Takes at least 5 s: kube-controller-manager 1.20 holds every
    /// namespace deletion for a fixed 5 s before it starts.
    pub async fn delete_namespace(&self, name: &str) {
        let client = self.client().await;
        let Some(uid) = start_deletion(&client, name).await else {
            return;
        };
        let namespaces: Api<Namespace> = Api::all(client);
        let gone = await_condition(namespaces, name, conditions::is_deleted(&uid));
        match tokio::time::timeout(DELETE_TIMEOUT, gone).await {
            Ok(Ok(_)) => {}
            Ok(Err(error)) => eprintln!("testkit: watching namespace {name} go failed: {error}"),
            Err(_) => eprintln!(
                "testkit: namespace {name} still exists {DELETE_TIMEOUT:?} after its deletion"
            ),
        }
    }
}

/// Deletes namespace `name` and force-deletes its pods, returning its UID while it still exists
/// (`None` when it is gone already, or when the deletion failed, which is reported on stderr).
async fn start_deletion(client: &Client, name: &str) -> Option<String> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let uid = match namespaces.delete(name, &DeleteParams::default()).await {
        // A `Status` answer means the namespace is gone already.
        Ok(deleted) => deleted.left().and_then(|ns| ns.uid()),
        Err(kube::Error::Api(status)) if status.is_not_found() => return None,
        Err(error) => {
            eprintln!("testkit: cannot delete namespace {name}: {error}");
            return None;
        }
    };
    // After the namespace turned Terminating, nothing can add pods to it any more.
    let pods: Api<Pod> = Api::namespaced(client.clone(), name);
    let force = DeleteParams {
        grace_period_seconds: Some(0),
        ..DeleteParams::default()
    };
    if let Err(error) = pods.delete_collection(&force, &ListParams::default()).await {
        eprintln!("testkit: cannot force-delete the pods of namespace {name}: {error}");
    }
    uid
}

/// Runs `test(client, namespace)` in a fresh namespace of the shared cluster, with an admin
/// client. When the test panics, dumps the namespace's pods (name, labels, annotations, phase,
/// readiness, deletionTimestamp) and events to stderr. Always deletes the namespace afterwards
/// (without waiting for the namespace controller's fixed 5 s; see
/// [`TestCluster::delete_namespace`] to wait), then resumes the panic. Returns at once, skipping
/// the test, when [`TestCluster::shared`] is `None`.
pub async fn with_namespace<F, Fut>(prefix: &str, test: F)
where
    F: FnOnce(Client, String) -> Fut,
    Fut: Future<Output = ()>,
{
    let Some(cluster) = TestCluster::shared() else {
        return;
    };
    let client = cluster.client().await;
    let namespace = cluster.namespace(prefix).await;
    let outcome = AssertUnwindSafe(test(client.clone(), namespace.clone()))
        .catch_unwind()
        .await;
    if outcome.is_err() {
        dump_namespace(&client, &namespace).await;
    }
    start_deletion(&client, &namespace).await;
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}

/// Prints the pods and events of `namespace` to stderr.
async fn dump_namespace(client: &Client, namespace: &str) {
    eprintln!("==== testkit: state of namespace {namespace} after the failure ====");
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    match pods.list(&ListParams::default()).await {
        Ok(list) => {
            eprintln!("-- pods ({}):", list.items.len());
            for pod in &list.items {
                eprintln!("{}", describe_pod(pod));
            }
        }
        Err(error) => eprintln!("-- pods: cannot list: {error}"),
    }
    let events: Api<Event> = Api::namespaced(client.clone(), namespace);
    match events.list(&ListParams::default()).await {
        Ok(list) => {
            eprintln!("-- events ({}):", list.items.len());
            for event in &list.items {
                eprintln!("{}", describe_event(event));
            }
        }
        Err(error) => eprintln!("-- events: cannot list: {error}"),
    }
    eprintln!("==== end of namespace {namespace} ====");
}

/// One line about a pod.
fn describe_pod(pod: &Pod) -> String {
    let status = pod.status.as_ref();
    let ready = status
        .and_then(|s| s.conditions.as_ref())
        .and_then(|conditions| conditions.iter().find(|c| c.type_ == "Ready"))
        .map_or("-", |c| c.status.as_str());
    format!(
        "  {} phase={} ready={ready} deletionTimestamp={} labels={:?} annotations={:?}",
        pod.name_any(),
        status.and_then(|s| s.phase.as_deref()).unwrap_or("-"),
        pod.metadata
            .deletion_timestamp
            .as_ref()
            .map_or_else(|| "-".to_string(), |t| t.0.to_string()),
        pod.labels(),
        pod.annotations(),
    )
}

/// One line about an event (core/v1 view, which also shows `events.k8s.io/v1` events).
fn describe_event(event: &Event) -> String {
    let time = event
        .event_time
        .as_ref()
        .map(|t| t.0.to_string())
        .or_else(|| event.last_timestamp.as_ref().map(|t| t.0.to_string()))
        .unwrap_or_else(|| "-".into());
    let involved = &event.involved_object;
    format!(
        "  {time} {} {} {}/{} x{}: {}",
        event.type_.as_deref().unwrap_or("-"),
        event.reason.as_deref().unwrap_or("-"),
        involved.kind.as_deref().unwrap_or("-"),
        involved.name.as_deref().unwrap_or("-"),
        event
            .series
            .as_ref()
            .and_then(|s| s.count)
            .or(event.count)
            .unwrap_or(1),
        event.message.as_deref().unwrap_or(""),
    )
}
