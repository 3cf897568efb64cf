//! A real Kubernetes test cluster: Debian's etcd, kube-apiserver and kube-controller-manager
//! v1.20.2 (built from Debian's source package by `testkit/scripts/build-kube.sh`) on loopback.
//!
//! Every test binary shares one cluster ([`TestCluster::shared`]); each test works in its own
//! namespace ([`with_namespace`]). There is no kubelet and no scheduler: pods never run unless
//! the pod simulator plays the kubelet. Deployments, ReplicaSets, EndpointSlices, garbage
//! collection, namespace deletion, service-account tokens and ClusterRole aggregation are the
//! real controllers.

pub mod audit;
pub(crate) mod binaries;
mod credentials;
mod kubeconfig;
mod launch;
mod namespace;
pub(crate) mod ports;
pub(crate) mod processes;
pub(crate) mod readiness;
mod service_account;
pub(crate) mod workdir;

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use secrecy::SecretString;

pub use binaries::BIN_DIR_ENV;
pub use namespace::{TEST_NAMESPACE_LABEL, with_namespace};
pub(crate) use processes::spawn_tied;

use binaries::Binaries;
use processes::ManagedProcess;
use workdir::ClusterDir;

/// Setting this variable to `1` makes [`TestCluster::shared`] return `None`: tests that need
/// the cluster then skip. Nothing else skips them.
pub const SKIP_ENV: &str = "ELECTOR_SKIP_CLUSTER";

/// How long a process gets to exit after SIGTERM when a cluster is dropped.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// How to start a [`TestCluster`].
#[derive(Debug, Clone)]
pub struct ClusterOptions {
    /// Build kube-apiserver and kube-controller-manager first if this machine never built them
    /// (about 5 minutes); when false, a missing build is a [`ClusterError::Build`].
    pub build_if_missing: bool,
    /// Run kube-controller-manager (Deployments, ReplicaSets, EndpointSlices, garbage
    /// collection, namespace deletion, service-account tokens).
    pub controller_manager: bool,
    /// Where the process logs go; `None` means the cluster directory (removed with it).
    pub log_dir: Option<PathBuf>,
    /// Serve a real node (`crate::node`) at this host address: the apiserver listens on every
    /// interface and advertises this address (the `kubernetes` Service's endpoint, which pods
    /// reach through kube-proxy), and admits pods with their ServiceAccount's token. `None`:
    /// loopback only, for simulated pods.
    pub node_address: Option<Ipv4Addr>,
}

impl Default for ClusterOptions {
    fn default() -> Self {
        Self {
            build_if_missing: true,
            controller_manager: true,
            log_dir: None,
            node_address: None,
        }
    }
}

/// Why a cluster could not start.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// The Kubernetes binaries are missing or could not be built.
    #[error("cannot provide the Kubernetes binaries: {0}")]
    Build(String),
    /// A process (or a helper such as `openssl`) could not be started.
    #[error("cannot start {process}: {source}")]
    Spawn {
        /// The program.
        process: &'static str,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A process started but did not serve in time, or exited.
    #[error("{process} is not ready: {reason}\n--- last lines of {} ---\n{log_tail}", log.display())]
    NotReady {
        /// The program.
        process: &'static str,
        /// What was awaited and the last probe's answer.
        reason: String,
        /// Its log file.
        log: PathBuf,
        /// The last lines of that log.
        log_tail: String,
    },
    /// A file or socket operation of the test harness itself failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// Why it failed.
        #[source]
        source: std::io::Error,
    },
}

impl ClusterError {
    /// A `map_err` adapter turning an I/O error into [`ClusterError::Io`] with `context`.
    pub(crate) fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> Self {
        let context = context.into();
        move |source| Self::Io { context, source }
    }
}

/// A running test cluster. Dropping it stops its processes and removes its directory.
#[derive(Debug)]
pub struct TestCluster {
    /// Started processes, in start order (stopped in reverse).
    processes: Mutex<Vec<ManagedProcess>>,
    server_url: String,
    server_uri: http::Uri,
    /// DER certificates the apiserver's serving certificate chains to.
    server_ca: Vec<Vec<u8>>,
    admin_token: String,
    kubeconfig: PathBuf,
    controller_manager: bool,
    /// The address a real node reaches the apiserver at, when it serves one.
    node_address: Option<Ipv4Addr>,
    /// What kube-apiserver reports.
    version: crate::version::Version,
    dir: ClusterDir,
}

/// The cluster of this process, or why it could not start.
static SHARED: OnceLock<Result<TestCluster, String>> = OnceLock::new();

