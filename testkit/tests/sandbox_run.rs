//! The sandbox end to end: the built `sandbox` binary runs its whole scenario (it builds the
//! operator binary itself with cargo, starts its own cluster and emulator) and passes.
//!
//! About a minute; skipped like every cluster test when `ELECTOR_SKIP_CLUSTER=1`.

use std::process::Command;
use std::time::Instant;

use testkit::cluster::SKIP_ENV;

#[test]
fn the_sandbox_scenario_passes_end_to_end() {
    if std::env::var_os(SKIP_ENV).is_some_and(|value| value == "1") {
        eprintln!("SKIPPED: {SKIP_ENV}=1, so the sandbox (which starts a cluster) is not run");
        return;
    }
    let started = Instant::now();
    let output = Command::new(env!("CARGO_BIN_EXE_sandbox"))
        .output()
        .expect("run the sandbox binary");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let context = format!(
        "sandbox exited with {} after {:.1?}\n--- stdout ---\n{stdout}\n--- stderr ---\n{stderr}",
        output.status,
        started.elapsed()
    );
    assert!(output.status.success(), "{context}");
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
}
