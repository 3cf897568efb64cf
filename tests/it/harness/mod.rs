//! Shared harness of the operator's integration tests: the real test cluster, the Consul
//! emulator (real time), the pod simulator, a watch recorder started before anything acts,
//! and the operator itself running in-process with a ServiceAccount client that holds exactly
//! the chart's RBAC rules (`charts/consul-elector/files/rbac-rules.yaml`, and the Lease rule
//! `rbac-lease-rules.yaml` as a Role in the test namespace), through a `testkit::kube_faults`
//! layer (`Harness::kube_faults`, empty unless a test adds faults). More replicas of the
//! operator can run next to it ([`Harness::spawn_replica`]), each with its own client, fault
//! layer, Consul token and stop handle, competing for the same Lease.

mod consul_under_test;

pub use consul_under_test::{Backend, ConsulUnderTest, KeyLock};

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use consul_elector::crd::LeaderElectionStatus;
use http_body_util::{BodyExt, Full};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::{Patch, PatchParams};
use kube::runtime::watcher;
use testkit::pods::wait_for;

use consul_elector::consul::{ConsulAddress, ConsulClient, ConsulSettings};
use consul_elector::context::Settings;
use consul_elector::crd::LeaderElection;
use consul_elector::election::config::Owner;
use consul_elector::http::Health;
use consul_elector::kube_client::{self, ConnectionTasks};
use consul_elector::leadership::{LeadershipError, LeaseSettings, WallClock};
use consul_elector::metrics::Metrics;
use consul_elector::operator;
use consul_elector::operator::KubeClients;
use consul_elector::uninstall;
use consul_elector::write_gate::WriteGate;
use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject,
};
use kube::api::{Api, DeleteParams, ObjectMeta, PostParams};
use kube::runtime::wait::await_condition;
use kube::{Client, ResourceExt};
use testkit::cluster::TestCluster;
use testkit::consul::Emulator;
use testkit::kube_faults::{FaultAction, KubeFault, KubeFaults, Verb, WatchHold};
use testkit::pods::{PodSimulator, SimulatorOptions, create_deployment, wait_deployment_ready};
use testkit::recorder::{PodVersion, WatchRecorder};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// The chart's RBAC rules: the one source of the operator's permissions.
pub const RBAC_RULES: &str = include_str!("../../../charts/consul-elector/files/rbac-rules.yaml");
/// The chart's Lease rule (a Role in the operator's namespace).
pub const RBAC_LEASE_RULES: &str =
    include_str!("../../../charts/consul-elector/files/rbac-lease-rules.yaml");
/// The Lease of the harness' install of the operator.
const LEASE: &str = "consul-elector";
/// Lease timing of the operators under test (seconds): short, so that failovers are quick.
pub const LEASE_DURATION: Duration = Duration::from_secs(3);
/// Renew deadline of the operators under test.
pub const LEASE_RENEW_DEADLINE: Duration = Duration::from_secs(2);
/// The chart's extra rule with `rbac.secretAccess` (reading token Secrets).
pub const RBAC_SECRET_RULES: &str =
    include_str!("../../../charts/consul-elector/files/rbac-secret-rules.yaml");
/// The label key elections use by default.
pub const ROLE: &str = "elector.dev/role";
/// The operator's annotations whose histories [`Harness::histories`] tracks.
pub const TRACKED: [&str; 3] = [
    consul_elector::crd::FENCING_TOKEN_ANNOTATION,
    consul_elector::crd::LEADER_SINCE_ANNOTATION,
    consul_elector::crd::ELECTION_ANNOTATION,
];
/// Generous bound for things that should take milliseconds (guards against hangs only).
pub const SOON: Duration = Duration::from_secs(30);

/// Installs (create, or replace when present) the CRD and waits until it is established,
/// with the operator's own installer (plain create/replace: Kubernetes 1.20 drops
/// `x-kubernetes-validations` instead of failing as server-side apply would).
pub async fn install_crd(admin: &Client) {
    if let Err(error) = consul_elector::crd::install(admin.clone(), SOON).await {
        panic!("install the CRD: {error}");
    }
}

/// The operator running in-process.
pub struct Operator {
    task: JoinHandle<Result<(), LeadershipError>>,
    stop: watch::Sender<bool>,
    /// Its metrics.
    pub metrics: Metrics,
    /// Its identity in the Lease (`--instance-name`).
    pub instance: String,
}

impl Operator {
    /// Kills it as a crash would: no graceful shutdown, nothing released.
    pub async fn kill(self) {
        self.task.abort();
        let _ = self.task.await;
    }

