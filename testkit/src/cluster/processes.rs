//! Child processes of a test cluster (etcd, kube-apiserver, kube-controller-manager), and
//! [`spawn_tied`] for any other child that must die with this process (the sandbox's operator).
//!
//! Every child is spawned by one long-lived thread with `PR_SET_PDEATHSIG = SIGKILL`. The kernel
//! sends that signal when the *thread* that forked the child exits, so the spawning thread must
//! outlive every cluster: it lives as long as the process (its channel sender is a static). The
//! children therefore die with the test binary even when it panics or is SIGKILLed.

use std::fs::File;
use std::io;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::error::ClusterError;

/// How many log lines a startup error quotes.
const LOG_TAIL_LINES: usize = 40;

/// A command for the spawner thread, with where to send the result.
struct SpawnRequest {
    command: Command,
    reply: mpsc::Sender<io::Result<Child>>,
}

/// The channel to the process-lifetime spawner thread, started on first use.
fn spawner() -> &'static mpsc::Sender<SpawnRequest> {
    static SPAWNER: OnceLock<mpsc::Sender<SpawnRequest>> = OnceLock::new();
    SPAWNER.get_or_init(|| {
        let (sender, requests) = mpsc::channel::<SpawnRequest>();
        // The thread ends only when every sender is gone, and the static one never is.
        let spawned = std::thread::Builder::new()
            .name("testkit-cluster-spawner".into())
            .spawn(move || {
                for SpawnRequest { mut command, reply } in requests {
                    // The requester may have given up waiting; nothing to do then.
                    let _ = reply.send(command.spawn());
                }
            });
        if let Err(error) = spawned {
            panic!("testkit: cannot start the cluster's process-spawner thread: {error}");
        }
        sender
    })
}

/// Makes `command` die with this process: SIGKILL on the death of the spawning thread, its own
/// process group (so a terminal's Ctrl-C reaches only us, and we stop the children in order).
fn tie_to_this_process(command: &mut Command) {
    let parent = libc::pid_t::try_from(std::process::id()).unwrap_or(libc::pid_t::MAX);
    command.process_group(0);
    // SAFETY: the closure runs between fork and exec and only calls async-signal-safe functions.
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(io::Error::last_os_error());
            }
            // The parent may have died before prctl took effect: no signal would ever come.
            if libc::getppid() != parent {
                libc::_exit(1);
            }
            Ok(())
        });
    }
}

/// Spawns `command` through the spawner thread so that it dies with this process (SIGKILL when
/// the process exits, even by a crash) and runs in its own process group (a terminal's Ctrl-C
/// reaches only this process, which stops its children itself).
pub(crate) fn spawn_tied(mut command: Command) -> io::Result<Child> {
    tie_to_this_process(&mut command);
    let (reply, result) = mpsc::channel();
    let spawner_gone = || io::Error::other("the spawner thread is gone");
    spawner()
        .send(SpawnRequest { command, reply })
        .map_err(|_| spawner_gone())?;
    result.recv().map_err(|_| spawner_gone())?
}

/// A running cluster process whose output goes to a log file. Killed when dropped.
#[derive(Debug)]
pub(crate) struct ManagedProcess {
    name: &'static str,
    child: Child,
    log: PathBuf,
}

impl ManagedProcess {
    /// Spawns `program args…` through the spawner thread, stdout and stderr appended to `log`.
    pub(crate) fn spawn(
        name: &'static str,
        program: &Path,
        args: &[String],
        log: PathBuf,
    ) -> Result<Self, ClusterError> {
        let spawn_error = |source| ClusterError::Spawn {
            process: name,
            source,
        };
        let stdout =
            File::create(&log).map_err(ClusterError::io(format!("creating {}", log.display())))?;
        let stderr = stdout.try_clone().map_err(spawn_error)?;
        let mut command = Command::new(program);
        command
            .args(args)
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr);
        let child = spawn_tied(command).map_err(spawn_error)?;
        Ok(Self { name, child, log })
    }

    /// The program's name, as in its log file's name.
    pub(crate) fn name(&self) -> &'static str {
        self.name
    }

    /// The process id (for reading its `/proc` statistics).
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The exit status if the process has exited.
    pub(crate) fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// The last lines of the process log.
    pub(crate) fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n")
    }

    /// A `NotReady` error for this process, quoting its log.
    pub(crate) fn not_ready(&self, reason: String) -> ClusterError {
        ClusterError::NotReady {
            process: self.name,
            reason,
            log: self.log.clone(),
            log_tail: self.log_tail(),
        }
    }

    /// Sends SIGTERM, waits up to `grace` for the exit, then SIGKILLs. A zero grace kills at once.
    pub(crate) fn stop(&mut self, grace: Duration) {
        if self.exited().is_some() {
            return;
        }
        if !grace.is_zero() && self.signal(libc::SIGTERM) {
            let deadline = Instant::now() + grace;
            while Instant::now() < deadline {
                if self.exited().is_some() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Sends `signal` to the process; false if that failed.
    pub(crate) fn signal(&self, signal: libc::c_int) -> bool {
        let Ok(pid) = libc::pid_t::try_from(self.child.id()) else {
            return false;
        };
        // SAFETY: plain syscall on our own, not yet reaped, child.
        unsafe { libc::kill(pid, signal) == 0 }
    }
}

impl Drop for ManagedProcess {
    fn drop(&mut self) {
        self.stop(Duration::ZERO);
    }
}
