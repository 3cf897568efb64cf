//! Where the cluster's executables come from: etcd from Debian's `etcd-server`, kube-apiserver
//! and kube-controller-manager v1.20.2 from `testkit/scripts/build-kube.sh` (built once per
//! machine and cached).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::ClusterError;

/// The build script; it prints the bin dir as the last line of stdout, progress on stderr.
const BUILD_SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/build-kube.sh");

/// Paths of the three executables.
#[derive(Debug)]
pub(crate) struct Binaries {
    pub(crate) etcd: PathBuf,
    pub(crate) apiserver: PathBuf,
    pub(crate) controller_manager: PathBuf,
    /// The build's bin dir, which also holds a real node's programs (`crate::node`).
    pub(crate) bin_dir: PathBuf,
}

impl Binaries {
    /// Finds the binaries, building them first when `build_if_missing` (the build's progress
    /// goes to this process's stderr), failing when they are missing otherwise.
    pub(crate) fn locate(build_if_missing: bool) -> Result<Self, ClusterError> {
        let bin_dir = if build_if_missing {
            run_script(&[])?
        } else {
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
        };
        Ok(Self {
            // Installed by the build script's runtime packages; resolved through PATH.
            etcd: PathBuf::from("etcd"),
            apiserver: bin_dir.join("kube-apiserver"),
            controller_manager: bin_dir.join("kube-controller-manager"),
            bin_dir,
        })
    }
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
