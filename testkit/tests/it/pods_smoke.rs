//! The pod simulator (`testkit::pods`) against the real test cluster: kube-apiserver and
//! kube-controller-manager v1.20.2, with the simulator as scheduler and kubelet.
//!
//! Every wait is a watch bounded by a timeout, never a fixed sleep. Timings worth knowing
//! are printed (`--nocapture` shows them).

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::time::{Duration, Instant};

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::{Node, Pod, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::wait::{await_condition, conditions};
use kube::runtime::watcher;
use kube::{Api, Client, Resource, ResourceExt};
use serde::Deserialize;
use serde_json::json;
use testkit::cluster::{TestCluster, with_namespace};
use testkit::kube_faults::{FaultAction, KubeFault, KubeFaults, Verb};
use testkit::pods::{self, PodSimulator, SimulatorOptions, is_pod_ready};

/// Bound on every wait.
const TIMEOUT: Duration = Duration::from_secs(60);
const SELECTOR: &str = "app=web";

fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_test_writer()
        .try_init();
}

/// `future`, or a panic naming `what` after [`TIMEOUT`].
async fn within<T>(what: &str, future: impl Future<Output = T>) -> T {
    tokio::time::timeout(TIMEOUT, future)
        .await
        .unwrap_or_else(|_| panic!("timed out after {TIMEOUT:?} waiting for {what}"))
}

/// Starts a simulator in `ns` with `options` whose requests go through `client`.
async fn simulator(client: Client, ns: &str, options: SimulatorOptions) -> PodSimulator {
    init_tracing();
    PodSimulator::start(client, ns, options).await
}

/// Creates the Deployment `web` of `replicas` pods labelled `app=web`.
async fn create_web(client: &Client, ns: &str, replicas: i32) {
    let labels = BTreeMap::from([("app".to_owned(), "web".to_owned())]);
    pods::create_deployment(client, ns, "web", replicas, labels)
        .await
        .unwrap();
}

/// Waits until the Deployment `web` is ready.
async fn web_ready(client: &Client, ns: &str) {
    pods::wait_deployment_ready(client, ns, "web", TIMEOUT)
        .await
        .unwrap();
}

/// Starts a simulator with `options` and a ready Deployment `web` of `replicas` pods
/// labelled `app=web`; returns the simulator and the pods (sorted by name).
async fn web(
    client: &Client,
    ns: &str,
    replicas: i32,
    options: SimulatorOptions,
) -> (PodSimulator, Vec<Pod>) {
    let sim = simulator(client.clone(), ns, options).await;
    let begun = Instant::now();
    create_web(client, ns, replicas).await;
    web_ready(client, ns).await;
    eprintln!(
        "timing: deployment of {replicas} created -> ready in {:?}",
        begun.elapsed()
    );
    let pods = current_pods(client, ns).await;
    assert_eq!(pods.len(), usize::try_from(replicas).unwrap());
    (sim, pods)
}

/// The current pods of `web` (sorted by name).
async fn current_pods(client: &Client, ns: &str) -> Vec<Pod> {
    pods::wait_for_pods(client, ns, SELECTOR, |_| true, TIMEOUT)
        .await
        .unwrap()
}

fn is_running(pod: &Pod) -> bool {
    pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
}

/// Waits until the pod `name` of `uid` is gone; `what` names the wait if it times out.
async fn await_deleted(api: &Api<Pod>, name: &str, uid: &str, what: &str) {
    within(what, async {
        await_condition(api.clone(), name, conditions::is_deleted(uid))
            .await
            .unwrap()
    })
    .await;
}

fn node_of(pod: &Pod) -> String {
    pod.spec.as_ref().unwrap().node_name.clone().unwrap()
}

fn pod_ip(pod: &Pod) -> String {
    pod.status.as_ref().unwrap().pod_ip.clone().unwrap()
}

