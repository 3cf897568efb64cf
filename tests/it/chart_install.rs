//! The Helm chart (`charts/consul-elector`), checked with Helm's own engine and installed into
//! the real test cluster.
//!
//! There is no helm CLI here: `charts/tests/check_chart.py` drives Helm 4's library through the
//! PyPI package helm-sdkpy, from the venv `charts/tests/setup-venv.sh` makes (its python is
//! `$ELECTOR_HELM_PYTHON`; without it the tests run that script themselves, once per run).
//! Without helm-sdkpy these tests fail, always in CI (`CI=true`); elsewhere
//! `ELECTOR_SKIP_HELM=1` skips them with a printed reason.
//!
//! 1. `chart_files_follow_the_crate`: the chart's CRD is the generated one, and the chart's
//!    version and appVersion are Cargo's.
//! 2. `chart_lints_clean`: `helm lint` with the defaults and with every feature on.
//! 3. `chart_installs_and_its_operator_elects_a_leader`: the checker installs the chart (wrong
//!    value types fail with the schema's message; defaults; every feature on, before and after
//!    the ServiceMonitor CRD exists) and checks hardening and RBAC on the rendered and on the
//!    stored objects, the LeaderElection rules aggregated into the default view/edit/admin
//!    ClusterRoles, and that `admissionPolicy.enabled` renders the ValidatingAdmissionPolicy
//!    (which 1.20 refuses). Then the operator binary runs as the installed Deployment would run it:
//!    its args and env, its ServiceAccount's token and Secret volumes, only the Consul address
//!    pointing at the emulator. It must elect a leader for `examples/web.yaml`, and the leader
//!    Service's EndpointSlices (made by the real controller-manager) must hold exactly the
//!    leader pod. This runs for the default release (ClusterRole) and for the release with
//!    every feature on (a Role per watched namespace, Consul TLS files and an ACL token read
//!    from mounted Secrets).

use std::collections::{BTreeMap, BTreeSet};
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use clap::Parser;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Container, Pod, Secret, Service};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DynamicObject, GroupVersionKind, ListParams, PostParams};
use kube::discovery::{Discovery, Scope};
use kube::{Client, ResourceExt};
use serde_json::Value;
use testkit::cluster::TestCluster;
use testkit::consul::{AclConfig, AclPolicy, ClockMode, Emulator, EmulatorConfig};
use testkit::pods::{PodSimulator, SimulatorOptions};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
/// The label the example's Services select on.
const ROLE: &str = "elector.dev/role";
/// Bound for everything that should take seconds.
const PATIENCE: Duration = Duration::from_secs(90);
/// The ACL token of the feature release's Consul (read by the operator from a mounted Secret).
const CONSUL_TOKEN: &str = "7f3b2a9e-chart-install-token";

fn root(path: &str) -> PathBuf {
    Path::new(ROOT).join(path)
}

