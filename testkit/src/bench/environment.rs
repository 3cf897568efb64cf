//! What every scenario runs against, started once per run: the operator binary, the test
//! cluster, Consul (the emulator on the real clock, or a real dev agent with `--consul real`),
//! and the CRD the binary prints.

use std::collections::BTreeMap;

use kube::Client;

use super::proc_stats::{self, ProcStats};
use crate::cluster::TestCluster;
use crate::sandbox::SandboxError;
use crate::sandbox::consul_backend::{ConsulBackend, ConsulKind};
use crate::sandbox::objects;
use crate::sandbox::operator_process::{
    OperatorBinary, OperatorConfig, OperatorProcess, own_profile,
};
use crate::sandbox::setup::{LogDir, blocking, start_cluster_and_consul};

/// Prefix of the per-run log directories under the system's temporary directory.
const LOG_DIR_PREFIX: &str = "consul-elector-bench-";
/// Up to this many namespaces the operator watches them by name; beyond, every namespace
/// (only bench namespaces hold elections, one scenario's at a time). One: with several
/// names the operator runs one reflector per namespace into one store, and each one's
/// initial list replaces the others' objects, so it never sees them all.
const MAX_LISTED_NAMESPACES: usize = 1;

/// The running environment. Fields drop in order: the cluster last.
pub(crate) struct Environment {
    /// An admin client of the test cluster.
    pub(crate) client: Client,
    /// Consul.
    pub(crate) consul: ConsulBackend,
    /// The operator executable.
    binary: OperatorBinary,
    /// This run's logs.
    pub(crate) logs: LogDir,
    /// Kubernetes.
    pub(crate) cluster: TestCluster,
}

impl Environment {
    /// Builds the operator, starts the cluster and Consul and installs the CRD, saying so on
    /// stderr.
    pub(crate) async fn set_up(consul: ConsulKind) -> Result<Self, SandboxError> {
        let consul = consul.resolve()?;
        eprintln!(
            "bench: building the operator (cargo build -p consul-elector, profile {})",
            own_profile()
        );
        let binary = blocking("building the operator", OperatorBinary::build).await?;
        let logs = LogDir::create(LOG_DIR_PREFIX)?;
        eprintln!(
            "bench: starting the test cluster; logs in {}",
            logs.path().display()
        );
        let (cluster, client, consul) = start_cluster_and_consul(&logs, consul).await?;
        eprintln!("bench: {}", consul.describe());
        objects::install_crd(&client, &binary.crd_yaml()?).await?;
        Ok(Self {
            client,
            consul,
            binary,
            logs,
            cluster,
        })
    }

    /// Starts the operator for `namespaces` (by name when one, else every namespace), its
    /// log `operator-<scenario>.log`.
    pub(crate) fn start_operator(
        &self,
        scenario: &str,
        namespaces: &[String],
    ) -> Result<OperatorProcess, SandboxError> {
        let namespaces = if namespaces.len() <= MAX_LISTED_NAMESPACES {
            namespaces.to_vec()
        } else {
            Vec::new()
        };
        let operator = OperatorProcess::start(
            self.binary.clone(),
            OperatorConfig {
                kubeconfig: self.cluster.kubeconfig_path().to_path_buf(),
                consul_url: self.consul.url(),
                namespaces,
                log: self.logs.path().join(format!("operator-{scenario}.log")),
            },
        )?;
        eprintln!("bench: {}", operator.describe());
        Ok(operator)
    }

    /// CPU seconds used so far by each cluster process (etcd, kube-apiserver,
    /// kube-controller-manager) and by the Consul server when it is a process of its own
    /// (`consul server`, a real one; the emulator runs inside the driver).
    pub(crate) fn cluster_cpu(&self) -> BTreeMap<&'static str, f64> {
        self.cluster
            .process_ids()
            .into_iter()
            .chain(self.consul.server_pid().map(|pid| ("consul server", pid)))
            .filter_map(|(name, pid)| Some((name, proc_stats::read(pid)?.cpu_seconds)))
            .collect()
    }

    /// CPU and memory of the Consul server's process; `None` for the emulator.
    pub(crate) fn consul_server(&self) -> Option<ProcStats> {
        proc_stats::read(self.consul.server_pid()?)
    }

    /// Stops Consul and the cluster.
    pub(crate) async fn shut_down(self) {
        self.consul.shut_down().await;
        drop(self.cluster);
    }
}
