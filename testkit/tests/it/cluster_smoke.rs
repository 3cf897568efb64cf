//! Smoke tests of the real Kubernetes test cluster (`testkit::cluster`): what the operator and
//! kube-runtime rely on, checked against kube-apiserver and kube-controller-manager v1.20.2.
//!
//! Every wait is on an API condition (a watch, or a bounded poll of an API answer), never a
//! fixed sleep.

use std::fmt::Debug;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::{Stream, StreamExt};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use k8s_openapi::api::events::v1::Event as EventV1;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
    PostParams,
};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::finalizer::{Event as Finalized, finalizer};
use kube::runtime::reflector::{self, Store};
use kube::runtime::wait::{await_condition, conditions};
use kube::runtime::watcher;
use kube::runtime::watcher::Event as Watched;
use kube::{Api, Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;
use testkit::cluster::{TestCluster, with_namespace};

/// Bound on every wait.
const TIMEOUT: Duration = Duration::from_secs(60);

/// `future`, or a panic naming `what` after [`TIMEOUT`].
async fn within<T>(what: &str, future: impl Future<Output = T>) -> T {
    tokio::time::timeout(TIMEOUT, future)
        .await
        .unwrap_or_else(|_| panic!("timed out after {TIMEOUT:?} waiting for {what}"))
}

/// Creates `value` (a JSON manifest) through `api`.
async fn create<K>(api: &Api<K>, value: serde_json::Value) -> K
where
    K: Resource + Clone + Debug + Serialize + DeserializeOwned,
{
    let object: K = serde_json::from_value(value).unwrap();
    api.create(&PostParams::default(), &object).await.unwrap()
}

/// A pod that never runs (no scheduler, no kubelet) with label `app`.
fn pod(name: &str, app: &str) -> serde_json::Value {
    json!({
        "metadata": {"name": name, "labels": {"app": app}},
        "spec": {"containers": [{"name": "main", "image": "busybox"}]},
    })
}

/// A Deployment of `replicas` pods labelled `app`.
fn deployment(name: &str, replicas: i32) -> serde_json::Value {
    json!({
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": pod(name, name),
        },
    })
}

/// The next watcher event satisfying `matches`, skipping others.
async fn next_matching<K: Debug>(
    events: &mut (impl Stream<Item = watcher::Result<Watched<K>>> + Unpin),
    what: &str,
    matches: impl Fn(&Watched<K>) -> bool,
) -> Watched<K> {
    within(what, async {
        loop {
            let event = events.next().await.expect("watch ended").unwrap();
            if matches(&event) {
                return event;
            }
        }
    })
    .await
}

/// A reflector store over `api` (objects matching `labels`) with the stream that feeds it.
struct Reflected<K: Resource + Clone + 'static>
where
    K::DynamicType: std::hash::Hash + Eq + Clone,
{
    store: Store<K>,
    events: futures::stream::BoxStream<'static, watcher::Result<Watched<K>>>,
    /// Whether the initial list has been fed in.
    listed: bool,
}

impl<K> Reflected<K>
where
    K: Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned + Send + Sync + 'static,
{
    fn new(api: Api<K>, labels: &str) -> Self {
        let (store, writer) = reflector::store();
        let events = reflector::reflector(
            writer,
            watcher(api, watcher::Config::default().labels(labels)),
        );
        Self {
            store,
            events: events.boxed(),
            listed: false,
        }
    }

    /// Feeds the store until `done` holds for its contents.
    async fn until(&mut self, what: &str, done: impl Fn(&[Arc<K>]) -> bool) {
        within(what, async {
            while !(self.listed && done(&self.store.state())) {
                let event = self.events.next().await.expect("watch ended");
                self.listed |= matches!(event.expect("watch error"), Watched::InitDone);
            }
        })
        .await;
    }
}

