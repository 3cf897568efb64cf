//! The environment of the real-node e2e suite: the test cluster with two real nodes (the second
//! a tainted spare that tests may fail), the image archives imported, the Helm chart installed
//! as a user installs it (the operator as two containers built from the repository's
//! `Dockerfile`, the dev Consul as a container), and a command run against it (the e2e suite:
//! `cargo test --test e2e -- --ignored`), with the environment variables the suite reads. What
//! `make demo` and `make e2e` are on kind.

mod chart;
mod error;
mod options;

use std::path::PathBuf;
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use kube::Api;

pub use chart::RELEASE;
pub use error::SuiteError;
pub use options::SuiteOptions;

use crate::cluster::{ClusterOptions, TestCluster};
use crate::node::{NodeOptions, NodesOptions, RealNodes};

/// The node the suite's pods run on.
pub const NODE: &str = "node-1";
/// The spare node: tainted with [`SPARE_TAINT`], so that only pods tolerating it run there, and
/// a test may fail it (stop its kubelet) without touching the operator or the dev Consul.
pub const SPARE_NODE: &str = "node-2";
/// The spare node's taint.
pub const SPARE_TAINT: &str = "e2e.elector.dev/spare=true:NoSchedule";
/// How long the installed operator and dev Consul get to become available.
const INSTALL_READY: Duration = Duration::from_secs(180);

/// Every `*.tar` file in `dir`, sorted.
pub fn archives_in(dir: &std::path::Path) -> std::io::Result<Vec<PathBuf>> {
    let mut archives: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "tar"))
        .collect();
    archives.sort();
    Ok(archives)
}

/// Starts the cluster and the node, installs the chart, waits until the operator and the dev
/// Consul are available, runs `command` against it and returns its exit status. Everything is
/// torn down afterwards, whatever the outcome.
pub async fn run(options: SuiteOptions, command: &[String]) -> Result<ExitStatus, SuiteError> {
    let address = crate::node::host_address()?;
    let log_dir = options.log_dir.clone();
    let cluster = tokio::task::spawn_blocking(move || {
        TestCluster::start(ClusterOptions {
            node_address: Some(address),
            log_dir: Some(log_dir),
            ..ClusterOptions::default()
        })
    })
    .await
    .map_err(|e| SuiteError::Chart(format!("the cluster's start thread: {e}")))??;
    let nodes = RealNodes::start(
        &cluster,
        NodesOptions {
            nodes: vec![
                NodeOptions {
                    name: NODE.into(),
                    taints: Vec::new(),
                },
                NodeOptions {
                    name: SPARE_NODE.into(),
                    taints: vec![SPARE_TAINT.into()],
                },
            ],
            images: options.images.clone(),
            log_dir: Some(options.log_dir.clone()),
            proxy_min_sync_period: options.proxy_min_sync_period,
        },
    )
    .await?;
    let begun = Instant::now();
    chart::install(&cluster, &options)?;
    let client = cluster.client().await;
    let deployments: Api<Deployment> = Api::namespaced(client, RELEASE);
    for name in [RELEASE.to_owned(), format!("{RELEASE}-consul-dev")] {
        chart::wait_available(&deployments, &name, INSTALL_READY).await?;
    }
    eprintln!(
        "node-e2e: chart installed and available in {:.1?}; running {command:?}",
        begun.elapsed()
    );
    let status = run_command(&cluster, &nodes, &options, command).await;
    drop(nodes);
    drop(cluster);
    status
}

/// Runs `command` with the suite's environment: the cluster's kubeconfig, `ELECTOR_E2E=1`, and
/// what only real nodes offer: ClusterIPs routed on this host, the node's containerd socket,
/// the spare node with its taint and its kubelet's process id, and how to reinstall the chart
/// (the helm python, the release, its values file).
async fn run_command(
    cluster: &TestCluster,
    nodes: &RealNodes,
    options: &SuiteOptions,
    command: &[String],
) -> Result<ExitStatus, SuiteError> {
    let Some((program, args)) = command.split_first() else {
        return Err(SuiteError::Chart("no command to run".into()));
    };
    let (Some(node), Some(spare)) = (nodes.nodes().first(), nodes.nodes().get(1)) else {
        return Err(SuiteError::Chart("the suite needs its two nodes".into()));
    };
    let mut child = tokio::process::Command::new(program);
    child
        .args(args)
        .env("KUBECONFIG", cluster.kubeconfig_path())
        .env("ELECTOR_E2E", "1")
        .env("ELECTOR_E2E_NAMESPACE", RELEASE)
        .env("ELECTOR_E2E_RELEASE", RELEASE)
        .env("ELECTOR_E2E_CHART_VALUES", chart::values_file(options))
        .env("ELECTOR_HELM_PYTHON", chart::helm_python()?)
        .env("ELECTOR_E2E_NODE", node.name())
        .env("ELECTOR_E2E_CONTAINERD", node.containerd_socket())
        .env("ELECTOR_E2E_SPARE_NODE", spare.name())
        .env("ELECTOR_E2E_SPARE_TAINT", SPARE_TAINT)
        .env("ELECTOR_E2E_SPARE_KUBELET", spare.kubelet_pid().to_string())
        .kill_on_drop(true);
    child.status().await.map_err(|source| SuiteError::Command {
        command: program.clone(),
        source,
    })
}
