//! A real Consul for tests: a single `consul agent -dev`, or a Raft cluster of three servers on
//! loopback, with handles to kill, restart, pause and partition each member, and the ACL
//! system switched on when a test needs tokens.
//!
//! # Where the binary comes from
//! `CONSUL_BIN` names it. Without it, [`RealConsul::start`] returns `Ok(None)` after printing
//! `SKIPPED: ...` so a test without a real Consul passes visibly; with `CI=true` that is an
//! error instead, so a CI run can never skip these tests silently. Any Consul from 1.0 on works:
//! the harness reads the binary's version and starts each agent in that version's syntax (no
//! gRPC listener, the ACL system it has), and the tests read the server's version where
//! versions answer differently.
//!
//! # Shapes
//! - [`Shape::Dev`]: one `agent -dev` (in-memory, a server and its own agent).
//! - [`Shape::Cluster`]: three servers (`-bootstrap-expect=3`) and one client agent, each with
//!   its own data dir and ports, so a member killed and restarted comes back with its Raft log
//!   and the KV store. The client agent (the last member, node `agent`) is the one the
//!   operator talks to, as it would talk to the agent on its Kubernetes node; sessions it
//!   creates belong to that agent's node.
//!
//! Every member's HTTP port sits behind a [`Proxy`]: [`Member::url`] goes through it, so a test
//! can partition the operator from the agent it talks to ([`Member::partition`]) while the
//! server itself keeps running. All ports are picked at runtime.
//!
//! # HTTPS
//! With [`Options::tls`] every member also serves HTTPS ([`Member::https_url`], not proxied)
//! with the given certificate, and can require client certificates; its plain HTTP port stays,
//! so the harness' own requests need no certificate. Consul reads the files at every start of
//! a member: a test changes the server certificate by rewriting them and restarting the member.

mod acl;
mod error;
mod member;
mod meter;
mod options;
mod proxy;
mod rules;

use std::path::PathBuf;
use std::time::{Duration, Instant};

pub use crate::version::Version;
pub use error::RealConsulError;
pub use member::Member;
pub use meter::Meter;
pub use options::{Options, Shape, Tls};
pub use proxy::Proxy;
pub use rules::{AclRules, OPERATOR_RULES};

use crate::cluster::workdir::ClusterDir;

/// The environment variable naming the Consul binary.
pub const CONSUL_BIN_ENV: &str = "CONSUL_BIN";

/// How many times [`RealConsul::start_with`] starts a cluster whose member exited at once.
pub const START_ATTEMPTS: u32 = 3;

/// How long a start waits for a cluster leader and the members' catalog registration.
const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// How long the harness waits for one of its own reads (a paused member never answers).
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// The Consul binary `CONSUL_BIN` names: `None` when it is unset or empty, an error when it
/// names no file. For a command the user asked to run on a real Consul (the sandbox's and
/// the benchmark driver's `--consul real`), where an unset variable is the user's error.
pub fn configured_binary() -> Result<Option<PathBuf>, RealConsulError> {
    match std::env::var_os(CONSUL_BIN_ENV) {
        Some(path) if !path.is_empty() => {
            let path = PathBuf::from(path);
            if path.is_file() {
                Ok(Some(path))
            } else {
                Err(RealConsulError::Binary(format!(
                    "{CONSUL_BIN_ENV}={} is not a file",
                    path.display()
                )))
            }
        }
        _ => Ok(None),
    }
}

/// The Consul binary from `CONSUL_BIN` for a test; `None` (after printing why) when it is unset
/// outside CI; an error when it is unset on CI or names nothing executable.
pub fn consul_binary() -> Result<Option<PathBuf>, RealConsulError> {
    match configured_binary()? {
        Some(path) => Ok(Some(path)),
        None if std::env::var("CI").is_ok_and(|v| v == "true") => Err(RealConsulError::Binary(
            format!("{CONSUL_BIN_ENV} is unset and CI=true: CI must run the real-Consul tests"),
        )),
        None => {
            eprintln!(
                "SKIPPED: {CONSUL_BIN_ENV} is unset, so the tests against a real Consul do not \
                 run (set it to a consul binary, 1.0 or later)"
            );
            Ok(None)
        }
    }
}

