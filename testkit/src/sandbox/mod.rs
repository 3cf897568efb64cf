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
//! - `observer`: watches of the pods and the election, and waits; `snapshot`: what they show;
//! - `timeline`: the printed rows and colours;
//! - `scenario`: the six steps; `report`: the measurements and the summary.

pub(crate) mod consul_backend;
mod error;
pub(crate) mod objects;
pub(crate) mod observer;
pub(crate) mod operator_process;
mod report;
mod scenario;
pub(crate) mod setup;
pub(crate) mod snapshot;
mod timeline;

use std::future::Future;
use std::pin::pin;

pub use consul_backend::ConsulKind;
pub use error::SandboxError;

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
