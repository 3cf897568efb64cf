//! Fault injection between a `kube::Client` and the Kubernetes API server.
//!
//! [`KubeFaults`] holds a table of rules shared by every client it is layered into.
//! Each request is classified the way the API server does it (verb from method, path and
//! `?watch=true`; resource with subresource; namespace; name). The first rule (in the
//! order they were added) that matches and whose probability draw succeeds decides what
//! happens; a request no rule claims passes through untouched.
//!
//! ```no_run
//! # async fn demo(config: kube::Config) {
//! use testkit::kube_faults::{FaultAction, KubeFault, KubeFaults, Verb};
//! let faults = KubeFaults::new(7);
//! let client = faults.client(config).await;
//! faults.add(
//!     KubeFault::new(FaultAction::status(409, "Conflict", "injected conflict"))
//!         .verb(Verb::Patch)
//!         .resource("pods")
//!         .times(1),
//! );
//! # let _ = client; }
//! ```
//!
//! The layer sits outside kube's own stack (auth, retries), so the caller sees every
//! injected fault: kube's retry of 429/503/504 does not hide an injected 429.
//!
//! Judgement calls:
//! - `resource` matches exactly: `"pods"` does not match `pods/status` requests.
//! - [`FaultAction::CutWatch`], [`FaultAction::ExpireWatch`] and [`FaultAction::HoldWatch`]
//!   only claim watch requests; their event budget counts `ADDED`/`MODIFIED`/`DELETED` lines, never
//!   `BOOKMARK`s (which the server sends at its own pace). A watch the server answers
//!   with an error status is passed through untouched (the injection is still logged).
//! - A probability draw consumes one value of the seeded RNG only when
//!   `0 < probability < 1`, so rules that always or never fire do not shift the sequence.

mod body;
mod hold;
mod layer;
mod request;
mod rule;
mod table;

pub use body::FaultBody;
pub use hold::WatchHold;
pub use layer::{KubeFaultLayer, KubeFaultService};
pub use request::Verb;
pub use rule::{FaultAction, KubeFault};
pub use table::{Forwarded, Injection, KubeFaults, RuleId, SeenRequest};