    /// Stops it as SIGTERM does (graceful shutdown), waiting at most `timeout`; panics if it
    /// does not stop in time or stops with an error.
    pub async fn stop(self, timeout: Duration) {
        let _ = self.stop.send(true);
        match tokio::time::timeout(timeout, self.task).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(error))) => panic!("operator {} failed: {error}", self.instance),
            Ok(Err(error)) => panic!("operator {} task: {error}", self.instance),
            Err(_) => panic!("operator {} did not stop within {timeout:?}", self.instance),
        }
    }

    /// Waits (at most `timeout`) until it stops by itself; what it returned. Panics on
    /// timeout.
    pub async fn wait_exit(self, timeout: Duration) -> Result<(), LeadershipError> {
        match tokio::time::timeout(timeout, self.task).await {
            Ok(Ok(result)) => result,
            Ok(Err(error)) => panic!("operator {} task: {error}", self.instance),
            Err(_) => panic!("operator {} still runs after {timeout:?}", self.instance),
        }
    }

    /// Reconciles it finished so far, whatever their outcome.
    pub fn reconciles(&self) -> u64 {
        self.metrics
            .encode()
            .lines()
            .filter(|l| l.contains("_reconcile_total{"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .map(|v| v as u64)
            .sum()
    }

    /// Whether it holds the Lease and writes (its `consul_elector_active` gauge).
    pub fn is_active(&self) -> bool {
        self.metrics
            .encode()
            .lines()
            .any(|l| l.starts_with("consul_elector_active ") && l.ends_with(" 1"))
    }
}

/// How a [`Harness`] is set up.
#[derive(Debug, Clone)]
pub struct HarnessOptions {
    /// The pod simulator's options.
    pub sim: SimulatorOptions,
    /// Grant the operator the chart's optional Secret rule (`rbac.secretAccess`).
    pub secret_access: bool,
    /// The operator's own Consul token and allowed addresses.
    pub operator_consul: OperatorConsul,
    /// The cluster name the operator runs with (`--cluster-name`).
    pub cluster_name: String,
    /// How long after a deletion the operator keeps retrying Consul before it gives up.
    pub consul_cleanup_bound: Duration,
    /// Namespaces the operator watches besides the harness' own (`--watch-namespaces`).
    pub extra_watch_namespaces: Vec<String>,
    /// The operator's Lease duration and renew deadline; a write still in flight at the
    /// deadline is cancelled ([`LEASE_DURATION`], [`LEASE_RENEW_DEADLINE`] unless a test
    /// needs writes to last longer).
    pub lease: (Duration, Duration),
}

/// The operator's Consul configuration beyond the emulator's address.
#[derive(Debug, Clone, Default)]
pub struct OperatorConsul {
    /// `CONSUL_HTTP_TOKEN`.
    pub token: Option<String>,
    /// `--consul-allowed-addresses`.
    pub allowed_addresses: Vec<String>,
    /// `--consul-allowed-datacenters`.
    pub allowed_datacenters: Vec<String>,
    /// More of Consul's variables (a token file, TLS files, the reload period); an address
    /// here replaces the harness' Consul's.
    pub env: Vec<(String, String)>,
}

impl Default for HarnessOptions {
    fn default() -> Self {
        HarnessOptions {
            sim: SimulatorOptions {
                max_grace: Some(Duration::from_secs(2)),
                ..SimulatorOptions::default()
            },
            secret_access: false,
            operator_consul: OperatorConsul::default(),
            cluster_name: "test-cluster".into(),
            consul_cleanup_bound: consul_elector::election::cleanup_deadline::CONSUL_CLEANUP_BOUND,
            extra_watch_namespaces: Vec::new(),
            lease: (LEASE_DURATION, LEASE_RENEW_DEADLINE),
        }
    }
}

/// One test's world.
pub struct Harness {
    /// Admin client (for the test's own actions).
    pub admin: Client,
    /// The test's namespace.
    pub ns: String,
    /// The Consul the operator talks to (the emulator unless the test chose a real one).
    pub consul: ConsulUnderTest,
    /// The kubelet stand-in.
    pub sim: PodSimulator,
    /// Every pod version of the namespace since before anything acted.
    pub recorder: WatchRecorder,
    /// Faults between the operator and the API server (none unless a test adds some).
    pub kube_faults: KubeFaults,
    operator: Option<Operator>,
    sa_config: kube::Config,
    operator_consul: OperatorConsul,
    cluster_name: String,
    /// `--former-names` of the operators started next.
    former_names: Vec<(String, String)>,
    consul_cleanup_bound: Duration,
    extra_watch_namespaces: Vec<String>,
    lease: (Duration, Duration),
}

impl Harness {
    /// Sets up everything but the operator.
    pub async fn new(admin: Client, ns: String) -> Harness {
        Self::with_options(admin, ns, HarnessOptions::default()).await
    }

    /// The common start of a test: a Deployment `web` of 3 Ready pods, the operator, and the
    /// LeaderElection `web` with `spec`, waited until it elected a leader.
    pub async fn web_elected(
        admin: Client,
        ns: String,
        spec: serde_json::Value,
    ) -> (Harness, Elected) {
        Self::web_elected_with(admin, ns, HarnessOptions::default(), spec).await
    }

    /// [`web_elected`](Self::web_elected) with `options`.
    pub async fn web_elected_with(
        admin: Client,
        ns: String,
        options: HarnessOptions,
        spec: serde_json::Value,
    ) -> (Harness, Elected) {
        let mut h = Harness::with_options(admin, ns, options).await;
        h.deployment("web", 3).await;
        h.start_operator().await;
        h.election("web", spec).await;
        let first = h.wait_elected("web", None).await;
        (h, first)
    }

    /// Sets up everything but the operator, with `options`.
    pub async fn with_options(admin: Client, ns: String, options: HarnessOptions) -> Harness {
        let consul = ConsulUnderTest::emulator().await;
        Self::with_consul(admin, ns, options, consul).await
    }

    /// Sets up everything but the operator on the shared cluster, with `consul`.
    pub async fn with_consul(
        admin: Client,
        ns: String,
        options: HarnessOptions,
        consul: ConsulUnderTest,
    ) -> Harness {
        let cluster = TestCluster::shared().expect("cluster (with_namespace checked)");
        Self::on_cluster(cluster, admin, ns, consul, options).await
    }

    /// [`web_elected`](Self::web_elected) on `consul`.
    pub async fn web_elected_on(
        admin: Client,
        ns: String,
        consul: ConsulUnderTest,
        spec: serde_json::Value,
    ) -> (Harness, Elected) {
        Self::web_elected_on_with(admin, ns, consul, HarnessOptions::default(), spec).await
    }

    /// [`web_elected_on`](Self::web_elected_on) with `options`.
    pub async fn web_elected_on_with(
        admin: Client,
        ns: String,
        consul: ConsulUnderTest,
        options: HarnessOptions,
        spec: serde_json::Value,
    ) -> (Harness, Elected) {
        let mut h = Harness::with_consul(admin, ns, options, consul).await;
        h.deployment("web", 3).await;
        h.start_operator().await;
        h.election("web", spec).await;
        let first = h.wait_elected("web", None).await;
        (h, first)
    }

    /// The emulator; only tests that need its hooks (faults, stats, sessions) call this.
    pub fn emu(&self) -> &Emulator {
        self.consul.emu()
    }

    /// Sets up everything but the operator on `cluster` (whose admin client is `admin` and
    /// where namespace `ns` exists), with `consul`: a second Kubernetes cluster next to the
    /// shared one passes its own cluster and the first harness' Consul.
    pub async fn on_cluster(
        cluster: &TestCluster,
        admin: Client,
        ns: String,
        consul: ConsulUnderTest,
        options: HarnessOptions,
    ) -> Harness {
        consul_elector::install_crypto_provider();
        let _ = tracing_subscriber::fmt()
            .with_env_filter(
                std::env::var("TEST_LOG").unwrap_or_else(|_| "consul_elector=info".into()),
            )
            .with_test_writer()
            .try_init();
        install_crd(&admin).await;
        let recorder = WatchRecorder::start(admin.clone(), &ns)
            .await
            .expect("recorder");
        let sim = PodSimulator::start(admin.clone(), &ns, options.sim).await;
        let kube_faults = KubeFaults::new(7);
        let sa_config = operator_config(cluster, &admin, &ns, options.secret_access).await;
        Harness {
            admin,
            ns,
            consul,
            sim,
            recorder,
            kube_faults,
            operator: None,
            sa_config,
            operator_consul: options.operator_consul,
            cluster_name: options.cluster_name,
            former_names: Vec::new(),
            consul_cleanup_bound: options.consul_cleanup_bound,
            extra_watch_namespaces: options.extra_watch_namespaces,
            lease: options.lease,
        }
    }

    /// Starts (or restarts) the operator.
    pub async fn start_operator(&mut self) {
        self.start_operator_with_clock(WallClock::system()).await;
    }

    /// A switch that stalls the operator's watch of LeaderElections once the test holds it:
    /// until released, the operator's copy of every election stays as it was.
    pub fn election_watch_hold(&self) -> WatchHold {
        let hold = WatchHold::new();
        self.kube_faults.add(
            KubeFault::new(FaultAction::HoldWatch(hold.clone()))
                .verb(Verb::Watch)
                .resource("leaderelections"),
        );
        hold
    }

    /// [`start_operator`](Self::start_operator) with `wall_clock` as the operator's wall
    /// clock (one a test steps; the write gate keeps the system's).
    pub async fn start_operator_with_clock(&mut self, wall_clock: WallClock) {
        assert!(self.operator.is_none(), "operator already running");
        let operator = self.spawn(
            &self.kube_faults.clone(),
            "test",
            &self.operator_consul,
            wall_clock,
            LEASE,
        );
        self.operator = Some(operator);
    }

    /// Starts one more replica of the operator, named `instance` in the Lease, with its own
    /// Kubernetes client (through `faults`, whose request log is then its own) and Consul
    /// `token` (so the emulator's per-token counters tell the replicas apart). The harness does
    /// not track it: the test stops or kills it.
    pub async fn spawn_replica(
        &self,
        instance: &str,
        faults: &KubeFaults,
        token: Option<String>,
    ) -> Operator {
        let consul = self.consul_with_token(token);
        self.spawn(faults, instance, &consul, WallClock::system(), LEASE)
    }

    /// A replica of another install of the operator in the same cluster: its own Lease
    /// `lease` (so it is active at once, next to this harness' operator) and its own Consul
    /// settings `consul` (an install configured differently), otherwise like
    /// [`spawn_replica`](Self::spawn_replica).
    pub async fn spawn_install(
        &self,
        instance: &str,
        faults: &KubeFaults,
        consul: &OperatorConsul,
        lease: &str,
    ) -> Operator {
        self.spawn(faults, instance, consul, WallClock::system(), lease)
    }

    /// The operator's Consul settings (those of [`HarnessOptions::operator_consul`]).
    pub fn operator_consul(&self) -> &OperatorConsul {
        &self.operator_consul
    }

    /// The harness' install of the operator, `<namespace>.<lease>` (a second install has its
    /// own Lease, see [`spawn_install`](Self::spawn_install)).
    pub fn install(&self) -> String {
        self.install_of(LEASE)
    }

    /// The uninstall hook's scope for the harness' install.
    pub fn hook_scope(&self) -> uninstall::Scope {
        self.hook_scope_of(LEASE)
    }

    /// The uninstall hook's scope for the install whose Lease is `lease`: the harness'
    /// namespace, where the Lease is too.
    pub fn hook_scope_of(&self, lease: &str) -> uninstall::Scope {
        uninstall::Scope {
            namespaces: vec![self.ns.clone()],
            lease: (self.ns.clone(), lease.to_owned()),
            install: self.install_of(lease),
        }
    }

    /// The install whose Lease is `lease` in the harness' namespace.
    pub fn install_of(&self, lease: &str) -> String {
        Owner::install_of_lease(&self.ns, lease)
    }

    /// The harness' cluster name (`--cluster-name`).
    pub fn cluster_name(&self) -> &str {
        &self.cluster_name
    }

    /// The names (`(cluster, install)`) the operators started next had before a rename.
    pub fn set_former_names(&mut self, former: Vec<(String, String)>) {
        self.former_names = former;
    }

    /// Replaces the operator's Consul settings (for the operator started next).
    pub fn set_operator_consul(&mut self, consul: OperatorConsul) {
        self.operator_consul = consul;
    }

    /// The operator's Consul settings with `token` as its own token.
    fn consul_with_token(&self, token: Option<String>) -> OperatorConsul {
        OperatorConsul {
            token,
            ..self.operator_consul.clone()
        }
    }

    /// [`spawn_replica`](Self::spawn_replica) whose Lease timestamps are written with
    /// `wall_clock` (a clock that is off, or steps).
    pub async fn spawn_replica_with_clock(
        &self,
        instance: &str,
        faults: &KubeFaults,
        token: Option<String>,
        wall_clock: WallClock,
    ) -> Operator {
        let consul = self.consul_with_token(token);
        self.spawn(faults, instance, &consul, wall_clock, LEASE)
    }

    /// The operator's clients (the gated one and the Lease's), both through `faults`.
    fn kube_clients(&self, faults: &KubeFaults) -> KubeClients {
        consul_elector::install_crypto_provider();
        let gate = WriteGate::closed();
        let config = kube_client::without_retries(self.sa_config.clone());
        let builder = |tasks| {
            kube::client::ClientBuilder::try_from((config.clone(), tasks))
                .map(|builder| builder.with_layer(&faults.layer()))
        };
        KubeClients {
            client: kube_client::gated_client(&gate, builder).expect("kube client"),
            lease: builder(ConnectionTasks::default())
                .expect("kube client")
                .build(),
            gate,
        }
    }

    /// Runs `operator::run` in a task with the harness' settings.
    fn spawn(
        &self,
        faults: &KubeFaults,
        instance: &str,
        consul: &OperatorConsul,
        wall_clock: WallClock,
        lease: &str,
    ) -> Operator {
        let url = self.consul.url();
        let extra = &consul.env;
        let token = consul.token.clone();
        let mut settings = ConsulSettings::from_env(|name| {
            if let Some((_, value)) = extra.iter().find(|(variable, _)| variable == name) {
                return Some(value.clone());
            }
            match name {
                "CONSUL_HTTP_ADDR" => Some(url.clone()),
                "CONSUL_HTTP_TOKEN" => token.clone(),
                _ => None,
            }
        })
        .expect("consul settings");
        settings.allowed_addresses = consul
            .allowed_addresses
            .iter()
            .map(|a| ConsulAddress::parse(a, false).expect("allowed address"))
            .collect();
        settings.allowed_datacenters = consul.allowed_datacenters.clone();
        let consul = ConsulClient::new(&settings).expect("consul client");
        let (stop, stop_rx) = watch::channel(false);
        let metrics = Metrics::new();
        consul.observe_requests(metrics.consul_observer());
        let mut watch_namespaces = vec![self.ns.clone()];
        watch_namespaces.extend(self.extra_watch_namespaces.iter().cloned());
        let settings = Settings {
            watch_namespaces,
            field_manager: "consul-elector".into(),
            instance: instance.into(),
            lock_watch_wait: Duration::from_secs(60),
            concurrency: 4,
            owner: Owner::new(self.cluster_name.clone(), self.install_of(lease))
                .with_former(self.former_names.clone()),
            lease: LeaseSettings {
                name: lease.into(),
                namespace: self.ns.clone(),
                identity: instance.into(),
                duration: self.lease.0,
                renew_deadline: self.lease.1,
                wall_clock,
            },
            consul_cleanup_bound: self.consul_cleanup_bound,
        };
        let task = tokio::spawn(operator::run(
            self.kube_clients(faults),
            consul,
            settings,
            metrics.clone(),
            Health::new(Duration::from_secs(60)),
            async move {
                let mut rx = stop_rx;
                let _ = rx.wait_for(|s| *s).await;
            },
        ));
        Operator {
            task,
            stop,
            metrics,
            instance: instance.into(),
        }
    }

    /// Binds user `user` to the operator's roles (the chart's rules and its Lease rule), as
    /// the ServiceAccount is: an operator process acting as `user` has exactly its rights.
    pub async fn grant_user(&self, user: &str) {
        let subject = Subject {
            kind: "User".into(),
            name: user.into(),
            api_group: Some("rbac.authorization.k8s.io".into()),
            ..Subject::default()
        };
        let cluster_role = format!("consul-elector-{}", self.ns);
        let binding = ClusterRoleBinding {
            metadata: ObjectMeta {
                name: Some(format!("{cluster_role}-{user}")),
                ..ObjectMeta::default()
            },
            role_ref: RoleRef {
                api_group: "rbac.authorization.k8s.io".into(),
                kind: "ClusterRole".into(),
                name: cluster_role,
            },
            subjects: Some(vec![subject.clone()]),
        };
        Api::<ClusterRoleBinding>::all(self.admin.clone())
            .create(&PostParams::default(), &binding)
            .await
            .expect("cluster role binding for the user");
        let lease_binding = RoleBinding {
            metadata: ObjectMeta {
                name: Some(format!("consul-elector-lease-{user}")),
                ..ObjectMeta::default()
            },
            role_ref: RoleRef {
                api_group: "rbac.authorization.k8s.io".into(),
                kind: "Role".into(),
                name: "consul-elector-lease".into(),
            },
            subjects: Some(vec![subject]),
        };
        Api::<RoleBinding>::namespaced(self.admin.clone(), &self.ns)
            .create(&PostParams::default(), &lease_binding)
            .await
            .expect("lease role binding for the user");
    }

    /// Kills the operator as a crash would: no graceful shutdown, nothing released.
    pub async fn kill_operator(&mut self) {
        self.operator.take().expect("operator running").kill().await;
    }

    /// Stops the operator gracefully (as SIGTERM does).
    pub async fn stop_operator(&mut self) {
        self.operator
            .take()
            .expect("operator running")
            .stop(SOON)
            .await;
    }

    /// Takes the running operator out of the harness (a test that replaces it by another
    /// replica stops or kills it itself).
    pub fn take_operator(&mut self) -> Operator {
        self.operator.take().expect("operator running")
    }

    /// Makes `operator` the harness' operator ([`reconciles`](Self::reconciles) and
    /// [`finish`](Self::finish) use it).
    pub fn set_operator(&mut self, operator: Operator) {
        assert!(self.operator.is_none(), "operator already running");
        self.operator = Some(operator);
    }

    /// The running operator.
    pub fn operator(&self) -> &Operator {
        self.operator.as_ref().expect("operator running")
    }

    /// A Deployment `name` of `replicas` pods labelled `app=<name>`, Ready.
    pub async fn deployment(&self, name: &str, replicas: i32) {
        let labels = BTreeMap::from([("app".to_owned(), name.to_owned())]);
        create_deployment(&self.admin, &self.ns, name, replicas, labels)
            .await
            .expect("deployment");
        wait_deployment_ready(&self.admin, &self.ns, name, SOON)
            .await
            .expect("deployment ready");
    }

    /// Creates a LeaderElection from a JSON spec.
    pub async fn election(&self, name: &str, spec: serde_json::Value) -> LeaderElection {
        let le: LeaderElection = serde_json::from_value(serde_json::json!({
            "apiVersion": "elector.dev/v1alpha1",
            "kind": "LeaderElection",
            "metadata": {"name": name, "namespace": self.ns},
            "spec": spec,
        }))
        .expect("election");
        self.elections()
            .create(&PostParams::default(), &le)
            .await
            .expect("create election")
    }

    /// The namespace's LeaderElections.
    pub fn elections(&self) -> Api<LeaderElection> {
        Api::namespaced(self.admin.clone(), &self.ns)
    }

    /// The namespace's pods.
    pub fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.admin.clone(), &self.ns)
    }

    /// Waits until exactly one pod carries `role=leader` (and it is not `not`), returning it.
    pub async fn wait_leader(&self, not: Option<&str>) -> String {
        let mut leader = String::new();
        let found = self
            .recorder
            .wait_until(SOON, |pods| {
                let leaders: Vec<&String> = pods
                    .iter()
                    .filter(|(_, p)| p.labels.get(ROLE).map(String::as_str) == Some("leader"))
                    .map(|(name, _)| name)
                    .collect();
                leaders.len() == 1 && Some(leaders[0].as_str()) != not
            })
            .await;
        found.expect("a leader is labelled");
        for (name, p) in self.recorder.current() {
            if p.labels.get(ROLE).map(String::as_str) == Some("leader") {
                leader = name;
            }
        }
        leader
    }

    /// Waits until `pred` holds for the election and returns the version that met it.
    pub async fn wait_status(
        &self,
        name: &str,
        pred: impl Fn(&LeaderElection) -> bool,
    ) -> LeaderElection {
        self.wait_status_within(name, SOON, pred).await
    }

    /// Asserts the safety rule over the whole recorded history, then stops the operator.
    pub async fn finish(self) {
        self.finish_among(|_| true).await;
    }

    /// [`finish`](Self::finish), asserting rule 1 only among the pod versions `filter`
    /// accepts (a test that put a second leader label on a pod itself leaves that pod out).
    pub async fn finish_among(mut self, filter: impl Fn(&PodVersion) -> bool) {
        self.recorder.assert_never_two_among(ROLE, "leader", filter);
        if let Some(op) = self.operator.take() {
            op.stop(SOON).await;
        }
        self.sim.stop().await;
        self.recorder.stop().await;
    }
}

