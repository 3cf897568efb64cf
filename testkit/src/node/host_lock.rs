//! One node setup per host at a time. Nodes of this host share its network: the bridges and
//! pod ranges, kube-proxy's iptables chains (which a node's teardown removes) and the pinned
//! network namespaces. Two test runs starting nodes side by side would break each other, so a
//! node set holds an exclusive lock on a file for as long as it runs; a second run waits for it.

use std::fs::{File, TryLockError};
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::cluster::ClusterError;

/// The lock file (a tmpfs path: a reboot forgets it with the processes it guarded).
const LOCK_FILE: &str = "/run/consul-elector-node.lock";
/// How long a run waits for another run's nodes before giving up.
const WAIT: Duration = Duration::from_secs(60 * 60);
/// How often a waiting run tries again.
const RETRY: Duration = Duration::from_secs(1);

/// The held lock; dropping it (or the process ending) releases it.
#[derive(Debug)]
pub(super) struct HostLock {
    _file: File,
}

impl HostLock {
    /// Takes the lock, waiting up to an hour for another run to release it (saying once, on
    /// stderr, which process holds it).
    pub(super) async fn acquire() -> Result<Self, ClusterError> {
        Self::acquire_at(Path::new(LOCK_FILE), WAIT).await
    }

    async fn acquire_at(path: &Path, wait: Duration) -> Result<Self, ClusterError> {
        let mut file = File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(ClusterError::io(format!("opening {}", path.display())))?;
        let deadline = Instant::now() + wait;
        let mut said = false;
        loop {
            match file.try_lock() {
                Ok(()) => break,
                Err(TryLockError::WouldBlock) if Instant::now() < deadline => {
                    if !said {
                        let holder = std::fs::read_to_string(path).unwrap_or_default();
                        eprintln!(
                            "testkit: another run's node holds {} (process {}); waiting up to \
                             {wait:?}",
                            path.display(),
                            holder.trim()
                        );
                        said = true;
                    }
                    tokio::time::sleep(RETRY).await;
                }
                Err(TryLockError::WouldBlock) => {
                    return Err(ClusterError::Build(format!(
                        "another run's node held {} for over {wait:?}",
                        path.display()
                    )));
                }
                Err(TryLockError::Error(error)) => {
                    return Err(ClusterError::io(format!("locking {}", path.display()))(
                        error,
                    ));
                }
            }
        }
        // Who holds it, for the message of the next run that waits.
        let recorded = file
            .set_len(0)
            .and_then(|()| write!(file, "{}", std::process::id()));
        if let Err(error) = recorded {
            eprintln!(
                "testkit: cannot record the holder in {}: {error}",
                path.display()
            );
        }
        Ok(Self { _file: file })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_second_holder_waits_until_the_first_is_dropped() {
        let path = std::env::temp_dir().join(format!(
            "consul-elector-host-lock-test-{}.lock",
            std::process::id()
        ));
        let first = HostLock::acquire_at(&path, Duration::ZERO)
            .await
            .expect("the first run locks");
        let refused = HostLock::acquire_at(&path, Duration::ZERO).await;
        assert!(refused.is_err(), "a second run must not get the lock");
        let waiting = tokio::spawn({
            let path = path.clone();
            async move { HostLock::acquire_at(&path, Duration::from_secs(30)).await }
        });
        drop(first);
        let second = tokio::time::timeout(Duration::from_secs(30), waiting)
            .await
            .expect("the waiting run gets the lock once the first is gone")
            .expect("the task ran");
        assert!(second.is_ok(), "{second:?}");
        let holder = std::fs::read_to_string(&path).expect("the lock file");
        assert_eq!(holder, std::process::id().to_string());
        drop(second);
        let _ = std::fs::remove_file(&path);
    }
}
