//! One Consul process of a [`super::RealConsul`]: its command line, ports and data dir, and
//! the handles a test uses to kill, restart, pause and partition it.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use super::error::RealConsulError;
use super::options::{Shape, Tls};
use super::proxy::Proxy;
use crate::cluster::ports::stable_ports;
use crate::cluster::processes::ManagedProcess;
use crate::version::Version;

/// How long a graceful stop waits for the process before SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(10);

/// What a member is started with; the same on every restart.
#[derive(Debug, Clone)]
pub(super) struct Plan {
    node: String,
    http_port: u16,
    /// Set with [`super::Options::tls`].
    https_port: Option<u16>,
    server_port: u16,
    args: Vec<String>,
    log_dir: PathBuf,
}

/// The members' plans: ports picked now, every server told every other's Serf address, the
/// command line in the syntax of the binary's `version`.
pub(super) fn plan(
    shape: Shape,
    count: usize,
    dir: &Path,
    master_token: Option<&str>,
    tls: Option<&Tls>,
    version: Version,
) -> Result<Vec<Plan>, RealConsulError> {
    // The fifth port is the HTTPS one, used only with `tls`.
    // Below the ephemeral range: a killed member restarts on the same ports, which an
    // outgoing connection could otherwise take while it is down.
    let all = stable_ports(5 * count).map_err(|e| RealConsulError::Io {
        context: "picking ports".into(),
        source: std::io::Error::other(e.to_string()),
    })?;
    let ports: Vec<[u16; 5]> = all
        .chunks_exact(5)
        .map(|c| [c[0], c[1], c[2], c[3], c[4]])
        .collect();
    // Every member joins through the servers' Serf ports (the client agent is the last).
    let servers = match shape {
        Shape::Dev => 1,
        Shape::Cluster => count - 1,
    };
    let joins: Vec<String> = ports[..servers]
        .iter()
        .map(|[_, serf_lan, _, _, _]| format!("-retry-join=127.0.0.1:{serf_lan}"))
        .collect();
    let mut plans = Vec::with_capacity(count);
    for (i, [http, serf_lan, serf_wan, server, https]) in ports.into_iter().enumerate() {
        let node = match shape {
            Shape::Dev => "dev".to_string(),
            Shape::Cluster if i < servers => format!("s{}", i + 1),
            Shape::Cluster => "agent".to_string(),
        };
        let mut args = vec![
            "agent".to_string(),
            format!("-node={node}"),
            "-bind=127.0.0.1".into(),
            "-client=127.0.0.1".into(),
            format!("-http-port={http}"),
            // No DNS server: the tests do not use it, and its start can time out on a loaded
            // machine ("timeout starting DNS servers"), which ends the agent.
            "-dns-port=-1".into(),
            format!(
                "-hcl=ports {{ serf_lan = {serf_lan} serf_wan = {serf_wan} server = {server} }}"
            ),
            "-log-level=debug".into(),
        ];
        args.extend(grpc_off(version));
        if let Some(tls) = tls {
            args.extend([
                format!("-hcl=ports {{ https = {https} }}"),
                format!("-hcl=cert_file = {}", hcl_path(&tls.cert_file)),
                format!("-hcl=key_file = {}", hcl_path(&tls.key_file)),
                format!("-hcl=ca_file = {}", hcl_path(&tls.ca_file)),
                format!("-hcl=verify_incoming_https = {}", tls.require_client_cert),
            ]);
        }
        match shape {
            Shape::Dev => args.push("-dev".into()),
            Shape::Cluster => {
                let data = dir.join(format!("{node}-data"));
                std::fs::create_dir_all(&data)
                    .map_err(RealConsulError::io(format!("creating {}", data.display())))?;
                args.push(format!("-data-dir={}", data.display()));
                if i < servers {
                    args.extend([
                        "-server".to_string(),
                        format!("-bootstrap-expect={servers}"),
                        // Consul's recommended production timing (the default, 5, is for
                        // small development machines).
                        "-hcl=performance { raft_multiplier = 1 }".into(),
                    ]);
                }
                args.extend(joins.iter().cloned());
            }
        }
        if let Some(token) = master_token {
            args.extend(acl_args(version, token));
        }
        plans.push(Plan {
            node,
            http_port: http,
            https_port: tls.map(|_| https),
            server_port: server,
            args,
            log_dir: dir.to_path_buf(),
        });
    }
    Ok(plans)
}

/// No gRPC listener: a dev agent of Consul 1.3 to 1.13 listens on 8502, and every agent of
/// 1.14 and later on 8502 and 8503 (TLS), so two agents on one host would collide. Older
/// versions know neither key and refuse an unknown one.
fn grpc_off(version: Version) -> Vec<String> {
    if version.at_least(1, 14) {
        vec!["-hcl=ports { grpc = -1 grpc_tls = -1 }".into()]
    } else if version.at_least(1, 3) {
        vec!["-hcl=ports { grpc = -1 }".into()]
    } else {
        Vec::new()
    }
}

/// ACLs on, denying by default, with `token` as the management and the agent's token: the
/// `acl` block of Consul 1.4 and later (`initial_management` since 1.11, where `master` is
/// deprecated), else the legacy keys that Consul 1.0 to 1.3 read.
fn acl_args(version: Version, token: &str) -> Vec<String> {
    if version.at_least(1, 4) {
        let management = if version.at_least(1, 11) {
            "initial_management"
        } else {
            "master"
        };
        vec![
            "-hcl=primary_datacenter = \"dc1\"".into(),
            format!(
                "-hcl=acl {{ enabled = true default_policy = \"deny\" \
                 down_policy = \"extend-cache\" \
                 tokens {{ {management} = \"{token}\" agent = \"{token}\" }} }}"
            ),
        ]
    } else {
        vec![
            "-hcl=acl_datacenter = \"dc1\"".into(),
            "-hcl=acl_default_policy = \"deny\"".into(),
            "-hcl=acl_down_policy = \"extend-cache\"".into(),
            format!("-hcl=acl_master_token = \"{token}\""),
            format!("-hcl=acl_agent_token = \"{token}\""),
        ]
    }
}