/// Whether every object in `objects` has a controller owner of `kind`, and there are `count`.
fn owned_by<K: Resource>(objects: &[Arc<K>], kind: &str, count: usize) -> bool {
    objects.len() == count
        && objects.iter().all(|o| {
            o.owner_references()
                .iter()
                .any(|r| r.kind == kind && r.controller == Some(true))
        })
}

#[tokio::test]
async fn watcher_follows_create_label_patch_and_leaving_the_selector() {
    with_namespace("smoke-watch", |client, ns| async move {
        let pods: Api<Pod> = Api::namespaced(client, &ns);
        let mut events =
            watcher(pods.clone(), watcher::Config::default().labels("app=watched")).boxed();
        next_matching(&mut events, "InitDone", |e| matches!(e, Watched::InitDone)).await;

        create(&pods, pod("w1", "watched")).await;
        create(&pods, pod("other", "unwatched")).await;
        let created = next_matching(&mut events, "Apply of w1", |e| matches!(e, Watched::Apply(_))).await;
        assert!(matches!(created, Watched::Apply(p) if p.name_any() == "w1"));

        let label = |labels| Patch::Merge(json!({"metadata": {"labels": labels}}));
        pods.patch("w1", &PatchParams::default(), &label(json!({"extra": "1"})))
            .await
            .unwrap();
        next_matching(&mut events, "Apply with the new label", |e| {
            matches!(e, Watched::Apply(p) if p.labels().get("extra").is_some_and(|v| v == "1"))
        })
        .await;

        pods.patch("w1", &PatchParams::default(), &label(json!({"app": "gone"})))
            .await
            .unwrap();
        let left = next_matching(&mut events, "Delete on leaving the selector", |e| {
            !matches!(e, Watched::Apply(_))
        })
        .await;
        // The server sends DELETED carrying the last state that matched the selector.
        assert!(matches!(left, Watched::Delete(p) if p.name_any() == "w1" && p.labels()["app"] == "watched"));
    })
    .await;
}

#[tokio::test]
async fn reflector_store_converges() {
    with_namespace("smoke-reflect", |client, ns| async move {
        let maps: Api<ConfigMap> = Api::namespaced(client, &ns);
        let mut reflected = Reflected::new(maps.clone(), "app=reflected");
        for name in ["a", "b", "c"] {
            create(
                &maps,
                json!({"metadata": {"name": name, "labels": {"app": "reflected"}}, "data": {"v": "1"}}),
            )
            .await;
        }
        create(&maps, json!({"metadata": {"name": "unlabelled"}})).await;
        reflected
            .until("three ConfigMaps", |state| state.len() == 3)
            .await;

        maps.patch("b", &PatchParams::default(), &Patch::Merge(json!({"data": {"v": "2"}})))
            .await
            .unwrap();
        maps.delete("c", &DeleteParams::default()).await.unwrap();
        reflected
            .until("b updated and c gone", |state| {
                let mut names: Vec<_> = state.iter().map(|m| m.name_any()).collect();
                names.sort();
                names == ["a", "b"]
                    && state.iter().any(|m| {
                        m.name_any() == "b" && m.data.as_ref().is_some_and(|d| d["v"] == "2")
                    })
            })
            .await;
        assert!(reflected.store.state().iter().all(|m| m.name_any() != "unlabelled"));
    })
    .await;
}

/// Finalizer of the controller test.
const FINALIZER: &str = "testkit.elector.dev/cleanup";
/// Annotation the controller test's reconciler sets.
const RECONCILED: &str = "testkit.elector.dev/reconciled";

/// What the controller test's reconciler works with.
struct Context {
    maps: Api<ConfigMap>,
    cleaned_up: AtomicBool,
}

