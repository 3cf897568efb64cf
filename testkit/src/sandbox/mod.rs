//! The sandbox: the README's first command, `cargo run -p testkit --bin sandbox`, which shows
//! the product working end to end on this machine, in under a minute once built.
//!
//! It builds the real `consul-elector` binary, starts the test cluster (a real kube-apiserver
//! and kube-controller-manager v1.20.2), the Consul emulator on the real clock (or, with
//! `--consul real`, a real `consul agent -dev` from `CONSUL_BIN`) and the pod simulator, installs the CRD the binary prints, creates a Deployment `web` of 3 pods and
//! runs the operator as a child process. Then a scenario of six steps (initial election,
//! leader pod deleted, leader NotReady, switchover requested, Consul unreachable for longer
//! than the TTL, operator killed and restarted) prints a timeline of every observed change and a summary with the
//! measured latencies and the safety check of docs/design.md rule 1 over every recorded pod
//! version.
//!
//! # Modules
//! - `setup`: everything the scenario runs against, and its teardown;
//! - `consul_backend`: the emulator or a real Consul (`--consul real`), behind one interface;
//! - `operator_process`: the operator binary (build, `crd`, start, SIGKILL, restart);
//! - `objects`: the CRD, the namespace and the `LeaderElection`;
//! - `observer`: watches of the pods and the election, snapshots and waits;
//! - `timeline`: the printed rows and colours;
//! - `scenario`: the six steps; `report`: the measurements and the summary.

pub(crate) mod consul_backend;
pub(crate) mod objects;
pub(crate) mod observer;
pub(crate) mod operator_process;
mod report;
mod scenario;
pub(crate) mod setup;
mod timeline;

use std::future::Future;
use std::pin::pin;

pub use consul_backend::ConsulKind;

use crate::cluster::ClusterError;
use crate::pods::WorkloadError;
use setup::Sandbox;
use timeline::Style;

/// What the command line asked for.
#[derive(Debug, Clone, Copy, Default)]
pub struct Options {
    /// Leave everything running after the scenario, until `stop` resolves.
    pub keep: bool,
    /// Which Consul the operator runs against.
    pub consul: ConsulKind,
}

/// How a sandbox run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Every step reached its expected state and no two pods ever led at once.
    Passed,
    /// A step did not reach its expected state in time, or two pods led at once.
    Failed,
    /// The user stopped the run before it ended.
    Interrupted,
}

/// Why the sandbox could not run its scenario at all.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// The operator binary could not be built.
    #[error("cannot build the operator: {0}")]
    Build(String),
    /// The test cluster did not start.
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    /// The CRD or the LeaderElection could not be made.
    #[error("{0}")]
    Crd(String),
    /// A Kubernetes API request failed.
    #[error("{context}: {source}")]
    Kube {
        /// What was being done.
        context: String,
        /// Why it failed.
        #[source]
        source: kube::Error,
    },
    /// The Deployment did not come up.
    #[error("the Deployment: {0}")]
    Workload(#[from] WorkloadError),
    /// A local file, process or socket operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// Why it failed.
        #[source]
        source: std::io::Error,
    },
    /// Anything else that kept the sandbox from starting.
    #[error("{0}")]
    Setup(String),
}

impl SandboxError {
    /// A `map_err` adapter turning an I/O error into [`SandboxError::Io`] with `context`.
    pub(crate) fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> Self {
        let context = context.into();
        move |source| Self::Io { context, source }
    }
}

/// Sets up the sandbox, runs the scenario and prints the summary; with [`Options::keep`],
/// then waits for `stop`. Resolving `stop` earlier interrupts the run. Everything started is
/// stopped before this returns (the operator is killed, the cluster stopped).
pub async fn run(
    options: Options,
    stop: impl Future<Output = ()>,
) -> Result<Outcome, SandboxError> {
    let style = Style::detect();
    let mut stop = pin!(stop);
    let interrupted = || {
        println!("\ninterrupted: stopping the operator and the cluster");
        Ok(Outcome::Interrupted)
    };
    let mut sandbox = tokio::select! {
        sandbox = Sandbox::set_up(style, options.consul) => sandbox?,
        () = &mut stop => return interrupted(),
    };
    let report = tokio::select! {
        report = scenario::run(&mut sandbox) => report,
        () = &mut stop => return interrupted(),
    };
    report.print(style, &sandbox.logs);
    if options.keep {
        sandbox.print_access();
        stop.await;
        println!("\nstopping the operator and the cluster");
    }
    sandbox.shut_down().await;
    Ok(if report.passed() {
        Outcome::Passed
    } else {
        Outcome::Failed
    })
}
