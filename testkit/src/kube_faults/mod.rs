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

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex, MutexGuard, PoisonError},
    time::Duration,
};

use http::Method;
use rand::{Rng, SeedableRng, rngs::StdRng};

pub use body::FaultBody;
pub use hold::WatchHold;
pub use layer::{KubeFaultLayer, KubeFaultService};
use request::RequestInfo;
pub use request::Verb;

/// A shared, seeded table of fault rules. Clones share the table, the RNG and the log.
#[derive(Clone)]
pub struct KubeFaults {
    table: Arc<Mutex<Table>>,
}

struct Table {
    rules: BTreeMap<RuleId, KubeFault>,
    next_id: u64,
    rng: StdRng,
    injected: Vec<Injection>,
    seen: Vec<SeenRequest>,
    forwarded: Vec<Forwarded>,
}

/// A request the layer handed on to the API server (after any latency it injected), and when.
/// A request whose caller gave up during the injected latency is never forwarded, as a
/// request cancelled while it waits in the API server's queue is never executed.
#[derive(Clone, Debug, PartialEq)]
pub struct Forwarded {
    /// The request.
    pub request: SeenRequest,
    /// When it was handed on.
    pub at: std::time::Instant,
}

/// Identifies a rule added with [`KubeFaults::add`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RuleId(u64);

/// One fault rule. `None` selectors match anything.
#[derive(Clone, Debug, PartialEq)]
pub struct KubeFault {
    /// The verb to match.
    pub verb: Option<Verb>,
    /// The resource as it appears in the path, with its subresource: `pods`,
    /// `pods/status`, `leaderelections`, `events`.
    pub resource: Option<String>,
    /// The namespace to match.
    pub namespace: Option<String>,
    /// The object name to match.
    pub name: Option<String>,
    /// What to do with a matching request.
    pub action: FaultAction,
    /// Chance that a matching request is faulted; `1.0` = always.
    pub probability: f64,
    /// How many requests to fault before the rule removes itself; `None` = until removed.
    pub times: Option<u32>,
}

/// What happens to a faulted request.
#[derive(Clone, Debug, PartialEq)]
pub enum FaultAction {
    /// Answer without contacting the server: HTTP `code` with a Kubernetes `Status` body
    /// (kube turns it into `kube::Error::Api`), plus `Retry-After` when given.
    Status {
        /// HTTP status and `Status.code`, e.g. 409, 429, 500.
        code: u16,
        /// `Status.reason`, e.g. `Conflict`, `TooManyRequests`, `InternalError`.
        reason: String,
        /// `Status.message`.
        message: String,
        /// Seconds for the `Retry-After` header and `details.retryAfterSeconds`.
        retry_after: Option<u64>,
    },
    /// Wait this long, then forward the request.
    Latency(Duration),
    /// Forward the watch; after `after_events` object events the connection drops.
    CutWatch {
        /// Object events delivered before the cut.
        after_events: u32,
    },
    /// Forward the watch; after `after_events` object events deliver one in-stream
    /// `ERROR` 410 `Expired` event (HTTP status stays 200) and end the stream, as the
    /// server does for a too-old resourceVersion.
    ExpireWatch {
        /// Object events delivered before the expiry.
        after_events: u32,
    },
    /// Forward the watch; while `WatchHold::hold` is on, deliver none of its events (they
    /// wait in the connection), as a watch whose connection stalls. The rule stays in
    /// place for the watches that follow: a client that gives up and watches again gets
    /// nothing newer either.
    HoldWatch(WatchHold),
}

impl FaultAction {
    /// A [`FaultAction::Status`] without `Retry-After`.
    pub fn status(code: u16, reason: impl Into<String>, message: impl Into<String>) -> Self {
        FaultAction::Status {
            code,
            reason: reason.into(),
            message: message.into(),
            retry_after: None,
        }
    }

    fn watch_only(&self) -> bool {
        matches!(
            self,
            FaultAction::CutWatch { .. }
                | FaultAction::ExpireWatch { .. }
                | FaultAction::HoldWatch(_)
        )
    }
}

impl KubeFault {
    /// A rule that applies `action` to every request, always, until removed. Narrow it
    /// with the builder methods.
    pub fn new(action: FaultAction) -> Self {
        KubeFault {
            verb: None,
            resource: None,
            namespace: None,
            name: None,
            action,
            probability: 1.0,
            times: None,
        }
    }

    /// Only requests with this verb.
    pub fn verb(mut self, verb: Verb) -> Self {
        self.verb = Some(verb);
        self
    }

    /// Only requests for this resource (`pods`, `pods/status`, ...).
    pub fn resource(mut self, resource: impl Into<String>) -> Self {
        self.resource = Some(resource.into());
        self
    }