/// The client configuration of ServiceAccount `consul-elector` bound to a ClusterRole with
/// exactly the chart's rules (plus the optional Secret rule when `secret_access`), and to a
/// Role in `ns` with the chart's Lease rule.
async fn operator_config(
    cluster: &TestCluster,
    admin: &Client,
    ns: &str,
    secret_access: bool,
) -> kube::Config {
    let mut rules: Vec<PolicyRule> = serde_saphyr::from_str(RBAC_RULES).expect("RBAC rules parse");
    if secret_access {
        let extra: Vec<PolicyRule> =
            serde_saphyr::from_str(RBAC_SECRET_RULES).expect("Secret RBAC rules parse");
        rules.extend(extra);
    }
    let name = format!("consul-elector-{ns}");
    let roles: Api<ClusterRole> = Api::all(admin.clone());
    let role = ClusterRole {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            ..ObjectMeta::default()
        },
        rules: Some(rules),
        ..ClusterRole::default()
    };
    let _ = roles.delete(&name, &DeleteParams::default()).await;
    roles
        .create(&PostParams::default(), &role)
        .await
        .expect("cluster role");
    let bindings: Api<ClusterRoleBinding> = Api::all(admin.clone());
    let binding = ClusterRoleBinding {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            ..ObjectMeta::default()
        },
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".into(),
            kind: "ClusterRole".into(),
            name: name.clone(),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".into(),
            name: "consul-elector".into(),
            namespace: Some(ns.to_owned()),
            ..Subject::default()
        }]),
    };
    let _ = bindings.delete(&name, &DeleteParams::default()).await;
    bindings
        .create(&PostParams::default(), &binding)
        .await
        .expect("cluster role binding");
    grant_lease_role(admin, ns).await;
    // The operator's own client is built from the ServiceAccount's token with the fault layer
    // below.
    let token = cluster.service_account_token(ns, "consul-elector").await;
    let mut config = cluster.kube_config();
    config.auth_info =
        serde_json::from_value(serde_json::json!({ "token": token })).expect("auth info");
    config
}

