//! Everything the scenario runs against: the operator binary, the test cluster, Consul (the
//! emulator or a real one), the pod simulator with the Deployment, the watch recorder, the observer, and the
//! operator process; and their teardown.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use kube::Client;

use super::consul_backend::{ConsulBackend, ConsulKind, ConsulPlan};
use super::error::SandboxError;
use super::objects::{self, APP, NAMESPACE, REPLICAS};
use super::observer::Observer;
use super::operator_process::{OperatorBinary, OperatorConfig, OperatorProcess};
use super::timeline::{Style, Timeline};
use crate::cluster::{ClusterOptions, TestCluster};
use crate::pods::{self, PodSimulator, SimulatorOptions};
use crate::recorder::WatchRecorder;

/// Prefix of the per-run log directories under the system's temporary directory.
const LOG_DIR_PREFIX: &str = "consul-elector-sandbox-";
/// How long the Deployment's pods may take to become Ready.
const DEPLOYMENT_TIMEOUT: Duration = Duration::from_secs(60);
/// The grace period the simulated kubelet honours for a deleted pod.
const MAX_GRACE: Duration = Duration::from_secs(1);

/// Where this run's logs go: the operator's log and the cluster's process logs. Kept after the
/// run so they can be read; the next run removes the directories of runs that ended.
#[derive(Debug)]
pub(crate) struct LogDir {
    path: PathBuf,
}

impl LogDir {
    /// Creates `<tmp>/<prefix><pid>`, removing the directories of ended runs with that prefix.
    pub(crate) fn create(prefix: &str) -> Result<Self, SandboxError> {
        let root = std::env::temp_dir();
        remove_finished_runs(&root, prefix);
        let path = root.join(format!("{prefix}{}", std::process::id()));
        std::fs::create_dir_all(&path)
            .map_err(SandboxError::io(format!("creating {}", path.display())))?;
        Ok(Self { path })
    }

    /// The directory.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// The operator's log file.
    pub(crate) fn operator_log(&self) -> PathBuf {
        self.path.join("operator.log")
    }
}

