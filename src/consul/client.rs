//! The client handle: request building, headers, retries, response classification.

use std::fmt;
use std::future::Future;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{CONTENT_TYPE, RETRY_AFTER, USER_AGENT};
use http::{HeaderValue, Method, Request, StatusCode};
use serde::de::DeserializeOwned;
use tokio::runtime::Handle;
use tokio::task::AbortHandle;

use super::blocking::BlockingWatch;
use super::error::{ConsulError, ErrorContext, Result, TransportFailure};
use super::observer::RequestObserver;
use super::query::{QueryMeta, QueryOptions};
use super::reload::{ReloadOutcome, Reloading};
use super::retry::RetryPolicy;
use super::settings::{ConsulAddress, ConsulSettings, Tenancy, WatchPacing};
use super::token::ConsulToken;
use super::token_file::{TokenFile, TokenHeader};
use super::transport::{AddressTransport, Lane, TransportConfig, TransportRegistry};
use crate::write_gate::WriteGate;

/// Header carrying the ACL token.
const TOKEN_HEADER: &str = "x-consul-token";

/// Per-election overrides of the operator-wide defaults. `None` keeps the value of the client
/// the overrides are applied to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Overrides {
    /// Another Consul address.
    pub address: Option<ConsulAddress>,
    /// Another datacenter.
    pub datacenter: Option<String>,
    /// Another Consul Enterprise namespace and/or admin partition (each part `None` keeps).
    pub tenancy: Tenancy,
    /// Another ACL token.
    pub token: Option<ConsulToken>,
}

/// State shared by every handle derived from one root client.
struct Shared {
    registry: TransportRegistry,
    /// The operator's own address: the only one its own token is ever sent to.
    root_address: ConsulAddress,
    /// Other addresses handles may be derived for.
    allowed_addresses: Vec<ConsulAddress>,
    /// Other datacenters elections may name with the operator's own token.
    allowed_datacenters: Vec<String>,
    request_timeout: Duration,
    retry: RetryPolicy,
    watch_pacing: WatchPacing,
    /// Where session requests and renewal tasks run (`None`: the caller's runtime).
    session_runtime: Option<Handle>,
    /// Told about every request attempt, once set ([`ConsulClient::observe_requests`]).
    observer: OnceLock<Arc<dyn RequestObserver>>,
    /// Checked before every write, once set ([`ConsulClient::gate_writes`]).
    gate: OnceLock<WriteGate>,
}

/// The ACL token a handle sends.
#[derive(Clone)]
enum Credential {
    /// None: the agent's default token.
    Agent,
    /// A token given to the handle (an election's own token).
    Given(TokenHeader),
    /// The operator's token file, shared by every handle that uses it.
    File(Arc<Reloading<TokenFile>>),
}

/// The token of one attempt.
struct TokenInUse {
    token: Option<TokenHeader>,
    /// The token file's generation it was read at (`None`: not from the file).
    generation: Option<u64>,
}

impl Credential {
    fn in_use(&self) -> TokenInUse {
        match self {
            Self::Agent => TokenInUse {
                token: None,
                generation: None,
            },
            Self::Given(token) => TokenInUse {
                token: Some(token.clone()),
                generation: None,
            },
            Self::File(file) => {
                let (token, generation) = file.current();
                TokenInUse {
                    token: token.as_ref().clone(),
                    generation: Some(generation),
                }
            }
        }
    }
}

/// Which token a handle sends, as a key for things shared between handles that must see the
/// same keys (ACLs filter reads). The operator's token file is one identity however often it is
/// rotated.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum TokenIdentity {
    /// No token: the agent's default token.
    Agent,
    /// A token given to the handle.
    Token(ConsulToken),
    /// The token in the operator's token file (`CONSUL_HTTP_TOKEN_FILE`), whatever it is now.
    OperatorFile,
}

/// A Consul HTTP API client. Cheap to clone; every clone and every
/// [`with_overrides`](Self::with_overrides) handle shares the per-address connection budgets of the
/// root client created by [`ConsulClient::new`]. Create one root client per process.
#[derive(Clone)]
pub struct ConsulClient {
    shared: Arc<Shared>,
    /// This handle's retries (the settings' policy unless [`Self::without_retries`]).
    retry: RetryPolicy,
    transport: Arc<AddressTransport>,
    datacenter: Option<String>,
    tenancy: Tenancy,
    credential: Credential,
}

