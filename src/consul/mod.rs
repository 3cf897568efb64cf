//! Consul HTTP API client: sessions, KV locks and blocking queries, with Consul's index rules,
//! typed errors, bounded retries and per-address connection budgets (see `transport`: lanes
//! keep session renewals clear of long polls; proxies come from `HTTP(S)_PROXY`/`NO_PROXY`).
//!
//! - [`ConsulSettings`]: configuration from Consul's environment variables.
//! - [`ConsulClient`]: the operations; [`ConsulClient::with_overrides`] gives per-election
//!   handles that share the connection budgets.
//! - [`BlockingWatch`]: a blocking-query loop following Consul's client rules.
//! - The token file and the TLS files are re-read while the client runs (`reload`,
//!   `token_file`, `tls_reload`), so rotated credentials are used without a restart.
//! - [`ConsulError`]: typed errors with [`ConsulError::category`] and
//!   [`ConsulError::is_retryable`].

mod blocking;
mod client;
mod error;
mod gated_body;
mod go_duration;
mod kv;
mod observer;
mod query;
mod reload;
mod retry;
mod session;
mod settings;
mod tls;
mod tls_reload;
mod token;
mod token_file;
mod transport;

pub use blocking::{BlockingIndex, BlockingWatch, IndexChange, TokenBucket};
pub use client::{ConsulClient, Overrides, TokenIdentity};
pub use error::{ConsulError, ErrorContext, Result, TransportFailure};
pub use go_duration::{
    DurationParseError, format as format_go_duration, parse as parse_go_duration,
};
pub use kv::{KvEntry, KvList, KvPair};
pub use observer::RequestObserver;
pub use query::{Blocking, Consistency, MAX_WAIT, QueryMeta, QueryOptions, QueryResult};
pub use retry::RetryPolicy;
pub use session::{ServiceCheck, SessionBehavior, SessionEntry, SessionRequest};
pub use settings::{
    ConsulAddress, ConsulSettings, SettingsError, Tenancy, TlsSettings, WatchPacing,
};
pub use token::{ConsulToken, InvalidTokenError};