fn condition(pod: &Pod, type_: &str) -> String {
    let conditions = pod.status.as_ref().unwrap().conditions.as_ref().unwrap();
    let found = conditions.iter().find(|c| c.type_ == type_).unwrap();
    found.status.clone()
}

fn containers_ready(pod: &Pod) -> Vec<bool> {
    let statuses = pod.status.as_ref().unwrap().container_statuses.as_ref();
    statuses.unwrap().iter().map(|c| c.ready).collect()
}

/// Asserts the pod's readiness, consistently across `Ready`, `ContainersReady` and the
/// container statuses.
fn assert_ready(pod: &Pod, ready: bool) {
    let want = if ready { "True" } else { "False" };
    let name = pod.name_any();
    assert_eq!(condition(pod, "Ready"), want, "Ready of {name}");
    assert_eq!(
        condition(pod, "ContainersReady"),
        want,
        "ContainersReady of {name}"
    );
    assert_eq!(
        containers_ready(pod),
        [ready],
        "container readiness of {name}"
    );
}

#[tokio::test]
async fn deployment_pods_are_bound_addressed_and_ready() {
    with_namespace("pods-deploy", |client, ns| async move {
        let (sim, pods) = web(&client, &ns, 3, SimulatorOptions::default()).await;
        let nodes: BTreeSet<_> = pods.iter().map(node_of).collect();
        let expected: BTreeSet<_> = (0..3).map(|i| format!("sim-node-{i}")).collect();
        assert_eq!(nodes, expected, "round-robin over the three nodes");
        let ips: BTreeSet<_> = pods.iter().map(pod_ip).collect();
        assert_eq!(ips.len(), 3, "distinct pod IPs: {ips:?}");
        let node_api: Api<Node> = Api::all(client.clone());
        for pod in &pods {
            let status = pod.status.as_ref().unwrap();
            assert_eq!(status.phase.as_deref(), Some("Running"));
            assert!(status.start_time.is_some());
            let ips: Vec<_> = status.pod_ips.iter().flatten().map(|ip| &ip.ip).collect();
            assert_eq!(ips, [&pod_ip(pod)]);
            assert_eq!(sim.pod_ip(&pod.name_any()), Some(pod_ip(pod)));
            for type_ in ["PodScheduled", "Initialized"] {
                assert_eq!(condition(pod, type_), "True", "{type_}");
            }
            assert_ready(pod, true);
            let node = node_api.get(&node_of(pod)).await.unwrap();
            assert_eq!(node.labels()["kubernetes.io/hostname"], node_of(pod));
            let node_status = node.status.unwrap();
            let ready = node_status.conditions.unwrap().into_iter();
            assert!(
                ready
                    .filter(|c| c.type_ == "Ready")
                    .all(|c| c.status == "True")
            );
            let internal = node_status.addresses.unwrap().into_iter();
            let internal = internal
                .filter(|a| a.type_ == "InternalIP")
                .map(|a| a.address);
            assert_eq!(
                internal.collect::<Vec<_>>(),
                [status.host_ip.clone().unwrap()]
            );
        }
        sim.stop().await;
    })
    .await;
}

#[tokio::test]
async fn set_ready_flips_the_ready_condition() {
    with_namespace("pods-ready", |client, ns| async move {
        let (sim, pods) = web(&client, &ns, 2, SimulatorOptions::default()).await;
        let api: Api<Pod> = Api::namespaced(client.clone(), &ns);
        let (target, other) = (pods[0].name_any(), pods[1].name_any());
        sim.set_ready(&target, false).await;
        assert_ready(&api.get(&target).await.unwrap(), false);
        assert_ready(&api.get(&other).await.unwrap(), true);
        sim.set_ready(&target, true).await;
        assert_ready(&api.get(&target).await.unwrap(), true);
        sim.stop().await;
    })
    .await;
}

