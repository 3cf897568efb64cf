//! What every e2e test needs: the opt-in check, a client for the current context, a
//! namespace per test with a state dump on failure, the web example applied into it, waits
//! with deadlines, EndpointSlices, and the Consul key read through the dev Consul Service.
#![allow(dead_code)] // each test module uses a different subset

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::path::Path;
use std::time::{Duration, Instant};

use consul_elector::crd::{
    self, FENCING_TOKEN_ANNOTATION, LEADER_SINCE_ANNOTATION, LeaderElection, LeaderElectionStatus,
};
use futures::FutureExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Event, Namespace, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, LogParams, Patch,
    PatchParams, PostParams,
};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};

/// The reason every e2e test is ignored by default.
pub const IGNORE_REASON: &str =
    "needs a kind cluster with the operator installed (make demo); run with ELECTOR_E2E=1";

/// The role label and its values (examples/web.yaml keeps the defaults).
pub const ROLE: &str = crd::DEFAULT_ROLE_LABEL;
pub const LEADER: &str = "leader";
pub const FOLLOWER: &str = "follower";
/// The annotation naming the election that labelled a pod (the operator's own).
pub const ELECTION_ANNOTATION: &str = "elector.dev/election";

/// How long pods get to become Ready (the first test may pull the image).
pub const PODS_READY: Duration = Duration::from_secs(300);
/// How long an election, a failover or a cleanup may take before the test fails. The
/// operator's targets are far lower (docs/design.md §5); this only bounds a broken run.
pub const CONVERGE: Duration = Duration::from_secs(60);
/// The operator replicas' Lease in their namespace (the chart's `--lease-name`, the release's
/// full name).
pub const OPERATOR_LEASE: &str = "consul-elector";
/// Field manager of the suite's server-side applies.
const MANAGER: &str = "consul-elector-e2e";

/// The cluster under test.
#[derive(Clone)]
pub struct Env {
    pub client: Client,
    /// The operator's namespace.
    pub operator_namespace: String,
}

/// The environment, or `None` (after printing why) unless `ELECTOR_E2E=1`. Panics when the
/// suite is enabled but the current context cannot be reached: the user asked for a run.
pub async fn env(test: &str) -> Option<Env> {
    if std::env::var("ELECTOR_E2E").as_deref() != Ok("1") {
        println!(
            "SKIPPED {test}: set ELECTOR_E2E=1 to run the e2e suite against the current kube \
             context (after `make demo`)"
        );
        return None;
    }
    consul_elector::install_crypto_provider();
    let client = Client::try_default().await.unwrap_or_else(|error| {
        panic!("ELECTOR_E2E=1 but no client for the current kube context: {error}")
    });
    let operator_namespace =
        std::env::var("ELECTOR_E2E_NAMESPACE").unwrap_or_else(|_| "consul-elector".to_owned());
    let env = Env {
        client,
        operator_namespace,
    };
    // Fail with a clear message when the operator is not installed where expected.
    let operators = env.operator_pods().await;
    assert!(
        !operators.is_empty(),
        "no operator pod (label app.kubernetes.io/component=operator) in namespace {}: run \
         `make demo`, or set ELECTOR_E2E_NAMESPACE",
        env.operator_namespace
    );
    Some(env)
}

impl Env {
    pub fn api<K>(&self, namespace: &str) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        K::DynamicType: Default,
    {
        Api::namespaced(self.client.clone(), namespace)
    }