/// A path as an HCL string (quoted and escaped as JSON, whose strings HCL reads alike).
fn hcl_path(path: &Path) -> String {
    serde_json::Value::from(path.display().to_string()).to_string()
}

/// One Consul process with a proxy in front of its HTTP port.
#[derive(Debug)]
pub struct Member {
    binary: PathBuf,
    plan: Plan,
    process: Mutex<Option<ManagedProcess>>,
    starts: AtomicU32,
    proxy: Proxy,
}

impl Member {
    pub(super) async fn launch(binary: PathBuf, plan: Plan) -> Result<Self, RealConsulError> {
        let proxy = Proxy::start(plan.http_port).await?;
        let member = Self {
            binary,
            plan,
            process: Mutex::new(None),
            starts: AtomicU32::new(0),
            proxy,
        };
        member.restart()?;
        Ok(member)
    }

    /// The node name (`dev`, or `s1`..`s3`).
    pub fn node(&self) -> &str {
        &self.plan.node
    }

    /// The HTTP URL through the proxy (what an operator under test is given).
    pub fn url(&self) -> String {
        self.proxy.url()
    }

    /// The HTTP URL of the process itself, bypassing the proxy.
    pub fn direct_url(&self) -> String {
        format!("http://{}", self.direct_addr())
    }

    /// `https://127.0.0.1:<port>` of the process' HTTPS port (no proxy), when started with
    /// [`super::Options::tls`].
    pub fn https_url(&self) -> Option<String> {
        self.plan
            .https_port
            .map(|port| format!("https://127.0.0.1:{port}"))
    }

    /// The address of the process' own HTTP port, bypassing the proxy.
    pub fn direct_addr(&self) -> std::net::SocketAddr {
        std::net::SocketAddr::from(([127, 0, 0, 1], self.plan.http_port))
    }

    /// The Raft address, as `/v1/status/leader` names it.
    pub fn raft_address(&self) -> String {
        format!("127.0.0.1:{}", self.plan.server_port)
    }

    /// The process id while running.
    pub fn pid(&self) -> Option<u32> {
        self.lock().as_ref().map(ManagedProcess::pid)
    }

    /// Whether the process runs (it may be paused).
    pub fn is_running(&self) -> bool {
        self.lock()
            .as_mut()
            .is_some_and(|process| process.exited().is_none())
    }

    /// Whether the process exited by itself (a member killed through [`Member::kill`] or
    /// [`Member::stop`] has no process, and does not count).
    pub fn exited(&self) -> bool {
        self.lock()
            .as_mut()
            .is_some_and(|process| process.exited().is_some())
    }

    /// Kills the process at once (SIGKILL), as a crash would.
    pub fn kill(&self) {
        if let Some(mut process) = self.lock().take() {
            process.stop(Duration::ZERO);
        }
    }

    /// Stops the process with SIGTERM (Consul's graceful shutdown, without leaving the
    /// cluster), SIGKILL after a grace period.
    pub fn stop(&self) {
        if let Some(mut process) = self.lock().take() {
            process.stop(STOP_GRACE);
        }
    }

    /// Starts the process again with the same command line, ports and data dir (a no-op while
    /// it runs). Each start logs to its own file.
    pub fn restart(&self) -> Result<(), RealConsulError> {
        let mut process = self.lock();
        if process
            .as_mut()
            .is_some_and(|running| running.exited().is_none())
        {
            return Ok(());
        }
        let start = self.starts.fetch_add(1, Ordering::Relaxed) + 1;
        let log = self
            .plan
            .log_dir
            .join(format!("{}.{start}.log", self.plan.node));
        let spawned =
            ManagedProcess::spawn("consul", &self.binary, &self.plan.args, log).map_err(|e| {
                RealConsulError::Io {
                    context: format!("starting consul {}", self.plan.node),
                    source: std::io::Error::other(e.to_string()),
                }
            })?;
        *process = Some(spawned);
        Ok(())
    }

    /// Freezes the process (SIGSTOP): it neither answers nor takes part in Raft until
    /// [`Member::resume`].
    pub fn pause(&self) {
        self.signal(libc::SIGSTOP);
    }

    /// Lets a paused process run again (SIGCONT).
    pub fn resume(&self) {
        self.signal(libc::SIGCONT);
    }

    /// Cuts the operator off from this member: every connection through the proxy, open or
    /// new, is held without an answer (a network partition, not a refusal) until
    /// [`Member::heal`].
    pub fn partition(&self) {
        self.proxy.partition();
    }

    /// Ends a [`Member::partition`]: the held connections are closed, new ones pass.
    pub fn heal(&self) {
        self.proxy.heal();
    }

    /// The last lines of the current process' log.
    pub fn log_tail(&self) -> String {
        self.lock()
            .as_ref()
            .map(ManagedProcess::log_tail)
            .unwrap_or_else(|| "(not running)".into())
    }

    fn signal(&self, signal: libc::c_int) {
        if let Some(process) = self.lock().as_ref() {
            process.signal(signal);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<ManagedProcess>> {
        self.process
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        self.kill();
    }
}