/// Installs rustls' ring provider as the process default (idempotent); called by every client
/// constructor here.
pub fn install_crypto_provider() {
    // Fails only when a provider is installed already, which is what we want.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

impl TestCluster {
    /// The cluster shared by every test of this test binary, started on first use (building the
    /// binaries first if this machine never built them, with visible progress on stderr).
    ///
    /// Returns `None` only when `ELECTOR_SKIP_CLUSTER=1` (printing `SKIPPED: <reason>` to
    /// stderr).
    ///
    /// # Panics
    /// When the cluster cannot start, with a message naming the failed process and the tail of
    /// its log (every later call panics with the same message).
    pub fn shared() -> Option<&'static TestCluster> {
        if std::env::var_os(SKIP_ENV).is_some_and(|value| value == "1") {
            eprintln!("SKIPPED: {SKIP_ENV}=1, so no Kubernetes test cluster is started");
            return None;
        }
        let shared = SHARED.get_or_init(|| {
            let started = Self::start(ClusterOptions::default()).map_err(|e| e.to_string());
            if started.is_ok() {
                // Statics are never dropped: stop the processes and remove the directory when
                // the test binary exits normally. (On a kill, PDEATHSIG stops the processes and
                // the next cluster start removes the directory.)
                // SAFETY: registers a plain `extern "C"` function that cannot unwind.
                unsafe { libc::atexit(stop_shared_cluster) };
            }
            started
        });
        match shared {
            Ok(cluster) => Some(cluster),
            Err(message) => {
                panic!("testkit: the shared Kubernetes test cluster did not start: {message}")
            }
        }
    }

    /// Starts a new cluster (used by [`TestCluster::shared`] and the `test-cluster` binary).
    /// Blocking; callable from async code too (the start runs on its own thread and runtime,
    /// and the cluster keeps nothing bound to a runtime).
    pub fn start(options: ClusterOptions) -> Result<TestCluster, ClusterError> {
        install_crypto_provider();
        let binaries = Binaries::locate(options.build_if_missing)?;
        let begun = Instant::now();
        let starter = std::thread::Builder::new()
            .name("testkit-cluster-start".into())
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(ClusterError::io("building the start-up runtime"))?;
                runtime.block_on(launch::launch_with_retries(&options, &binaries))
            })
            .map_err(ClusterError::io("spawning the start-up thread"))?;
        let cluster = starter
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))?;
        eprintln!(
            "testkit: Kubernetes v{} test cluster ready at {} in {:.1?} (directory {})",
            cluster.version,
            cluster.server_url,
            begun.elapsed(),
            cluster.dir.path().display()
        );
        Ok(cluster)
    }

    /// The version of the cluster's kube-apiserver, for what a test expects of that version.
    pub fn version(&self) -> crate::version::Version {
        self.version
    }

    /// The admin kubeconfig (certificate-authority-data and bearer token), usable by kubectl.
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig
    }

    /// Writes to `path` a kubeconfig that authenticates as admin and acts as `user`
    /// (`Impersonate-User`): the API server authorizes its requests with `user`'s RBAC
    /// bindings, and its audit log names `user` as the writer.
    pub fn write_kubeconfig_as(&self, path: &Path, user: &str) -> Result<(), ClusterError> {
        let ca_pem = self.ca_pem()?;
        kubeconfig::write(
            path,
            &self.server_url,
            &ca_pem,
            &self.admin_token,
            Some(user),
        )
    }

    /// The address a real node reaches the apiserver at ([`ClusterOptions::node_address`]).
    pub fn node_address(&self) -> Option<Ipv4Addr> {
        self.node_address
    }

    /// The PEM bundle of the apiserver's CA (its self-signed serving certificate).
    pub fn ca_pem(&self) -> Result<Vec<u8>, ClusterError> {
        let ca_file = self.dir.path().join("certs").join("apiserver.crt");
        std::fs::read(&ca_file).map_err(ClusterError::io(format!("reading {}", ca_file.display())))
    }

    /// Every write the API server has recorded in its audit log so far.
    pub fn audit_writes(&self) -> std::io::Result<Vec<audit::AuditWrite>> {
        audit::read(&self.dir.path().join(audit::LOG_FILE))
    }

    /// `https://127.0.0.1:<port>` of the apiserver (`https://<node address>:<port>` when it
    /// serves a node: its self-signed certificate names only that address).
    pub fn server_url(&self) -> &str {
        &self.server_url
    }

    /// The bearer token of `admin` (group `system:masters`).
    pub fn admin_token(&self) -> &str {
        &self.admin_token
    }

    /// The name and process id of every running cluster process (`etcd`, `kube-apiserver`,
    /// `kube-controller-manager`), for reading their CPU time from `/proc`.
    pub fn process_ids(&self) -> Vec<(&'static str, u32)> {
        let processes = self
            .processes
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        processes.iter().map(|p| (p.name(), p.pid())).collect()
    }

    /// A client configuration for `admin`, verifying the apiserver's certificate.
    pub fn kube_config(&self) -> kube::Config {
        self.config_with_token(&self.admin_token)
    }

    /// An admin client, built in (and bound to) the caller's runtime.
    pub async fn client(&self) -> kube::Client {
        self.client_with_token(&self.admin_token).await
    }

    /// A client authenticating with the bearer `token`, built in the caller's runtime.
    ///
    /// # Panics
    /// When kube cannot build the client (an invalid TLS configuration).
    pub async fn client_with_token(&self, token: &str) -> kube::Client {
        install_crypto_provider();
        kube::Client::try_from(self.config_with_token(token)).unwrap_or_else(|e| {
            panic!(
                "testkit: cannot build a client for {}: {e}",
                self.server_url
            )
        })
    }

    /// The client configuration for `token`.
    fn config_with_token(&self, token: &str) -> kube::Config {
        let mut config = kube::Config::new(self.server_uri.clone());
        config.root_cert = Some(self.server_ca.clone());
        config.auth_info.token = Some(SecretString::from(token));
        config
    }

    /// Stops every process, last started first, each given `grace` after SIGTERM. Skips them if
    /// another thread holds the list (only possible while exiting).
    fn stop_processes(&self, grace: Duration) {
        if let Ok(mut processes) = self.processes.try_lock() {
            while let Some(mut process) = processes.pop() {
                process.stop(grace);
            }
        }
    }
}

impl Drop for TestCluster {
    fn drop(&mut self) {
        self.stop_processes(STOP_GRACE);
    }
}

/// `atexit` hook of the shared cluster.
extern "C" fn stop_shared_cluster() {
    if let Some(Ok(cluster)) = SHARED.get() {
        cluster.stop_processes(Duration::ZERO);
        cluster.dir.remove();
    }
}