#[test]
fn chart_files_follow_the_crate() {
    let generated =
        std::fs::read_to_string(root("crds/leaderelections.elector.dev.yaml")).expect("read crds/");
    let shipped = std::fs::read_to_string(root(
        "charts/consul-elector/crds/leaderelections.elector.dev.yaml",
    ))
    .expect("read the chart's crds/");
    assert!(
        generated == shipped,
        "charts/consul-elector/crds/ differs from crds/: copy it with \
         `cp crds/leaderelections.elector.dev.yaml charts/consul-elector/crds/`"
    );
    // Helm installs every file there: the one CRD and nothing else.
    let mut files: Vec<String> = std::fs::read_dir(root("charts/consul-elector/crds"))
        .expect("list the chart's crds/")
        .map(|entry| {
            entry
                .expect("a directory entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    files.sort();
    assert_eq!(
        files,
        ["leaderelections.elector.dev.yaml"],
        "the chart's crds/"
    );

    let chart: Value = serde_saphyr::from_str(
        &std::fs::read_to_string(root("charts/consul-elector/Chart.yaml")).expect("Chart.yaml"),
    )
    .expect("Chart.yaml parses");
    let version = env!("CARGO_PKG_VERSION");
    for field in ["version", "appVersion"] {
        assert_eq!(
            chart[field].as_str(),
            Some(version),
            "Chart.yaml {field} must be Cargo's [workspace.package] version {version}: the chart \
             is released with the operator it installs"
        );
    }
}

/// The python of the venv with helm-sdkpy, or `None` when the caller may skip. Without
/// `ELECTOR_HELM_PYTHON`, the venv is created (or reused) by `charts/tests/setup-venv.sh`, once
/// per test binary, so that `cargo test --workspace` needs no preparation.
fn helm_python() -> Option<PathBuf> {
    static VENV: std::sync::OnceLock<Result<PathBuf, String>> = std::sync::OnceLock::new();
    let ci = std::env::var("CI").is_ok_and(|v| v == "true");
    let python = match std::env::var_os("ELECTOR_HELM_PYTHON") {
        Some(python) => Ok(PathBuf::from(python)),
        None => VENV.get_or_init(setup_venv).clone(),
    };
    let reason = match python {
        Ok(python) if imports_helm_sdkpy(&python) => return Some(python),
        Ok(python) => format!(
            "{} cannot import helm_sdkpy (Helm's engine for the chart checks); create the venv \
             with charts/tests/setup-venv.sh or point ELECTOR_HELM_PYTHON at a python that has it",
            python.display()
        ),
        Err(error) => format!("the chart checks' venv could not be set up: {error}"),
    };
    if !ci && std::env::var("ELECTOR_SKIP_HELM").is_ok_and(|v| v == "1") {
        eprintln!("SKIPPED: {reason} (ELECTOR_SKIP_HELM=1)");
        return None;
    }
    panic!(
        "{reason}{}",
        if ci {
            " (CI=true: the chart checks never skip in CI)"
        } else {
            ""
        }
    );
}

fn imports_helm_sdkpy(python: &Path) -> bool {
    Command::new(python)
        .args(["-c", "import helm_sdkpy, yaml"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

/// Runs `charts/tests/setup-venv.sh` (progress on stderr) and returns the python it prints.
fn setup_venv() -> Result<PathBuf, String> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("charts/tests/setup-venv.sh");
    let output = Command::new(&script)
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("{}: {e}", script.display()))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    match stdout.lines().last() {
        Some(python) if output.status.success() => Ok(PathBuf::from(python.trim())),
        _ => Err(format!("{} failed ({})", script.display(), output.status)),
    }
}

/// Runs the chart checker with `args`, printing its output; panics when it fails. Returns
/// its standard output.
async fn check_chart(python: &Path, args: &[&str]) -> String {
    let output = tokio::process::Command::new(python)
        .arg(root("charts/tests/check_chart.py"))
        .args(args)
        .output()
        .await
        .expect("run check_chart.py");
    let stdout = String::from_utf8_lossy(&output.stdout);
    // Helm's client-go logs discovery misses while a CRD appears; they are noise.
    let stderr: String = String::from_utf8_lossy(&output.stderr)
        .lines()
        .filter(|line| !line.contains("memcache.go"))
        .map(|line| format!("{line}\n"))
        .collect();
    eprintln!("{stdout}{stderr}");
    assert!(
        output.status.success(),
        "check_chart.py {args:?} failed ({}):\n{stdout}{stderr}",
        output.status
    );
    stdout.into_owned()
}

#[tokio::test]
async fn chart_lints_clean() {
    let Some(python) = helm_python() else { return };
    check_chart(&python, &["lint"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chart_installs_and_its_operator_elects_a_leader() {
    let Some(python) = helm_python() else { return };
    if TestCluster::shared().is_none() {
        return;
    }
    consul_elector::install_crypto_provider();
    // A cluster of its own: the default release's operator watches every namespace, and its
    // uninstall hook deletes every election there; the other tests' elections are not its.
    let cluster = tokio::task::spawn_blocking(|| {
        TestCluster::start(testkit::cluster::ClusterOptions::default())
    })
    .await
    .expect("the cluster's start thread")
    .expect("a cluster of its own");
    let cluster = &cluster;
    let admin = cluster.client().await;
    let default_ns = cluster.namespace("chart-default").await;
    let features_ns = cluster.namespace("chart-features").await;
    let no_monitor_ns = cluster.namespace("chart-nosm").await;
    let watched = [
        cluster.namespace("chart-watched").await,
        cluster.namespace("chart-watched").await,
    ];
    let kubeconfig = cluster.kubeconfig_path().to_str().expect("UTF-8 path");
    check_chart(
        &python,
        &[
            "cluster",
            "--kubeconfig",
            kubeconfig,
            "--default-namespace",
            &default_ns,
            "--features-namespace",
            &features_ns,
            "--no-servicemonitor-namespace",
            &no_monitor_ns,
            "--watch-namespaces",
            &watched.join(","),
        ],
    )
    .await;

    // The default release: a ClusterRole, every namespace watched, no Consul settings, no
    // clusterName (so the operator reads kube-system's UID through the chart's rule).
    let web_ns = cluster.namespace("chart-web").await;
    let release = Release {
        namespace: default_ns.clone(),
        deployment: "ce-default-consul-elector".into(),
    };
    elect_with_installed_operator(cluster, &admin, &release, None, &web_ns).await;

    // Every feature on: Roles in the watched namespaces only, clusterName and Consul's allowed
    // addresses set; the Consul CA, client certificate and ACL token come from mounted Secrets
    // (the emulator requires the token).
    create_consul_secrets(&admin, &features_ns).await;
    let mut tokens = std::collections::HashMap::new();
    tokens.insert(
        CONSUL_TOKEN.to_owned(),
        AclPolicy {
            key_write: vec![String::new()],
            session_write: true,
            ..AclPolicy::default()
        },
    );
    let acl = AclConfig {
        tokens,
        anonymous: AclPolicy::default(),
    };
    let release = Release {
        namespace: features_ns.clone(),
        deployment: "ce-all-consul-elector".into(),
    };
    elect_with_installed_operator(cluster, &admin, &release, Some(acl), &watched[0]).await;

    for ns in [
        &default_ns,
        &features_ns,
        &no_monitor_ns,
        &web_ns,
        &watched[0],
        &watched[1],
    ] {
        let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(admin.clone());
        let _ = namespaces.delete(ns, &Default::default()).await;
    }
}

/// Every value at the edge of what the chart's schema admits (`EDGE_VALUES` in
/// `check_chart.py`) installs, and the operator accepts the command line and environment the
/// chart renders from it: parsed by its own parsers, the Lease timing validated as the
/// operator validates it at start. The values just past each edge are refused by the chart
/// (the cluster check's wrong values).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_edge_value_the_chart_admits_the_operator_accepts() {
    let Some(python) = helm_python() else { return };
    let Some(cluster) = TestCluster::shared() else {
        return;
    };
    let ns = cluster.namespace("chart-edges").await;
    let kubeconfig = cluster.kubeconfig_path().to_str().expect("UTF-8 path");
    let output = check_chart(
        &python,
        &["edges", "--kubeconfig", kubeconfig, "--namespace", &ns],
    )
    .await;
    let rendered: Vec<Value> = serde_json::from_str(output.lines().last().unwrap_or_default())
        .expect("the checker prints the rendered args and env as JSON");
    assert!(!rendered.is_empty(), "edge values were rendered");
    for edge in rendered {
        let values = &edge["values"];
        let args: Vec<String> = serde_json::from_value(edge["args"].clone()).expect("args");
        let env: BTreeMap<String, String> =
            serde_json::from_value(edge["env"].clone()).expect("env");
        let cli = consul_elector::cli::Cli::try_parse_from(
            std::iter::once("consul-elector".to_owned()).chain(args.iter().cloned()),
        )
        .unwrap_or_else(|error| panic!("{values}: the operator refuses {args:?}: {error}"));
        let consul_elector::cli::Command::Run(run) = cli.command else {
            panic!("{values}: the chart runs `consul-elector run`: {args:?}");
        };
        let lease = consul_elector::leadership::LeaseSettings {
            name: run.lease.lease_name.clone(),
            namespace: ns.clone(),
            identity: "edge".into(),
            duration: run.lease_duration,
            renew_deadline: run.lease_renew_deadline,
            wall_clock: consul_elector::wall_clock::WallClock::system(),
        };
        assert_eq!(lease.validate(), Ok(()), "{values}: the Lease timing");
        consul_elector::consul::ConsulSettings::from_env(|name| env.get(name).cloned())
            .unwrap_or_else(|error| panic!("{values}: the operator refuses {env:?}: {error}"));
    }
}

/// An installed release's operator Deployment.
struct Release {
    namespace: String,
    deployment: String,
}

/// Runs the operator as `release`'s Deployment would against a Consul emulator of its own (on
/// tokio's clock, enforcing `acl` when given), creates `examples/web.yaml` in `ns` with
/// simulated pods, and checks the election and the leader Service's endpoints.
async fn elect_with_installed_operator(
    cluster: &TestCluster,
    admin: &Client,
    release: &Release,
    acl: Option<AclConfig>,
    ns: &str,
) {
    eprintln!(
        "--- the operator of {}/{} elects a leader in {ns}",
        release.namespace, release.deployment
    );
    let emulator = Emulator::start(EmulatorConfig {
        clock: ClockMode::Tokio,
        acl,
        ..EmulatorConfig::default()
    })
    .await
    .expect("emulator");
    let sim = PodSimulator::start(admin.clone(), ns, SimulatorOptions::default()).await;
    let operator = OperatorProcess::start(cluster, admin, release, &emulator.url()).await;
    operator.wait_ready().await;

    let example = create_example(admin, ns).await;
    let leader = wait_for_leader(admin, ns, &example, &operator).await;
    let pods: Api<Pod> = Api::namespaced(admin.clone(), ns);
    let all: BTreeSet<String> = pod_names(&pods, &example.pod_selector)
        .await
        .into_iter()
        .collect();
    assert_eq!(all.len(), 3, "the example runs 3 replicas: {all:?}");
    let followers: BTreeSet<String> = all.iter().filter(|p| **p != leader).cloned().collect();
    wait_for_endpoints(
        admin,
        ns,
        &example.leader_service,
        &BTreeSet::from([leader.clone()]),
    )
    .await;
    wait_for_endpoints(admin, ns, &example.follower_service, &followers).await;
    eprintln!(
        "leader {leader}; Service {} routes only to it",
        example.leader_service
    );
    wait_for_event(admin, ns, &example.election, "LeaderElected").await;
    let log = std::fs::read_to_string(&operator.log).unwrap_or_default();
    assert!(
        !log.to_lowercase().contains("forbidden"),
        "the operator was refused something its RBAC should allow:\n{log}"
    );

    operator.stop().await;
    sim.stop().await;
    emulator.shutdown().await;
}

/// The names of the pods `selector` (a label selector) selects.
async fn pod_names(pods: &Api<Pod>, selector: &str) -> Vec<String> {
    pods.list(&ListParams::default().labels(selector))
        .await
        .expect("list pods")
        .items
        .iter()
        .map(ResourceExt::name_any)
        .collect()
}

/// What the test needs to know of `examples/web.yaml`.
struct Example {
    election: String,
    pod_selector: String,
    leader_service: String,
    follower_service: String,
}

/// Creates every object of `examples/web.yaml` in `ns` (resolving each kind through the API
/// server's discovery, as kubectl would).
async fn create_example(admin: &Client, ns: &str) -> Example {
    let path = root("examples/web.yaml");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{} is needed by this test: {e}", path.display()));
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text).expect("examples/web.yaml parses");
    let discovery = Discovery::new(admin.clone())
        .run()
        .await
        .expect("API discovery");
    let mut election = None;
    let mut pod_selector = None;
    let mut services = BTreeMap::new();
    for doc in docs.into_iter().filter(|d| !d.is_null()) {
        let object: DynamicObject = serde_json::from_value(doc.clone()).expect("object");
        let types = object.types.clone().expect("apiVersion and kind");
        let gvk = GroupVersionKind::try_from(&types).expect("GVK");
        let (resource, caps) = discovery
            .resolve_gvk(&gvk)
            .unwrap_or_else(|| panic!("the cluster does not serve {gvk:?}"));
        let api: Api<DynamicObject> = match caps.scope {
            Scope::Namespaced => Api::namespaced_with(admin.clone(), ns, &resource),
            Scope::Cluster => Api::all_with(admin.clone(), &resource),
        };
        api.create(&PostParams::default(), &object)
            .await
            .unwrap_or_else(|e| panic!("create {} {}: {e}", types.kind, object.name_any()));
        match types.kind.as_str() {
            "LeaderElection" => {
                let labels = doc["spec"]["selector"]["matchLabels"]
                    .as_object()
                    .expect("the example's election selects by matchLabels");
                pod_selector = Some(
                    labels
                        .iter()
                        .map(|(k, v)| format!("{k}={}", v.as_str().expect("label value")))
                        .collect::<Vec<_>>()
                        .join(","),
                );
                election = Some(object.name_any());
            }
            "Service" => {
                let service: Service = serde_json::from_value(doc).expect("Service");
                let role = service
                    .spec
                    .and_then(|s| s.selector)
                    .and_then(|s| s.get(ROLE).cloned());
                if let Some(role) = role {
                    services.insert(role, service.metadata.name.expect("name"));
                }
            }
            _ => {}
        }
    }
    Example {
        election: election.expect("examples/web.yaml has a LeaderElection"),
        pod_selector: pod_selector.expect("the election's selector"),
        leader_service: services
            .remove("leader")
            .expect("examples/web.yaml has a Service selecting the leader"),
        follower_service: services
            .remove("follower")
            .expect("examples/web.yaml has a Service selecting the followers"),
    }
}

/// Waits until exactly one pod is labelled leader and the election's status names it.
async fn wait_for_leader(
    admin: &Client,
    ns: &str,
    example: &Example,
    operator: &OperatorProcess,
) -> String {
    let pods: Api<Pod> = Api::namespaced(admin.clone(), ns);
    let elections: Api<DynamicObject> = Api::namespaced_with(
        admin.clone(),
        ns,
        &kube::api::ApiResource::from_gvk(&GroupVersionKind::gvk(
            "elector.dev",
            "v1alpha1",
            "LeaderElection",
        )),
    );
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let leaders = pod_names(&pods, &format!("{},{ROLE}=leader", example.pod_selector)).await;
        let status = elections
            .get(&example.election)
            .await
            .expect("get election")
            .data["status"]
            .clone();
        if let [leader] = leaders.as_slice()
            && status["leader"]["pod"].as_str() == Some(leader)
            && status["phase"].as_str() == Some("Elected")
        {
            return leader.clone();
        }
        if tokio::time::Instant::now() > deadline {
            panic!(
                "no leader within {PATIENCE:?}: leader pods {leaders:?}, status {status:#}\n\
                 --- operator log ---\n{}",
                operator.log_tail()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Waits until the EndpointSlices of Service `service` list exactly `pods`, all ready.
async fn wait_for_endpoints(admin: &Client, ns: &str, service: &str, pods: &BTreeSet<String>) {
    // discovery.k8s.io/v1beta1 on Kubernetes 1.20, v1 from 1.21: whichever the server prefers.
    let discovery = Discovery::new(admin.clone())
        .filter(&["discovery.k8s.io"])
        .run()
        .await
        .expect("discovery");
    let (resource, _) = discovery
        .get("discovery.k8s.io")
        .and_then(|group| group.recommended_kind("EndpointSlice"))
        .expect("the cluster serves EndpointSlices");
    let slices: Api<DynamicObject> = Api::namespaced_with(admin.clone(), ns, &resource);
    let selector = format!("kubernetes.io/service-name={service}");
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let mut found = BTreeSet::new();
        let mut all_ready = true;
        for slice in slices
            .list(&ListParams::default().labels(&selector))
            .await
            .expect("list EndpointSlices")
            .items
        {
            for endpoint in slice.data["endpoints"].as_array().into_iter().flatten() {
                if let Some(name) = endpoint["targetRef"]["name"].as_str() {
                    found.insert(name.to_owned());
                }
                all_ready &= endpoint["conditions"]["ready"].as_bool() == Some(true);
            }
        }
        if &found == pods && all_ready {
            return;
        }
        if tokio::time::Instant::now() > deadline {
            panic!(
                "EndpointSlices of Service {ns}/{service} list {found:?} (all ready: {all_ready}), \
                 want exactly {pods:?}"
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Waits until the operator published an event `reason` about election `name` (proving the
/// events rule of its RBAC).
async fn wait_for_event(admin: &Client, ns: &str, name: &str, reason: &str) {
    let events: Api<Event> = Api::namespaced(admin.clone(), ns);
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let found = events
            .list(&ListParams::default())
            .await
            .expect("list events")
            .items
            .iter()
            .any(|e| {
                e.reason.as_deref() == Some(reason)
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
            });
        if found {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no {reason} event about {ns}/{name}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Secrets the feature release's Deployment mounts: Consul's CA, a client certificate and the
/// ACL token (`check_chart.py`'s values name them).
async fn create_consul_secrets(admin: &Client, ns: &str) {
    let fixture = |name: &str| {
        std::fs::read_to_string(root(&format!("tests/fixtures/tls/{name}"))).expect("TLS fixture")
    };
    let secrets: Api<Secret> = Api::namespaced(admin.clone(), ns);
    for (name, data) in [
        ("consul-ca", vec![("ca.crt", fixture("ca.pem"))]),
        (
            "consul-client",
            vec![
                ("tls.crt", fixture("client.pem")),
                ("tls.key", fixture("client.key")),
            ],
        ),
        ("consul-token", vec![("token", format!("{CONSUL_TOKEN}\n"))]),
    ] {
        let secret = Secret {
            metadata: kube::api::ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            string_data: Some(data.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()),
            ..Default::default()
        };
        secrets
            .create(&PostParams::default(), &secret)
            .await
            .expect("create Consul Secret");
    }
}

/// The operator binary running on this machine the way the installed Deployment runs it.
struct OperatorProcess {
    child: tokio::process::Child,
    dir: PathBuf,
    log: PathBuf,
    admin_addr: SocketAddr,
}

impl OperatorProcess {
    /// Starts `consul-elector` with the container's args and env, the ServiceAccount's token
    /// (in a kubeconfig, as the pod would read it in-cluster), the Secret volumes written to a
    /// directory (env values under a mount path follow them), `CONSUL_HTTP_ADDR` set to
    /// `consul`, and the admin server moved to a free loopback port.
    async fn start(
        cluster: &TestCluster,
        admin: &Client,
        release: &Release,
        consul: &str,
    ) -> OperatorProcess {
        let deployments: Api<Deployment> = Api::namespaced(admin.clone(), &release.namespace);
        let deployment = deployments
            .get(&release.deployment)
            .await
            .expect("the installed Deployment");
        let pod = deployment
            .spec
            .and_then(|s| s.template.spec)
            .expect("pod spec");
        let container: Container = pod.containers.first().cloned().expect("a container");
        assert!(
            container.command.is_none(),
            "the chart runs the image's entrypoint"
        );
        let pod_name = format!("{}-on-this-machine", release.deployment);
        let dir = std::env::temp_dir().join(format!(
            "chart-install-{}-{}",
            std::process::id(),
            release.deployment
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("work dir");

        // The kubelet's part: Secret volumes become files, an emptyDir an empty directory.
        let secrets: Api<Secret> = Api::namespaced(admin.clone(), &release.namespace);
        let mut mounts: Vec<(String, PathBuf)> = Vec::new();
        for mount in container.volume_mounts.iter().flatten() {
            let volume = pod
                .volumes
                .iter()
                .flatten()
                .find(|v| v.name == mount.name)
                .expect("mounted volume exists");
            if volume.empty_dir.is_some() {
                let target = dir.join(&volume.name);
                std::fs::create_dir_all(&target).expect("volume dir");
                mounts.push((mount.mount_path.clone(), target));
                continue;
            }
            let source = volume
                .secret
                .as_ref()
                .unwrap_or_else(|| panic!("volume {} is not a Secret", volume.name));
            let secret_name = source.secret_name.clone().expect("secretName");
            let secret = secrets
                .get(&secret_name)
                .await
                .unwrap_or_else(|e| panic!("Secret {secret_name}: {e}"));
            let data = secret.data.unwrap_or_default();
            let target = dir.join(&volume.name);
            std::fs::create_dir_all(&target).expect("volume dir");
            for item in source.items.iter().flatten() {
                let bytes = &data
                    .get(&item.key)
                    .unwrap_or_else(|| panic!("Secret {secret_name} has no key {}", item.key))
                    .0;
                std::fs::write(target.join(&item.path), bytes).expect("write Secret file");
            }
            mounts.push((mount.mount_path.clone(), target));
        }

        let mut env: Vec<(String, String)> = Vec::new();
        for var in container.env.iter().flatten() {
            let value = match (&var.value, &var.value_from) {
                (Some(value), None) => value.clone(),
                (None, Some(from)) => {
                    match from.field_ref.as_ref().map(|f| f.field_path.as_str()) {
                        Some("metadata.name") => pod_name.clone(),
                        Some("metadata.namespace") => release.namespace.clone(),
                        _ => panic!("env {} comes from {from:?}: not emulated here", var.name),
                    }
                }
                _ => String::new(),
            };
            let value = mounts
                .iter()
                .find_map(|(path, target)| {
                    value
                        .strip_prefix(&format!("{path}/"))
                        .map(|rest| target.join(rest).display().to_string())
                })
                .unwrap_or(value);
            env.push((var.name.clone(), value));
        }
        env.retain(|(name, _)| name != "CONSUL_HTTP_ADDR");
        env.push(("CONSUL_HTTP_ADDR".into(), consul.to_owned()));

        let admin_addr = free_port();
        let mut args = container.args.clone().unwrap_or_default();
        let metrics = args
            .iter()
            .position(|a| a.starts_with("--metrics-addr="))
            .expect("the chart sets --metrics-addr");
        args[metrics] = format!("--metrics-addr={admin_addr}");

        // The pod's API credentials: its ServiceAccount's token, nothing of the admin's.
        let account = pod
            .service_account_name
            .clone()
            .expect("serviceAccountName");
        let token = cluster
            .service_account_token(&release.namespace, &account)
            .await;
        let kubeconfig = dir.join("kubeconfig");
        let mut config: Value = serde_saphyr::from_str(
            &std::fs::read_to_string(cluster.kubeconfig_path()).expect("kubeconfig"),
        )
        .expect("kubeconfig parses");
        for user in config["users"].as_array_mut().expect("users") {
            user["user"] = serde_json::json!({ "token": token });
        }
        std::fs::write(&kubeconfig, config.to_string()).expect("write kubeconfig");

        let log = dir.join("operator.log");
        let log_file = std::fs::File::create(&log).expect("log file");
        eprintln!("operator: consul-elector {}", args.join(" "));
        let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_consul-elector"))
            .args(&args)
            .env_clear()
            .envs(env)
            .env("KUBECONFIG", &kubeconfig)
            .env("HOME", &dir)
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().expect("log file"))
            .stderr(log_file)
            .kill_on_drop(true)
            .spawn()
            .expect("start consul-elector");
        OperatorProcess {
            child,
            dir,
            log,
            admin_addr,
        }
    }

    /// Waits until `/readyz` answers 200 (the caches are synced).
    async fn wait_ready(&self) {
        let deadline = tokio::time::Instant::now() + PATIENCE;
        loop {
            if http_status(self.admin_addr, "/readyz").await == Some(200) {
                assert_eq!(
                    http_status(self.admin_addr, "/livez").await,
                    Some(200),
                    "/livez"
                );
                return;
            }
            if tokio::time::Instant::now() > deadline {
                panic!(
                    "the operator is not ready within {PATIENCE:?}\n--- operator log ---\n{}",
                    self.log_tail()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }

    async fn stop(mut self) {
        if let Ok(Some(status)) = self.child.try_wait() {
            panic!(
                "the operator exited early ({status})\n--- operator log ---\n{}",
                self.log_tail()
            );
        }
        let _ = self.child.kill().await;
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn free_port() -> SocketAddr {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
}

/// The status code of `GET path` on `addr`, or `None` when nothing answers.
async fn http_status(addr: SocketAddr, path: &str) -> Option<u16> {
    let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await.ok()?;
    String::from_utf8_lossy(&response)
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// The chart as it stood before the last change of the LeaderElection CRD (`spec.paused` and
/// `spec.observe.valueFormat`), packaged as Helm packages a release: what a user upgrades from.
const PREVIOUS_CHART: &str = "tests/fixtures/charts/consul-elector-0.1.0-b233d12.tgz";

/// An upgrade from the previous chart, as README's "Upgrading the CRD" says, on the oldest
/// Kubernetes the chart claims (1.20), in a cluster of its own (the CRD is cluster-wide):
/// `helm upgrade` alone keeps the old CRD, so the API server drops a new field
/// (`spec.paused`); `kubectl replace --validate=false -f charts/consul-elector/crds/` then the
/// upgrade installs the new schema, and the election created under the old one is kept and
/// reads as the current type.
#[tokio::test]
async fn the_chart_upgrades_from_the_previous_version_as_documented() {
    let Some(python) = helm_python() else { return };
    if TestCluster::shared().is_none() {
        return;
    }
    let readme = std::fs::read_to_string(root("README.md")).expect("README.md");
    assert!(
        readme.contains("kubectl replace -f charts/consul-elector/crds/     # on Kubernetes < 1.25 add --validate=false")
            && readme.contains(
                "helm upgrade <release> charts/consul-elector -n <namespace> --reset-then-reuse-values"
            ),
        "README's upgrade commands are the ones this test runs"
    );
    let (cluster, admin) = own_cluster().await;
    let kubeconfig = cluster.kubeconfig_path().to_string_lossy().into_owned();
    let ns = "upgrade";
    let release = "ce-upgrade";
    let release_args = [
        "--kubeconfig",
        &kubeconfig,
        "--namespace",
        ns,
        "--release",
        release,
    ];
    let (previous, values) = (root(PREVIOUS_CHART), Values::new("{}"));
    let install = [&["install"], &release_args[..], &values.arg()[..]].concat();
    check_chart(
        &python,
        &[&install[..], &["--chart", path_str(&previous)]].concat(),
    )
    .await;
    let has_paused = || async { crd_has_paused(&the_crd(&admin).await) };
    assert!(
        !has_paused().await,
        "the previous chart's CRD has no spec.paused"
    );

    // An election under the old schema.
    let elections = election_api(&admin, ns);
    elections
        .create(&PostParams::default(), &election_object("kept", false))
        .await
        .expect("create an election under the previous CRD");

    // helm upgrade alone: the CRD stays the previous one, and spec.paused is dropped.
    check_chart(&python, &[&["upgrade"], &release_args[..]].concat()).await;
    assert!(!has_paused().await, "helm upgrade never touches crds/");
    let pruned = elections
        .create(&PostParams::default(), &election_object("pruned", true))
        .await
        .expect("create an election with spec.paused");
    assert_eq!(
        pruned.data["spec"].get("paused"),
        None,
        "the previous CRD drops the new field: {:?}",
        pruned.data["spec"]
    );

    // The documented sequence: replace the CRD, then upgrade.
    let output = Command::new("kubectl")
        .args([
            "--kubeconfig",
            &kubeconfig,
            "replace",
            "--validate=false",
            "-f",
        ])
        .arg(root("charts/consul-elector/crds/"))
        .output()
        .expect("run kubectl");
    assert!(
        output.status.success(),
        "kubectl replace: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let upgraded = check_chart(&python, &[&["upgrade"], &release_args[..]].concat()).await;
    assert!(
        upgraded.contains("Job/ce-upgrade-consul-elector-uninstall"),
        "the values reused from the previous chart, which had no uninstallHook, still give the \
         pre-delete hook: {upgraded}"
    );
    assert!(has_paused().await, "the replaced CRD has spec.paused");
    let paused = elections
        .create(&PostParams::default(), &election_object("paused", true))
        .await
        .expect("create an election with spec.paused");
    assert_eq!(
        paused.data["spec"]["paused"], true,
        "{:?}",
        paused.data["spec"]
    );
    // The election created under the previous CRD reads as the current type, unchanged.
    let typed: Api<consul_elector::crd::LeaderElection> = Api::namespaced(admin.clone(), ns);
    let kept = typed
        .get("kept")
        .await
        .expect("the kept election as the current type");
    assert_eq!(
        kept.spec
            .selector
            .match_labels
            .get("app")
            .map(String::as_str),
        Some("web")
    );
    drop(cluster);
}

/// The LeaderElection CRD as the API server holds it.
async fn the_crd(
    admin: &Client,
) -> k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition {
    Api::all(admin.clone())
        .get(consul_elector::crd::CRD_NAME)
        .await
        .expect("the CRD")
}

/// Whether `crd` has `spec.paused`, which the previous chart's CRD lacks.
fn crd_has_paused(
    crd: &k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
) -> bool {
    serde_json::to_string(&crd.spec)
        .expect("JSON")
        .contains("\"paused\"")
}

/// A test cluster of its own (the CRD is cluster-wide), without a controller-manager, and its
/// admin client.
async fn own_cluster() -> (TestCluster, Client) {
    consul_elector::install_crypto_provider();
    let cluster = tokio::task::spawn_blocking(|| {
        TestCluster::start(testkit::cluster::ClusterOptions {
            controller_manager: false,
            ..Default::default()
        })
    })
    .await
    .expect("the cluster's start thread")
    .expect("a cluster of its own");
    let admin = cluster.client().await;
    (cluster, admin)
}

/// A values file for the chart checker, removed when dropped.
struct Values(PathBuf);

impl Values {
    fn new(json: &str) -> Self {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path =
            std::env::temp_dir().join(format!("chart-values-{}-{n}.json", std::process::id()));
        std::fs::write(&path, json).expect("a values file");
        Values(path)
    }

    /// `--values <file>`.
    fn arg(&self) -> [&str; 2] {
        ["--values", path_str(&self.0)]
    }
}

impl Drop for Values {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn path_str(path: &Path) -> &str {
    path.to_str().expect("a UTF-8 path")
}

/// `crds.enabled`, the GitOps way to upgrade the CRD (values.yaml, README "Upgrading the CRD"):
/// an install of the previous chart created the CRD from its `crds/`; `helm upgrade
/// --take-ownership` with `crds.enabled` adopts it and upgrades it with the chart (the new
/// field is there, and Helm owns the CRD); `helm uninstall` keeps it and every election
/// (`crds.keep`); a new install adopts it, and with `crds.keep: false` its uninstall deletes it.
#[tokio::test]
async fn with_crds_enabled_the_chart_upgrades_the_crd_and_uninstall_keeps_it() {
    let Some(python) = helm_python() else { return };
    if TestCluster::shared().is_none() {
        return;
    }
    let (cluster, admin) = own_cluster().await;
    let kubeconfig = cluster.kubeconfig_path().to_string_lossy().into_owned();
    let ns = "gitops";
    let release_args = |release: &'static str| {
        [
            "--kubeconfig".to_owned(),
            kubeconfig.clone(),
            "--namespace".to_owned(),
            ns.to_owned(),
            "--release".to_owned(),
            release.to_owned(),
        ]
    };
    let run = |command: &'static str, release: &'static str, extra: Vec<&str>| {
        let mut args = vec![command.to_owned()];
        args.extend(release_args(release));
        args.extend(extra.into_iter().map(str::to_owned));
        let python = python.clone();
        async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            check_chart(&python, &args).await
        }
    };
    // No operator (and below no uninstall hook): this is about the CRD.
    let quiet = Values::new(r#"{"replicaCount": 0}"#);
    let previous = root(PREVIOUS_CHART);
    run(
        "install",
        "ce-gitops",
        [&quiet.arg()[..], &["--chart", path_str(&previous)]].concat(),
    )
    .await;
    assert!(!crd_has_paused(&the_crd(&admin).await));
    let elections = election_api(&admin, ns);
    elections
        .create(&PostParams::default(), &election_object("kept", false))
        .await
        .expect("create an election under the previous CRD");

    let enabled =
        Values::new(r#"{"crds": {"enabled": true}, "uninstallHook": {"enabled": false}}"#);
    run(
        "upgrade",
        "ce-gitops",
        [&enabled.arg()[..], &["--take-ownership"]].concat(),
    )
    .await;
    let crd = the_crd(&admin).await;
    assert!(crd_has_paused(&crd), "the chart upgraded the CRD");
    assert_eq!(
        crd.labels()
            .get("app.kubernetes.io/managed-by")
            .map(String::as_str),
        Some("Helm")
    );
    let annotations = crd.annotations();
    assert_eq!(
        annotations
            .get("meta.helm.sh/release-name")
            .map(String::as_str),
        Some("ce-gitops"),
        "the release owns the CRD: {annotations:?}"
    );
    assert_eq!(
        annotations
            .get("helm.sh/resource-policy")
            .map(String::as_str),
        Some("keep")
    );
    elections
        .create(&PostParams::default(), &election_object("paused", true))
        .await
        .expect("create an election with spec.paused");

    run("uninstall", "ce-gitops", vec![]).await;
    let crd = the_crd(&admin).await;
    assert!(
        crd.metadata.deletion_timestamp.is_none() && crd_has_paused(&crd),
        "helm uninstall keeps the CRD"
    );
    let names: BTreeSet<String> = elections
        .list(&ListParams::default())
        .await
        .expect("list the elections")
        .items
        .iter()
        .map(ResourceExt::name_any)
        .collect();
    assert_eq!(names, BTreeSet::from(["kept".into(), "paused".into()]));

    // A new install adopts the kept CRD; turned off, crds.keep lets the uninstall delete it.
    let again = Values::new(
        r#"{"replicaCount": 0, "uninstallHook": {"enabled": false}, "crds": {"enabled": true}}"#,
    );
    run(
        "install",
        "ce-again",
        [&again.arg()[..], &["--take-ownership"]].concat(),
    )
    .await;
    let unkept = Values::new(r#"{"crds": {"keep": false}}"#);
    run("upgrade", "ce-again", unkept.arg().to_vec()).await;
    let annotations = the_crd(&admin).await.annotations().clone();
    assert!(
        !annotations.contains_key("helm.sh/resource-policy")
            && annotations
                .get("meta.helm.sh/release-name")
                .map(String::as_str)
                == Some("ce-again"),
        "{annotations:?}"
    );
    run("uninstall", "ce-again", vec![]).await;
    let crds: Api<
        k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
    > = Api::all(admin.clone());
    let gone = tokio::time::timeout(PATIENCE, async {
        while crds
            .get_opt(consul_elector::crd::CRD_NAME)
            .await
            .expect("get the CRD")
            .is_some()
        {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await;
    assert!(
        gone.is_ok(),
        "without crds.keep the uninstall deletes the CRD"
    );
    drop(cluster);
}

/// LeaderElections through the dynamic API (so that a field the server drops shows).
fn election_api(admin: &Client, ns: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("elector.dev", "v1alpha1", "LeaderElection");
    Api::namespaced_with(admin.clone(), ns, &kube::api::ApiResource::from_gvk(&gvk))
}

/// A LeaderElection `name` selecting `app=web`, with `spec.paused: true` when `paused`.
fn election_object(name: &str, paused: bool) -> DynamicObject {
    let mut spec = serde_json::json!({"selector": {"matchLabels": {"app": "web"}}});
    if paused {
        spec["paused"] = Value::Bool(true);
    }
    serde_json::from_value(serde_json::json!({
        "apiVersion": "elector.dev/v1alpha1",
        "kind": "LeaderElection",
        "metadata": {"name": name},
        "spec": spec,
    }))
    .expect("a LeaderElection")
}