/// The chart's Lease rule as a Role (and RoleBinding) in `ns`, where the Lease lives.
async fn grant_lease_role(admin: &Client, ns: &str) {
    let rules: Vec<PolicyRule> =
        serde_saphyr::from_str(RBAC_LEASE_RULES).expect("Lease RBAC rules parse");
    let name = "consul-elector-lease".to_owned();
    let role = Role {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            ..ObjectMeta::default()
        },
        rules: Some(rules),
    };
    let roles: Api<Role> = Api::namespaced(admin.clone(), ns);
    let _ = roles.delete(&name, &DeleteParams::default()).await;
    roles
        .create(&PostParams::default(), &role)
        .await
        .expect("lease role");
    let binding = RoleBinding {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            ..ObjectMeta::default()
        },
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".into(),
            kind: "Role".into(),
            name,
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".into(),
            name: "consul-elector".into(),
            namespace: Some(ns.to_owned()),
            ..Subject::default()
        }]),
    };
    let bindings: Api<RoleBinding> = Api::namespaced(admin.clone(), ns);
    let _ = bindings
        .delete("consul-elector-lease", &DeleteParams::default())
        .await;
    bindings
        .create(&PostParams::default(), &binding)
        .await
        .expect("lease role binding");
}

/// Names of the pods carrying `role=value` right now.
pub async fn pods_with_role(h: &Harness, value: &str) -> Vec<String> {
    h.pods()
        .list(&Default::default())
        .await
        .expect("list pods")
        .items
        .into_iter()
        .filter(|p| p.labels().get(ROLE).map(String::as_str) == Some(value))
        .map(|p| p.name_any())
        .collect()
}