    /// Runs `test(env, namespace)` in a fresh namespace; on a panic dumps the state, then
    /// deletes the namespace (unless `ELECTOR_E2E_KEEP=1`) and resumes the panic.
    pub async fn with_namespace<F, Fut>(&self, prefix: &str, test: F)
    where
        F: FnOnce(Env, String) -> Fut,
        Fut: Future<Output = ()>,
    {
        let name = format!("e2e-{prefix}-{:08x}", rand::random::<u32>());
        let namespaces: Api<Namespace> = Api::all(self.client.clone());
        let namespace: Namespace = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {"elector.dev/e2e": "true"}}
        }))
        .expect("a namespace");
        namespaces
            .create(&PostParams::default(), &namespace)
            .await
            .unwrap_or_else(|error| panic!("cannot create namespace {name}: {error}"));
        let outcome = AssertUnwindSafe(test(self.clone(), name.clone()))
            .catch_unwind()
            .await;
        let keep = std::env::var("ELECTOR_E2E_KEEP").as_deref() == Ok("1");
        if outcome.is_err() {
            self.dump(&name).await;
        }
        if outcome.is_ok() || !keep {
            match namespaces.delete(&name, &DeleteParams::default()).await {
                // The test deleted it itself.
                Err(kube::Error::Api(status)) if status.is_not_found() => {}
                Err(error) => eprintln!("cannot delete namespace {name}: {error}"),
                Ok(_) => {}
            }
        } else {
            eprintln!("ELECTOR_E2E_KEEP=1: namespace {name} is kept");
        }
        if let Err(panic) = outcome {
            std::panic::resume_unwind(panic);
        }
    }

    /// Prints pods, LeaderElections and events of `namespace` and the operator's log tail.
    pub async fn dump(&self, namespace: &str) {
        eprintln!("==== e2e: state of namespace {namespace} after the failure ====");
        match self
            .api::<Pod>(namespace)
            .list(&ListParams::default())
            .await
        {
            Ok(pods) => {
                eprintln!("-- pods ({}):", pods.items.len());
                for pod in &pods.items {
                    eprintln!("{}", describe_pod(pod));
                }
            }
            Err(error) => eprintln!("cannot list pods: {error}"),
        }
        match self
            .api::<LeaderElection>(namespace)
            .list(&ListParams::default())
            .await
        {
            Ok(list) => {
                for le in &list.items {
                    eprintln!(
                        "-- LeaderElection {} (generation {:?}, finalizers {:?}, deleting {}):\n{}",
                        le.name_any(),
                        le.metadata.generation,
                        le.finalizers(),
                        le.metadata.deletion_timestamp.is_some(),
                        serde_json::to_string_pretty(&le.status).unwrap_or_default()
                    );
                }
            }
            Err(error) => eprintln!("cannot list LeaderElections: {error}"),
        }
        match self
            .api::<Event>(namespace)
            .list(&ListParams::default())
            .await
        {
            Ok(events) => {
                eprintln!("-- events ({}):", events.items.len());
                for event in events.items.iter().rev().take(40).rev() {
                    eprintln!(
                        "  {} {} {}: {}",
                        event.type_.as_deref().unwrap_or("?"),
                        event.involved_object.name.as_deref().unwrap_or("?"),
                        event.reason.as_deref().unwrap_or("?"),
                        event.message.as_deref().unwrap_or("")
                    );
                }
            }
            Err(error) => eprintln!("cannot list events: {error}"),
        }
        for pod in self.operator_pods().await {
            let logs = self
                .api::<Pod>(&self.operator_namespace)
                .logs(
                    &pod.name_any(),
                    &LogParams {
                        tail_lines: Some(60),
                        ..LogParams::default()
                    },
                )
                .await
                .unwrap_or_else(|error| format!("(no log: {error})"));
            eprintln!(
                "-- operator {} log (last 60 lines):\n{logs}",
                pod.name_any()
            );
        }
        eprintln!("==== end of the state of {namespace} ====");
    }

    /// The operator's pods (the chart labels them component=operator).
    pub async fn operator_pods(&self) -> Vec<Pod> {
        self.api::<Pod>(&self.operator_namespace)
            .list(&ListParams::default().labels("app.kubernetes.io/component=operator"))
            .await
            .map(|list| list.items)
            .unwrap_or_else(|error| {
                panic!(
                    "cannot list pods in namespace {}: {error}",
                    self.operator_namespace
                )
            })
    }

    /// Applies every document of `examples/<file>` into `namespace` (server-side apply).
    pub async fn apply_example(&self, file: &str, namespace: &str) {
        self.apply_example_edited(file, namespace, |_| {}).await;
    }

    /// [`Env::apply_example`], each document passed through `edit` first (to change a
    /// Deployment's pod template before its pods exist, for example).
    pub async fn apply_example_edited(
        &self,
        file: &str,
        namespace: &str,
        edit: impl Fn(&mut Value),
    ) {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("examples")
            .join(file);
        let text = std::fs::read_to_string(&path).expect("the example exists");
        let documents: Vec<Value> = serde_saphyr::from_multiple(&text).expect("valid YAML");
        for mut document in documents.into_iter().filter(|d| !d.is_null()) {
            edit(&mut document);
            let api_version = document["apiVersion"].as_str().unwrap_or_default();
            let kind = document["kind"].as_str().unwrap_or_default();
            let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
            let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind));
            let api: Api<DynamicObject> =
                Api::namespaced_with(self.client.clone(), namespace, &resource);
            let object: DynamicObject =
                serde_json::from_value(document.clone()).expect("an object");
            let name = object.name_any();
            api.patch(
                &name,
                &PatchParams::apply(MANAGER).force(),
                &Patch::Apply(&object),
            )
            .await
            .unwrap_or_else(|error| panic!("cannot apply {kind} {name} from {file}: {error}"));
        }
    }

    /// Sets the replicas of Deployment `name`.
    pub async fn scale(&self, namespace: &str, name: &str, replicas: i32) {
        self.api::<Deployment>(namespace)
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"replicas": replicas}})),
            )
            .await
            .unwrap_or_else(|error| panic!("cannot scale {name}: {error}"));
    }

    /// The pods of `namespace` matching `selector`, without those being deleted.
    pub async fn live_pods(&self, namespace: &str, selector: &str) -> Vec<Pod> {
        self.api::<Pod>(namespace)
            .list(&ListParams::default().labels(selector))
            .await
            .expect("list pods")
            .items
            .into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .collect()
    }

    /// The LeaderElection `name`'s status (empty when it has none yet).
    pub async fn status(&self, namespace: &str, name: &str) -> LeaderElectionStatus {
        self.api::<LeaderElection>(namespace)
            .get(name)
            .await
            .unwrap_or_else(|error| panic!("cannot get LeaderElection {name}: {error}"))
            .status
            .unwrap_or_default()
    }

    /// Waits until LeaderElection `name` reports `LeaderElected=True` with a leader that is
    /// a live pod carrying the leader label and the status's fencing token, and every other
    /// live selected pod carries the follower label; returns the status and that pod.
    pub async fn elected(
        &self,
        namespace: &str,
        name: &str,
        selector: &str,
        replicas: usize,
    ) -> (LeaderElectionStatus, Pod) {
        wait_for(
            &format!("{name}: a leader among {replicas} labelled pods"),
            CONVERGE + PODS_READY,
            || async move {
                let status = self.status(namespace, name).await;
                let elected = status
                    .conditions
                    .iter()
                    .any(|c| c.type_ == crd::conditions::LEADER_ELECTED && c.status == "True");
                let leader = status.leader.clone()?;
                if !elected {
                    return None;
                }
                let pods = self.live_pods(namespace, selector).await;
                if pods.len() != replicas || !pods.iter().all(is_ready) {
                    return None;
                }
                let leaders: Vec<&Pod> = pods.iter().filter(|p| role(p) == Some(LEADER)).collect();
                let followers = pods.iter().filter(|p| role(p) == Some(FOLLOWER)).count();
                let [pod] = leaders.as_slice() else {
                    return None;
                };
                let token =
                    annotation(pod, FENCING_TOKEN_ANNOTATION).and_then(|t| t.parse::<u64>().ok());
                (pod.name_any() == leader.pod
                    && pod.uid().as_deref() == Some(leader.uid.as_str())
                    && token.is_some()
                    && token == status.fencing_token
                    && followers == replicas - 1)
                    .then(|| (status.clone(), (*pod).clone()))
            },
        )
        .await
    }

    /// The pod names behind Service `service`'s EndpointSlices (discovery.k8s.io/v1): all
    /// endpoints, and the ready ones. A cluster that does not serve that version yet (before
    /// 1.21, such as the real-node suite's 1.20) is read through the Service's Endpoints.
    pub async fn endpoints(&self, namespace: &str, service: &str) -> Endpoints {
        let slices = self
            .api::<EndpointSlice>(namespace)
            .list(&ListParams::default().labels(&format!("kubernetes.io/service-name={service}")))
            .await;
        let slices = match slices {
            Ok(slices) => slices,
            Err(kube::Error::Api(status)) if status.is_not_found() => {
                return self.core_endpoints(namespace, service).await;
            }
            Err(error) => panic!("list EndpointSlices: {error}"),
        };
        let mut all = BTreeSet::new();
        let mut ready = BTreeSet::new();
        for slice in slices.items {
            for endpoint in slice.endpoints {
                let Some(name) = endpoint.target_ref.and_then(|r| r.name) else {
                    continue;
                };
                // Kubernetes: a nil `ready` means ready.
                if endpoint.conditions.and_then(|c| c.ready).unwrap_or(true) {
                    ready.insert(name.clone());
                }
                all.insert(name);
            }
        }
        Endpoints { all, ready }
    }

    /// [`Env::endpoints`] from the core/v1 Endpoints object.
    async fn core_endpoints(&self, namespace: &str, service: &str) -> Endpoints {
        let endpoints = self
            .api::<k8s_openapi::api::core::v1::Endpoints>(namespace)
            .get_opt(service)
            .await
            .unwrap_or_else(|error| panic!("get Endpoints {service}: {error}"));
        let mut all = BTreeSet::new();
        let mut ready = BTreeSet::new();
        for subset in endpoints.and_then(|e| e.subsets).unwrap_or_default() {
            let names = |addresses: Option<Vec<k8s_openapi::api::core::v1::EndpointAddress>>| {
                addresses
                    .unwrap_or_default()
                    .into_iter()
                    .filter_map(|a| a.target_ref.and_then(|r| r.name))
                    .collect::<Vec<_>>()
            };
            for name in names(subset.addresses) {
                ready.insert(name.clone());
                all.insert(name);
            }
            all.extend(names(subset.not_ready_addresses));
        }
        Endpoints { all, ready }
    }

    /// Waits until Service `service`'s endpoints are exactly `pods` (all ready); returns when.
    pub async fn wait_endpoints(&self, namespace: &str, service: &str, pods: &[&str]) -> Instant {
        let want: BTreeSet<String> = pods.iter().map(|p| (*p).to_owned()).collect();
        let want = &want;
        wait_for(
            &format!("Service {service} endpoints exactly {want:?}"),
            CONVERGE,
            || async move {
                let endpoints = self.endpoints(namespace, service).await;
                (&endpoints.all == want && &endpoints.ready == want).then(Instant::now)
            },
        )
        .await
    }

    /// The dev Consul Service the chart creates with consulDev.enabled (label
    /// component=consul-dev in the operator's namespace).
    pub async fn consul_service(&self) -> String {
        let services = self
            .api::<Service>(&self.operator_namespace)
            .list(&ListParams::default().labels("app.kubernetes.io/component=consul-dev"))
            .await
            .expect("list Services");
        let service = services.items.first().unwrap_or_else(|| {
            panic!(
                "no dev Consul Service (label app.kubernetes.io/component=consul-dev) in \
                 namespace {}: install the chart with consulDev.enabled=true (make demo)",
                self.operator_namespace
            )
        });
        service.name_any()
    }

    /// GET `path` (such as `/v1/kv/elector/ns/web/leader`) from Consul; `None` on 404.
    ///
    /// By default from the chart's dev Consul, through the API server's service proxy: no
    /// port-forward, no extra pod, nothing the operator provides. With
    /// `ELECTOR_E2E_CONSUL_ADDR=http://host:port` (a Consul outside the cluster, reachable
    /// from here), directly.
    pub async fn consul_get(&self, path: &str) -> Option<Value> {
        if let Ok(address) = std::env::var("ELECTOR_E2E_CONSUL_ADDR") {
            return consul_get_direct(&address, path).await;
        }
        let service = self.consul_service().await;
        let url = format!(
            "/api/v1/namespaces/{}/services/{service}:http/proxy{path}",
            self.operator_namespace
        );
        let request = http::Request::get(&url)
            .body(Vec::new())
            .expect("a request");
        match self.client.request_text(request).await {
            Ok(text) => Some(serde_json::from_str(&text).unwrap_or_else(|error| {
                panic!("Consul answered {path} with non-JSON {text:?}: {error}")
            })),
            Err(kube::Error::Api(status)) if status.is_not_found() => None,
            Err(error) => panic!("cannot read {path} from Consul through {url}: {error}"),
        }
    }

    /// The election key's KV entry (`None` when the key does not exist).
    pub async fn consul_key(&self, key: &str) -> Option<ConsulKey> {
        let entries = self.consul_get(&format!("/v1/kv/{key}")).await?;
        let entry = entries.get(0).cloned().expect("one KV entry");
        let value = entry["Value"]
            .as_str()
            .map(|b64| {
                use base64::Engine;
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(b64)
                    .expect("base64 value");
                serde_json::from_slice(&bytes).unwrap_or(Value::Null)
            })
            .unwrap_or(Value::Null);
        Some(ConsulKey {
            session: entry["Session"].as_str().map(str::to_owned),
            lock_index: entry["LockIndex"].as_u64().unwrap_or_default(),
            value,
        })
    }

    /// Whether Consul still knows session `id`.
    pub async fn consul_session_exists(&self, id: &str) -> bool {
        match self.consul_get(&format!("/v1/session/info/{id}")).await {
            Some(Value::Array(sessions)) => !sessions.is_empty(),
            _ => false,
        }
    }
}

