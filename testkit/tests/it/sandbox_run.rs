//! The sandbox end to end: the built `sandbox` binary runs its whole scenario (it builds the
//! operator binary itself with cargo, starts its own cluster and Consul) and passes, against
//! the emulator and against a real Consul (`--consul real`, skipped visibly without
//! `CONSUL_BIN`); and `--consul real` without `CONSUL_BIN` fails at once, naming it.
//!
//! About a minute per scenario; the scenarios are skipped like every cluster test when
//! `ELECTOR_SKIP_CLUSTER=1`.

use std::process::{Command, Output};
use std::time::Instant;

use testkit::cluster::SKIP_ENV;
use testkit::real_consul::{CONSUL_BIN_ENV, consul_binary};

/// What the sandbox printed and how it ended, as one text for assertion messages.
fn context(output: &Output, started: Instant) -> String {
    format!(
        "sandbox exited with {} after {:.1?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
        output.status,
        started.elapsed(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// Runs the whole scenario with `args` (and `CONSUL_BIN` set to `consul`, when given) and
/// checks that every step passed; returns its stdout.
fn scenario_passes(args: &[&str], consul: Option<&std::path::Path>) -> String {
    let started = Instant::now();
    let mut command = Command::new(env!("CARGO_BIN_EXE_sandbox"));
    command.args(args);
    if let Some(consul) = consul {
        command.env(CONSUL_BIN_ENV, consul);
    }
    let output = command.output().expect("run the sandbox binary");
    let context = context(&output, started);
    assert!(output.status.success(), "{context}");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    for expected in [
        "[1] initial election",
        "[4] a switchover is requested",
        "[6] the operator is killed (SIGKILL) and started again",
        "Summary",
        "initial election",
        "failover, leader pod deleted",
        "failover, leader NotReady",
        "fenced, Consul unreachable",
        "switchover-to: \"*\" requested -> new leader labelled",
        "no label changed across the restart",
        "at most one leader at every observed pod version: yes",
        "operator log: ",
        "PASSED",
    ] {
        assert!(stdout.contains(expected), "missing {expected:?}\n{context}");
    }
    assert!(
        !stdout.contains('\x1b'),
        "no colour when stdout is not a terminal\n{context}"
    );
    stdout
}

fn cluster_skipped() -> bool {
    let skipped = std::env::var_os(SKIP_ENV).is_some_and(|value| value == "1");
    if skipped {
        eprintln!("SKIPPED: {SKIP_ENV}=1, so the sandbox (which starts a cluster) is not run");
    }
    skipped
}

#[test]
fn the_sandbox_scenario_passes_end_to_end() {
    if cluster_skipped() {
        return;
    }
    let stdout = scenario_passes(&[], None);
    assert!(stdout.contains("Consul emulator at "), "{stdout}");
}

#[test]
fn the_sandbox_scenario_passes_against_a_real_consul() {
    let Some(consul) = consul_binary().expect("CONSUL_BIN") else {
        return;
    };
    if cluster_skipped() {
        return;
    }
    let stdout = scenario_passes(&["--consul", "real"], Some(&consul));
    assert!(stdout.contains("real Consul "), "{stdout}");
}

#[test]
fn consul_real_without_consul_bin_fails_at_once_naming_it() {
    let started = Instant::now();
    let output = Command::new(env!("CARGO_BIN_EXE_sandbox"))
        .args(["--consul", "real"])
        .env_remove(CONSUL_BIN_ENV)
        .output()
        .expect("run the sandbox binary");
    let context = context(&output, started);
    assert_eq!(output.status.code(), Some(1), "{context}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("--consul real needs a Consul binary: set CONSUL_BIN"),
        "{context}"
    );
    assert!(
        !String::from_utf8_lossy(&output.stdout).contains("building the operator"),
        "nothing is built or started first\n{context}"
    );
}