impl fmt::Debug for ConsulClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConsulClient")
            .field("address", self.transport.address())
            .field("datacenter", &self.datacenter)
            .field("tenancy", &self.tenancy)
            .field("token", &self.token_identity())
            .finish_non_exhaustive()
    }
}

impl ConsulClient {
    /// A root client for `settings` whose requests all run on the caller's runtime. Fails
    /// when the TLS files cannot be used or the token is not a valid header value.
    pub fn new(settings: &ConsulSettings) -> Result<Self> {
        Self::build_root(settings, None)
    }

    /// A root client whose session requests (create, renew, destroy), and the renewal tasks
    /// of [`crate::observers::sessions::SessionManager`], run on `session_runtime`: give it a runtime of
    /// its own (its own OS thread), and CPU-bound work on the caller's runtime can never
    /// delay a renewal. Other requests run on the caller's runtime.
    pub fn with_session_runtime(
        settings: &ConsulSettings,
        session_runtime: Handle,
    ) -> Result<Self> {
        Self::build_root(settings, Some(session_runtime))
    }

    fn build_root(settings: &ConsulSettings, session_runtime: Option<Handle>) -> Result<Self> {
        let registry = TransportRegistry::new(TransportConfig {
            max_connections: settings.max_connections,
            connect_timeout: settings.connect_timeout,
            idle_timeout: settings.idle_timeout,
            tls: settings.tls.clone(),
            default_address: settings.address.clone(),
            credentials_reload: settings.credentials_reload,
            session_runtime: session_runtime.clone(),
        });
        let shared = Arc::new(Shared {
            registry,
            root_address: settings.address.clone(),
            allowed_addresses: settings.allowed_addresses.clone(),
            allowed_datacenters: settings.allowed_datacenters.clone(),
            request_timeout: settings.request_timeout,
            retry: settings.retry,
            watch_pacing: settings.watch_pacing,
            session_runtime,
            observer: OnceLock::new(),
            gate: OnceLock::new(),
        });
        let setup_error = |detail: String| ConsulError::Configuration {
            context: ErrorContext::new("client setup", settings.address.to_string()),
            detail,
        };
        let credential = match (&settings.token_file, &settings.token) {
            (Some(path), _) => {
                let file = TokenFile { path: path.clone() };
                // An empty file at start means the settings' fallback token, as in Consul's
                // Go client.
                let fallback = |error: super::reload::LoadError| match error.reason {
                    "empty" => settings.token.clone().map(TokenHeader::new).transpose(),
                    _ => Err(error),
                };
                let file =
                    Reloading::load(file, settings.credentials_reload, Instant::now(), fallback)
                        .map_err(|error| setup_error(error.detail))?;
                Credential::File(Arc::new(file))
            }
            (None, Some(token)) => Credential::Given(
                TokenHeader::new(token.clone()).map_err(|error| setup_error(error.detail))?,
            ),
            (None, None) => Credential::Agent,
        };
        Self::handle(
            shared,
            &settings.address,
            settings.datacenter.clone(),
            settings.tenancy.clone(),
            credential,
        )
    }

    /// Reports every request attempt of this client and of every handle derived from it to
    /// `observer` (metrics). Only the first observer set is kept.
    pub fn observe_requests(&self, observer: Arc<dyn RequestObserver>) {
        let _ = self.shared.observer.set(observer);
    }

    /// Checks `gate` immediately before every write (any request but a GET) of this client and
    /// of every handle derived from it, and bounds each attempt by the time the gate has left
    /// (docs/design.md rule 8). Only the first gate set is kept.
    pub fn gate_writes(&self, gate: WriteGate) {
        let _ = self.shared.gate.set(gate);
    }

