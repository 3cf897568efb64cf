//! The real `consul-elector` binary, run as a child process: built by cargo in the sandbox's own
//! profile, asked for its CRD, started against the test cluster and Consul (emulated or real), and
//! killed with SIGKILL like a crash.
//!
//! testkit never links the product (the product must not link testkit, and a dependency the
//! other way would be a cycle through the product's dev-dependencies), so the sandbox drives
//! the binary exactly as a user would.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use serde_json::Value;

use super::error::SandboxError;
use crate::cluster::spawn_tied;

/// The operator's package and binary name.
const OPERATOR: &str = "consul-elector";
/// Overrides the operator's log filter (`RUST_LOG`, default `warn`), for example
/// `info,consul_elector=debug` to see why a step failed.
pub(crate) const LOG_FILTER_ENV: &str = "SANDBOX_OPERATOR_LOG";
/// A command the operator is started under, split on whitespace, for example
/// `heaptrack -o /tmp/operator` to profile its heap from its first allocation. The process
/// statistics the benchmark driver reports are then those of the wrapper, not the operator.
pub(crate) const WRAPPER_ENV: &str = "SANDBOX_OPERATOR_WRAPPER";

/// Whether `name` is one of the variables cargo sets for the binary it runs (not one a user
/// sets for a build, such as `CARGO_TARGET_DIR` or `CARGO_HOME`).
fn is_package_variable(name: &str) -> bool {
    name.starts_with("CARGO_PKG_")
        || matches!(
            name,
            "CARGO_MANIFEST_DIR"
                | "CARGO_MANIFEST_PATH"
                | "CARGO_MANIFEST_LINKS"
                | "CARGO_CRATE_NAME"
                | "CARGO_BIN_NAME"
                | "CARGO_PRIMARY_PACKAGE"
                | "CARGO_RUSTC_CURRENT_DIR"
        )
}

/// A built operator executable.
#[derive(Debug, Clone)]
pub(crate) struct OperatorBinary {
    path: PathBuf,
}

impl OperatorBinary {
    /// Runs `cargo build -p consul-elector --bin consul-elector` in the workspace, in the
    /// profile the sandbox itself was built with; cargo's progress goes to stderr. The
    /// executable's path is taken from cargo's own JSON messages, so any target directory
    /// (`CARGO_TARGET_DIR`, `build.target-dir`, the workspace's `target/`) works. Blocking.
    pub(crate) fn build() -> Result<Self, SandboxError> {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let profile = own_profile();
        let workspace = Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .unwrap_or(Path::new(env!("CARGO_MANIFEST_DIR")));
        let mut command = Command::new(&cargo);
        // `cargo run` hands the running binary its package's variables (`CARGO_PKG_*`,
        // `CARGO_MANIFEST_DIR`, ...). Passed on to this build they differ from a plain
        // `cargo build`'s, and build scripts that watch them (ring's) run again: the TLS stack
        // was rebuilt on every switch between the two, minutes each time.
        for (name, _) in std::env::vars_os() {
            if name.to_str().is_some_and(is_package_variable) {
                command.env_remove(&name);
            }
        }
        let mut child = command
            .args([
                "build",
                "-p",
                OPERATOR,
                "--bin",
                OPERATOR,
                "--profile",
                &profile,
            ])
            .arg("--message-format=json-render-diagnostics")
            .current_dir(workspace)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|error| {
                SandboxError::Build(format!("cannot run {}: {error}", cargo.to_string_lossy()))
            })?;
        let mut executable = None;
        if let Some(stdout) = child.stdout.take() {
            for line in BufReader::new(stdout).lines() {
                let line = line.map_err(|error| {
                    SandboxError::Build(format!("reading cargo's output: {error}"))
                })?;
                executable = executable.or_else(|| operator_executable(&line));
            }
        }
        let status = child
            .wait()
            .map_err(|error| SandboxError::Build(format!("waiting for cargo: {error}")))?;
        if !status.success() {
            return Err(SandboxError::Build(format!(
                "cargo build -p {OPERATOR} failed ({status}); its errors are above"
            )));
        }
        let path = executable.ok_or_else(|| {
            SandboxError::Build(format!("cargo built no `{OPERATOR}` executable"))
        })?;
        Ok(Self { path })
    }

    /// The executable.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// The CRD as `consul-elector crd` prints it.
    pub(crate) fn crd_yaml(&self) -> Result<String, SandboxError> {
        let output = Command::new(&self.path)
            .arg("crd")
            .stdin(Stdio::null())
            .output()
            .map_err(|error| {
                SandboxError::Crd(format!("cannot run {} crd: {error}", self.path.display()))
            })?;
        if !output.status.success() {
            return Err(SandboxError::Crd(format!(
                "{} crd failed ({}): {}",
                self.path.display(),
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            )));
        }
        String::from_utf8(output.stdout)
            .map_err(|error| SandboxError::Crd(format!("the CRD is not UTF-8: {error}")))
    }
}