    /// Only requests in this namespace.
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = Some(namespace.into());
        self
    }

    /// Only requests naming this object.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Fault a matching request with this probability.
    pub fn probability(mut self, probability: f64) -> Self {
        self.probability = probability;
        self
    }

    /// Fault this many requests, then remove the rule.
    pub fn times(mut self, times: u32) -> Self {
        self.times = Some(times);
        self
    }

    fn matches(&self, request: &RequestInfo) -> bool {
        fn selects<T: PartialEq>(selector: &Option<T>, value: &Option<T>) -> bool {
            selector.is_none() || selector == value
        }
        self.times != Some(0)
            && selects(&self.verb, &request.verb)
            && selects(&self.resource, &request.resource)
            && selects(&self.namespace, &request.namespace)
            && selects(&self.name, &request.name)
            && (!self.action.watch_only() || request.verb == Some(Verb::Watch))
    }

    fn draw(&self, rng: &mut StdRng) -> bool {
        if self.probability >= 1.0 {
            true
        } else if self.probability <= 0.0 || self.probability.is_nan() {
            false
        } else {
            rng.random::<f64>() < self.probability
        }
    }
}

/// One injected fault, for assertions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Injection {
    /// The rule that fired.
    pub rule: RuleId,
    /// The request's verb.
    pub verb: Option<Verb>,
    /// The request's resource (with subresource).
    pub resource: Option<String>,
    /// The request path, without the query.
    pub path: String,
}

/// One request that went through the layer, faulted or not, for assertions on what a client
/// asked the API server for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SeenRequest {
    /// The request's verb.
    pub verb: Option<Verb>,
    /// The request's resource (with subresource).
    pub resource: Option<String>,
    /// The namespace the request is scoped to.
    pub namespace: Option<String>,
    /// The object name, when the path names one.
    pub name: Option<String>,
    /// Whether the client asked for metadata only (`Accept: ...;as=PartialObjectMetadata`),
    /// so the answer cannot carry an object's data.
    pub metadata_only: bool,
}

impl KubeFaults {
    /// An empty rule table whose probability draws come from `StdRng::seed_from_u64(seed)`.
    pub fn new(seed: u64) -> Self {
        KubeFaults {
            table: Arc::new(Mutex::new(Table {
                rules: BTreeMap::new(),
                next_id: 0,
                rng: StdRng::seed_from_u64(seed),
                injected: Vec::new(),
                seen: Vec::new(),
                forwarded: Vec::new(),
            })),
        }
    }

    /// Adds a rule after the existing ones.
    pub fn add(&self, rule: KubeFault) -> RuleId {
        let mut table = self.lock();
        let id = RuleId(table.next_id);
        table.next_id += 1;
        table.rules.insert(id, rule);
        id
    }

    /// Removes a rule; removing one that is gone (or used up) does nothing.
    pub fn remove(&self, id: RuleId) {
        self.lock().rules.remove(&id);
    }

    /// Removes every rule. The injection log is kept.
    pub fn clear(&self) {
        self.lock().rules.clear();
    }

    /// A tower layer that applies this table to a service stack, e.g.
    /// `ClientBuilder::try_from(config)?.with_layer(&faults.layer()).build()`.
    pub fn layer(&self) -> KubeFaultLayer {
        KubeFaultLayer::new(self.clone())
    }

    /// kube's default client stack for `config` (with rustls' ring provider installed),
    /// wrapped in this table's layer.
    ///
    /// # Panics
    /// When kube cannot build a client from `config` (an invalid TLS configuration).
    pub async fn client(&self, config: kube::Config) -> kube::Client {
        crate::cluster::install_crypto_provider();
        let url = config.cluster_url.clone();
        match kube::client::ClientBuilder::try_from(config) {
            Ok(builder) => builder.with_layer(&self.layer()).build(),
            Err(err) => panic!("testkit: cannot build a faulty client for {url}: {err}"),
        }
    }

    /// Every fault injected so far, in order.
    pub fn injected(&self) -> Vec<Injection> {
        self.lock().injected.clone()
    }

    /// Every request that went through the layer so far, in order.
    pub fn seen(&self) -> Vec<SeenRequest> {
        self.lock().seen.clone()
    }

    /// Every request the layer handed on to the API server so far, in order.
    pub fn forwarded(&self) -> Vec<Forwarded> {
        self.lock().forwarded.clone()
    }

    /// Records that `request` is being handed on now.
    fn note_forwarded(&self, request: SeenRequest) {
        self.lock().forwarded.push(Forwarded {
            request,
            at: std::time::Instant::now(),
        });
    }