/// The role label of `pod` in a recorded pod set.
pub fn role_in<'a>(pods: &'a BTreeMap<String, PodVersion>, pod: &str) -> Option<&'a str> {
    pods.get(pod)
        .and_then(|p| p.labels.get(ROLE))
        .map(String::as_str)
}

/// The pods carrying `ROLE=value` in a recorded pod set.
pub fn with_role(pods: &BTreeMap<String, PodVersion>, value: &str) -> Vec<String> {
    pods.iter()
        .filter(|(_, p)| p.labels.get(ROLE).map(String::as_str) == Some(value))
        .map(|(name, _)| name.clone())
        .collect()
}

/// The leader pod the status names.
pub fn status_leader(le: &LeaderElection) -> Option<String> {
    le.status
        .as_ref()
        .and_then(|s| s.leader.as_ref())
        .map(|l| l.pod.clone())
}

/// The phase the status shows, as text (`"Elected"`, ...).
pub fn phase(le: &LeaderElection) -> Option<String> {
    let phase = le.status.as_ref()?.phase?;
    serde_json::to_value(phase)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
}

/// The status condition of `type_`.
pub fn condition(le: &LeaderElection, type_: &str) -> Option<Condition> {
    le.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .cloned()
}

/// Whether the status has condition `type_` with `status` ("True"/"False").
pub fn has_condition(le: &LeaderElection, type_: &str, status: &str) -> bool {
    condition(le, type_).is_some_and(|c| c.status == status)
}

/// A Consul answer read by [`Harness::consul`].
#[derive(Debug, Clone)]
pub struct ConsulReply {
    /// HTTP status.
    pub status: u16,
    /// Body text.
    pub body: String,
}

impl ConsulReply {
    /// The body as JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("consul body is not JSON ({e}): {}", self.body))
    }
}

impl Harness {
    /// The default Consul key of election `name`.
    pub fn key(&self, name: &str) -> String {
        format!("elector/{}/{name}/leader", self.ns)
    }

    /// The election's current status (default when it has none).
    pub async fn status(&self, name: &str) -> LeaderElectionStatus {
        self.elections()
            .get(name)
            .await
            .expect("get election")
            .status
            .unwrap_or_default()
    }

    /// Like [`wait_status`](Self::wait_status), with an explicit bound (for waits that must
    /// let a TTL or a delay pass).
    pub async fn wait_status_within(
        &self,
        name: &str,
        timeout: Duration,
        pred: impl Fn(&LeaderElection) -> bool,
    ) -> LeaderElection {
        let api = self.elections();
        let cond = move |le: Option<&LeaderElection>| le.is_some_and(&pred);
        match tokio::time::timeout(timeout, await_condition(api.clone(), name, cond)).await {
            // The version that met the condition (a later one may not any more).
            Ok(result) => result
                .expect("watch election")
                .expect("the election that met the condition"),
            Err(_) => {
                let now = api.get(name).await.ok();
                panic!(
                    "status of {name} did not reach the condition within {timeout:?}; now: {:#?}",
                    now.and_then(|le| le.status)
                );
            }
        }
    }

    /// Waits (at most `timeout`) until `pred` holds for the recorded pods; panics with
    /// `what` and the pods otherwise.
    pub async fn wait_pods(
        &self,
        timeout: Duration,
        what: &str,
        pred: impl Fn(&BTreeMap<String, PodVersion>) -> bool,
    ) {
        if let Err(e) = self.recorder.wait_until(timeout, pred).await {
            panic!("waiting for {what}: {e}");
        }
    }