/// The cargo profile of this executable: its directory is `<target>/<dir>`, where `debug`
/// holds the `dev` (and `test`) profile and every other profile has its own name.
pub(crate) fn own_profile() -> String {
    let dir = std::env::current_exe().ok().and_then(|exe| {
        let dir = exe.parent()?.file_name()?.to_str()?.to_owned();
        Some(dir)
    });
    match dir.as_deref() {
        Some("debug") | None => "dev".to_owned(),
        Some(profile) => profile.to_owned(),
    }
}

/// The operator's executable path if `line` is cargo's JSON message about building it.
fn operator_executable(line: &str) -> Option<PathBuf> {
    let message: Value = serde_json::from_str(line).ok()?;
    let target = message.get("target")?;
    let is_operator_bin = message.get("reason")?.as_str()? == "compiler-artifact"
        && target.get("name")?.as_str()? == OPERATOR
        && target
            .get("kind")?
            .as_array()?
            .iter()
            .any(|kind| kind == "bin");
    is_operator_bin.then_some(())?;
    message.get("executable")?.as_str().map(PathBuf::from)
}

/// Where the operator connects and logs.
#[derive(Debug, Clone)]
pub(crate) struct OperatorConfig {
    /// The test cluster's admin kubeconfig (`KUBECONFIG`).
    pub(crate) kubeconfig: PathBuf,
    /// Consul's URL (`CONSUL_HTTP_ADDR`).
    pub(crate) consul_url: String,
    /// The namespaces watched (`--watch-namespaces`); empty: every namespace.
    pub(crate) namespaces: Vec<String>,
    /// The log file; every start appends to it.
    pub(crate) log: PathBuf,
}

/// A running operator process. Dropping it kills the process.
#[derive(Debug)]
pub(crate) struct OperatorProcess {
    binary: OperatorBinary,
    config: OperatorConfig,
    child: Child,
    metrics_addr: SocketAddr,
    starts: usize,
}

impl OperatorProcess {
    /// Truncates the log and starts the operator.
    pub(crate) fn start(
        binary: OperatorBinary,
        config: OperatorConfig,
    ) -> Result<Self, SandboxError> {
        File::create(&config.log).map_err(SandboxError::io(format!(
            "creating {}",
            config.log.display()
        )))?;
        let (child, metrics_addr) = spawn(&binary, &config, 1)?;
        Ok(Self {
            binary,
            config,
            child,
            metrics_addr,
            starts: 1,
        })
    }

