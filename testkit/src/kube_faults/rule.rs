//! One fault rule, [`KubeFault`]: which requests it selects and the [`FaultAction`] it applies.

use std::time::Duration;

use rand::{Rng, rngs::StdRng};

use super::hold::WatchHold;
use super::request::{RequestInfo, Verb};

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

    pub(super) fn matches(&self, request: &RequestInfo) -> bool {
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

    pub(super) fn draw(&self, rng: &mut StdRng) -> bool {
        if self.probability >= 1.0 {
            true
        } else if self.probability <= 0.0 || self.probability.is_nan() {
            false
        } else {
            rng.random::<f64>() < self.probability
        }
    }
}