    /// `true` if `pred` becomes true for the recorded pods within `timeout` (used to show that
    /// something does NOT happen within a window).
    pub async fn pods_become(
        &self,
        timeout: Duration,
        pred: impl Fn(&BTreeMap<String, PodVersion>) -> bool,
    ) -> bool {
        self.recorder.wait_until(timeout, pred).await.is_ok()
    }

    /// The pods as last recorded.
    pub fn current(&self) -> BTreeMap<String, PodVersion> {
        self.recorder.current()
    }

    /// Sets (or with `None` removes) label `key` on pod `pod`.
    pub async fn set_pod_label(&self, pod: &str, key: &str, value: Option<&str>) {
        let patch = serde_json::json!({"metadata": {"labels": {key: value}}});
        self.pods()
            .patch(pod, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .expect("patch pod labels");
    }

    /// A bare pod `name` (no controller) with `labels`, bound and made Ready by the simulator.
    pub async fn bare_pod(&self, name: &str, labels: &[(&str, &str)]) {
        let labels: BTreeMap<String, String> = labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "labels": labels},
            "spec": {
                "terminationGracePeriodSeconds": 1,
                "containers": [{"name": "app", "image": testkit::pods::SIM_IMAGE}],
            },
        }))
        .expect("pod");
        self.pods()
            .create(&PostParams::default(), &pod)
            .await
            .expect("create pod");
    }

    /// Touches the election (a new annotation value), as `kubectl annotate` would: the
    /// operator sees an update without a spec change.
    pub async fn touch(&self, name: &str) {
        use std::sync::atomic::{AtomicU64, Ordering};
        static TOUCHES: AtomicU64 = AtomicU64::new(0);
        let n = TOUCHES.fetch_add(1, Ordering::Relaxed);
        let patch = serde_json::json!({"metadata": {"annotations": {"test.elector.dev/touch": n.to_string()}}});
        self.elections()
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .expect("touch election");
    }

    /// Touches the election and waits until the operator has finished a reconcile started
    /// after the touch, so a test can assert what that reconcile did (and did not do).
    pub async fn touch_and_wait_reconcile(&self, name: &str) {
        let before = self.reconciles();
        self.touch(name).await;
        let reconciled = self.poll_until(SOON, || self.reconciles() > before).await;
        assert!(reconciled, "the touch is reconciled");
    }

    /// Creates Secret `name` with the Consul `token` under key `token`, opted in for the
    /// elections `allowed` (the annotation's value: names, or `*`).
    pub async fn token_secret(&self, name: &str, token: &str, allowed: &str) {
        let secrets: Api<Secret> = Api::namespaced(self.admin.clone(), &self.ns);
        let secret: Secret = serde_json::from_value(serde_json::json!({
            "metadata": {
                "name": name,
                "annotations": {consul_elector::crd::SECRET_ALLOWED_ELECTIONS_ANNOTATION: allowed},
            },
            "stringData": {"token": token},
        }))
        .expect("secret");
        secrets
            .create(&PostParams::default(), &secret)
            .await
            .expect("create secret");
    }

    /// The names of every session Consul has, as `GET /v1/session/list` answers.
    pub async fn session_names(&self) -> Vec<String> {
        let sessions = self.consul("GET", "/v1/session/list", "").await.json();
        sessions
            .as_array()
            .expect("session list")
            .iter()
            .filter_map(|s| s["Name"].as_str().map(str::to_owned))
            .collect()
    }

    /// Merge-patches the election's spec with `spec`.
    pub async fn patch_spec(&self, name: &str, spec: serde_json::Value) {
        let patch = serde_json::json!({"spec": spec});
        self.elections()
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .expect("patch election spec");
    }

    /// The events.k8s.io events about election `name` with `reason`, as (count, notes):
    /// the count includes every repetition of a series.
    pub async fn events(&self, name: &str, reason: &str) -> (u64, Vec<String>) {
        let api: Api<Event> = Api::namespaced(self.admin.clone(), &self.ns);
        let list = api.list(&Default::default()).await.expect("list events");
        let ours = list.items.into_iter().filter(|e| {
            e.regarding.as_ref().and_then(|r| r.kind.as_deref()) == Some("LeaderElection")
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
                && e.reason.as_deref() == Some(reason)
        });
        let mut count = 0;
        let mut notes = Vec::new();
        for e in ours {
            count += e
                .series
                .as_ref()
                .map_or(1, |s| u64::try_from(s.count).unwrap_or(1).max(1));
            notes.push(e.note.unwrap_or_default());
        }
        (count, notes)
    }

    /// Waits until an event about election `name` with `reason` exists; returns its notes.
    pub async fn wait_event(&self, name: &str, reason: &str) -> Vec<String> {
        self.wait_event_noting(name, reason, "").await
    }

    /// Waits until an event about election `name` with `reason` and a note containing
    /// `text` exists; returns the notes of every event about it with that reason.
    pub async fn wait_event_noting(&self, name: &str, reason: &str, text: &str) -> Vec<String> {
        let api: Api<Event> = Api::namespaced(self.admin.clone(), &self.ns);
        let missing = format!("no {reason} event about {name} noting {text:?}");
        let (name, reason, text) = (name.to_owned(), reason.to_owned(), text.to_owned());
        wait_for(api, watcher::Config::default(), SOON, move |events| {
            let notes: Vec<String> = events
                .iter()
                .filter(|e| {
                    e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name.as_str())
                        && e.reason.as_deref() == Some(reason.as_str())
                })
                .map(|e| e.note.clone().unwrap_or_default())
                .collect();
            notes
                .iter()
                .any(|note| note.contains(text.as_str()))
                .then_some(notes)
        })
        .await
        .unwrap_or_else(|e| panic!("{missing}: {e}"))
    }

    /// Polls `check` (on every pod change, and every 25 ms since Consul and metrics change
    /// without one) until it holds or `timeout` passes; whether it held.
    pub async fn poll_until(&self, timeout: Duration, check: impl Fn() -> bool) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        while !check() {
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            let _ = self
                .recorder
                .wait_until(Duration::from_millis(25), |_| false)
                .await;
        }
        true
    }

    /// Waits until the running operator has finished a reconcile: after a (re)start, the
    /// status and labels may otherwise still be the previous process' work.
    pub async fn wait_reconciled(&self) {
        let done = self.poll_until(SOON, || self.reconciles() > 0).await;
        assert!(done, "the operator finished no reconcile within {SOON:?}");
    }

    /// Whether Consul session `id` exists and satisfies `pred` within [`SOON`].
    pub async fn wait_session(
        &self,
        id: &str,
        pred: impl Fn(&testkit::consul::SessionInfo) -> bool,
    ) -> bool {
        self.poll_until(SOON, || self.emu().session(id).is_some_and(|s| pred(&s)))
            .await
    }

    /// Reconciles the running operator has finished (successful or not).
    pub fn reconciles(&self) -> u64 {
        self.operator().reconciles()
    }

    /// One request to the Consul emulator's HTTP API, as an outside client (an application,
    /// an operator at a terminal) would send it.
    pub async fn consul(&self, method: &str, path_and_query: &str, body: &str) -> ConsulReply {
        let addr = self.consul.app_addr();
        let stream = tokio::net::TcpStream::connect(addr)
            .await
            .expect("connect to consul");
        let (mut sender, conn) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                .await
                .expect("HTTP handshake");
        let conn = tokio::spawn(conn);
        let mut request = http::Request::builder()
            .method(method)
            .uri(path_and_query)
            .header("host", addr.to_string());
        if let Some(token) = self.consul.app_token() {
            request = request.header("X-Consul-Token", token);
        }
        let request = request
            .body(Full::new(Bytes::from(body.to_owned())))
            .expect("request");
        let response = sender.send_request(request).await.expect("consul request");
        let status = response.status().as_u16();
        let bytes = response
            .into_body()
            .collect()
            .await
            .expect("consul body")
            .to_bytes();
        drop(sender);
        let _ = conn.await;
        ConsulReply {
            status,
            body: String::from_utf8_lossy(&bytes).into_owned(),
        }
    }

    /// Creates a session as an application would (`PUT /v1/session/create`); returns its ID.
    pub async fn app_session(&self, name: &str, lock_delay: &str) -> String {
        let body = serde_json::json!({"Name": name, "LockDelay": lock_delay}).to_string();
        let reply = self.consul("PUT", "/v1/session/create", &body).await;
        assert_eq!(reply.status, 200, "session create: {}", reply.body);
        reply.json()["ID"].as_str().expect("session ID").to_owned()
    }

    /// `PUT /v1/kv/<key>?acquire=<session>` with `value`; whether the lock was taken.
    pub async fn app_acquire(&self, key: &str, session: &str, value: &str) -> bool {
        let reply = self
            .consul("PUT", &format!("/v1/kv/{key}?acquire={session}"), value)
            .await;
        assert_eq!(reply.status, 200, "acquire: {}", reply.body);
        reply.body.trim() == "true"
    }

    /// `PUT /v1/kv/<key>?release=<session>`; whether the lock was released.
    pub async fn app_release(&self, key: &str, session: &str) -> bool {
        let reply = self
            .consul("PUT", &format!("/v1/kv/{key}?release={session}"), "")
            .await;
        assert_eq!(reply.status, 200, "release: {}", reply.body);
        reply.body.trim() == "true"
    }

    /// Whether Consul has session `id`, as `GET /v1/session/info/<id>` answers (`[]` when it
    /// does not exist, or `null` from older Consul versions).
    pub async fn session_exists(&self, id: &str) -> bool {
        let reply = self
            .consul("GET", &format!("/v1/session/info/{id}"), "")
            .await;
        assert_eq!(reply.status, 200, "session info: {}", reply.body);
        reply.json().as_array().is_some_and(|s| !s.is_empty())
    }

    /// The IDs of every session Consul has, as `GET /v1/session/list` answers: equal before
    /// and after something means no session was created or destroyed meanwhile.
    pub async fn session_ids(&self) -> std::collections::BTreeSet<String> {
        let reply = self.consul("GET", "/v1/session/list", "").await;
        assert_eq!(reply.status, 200, "session list: {}", reply.body);
        reply
            .json()
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s["ID"].as_str().map(str::to_owned))
            .collect()
    }

    /// Asserts a move from `old` to `new` was planned and explicit (docs/design.md rule 4): a
    /// new session, the old one destroyed, the next token (one acquisition of an unlocked
    /// key), one more transition, and no lock-delay waited out in between: the successor was
    /// labelled sooner after the old leader's last labelled version than the sessions'
    /// lock-delay, which an acquisition after a destroy without `?release` would have had to
    /// wait (on the emulator, also that no lock-delay is left on the key of election `name`).
    pub async fn assert_explicit_release(&self, name: &str, old: &Elected, new: &Elected) {
        assert_ne!(old.pod, new.pod);
        assert_ne!(old.session, new.session, "a new session for the successor");
        assert!(
            !self.session_exists(&old.session).await,
            "the old session is destroyed"
        );
        assert_eq!(new.token, old.token + 1, "successor's token = previous + 1");
        assert_eq!(new.transitions, old.transitions + 1);
        let lock_delay = self.session_lock_delay(&new.session).await;
        let leader_at = |pod: &str| {
            self.recorder
                .versions()
                .into_iter()
                .filter(|v| {
                    v.name == pod && v.labels.get(ROLE).map(String::as_str) == Some("leader")
                })
                .map(|v| v.at)
                .collect::<Vec<_>>()
        };
        let labelled = leader_at(&new.pod)
            .into_iter()
            .min()
            .expect("the successor was labelled");
        let last_led = leader_at(&old.pod)
            .into_iter()
            .filter(|at| *at <= labelled)
            .max()
            .expect("the old leader was labelled before the successor");
        assert!(
            labelled - last_led < lock_delay,
            "the successor was labelled {:?} after the old leader's last labelled version: \
             it waited out the lock-delay ({lock_delay:?}), the lock was not released",
            labelled - last_led
        );
        if let Some(emu) = self.consul.as_emulator() {
            assert_eq!(
                emu.lock_delay_until(&self.key(name)),
                None,
                "an explicit release leaves no lock-delay"
            );
        }
    }

    /// The lock-delay of session `id`, as `GET /v1/session/info/<id>` answers (`LockDelay`,
    /// in nanoseconds).
    pub async fn session_lock_delay(&self, id: &str) -> Duration {
        let reply = self
            .consul("GET", &format!("/v1/session/info/{id}"), "")
            .await;
        assert_eq!(reply.status, 200, "session info: {}", reply.body);
        let nanos = reply.json()[0]["LockDelay"]
            .as_u64()
            .unwrap_or_else(|| panic!("session {id} has a LockDelay: {}", reply.body));
        Duration::from_nanos(nanos)
    }

    /// The lock fields of `key` (the emulator's entry, or a real Consul's answer to an
    /// outside read), `None` when it does not exist or a real Consul cannot answer now (no
    /// Raft leader during a fault).
    pub async fn key_lock(&self, key: &str) -> Option<KeyLock> {
        if let ConsulUnderTest::Emulator(emu) = &self.consul {
            return emu.kv_entry(key).map(|e| KeyLock {
                session: e.session,
                lock_index: e.lock_index,
                modify_index: e.modify_index,
            });
        }
        let reply = self.consul("GET", &format!("/v1/kv/{key}"), "").await;
        if reply.status != 200 {
            return None;
        }
        let entry = &reply.json()[0];
        Some(KeyLock {
            session: entry["Session"].as_str().map(str::to_string),
            lock_index: entry["LockIndex"].as_u64().unwrap_or(0),
            modify_index: entry["ModifyIndex"].as_u64().unwrap_or(0),
        })
    }

    /// `PUT /v1/session/destroy/<id>`.
    pub async fn app_destroy_session(&self, id: &str) {
        let reply = self
            .consul("PUT", &format!("/v1/session/destroy/{id}"), "")
            .await;
        assert_eq!(reply.status, 200, "destroy: {}", reply.body);
    }

    /// `DELETE /v1/kv/<key>`.
    pub async fn app_delete_key(&self, key: &str) {
        let reply = self.consul("DELETE", &format!("/v1/kv/{key}"), "").await;
        assert_eq!(reply.status, 200, "delete: {}", reply.body);
    }
}

