//! The target a conformance case runs against, behind one small raw-HTTP surface:
//! - the in-process emulator (every case, always);
//! - a real Consul: a `consul agent -dev` (or a three-server cluster) started for the case
//!   alone by `testkit::real_consul` when `CONSUL_BIN` is set, or the external agent named by
//!   `CONSUL_HTTP_ADDR`, on which the real cases run one at a time.
//!
//! Cases talk HTTP directly (not through the product's client) so that what is checked is
//! the server's wire behaviour: status codes, bodies, headers and index bookkeeping.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use reqwest::Method;
use reqwest::header::HeaderMap;
use serde_json::Value;
use testkit::consul::{Emulator, EmulatorConfig};
use testkit::real_consul::{Options, RealConsul, Shape};

use testkit::real_consul::Version;
/// A response as the server sent it.
pub struct Resp {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: Vec<u8>,
}

impl Resp {
    /// The body as UTF-8 text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body parsed as JSON.
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("body is not JSON ({e}): {:?}", self.text()))
    }

    /// A header's value, if present.
    pub fn header(&self, name: &str) -> Option<String> {
        self.headers
            .get(name)
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
    }

    /// `X-Consul-Index` as a number (panics when absent: every read must carry it).
    pub fn index(&self) -> u64 {
        let raw = self
            .header("X-Consul-Index")
            .unwrap_or_else(|| panic!("no X-Consul-Index on a read (status {})", self.status));
        raw.parse()
            .unwrap_or_else(|e| panic!("X-Consul-Index {raw:?} is not a number: {e}"))
    }

    /// Asserts the status and that the body is exactly `true`/`false` (whitespace tolerated).
    pub fn assert_bool(&self, expected: bool) {
        assert_eq!(self.status, 200, "body: {}", self.text());
        assert_eq!(
            self.text().trim(),
            expected.to_string(),
            "unexpected write result"
        );
    }

    /// Asserts the status and that the body contains `needle`.
    pub fn assert_error(&self, status: u16, needle: &str) {
        assert_eq!(self.status, status, "body: {}", self.text());
        assert!(
            self.text().contains(needle),
            "body {:?} does not contain {needle:?}",
            self.text()
        );
    }
}

/// Which server a generated test runs its case against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// The in-process emulator with its virtual clock.
    Emulator,
    /// A real Consul (`CONSUL_BIN` or `CONSUL_HTTP_ADDR`).
    Real,
}

/// How a case wants its server: the emulator's configuration and, against a real Consul, the
/// shape of the cluster.
pub struct Setup {
    /// Used by the emulator only.
    pub config: EmulatorConfig,
    /// Used by a real Consul only: [`Shape::Cluster`] needs `CONSUL_BIN` even when
    /// `CONSUL_HTTP_ADDR` names an external agent.
    pub shape: Shape,
}

impl Default for Setup {
    fn default() -> Self {
        Setup {
            config: EmulatorConfig::default(),
            shape: Shape::Dev,
        }
    }
}

impl Setup {
    /// The default setup with this emulator configuration.
    pub fn config(config: EmulatorConfig) -> Setup {
        Setup {
            config,
            ..Setup::default()
        }
    }

    /// A three-server cluster when real.
    pub fn cluster() -> Setup {
        Setup {
            shape: Shape::Cluster,
            ..Setup::default()
        }
    }
}

/// Where the case runs.
pub struct Target {
    case: u32,
    /// The emulator, when the case runs against it.
    pub emu: Option<Emulator>,
    /// The real Consul started for this case alone (`CONSUL_BIN`).
    real: Option<RealConsul>,
    /// Held while a case runs on the shared external agent, so that cases there never
    /// interleave their Raft writes.
    turn: Option<tokio::sync::OwnedMutexGuard<()>>,
    base: String,
    token: Option<String>,
    http: reqwest::Client,
    /// A key prefix unique to this case, so cases never see each other's keys on a shared
    /// real agent.
    pub prefix: String,
    sessions: std::sync::Mutex<Vec<String>>,
    version: Version,
    node: String,
}

