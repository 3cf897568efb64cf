//! Several per-namespace watch streams feeding ONE reflector store.
//!
//! A reflector's `Writer` reads a watch stream as the history of the whole store: `Init`
//! starts a fresh buffer, `InitApply` fills it and `InitDone` swaps it in as the entire store.
//! When the operator watches several namespaces (`--watch-namespaces a,b`), one watcher per
//! namespace feeds the same store, and a relist of namespace `b` (a watch that expired, a
//! `410 Gone`) would then replace the store with `b`'s objects alone, and interleaved initial
//! lists would swap in a partial buffer. The controller would plan on a store missing pods (a
//! leader missing from the cache looks moved) or elections.
//!
//! [`merge`] rewrites the merged stream so the store stays the union of the namespaces:
//! - until every namespace has listed once: one `Init`, every `InitApply`, and one `InitDone`
//!   when the last namespace's first list is complete (the store becomes ready then);
//! - after that, a namespace's relist leaves the others alone: its objects arrive as `Apply`,
//!   and at its end a `Delete` is emitted for each object of THAT namespace in the store that
//!   the relist no longer contained;
//! - a namespace whose list restarted before the store was ready gets the same clean-up right
//!   after the `InitDone`, for the objects of its abandoned attempts;
//! - a single stream (watching all namespaces) passes through unchanged.
//!
//! The decisions are made by `ScopedMerge` (pure); only the clean-up after a relist reads
//! the store, at the moment it is emitted, when every event before it has been applied.
//! [`scoped_apis`] gives the APIs, one per scope, those streams watch.

use std::collections::{HashSet, VecDeque};
use std::hash::Hash;

use futures::stream::{self, BoxStream};
use futures::{Stream, StreamExt};
use kube::runtime::reflector::{Lookup, ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Api, Client};

/// The watch stream of one scope: a namespace, or every namespace (`None`).
pub type Scoped<S> = (Option<String>, S);

/// Merges the watch streams of several scopes into one stream for a single reflector whose
/// store `store` reads (see the module documentation). Errors pass through as they come.
pub fn merge<K, S>(
    streams: Vec<Scoped<S>>,
    store: Store<K>,
) -> BoxStream<'static, watcher::Result<watcher::Event<K>>>
where
    K: Lookup + Clone + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
    S: Stream<Item = watcher::Result<watcher::Event<K>>> + Send + 'static,
{
    if streams.len() <= 1 {
        return stream::select_all(streams.into_iter().map(|(_, s)| s.boxed())).boxed();
    }
    let (scopes, tagged): (Vec<_>, Vec<_>) = streams
        .into_iter()
        .enumerate()
        .map(|(index, (scope, s))| (scope, s.map(move |item| (index, item)).boxed()))
        .unzip();
    let state = (
        stream::select_all(tagged),
        ScopedMerge::new(scopes),
        VecDeque::new(),
        store,
    );
    stream::unfold(
        state,
        |(mut input, mut merge, mut queue, store)| async move {
            loop {
                match queue.pop_front() {
                    Some(step) => {
                        // Resolved only now: the reflector has applied everything yielded before.
                        let mut events = resolve(step, &store).into_iter();
                        if let Some(event) = events.next() {
                            let rest: Vec<_> = events.map(Step::Event).collect();
                            for step in rest.into_iter().rev() {
                                queue.push_front(step);
                            }
                            return Some((Ok(event), (input, merge, queue, store)));
                        }
                    }
                    None => match input.next().await {
                        None => return None,
                        Some((_, Err(error))) => {
                            return Some((Err(error), (input, merge, queue, store)));
                        }
                        Some((index, Ok(event))) => queue.extend(merge.on_event(index, event)),
                    },
                }
            }
        },
    )
    .boxed()
}

/// What the merged stream emits next.
enum Step<K: Lookup>
where
    K::DynamicType: Eq + Hash,
{
    /// This event, as it is.
    Event(watcher::Event<K>),
    /// A relist of `scope` ended: the objects of `scope` the store holds and `listed` does not
    /// are gone.
    DropUnlisted {
        scope: Option<String>,
        listed: HashSet<ObjectRef<K>>,
    },
}

