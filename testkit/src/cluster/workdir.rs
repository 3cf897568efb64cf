//! The per-cluster temporary directory (etcd data, certificates, credentials, logs).
//!
//! Each directory records its owner's PID. Directories whose owner is dead (a test binary that
//! was killed, or a shared cluster of a binary that exited) are removed when a cluster starts.

use std::path::{Path, PathBuf};

use rand::Rng;
use rand::distr::Alphanumeric;

use super::ClusterError;

/// Prefix of every cluster directory under [`std::env::temp_dir`].
const DIR_PREFIX: &str = "testkit-cluster-";
/// File holding the owner's PID.
const OWNER_FILE: &str = "owner.pid";

/// A cluster directory, removed on drop unless [`ClusterDir::keep`] was called.
#[derive(Debug)]
pub(crate) struct ClusterDir {
    path: PathBuf,
    keep: bool,
}

impl ClusterDir {
    /// Removes stale directories of dead owners, then creates a fresh one owned by this process.
    pub(crate) fn create() -> Result<Self, ClusterError> {
        let root = std::env::temp_dir();
        remove_stale(&root);
        let suffix: String = rand::rng()
            .sample_iter(Alphanumeric)
            .take(8)
            .map(|c| char::from(c).to_ascii_lowercase())
            .collect();
        let path = root.join(format!("{DIR_PREFIX}{}-{suffix}", std::process::id()));
        std::fs::create_dir_all(&path)
            .map_err(ClusterError::io(format!("creating {}", path.display())))?;
        let dir = Self { path, keep: false };
        std::fs::write(dir.path.join(OWNER_FILE), std::process::id().to_string())
            .map_err(ClusterError::io(format!("writing {OWNER_FILE}")))?;
        Ok(dir)
    }

    /// The directory.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Leaves the directory in place (for inspecting the logs of a failed start); the next
    /// cluster start after this process exits removes it.
    pub(crate) fn keep(&mut self) {
        self.keep = true;
    }

    /// Removes the directory now (best effort).
    pub(crate) fn remove(&self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

impl Drop for ClusterDir {
    fn drop(&mut self) {
        if !self.keep {
            self.remove();
        }
    }
}

/// Removes every cluster directory under `root` whose owner process no longer exists.
fn remove_stale(root: &Path) {
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    for entry in entries.flatten() {
        let is_cluster_dir = entry
            .file_name()
            .to_str()
            .is_some_and(|name| name.starts_with(DIR_PREFIX));
        if is_cluster_dir && !owner_alive(&entry.path()) {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// Whether the PID recorded in `dir` is a live process. A directory without a readable owner
/// counts as dead only once it is old enough not to be one being created right now.
fn owner_alive(dir: &Path) -> bool {
    match std::fs::read_to_string(dir.join(OWNER_FILE)) {
        Ok(pid) => pid
            .trim()
            .parse::<libc::pid_t>()
            .is_ok_and(|pid| std::path::Path::new(&format!("/proc/{pid}")).exists()),
        Err(_) => std::fs::metadata(dir)
            .and_then(|meta| meta.modified())
            .is_ok_and(|modified| {
                modified
                    .elapsed()
                    .is_ok_and(|age| age < std::time::Duration::from_secs(60))
            }),
    }
}