    /// A handle for another address, datacenter and/or token, sharing this client's
    /// transports (and so the connection budgets of every address).
    ///
    /// The address must be the root client's or one of the settings' `allowed_addresses`;
    /// any other is refused before a connection exists. A handle for an address other than
    /// this handle's never inherits this handle's token: it carries `overrides.token` or none,
    /// so the operator's own token is only ever sent where the operator's admin pointed it.
    pub fn with_overrides(&self, overrides: Overrides) -> Result<Self> {
        let address = overrides
            .address
            .as_ref()
            .unwrap_or(self.transport.address());
        if !self.allows(address) {
            return Err(ConsulError::Configuration {
                context: ErrorContext::new("client setup", address.to_string()),
                detail: format!(
                    "{address} is not the operator's Consul address nor one it is allowed to use"
                ),
            });
        }
        let credential = match overrides.token {
            Some(token) => Credential::Given(TokenHeader::new(token).map_err(|error| {
                ConsulError::Configuration {
                    context: ErrorContext::new("client setup", address.to_string()),
                    detail: error.detail,
                }
            })?),
            None if address == self.transport.address() => self.credential.clone(),
            None => Credential::Agent,
        };
        Self::handle(
            self.shared.clone(),
            address,
            overrides.datacenter.or_else(|| self.datacenter.clone()),
            self.tenancy.overridden_by(overrides.tenancy),
            credential,
        )
    }

    /// This handle, sending each request once: for a caller that has a deadline of its own and
    /// a retry loop elsewhere (a look at a key whose watch already retries).
    pub fn without_retries(&self) -> Self {
        Self {
            retry: RetryPolicy {
                max_attempts: 1,
                ..self.retry
            },
            ..self.clone()
        }
    }

    /// Whether handles may be derived for `address`: the root client's address or one of the
    /// settings' `allowed_addresses`.
    pub fn allows(&self, address: &ConsulAddress) -> bool {
        *address == self.shared.root_address || self.shared.allowed_addresses.contains(address)
    }

    /// The datacenters, besides the root client's, that the admin allowed elections to name
    /// while using the operator's own token (the settings' `allowed_datacenters`).
    pub fn allowed_datacenters(&self) -> &[String] {
        &self.shared.allowed_datacenters
    }

    /// How many Consul addresses currently have a connection pool (a pool is freed, and its
    /// connections closed, when the last handle using it is dropped).
    pub fn live_pools(&self) -> usize {
        self.shared.registry.live_transports()
    }

    /// Spawns a session's long-lived task (its renewals) where this client runs session
    /// requests: the session runtime when the root client has one, else the current runtime.
    pub(crate) fn spawn_session_task<F>(&self, task: F) -> AbortHandle
    where
        F: Future<Output = ()> + Send + 'static,
    {
        match &self.shared.session_runtime {
            Some(runtime) => runtime.spawn(task).abort_handle(),
            None => tokio::spawn(task).abort_handle(),
        }
    }

    fn handle(
        shared: Arc<Shared>,
        address: &ConsulAddress,
        datacenter: Option<String>,
        tenancy: Tenancy,
        credential: Credential,
    ) -> Result<Self> {
        let context = || ErrorContext::new("client setup", address.to_string());
        let transport =
            shared
                .registry
                .transport(address)
                .map_err(|detail| ConsulError::Configuration {
                    context: context(),
                    detail,
                })?;
        Ok(Self {
            retry: shared.retry,
            shared,
            transport,
            datacenter: datacenter.filter(|dc| !dc.is_empty()),
            tenancy,
            credential,
        })
    }

    /// The Consul address of this handle.
    pub fn address(&self) -> &ConsulAddress {
        self.transport.address()
    }

    /// The datacenter of this handle (`None`: the agent's).
    pub fn datacenter(&self) -> Option<&str> {
        self.datacenter.as_deref()
    }

    /// The Consul Enterprise namespace and admin partition of this handle.
    pub fn tenancy(&self) -> &Tenancy {
        &self.tenancy
    }

    /// The ACL token this handle sends now (`None`: the agent's default token); with a token
    /// file, the newest usable token read from it.
    pub fn token(&self) -> Option<ConsulToken> {
        self.credential.in_use().token.map(|token| token.token)
    }

    /// Which token this handle sends. Handles with different tokens may see different keys
    /// (ACLs filter recursive reads), so anything shared between handles, like a watch of a
    /// key prefix, must be keyed by it too.
    pub fn token_identity(&self) -> TokenIdentity {
        match &self.credential {
            Credential::Agent => TokenIdentity::Agent,
            Credential::Given(token) => TokenIdentity::Token(token.token.clone()),
            Credential::File(_) => TokenIdentity::OperatorFile,
        }
    }

