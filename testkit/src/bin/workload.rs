//! The end-to-end tests' workload: a tiny HTTP server that stands in for an elected
//! application's pods.
//!
//! ```text
//! PORT=8080 POD_NAME=web-0 workload
//! workload netexec --http-port=8080      # the arguments examples/web.yaml gives agnhost
//! ```
//!
//! It also stands in for the example's image, Kubernetes' `agnhost`, where no registry can be
//! reached (the real-node e2e suite): it takes agnhost's `netexec --http-port=N` arguments and
//! answers `GET /hostname` as agnhost does, with the pod's name.
//!
//! * `GET /` and `GET /hostname` answer `200` with the pod's name and a newline: `POD_NAME`, else the host name
//!   (a pod's host name is its name), so a test can tell which pod a Service routed it to.
//! * `GET /readyz` and `GET /livez` answer `200` while the probe is passing and `503` once it
//!   was failed; `POST /readyz/fail`, `POST /readyz/pass`, `POST /livez/fail` and
//!   `POST /livez/pass` flip them (the flip has happened when the answer arrives), so a test
//!   can make the kubelet mark a pod unready or restart it.
//! * Listens on `0.0.0.0:$PORT` (default 8080; `PORT=0` takes a free port) and prints
//!   `workload listening on ADDR` to stdout once it accepts connections.
//! * Exits 0 at once on SIGTERM or SIGINT (as PID 1 in a container too: the handlers are
//!   its own), without waiting for open connections.
//!
//! Nothing a client sends makes it panic: hyper parses the requests, and every request gets
//! an answer (`404` for an unknown path, `405` for a known path with the wrong method).

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::signal::unix::{SignalKind, signal};

/// Port the server listens on when `PORT` is not set.
const DEFAULT_PORT: u16 = 8080;

/// How long the accept loop pauses after a failed `accept` (out of file descriptors, say)
/// before trying again, so such an error does not spin a core.
const ACCEPT_RETRY_PAUSE: Duration = Duration::from_millis(100);

/// How long a client may take to send a request's head; a silent connection is closed then.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// Where the kernel keeps this UTS namespace's host name (a pod's name under the kubelet).
const HOSTNAME_FILE: &str = "/proc/sys/kernel/hostname";

/// The two probe states the tests flip, shared by every connection.
#[derive(Debug)]
pub struct Health {
    /// `GET /readyz` answers 200 while this is true, 503 otherwise.
    pub ready: AtomicBool,
    /// `GET /livez` answers 200 while this is true, 503 otherwise.
    pub live: AtomicBool,
}

impl Default for Health {
    fn default() -> Self {
        Self {
            ready: AtomicBool::new(true),
            live: AtomicBool::new(true),
        }
    }
}

/// What every connection needs: the name `GET /` answers with and the probe states.
#[derive(Debug)]
pub struct State {
    /// The body of `GET /`: the pod's name and a newline.
    pub name_line: Bytes,
    /// The probe states.
    pub health: Health,
}

/// The name `GET /` answers with: `pod_name` when set and not blank, else `hostname`, else
/// `"unknown"`; surrounding white space is dropped.
pub fn choose_name(pod_name: Option<&str>, hostname: Option<&str>) -> String {
    [pod_name, hostname]
        .into_iter()
        .flatten()
        .map(str::trim)
        .find(|name| !name.is_empty())
        .unwrap_or("unknown")
        .to_string()
}

/// The port of agnhost's `netexec --http-port=N` (or `--http-port N`) arguments, if given;
/// other arguments are refused.
pub fn port_argument(args: &[String]) -> Result<Option<u16>, String> {
    let mut args = args.iter().map(String::as_str).peekable();
    args.next_if_eq(&"netexec");
    let mut port = None;
    while let Some(arg) = args.next() {
        let value = match arg.split_once('=') {
            Some(("--http-port", value)) => value,
            None if arg == "--http-port" => args.next().ok_or("--http-port needs a value")?,
            _ => {
                return Err(format!(
                    "unknown argument {arg:?} (only [netexec] --http-port=N)"
                ));
            }
        };
        let parsed = value
            .parse()
            .map_err(|e| format!("--http-port={value:?} is not a port number: {e}"))?;
        port = Some(parsed);
    }
    Ok(port)
}

/// Reads `PORT`: unset or empty means [`DEFAULT_PORT`]; anything else must be a port number.
pub fn parse_port(value: Option<&str>) -> Result<u16, String> {
    match value.map(str::trim) {
        None | Some("") => Ok(DEFAULT_PORT),
        Some(text) => text
            .parse()
            .map_err(|e| format!("PORT={text:?} is not a port number: {e}")),
    }
}