/// The events `step` stands for, given what `store` holds now.
fn resolve<K>(step: Step<K>, store: &Store<K>) -> Vec<watcher::Event<K>>
where
    K: Lookup + Clone + 'static,
    K::DynamicType: Default + Eq + Hash + Clone,
{
    match step {
        Step::Event(event) => vec![event],
        Step::DropUnlisted { scope, listed } => store
            .state_filter(|obj| {
                let key = key_of(obj);
                in_scope(&key, scope.as_deref()) && !listed.contains(&key)
            })
            .into_iter()
            .map(|obj| watcher::Event::Delete(K::clone(&obj)))
            .collect(),
    }
}

fn key_of<K: Lookup>(obj: &K) -> ObjectRef<K>
where
    K::DynamicType: Default + Eq + Hash + Clone,
{
    obj.to_object_ref(K::DynamicType::default())
}

fn in_scope<K: Lookup>(key: &ObjectRef<K>, scope: Option<&str>) -> bool
where
    K::DynamicType: Eq + Hash,
{
    scope.is_none() || key.namespace.as_deref() == scope
}

/// The per-scope bookkeeping of [`ScopedMerge`].
struct ScopeState<K: Lookup>
where
    K::DynamicType: Eq + Hash,
{
    scope: Option<String>,
    /// The objects of the list in progress, if one is.
    listing: Option<HashSet<ObjectRef<K>>>,
    /// Whether a list of this scope completed.
    listed: bool,
    /// Whether this scope started a list before (its earlier objects may be in the buffer).
    restarted: bool,
    /// A relist that ended before the store was ready: its clean-up waits for the `InitDone`.
    pending: Option<HashSet<ObjectRef<K>>>,
    /// What this scope watched after its list but before the store was ready, in order:
    /// applied right after the `InitDone`, since the writer swaps its list buffer in as the
    /// whole store then and would lose what it had applied before.
    deferred: Vec<watcher::Event<K>>,
}

/// Decides, event by event, what the merged stream emits (pure: no store, no I/O).
struct ScopedMerge<K: Lookup>
where
    K::DynamicType: Eq + Hash,
{
    scopes: Vec<ScopeState<K>>,
    /// Whether the single `Init` was emitted.
    init_sent: bool,
    /// Whether the single `InitDone` was emitted (the store is complete).
    ready: bool,
}

impl<K> ScopedMerge<K>
where
    K: Lookup,
    K::DynamicType: Default + Eq + Hash + Clone,
{
    fn new(scopes: Vec<Option<String>>) -> Self {
        ScopedMerge {
            scopes: scopes
                .into_iter()
                .map(|scope| ScopeState {
                    scope,
                    listing: None,
                    listed: false,
                    restarted: false,
                    pending: None,
                    deferred: Vec::new(),
                })
                .collect(),
            init_sent: false,
            ready: false,
        }
    }

    /// What to emit for `event` of the stream at `index` (an index out of range is ignored).
    fn on_event(&mut self, index: usize, event: watcher::Event<K>) -> Vec<Step<K>> {
        let ready = self.ready;
        let Some(scope) = self.scopes.get_mut(index) else {
            return Vec::new();
        };
        match event {
            watcher::Event::Apply(_) | watcher::Event::Delete(_) if !ready => {
                scope.deferred.push(event);
                Vec::new()
            }
            watcher::Event::Apply(_) | watcher::Event::Delete(_) => vec![Step::Event(event)],
            watcher::Event::Init => {
                scope.restarted |= scope.listed || scope.listing.is_some();
                scope.listing = Some(HashSet::new());
                scope.pending = None;
                // The new list supersedes what the scope watched before it.
                scope.deferred.clear();
                if ready || self.init_sent {
                    Vec::new()
                } else {
                    self.init_sent = true;
                    vec![Step::Event(watcher::Event::Init)]
                }
            }
            watcher::Event::InitApply(obj) => {
                scope.listing.get_or_insert_default().insert(key_of(&obj));
                if ready {
                    vec![Step::Event(watcher::Event::Apply(obj))]
                } else {
                    vec![Step::Event(watcher::Event::InitApply(obj))]
                }
            }
            watcher::Event::InitDone => {
                let listed = scope.listing.take().unwrap_or_default();
                scope.listed = true;
                if ready {
                    return vec![Step::DropUnlisted {
                        scope: scope.scope.clone(),
                        listed,
                    }];
                }
                if scope.restarted {
                    scope.pending = Some(listed);
                }
                self.finish_initial_list()
            }
        }
    }

    /// Once every scope has listed: the `InitDone`, then each scope's deferred clean-up and
    /// the events it watched meanwhile (after the clean-up, which would otherwise drop an
    /// object created after the list).
    fn finish_initial_list(&mut self) -> Vec<Step<K>> {
        if !self.scopes.iter().all(|s| s.listed) {
            return Vec::new();
        }
        self.ready = true;
        let mut steps = vec![Step::Event(watcher::Event::InitDone)];
        for scope in &mut self.scopes {
            if let Some(listed) = scope.pending.take() {
                steps.push(Step::DropUnlisted {
                    scope: scope.scope.clone(),
                    listed,
                });
            }
            steps.extend(scope.deferred.drain(..).map(Step::Event));
        }
        steps
    }
}

