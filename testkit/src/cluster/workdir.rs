//! The per-cluster temporary directory (etcd data, certificates, credentials, logs).
//!
//! Each directory records its owner's PID. Directories whose owner is dead (a test binary that
//! was killed, or a shared cluster of a binary that exited) are removed when a cluster starts,
//! after anything mounted under them (a real node's container filesystems) is unmounted.

use std::path::{Path, PathBuf};

use rand::Rng;
use rand::distr::Alphanumeric;

use super::error::ClusterError;

/// Prefix of every cluster directory under [`std::env::temp_dir`].
const DIR_PREFIX: &str = "testkit-cluster-";
/// Prefix of every real node's directory.
const NODE_DIR_PREFIX: &str = "testkit-node-";
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
        Self::create_with_prefix(DIR_PREFIX)
    }

    /// [`ClusterDir::create`] for a real node's directory.
    pub(crate) fn create_for_node() -> Result<Self, ClusterError> {
        Self::create_with_prefix(NODE_DIR_PREFIX)
    }

    /// Removes stale directories with `prefix`, then creates a fresh one.
    fn create_with_prefix(prefix: &str) -> Result<Self, ClusterError> {
        let root = std::env::temp_dir();
        remove_stale(&root, prefix);
        let suffix: String = rand::rng()
            .sample_iter(Alphanumeric)
            .take(8)
            .map(|c| char::from(c).to_ascii_lowercase())
            .collect();
        let path = root.join(format!("{prefix}{}-{suffix}", std::process::id()));
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

    /// `requested`, or this directory when `None`, created if missing: where process logs go.
    pub(crate) fn log_dir(&self, requested: Option<&Path>) -> Result<PathBuf, ClusterError> {
        let log_dir = requested.unwrap_or(&self.path).to_path_buf();
        std::fs::create_dir_all(&log_dir)
            .map_err(ClusterError::io(format!("creating {}", log_dir.display())))?;
        Ok(log_dir)
    }

    /// Leaves the directory in place (for inspecting the logs of a failed start); the next
    /// cluster start after this process exits removes it.
    pub(crate) fn keep(&mut self) {
        self.keep = true;
    }

    /// Removes the directory now, after unmounting what is mounted under it (best effort).
    pub(crate) fn remove(&self) {
        unmount_under(&self.path);
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

/// Removes every directory under `root` named with `prefix` whose owner process no longer
/// exists.
fn remove_stale(root: &Path, prefix: &str) {
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    for entry in entries.flatten() {
        let is_cluster_dir = entry
            .file_name()
            .to_str()
            .is_some_and(|name| name.starts_with(prefix));
        if is_cluster_dir && !owner_alive(&entry.path()) {
            unmount_under(&entry.path());
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// Whether `dir` is named like a real node's directory.
pub(crate) fn is_node_dir(dir: &Path) -> bool {
    dir.file_name()
        .and_then(|name| name.to_str())
        .is_some_and(|name| name.starts_with(NODE_DIR_PREFIX))
}

/// Whether the PID recorded in `dir` is a live process. A directory without a readable owner
/// (no owner file yet, or one another thread is still writing) counts as dead only once it is
/// old enough not to be one being created right now.
pub(crate) fn owner_alive(dir: &Path) -> bool {
    let owner = std::fs::read_to_string(dir.join(OWNER_FILE));
    match owner
        .ok()
        .and_then(|pid| pid.trim().parse::<libc::pid_t>().ok())
    {
        Some(pid) => std::path::Path::new(&format!("/proc/{pid}")).exists(),
        None => std::fs::metadata(dir)
            .and_then(|meta| meta.modified())
            .is_ok_and(|modified| {
                modified
                    .elapsed()
                    .is_ok_and(|age| age < std::time::Duration::from_secs(60))
            }),
    }
}

/// Detaches every mount point at or under `dir`, deepest first (best effort), so that removing
/// the directory never reaches into a mounted file system.
pub(crate) fn unmount_under(dir: &Path) {
    let Ok(mountinfo) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return;
    };
    // The fifth field is the mount point, with spaces and the like octal-escaped.
    let mut points: Vec<PathBuf> = mountinfo
        .lines()
        .filter_map(|line| line.split(' ').nth(4))
        .map(|point| PathBuf::from(unescape_mount_point(point)))
        .filter(|point| point.starts_with(dir))
        .collect();
    points.sort_by_key(|point| std::cmp::Reverse(point.components().count()));
    for point in points {
        let Ok(c_path) = std::ffi::CString::new(point.as_os_str().as_encoded_bytes()) else {
            continue;
        };
        // SAFETY: a plain syscall on a NUL-terminated path we own.
        unsafe { libc::umount2(c_path.as_ptr(), libc::MNT_DETACH) };
    }
}

/// Undoes mountinfo's `\ooo` escapes.
fn unescape_mount_point(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes.get(i + 1..i + 4).and_then(|digits| {
            std::str::from_utf8(digits)
                .ok()
                .and_then(|digits| u8::from_str_radix(digits, 8).ok())
        });
        match (bytes[i], octal) {
            (b'\\', Some(byte)) => {
                out.push(byte);
                i += 4;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::{OWNER_FILE, owner_alive, unescape_mount_point};

    /// A directory another thread is creating right now: its owner file exists but is still
    /// empty. It is not stale (removing it made a real Consul's start fail on its log file).
    #[test]
    fn a_directory_whose_owner_file_is_being_written_is_alive() {
        let dir = std::env::temp_dir().join(format!("testkit-owner-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        std::fs::write(dir.join(OWNER_FILE), "").expect("empty owner file");
        let alive = owner_alive(&dir);
        std::fs::write(dir.join(OWNER_FILE), "not a pid").expect("owner file");
        let garbled = owner_alive(&dir);
        let _ = std::fs::remove_dir_all(&dir);
        assert!(alive, "an empty owner file of a fresh directory");
        assert!(garbled, "an unreadable owner of a fresh directory");
    }

    #[test]
    fn mount_points_are_unescaped() {
        assert_eq!(unescape_mount_point("/tmp/a\\040b"), "/tmp/a b");
        assert_eq!(unescape_mount_point("/plain/path"), "/plain/path");
        assert_eq!(unescape_mount_point("/odd\\9"), "/odd\\9");
    }
}