/// Removes the log directories `<prefix><pid>` under `root` of runs whose process is gone.
fn remove_finished_runs(root: &Path, prefix: &str) {
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let pid = name
            .to_str()
            .and_then(|name| name.strip_prefix(prefix))
            .and_then(|pid| pid.parse::<u32>().ok());
        if pid.is_some_and(|pid| !Path::new(&format!("/proc/{pid}")).exists()) {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// Runs a blocking start-up step on tokio's blocking pool.
pub(crate) async fn blocking<T: Send + 'static>(
    what: &str,
    step: impl FnOnce() -> Result<T, SandboxError> + Send + 'static,
) -> Result<T, SandboxError> {
    tokio::task::spawn_blocking(step)
        .await
        .map_err(|error| SandboxError::Setup(format!("{what} failed: {error}")))?
}

/// Starts the test cluster (logging into `logs`), an admin client of it, and the Consul
/// `consul` names: what the sandbox and the benchmark driver run against.
pub(crate) async fn start_cluster_and_consul(
    logs: &LogDir,
    consul: ConsulPlan,
) -> Result<(TestCluster, Client, ConsulBackend), SandboxError> {
    let options = ClusterOptions {
        log_dir: Some(logs.path().to_path_buf()),
        ..ClusterOptions::default()
    };
    let cluster = blocking("starting the cluster", move || {
        TestCluster::start(options).map_err(SandboxError::from)
    })
    .await?;
    let client = Client::try_from(cluster.kube_config())
        .map_err(objects::api_error("building a client for the test cluster"))?;
    let consul = ConsulBackend::start(consul).await?;
    Ok((cluster, client, consul))
}

/// The running sandbox. Fields drop in order: watches first, the cluster last.
pub(crate) struct Sandbox {
    /// How to print.
    pub(crate) style: Style,
    /// An admin client of the test cluster.
    pub(crate) client: Client,
    /// The pods and the election, printed as the timeline.
    pub(crate) observer: Observer,
    /// Every pod version, for the safety check.
    pub(crate) recorder: WatchRecorder,
    /// The kubelet of the Deployment's pods.
    pub(crate) simulator: PodSimulator,
    /// The operator child process.
    pub(crate) operator: OperatorProcess,
    /// Consul.
    pub(crate) consul: ConsulBackend,
    /// This run's logs.
    pub(crate) logs: LogDir,
    /// Kubernetes.
    pub(crate) cluster: TestCluster,
}

impl Sandbox {
    /// Builds and starts everything, printing what it does; returns once the operator runs and
    /// the first timeline row is printed.
    pub(crate) async fn set_up(style: Style, consul: ConsulKind) -> Result<Self, SandboxError> {
        let consul = consul.resolve()?;
        println!("{}", style.bold("consul-elector sandbox"));
        let which = match consul {
            ConsulPlan::Emulator => "an emulated Consul",
            ConsulPlan::Real(_) => "a real Consul (consul agent -dev)",
        };
        println!("The real operator binary against a real kube-apiserver and {which}.\n");
        let step = |text: &str| println!("{} {text}", style.bold("•"));
        step("building the operator: cargo build -p consul-elector --bin consul-elector");
        let binary = blocking("building the operator", OperatorBinary::build).await?;
        let logs = LogDir::create(LOG_DIR_PREFIX)?;
        step(
            "starting the Kubernetes test cluster (the first run on a machine builds \
             kube-apiserver from Debian's sources: several minutes)",
        );
        let (cluster, client, consul) = start_cluster_and_consul(&logs, consul).await?;
        let start = Instant::now();
        step(&consul.describe());

        objects::install_crd(&client, &binary.crd_yaml()?).await?;
        step("CRD leaderelections.elector.dev created from `consul-elector crd`");
        objects::create_namespace(&client, NAMESPACE).await?;
        let simulator = PodSimulator::start(
            client.clone(),
            NAMESPACE,
            SimulatorOptions {
                max_grace: Some(MAX_GRACE),
                ..SimulatorOptions::default()
            },
        )
        .await;
        let recorder = WatchRecorder::start(client.clone(), NAMESPACE)
            .await
            .map_err(|error| SandboxError::Setup(format!("the pod recorder: {error}")))?;
        let replicas = i32::try_from(REPLICAS).unwrap_or(i32::MAX);
        pods::create_deployment(&client, NAMESPACE, APP, replicas, objects::app_labels()).await?;
        pods::wait_deployment_ready(&client, NAMESPACE, APP, DEPLOYMENT_TIMEOUT).await?;
        step(&format!(
            "namespace {NAMESPACE}: Deployment {APP} with {REPLICAS} Ready pods (simulated \
             kubelet)"
        ));

        let operator = OperatorProcess::start(
            binary,
            OperatorConfig {
                kubeconfig: cluster.kubeconfig_path().to_path_buf(),
                consul_url: consul.url(),
                namespaces: vec![NAMESPACE.to_owned()],
                log: logs.operator_log(),
            },
        )?;
        step(&format!("operator started: {}", operator.describe()));
        println!("  its log: {}", logs.operator_log().display());

        let timeline = Timeline::new(style, start);
        println!("\n{}", timeline.header());
        let observer = Observer::start(client.clone(), timeline, "start").await?;
        Ok(Self {
            style,
            client,
            observer,
            recorder,
            simulator,
            operator,
            consul,
            logs,
            cluster,
        })
    }

    /// For `--keep`: how to look at the running sandbox.
    pub(crate) fn print_access(&self) {
        self.observer.set_step("keep (Ctrl-C)");
        let kubeconfig = self.cluster.kubeconfig_path().display();
        let key = format!("elector/{NAMESPACE}/{APP}/leader");
        println!(
            "\n{}",
            self.style
                .bold("Still running (--keep); Ctrl-C stops everything.")
        );
        println!("  kubeconfig    {kubeconfig}");
        println!("  Consul        {}", self.consul.url());
        println!(
            "  operator      http://{}/metrics",
            self.operator.metrics_addr()
        );
        println!("  try:");
        println!(
            "    kubectl --kubeconfig {kubeconfig} get le,pods -n {NAMESPACE} -L elector.dev/role"
        );
        println!(
            "    kubectl --kubeconfig {kubeconfig} delete pod -n {NAMESPACE} -l elector.dev/role=leader"
        );
        println!("    curl -s {}/v1/kv/{key}", self.consul.url());
        println!("  the timeline below goes on with every change:");
    }

    /// Stops the watches, the simulator, the operator, Consul and the cluster.
    pub(crate) async fn shut_down(self) {
        let Self {
            observer,
            recorder,
            simulator,
            mut operator,
            consul,
            cluster,
            ..
        } = self;
        observer.stop().await;
        recorder.stop().await;
        simulator.stop().await;
        operator.kill();
        consul.shut_down().await;
        drop(cluster);
    }
}