async fn reconcile(
    map: Arc<ConfigMap>,
    ctx: Arc<Context>,
) -> Result<Action, kube::runtime::finalizer::Error<kube::Error>> {
    finalizer(&ctx.maps, FINALIZER, map, |event| async {
        match event {
            Finalized::Apply(map) => {
                let patch = json!({"metadata": {"annotations": {RECONCILED: "true"}}});
                ctx.maps
                    .patch(
                        &map.name_any(),
                        &PatchParams::default(),
                        &Patch::Merge(patch),
                    )
                    .await?;
            }
            Finalized::Cleanup(_) => ctx.cleaned_up.store(true, Ordering::SeqCst),
        }
        Ok(Action::await_change())
    })
    .await
}

#[tokio::test]
async fn controller_with_finalizer_cleans_up_before_deletion() {
    with_namespace("smoke-controller", |client, ns| async move {
        let maps: Api<ConfigMap> = Api::namespaced(client, &ns);
        let ctx = Arc::new(Context {
            maps: maps.clone(),
            cleaned_up: AtomicBool::new(false),
        });
        let controller =
            Controller::new(maps.clone(), watcher::Config::default().labels("app=ctl"))
                .run(
                    reconcile,
                    |_, _, _| Action::requeue(Duration::from_secs(1)),
                    ctx.clone(),
                )
                .for_each(|_| async {});
        let controller = tokio::spawn(controller);

        create(
            &maps,
            json!({"metadata": {"name": "managed", "labels": {"app": "ctl"}}}),
        )
        .await;
        let reconciled = |map: Option<&ConfigMap>| {
            map.is_some_and(|m| {
                m.finalizers().iter().any(|f| f == FINALIZER)
                    && m.annotations().contains_key(RECONCILED)
            })
        };
        let map = within(
            "finalizer and annotation",
            await_condition(maps.clone(), "managed", reconciled),
        )
        .await
        .unwrap()
        .unwrap();
        assert!(!ctx.cleaned_up.load(Ordering::SeqCst));

        maps.delete("managed", &DeleteParams::default())
            .await
            .unwrap();
        within(
            "the ConfigMap to be gone",
            await_condition(
                maps.clone(),
                "managed",
                conditions::is_deleted(&map.uid().unwrap()),
            ),
        )
        .await
        .unwrap();
        assert!(ctx.cleaned_up.load(Ordering::SeqCst), "Cleanup did not run");
        controller.abort();
    })
    .await;
}

/// Group of the test CRD.
const WIDGET_GROUP: &str = "smoke.testkit.elector.dev";

/// Creates the cluster-scoped Widget CRD (plain create: 1.20 rejects SSA of some CRD fields)
/// unless it exists, waits until it is established, and returns its resource.
async fn widget_crd(client: &Client) -> ApiResource {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let name = format!("widgets.{WIDGET_GROUP}");
    let manifest = json!({
        "metadata": {"name": name},
        "spec": {
            "group": WIDGET_GROUP,
            "names": {"kind": "Widget", "plural": "widgets", "singular": "widget"},
            "scope": "Namespaced",
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": {"size": {"type": "integer"}}},
                    "status": {"type": "object", "properties": {
                        "phase": {"type": "string"},
                        "observedGeneration": {"type": "integer"},
                    }},
                }}},
            }],
        },
    });
    let crd: CustomResourceDefinition = serde_json::from_value(manifest).unwrap();
    match crds.create(&PostParams::default(), &crd).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.is_already_exists() => {}
        Err(error) => panic!("creating the CRD: {error}"),
    }
    within(
        "the CRD to be established",
        await_condition(crds, &name, conditions::is_crd_established()),
    )
    .await
    .unwrap();
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(WIDGET_GROUP, "v1", "Widget"),
        "widgets",
    )
}

