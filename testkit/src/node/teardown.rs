//! What a node leaves on the host unless removed: containerd's shims and the containers under
//! them, kube-proxy's iptables rules, and the pods' network namespaces. A node that was killed
//! (its test binary SIGKILLed) could not remove them; the next node start sweeps them.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Where the CRI plugin pins pod network namespaces.
const NETNS_DIR: &str = "/var/run/netns";

/// SIGKILLs every containerd shim serving the containerd at `socket`, and what runs under it
/// (a shim and its containers outlive containerd by design).
pub(super) fn kill_shims_of(socket: &Path) {
    let processes = processes();
    for (pid, shim_socket) in shims(&processes) {
        if shim_socket == socket {
            kill_tree(&processes, pid);
        }
    }
}

/// Kills the shims (and their containers) of nodes whose owner process is gone, and unpins
/// the CRI network namespaces no process uses any more.
pub(super) fn sweep_stale() {
    let before = processes();
    for (pid, socket) in shims(&before) {
        // The socket is <nodes dir>/<node>/containerd/containerd.sock.
        let nodes_dir = socket
            .ancestors()
            .find(|dir| crate::cluster::workdir::is_node_dir(dir));
        if nodes_dir.is_some_and(|dir| !crate::cluster::workdir::owner_alive(dir)) {
            kill_tree(&before, pid);
        }
    }
    // Killed processes leave their namespaces once they have exited.
    std::thread::sleep(std::time::Duration::from_millis(200));
    let in_use: Vec<u64> = processes()
        .iter()
        .filter_map(|process| {
            namespace_inode(&PathBuf::from(format!("/proc/{}/ns/net", process.pid)))
        })
        .collect();
    for path in network_namespaces() {
        let is_cri = path
            .file_name()
            .and_then(|name| name.to_str())
            .is_some_and(|name| name.starts_with("cni-"));
        if is_cri && namespace_inode(&path).is_some_and(|inode| !in_use.contains(&inode)) {
            crate::cluster::workdir::unmount_under(&path);
            let _ = std::fs::remove_file(&path);
        }
    }
}

/// One process of `/proc`.
struct Process {
    pid: libc::pid_t,
    parent: libc::pid_t,
    args: Vec<Vec<u8>>,
}

/// Every process now (those that vanish while being read are left out).
fn processes() -> Vec<Process> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| {
            let pid = entry.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
            // "pid (comm) state ppid ...": comm may hold spaces and parentheses.
            let parent = stat.rsplit_once(") ")?.1.split(' ').nth(1)?.parse().ok()?;
            let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
            let args = cmdline
                .split(|&byte| byte == 0)
                .filter(|arg| !arg.is_empty())
                .map(<[u8]>::to_vec)
                .collect();
            Some(Process { pid, parent, args })
        })
        .collect()
}

/// The runc shims among `processes`, with the containerd socket each serves (`-address`).
fn shims(processes: &[Process]) -> Vec<(libc::pid_t, PathBuf)> {
    processes
        .iter()
        .filter(|process| {
            process
                .args
                .first()
                .is_some_and(|program| program.ends_with(b"containerd-shim-runc-v2"))
        })
        .filter_map(|process| {
            let at = process.args.iter().position(|arg| arg == b"-address")?;
            let socket = process.args.get(at + 1)?;
            let socket = std::str::from_utf8(socket).ok()?;
            Some((process.pid, PathBuf::from(socket)))
        })
        .collect()
}

/// SIGKILLs `root` and every descendant of it, children first.
fn kill_tree(processes: &[Process], root: libc::pid_t) {
    for child in processes.iter().filter(|process| process.parent == root) {
        kill_tree(processes, child.pid);
    }
    // SAFETY: a plain syscall on a process of a node (never pid 0 or -1: both are real pids).
    unsafe { libc::kill(root, libc::SIGKILL) };
}

/// The inode number identifying the namespace behind `path`.
fn namespace_inode(path: &Path) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|meta| meta.ino())
}

/// Removes kube-proxy's chains and rules (`kube-proxy --cleanup`).
pub(super) fn remove_proxy_rules(program: &Path) {
    let _ = Command::new(program)
        .arg("--cleanup")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// The pinned network namespaces now, by their real paths (`/var/run` is usually a link to
/// `/run`, and mount points are listed by real path).
pub(super) fn network_namespaces() -> Vec<PathBuf> {
    let dir = std::fs::canonicalize(NETNS_DIR).unwrap_or_else(|_| PathBuf::from(NETNS_DIR));
    std::fs::read_dir(dir)
        .map(|entries| entries.flatten().map(|entry| entry.path()).collect())
        .unwrap_or_default()
}

/// Unpins and removes the CRI's network namespaces created since `before` was taken (their
/// pods were killed without a CNI teardown).
pub(super) fn remove_network_namespaces(before: &[PathBuf]) {
    for path in network_namespaces() {
        let is_cri = path
            .file_name()
            .and_then(|name| name.to_str())
            .is_some_and(|name| name.starts_with("cni-"));
        if is_cri && !before.contains(&path) {
            crate::cluster::workdir::unmount_under(&path);
            let _ = std::fs::remove_file(&path);
        }
    }
}