#[tokio::test]
async fn pods_can_start_not_ready() {
    with_namespace("pods-start", |client, ns| async move {
        let options = SimulatorOptions {
            start_ready: false,
            ..SimulatorOptions::default()
        };
        let sim = simulator(client.clone(), &ns, options).await;
        create_web(&client, &ns, 2).await;
        let running = |pods: &[Pod]| pods.len() == 2 && pods.iter().all(is_running);
        let pods = pods::wait_for_pods(&client, &ns, SELECTOR, running, TIMEOUT)
            .await
            .unwrap();
        for pod in &pods {
            assert_ready(pod, false);
        }
        for pod in &pods {
            sim.set_ready(&pod.name_any(), true).await;
        }
        web_ready(&client, &ns).await;
        sim.stop().await;
    })
    .await;
}

#[tokio::test]
async fn ready_delay_holds_running_pods_not_ready() {
    with_namespace("pods-delay", |client, ns| async move {
        let delay = Duration::from_secs(1);
        let options = SimulatorOptions {
            ready_delay: delay,
            ..SimulatorOptions::default()
        };
        let sim = simulator(client.clone(), &ns, options).await;
        let begun = Instant::now();
        create_web(&client, &ns, 1).await;
        let running = |pods: &[Pod]| pods.iter().any(is_running);
        let pods = pods::wait_for_pods(&client, &ns, SELECTOR, running, TIMEOUT)
            .await
            .unwrap();
        assert_ready(&pods[0], false);
        web_ready(&client, &ns).await;
        let ready_after = begun.elapsed();
        assert!(ready_after >= delay, "Ready after {ready_after:?}");
        eprintln!("timing: created -> Ready with ready_delay {delay:?}: {ready_after:?}");
        sim.stop().await;
    })
    .await;
}

/// Deletes `name` (default options), checks it goes NotReady while still there, that the
/// ReplicaSet's replacement becomes Ready, and that the pod disappears. Returns the time
/// from the delete call to the pod's disappearance.
async fn delete_and_await_replacement(client: &Client, ns: &str, name: &str) -> Duration {
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let uid = api.get(name).await.unwrap().uid().unwrap();
    let begun = Instant::now();
    api.delete(name, &DeleteParams::default()).await.unwrap();
    let stopping = |pod: Option<&Pod>| {
        pod.is_some_and(|p| p.metadata.deletion_timestamp.is_some() && !is_pod_ready(p))
    };
    within("the deleted pod to go NotReady", async {
        await_condition(api.clone(), name, stopping).await.unwrap()
    })
    .await;
    let not_ready_after = begun.elapsed();
    let replaced = |pods: &[Pod]| {
        let serving: Vec<_> = pods
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .collect();
        serving.len() == 3
            && serving
                .iter()
                .all(|p| p.name_any() != name && is_pod_ready(p))
    };
    pods::wait_for_pods(client, ns, SELECTOR, replaced, TIMEOUT)
        .await
        .unwrap();
    let replaced_after = begun.elapsed();
    await_deleted(&api, name, &uid, "the deleted pod to disappear").await;
    let gone_after = begun.elapsed();
    eprintln!(
        "timing: delete {name} -> NotReady {not_ready_after:?}, replacement Ready \
         {replaced_after:?}, gone {gone_after:?}"
    );
    gone_after
}

#[tokio::test]
async fn deleted_pod_goes_not_ready_then_away_and_is_replaced() {
    with_namespace("pods-delete", |client, ns| async move {
        let (sim, pods) = web(&client, &ns, 3, SimulatorOptions::default()).await;
        let gone_after = delete_and_await_replacement(&client, &ns, &pods[0].name_any()).await;
        // terminationGracePeriodSeconds is 1, counted from when the simulator saw the delete.
        assert!(
            gone_after >= Duration::from_secs(1),
            "grace honoured: {gone_after:?}"
        );
        sim.stop().await;
    })
    .await;
}