/// GET `path` from the plain-HTTP Consul at `address` (`http://host:port` or `host:port`).
async fn consul_get_direct(address: &str, path: &str) -> Option<Value> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let host = address
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_owned();
    assert!(
        !host.contains("://"),
        "ELECTOR_E2E_CONSUL_ADDR must be plain http: {address}"
    );
    let mut stream = tokio::net::TcpStream::connect(&host)
        .await
        .unwrap_or_else(|error| panic!("cannot connect to Consul at {host}: {error}"));
    let request = format!("GET {path} HTTP/1.0\r\nHost: {host}\r\n\r\n");
    stream.write_all(request.as_bytes()).await.expect("send");
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await.expect("receive");
    let response = String::from_utf8_lossy(&response);
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    match head.split_whitespace().nth(1) {
        Some("200") => Some(serde_json::from_str(body).unwrap_or_else(|error| {
            panic!("Consul answered {path} with non-JSON {body:?}: {error}")
        })),
        Some("404") => None,
        _ => panic!("Consul answered {path} with {head:?}"),
    }
}

/// A Consul KV entry.
#[derive(Debug, Clone)]
pub struct ConsulKey {
    /// The session holding the lock, if any.
    pub session: Option<String>,
    pub lock_index: u64,
    /// The value, parsed as JSON (the operator writes `{"pod", "namespace", ...}`).
    pub value: Value,
}

