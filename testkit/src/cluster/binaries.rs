//! Where the cluster's executables come from: by default etcd from Debian's `etcd-server`, and
//! kube-apiserver, kube-controller-manager (and a real node's programs) v1.20.2 from
//! `testkit/scripts/build-kube.sh` (built once per machine and cached); with
//! [`BIN_DIR_ENV`] set, from a directory of the user's own Kubernetes binaries.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::error::ClusterError;
use crate::version::Version;

/// The build script; it prints the bin dir as the last line of stdout, progress on stderr.
const BUILD_SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/build-kube.sh");

/// The environment variable naming a directory of Kubernetes binaries to use instead of the
/// build (kube-apiserver and kube-controller-manager; kubelet, kube-proxy, kube-scheduler
/// and pause for a real node; etcd too, else etcd from `PATH`).
pub const BIN_DIR_ENV: &str = "ELECTOR_KUBE_BIN_DIR";

/// Paths of the three executables.
#[derive(Debug)]
pub(crate) struct Binaries {
    pub(crate) etcd: PathBuf,
    pub(crate) apiserver: PathBuf,
    pub(crate) controller_manager: PathBuf,
    /// The directory, which also holds a real node's programs (`crate::node`).
    pub(crate) bin_dir: PathBuf,
    /// What kube-apiserver reports.
    pub(crate) version: Version,
}

impl Binaries {
    /// Finds the binaries: in [`BIN_DIR_ENV`] when set, else the build's, building them first
    /// when `build_if_missing` (the build's progress goes to this process's stderr) and
    /// failing when they are missing otherwise.
    pub(crate) fn locate(build_if_missing: bool) -> Result<Self, ClusterError> {
        let bin_dir = match std::env::var_os(BIN_DIR_ENV).filter(|dir| !dir.is_empty()) {
            Some(dir) => PathBuf::from(dir),
            None if build_if_missing => run_script(&[])?,
            None => {
                let cached = Command::new(BUILD_SCRIPT)
                    .arg("--check")
                    .status()
                    .map_err(|e| ClusterError::Build(format!("cannot run {BUILD_SCRIPT}: {e}")))?;
                if !cached.success() {
                    return Err(ClusterError::Build(format!(
                        "kube-apiserver is not built on this machine; run {BUILD_SCRIPT}"
                    )));
                }
                run_script(&["--print-dir"])?
            }
        };
        let apiserver = bin_dir.join("kube-apiserver");
        let own_etcd = bin_dir.join("etcd");
        Ok(Self {
            // Debian's etcd-server (installed by the build script) is resolved through PATH.
            etcd: if own_etcd.is_file() {
                own_etcd
            } else {
                PathBuf::from("etcd")
            },
            version: version_of(&apiserver)?,
            apiserver,
            controller_manager: bin_dir.join("kube-controller-manager"),
            bin_dir,
        })
    }
}

/// The version `program --version` prints (`Kubernetes v1.20.2`).
fn version_of(program: &Path) -> Result<Version, ClusterError> {
    let output = Command::new(program)
        .arg("--version")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| ClusterError::Build(format!("cannot run {}: {e}", program.display())))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    stdout
        .trim()
        .strip_prefix("Kubernetes ")
        .and_then(Version::parse)
        .ok_or_else(|| {
            ClusterError::Build(format!(
                "{} --version printed {:?}, not `Kubernetes vX.Y.Z`",
                program.display(),
                stdout.trim()
            ))
        })
}

/// Runs the build script with `args` and returns the directory on its last stdout line.
fn run_script(args: &[&str]) -> Result<PathBuf, ClusterError> {
    let output = Command::new(BUILD_SCRIPT)
        .args(args)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| ClusterError::Build(format!("cannot run {BUILD_SCRIPT}: {e}")))?;
    if !output.status.success() {
        return Err(ClusterError::Build(format!(
            "{BUILD_SCRIPT} failed ({}); its progress is above on stderr",
            output.status
        )));
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    match stdout.lines().map(str::trim).rfind(|line| !line.is_empty()) {
        Some(dir) if Path::new(dir).is_dir() => Ok(PathBuf::from(dir)),
        _ => Err(ClusterError::Build(format!(
            "{BUILD_SCRIPT} did not print an existing bin dir as its last line: {stdout:?}"
        ))),
    }
}