#[tokio::test]
async fn max_grace_caps_the_grace_period() {
    with_namespace("pods-grace", |client, ns| async move {
        let options = SimulatorOptions {
            max_grace: Some(Duration::ZERO),
            ..SimulatorOptions::default()
        };
        let (sim, pods) = web(&client, &ns, 3, options).await;
        let gone_after = delete_and_await_replacement(&client, &ns, &pods[1].name_any()).await;
        assert!(
            gone_after < Duration::from_secs(1),
            "grace capped: {gone_after:?}"
        );
        sim.stop().await;
    })
    .await;
}

#[tokio::test]
async fn failed_node_makes_its_pods_not_ready_and_gets_no_new_pods() {
    with_namespace("pods-node", |client, ns| async move {
        let (sim, pods) = web(&client, &ns, 3, SimulatorOptions::default()).await;
        let api: Api<Pod> = Api::namespaced(client.clone(), &ns);
        let failed = node_of(&pods[0]);
        sim.fail_node(&failed).await;
        for pod in &pods {
            let pod = api.get(&pod.name_any()).await.unwrap();
            assert_ready(&pod, node_of(&pod) != failed);
        }

        let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
            Api::namespaced(client.clone(), &ns);
        let scale = json!({"spec": {"replicas": 6}});
        deployments
            .patch("web", &PatchParams::default(), &Patch::Merge(&scale))
            .await
            .unwrap();
        let old: BTreeSet<_> = pods.iter().map(ResourceExt::name_any).collect();
        let all_running = |pods: &[Pod]| pods.len() == 6 && pods.iter().all(is_running);
        let scaled = pods::wait_for_pods(&client, &ns, SELECTOR, all_running, TIMEOUT)
            .await
            .unwrap();
        for pod in scaled.iter().filter(|p| !old.contains(&p.name_any())) {
            assert_ne!(
                node_of(pod),
                failed,
                "a new pod was bound to the failed node"
            );
            assert_ready(pod, true);
        }

        sim.recover_node(&failed).await;
        assert_ready(&api.get(&pods[0].name_any()).await.unwrap(), true);
        web_ready(&client, &ns).await;
        sim.stop().await;
    })
    .await;
}

#[tokio::test]
async fn rolling_update_replaces_every_pod() {
    with_namespace("pods-roll", |client, ns| async move {
        let (sim, old) = web(&client, &ns, 3, SimulatorOptions::default()).await;
        let begun = Instant::now();
        pods::rolling_update(&client, &ns, "web", TIMEOUT)
            .await
            .unwrap();
        eprintln!(
            "timing: rolling update of 3 -> complete in {:?}",
            begun.elapsed()
        );
        let new = current_pods(&client, &ns).await;
        assert_eq!(new.len(), 3);
        let old: BTreeSet<_> = old.iter().map(ResourceExt::name_any).collect();
        for pod in &new {
            assert!(
                !old.contains(&pod.name_any()),
                "old pod {} left",
                pod.name_any()
            );
            assert!(pod.metadata.deletion_timestamp.is_none());
            assert_ready(pod, true);
            let annotations = pod.annotations();
            assert!(annotations.contains_key(pods::RESTARTED_AT_ANNOTATION));
        }
        sim.stop().await;
    })
    .await;
}

/// `discovery.k8s.io/v1beta1` EndpointSlice: the only version 1.20 serves (k8s-openapi has
/// only `v1`, which 1.21 and later serve).
#[derive(Clone, Debug, Deserialize)]
struct EndpointSlice {
    metadata: ObjectMeta,
    #[serde(default)]
    endpoints: Option<Vec<Endpoint>>,
}

#[derive(Clone, Debug, Deserialize)]
struct Endpoint {
    addresses: Vec<String>,
    conditions: Option<EndpointConditions>,
}

#[derive(Clone, Debug, Deserialize)]
struct EndpointConditions {
    ready: Option<bool>,
}