/// The version `binary version` prints on its first line (`Consul v1.8.7`).
fn binary_version(binary: &std::path::Path) -> Result<Version, RealConsulError> {
    let output = std::process::Command::new(binary)
        .arg("version")
        .output()
        .map_err(RealConsulError::io(format!(
            "running {} version",
            binary.display()
        )))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let first = stdout.lines().next().unwrap_or_default();
    first
        .strip_prefix("Consul ")
        .and_then(Version::parse)
        .ok_or_else(|| {
            RealConsulError::Binary(format!(
                "{} version printed {first:?}, not `Consul vX.Y.Z`",
                binary.display()
            ))
        })
}

/// A running real Consul. Every process is killed when this is dropped (and when the test
/// binary dies).
#[derive(Debug)]
pub struct RealConsul {
    members: Vec<Member>,
    master_token: Option<String>,
    version: Version,
    http: reqwest::Client,
    _dir: ClusterDir,
}

impl RealConsul {
    /// Starts `shape` from `CONSUL_BIN` and waits until it has a leader and every member is
    /// registered in the catalog (sessions need that). `Ok(None)`: no binary, test skipped.
    pub async fn start(shape: Shape, options: Options) -> Result<Option<Self>, RealConsulError> {
        let Some(binary) = consul_binary()? else {
            return Ok(None);
        };
        Self::start_with(binary, shape, options).await.map(Some)
    }

    /// Like [`RealConsul::start`] with an explicit binary.
    ///
    /// The members' ports are picked free but released before Consul binds them, so another
    /// process can take one in between and a member exits ("address already in use"): a start
    /// whose member exits is tried again with new ports, [`START_ATTEMPTS`] times in all.
    pub async fn start_with(
        binary: PathBuf,
        shape: Shape,
        options: Options,
    ) -> Result<Self, RealConsulError> {
        let version = binary_version(&binary)?;
        let mut attempt = 1;
        loop {
            match Self::start_once(binary.clone(), version, shape, options.clone()).await {
                Err(RealConsulError::MemberExited { node, log_tail })
                    if attempt < START_ATTEMPTS =>
                {
                    eprintln!(
                        "testkit: consul {node} exited while starting (attempt {attempt}), \
                         starting again on other ports:\n{log_tail}"
                    );
                    attempt += 1;
                }
                result => return result,
            }
        }
    }