/// A plain-text answer.
fn text(status: StatusCode, body: impl Into<Bytes>) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(body.into()));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

/// The answer of a probe endpoint.
fn probe(flag: &AtomicBool, what: &str) -> Response<Full<Bytes>> {
    if flag.load(Ordering::SeqCst) {
        text(StatusCode::OK, "ok\n")
    } else {
        text(StatusCode::SERVICE_UNAVAILABLE, format!("{what} failed\n"))
    }
}

/// Sets a probe state and says what it is now.
fn flip(flag: &AtomicBool, what: &str, passing: bool) -> Response<Full<Bytes>> {
    let was = flag.swap(passing, Ordering::SeqCst);
    let now = if passing { "passing" } else { "failing" };
    if was != passing {
        eprintln!("workload: {what} is now {now}");
    }
    text(StatusCode::OK, format!("{what} {now}\n"))
}

/// `405` naming the one method the path takes.
fn wrong_method(allowed: Method) -> Response<Full<Bytes>> {
    let mut response = text(StatusCode::METHOD_NOT_ALLOWED, "method not allowed\n");
    if let Ok(value) = header::HeaderValue::from_str(allowed.as_str()) {
        response.headers_mut().insert(header::ALLOW, value);
    }
    response
}

/// Answers one request; never fails and never looks at the request body.
pub fn route(state: &State, method: &Method, path: &str) -> Response<Full<Bytes>> {
    let health = &state.health;
    let get = method == Method::GET || method == Method::HEAD;
    match path {
        "/" | "/hostname" if get => text(StatusCode::OK, state.name_line.clone()),
        "/readyz" if get => probe(&health.ready, "readiness"),
        "/livez" if get => probe(&health.live, "liveness"),
        "/" | "/hostname" | "/readyz" | "/livez" => wrong_method(Method::GET),
        "/readyz/fail" if method == Method::POST => flip(&health.ready, "readiness", false),
        "/readyz/pass" if method == Method::POST => flip(&health.ready, "readiness", true),
        "/livez/fail" if method == Method::POST => flip(&health.live, "liveness", false),
        "/livez/pass" if method == Method::POST => flip(&health.live, "liveness", true),
        "/readyz/fail" | "/readyz/pass" | "/livez/fail" | "/livez/pass" => {
            wrong_method(Method::POST)
        }
        _ => text(StatusCode::NOT_FOUND, "not found\n"),
    }
}