impl Resource for EndpointSlice {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(_: &()) -> std::borrow::Cow<'_, str> {
        "EndpointSlice".into()
    }
    fn group(_: &()) -> std::borrow::Cow<'_, str> {
        "discovery.k8s.io".into()
    }
    fn version(_: &()) -> std::borrow::Cow<'_, str> {
        "v1beta1".into()
    }
    fn plural(_: &()) -> std::borrow::Cow<'_, str> {
        "endpointslices".into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// Waits until the Service `leader`'s slices hold exactly one endpoint, with address `ip`
/// and readiness `ready`: through `discovery.k8s.io/v1` where the server serves it (1.21 and
/// later), else `v1beta1`.
async fn await_single_endpoint(client: &Client, ns: &str, ip: &str, ready: bool) {
    let config = watcher::Config::default().labels("kubernetes.io/service-name=leader");
    let single = |endpoints: Vec<(&[String], Option<bool>)>| {
        let [(addresses, is_ready)] = endpoints.as_slice() else {
            return None;
        };
        (*addresses == [ip] && *is_ready == Some(ready)).then_some(())
    };
    let info = client.apiserver_version().await.expect("server version");
    let version = testkit::version::Version::parse(&info.git_version).expect("version");
    let found = if !version.at_least(1, 21) {
        let api: Api<EndpointSlice> = Api::namespaced(client.clone(), ns);
        pods::wait_for(api, config, TIMEOUT, |slices| {
            single(
                slices
                    .iter()
                    .flat_map(|s| s.endpoints.iter().flatten())
                    .map(|e| {
                        (
                            e.addresses.as_slice(),
                            e.conditions.as_ref().and_then(|c| c.ready),
                        )
                    })
                    .collect(),
            )
        })
        .await
    } else {
        let api: Api<k8s_openapi::api::discovery::v1::EndpointSlice> =
            Api::namespaced(client.clone(), ns);
        pods::wait_for(api, config, TIMEOUT, |slices| {
            single(
                slices
                    .iter()
                    .flat_map(|s| s.endpoints.iter())
                    .map(|e| {
                        (
                            e.addresses.as_slice(),
                            e.conditions.as_ref().and_then(|c| c.ready),
                        )
                    })
                    .collect(),
            )
        })
        .await
    };
    found.unwrap_or_else(|e| panic!("slice with only {ip} (ready {ready}): {e}"));
}