    async fn start_once(
        binary: PathBuf,
        version: Version,
        shape: Shape,
        options: Options,
    ) -> Result<Self, RealConsulError> {
        crate::cluster::install_crypto_provider();
        let dir = ClusterDir::create().map_err(|e| RealConsulError::Io {
            context: "creating the consul directory".into(),
            source: std::io::Error::other(e.to_string()),
        })?;
        let master_token = options.acl.then(|| uuid::Uuid::new_v4().to_string());
        let count = match shape {
            Shape::Dev => 1,
            Shape::Cluster => 4,
        };
        let plans = member::plan(
            shape,
            count,
            dir.path(),
            master_token.as_deref(),
            options.tls.as_ref(),
            version,
        )?;
        let mut members = Vec::with_capacity(count);
        for plan in plans {
            members.push(Member::launch(binary.clone(), plan).await?);
        }
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| RealConsulError::Http {
                what: "client".into(),
                detail: e.to_string(),
            })?;
        let consul = Self {
            members,
            master_token,
            version,
            http,
            _dir: dir,
        };
        consul.wait_ready(READY_TIMEOUT).await?;
        Ok(consul)
    }

    /// The URL the operator uses, through its proxy: the dev agent's, or the cluster's
    /// client agent's.
    pub fn url(&self) -> String {
        self.agent().url()
    }

    /// The member the operator talks to ([`RealConsul::url`]): the last one.
    pub fn agent(&self) -> &Member {
        &self.members[self.members.len() - 1]
    }

    /// The members, in start order: the servers, then (in a cluster) the client agent.
    pub fn members(&self) -> &[Member] {
        &self.members
    }

    /// The servers (every member of a dev agent, the first three of a cluster).
    pub fn servers(&self) -> &[Member] {
        match self.members.len() {
            1 => &self.members,
            n => &self.members[..n - 1],
        }
    }

    /// The ACL master token, when started with [`Options::acl`].
    pub fn master_token(&self) -> Option<&str> {
        self.master_token.as_deref()
    }

    /// Waits until every running member answers with a Raft leader and every running
    /// member's node has a passing `serfHealth` check; fails at once when a member's process exited by
    /// itself.
    pub async fn wait_ready(&self, timeout: Duration) -> Result<(), RealConsulError> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(exited) = self.members.iter().find(|m| m.exited()) {
                return Err(RealConsulError::MemberExited {
                    node: exited.node().to_string(),
                    log_tail: exited.log_tail(),
                });
            }
            let Err(reason) = self.ready_probe().await else {
                return Ok(());
            };
            if Instant::now() >= deadline {
                return Err(RealConsulError::NotReady {
                    reason,
                    log_tail: self.log_tails(),
                });
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn ready_probe(&self) -> Result<(), String> {
        let running: Vec<&Member> = self.members.iter().filter(|m| m.is_running()).collect();
        let Some(probe) = running.first() else {
            return Err("no member is running".into());
        };
        for member in &running {
            let leader = self
                .get_text(&member.direct_url(), "/v1/status/leader")
                .await?;
            if leader.trim().trim_matches('"').is_empty() {
                return Err(format!("{} knows no Raft leader yet", member.node()));
            }
        }
        for member in &running {
            // The agent's own anti-entropy can put the node in the catalog before the leader
            // registers its `serfHealth` check, and a session with default checks is refused
            // until that check exists.
            let path = format!("/v1/health/node/{}", member.node());
            let checks = self.get_text(&probe.direct_url(), &path).await?;
            if !serf_health_passing(&checks) {
                return Err(format!(
                    "node {} has no passing serfHealth check yet: {checks}",
                    member.node()
                ));
            }
        }
        let servers = self.servers();
        if servers.len() > 1 && servers.iter().all(Member::is_running) {
            // A server restarted after a kill answers with the leader before Raft counts it
            // healthy again: a fault injected meanwhile may leave no quorum.
            let health = self
                .get_text(&probe.direct_url(), "/v1/operator/autopilot/health")
                .await?;
            if !every_server_a_healthy_voter(&health, servers.len()) {
                return Err(format!(
                    "not every server is a healthy Raft voter yet: {health}"
                ));
            }
        }
        Ok(())
    }

    /// Index in [`RealConsul::members`] of the current Raft leader, asked of every running
    /// member until one answers with a leader.
    pub async fn leader(&self) -> Option<usize> {
        self.leader_other_than(None).await
    }

    /// Waits up to `bound` until a running member names a Raft leader other than member
    /// `old` (a member that still names `old` is passed over, so one slow to learn of the
    /// election does not hide it). A bound passed is an error quoting every member's log.
    pub async fn wait_leader_other_than(
        &self,
        old: usize,
        bound: Duration,
    ) -> Result<usize, RealConsulError> {
        let deadline = Instant::now() + bound;
        loop {
            if let Some(leader) = self.leader_other_than(Some(old)).await {
                return Ok(leader);
            }
            if Instant::now() >= deadline {
                return Err(RealConsulError::NotReady {
                    reason: format!("no Raft leader other than member {old} within {bound:?}"),
                    log_tail: self.log_tails(),
                });
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn leader_other_than(&self, old: Option<usize>) -> Option<usize> {
        for member in self.members.iter().filter(|m| m.is_running()) {
            let Ok(leader) = self
                .get_text(&member.direct_url(), "/v1/status/leader")
                .await
            else {
                continue;
            };
            let leader = leader.trim().trim_matches('"').to_string();
            let named = self.members.iter().position(|m| m.raft_address() == leader);
            if let Some(i) = named.filter(|i| Some(*i) != old) {
                return Some(i);
            }
        }
        None
    }

    /// The version of the binary every member runs.
    pub fn version(&self) -> Version {
        self.version
    }

    /// How many sessions the server holds (`/v1/session/list`, asked of member 0 directly).
    pub async fn session_count(&self) -> Result<usize, RealConsulError> {
        let http = |detail: String| RealConsulError::Http {
            what: "session list".into(),
            detail,
        };
        let body = self
            .get_text(&self.members[0].direct_url(), "/v1/session/list")
            .await
            .map_err(http)?;
        let sessions: Vec<serde_json::Value> =
            serde_json::from_str(&body).map_err(|e| http(e.to_string()))?;
        Ok(sessions.len())
    }

    async fn get_text(&self, base: &str, path: &str) -> Result<String, String> {
        self.get(base, path, self.master_token.as_deref()).await
    }

    /// `GET base+path` with `token`: the body of a 2xx answer.
    async fn get(&self, base: &str, path: &str, token: Option<&str>) -> Result<String, String> {
        // Short: a paused member must not hold a probe of every member for long.
        let mut request = self
            .http
            .get(format!("{base}{path}"))
            .timeout(PROBE_TIMEOUT);
        if let Some(token) = token {
            request = request.header("X-Consul-Token", token);
        }
        let response = request.send().await.map_err(|e| e.to_string())?;
        let status = response.status();
        let body = response.text().await.map_err(|e| e.to_string())?;
        if status.is_success() {
            Ok(body)
        } else {
            Err(format!("{path}: {status} {body}"))
        }
    }

    fn log_tails(&self) -> String {
        self.members
            .iter()
            .map(|m| format!("== {} ==\n{}", m.node(), m.log_tail()))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// Whether a `/v1/health/node/<node>` body holds a passing `serfHealth` check.
fn serf_health_passing(body: &str) -> bool {
    let Ok(checks) = serde_json::from_str::<Vec<serde_json::Value>>(body) else {
        return false;
    };
    checks
        .iter()
        .any(|c| c["CheckID"] == "serfHealth" && c["Status"] == "passing")
}

/// Whether autopilot's health report `body` counts `servers` servers, each a healthy voter.
fn every_server_a_healthy_voter(body: &str, servers: usize) -> bool {
    let Ok(health) = serde_json::from_str::<serde_json::Value>(body) else {
        return false;
    };
    let Some(reported) = health["Servers"].as_array() else {
        return false;
    };
    health["Healthy"] == true
        && reported.len() == servers
        && reported
            .iter()
            .all(|s| s["Healthy"] == true && s["Voter"] == true)
}

#[cfg(test)]
mod tests {
    use super::{every_server_a_healthy_voter, serf_health_passing};

    #[test]
    fn a_cluster_is_whole_only_with_every_server_a_healthy_voter() {
        let server = |healthy: bool, voter: bool| serde_json::json!({"Name": "s", "Healthy": healthy, "Voter": voter});
        let report = |healthy: bool, servers: Vec<serde_json::Value>| {
            serde_json::json!({"Healthy": healthy, "FailureTolerance": 1, "Servers": servers})
                .to_string()
        };
        let whole = report(true, vec![server(true, true); 3]);
        assert!(every_server_a_healthy_voter(&whole, 3));
        assert!(!every_server_a_healthy_voter(&whole, 4));
        let rejoining = report(
            true,
            vec![server(true, true), server(true, true), server(true, false)],
        );
        assert!(!every_server_a_healthy_voter(&rejoining, 3));
        let lagging = report(
            false,
            vec![server(true, true), server(true, true), server(false, true)],
        );
        assert!(!every_server_a_healthy_voter(&lagging, 3));
        assert!(!every_server_a_healthy_voter("null", 3));
    }

    #[test]
    fn only_a_passing_serf_health_check_makes_a_node_ready() {
        assert!(!serf_health_passing("[]"));
        assert!(!serf_health_passing("null"));
        assert!(!serf_health_passing(
            r#"[{"CheckID":"serfHealth","Status":"critical"}]"#
        ));
        assert!(!serf_health_passing(
            r#"[{"CheckID":"service:web","Status":"passing"}]"#
        ));
        assert!(serf_health_passing(
            r#"[{"CheckID":"serfHealth","Status":"passing"}]"#
        ));
    }
}