/// Pod names behind a Service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoints {
    pub all: BTreeSet<String>,
    pub ready: BTreeSet<String>,
}

/// Polls `check` every 100 ms until it returns `Some`, or panics after `timeout` naming
/// `what`.
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The safety checks over a whole recorded history: never two pods labelled leader at one
/// resourceVersion, and the fencing token on leader-labelled pods never going backwards.
pub fn assert_history(recorder: &testkit::recorder::WatchRecorder) {
    recorder.assert_never_two(ROLE, LEADER);
    let mut versions = recorder.versions();
    versions.sort_by_key(|v| v.resource_version);
    let mut highest: Option<(u64, String)> = None;
    for version in versions.iter().filter(|v| v.has_label(ROLE, LEADER)) {
        let Some(token) = version
            .annotations
            .get(FENCING_TOKEN_ANNOTATION)
            .and_then(|t| t.parse::<u64>().ok())
        else {
            continue;
        };
        if let Some((top, at)) = &highest {
            assert!(
                token >= *top,
                "fencing token went backwards: {} carried {token} at resourceVersion {} after \
                 {at} carried {top}",
                version.name,
                version.resource_version
            );
        }
        if highest.as_ref().is_none_or(|(top, _)| token > *top) {
            highest = Some((token, version.name.clone()));
        }
    }
}