    /// A blocking-query loop paced by the configured [`WatchPacing`].
    pub fn watch(&self, wait: Duration) -> BlockingWatch {
        BlockingWatch::new(wait, self.shared.watch_pacing)
    }

    /// A GET with read options (consistency, blocking index and wait, and the matching
    /// client-side timeout).
    pub(crate) async fn read(&self, call: Call, options: QueryOptions) -> Result<Reply> {
        let timeout = options.timeout(self.shared.request_timeout);
        let lane = if options.blocks() {
            Lane::LongPoll
        } else {
            call.lane
        };
        self.call(
            call.query(options.query_pairs())
                .timeout(timeout)
                .lane(lane),
        )
        .await
    }

    /// Sends `call`, retrying retryable errors within the retry policy. Non-idempotent calls
    /// are retried only when the error proves the request was not applied.
    pub(crate) async fn call(&self, call: Call) -> Result<Reply> {
        let policy = self.retry;
        let mut attempt: u32 = 0;
        let mut sent_again_with_new_token = false;
        loop {
            attempt += 1;
            self.refresh_credentials();
            let token = self.credential.in_use();
            let error = match self.attempt(&call, &token).await {
                Ok(reply) => return Ok(reply),
                Err(error) => error,
            };
            // Consul refused the token: the token file may hold a new one already. The request
            // was not applied, so it is sent once more if it does.
            if !sent_again_with_new_token
                && matches!(
                    error,
                    ConsulError::AclNotFound { .. } | ConsulError::PermissionDenied { .. }
                )
                && self.token_file_changed_since(&token)
            {
                sent_again_with_new_token = true;
                tracing::info!(
                    operation = call.context.operation,
                    target = %call.context.target,
                    "consul refused the token; sending the request again with the new token \
                     from the token file"
                );
                continue;
            }
            let retry = error.is_retryable()
                && (call.idempotent || error.request_not_applied())
                && policy.allows_another(attempt);
            if !retry {
                tracing::debug!(
                    operation = call.context.operation,
                    target = %call.context.target,
                    attempt,
                    category = error.category(),
                    "consul request failed: {error}"
                );
                return Err(error);
            }
            let delay = policy.delay(attempt - 1, error.retry_after(), &mut rand::rng());
            tracing::warn!(
                operation = call.context.operation,
                target = %call.context.target,
                attempt,
                category = error.category(),
                delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
                "consul request failed, retrying: {error}"
            );
            tokio::time::sleep(delay).await;
        }
    }

    /// Re-reads the credential files that are due (see `super::reload`), and reports what
    /// changed.
    fn refresh_credentials(&self) {
        let now = Instant::now();
        if let Credential::File(file) = &self.credential {
            self.report_reload(file.name(), file.refresh(now));
        }
        if let Some(tls) = self.shared.registry.tls_reload() {
            for (credential, outcome) in tls.refresh(now) {
                self.report_reload(credential, outcome);
            }
        }
    }

    /// Whether the token file, re-read now, holds another token than the one `used`.
    fn token_file_changed_since(&self, used: &TokenInUse) -> bool {
        let Credential::File(file) = &self.credential else {
            return false;
        };
        file.reload_soon();
        self.report_reload(file.name(), file.refresh(Instant::now()));
        used.generation != Some(file.current().1)
    }

    /// Logs and counts a reload or a failed one.
    fn report_reload(&self, credential: &'static str, outcome: ReloadOutcome) {
        let Some(result) = outcome.label() else {
            return;
        };
        match outcome {
            ReloadOutcome::Failed(reason) => tracing::warn!(
                credential,
                reason,
                "a Consul credential file changed but cannot be used; keeping the credential \
                 in use and reading the file again at the next period"
            ),
            _ => tracing::info!(credential, "reloaded a Consul credential from its file"),
        }
        if let Some(observer) = self.shared.observer.get() {
            observer.credential_reload(credential, result);
        }
    }

    /// One attempt with `token`, reported to the observer.
    async fn attempt(&self, call: &Call, token: &TokenInUse) -> Result<Reply> {
        let started = tokio::time::Instant::now();
        let result = self.attempt_unobserved(call, token).await;
        if let Some(observer) = self.shared.observer.get() {
            observer.observe(
                call.context.operation,
                result.as_ref().map(|_| ()).map_err(ConsulError::category),
                started.elapsed(),
                call.lane == Lane::LongPoll,
            );
        }
        result
    }