/// What a case needs beyond plain HTTP; against a real Consul such a case is skipped visibly.
#[derive(Clone, Copy, Debug)]
pub enum Needs {
    /// Virtual time (advance the clock instead of waiting out TTLs and lock-delays).
    VirtualTime,
    /// The emulator's catalog hooks (check status, extra checks on the node).
    CatalogHooks,
    /// Fault injection or the "no cluster leader" switch.
    Faults,
    /// An ACL table the case controls.
    Acl,
    /// A KV store holding only what the case wrote (a real agent started for the case has
    /// one; a shared external agent does not).
    EmptyStore,
}

/// The case number in a test name `case_NN_...`.
fn case_number(name: &str) -> u32 {
    name.strip_prefix("case_")
        .and_then(|rest| rest.split('_').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("test name {name:?} does not start with case_NN_"))
}

/// The lock that serialises cases on the external agent of `CONSUL_HTTP_ADDR`.
fn externalturns() -> Arc<tokio::sync::Mutex<()>> {
    static TURNS: OnceLock<Arc<tokio::sync::Mutex<()>>> = OnceLock::new();
    TURNS.get_or_init(Default::default).clone()
}

impl Target {
    /// Starts the server for test `name` (`case_NN_...`) on `backend`. `None` when a real
    /// Consul is wanted but none is configured: the harness has printed `SKIPPED: ...` and
    /// the test passes.
    pub async fn start(backend: Backend, name: &str, setup: Setup) -> Option<Target> {
        install_crypto_provider();
        let case = case_number(name);
        let mut target = Target {
            case,
            emu: None,
            real: None,
            turn: None,
            base: String::new(),
            token: None,
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(900))
                .build()
                .expect("http client"),
            prefix: format!("conformance/{case}-{:08x}/", rand::random::<u32>()),
            sessions: Default::default(),
            version: Version::default(),
            node: String::new(),
        };
        match backend {
            Backend::Emulator => {
                let emu = Emulator::start(setup.config).await.expect("start emulator");
                target.base = emu.url();
                target.emu = Some(emu);
            }
            Backend::Real => match (real_address(), setup.shape) {
                (Some(base), Shape::Dev) => {
                    target.turn = Some(externalturns().lock_owned().await);
                    target.base = base;
                    target.token = std::env::var("CONSUL_HTTP_TOKEN").ok();
                }
                (_, shape) => {
                    let consul = start_real(shape).await?;
                    target.base = consul.url();
                    target.real = Some(consul);
                }
            },
        }
        let agent = target.get("/v1/agent/self").await;
        assert_eq!(agent.status, 200, "agent self: {}", agent.text());
        let config = &agent.json()["Config"];
        let version = config["Version"].as_str().unwrap_or_default();
        target.version = Version::parse(version)
            .unwrap_or_else(|| panic!("the agent's version {version:?} is not major.minor.patch"));
        target.node = config["NodeName"].as_str().unwrap_or_default().to_owned();
        Some(target)
    }

    /// True when running against a real Consul.
    pub fn is_real(&self) -> bool {
        self.emu.is_none()
    }

    /// The base URL of the case's agent.
    pub fn url(&self) -> String {
        self.base.clone()
    }

    /// The server's version (`Config.Version` of `/v1/agent/self`).
    pub fn version(&self) -> Version {
        self.version
    }

    /// The agent's node name (`Config.NodeName`): `node1` on the emulator.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// The real Consul started for this case (`None` on the emulator and on an external
    /// agent).
    pub fn real(&self) -> Option<&RealConsul> {
        self.real.as_ref()
    }

    /// True when the server serves this case alone (the emulator, or a real Consul started
    /// for it): nothing else writes to it.
    pub fn owns_server(&self) -> bool {
        self.turn.is_none()
    }

    /// Returns `false` (after saying so on stderr, so the skip is visible in the test output)
    /// when the case needs something only the emulator offers and the target is real.
    pub fn supports(&self, needs: Needs) -> bool {
        let dedicated_store = matches!(needs, Needs::EmptyStore) && self.owns_server();
        if self.is_real() && !dedicated_store {
            eprintln!(
                "SKIPPED case {} against real Consul: needs emulator-only {needs:?}",
                self.case
            );
            return false;
        }
        true
    }

    /// The emulator (panics against a real target: guard with [`Target::supports`]).
    pub fn emu(&self) -> &Emulator {
        self.emu.as_ref().expect("case guarded by supports()")
    }

    /// The case's key `name` under its private prefix.
    pub fn key(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }

    /// Sends a request; `path` is everything after the host (`/v1/...?query`).
    pub async fn req(&self, method: &str, path: &str, body: impl Into<Vec<u8>>) -> Resp {
        self.req_with(method, path, body, &[]).await
    }

    /// Sends a request with extra headers.
    pub async fn req_with(
        &self,
        method: &str,
        path: &str,
        body: impl Into<Vec<u8>>,
        headers: &[(&str, &str)],
    ) -> Resp {
        self.req_at(&self.base, method, path, body, headers).await
    }

    /// Sends a request to the agent at `base` (a member of a real cluster) instead of the
    /// case's own.
    pub async fn req_at(
        &self,
        base: &str,
        method: &str,
        path: &str,
        body: impl Into<Vec<u8>>,
        headers: &[(&str, &str)],
    ) -> Resp {
        send(
            self.http.clone(),
            format!("{base}{path}"),
            self.token.clone(),
            method,
            body.into(),
            headers,
        )
        .await
    }

    /// Starts `GET path` in its own task, so the case can act while the request blocks.
    pub fn spawn_get(&self, path: &str) -> tokio::task::JoinHandle<Resp> {
        self.spawn_get_at(&self.base, path)
    }

    /// Starts `GET path` on the agent at `base` in its own task.
    pub fn spawn_get_at(&self, base: &str, path: &str) -> tokio::task::JoinHandle<Resp> {
        let (http, url, token) = (
            self.http.clone(),
            format!("{base}{path}"),
            self.token.clone(),
        );
        tokio::spawn(async move { send(http, url, token, "GET", Vec::new(), &[]).await })
    }

    /// `GET path`.
    pub async fn get(&self, path: &str) -> Resp {
        self.req("GET", path, Vec::new()).await
    }

    /// `PUT path` with a body.
    pub async fn put(&self, path: &str, body: impl Into<Vec<u8>>) -> Resp {
        self.req("PUT", path, body).await
    }

    /// `DELETE path`.
    pub async fn delete(&self, path: &str) -> Resp {
        self.req("DELETE", path, Vec::new()).await
    }

    /// `GET /v1/kv/<key>` decoded into the single entry, or `None` on 404.
    pub async fn kv(&self, key: &str) -> Option<Value> {
        let r = self.get(&format!("/v1/kv/{key}")).await;
        match r.status {
            404 => None,
            200 => {
                let arr = r.json();
                assert_eq!(arr.as_array().map(Vec::len), Some(1), "one entry: {arr}");
                Some(arr[0].clone())
            }
            s => panic!("GET {key}: status {s}: {}", r.text()),
        }
    }

    /// Creates a session from a JSON body and returns its ID (asserts 200).
    pub async fn session(&self, body: &str) -> String {
        let r = self.put("/v1/session/create", body.to_owned()).await;
        assert_eq!(r.status, 200, "create session {body}: {}", r.text());
        let id = r.json()["ID"]
            .as_str()
            .expect("ID in create response")
            .to_owned();
        self.sessions.lock().expect("sessions").push(id.clone());
        id
    }

    /// A default session (server defaults: serfHealth, lock-delay 15 s, release).
    pub async fn default_session(&self) -> String {
        let r = self.put("/v1/session/create", Vec::new()).await;
        assert_eq!(r.status, 200, "create session: {}", r.text());
        let id = r.json()["ID"].as_str().expect("ID").to_owned();
        self.sessions.lock().expect("sessions").push(id.clone());
        id
    }

    /// `GET /v1/session/info/<id>` as the JSON array.
    pub async fn info(&self, id: &str) -> Value {
        let r = self.get(&format!("/v1/session/info/{id}")).await;
        assert_eq!(r.status, 200, "info: {}", r.text());
        r.json()
    }

    /// The sessions table index as seen by `GET /v1/session/list`.
    pub async fn sessions_index(&self) -> u64 {
        self.get("/v1/session/list").await.index()
    }

    /// `PUT /v1/kv/<key>?<query>` with a body.
    pub async fn kv_put(&self, key: &str, query: &str, body: impl Into<Vec<u8>>) -> Resp {
        let q = if query.is_empty() {
            String::new()
        } else {
            format!("?{query}")
        };
        self.put(&format!("/v1/kv/{key}{q}"), body).await
    }

    /// Lets `d` pass: advances the virtual clock of the emulator, or really waits against a
    /// real agent (where passing time is the behaviour under test, not synchronisation).
    pub async fn elapse(&self, d: Duration) {
        match &self.emu {
            Some(emu) => emu.advance(d).await,
            None => tokio::time::sleep(d).await,
        }
    }

    /// Lets at least `d` pass: exactly `d` of virtual time on the emulator; against a real
    /// agent `d` plus a margin for Raft apply latency and clock granularity.
    pub async fn elapse_past(&self, d: Duration) {
        match &self.emu {
            Some(emu) => emu.advance(d).await,
            None => tokio::time::sleep(d + Duration::from_millis(500)).await,
        }
    }

    /// Waits until `n` blocking queries are parked in the emulator. Against a real agent the
    /// server cannot be observed, so this gives the request a moment to arrive instead.
    pub async fn parked(&self, n: usize) {
        match &self.emu {
            Some(emu) => {
                tokio::time::timeout(Duration::from_secs(10), emu.wait_for_blocked_queries(n))
                    .await
                    .expect("blocking query parked");
            }
            None => tokio::time::sleep(Duration::from_millis(300)).await,
        }
    }

    /// Removes what the case left behind on a shared external agent (sessions and its key
    /// prefix); a server started for the case goes away with it.
    pub async fn cleanup(&self) {
        if self.owns_server() {
            return;
        }
        let ids: Vec<String> = self.sessions.lock().expect("sessions").drain(..).collect();
        for id in ids {
            self.put(&format!("/v1/session/destroy/{id}"), Vec::new())
                .await;
        }
        self.delete(&format!("/v1/kv/{}?recurse", self.prefix))
            .await;
    }
}

