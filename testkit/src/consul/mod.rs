//! An in-memory emulator of Consul's HTTP API for sessions, KV locking and blocking
//! queries, following `docs/consul.md` fact by fact.
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! use testkit::consul::{Emulator, EmulatorConfig};
//! let emu = Emulator::start(EmulatorConfig::default()).await?;
//! // Point a client at emu.url(); drive time with emu.advance(...) (manual clock).
//! emu.advance(std::time::Duration::from_secs(20)).await;
//! emu.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! # Endpoints
//! `/v1/session/{create,destroy/<id>,renew/<id>,info/<id>,list,node/<node>}`,
//! `/v1/kv/<key>` (GET/PUT/DELETE), `/v1/status/leader`, `/v1/agent/self` (reporting
//! [`EMULATED_VERSION`]), plus the `/_emu/` admin surface
//! (see the `api::admin` module docs).
//!
//! # Architecture
//! - `state`: the pure state machine (indexes, sessions, KV, tombstones, lock-delays,
//!   catalog); every operation takes `now`.
//! - `clock`: manual (virtual) or tokio time; `duration`: Go duration parsing/formatting.
//! - `blocking`: `?index`/`?wait` and the wait loop; `parked`: the registry of parked queries.
//! - `api`: hyper handlers; `server`: listener, connections, TTL reaper, test hooks;
//!   `inner`: the internals they share.
//! - `faults`, `stats`, `acl`: fault injection, counters, the ACL model.
//!
//! One `std::sync::Mutex<State>` (never held across `.await`) plus `watch` version
//! counters per topic (`notify`: one per watched key, one for the KV tables, one for the
//! sessions table): blocking handlers subscribe before evaluating, so no wake-up is lost,
//! and a write wakes only the queries it can affect. Due TTL
//! timers are fired lazily at the start of every state access, by `advance` (manual
//! clock) and by a reaper task that sleeps until the next deadline (tokio clock).
//!
//! # Deviations and judgement calls
//! - **Error texts are the bare messages** (`invalid session "<id>"`, `missing session`,
//!   `Missing node registration`), not the modern `raft apply failed: …` / `apply
//!   failed: …` wrappings; clients must match by substring either way.
//! - **No-op writes consume a Raft index.** A PUT whose result is identical to the stored
//!   entry goes through Raft in real Consul; the global counter ([`Emulator::index`])
//!   moves, but no table index, no ModifyIndex and no blocking query does. Likewise a
//!   plain DELETE of a missing key, failed CAS/acquire/release and failed session creates
//!   that reach the FSM (missing node/check) consume an index. Renew and lock-delay
//!   refusals do not.
//! - **Initial catalog write.** The agent node and its passing `serfHealth` are registered
//!   at Raft index 1, so the first API write gets index 2. Catalog hooks
//!   (`register_node`, `set_check_status`, …) are Raft writes and consume an index each.
//!   `register_node` gives a new node a passing `serfHealth` (as if an agent joined), so
//!   default sessions can be created on it; `set_check_status` on an unknown node
//!   registers the node with only that check.
//! - **Session body decoding** happens whenever the body is non-empty (Go decodes only
//!   when `Content-Length > 0`, which differs only for chunked bodies). JSON syntax errors
//!   are reported with serde's text after `Request decode failed: `; type errors and
//!   duration errors use Go's texts. Duplicate JSON keys differing only in case resolve in
//!   sorted-key order instead of document order.
//! - **JSON strings are not HTML-escaped** (Go writes `<`, `>`, `&` as `\u003c` etc.);
//!   both decode to the same text.
//! - **`"NodeChecks": []` renders as `[]`** (and `"Checks": []` also gives
//!   `"NodeChecks": []`); absent lists render as `null`, `Checks` is omitted when empty.
//! - **Keys** with a leading `/`, an empty segment (`//`) or a `.`/`..` segment (also
//!   percent-encoded) get 400 `Invalid key name "…"` on every KV method (real Consul
//!   redirects with 301 or answers 500 depending on version, reference §8.6).
//!   Non-UTF-8 percent-decoded paths get 400.
//! - **Missing-key blocking rule:** once a query has seen "not found" on an evaluation,
//!   every later "not found" raises its threshold to the current index (the flag is not
//!   reset when the key reappears in between, as in `blockingquery.Query`). Session info
//!   follows the same rule; lists do not.
//! - **Tombstones are never reaped** (no `tombstone_ttl` GC), so list indexes never go
//!   backwards on their own.
//! - **Lock-delay** expiry is compared with the emulator clock; an acquire at exactly the
//!   expiry instant succeeds (`expiry > now` refuses).
//! - **TTL expiry** fires at exactly `last_reset + ttl_multiplier × TTL` (alive at
//!   deadline − ε, gone at ≥ deadline); each expiry gets its own Raft index and its
//!   lock-delays start at the deadline instant even when processed later.
//! - **Leaderless mode** drops every TTL timer ([`SessionInfo::deadline`] reads `None`);
//!   restoring the leader re-arms them all at `now + multiplier × TTL`. Renew, like every
//!   write, gets 500 `No cluster leader` meanwhile. `?stale` reads answer with
//!   `X-Consul-KnownLeader: false` and `X-Consul-LastContact: 0`.
//! - **ACL model:** policies are key-prefix lists plus node-independent session
//!   read/write flags; write implies read. `DELETE ?recurse` needs `key:write` on the
//!   prefix itself. AccessorIDs in denial messages are derived from the secret (the
//!   anonymous token uses Consul's `00000000-0000-0000-0000-000000000002`). ACL
//!   filtering on session info/list/node and KV recurse/keys is silent.
//! - **Catalog** node names are matched case-sensitively; service checks in
//!   `ServiceChecks` are looked up among the node's checks by ID (no service model).
//! - **Chunked bodies** above `max_value_size` get the same 413 text with the number of
//!   bytes received (bodies are read up to the limit plus 16 MiB before giving up).
//! - **Session IDs** are looked up case-insensitively (Consul's lowercased ID index);
//!   the holder stored in a KV entry is the string given to `?acquire=`.
//! - **`?dc=`** other than the configured datacenter answers 500 `No path to datacenter`
//!   after the request's 400-level validation, on every endpoint.
//! - **Faults** compose: every matching `Latency` applies in insertion order, then the
//!   first matching non-latency action. Faulted requests are counted in [`Stats`].

mod acl;
mod api;
mod blocking;
mod clock;
mod config;
mod duration;
mod error;
mod faults;
mod inner;
mod json;
mod mutex;
mod notify;
mod parked;
mod query;
mod routes;
mod server;
mod session_request;
mod state;
mod stats;
mod version;

pub use acl::{AclConfig, AclPolicy};
pub use clock::ClockMode;
pub use config::EmulatorConfig;
pub use duration::{GoDurationError, format_go_duration, parse_go_duration};
pub use faults::{Endpoint, Fault, FaultAction, FaultId};
pub use server::Emulator;
pub use state::{CheckStatus, KvEntry, SessionBehavior, SessionInfo};
pub use stats::Stats;
pub use version::EMULATED_VERSION;

// What the real-Consul meter (`crate::real_consul::Meter`) shares with the emulator, so both
// classify and count requests the same way.
pub(crate) use acl::request_token;
pub(crate) use query::Query;
pub(crate) use routes::Route;
pub(crate) use stats::StatsCollector;

// The real-Consul meter locks its shared state as the emulator does.
pub(crate) use mutex::lock;