/// An election's leader as both the pods and the status show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Elected {
    /// Leader pod.
    pub pod: String,
    /// Fencing token (status, pod annotation and the key's LockIndex agree).
    pub token: u64,
    /// The operator's Consul session for it.
    pub session: String,
    /// Transitions in the status.
    pub transitions: u64,
}

impl Harness {
    /// Waits until election `name` is Elected with a leader labelled on exactly one pod (not
    /// `not`), the status naming that pod, and the pod's fencing-token annotations (the shared
    /// one and its label key's) equal to the status token; checks that the Consul key is held by the status' session with that
    /// LockIndex.
    pub async fn wait_elected(&self, name: &str, not: Option<&str>) -> Elected {
        self.wait_elected_within(name, not, SOON).await
    }

    /// [`wait_elected`](Self::wait_elected) with an explicit bound.
    pub async fn wait_elected_within(
        &self,
        name: &str,
        not: Option<&str>,
        timeout: Duration,
    ) -> Elected {
        let deadline = tokio::time::Instant::now() + timeout;
        let api = self.elections();
        loop {
            let le = api.get(name).await.expect("get election");
            if let Some(elected) = self.agreed_leader(name, &le, not).await {
                return elected;
            }
            if tokio::time::Instant::now() >= deadline {
                panic!(
                    "election {name} not Elected (pods, status and key agreeing) within \
                     {timeout:?}; status: {:#?}; key: {:?}; pods: {:#?}",
                    le.status,
                    self.key_lock(&self.key(name)).await,
                    self.current()
                        .values()
                        .map(|p| (&p.name, &p.labels, &p.annotations))
                        .collect::<Vec<_>>()
                );
            }
            // Re-check on the next pod change, or shortly (the status may change alone).
            let _ = self
                .recorder
                .wait_until(Duration::from_millis(25), |_| false)
                .await;
        }
    }