    /// One attempt: build, check the write gate, send within the timeout, classify.
    async fn attempt_unobserved(&self, call: &Call, token: &TokenInUse) -> Result<Reply> {
        let token = token.token.as_ref();
        let request = self.build(call, token.map(|token| &token.header))?;
        let timeout = call.timeout.unwrap_or(self.shared.request_timeout);
        let transport = |failure, detail| ConsulError::Transport {
            context: call.context.clone(),
            failure,
            detail,
        };
        let not_active = |reason| ConsulError::NotActive {
            context: call.context.clone(),
            reason,
        };
        // A write is checked immediately before it is sent (and again before every poll of it,
        // so a process paused meanwhile sends nothing), and bounded by the time the gate has
        // left: no write, and no retry of one, outlives this replica's Lease deadline.
        let gate = self
            .shared
            .gate
            .get()
            .filter(|_| call.method != Method::GET)
            .cloned();
        let send = tokio::time::timeout(
            timeout,
            self.transport.send(call.lane, request, gate.clone()),
        );
        let sent = match gate {
            Some(gate) => gate.bound(send).await.map_err(not_active)?,
            None => send.await,
        };
        let response = sent
            .map_err(|_| {
                transport(
                    TransportFailure::Timeout,
                    format!("no complete response within {timeout:?}"),
                )
            })?
            .map_err(|(failure, detail)| transport(failure, detail))?;
        let status = response.status();
        tracing::debug!(
            operation = call.context.operation,
            target = %call.context.target,
            method = %call.method,
            path = %call.path,
            status = status.as_u16(),
            "consul request"
        );
        let meta = QueryMeta::from_headers(response.headers());
        let retry_after = response
            .headers()
            .get(RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        let body = response.into_body();
        if status.is_success() || (status == StatusCode::NOT_FOUND && call.accept_not_found) {
            return Ok(Reply { status, meta, body });
        }
        let text = String::from_utf8_lossy(&body);
        let text = match token {
            Some(token) => token.token.redact(&text),
            None => text.into_owned(),
        };
        Err(ConsulError::from_response(
            call.context.clone(),
            status.as_u16(),
            &text,
            retry_after,
        ))
    }

    fn build(&self, call: &Call, token: Option<&HeaderValue>) -> Result<Request<Bytes>> {
        let mut target = call.path.clone();
        let datacenter = self.datacenter.iter().map(|dc| ("dc", dc.as_str()));
        let pairs = call.query.iter().map(|(k, v)| (*k, v.as_str()));
        let placed = datacenter.chain(self.tenancy.query());
        for (i, (key, value)) in placed.chain(pairs).enumerate() {
            target.push(if i == 0 { '?' } else { '&' });
            target.push_str(key);
            if !value.is_empty() {
                target.push('=');
                target.extend(url::form_urlencoded::byte_serialize(value.as_bytes()));
            }
        }
        let mut builder = Request::builder()
            .method(call.method.clone())
            .uri(target)
            .header(
                USER_AGENT,
                concat!("consul-elector/", env!("CARGO_PKG_VERSION")),
            );
        if let Some(token) = token {
            builder = builder.header(TOKEN_HEADER, token.clone());
        }
        let body = match &call.body {
            Some((bytes, content_type)) => {
                builder = builder.header(CONTENT_TYPE, *content_type);
                bytes.clone()
            }
            None => Bytes::new(),
        };
        builder
            .body(body)
            .map_err(|error| ConsulError::InvalidRequest {
                context: call.context.clone(),
                detail: error.to_string(),
            })
    }
}

/// One API request, before the datacenter and the token are added.
#[derive(Debug, Clone)]
pub(crate) struct Call {
    method: Method,
    /// Percent-encoded path, starting with `/v1/`.
    path: String,
    query: Vec<(&'static str, String)>,
    body: Option<(Bytes, &'static str)>,
    timeout: Option<Duration>,
    pub(crate) context: ErrorContext,
    idempotent: bool,
    accept_not_found: bool,
    /// The connection budget it draws from.
    lane: Lane,
}

impl Call {
    /// An idempotent request without body or query, with the default timeout.
    pub(crate) fn new(method: Method, path: String, context: ErrorContext) -> Self {
        Self {
            method,
            path,
            query: Vec::new(),
            body: None,
            timeout: None,
            context,
            idempotent: true,
            accept_not_found: false,
            lane: Lane::General,
        }
    }

    /// Adds query parameters (an empty value sends the bare key, like `?recurse`).
    pub(crate) fn query(mut self, pairs: impl IntoIterator<Item = (&'static str, String)>) -> Self {
        self.query.extend(pairs);
        self
    }

    /// Sets the body.
    pub(crate) fn body(mut self, body: impl Into<Bytes>, content_type: &'static str) -> Self {
        self.body = Some((body.into(), content_type));
        self
    }

    /// Overrides the timeout (blocking queries).
    pub(crate) fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Marks the request as unsafe to repeat after an ambiguous failure.
    pub(crate) fn not_idempotent(mut self) -> Self {
        self.idempotent = false;
        self
    }

    /// Sends it in `lane` (the general lane unless set).
    pub(crate) fn lane(mut self, lane: Lane) -> Self {
        self.lane = lane;
        self
    }

    /// Returns a 404 as a reply instead of an error.
    pub(crate) fn accept_not_found(mut self) -> Self {
        self.accept_not_found = true;
        self
    }
}

/// A successful (or accepted 404) response.
#[derive(Debug, Clone)]
pub(crate) struct Reply {
    pub(crate) status: StatusCode,
    pub(crate) meta: QueryMeta,
    pub(crate) body: Bytes,
}

impl Reply {
    /// Decodes a JSON body.
    pub(crate) fn json<T: DeserializeOwned>(&self, context: &ErrorContext) -> Result<T> {
        serde_json::from_slice(&self.body).map_err(|error| ConsulError::Decode {
            context: context.clone(),
            detail: error.to_string(),
        })
    }

    /// Decodes a `true`/`false` body, tolerating surrounding whitespace.
    pub(crate) fn boolean(&self, context: &ErrorContext) -> Result<bool> {
        match std::str::from_utf8(&self.body).map(str::trim) {
            Ok("true") => Ok(true),
            Ok("false") => Ok(false),
            _ => Err(ConsulError::Decode {
                context: context.clone(),
                detail: format!(
                    "expected true or false, got {:?}",
                    String::from_utf8_lossy(&self.body.slice(..self.body.len().min(64)))
                ),
            }),
        }
    }
}

/// A percent-encoded API path: `base` (like `/v1/kv/`) followed by `tail`, each `/`-separated
/// segment encoded on its own.
pub(crate) fn api_path(base: &str, tail: &str) -> String {
    let mut path = String::from(base);
    for (i, segment) in tail.split('/').enumerate() {
        if i > 0 {
            path.push('/');
        }
        path.extend(
            url::form_urlencoded::byte_serialize(segment.as_bytes()).map(|s| {
                // form encoding turns spaces into '+', which a path would keep literally.
                if s == "+" { "%20" } else { s }
            }),
        );
    }
    path
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_paths_per_segment() {
        assert_eq!(api_path("/v1/kv/", "a/b/c"), "/v1/kv/a/b/c");
        assert_eq!(
            api_path("/v1/kv/", "a b/c?d#e%"),
            "/v1/kv/a%20b/c%3Fd%23e%25"
        );
        assert_eq!(api_path("/v1/kv/", "prefix/"), "/v1/kv/prefix/");
        assert_eq!(api_path("/v1/kv/", ""), "/v1/kv/");
        assert_eq!(api_path("/v1/kv/", "a+b"), "/v1/kv/a%2Bb");
    }

    #[test]
    fn decodes_booleans_with_whitespace() {
        let context = ErrorContext::new("kv acquire", "k");
        let reply = |body: &'static str| Reply {
            status: StatusCode::OK,
            meta: QueryMeta::default(),
            body: Bytes::from_static(body.as_bytes()),
        };
        assert!(reply("true").boolean(&context).unwrap());
        assert!(reply(" true\n").boolean(&context).unwrap());
        assert!(!reply("false\n").boolean(&context).unwrap());
        let error = reply("yes").boolean(&context).unwrap_err();
        assert_eq!(error.category(), "decode");
    }
}
