//! containerd (Debian's package) with its CRI plugin, in the node's own directories: its
//! configuration, start, image imports, and the container processes it runs.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::process::Command;

use super::network;
use crate::cluster::processes::ManagedProcess;
use crate::cluster::{ClusterError, readiness};

/// The containerd namespace the CRI plugin keeps Kubernetes' images and containers in.
const K8S_NAMESPACE: &str = "k8s.io";
/// Where Debian's containernetworking-plugins package puts the CNI plugins.
const CNI_BIN_DIR: &str = "/usr/lib/cni";
/// How long one `ctr` command may take (an image import included).
const CTR_TIMEOUT: Duration = Duration::from_secs(120);

/// The image the pod sandboxes run (its archive must be among the imported ones).
pub const PAUSE_IMAGE: &str = "docker.io/consul-elector-e2e/pause:3.2";

/// A running containerd.
#[derive(Debug)]
pub(super) struct Containerd {
    process: ManagedProcess,
    socket: PathBuf,
}

impl Containerd {
    /// Writes the configuration under `dir/containerd` and the CNI configuration of node
    /// `index` under `dir/cni`, starts containerd and waits until `ctr version` answers on its
    /// socket. Its log is `log_dir/<log_name>`.
    pub(super) async fn start(
        index: u8,
        dir: &Path,
        log_dir: &Path,
        log_name: &str,
    ) -> Result<Self, ClusterError> {
        let root = dir.join("containerd");
        let socket = root.join("containerd.sock");
        let cni_conf = dir.join("cni").join("net.d");
        network::write_cni_config(index, &cni_conf, &dir.join("cni"))?;
        let config_path = root.join("config.toml");
        std::fs::create_dir_all(&root)
            .map_err(ClusterError::io(format!("creating {}", root.display())))?;
        std::fs::write(&config_path, config(&root, &socket, &cni_conf)).map_err(
            ClusterError::io(format!("writing {}", config_path.display())),
        )?;
        let args = [format!("--config={}", config_path.display())];
        let mut process = ManagedProcess::spawn(
            "containerd",
            Path::new("containerd"),
            &args,
            log_dir.join(log_name),
        )?;
        readiness::wait_until(&mut process, "`ctr version` on its socket", || async {
            ctr(&socket, &["version"]).await.map(drop)
        })
        .await?;
        Ok(Self { process, socket })
    }

    /// The CRI socket.
    pub(super) fn socket(&self) -> &Path {
        &self.socket
    }

    /// Imports an image archive into the CRI plugin's namespace.
    pub(super) async fn import(&self, archive: &Path) -> Result<(), ClusterError> {
        let archive_arg = archive.display().to_string();
        ctr(&self.socket, &["images", "import", &archive_arg])
            .await
            .map(drop)
            .map_err(|reason| {
                self.process
                    .not_ready(format!("importing {archive_arg}: {reason}"))
            })
    }

    /// Kills every container it runs (and their shims), then containerd itself. Blocking: runs
    /// from `Drop`.
    pub(super) fn stop_with_containers(&mut self) {
        let socket = self.socket.display().to_string();
        let listing = std::process::Command::new("ctr")
            .args([
                "--address",
                &socket,
                "--namespace",
                K8S_NAMESPACE,
                "tasks",
                "ls",
            ])
            .output()
            .map(|output| String::from_utf8_lossy(&output.stdout).into_owned())
            .unwrap_or_default();
        for (_, pid) in parse_tasks(&listing) {
            // A stopped task lists pid 0, which kill(2) would read as our own process group.
            if let Ok(pid @ 1..) = libc::pid_t::try_from(pid) {
                // SAFETY: a plain syscall; the pid is a container of this node's containerd.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
        self.process.stop(Duration::from_secs(5));
        super::teardown::kill_shims_of(&self.socket);
    }
}

/// Runs `ctr --address socket --namespace k8s.io args…` and returns its standard output.
async fn ctr(socket: &Path, args: &[&str]) -> Result<String, String> {
    let mut command = Command::new("ctr");
    command
        .arg("--address")
        .arg(socket)
        .args(["--namespace", K8S_NAMESPACE])
        .args(args)
        .kill_on_drop(true);
    let output = tokio::time::timeout(CTR_TIMEOUT, command.output())
        .await
        .map_err(|_| format!("`ctr {}` took over {CTR_TIMEOUT:?}", args.join(" ")))?
        .map_err(|e| format!("cannot run ctr: {e}"))?;
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        Err(format!(
            "`ctr {}` failed ({}): {}",
            args.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    }
}

/// The `(task id, pid)` rows of `ctr tasks ls` (header `TASK PID STATUS`).
fn parse_tasks(listing: &str) -> Vec<(String, u32)> {
    listing
        .lines()
        .skip(1)
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let id = fields.next()?;
            let pid = fields.next()?.parse().ok()?;
            Some((id.to_owned(), pid))
        })
        .collect()
}

/// containerd's configuration: everything under `root`, the CRI plugin with runc through
/// cgroupfs, the bridge CNI, and the locally imported pause image.
fn config(root: &Path, socket: &Path, cni_conf: &Path) -> String {
    let pause = PAUSE_IMAGE;
    let root = root.display();
    format!(
        r#"version = 2
root = "{root}/root"
state = "{root}/state"
# Storage drivers this node never uses: skipping them makes the start quick and quiet.
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs"]

[grpc]
  address = "{socket}"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{pause}"
  # Some VMs refuse a negative oom_score_adj even to root; without this runc fails every
  # sandbox ("can't get final child's PID from pipe").
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{CNI_BIN_DIR}"
    conf_dir = "{cni_conf}"

[plugins."io.containerd.internal.v1.opt"]
  path = "{root}/opt"
"#,
        socket = socket.display(),
        cni_conf = cni_conf.display(),
    )
}

#[cfg(test)]
mod tests {
    use super::parse_tasks;

    #[test]
    fn task_listing_is_parsed() {
        let listing = "TASK    PID     STATUS\nabc     1234    RUNNING\ndef     0       STOPPED\n";
        assert_eq!(
            parse_tasks(listing),
            vec![("abc".to_owned(), 1234), ("def".to_owned(), 0)]
        );
    }
}