    /// The leader when status, pods and key agree (see [`wait_elected`](Self::wait_elected)).
    async fn agreed_leader(
        &self,
        name: &str,
        le: &LeaderElection,
        not: Option<&str>,
    ) -> Option<Elected> {
        let status = le.status.as_ref()?;
        let leader = status.leader.as_ref()?;
        let token = status.fencing_token?;
        let session = leader.session_id.clone()?;
        if phase(le).as_deref() != Some("Elected") || Some(leader.pod.as_str()) == not {
            return None;
        }
        let pods = self.current();
        let token_text = token.to_string();
        let annotations = pods.get(&leader.pod).map(|p| &p.annotations);
        let carries =
            |annotation: &str| annotations.and_then(|a| a.get(annotation)) == Some(&token_text);
        let labelled = with_role(&pods, "leader") == vec![leader.pod.clone()]
            && carries(consul_elector::crd::FENCING_TOKEN_ANNOTATION)
            && carries(&consul_elector::crd::label_token_annotation(ROLE));
        if !labelled {
            return None;
        }
        // A custom key is checked by the caller.
        if let Some(entry) = self.key_lock(&self.key(name)).await
            && (entry.session.as_deref() != Some(session.as_str()) || entry.lock_index != token)
        {
            return None;
        }
        Some(Elected {
            pod: leader.pod.clone(),
            token,
            session,
            transitions: status.transitions,
        })
    }
}

/// Every pod's history of the role label and of the [`TRACKED`] annotations.
pub type Histories = BTreeMap<String, Vec<Vec<Option<String>>>>;

impl Harness {
    /// Every pod's recorded history of the role label and of the operator's annotations:
    /// equal before and after something means no label or annotation changed meanwhile.
    pub fn histories(&self) -> Histories {
        self.current()
            .keys()
            .map(|pod| {
                let mut all = vec![self.recorder.label_history(pod, ROLE)];
                all.extend(
                    TRACKED
                        .iter()
                        .map(|a| self.recorder.annotation_history(pod, a)),
                );
                (pod.clone(), all)
            })
            .collect()
    }

    /// When the recorder first saw pod `pod` with `ROLE=value` at or after `after`.
    pub fn role_seen_at(
        &self,
        pod: &str,
        value: &str,
        after: std::time::Instant,
    ) -> Option<std::time::Instant> {
        self.recorder
            .versions()
            .into_iter()
            .filter(|v| v.name == pod && v.at >= after)
            .find(|v| v.labels.get(ROLE).map(String::as_str) == Some(value))
            .map(|v| v.at)
    }

    /// Waits (up to `timeout`) until no pod carries the leader label; returns how long after
    /// `since` the recorder saw `pod` lose it.
    pub async fn leader_label_gone_after(
        &self,
        pod: &str,
        since: std::time::Instant,
        timeout: Duration,
    ) -> Duration {
        self.wait_pods(timeout, "no leader label", |pods| {
            with_role(pods, "leader").is_empty()
        })
        .await;
        self.leader_label_gone_at(pod, since)
            .expect("leader unlabelled")
            - since
    }

    /// When the recorder first saw pod `pod` without `ROLE=leader` at or after `after`.
    pub fn leader_label_gone_at(
        &self,
        pod: &str,
        after: std::time::Instant,
    ) -> Option<std::time::Instant> {
        self.recorder
            .versions()
            .into_iter()
            .filter(|v| v.name == pod && v.at >= after)
            .find(|v| v.labels.get(ROLE).map(String::as_str) != Some("leader"))
            .map(|v| v.at)
    }
}

/// A fault that fails every patch of a pod with a 500, as an API server in trouble does
/// (narrow it to one pod with `.name(...)`).
pub fn pod_patches_fail() -> KubeFault {
    KubeFault::new(FaultAction::status(500, "InternalError", "injected"))
        .verb(Verb::Patch)
        .resource("pods")
}