pub fn role(pod: &Pod) -> Option<&str> {
    pod.labels().get(ROLE).map(String::as_str)
}

pub fn annotation<'a>(pod: &'a Pod, key: &str) -> Option<&'a str> {
    pod.annotations().get(key).map(String::as_str)
}

pub fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The operator's keys still on `pod` (labels and annotations it writes).
pub fn operator_marks(pod: &Pod) -> BTreeMap<String, String> {
    let mut marks = BTreeMap::new();
    if let Some(role) = role(pod) {
        marks.insert(ROLE.to_owned(), role.to_owned());
    }
    for key in [
        FENCING_TOKEN_ANNOTATION,
        LEADER_SINCE_ANNOTATION,
        ELECTION_ANNOTATION,
    ] {
        if let Some(value) = annotation(pod, key) {
            marks.insert(key.to_owned(), value.to_owned());
        }
    }
    marks
}

fn describe_pod(pod: &Pod) -> String {
    format!(
        "  {} uid={} phase={} ready={} deleting={} node={} ip={} marks={:?}",
        pod.name_any(),
        pod.uid().unwrap_or_default(),
        pod.status
            .as_ref()
            .and_then(|s| s.phase.as_deref())
            .unwrap_or("?"),
        is_ready(pod),
        pod.metadata.deletion_timestamp.is_some(),
        pod.spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .unwrap_or("-"),
        pod.status
            .as_ref()
            .and_then(|s| s.pod_ip.as_deref())
            .unwrap_or("-"),
        operator_marks(pod)
    )
}
