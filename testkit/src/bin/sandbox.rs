//! `cargo run -p testkit --bin sandbox [-- --keep]`: shows consul-elector working end to end on
//! this machine (see `testkit::sandbox`).

use std::process::ExitCode;
use std::time::Duration;

use testkit::cli::{self, Invocation};
use testkit::sandbox::{self, ConsulKind, Options, Outcome};

const USAGE: &str = "\
usage: cargo run -p testkit --bin sandbox [-- --keep] [--consul emulator|real]

Shows consul-elector working: builds the operator binary, starts a real kube-apiserver and
kube-controller-manager v1.20.2 (built from Debian's sources on the first run, several
minutes), Consul (emulated, or real with --consul real) and simulated pods, runs the operator as a child process, and
plays a scenario, printing every change the operator makes:
  1. a LeaderElection is created: a leader is elected and labelled
  2. the leader pod is deleted: a successor is labelled
  3. the leader goes NotReady: it is replaced, then becomes Ready again
  4. a switchover is requested (elector.dev/switchover-to: \"*\"): another pod leads, and
     the operator records the request Completed
  5. Consul is unreachable for longer than the session TTL: the leader label is removed
     (fenced); Consul comes back: the same pod leads again
  6. the operator is killed and restarted: no label changes
then a summary with the measured latencies. Exits non-zero when a step does not reach its
expected state in time (the message says which).

options:
  --keep           leave everything running after the scenario (prints the kubeconfig and
                   the Consul URL to look around with kubectl and curl); Ctrl-C stops it
  --consul KIND    emulator (default): the in-process Consul emulator; real: a real
                   `consul agent -dev` from CONSUL_BIN (required then), the operator
                   talking to it through a counting proxy
  -h, --help       show this help

environment:
  CONSUL_BIN            the consul binary for --consul real (1.0 or later)
  SANDBOX_OPERATOR_LOG  the operator's log filter (RUST_LOG syntax; default warn), for
                        example info,consul_elector=debug";

fn parse_args(mut args: impl Iterator<Item = String>) -> Result<Invocation<Options>, String> {
    let mut options = Options::default();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--keep" => options.keep = true,
            "--consul" => {
                let value = args
                    .next()
                    .ok_or_else(|| format!("--consul needs a value\n\n{USAGE}"))?;
                options.consul = ConsulKind::parse(&value)?;
            }
            "-h" | "--help" => return Ok(Invocation::Help),
            other => return Err(format!("unknown argument {other:?}\n\n{USAGE}")),
        }
    }
    Ok(Invocation::Run(options))
}

/// Resolves on Ctrl-C or SIGTERM (never, if the handlers cannot be installed).
async fn stop_requested() {
    match cli::stop_requested() {
        Ok(stop) => stop.await,
        Err(error) => {
            eprintln!(
                "sandbox: cannot install the signal handlers ({error}); Ctrl-C will not clean up"
            );
            std::future::pending().await
        }
    }
}

fn main() -> ExitCode {
    let options = match cli::run_or_exit(parse_args(std::env::args().skip(1)), USAGE) {
        Ok(options) => options,
        Err(exit) => return exit,
    };
    let runtime = match cli::start("sandbox") {
        Ok(runtime) => runtime,
        Err(exit) => return exit,
    };
    let outcome = runtime.block_on(sandbox::run(options, stop_requested()));
    // A build interrupted by Ctrl-C may still run on the blocking pool; do not wait for it.
    runtime.shutdown_timeout(Duration::from_secs(1));
    match outcome {
        Ok(Outcome::Passed) => ExitCode::SUCCESS,
        Ok(Outcome::Failed) => ExitCode::FAILURE,
        Ok(Outcome::Interrupted) => ExitCode::from(130),
        Err(error) => {
            eprintln!("sandbox: {error}");
            ExitCode::FAILURE
        }
    }
}
