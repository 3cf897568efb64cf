//! The Makefile: `make help` lists the documented targets, the demo targets fail at once with
//! a clear message when Docker (a running engine) or kind is missing, and the recipes run the
//! commands the README documents. Runs `make` for real; tools the recipes would call
//! (docker, kind, kubectl, helm) are replaced by recording fakes, so nothing outside the test
//! is touched even on a machine that has them.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// A scratch directory removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "consul-elector-makefile-{name}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("scratch directory");
        Scratch(dir)
    }

    /// A fake `tool` in `bin/` that appends its arguments to `calls.log` and exits with
    /// `status` (`info_status` for `docker info`).
    fn fake(&self, tool: &str, status: i32, info_status: i32) {
        let bin = self.0.join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        let log = self.0.join("calls.log");
        let script = format!(
            "#!/bin/sh\necho \"{tool} $*\" >> '{}'\n\
             if [ \"$1\" = info ]; then exit {info_status}; fi\nexit {status}\n",
            log.display()
        );
        let path = bin.join(tool);
        std::fs::write(&path, script).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    fn calls(&self) -> String {
        std::fs::read_to_string(self.0.join("calls.log")).unwrap_or_default()
    }

    /// `PATH` with `bin/` first and every directory holding one of `hidden` replaced by a copy
    /// (of symbolic links) without it.
    fn path_without(&self, hidden: &[&str]) -> String {
        let mut dirs = vec![self.0.join("bin")];
        let original = std::env::var_os("PATH").unwrap_or_default();
        for (index, dir) in std::env::split_paths(&original).enumerate() {
            if !hidden.iter().any(|tool| dir.join(tool).exists()) {
                dirs.push(dir);
                continue;
            }
            let shadow = self.0.join(format!("path-{index}"));
            std::fs::create_dir_all(&shadow).unwrap();
            for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                let name = entry.file_name();
                if !hidden.iter().any(|tool| name == *tool) {
                    let _ = std::os::unix::fs::symlink(entry.path(), shadow.join(&name));
                }
            }
            dirs.push(shadow);
        }
        std::env::join_paths(dirs)
            .expect("a valid PATH")
            .into_string()
            .expect("a UTF-8 PATH")
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `make ARGS` in the repository with `path` as `PATH`, bounded to 60 s.
fn make(args: &[&str], path: Option<&str>) -> (Output, Duration) {
    let mut command = Command::new("make");
    command.args(args).current_dir(ROOT);
    if let Some(path) = path {
        command.env("PATH", path);
    }
    // Make's own variables from an outer make (cargo run from make) must not leak in.
    command.env_remove("MAKEFLAGS").env_remove("MAKELEVEL");
    let start = Instant::now();
    let output = command
        .output()
        .expect("make runs (is GNU make installed?)");
    (output, start.elapsed())
}

fn text(output: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn make_help_lists_every_documented_target() {
    let (output, _) = make(&["help"], None);
    let (stdout, stderr) = text(&output);
    assert!(output.status.success(), "{stderr}");
    for target in [
        "demo", "e2e", "crds", "lint", "test", "clean", "image", "load", "install",
    ] {
        let line = stdout
            .lines()
            .find(|l| l.split_whitespace().next() == Some(target))
            .unwrap_or_else(|| panic!("make help does not list {target}:\n{stdout}"));
        assert!(
            line.split_whitespace().count() > 2,
            "{target} has no description: {line:?}"
        );
    }
    // help is the default goal.
    let (plain, _) = make(&[], None);
    assert_eq!(text(&plain).0, stdout);
}

#[test]
fn make_demo_without_kind_fails_fast_naming_what_is_missing() {
    let scratch = Scratch::new("no-kind");
    // A docker CLI whose engine is unreachable, as on a machine with the CLI only.
    scratch.fake("docker", 0, 1);
    scratch.fake("kubectl", 0, 0);
    scratch.fake("helm", 0, 0);
    let path = scratch.path_without(&["kind", "docker", "kubectl", "helm"]);
    let (output, elapsed) = make(&["demo"], Some(&path));
    let (stdout, stderr) = text(&output);
    assert!(!output.status.success(), "make demo succeeded:\n{stdout}");
    assert!(
        elapsed < Duration::from_secs(20),
        "took {elapsed:?}: not fast"
    );
    assert!(
        stderr.contains("make demo: cannot run, missing prerequisites:"),
        "{stderr}"
    );
    assert!(
        stderr.contains("kind, to run a Kubernetes cluster in Docker"),
        "{stderr}"
    );
    assert!(stderr.contains("`docker info` failed"), "{stderr}");
    assert!(
        !stderr.contains("kubectl:") && !stderr.contains("helm 3"),
        "present tools are not reported:\n{stderr}"
    );
    // Nothing but the engine check ran: no build, no cluster, no install.
    assert_eq!(scratch.calls().trim(), "docker info", "{}", scratch.calls());
}

#[test]
fn make_demo_without_a_docker_engine_fails_before_creating_anything() {
    let scratch = Scratch::new("no-engine");
    scratch.fake("docker", 0, 1);
    scratch.fake("kind", 0, 0);
    scratch.fake("kubectl", 0, 0);
    scratch.fake("helm", 0, 0);
    let path = scratch.path_without(&["kind", "docker", "kubectl", "helm"]);
    let (output, _) = make(&["demo"], Some(&path));
    let (_, stderr) = text(&output);
    assert!(!output.status.success());
    assert!(stderr.contains("`docker info` failed"), "{stderr}");
    assert!(!stderr.contains("- kind"), "{stderr}");
    assert_eq!(scratch.calls().trim(), "docker info", "{}", scratch.calls());

    // Without the docker CLI at all.
    let scratch = Scratch::new("no-docker");
    scratch.fake("kind", 0, 0);
    scratch.fake("kubectl", 0, 0);
    scratch.fake("helm", 0, 0);
    let path = scratch.path_without(&["kind", "docker", "kubectl", "helm"]);
    let (output, _) = make(&["image"], Some(&path));
    let (_, stderr) = text(&output);
    assert!(!output.status.success());
    assert!(
        stderr.contains("make image: cannot run") && stderr.contains("docker, with a running"),
        "{stderr}"
    );
    assert_eq!(scratch.calls(), "");
}

#[test]
fn make_demo_runs_the_documented_steps_in_order_with_working_tools() {
    // Every tool is a fake that succeeds: the recipe's commands and their order are recorded.
    let scratch = Scratch::new("all-tools");
    for tool in ["docker", "kind", "kubectl", "helm"] {
        scratch.fake(tool, 0, 0);
    }
    let path = scratch.path_without(&["kind", "docker", "kubectl", "helm"]);
    let (output, _) = make(
        &["demo", "IMAGE_TAG=test", "CLUSTER=demo-test"],
        Some(&path),
    );
    let (stdout, stderr) = text(&output);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    let calls = scratch.calls();
    let position = |needle: &str| {
        calls
            .find(needle)
            .unwrap_or_else(|| panic!("{needle:?} was not run:\n{calls}"))
    };
    let steps = [
        "kind create cluster --name demo-test",
        "docker build --build-arg VERSION=",
        "-t consul-elector:test .",
        "kind load docker-image consul-elector:test --name demo-test",
        "helm --kube-context kind-demo-test upgrade --install consul-elector charts/consul-elector",
        "kubectl --context kind-demo-test apply -n default -f examples/web.yaml",
        "kubectl --context kind-demo-test wait -n default --for=condition=LeaderElected le/web",
    ];
    let positions: Vec<usize> = steps.iter().map(|s| position(s)).collect();
    assert!(
        positions.windows(2).all(|w| w[0] < w[1]),
        "out of order:\n{calls}"
    );
    let helm = calls.lines().find(|l| l.starts_with("helm ")).unwrap();
    for setting in [
        "--set consulDev.enabled=true",
        "--set-string image.repository=consul-elector",
        "--set-string image.tag=test",
        "--set image.pullPolicy=Never",
        "--namespace consul-elector --create-namespace",
        "--wait",
    ] {
        assert!(helm.contains(setting), "{setting} missing: {helm}");
    }
    // The leader and the endpoints are printed.
    assert!(
        calls.contains("get -n default le web -o jsonpath={.status.leader.pod}"),
        "{calls}"
    );
    assert!(
        calls.contains("get endpointslices -n default -l kubernetes.io/service-name in (web-leader,web-followers)"),
        "{calls}"
    );
    assert!(stdout.contains("== LeaderElection web: leader"), "{stdout}");
    // The pods with their role label and their fencing token, an annotation (kubectl's
    // `-L` shows labels only).
    let pods = calls
        .lines()
        .find(|l| l.contains("get pods -n default -l app=web"))
        .unwrap_or_else(|| panic!("the pods are not listed:\n{calls}"));
    assert!(
        pods.contains(".metadata.labels.elector\\.dev/role"),
        "{pods}"
    );
    assert!(
        pods.contains(".metadata.annotations.elector\\.dev/fencing-token"),
        "{pods}"
    );
    assert!(!pods.contains("-L elector.dev/fencing-token"), "{pods}");
}

#[test]
fn make_test_is_the_readmes_test_command_and_e2e_runs_the_ignored_suite() {
    let (output, _) = make(&["-n", "test"], None);
    assert!(output.status.success());
    let (stdout, _) = text(&output);
    assert_eq!(stdout.trim(), "cargo test --workspace");
    let readme = std::fs::read_to_string(Path::new(ROOT).join("README.md")).unwrap();
    assert!(readme.contains("cargo test --workspace"));

    let (output, _) = make(&["-n", "e2e"], None);
    let (stdout, _) = text(&output);
    assert!(
        stdout.contains("ELECTOR_E2E=1")
            && stdout.contains("cargo test --test e2e -- --ignored --test-threads=1"),
        "{stdout}"
    );
    let (output, _) = make(&["-n", "crds"], None);
    let (stdout, _) = text(&output);
    assert!(
        stdout.contains("cargo run --quiet --locked -p consul-elector --bin consul-elector -- crd")
            && stdout.contains("charts/consul-elector/crds/"),
        "{stdout}"
    );
}

#[test]
fn the_chart_lint_the_makefile_calls_exists() {
    let (output, _) = make(&["-n", "lint"], None);
    let (stdout, _) = text(&output);
    for script in ["charts/tests/setup-venv.sh", "charts/tests/check_chart.py"] {
        assert!(stdout.contains(script), "{stdout}");
        assert!(
            Path::new(ROOT).join(script).is_file(),
            "{script} is missing"
        );
    }
    assert!(stdout.contains("cargo fmt --all -- --check"), "{stdout}");
    assert!(
        stdout.contains("cargo clippy --workspace --all-targets --locked -- -D warnings"),
        "{stdout}"
    );
}