async fn send(
    http: reqwest::Client,
    url: String,
    token: Option<String>,
    method: &str,
    body: Vec<u8>,
    headers: &[(&str, &str)],
) -> Resp {
    let method = Method::from_bytes(method.as_bytes()).expect("method");
    let mut rb = http.request(method, &url).body(body);
    if let Some(token) = &token {
        rb = rb.header("X-Consul-Token", token);
    }
    for (k, v) in headers {
        rb = rb.header(*k, *v);
    }
    let resp = rb
        .send()
        .await
        .unwrap_or_else(|e| panic!("request {url} failed: {e}"));
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let body = resp.bytes().await.expect("read body").to_vec();
    Resp {
        status,
        headers,
        body,
    }
}

/// Awaits a spawned request, failing the case if it has not answered within `limit` of real
/// time (a guard against a hang, not a synchronisation point).
pub async fn answered(handle: tokio::task::JoinHandle<Resp>, limit: Duration) -> Resp {
    tokio::time::timeout(limit, handle)
        .await
        .expect("the request answered in time")
        .expect("request task")
}

/// Starts a real Consul of `shape` from `CONSUL_BIN` (the harness starts it again on other
/// ports when a member exits at once); `None` when it is unset (skipped).
async fn start_real(shape: Shape) -> Option<RealConsul> {
    RealConsul::start(shape, Options::default())
        .await
        .unwrap_or_else(|e| panic!("start a real Consul: {e}"))
}

/// The address of an external agent from `CONSUL_HTTP_ADDR`, normalised to a URL.
fn real_address() -> Option<String> {
    let raw = std::env::var("CONSUL_HTTP_ADDR").ok()?;
    let raw = raw.trim().trim_end_matches('/');
    if raw.is_empty() {
        return None;
    }
    if raw.starts_with("http://") || raw.starts_with("https://") {
        Some(raw.to_owned())
    } else {
        Some(format!("http://{raw}"))
    }
}

fn install_crypto_provider() {
    // Only one provider is compiled in; a second install attempt is harmless.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Decodes a KV entry's base64 `Value` (`null` → empty).
pub fn value_of(entry: &Value) -> Vec<u8> {
    use base64::Engine;
    match entry["Value"].as_str() {
        None => Vec::new(),
        Some(s) => base64::engine::general_purpose::STANDARD
            .decode(s)
            .expect("Value is base64"),
    }
}

/// A numeric field of a JSON object.
pub fn num(v: &Value, field: &str) -> u64 {
    v[field]
        .as_u64()
        .unwrap_or_else(|| panic!("{field} is not a number in {v}"))
}
