//! [`KubeFaults`], the shared rule table, and its logs of the requests seen, forwarded and faulted.

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex, MutexGuard, PoisonError},
};

use http::Method;
use rand::{SeedableRng, rngs::StdRng};

use super::request::{RequestInfo, Verb};
use super::rule::{FaultAction, KubeFault};

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
    pub(super) fn note_forwarded(&self, request: SeenRequest) {
        self.lock().forwarded.push(Forwarded {
            request,
            at: std::time::Instant::now(),
        });
    }

    /// Classifies a request, logs it and picks the fault to inject, if any (logging it).
    pub(super) fn decide(
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
    use std::time::Duration;

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