#[tokio::test]
async fn server_side_apply_of_a_custom_resource_status() {
    with_namespace("smoke-status", |client, ns| async move {
        let resource = widget_crd(&client).await;
        let widgets: Api<DynamicObject> = Api::namespaced_with(client, &ns, &resource);
        let widget = DynamicObject::new("w", &resource)
            .data(json!({"spec": {"size": 3}, "status": {"phase": "IgnoredOnCreate"}}));
        let created = widgets
            .create(&PostParams::default(), &widget)
            .await
            .unwrap();
        assert!(
            created.data.get("status").is_none(),
            "status is dropped on create"
        );

        let status = json!({
            "apiVersion": resource.api_version, "kind": "Widget",
            "status": {"phase": "Ready", "observedGeneration": 1},
        });
        let patched = widgets
            .patch_status(
                "w",
                &PatchParams::apply("smoke").force(),
                &Patch::Apply(status),
            )
            .await
            .unwrap();
        assert_eq!(
            patched.data["status"],
            json!({"phase": "Ready", "observedGeneration": 1})
        );
        assert_eq!(patched.data["spec"], json!({"size": 3}));
        assert_eq!(
            patched.metadata.generation,
            Some(1),
            "status does not bump the generation"
        );
        let manager = patched
            .managed_fields()
            .iter()
            .find(|m| m.manager.as_deref() == Some("smoke"))
            .expect("the status manager is recorded");
        assert_eq!(manager.operation.as_deref(), Some("Apply"));
    })
    .await;
}

#[tokio::test]
async fn recorder_events_are_created_then_merged_into_a_series() {
    with_namespace("smoke-events", |client, ns| async move {
        let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
        let map = create(&maps, json!({"metadata": {"name": "subject"}})).await;
        let recorder = Recorder::new(
            client.clone(),
            Reporter {
                controller: "smoke-controller".into(),
                instance: Some("smoke-0".into()),
            },
        );
        let event = Event {
            type_: EventType::Normal,
            reason: "Probed".into(),
            note: Some("probing".into()),
            action: "Probe".into(),
            secondary: None,
        };
        let reference = map.object_ref(&());
        recorder.publish(&event, &reference).await.unwrap();
        recorder.publish(&event, &reference).await.unwrap();

        let events: Api<EventV1> = Api::namespaced(client, &ns);
        let list = events.list(&ListParams::default()).await.unwrap();
        assert_eq!(list.items.len(), 1, "the repeat patches the first event");
        let recorded = &list.items[0];
        assert_eq!(recorded.reason.as_deref(), Some("Probed"));
        assert_eq!(
            recorded.reporting_controller.as_deref(),
            Some("smoke-controller")
        );
        assert_eq!(recorded.reporting_instance.as_deref(), Some("smoke-0"));
        assert_eq!(
            recorded.regarding.as_ref().and_then(|r| r.name.as_deref()),
            Some("subject")
        );
        assert_eq!(recorded.series.as_ref().map(|s| s.count), Some(2));
    })
    .await;
}

#[tokio::test]
async fn lease_server_side_apply_conflicts_without_force() {
    with_namespace("smoke-lease", |client, ns| async move {
        let leases: Api<Lease> = Api::namespaced(client, &ns);
        let hold = |holder: &str| {
            Patch::Apply(json!({
                "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": "leader"},
                "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15},
            }))
        };
        leases
            .patch("leader", &PatchParams::apply("pod-a"), &hold("pod-a"))
            .await
            .unwrap();

        let error = leases
            .patch("leader", &PatchParams::apply("pod-b"), &hold("pod-b"))
            .await
            .unwrap_err();
        let kube::Error::Api(status) = error else {
            panic!("expected an API error, got {error:?}");
        };
        assert_eq!(
            (status.code, status.reason.as_str()),
            (409, "Conflict"),
            "{status:?}"
        );
        assert!(status.message.contains("pod-a"), "{}", status.message);

        let taken = leases
            .patch(
                "leader",
                &PatchParams::apply("pod-b").force(),
                &hold("pod-b"),
            )
            .await
            .unwrap();
        let holder = taken.spec.and_then(|s| s.holder_identity);
        assert_eq!(holder.as_deref(), Some("pod-b"));
    })
    .await;
}

/// Whether `result` is a 403 Forbidden.
fn is_forbidden<T: Debug>(result: &kube::Result<T>) -> bool {
    matches!(result, Err(kube::Error::Api(status)) if status.is_forbidden())
}

