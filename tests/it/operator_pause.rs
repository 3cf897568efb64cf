//! The operator binary, two replicas as processes: the active one is paused (SIGSTOP) right
//! after it started a move, for longer than the Lease duration, while the standby takes over
//! and moves leaders; then it is resumed (SIGCONT). Nothing it had queued may reach the API
//! server: the API server's own audit log must show no write of the paused replica after the
//! standby's first, and Consul no write of it after it resumed (docs/design.md rule 8).

use crate::harness;

use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use harness::{Harness, LEASE_DURATION, LEASE_RENEW_DEADLINE, SOON};
use serde_json::json;
use testkit::cluster::{TestCluster, with_namespace};
use tokio::process::{Child, Command};

/// How long the active replica stays paused: well past the Lease duration.
const PAUSE: Duration = Duration::from_secs(9);

/// One operator process acting as its own user (so the audit log tells the replicas apart).
/// Its directory (kubeconfig and log) is removed when it is dropped, unless the test failed.
struct Replica {
    child: Child,
    metrics: SocketAddr,
    user: String,
    log: PathBuf,
}

impl Drop for Replica {
    fn drop(&mut self) {
        // A failed test keeps the log its message names.
        if let Some(dir) = self.log.parent().filter(|_| !std::thread::panicking()) {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

impl Replica {
    /// Starts the operator binary as `user` (its instance name too), watching the harness'
    /// namespace with the harness' Lease timing and Consul.
    async fn start(h: &Harness, cluster: &TestCluster, user: &str) -> Replica {
        h.grant_user(user).await;
        let dir = std::env::temp_dir().join(format!("consul-elector-{}-{user}", h.ns));
        std::fs::create_dir_all(&dir).expect("replica directory");
        let kubeconfig = dir.join("kubeconfig");
        cluster
            .write_kubeconfig_as(&kubeconfig, user)
            .expect("kubeconfig");
        let metrics = free_port();
        let log = dir.join("operator.log");
        let out = std::fs::File::create(&log).expect("log file");
        let err = out.try_clone().expect("log file");
        let secs = |d: Duration| format!("{}s", d.as_secs());
        let child = Command::new(env!("CARGO_BIN_EXE_consul-elector"))
            .args([
                "run",
                "--watch-namespaces",
                &h.ns,
                "--lease-namespace",
                &h.ns,
            ])
            .args(["--instance-name", user, "--cluster-name", "test-cluster"])
            .args(["--lease-duration", &secs(LEASE_DURATION)])
            .args(["--lease-renew-deadline", &secs(LEASE_RENEW_DEADLINE)])
            .args(["--metrics-addr", &metrics.to_string()])
            .env("KUBECONFIG", &kubeconfig)
            .env("CONSUL_HTTP_ADDR", h.emu().url())
            // Its own token (the emulator enforces no ACLs): Consul's counters tell the
            // replicas apart.
            .env("CONSUL_HTTP_TOKEN", consul_token(user))
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .kill_on_drop(true)
            .spawn()
            .expect("start the operator binary");
        Replica {
            child,
            metrics,
            user: user.into(),
            log,
        }
    }

    /// Whether it holds the Lease and writes (its `consul_elector_active` gauge).
    async fn is_active(&self) -> bool {
        let url = format!("http://{}/metrics", self.metrics);
        let Ok(response) = reqwest::get(&url).await else {
            return false;
        };
        response.text().await.is_ok_and(|text| {
            text.lines()
                .any(|l| l.starts_with("consul_elector_active ") && l.ends_with(" 1"))
        })
    }

    /// Waits (at most `timeout`) until it is active; panics otherwise.
    async fn wait_active(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while !self.is_active().await {
            assert!(
                Instant::now() < deadline,
                "{} did not become active within {timeout:?}; its log: {}",
                self.user,
                self.log.display()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Sends `signal` (`STOP`, `CONT`) to the process.
    fn signal(&self, signal: &str) {
        let pid = self.child.id().expect("the replica runs").to_string();
        let status = std::process::Command::new("kill")
            .args([&format!("-{signal}"), &pid])
            .status()
            .expect("kill");
        assert!(status.success(), "kill -{signal} {pid}");
    }
}

/// The Consul token replica `user` presents.
fn consul_token(user: &str) -> String {
    format!("token-of-{user}")
}

/// A loopback address whose port was free a moment ago.
fn free_port() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
}

/// The writes (not to the Lease) of `user` the API server recorded as applied, or without an
/// answer it recorded.
fn writes_of(cluster: &TestCluster, user: &str) -> Vec<testkit::cluster::audit::AuditWrite> {
    cluster
        .audit_writes()
        .expect("the audit log")
        .into_iter()
        .filter(|w| w.writer() == user && (w.succeeded() || w.code == 0))
        .filter(|w| w.resource != "leases")
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_active_replica_writes_nothing_after_it_resumes() {
    with_namespace("ha-pause", |admin, ns| async move {
        let cluster = TestCluster::shared().expect("cluster (with_namespace checked)");
        let h = Harness::new(admin, ns).await;
        h.deployment("web", 3).await;
        let mut active = Replica::start(&h, cluster, "replica-a").await;
        active.wait_active(SOON).await;
        let standby = Replica::start(&h, cluster, "replica-b").await;
        h.election("web", json!({"selector": {"matchLabels": {"app": "web"}}}))
            .await;
        let first = h.wait_elected("web", None).await;

        // A move starts; the active replica is paused in the middle of it.
        h.pods()
            .delete(&first.pod, &Default::default())
            .await
            .expect("delete the leader");
        let started = h
            .pods_become(SOON, |pods| {
                harness::role_in(pods, &first.pod) != Some("leader")
                    || !pods.contains_key(&first.pod)
            })
            .await;
        assert!(started, "the move started");
        active.signal("STOP");
        let paused = tokio::time::Instant::now();

        // The standby takes over, finishes the move and makes three more.
        standby.wait_active(LEASE_DURATION + SOON).await;
        let mut last = h.wait_elected("web", Some(&first.pod)).await;
        for _ in 0..3 {
            h.pods()
                .delete(&last.pod, &Default::default())
                .await
                .expect("delete the leader");
            let next = h.wait_elected("web", Some(&last.pod)).await;
            assert!(next.token > last.token, "the token grows");
            last = next;
        }

        // The fault itself: the pause lasts PAUSE, then the process runs on.
        tokio::time::sleep_until(paused + PAUSE).await;
        let consul_writes_before = h
            .emu()
            .stats()
            .writes_with_token(&consul_token(&active.user));
        active.signal("CONT");
        let exit = tokio::time::timeout(SOON, active.child.wait())
            .await
            .expect("the resumed replica stops")
            .expect("its exit status");
        assert!(
            !exit.success(),
            "it stopped for having lost the Lease: {exit}"
        );
        // Nor did anything of it reach Consul: no renewal, release or acquisition it had
        // queued (the counter counts a request when it arrives, before it is answered).
        assert_eq!(
            h.emu()
                .stats()
                .writes_with_token(&consul_token(&active.user)),
            consul_writes_before,
            "Consul writes of the paused replica after it resumed; its log: {}",
            active.log.display()
        );

        let standby_first = writes_of(cluster, &standby.user)
            .first()
            .map(|w| w.at)
            .expect("the standby wrote");
        let late: Vec<String> = writes_of(cluster, &active.user)
            .into_iter()
            .filter(|w| w.at >= standby_first)
            .map(|w| format!("{} {} {:?} at {}", w.verb, w.resource, w.name, w.at))
            .collect();
        assert_eq!(
            late,
            Vec::<String>::new(),
            "writes of the paused replica after the standby's first write ({standby_first}); \
             its log: {}",
            active.log.display()
        );
        // Nothing of the resumed replica undid the standby's moves.
        let status = h.status("web").await;
        assert_eq!(status.fencing_token, Some(last.token), "the token stays");
        assert_eq!(status.transitions, last.transitions, "the transitions stay");
        assert_eq!(h.wait_elected("web", None).await, last, "no leader change");
        h.finish().await;
    })
    .await;
}