    /// Classifies a request, logs it and picks the fault to inject, if any (logging it).
    fn decide(
        &self,
        method: &Method,
        path: &str,
        query: Option<&str>,
        metadata_only: bool,
    ) -> (RequestInfo, SeenRequest, Option<FaultAction>) {
        let request = RequestInfo::parse(method, path, query);
        let mut table = self.lock();
        let Table {
            rules,
            rng,
            injected,
            seen,
            ..
        } = &mut *table;
        let this = SeenRequest {
            verb: request.verb,
            resource: request.resource.clone(),
            namespace: request.namespace.clone(),
            name: request.name.clone(),
            metadata_only,
        };
        seen.push(this.clone());
        let fired = rules
            .iter_mut()
            .find(|(_, rule)| rule.matches(&request) && rule.draw(rng));
        let Some((&id, rule)) = fired else {
            return (request, this, None);
        };
        let action = rule.action.clone();
        if let Some(times) = &mut rule.times {
            *times -= 1;
            if *times == 0 {
                rules.remove(&id);
            }
        }
        injected.push(Injection {
            rule: id,
            verb: request.verb,
            resource: request.resource.clone(),
            path: path.to_string(),
        });
        (request, this, Some(action))
    }

    fn lock(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decide(faults: &KubeFaults, method: Method, uri: &str) -> Option<FaultAction> {
        let (path, query) = uri
            .split_once('?')
            .map_or((uri, None), |(p, q)| (p, Some(q)));
        faults.decide(&method, path, query, false).2
    }

    const PATCH_POD: &str = "/api/v1/namespaces/ns/pods/a?&fieldManager=m";
    const WATCH_PODS: &str = "/api/v1/namespaces/ns/pods?&watch=true&resourceVersion=5";

    fn conflict() -> FaultAction {
        FaultAction::status(409, "Conflict", "injected")
    }

    #[test]
    fn selectors_narrow_the_rule() {
        let faults = KubeFaults::new(1);
        faults.add(
            KubeFault::new(conflict())
                .verb(Verb::Patch)
                .resource("pods")
                .namespace("ns")
                .name("a"),
        );
        assert_eq!(decide(&faults, Method::PATCH, PATCH_POD), Some(conflict()));
        assert_eq!(
            decide(&faults, Method::PATCH, "/api/v1/namespaces/ns/pods/b"),
            None
        );
        assert_eq!(
            decide(&faults, Method::PATCH, "/api/v1/namespaces/other/pods/a"),
            None
        );
        assert_eq!(
            decide(
                &faults,
                Method::PATCH,
                "/api/v1/namespaces/ns/pods/a/status"
            ),
            None
        );
        assert_eq!(
            decide(&faults, Method::GET, "/api/v1/namespaces/ns/pods/a"),
            None
        );
    }

    #[test]
    fn times_uses_the_rule_up_and_removes_it() {
        let faults = KubeFaults::new(1);
        let id = faults.add(KubeFault::new(conflict()).times(2));
        assert!(decide(&faults, Method::PATCH, PATCH_POD).is_some());
        assert!(decide(&faults, Method::PATCH, PATCH_POD).is_some());
        assert_eq!(decide(&faults, Method::PATCH, PATCH_POD), None);
        assert!(faults.lock().rules.is_empty());
        let log = faults.injected();
        assert_eq!(log.len(), 2);
        assert_eq!(log[0].rule, id);
        assert_eq!(log[0].verb, Some(Verb::Patch));
        assert_eq!(log[0].path, "/api/v1/namespaces/ns/pods/a");
    }

    #[test]
    fn first_matching_rule_wins_and_remove_and_clear_work() {
        let faults = KubeFaults::new(1);
        let first = faults.add(KubeFault::new(conflict()));
        faults.add(KubeFault::new(FaultAction::Latency(Duration::from_millis(
            1,
        ))));
        assert_eq!(decide(&faults, Method::PATCH, PATCH_POD), Some(conflict()));
        faults.remove(first);
        assert_eq!(
            decide(&faults, Method::PATCH, PATCH_POD),
            Some(FaultAction::Latency(Duration::from_millis(1)))
        );
        faults.clear();
        assert_eq!(decide(&faults, Method::PATCH, PATCH_POD), None);
    }

    #[test]
    fn watch_actions_only_claim_watches() {
        let faults = KubeFaults::new(1);
        let expire = FaultAction::ExpireWatch { after_events: 1 };
        faults.add(KubeFault::new(expire.clone()).resource("pods"));
        assert_eq!(
            decide(
                &faults,
                Method::GET,
                "/api/v1/namespaces/ns/pods?&limit=500"
            ),
            None
        );
        assert_eq!(decide(&faults, Method::GET, WATCH_PODS), Some(expire));
    }

    #[test]
    fn same_seed_same_decisions() {
        let run = |seed| {
            let faults = KubeFaults::new(seed);
            faults.add(KubeFault::new(conflict()).probability(0.5));
            (0..64)
                .map(|_| decide(&faults, Method::PATCH, PATCH_POD).is_some())
                .collect::<Vec<_>>()
        };
        assert_eq!(run(42), run(42));
        let fired = run(42).iter().filter(|f| **f).count();
        assert!((8..56).contains(&fired), "{fired} of 64 fired at p=0.5");
        assert_ne!(run(42), run(43));
    }
}
