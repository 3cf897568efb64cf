//! The `workload` binary (the end-to-end tests' pod image) over real HTTP: the pod name, the
//! probe flips, garbage input, and a prompt exit 0 on SIGTERM. The binary runs with `PORT=0`
//! and says which port it took on stdout; every wait is for a condition, under a timeout.

use std::net::SocketAddr;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::net::TcpStream;
use tokio::process::{Child, Command};
use tokio::time::timeout;

/// Bound on every single wait (start-up, one request, the exit).
const WAIT: Duration = Duration::from_secs(20);

/// The running binary; killed if a test fails before it exits on its own.
struct Workload {
    child: Child,
    addr: SocketAddr,
}

impl Workload {
    /// Starts the binary on a free port and waits for its "listening" line.
    async fn start(pod_name: Option<&str>) -> Workload {
        let mut command = Command::new(env!("CARGO_BIN_EXE_workload"));
        command
            .env("PORT", "0")
            .env_remove("POD_NAME")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .kill_on_drop(true);
        if let Some(name) = pod_name {
            command.env("POD_NAME", name);
        }
        let mut child = command.spawn().expect("spawn the workload binary");
        let stdout = child.stdout.take().expect("piped stdout");
        let mut line = String::new();
        timeout(WAIT, BufReader::new(stdout).read_line(&mut line))
            .await
            .expect("the workload printed no 'listening' line in time")
            .expect("read the workload's stdout");
        // "workload listening on 0.0.0.0:PORT as NAME"
        let port: u16 = line
            .strip_prefix("workload listening on 0.0.0.0:")
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|port| port.parse().ok())
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"));
        Workload {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
        }
    }

    /// Sends raw bytes on a fresh connection, closes its sending side, and returns
    /// everything the server sent back before closing the connection.
    async fn raw(&self, request: &[u8]) -> Vec<u8> {
        timeout(WAIT, async {
            let mut stream = TcpStream::connect(self.addr).await.expect("connect");
            stream.write_all(request).await.expect("write the request");
            stream.shutdown().await.expect("close the sending side");
            let mut answer = Vec::new();
            // A reset after a refused request counts as "whatever arrived before it".
            let _ = stream.read_to_end(&mut answer).await;
            answer
        })
        .await
        .expect("no answer in time")
    }

    /// One request; returns the status code and the body.
    async fn request(&self, method: &str, path: &str) -> (u16, String) {
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: workload\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
        );
        let answer = String::from_utf8(self.raw(head.as_bytes()).await).expect("UTF-8 answer");
        let status = answer
            .strip_prefix("HTTP/1.1 ")
            .and_then(|rest| rest.get(..3))
            .and_then(|code| code.parse().ok())
            .unwrap_or_else(|| panic!("not an HTTP answer: {answer:?}"));
        let body = answer
            .split_once("\r\n\r\n")
            .map(|(_, body)| body.to_string())
            .unwrap_or_default();
        (status, body)
    }

    async fn status(&self, method: &str, path: &str) -> u16 {
        self.request(method, path).await.0
    }

    /// Sends `signal` and waits for the process to exit.
    async fn signal_and_wait(mut self, signal: libc::c_int) -> ExitStatus {
        let pid = self.child.id().expect("the workload is still running");
        let pid = libc::pid_t::try_from(pid).expect("pid fits pid_t");
        // SAFETY: kill(2) on our own child's pid, which is not reaped before `wait` below.
        let rc = unsafe { libc::kill(pid, signal) };
        assert_eq!(rc, 0, "kill({pid}, {signal})");
        timeout(WAIT, self.child.wait())
            .await
            .expect("the workload did not exit in time after the signal")
            .expect("wait for the workload")
    }
}

#[tokio::test]
async fn answers_with_the_pod_name_and_flips_the_probes() {
    let workload = Workload::start(Some("web-0")).await;

    assert_eq!(workload.request("GET", "/").await, (200, "web-0\n".into()));
    assert_eq!(workload.status("GET", "/readyz").await, 200);
    assert_eq!(workload.status("GET", "/livez").await, 200);

    // Readiness alone.
    assert_eq!(workload.status("POST", "/readyz/fail").await, 200);
    assert_eq!(workload.status("GET", "/readyz").await, 503);
    assert_eq!(workload.status("GET", "/livez").await, 200);
    // Failing twice is harmless.
    assert_eq!(workload.status("POST", "/readyz/fail").await, 200);
    assert_eq!(workload.status("GET", "/readyz").await, 503);

    // Liveness alone.
    assert_eq!(workload.status("POST", "/livez/fail").await, 200);
    assert_eq!(workload.status("GET", "/livez").await, 503);
    assert_eq!(workload.status("POST", "/readyz/pass").await, 200);
    assert_eq!(workload.status("GET", "/readyz").await, 200);
    assert_eq!(workload.status("GET", "/livez").await, 503);
    assert_eq!(workload.status("POST", "/livez/pass").await, 200);
    assert_eq!(workload.status("GET", "/livez").await, 200);

    // Wrong methods and paths, and a flip by GET, change nothing.
    assert_eq!(workload.status("GET", "/readyz/fail").await, 405);
    assert_eq!(workload.status("POST", "/").await, 405);
    assert_eq!(workload.status("GET", "/nope").await, 404);
    assert_eq!(workload.status("GET", "/readyz").await, 200);

    let status = workload.signal_and_wait(libc::SIGTERM).await;
    assert!(status.success(), "exit status after SIGTERM: {status}");
}

#[tokio::test]
async fn survives_garbage_and_falls_back_to_the_host_name() {
    let workload = Workload::start(None).await;

    for garbage in [
        &b"\x00\x01\x02 garbage\r\n\r\n"[..],
        b"GET / HTTP/9.9\r\n\r\n",
        b"GET /readyz HTTP/1.1\r\nContent-Length: nope\r\n\r\n",
        b"POST /readyz/fail HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999\r\n\r\n",
        b"GET /\xff\xfe HTTP/1.1\r\nHost: x\r\n\r\n",
        b"",
    ] {
        workload.raw(garbage).await;
    }

    // Still serving, and nothing above flipped a probe.
    assert_eq!(workload.status("GET", "/readyz").await, 200);
    let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname").expect("host name");
    assert_eq!(
        workload.request("GET", "/").await,
        (200, format!("{}\n", hostname.trim()))
    );

    let status = workload.signal_and_wait(libc::SIGINT).await;
    assert!(status.success(), "exit status after SIGINT: {status}");
}