    /// Kills the process with SIGKILL, as a crash or an OOM kill would, and reaps it.
    pub(crate) fn kill(&mut self) {
        // Fails only if it exited already, which is what we want.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Starts a new process with the same settings (after [`Self::kill`]).
    pub(crate) fn restart(&mut self) -> Result<(), SandboxError> {
        self.kill();
        self.starts += 1;
        let (child, metrics_addr) = spawn(&self.binary, &self.config, self.starts)?;
        self.child = child;
        self.metrics_addr = metrics_addr;
        Ok(())
    }

    /// The command line of the running process, for the transcript.
    pub(crate) fn describe(&self) -> String {
        let namespaces = if self.config.namespaces.is_empty() {
            String::new()
        } else {
            format!(" --watch-namespaces {}", self.config.namespaces.join(","))
        };
        format!(
            "{OPERATOR} run{namespaces} --metrics-addr {} (pid {})",
            self.metrics_addr,
            self.child.id()
        )
    }

    /// The running process's id (for reading its `/proc` statistics).
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The admin server's address (`/metrics`, `/livez`, `/readyz`).
    pub(crate) fn metrics_addr(&self) -> SocketAddr {
        self.metrics_addr
    }

    /// Whether the process still runs, or how it ended (for failure reports).
    pub(crate) fn state(&mut self) -> String {
        match self.child.try_wait() {
            Ok(None) => format!("running (pid {})", self.child.id()),
            Ok(Some(status)) => format!("exited: {status}"),
            Err(error) => format!("unknown ({error})"),
        }
    }
}

impl Drop for OperatorProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Starts start number `start` of the operator, its output appended to the log after a marker
/// line, tied to this process (it dies with the sandbox, even on a crash).
fn spawn(
    binary: &OperatorBinary,
    config: &OperatorConfig,
    start: usize,
) -> Result<(Child, SocketAddr), SandboxError> {
    let log = || format!("opening {}", config.log.display());
    let mut stdout = OpenOptions::new()
        .append(true)
        .open(&config.log)
        .map_err(SandboxError::io(log()))?;
    let stderr = stdout.try_clone().map_err(SandboxError::io(log()))?;
    let metrics_addr = free_loopback_addr()?;
    writeln!(stdout, "==== sandbox: operator start #{start} ====")
        .map_err(SandboxError::io(log()))?;
    let wrapper = std::env::var(WRAPPER_ENV).unwrap_or_default();
    let mut command = match wrapper.split_whitespace().collect::<Vec<_>>().split_first() {
        Some((program, args)) => {
            let mut command = Command::new(program);
            command.args(args).arg(binary.path());
            command
        }
        None => Command::new(binary.path()),
    };
    command.arg("run");
    if !config.namespaces.is_empty() {
        command.args(["--watch-namespaces", &config.namespaces.join(",")]);
    }
    command
        .arg("--metrics-addr")
        .arg(metrics_addr.to_string())
        .env("KUBECONFIG", &config.kubeconfig)
        .env("CONSUL_HTTP_ADDR", &config.consul_url)
        .env("RUST_LOG", log_filter())
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(stderr);
    let child = spawn_tied(command).map_err(SandboxError::io(format!(
        "starting {}",
        binary.path().display()
    )))?;
    Ok((child, metrics_addr))
}

/// The operator's `RUST_LOG`: [`LOG_FILTER_ENV`] when set, else `warn`.
fn log_filter() -> String {
    std::env::var(LOG_FILTER_ENV).unwrap_or_else(|_| "warn".to_owned())
}

/// A loopback address with a port that was free a moment ago.
fn free_loopback_addr() -> Result<SocketAddr, SandboxError> {
    let listener = TcpListener::bind("127.0.0.1:0")
        .map_err(SandboxError::io("finding a free port for the operator"))?;
    listener
        .local_addr()
        .map_err(SandboxError::io("finding a free port for the operator"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_operator_build_drops_what_cargo_run_set_and_keeps_what_users_set() {
        for dropped in [
            "CARGO_PKG_NAME",
            "CARGO_PKG_VERSION",
            "CARGO_MANIFEST_DIR",
            "CARGO_BIN_NAME",
        ] {
            assert!(is_package_variable(dropped), "{dropped}");
        }
        for kept in [
            "CARGO_TARGET_DIR",
            "CARGO_HOME",
            "CARGO",
            "RUSTFLAGS",
            "CARGO_PROFILE_RELEASE_LTO",
        ] {
            assert!(!is_package_variable(kept), "{kept}");
        }
    }

    #[test]
    fn the_operator_binary_is_found_in_cargo_messages() {
        let artifact = r#"{"reason":"compiler-artifact","target":{"name":"consul-elector","kind":["bin"]},"executable":"/t/debug/consul-elector","fresh":true}"#;
        assert_eq!(
            operator_executable(artifact),
            Some(PathBuf::from("/t/debug/consul-elector"))
        );
        for other in [
            r#"{"reason":"compiler-artifact","target":{"name":"consul_elector","kind":["lib"]},"executable":null}"#,
            r#"{"reason":"compiler-artifact","target":{"name":"testkit","kind":["bin"]},"executable":"/t/x"}"#,
            r#"{"reason":"build-finished","success":true}"#,
            "not json",
        ] {
            assert_eq!(operator_executable(other), None, "{other}");
        }
    }
}