#[tokio::test]
async fn service_account_client_has_exactly_its_rbac_permissions() {
    with_namespace("smoke-rbac", |admin, ns| async move {
        let cluster = TestCluster::shared().unwrap();
        let reader = cluster.service_account_client(&ns, "reader").await;
        let pods: Api<Pod> = Api::namespaced(reader.clone(), &ns);
        let maps: Api<ConfigMap> = Api::namespaced(reader, &ns);
        assert!(is_forbidden(&pods.list(&ListParams::default()).await));

        let roles: Api<Role> = Api::namespaced(admin.clone(), &ns);
        create(&roles, json!({
            "metadata": {"name": "pod-reader"},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}],
        }))
        .await;
        let bindings: Api<RoleBinding> = Api::namespaced(admin, &ns);
        create(&bindings, json!({
            "metadata": {"name": "reader-reads-pods"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-reader"},
            "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": ns}],
        }))
        .await;
        // The authorizer learns of the binding through its informers: poll the API's answer.
        within("the RoleBinding to take effect", async {
            let mut poll = tokio::time::interval(Duration::from_millis(100));
            loop {
                poll.tick().await;
                let listed = pods.list(&ListParams::default()).await;
                if !is_forbidden(&listed) {
                    return listed.unwrap();
                }
            }
        })
        .await;
        assert!(is_forbidden(&maps.list(&ListParams::default()).await), "only pods were granted");
    })
    .await;
}

#[tokio::test]
async fn deployment_creates_replicaset_and_pods_which_gc_removes() {
    with_namespace("smoke-deploy", |client, ns| async move {
        let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
        let replica_sets: Api<ReplicaSet> = Api::namespaced(client.clone(), &ns);
        let pods: Api<Pod> = Api::namespaced(client, &ns);
        create(&deployments, deployment("web", 2)).await;

        let mut sets = Reflected::new(replica_sets, "app=web");
        sets.until("a ReplicaSet owned by the Deployment", |s| {
            owned_by(s, "Deployment", 1)
        })
        .await;
        let mut web = Reflected::new(pods, "app=web");
        web.until("two pods owned by the ReplicaSet", |p| {
            owned_by(p, "ReplicaSet", 2)
        })
        .await;
        let counted = |d: Option<&Deployment>| {
            d.and_then(|d| d.status.as_ref()).and_then(|s| s.replicas) == Some(2)
        };
        within(
            "the Deployment status",
            await_condition(deployments.clone(), "web", counted),
        )
        .await
        .unwrap();

        deployments
            .delete("web", &DeleteParams::background())
            .await
            .unwrap();
        sets.until("the ReplicaSet collected", |s| s.is_empty())
            .await;
        web.until("the pods collected", |p| p.is_empty()).await;
    })
    .await;
}

#[tokio::test]
async fn namespace_deletion_removes_everything_in_it() {
    with_namespace("smoke-nsdel", |client, ns| async move {
        let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
        let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
        let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
        create(&deployments, deployment("app", 1)).await;
        create(&maps, json!({"metadata": {"name": "data"}})).await;
        Reflected::new(pods.clone(), "app=app")
            .until("the Deployment's pod", |p| p.len() == 1)
            .await;

        let namespaces: Api<Namespace> = Api::all(client);
        let deleted = namespaces
            .delete(&ns, &DeleteParams::default())
            .await
            .unwrap();
        let uid = deleted.left().and_then(|n| n.uid()).unwrap();
        within(
            "the namespace controller",
            await_condition(namespaces, &ns, conditions::is_deleted(&uid)),
        )
        .await
        .unwrap();
        assert!(
            pods.list(&ListParams::default())
                .await
                .unwrap()
                .items
                .is_empty()
        );
        assert!(
            maps.list(&ListParams::default())
                .await
                .unwrap()
                .items
                .is_empty()
        );
    })
    .await;
}