/// One API per watched namespace (or one over all namespaces), each with its scope.
pub fn scoped_apis<K>(client: &Client, namespaces: &[String]) -> Vec<(Option<String>, Api<K>)>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
{
    if namespaces.is_empty() {
        vec![(None, Api::all(client.clone()))]
    } else {
        namespaces
            .iter()
            .map(|ns| (Some(ns.clone()), Api::namespaced(client.clone(), ns)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;
    use futures::channel::mpsc;
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::ObjectMeta;
    use kube::runtime::reflector::{self, store::Writer};
    use watcher::Event;

    fn pod(ns: &str, name: &str) -> Pod {
        Pod {
            metadata: ObjectMeta {
                namespace: Some(ns.into()),
                name: Some(name.into()),
                ..ObjectMeta::default()
            },
            ..Pod::default()
        }
    }

    /// The store's objects as sorted `namespace/name`s.
    fn contents(store: &Store<Pod>) -> Vec<String> {
        let mut names: Vec<String> = store
            .state()
            .iter()
            .map(|p| {
                let key = key_of(p.as_ref());
                format!("{}/{}", key.namespace.unwrap_or_default(), key.name)
            })
            .collect();
        names.sort();
        names
    }

    /// Drives a [`ScopedMerge`] over `a` and `b` into a real reflector `Writer`, resolving
    /// each step when it is reached as the stream does; what reached the writer is recorded.
    struct Driver {
        merge: ScopedMerge<Pod>,
        writer: Writer<Pod>,
        store: Store<Pod>,
        emitted: Vec<String>,
    }

    impl Driver {
        fn new() -> Self {
            let (store, writer) = reflector::store();
            Driver {
                merge: ScopedMerge::new(vec![Some("a".into()), Some("b".into())]),
                writer,
                store,
                emitted: Vec::new(),
            }
        }

        fn feed(&mut self, index: usize, event: Event<Pod>) {
            for step in self.merge.on_event(index, event) {
                for event in resolve(step, &self.store) {
                    self.emitted.push(describe(&event));
                    self.writer.apply_watcher_event(&event);
                }
            }
        }

        fn list(&mut self, index: usize, ns: &str, names: &[&str]) {
            self.feed(index, Event::Init);
            for name in names {
                self.feed(index, Event::InitApply(pod(ns, name)));
            }
            self.feed(index, Event::InitDone);
        }

        fn ready(&self) -> bool {
            self.store
                .wait_until_ready()
                .now_or_never()
                .is_some_and(|r| r.is_ok())
        }
    }

    fn describe(event: &Event<Pod>) -> String {
        let name = |p: &Pod| {
            let key = key_of(p);
            format!("{}/{}", key.namespace.unwrap_or_default(), key.name)
        };
        match event {
            Event::Apply(p) => format!("Apply {}", name(p)),
            Event::Delete(p) => format!("Delete {}", name(p)),
            Event::Init => "Init".into(),
            Event::InitApply(p) => format!("InitApply {}", name(p)),
            Event::InitDone => "InitDone".into(),
        }
    }

    #[test]
    fn interleaved_initial_lists_give_the_union_and_one_init_done() {
        let mut d = Driver::new();
        d.feed(0, Event::Init);
        d.feed(0, Event::InitApply(pod("a", "a1")));
        d.feed(1, Event::Init);
        d.feed(1, Event::InitApply(pod("b", "b1")));
        d.feed(0, Event::InitApply(pod("a", "a2")));
        d.feed(0, Event::InitDone);
        assert!(!d.ready(), "not ready before every namespace has listed");
        assert!(contents(&d.store).is_empty(), "nothing swapped in yet");
        d.feed(1, Event::InitDone);
        assert!(d.ready());
        assert_eq!(contents(&d.store), ["a/a1", "a/a2", "b/b1"]);
        assert_eq!(
            d.emitted,
            [
                "Init",
                "InitApply a/a1",
                "InitApply b/b1",
                "InitApply a/a2",
                "InitDone"
            ]
        );
    }

    /// The pod `ns/name` at resourceVersion `version`.
    fn pod_at(ns: &str, name: &str, version: &str) -> Pod {
        let mut pod = pod(ns, name);
        pod.metadata.resource_version = Some(version.into());
        pod
    }

    /// `ns/name`'s resourceVersion in the store.
    fn version_of(store: &Store<Pod>, ns: &str, name: &str) -> Option<String> {
        store
            .get(&ObjectRef::new(name).within(ns))
            .and_then(|p| p.metadata.resource_version.clone())
    }

    #[test]
    fn what_a_listed_namespace_watches_before_the_last_list_completes_is_kept() {
        let mut d = Driver::new();
        d.list(0, "a", &[]);
        d.feed(0, Event::Apply(pod_at("a", "changed", "1")));
        d.feed(0, Event::Apply(pod_at("a", "deleted", "2")));
        d.feed(1, Event::Init);
        d.feed(0, Event::Apply(pod_at("a", "changed", "3")));
        d.feed(0, Event::Delete(pod_at("a", "deleted", "4")));
        d.feed(1, Event::InitApply(pod_at("b", "b1", "5")));
        d.feed(1, Event::InitDone);
        assert!(d.ready());
        assert_eq!(contents(&d.store), ["a/changed", "b/b1"], "{:?}", d.emitted);
        assert_eq!(
            version_of(&d.store, "a", "changed").as_deref(),
            Some("3"),
            "the newest version a watched, not an older one"
        );
    }

    #[test]
    fn a_namespace_that_relists_before_the_store_is_ready_drops_what_it_watched_before() {
        let mut d = Driver::new();
        d.list(0, "a", &["a1"]);
        d.feed(0, Event::Apply(pod_at("a", "a1", "2")));
        // `a`'s watch expired: its relist supersedes what it watched before.
        d.feed(0, Event::Init);
        d.feed(0, Event::InitApply(pod_at("a", "a1", "3")));
        d.feed(0, Event::InitDone);
        d.list(1, "b", &["b1"]);
        assert_eq!(contents(&d.store), ["a/a1", "b/b1"]);
        assert_eq!(version_of(&d.store, "a", "a1").as_deref(), Some("3"));
    }

    #[test]
    fn a_relist_keeps_the_other_namespace_and_drops_only_its_own_vanished_objects() {
        let mut d = Driver::new();
        d.list(0, "a", &["a1", "a2"]);
        d.list(1, "b", &["b1", "b2"]);
        d.feed(1, Event::Apply(pod("b", "b3")));
        d.emitted.clear();

        d.feed(1, Event::Init);
        d.feed(1, Event::InitApply(pod("b", "b2")));
        d.feed(0, Event::Apply(pod("a", "a3")));
        d.feed(1, Event::InitApply(pod("b", "b4")));
        assert_eq!(
            contents(&d.store),
            ["a/a1", "a/a2", "a/a3", "b/b1", "b/b2", "b/b3", "b/b4"],
            "nothing dropped while the relist runs"
        );
        d.feed(1, Event::InitDone);
        assert_eq!(contents(&d.store), ["a/a1", "a/a2", "a/a3", "b/b2", "b/b4"]);
        let mut deletes: Vec<_> = d
            .emitted
            .iter()
            .filter(|e| e.starts_with("Delete"))
            .collect();
        deletes.sort();
        assert_eq!(deletes, ["Delete b/b1", "Delete b/b3"]);
        assert!(
            !d.emitted
                .iter()
                .any(|e| e.starts_with("Init") || e.contains("a/a1")),
            "no Init* reaches the writer after the first list: {:?}",
            d.emitted
        );
    }

    #[test]
    fn an_initial_list_that_restarted_drops_what_its_abandoned_attempt_buffered() {
        let mut d = Driver::new();
        d.feed(0, Event::Init);
        d.feed(0, Event::InitApply(pod("a", "gone")));
        d.feed(0, Event::InitApply(pod("a", "kept")));
        // The list of `a` failed part-way; the watcher starts over.
        d.feed(0, Event::Init);
        d.feed(0, Event::InitApply(pod("a", "kept")));
        d.feed(0, Event::InitDone);
        d.list(1, "b", &["b1"]);
        assert!(d.ready());
        assert_eq!(contents(&d.store), ["a/kept", "b/b1"]);
        assert_eq!(d.emitted.iter().filter(|e| *e == "Init").count(), 1);
        assert_eq!(d.emitted.iter().filter(|e| *e == "InitDone").count(), 1);
    }

    #[test]
    fn a_namespace_relisting_when_the_store_becomes_ready_finishes_with_applies() {
        let mut d = Driver::new();
        d.list(0, "a", &["a1", "old"]);
        // `a` relists before `b` has listed once; the store becomes ready in between.
        d.feed(0, Event::Init);
        d.feed(0, Event::InitApply(pod("a", "a1")));
        d.list(1, "b", &["b1"]);
        assert!(d.ready());
        d.feed(0, Event::InitApply(pod("a", "a2")));
        d.feed(0, Event::InitDone);
        assert_eq!(contents(&d.store), ["a/a1", "a/a2", "b/b1"]);
    }

    /// Sends `events` into the sub-stream `tx`, then takes what the merged reflector stream
    /// has ready.
    fn push_and_drain(
        tx: &mpsc::UnboundedSender<watcher::Result<Event<Pod>>>,
        events: Vec<Event<Pod>>,
        out: &mut BoxStream<'static, watcher::Result<Event<Pod>>>,
    ) -> Vec<String> {
        for event in events {
            assert!(tx.unbounded_send(Ok(event)).is_ok(), "stream alive");
        }
        let mut seen = Vec::new();
        while let Some(Some(item)) = out.next().now_or_never() {
            match item {
                Ok(event) => seen.push(describe(&event)),
                Err(error) => seen.push(format!("error {error}")),
            }
        }
        seen
    }

    #[test]
    fn the_stream_keeps_one_store_right_across_a_relist() {
        let (store, writer) = reflector::store::<Pod>();
        let (tx_a, rx_a) = mpsc::unbounded();
        let (tx_b, rx_b) = mpsc::unbounded();
        let merged = merge(
            vec![(Some("a".to_owned()), rx_a), (Some("b".to_owned()), rx_b)],
            store.clone(),
        );
        let mut out = reflector::reflector(writer, merged).boxed();
        let list = |ns: &str, names: &[&str]| {
            let mut events = vec![Event::Init];
            events.extend(names.iter().map(|n| Event::InitApply(pod(ns, n))));
            events.push(Event::InitDone);
            events
        };
        push_and_drain(&tx_a, list("a", &["a1"]), &mut out);
        push_and_drain(&tx_b, list("b", &["b1", "b2"]), &mut out);
        assert_eq!(contents(&store), ["a/a1", "b/b1", "b/b2"]);

        let relist = push_and_drain(&tx_b, list("b", &["b2"]), &mut out);
        assert_eq!(relist, ["Apply b/b2", "Delete b/b1"]);
        assert_eq!(contents(&store), ["a/a1", "b/b2"]);
    }

    #[test]
    fn a_single_stream_passes_through_unchanged() {
        let (store, writer) = reflector::store::<Pod>();
        let (tx, rx) = mpsc::unbounded();
        let mut out = reflector::reflector(writer, merge(vec![(None, rx)], store.clone())).boxed();
        let events = vec![
            Event::Init,
            Event::InitApply(pod("a", "p1")),
            Event::InitApply(pod("b", "p2")),
            Event::InitDone,
            Event::Apply(pod("a", "p3")),
            Event::Init,
            Event::InitApply(pod("a", "p3")),
            Event::InitDone,
            Event::Delete(pod("a", "p3")),
        ];
        let expected: Vec<_> = events.iter().map(describe).collect();
        assert_eq!(push_and_drain(&tx, events, &mut out), expected);
        assert!(contents(&store).is_empty());
    }
}