/// Accepts connections until the process ends; each one is served on its own task.
async fn serve(listener: TcpListener, state: Arc<State>) {
    loop {
        let (stream, _peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                eprintln!("workload: accept failed: {e}");
                tokio::time::sleep(ACCEPT_RETRY_PAUSE).await;
                continue;
            }
        };
        let state = Arc::clone(&state);
        tokio::spawn(async move {
            let service = service_fn(move |request: Request<hyper::body::Incoming>| {
                let response = route(&state, request.method(), request.uri().path());
                async move { Ok::<_, std::convert::Infallible>(response) }
            });
            // A client that sends garbage or hangs up only ends its own connection. One
            // that shuts down its sending side after a request still gets the answer.
            let _ = http1::Builder::new()
                .half_close(true)
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_READ_TIMEOUT)
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let port = match port_argument(&args).and_then(|port| match port {
        Some(port) => Ok(port),
        None => parse_port(std::env::var("PORT").ok().as_deref()),
    }) {
        Ok(port) => port,
        Err(msg) => {
            eprintln!("workload: {msg}");
            return ExitCode::from(2);
        }
    };
    let hostname = std::fs::read_to_string(HOSTNAME_FILE).ok();
    let name = choose_name(
        std::env::var("POD_NAME").ok().as_deref(),
        hostname.as_deref(),
    );
    let state = Arc::new(State {
        name_line: Bytes::from(format!("{name}\n")),
        health: Health::default(),
    });

    // Signal handlers first, so a SIGTERM right after start-up is not lost.
    let (mut term, mut int) = match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) {
        (Ok(term), Ok(int)) => (term, int),
        (Err(e), _) | (_, Err(e)) => {
            eprintln!("workload: cannot install the SIGTERM/SIGINT handlers: {e}");
            return ExitCode::FAILURE;
        }
    };
    let listener = match TcpListener::bind(SocketAddr::from(([0, 0, 0, 0], port))).await {
        Ok(listener) => listener,
        Err(e) => {
            eprintln!("workload: cannot listen on 0.0.0.0:{port}: {e}");
            return ExitCode::FAILURE;
        }
    };
    match listener.local_addr() {
        Ok(addr) => println!("workload listening on {addr} as {name}"),
        Err(e) => println!("workload listening on 0.0.0.0:{port} as {name} ({e})"),
    }

    tokio::select! {
        () = serve(listener, state) => {}
        _ = term.recv() => eprintln!("workload: SIGTERM, exiting"),
        _ = int.recv() => eprintln!("workload: SIGINT, exiting"),
    }
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state() -> State {
        State {
            name_line: Bytes::from_static(b"web-0\n"),
            health: Health::default(),
        }
    }

    fn status(state: &State, method: Method, path: &str) -> StatusCode {
        route(state, &method, path).status()
    }

    #[test]
    fn name_prefers_pod_name_then_hostname() {
        assert_eq!(choose_name(Some("web-0"), Some("host\n")), "web-0");
        assert_eq!(choose_name(Some("  "), Some("host\n")), "host");
        assert_eq!(choose_name(None, Some("host\n")), "host");
        assert_eq!(choose_name(None, None), "unknown");
    }

    #[test]
    fn port_defaults_and_rejects_garbage() {
        assert_eq!(parse_port(None), Ok(DEFAULT_PORT));
        assert_eq!(parse_port(Some("")), Ok(DEFAULT_PORT));
        assert_eq!(parse_port(Some("9090")), Ok(9090));
        assert_eq!(parse_port(Some("0")), Ok(0));
        assert!(parse_port(Some("65536")).is_err());
        assert!(parse_port(Some("http")).is_err());
    }

    #[test]
    fn agnhost_arguments_give_the_port() {
        let args = |list: &[&str]| list.iter().map(|a| (*a).to_owned()).collect::<Vec<_>>();
        assert_eq!(port_argument(&args(&[])), Ok(None));
        assert_eq!(
            port_argument(&args(&["netexec", "--http-port=8080"])),
            Ok(Some(8080))
        );
        assert_eq!(port_argument(&args(&["--http-port", "9"])), Ok(Some(9)));
        assert!(port_argument(&args(&["netexec", "--udp-port=1"])).is_err());
        assert!(port_argument(&args(&["--http-port"])).is_err());
        assert!(port_argument(&args(&["--http-port=x"])).is_err());
        assert_eq!(
            route(&state(), &Method::GET, "/hostname").status(),
            StatusCode::OK
        );
    }

    #[test]
    fn probes_flip_independently() {
        let state = state();
        assert_eq!(status(&state, Method::GET, "/readyz"), StatusCode::OK);
        assert_eq!(status(&state, Method::POST, "/readyz/fail"), StatusCode::OK);
        assert_eq!(
            status(&state, Method::GET, "/readyz"),
            StatusCode::SERVICE_UNAVAILABLE
        );
        assert_eq!(status(&state, Method::GET, "/livez"), StatusCode::OK);
        assert_eq!(status(&state, Method::POST, "/livez/fail"), StatusCode::OK);
        assert_eq!(
            status(&state, Method::GET, "/livez"),
            StatusCode::SERVICE_UNAVAILABLE
        );
        assert_eq!(status(&state, Method::POST, "/readyz/pass"), StatusCode::OK);
        assert_eq!(status(&state, Method::GET, "/readyz"), StatusCode::OK);
        assert_eq!(status(&state, Method::POST, "/livez/pass"), StatusCode::OK);
        assert_eq!(status(&state, Method::GET, "/livez"), StatusCode::OK);
    }

    #[test]
    fn wrong_methods_and_paths_are_refused() {
        let state = state();
        let response = route(&state, &Method::GET, "/readyz/fail");
        assert_eq!(response.status(), StatusCode::METHOD_NOT_ALLOWED);
        assert_eq!(
            response.headers().get(header::ALLOW).map(|v| v.as_bytes()),
            Some(&b"POST"[..])
        );
        assert_eq!(
            status(&state, Method::DELETE, "/"),
            StatusCode::METHOD_NOT_ALLOWED
        );
        assert_eq!(status(&state, Method::GET, "/nope"), StatusCode::NOT_FOUND);
        assert_eq!(status(&state, Method::GET, ""), StatusCode::NOT_FOUND);
        // A refused flip changes nothing.
        assert_eq!(status(&state, Method::GET, "/readyz"), StatusCode::OK);
    }
}