async fn set_role(api: &Api<Pod>, pod: &str, role: Option<&str>) {
    let patch = json!({"metadata": {"labels": {"role": role}}});
    api.patch(pod, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
}

#[tokio::test]
async fn endpoint_slice_follows_the_leader_label() {
    with_namespace("pods-slice", |client, ns| async move {
        let (sim, pods) = web(&client, &ns, 3, SimulatorOptions::default()).await;
        let services: Api<Service> = Api::namespaced(client.clone(), &ns);
        let service = serde_json::from_value(json!({
            "metadata": {"name": "leader"},
            "spec": {
                "selector": {"app": "web", "role": "leader"},
                "ports": [{"port": 80, "targetPort": 8080}],
            },
        }))
        .unwrap();
        services
            .create(&PostParams::default(), &service)
            .await
            .unwrap();
        let api: Api<Pod> = Api::namespaced(client.clone(), &ns);
        let (a, b) = (pods[0].name_any(), pods[1].name_any());

        let begun = Instant::now();
        set_role(&api, &a, Some("leader")).await;
        await_single_endpoint(&client, &ns, &pod_ip(&pods[0]), true).await;
        eprintln!(
            "timing: leader label -> EndpointSlice {:?}",
            begun.elapsed()
        );

        let begun = Instant::now();
        set_role(&api, &a, None).await;
        set_role(&api, &b, Some("leader")).await;
        await_single_endpoint(&client, &ns, &pod_ip(&pods[1]), true).await;
        eprintln!("timing: label moved -> EndpointSlice {:?}", begun.elapsed());

        let begun = Instant::now();
        sim.set_ready(&b, false).await;
        await_single_endpoint(&client, &ns, &pod_ip(&pods[1]), false).await;
        eprintln!(
            "timing: leader NotReady -> EndpointSlice {:?}",
            begun.elapsed()
        );
        sim.stop().await;
    })
    .await;
}

/// Runs kubectl against the test cluster in `ns`; panics with its output on failure.
async fn kubectl(ns: &str, args: &[&str]) {
    let cluster = TestCluster::shared().unwrap();
    let output = tokio::process::Command::new("/usr/bin/kubectl")
        .arg("--kubeconfig")
        .arg(cluster.kubeconfig_path())
        .args(["-n", ns])
        .args(args)
        .output()
        .await
        .unwrap();
    assert!(
        output.status.success(),
        "kubectl {args:?}: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

#[tokio::test]
async fn kubectl_and_the_simulator_share_objects() {
    with_namespace("pods-kubectl", |client, ns| async move {
        let (sim, pods) = web(&client, &ns, 3, SimulatorOptions::default()).await;
        let api: Api<Pod> = Api::namespaced(client.clone(), &ns);
        let (x, y) = (pods[0].name_any(), pods[1].name_any());

        kubectl(&ns, &["label", "pod", &x, "role=leader"]).await;
        // Status writes after kubectl's label keep it (they go through /status).
        sim.set_ready(&x, false).await;
        sim.set_ready(&x, true).await;
        let labelled = api.get(&x).await.unwrap();
        assert_eq!(
            labelled.labels().get("role").map(String::as_str),
            Some("leader")
        );
        assert_ready(&labelled, true);

        let begun = Instant::now();
        kubectl(&ns, &["delete", "pod", &y, "--wait=false"]).await;
        let uid = pods[1].uid().unwrap();
        await_deleted(&api, &y, &uid, "the pod kubectl deleted to disappear").await;
        eprintln!("timing: kubectl delete -> pod gone {:?}", begun.elapsed());
        web_ready(&client, &ns).await;
        sim.stop().await;
    })
    .await;
}

#[tokio::test]
async fn simulator_rides_out_api_faults() {
    with_namespace("pods-faults", |client, ns| async move {
        let cluster = TestCluster::shared().unwrap();
        let faults = KubeFaults::new(7);
        let faulty = faults.client(cluster.kube_config()).await;
        let error = || FaultAction::status(500, "InternalError", "injected");
        let rules = [
            (
                FaultAction::status(409, "Conflict", "injected"),
                "pods/status",
                Verb::Patch,
            ),
            (error(), "pods/status", Verb::Patch),
            (error(), "pods/binding", Verb::Create),
            (error(), "pods", Verb::Delete),
            (error(), "pods", Verb::Get),
        ];
        for (action, resource, verb) in rules {
            let rule = KubeFault::new(action).resource(resource).verb(verb);
            faults.add(rule.probability(0.4));
        }
        let cut = KubeFault::new(FaultAction::CutWatch { after_events: 4 });
        faults.add(cut.resource("pods").verb(Verb::Watch).times(2));
        let expire = KubeFault::new(FaultAction::ExpireWatch { after_events: 4 });
        faults.add(expire.resource("pods").verb(Verb::Watch).times(1));

        let sim = simulator(faulty, &ns, SimulatorOptions::default()).await;
        create_web(&client, &ns, 3).await;
        web_ready(&client, &ns).await;
        let victim = current_pods(&client, &ns).await[0].name_any();
        delete_and_await_replacement(&client, &ns, &victim).await;

        let injected = faults.injected();
        for resource in ["pods/status", "pods/binding", "pods"] {
            let hits = injected
                .iter()
                .filter(|i| i.resource.as_deref() == Some(resource));
            assert!(
                hits.count() > 0,
                "no fault injected on {resource}: {injected:?}"
            );
        }
        eprintln!(
            "faults injected into the simulator's requests: {}",
            injected.len()
        );
        sim.stop().await;
    })
    .await;
}
