//! Starting a [`TestCluster`]: a new one, or the one every test of a binary shares.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use super::binaries::Binaries;
use super::error::ClusterError;
use super::launch;
use super::options::ClusterOptions;
use super::test_cluster::{TestCluster, install_crypto_provider};

/// Setting this variable to `1` makes [`TestCluster::shared`] return `None`: tests that need
/// the cluster then skip. Nothing else skips them.
pub const SKIP_ENV: &str = "ELECTOR_SKIP_CLUSTER";

/// The cluster of this process, or why it could not start.
static SHARED: OnceLock<Result<TestCluster, String>> = OnceLock::new();

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
}

/// `atexit` hook of the shared cluster.
extern "C" fn stop_shared_cluster() {
    if let Some(Ok(cluster)) = SHARED.get() {
        cluster.stop_processes(Duration::ZERO);
        cluster.dir.remove();
    }
}
