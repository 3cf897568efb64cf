//! Indexes over the cached pods and elections, kept up to date per watch event, so that a
//! reconcile and a pod event cost what concerns them rather than a scan of every cached object.
//!
//! The caches themselves stay kube-runtime's reflector stores (they hold the objects); an
//! index holds names only, filed under *terms*:
//! - a pod under each of its labels (`key=value`) and under the election its
//!   `elector.dev/election` annotation names (or as unowned);
//! - an election under each label of its selector's `matchLabels` (a pod it selects carries
//!   all of them, so any one finds it), or as *unindexed* when it has none (only
//!   `matchExpressions`: such elections are matched against every pod event of their
//!   namespace).
//!
//! Events are applied as the watcher delivers them. A relist (`Init` .. `InitApply`* ..
//! `InitDone`) files what it lists as it arrives and, at `InitDone`, drops the objects of the
//! relisted scope (one namespace, or all) that the relist did not contain, as the store does.
//! Between `Init` and `InitDone` the index may still name objects that are gone; readers
//! resolve every name through the store and skip what it no longer has.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{Mutex, MutexGuard, PoisonError};

use crate::k8s::Pod;
use kube::ResourceExt;
use kube::runtime::watcher;

use crate::crd::LeaderElection;
use crate::k8s;

/// What an object is filed under (always within its namespace).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Term {
    /// A label `key=value` (of a pod), or a label a selector requires (of an election).
    Label(String, String),
    /// A pod whose `elector.dev/election` annotation names this election.
    Owner(String),
    /// A label `key=value` of a pod without that annotation (a pod shared by elections with
    /// different label keys, whose owner gave the annotation up, or a pod nobody labelled).
    UnownedLabel(String, String),
    /// An election whose selector has no `matchLabels`.
    Unindexed,
    /// An election writing this label key.
    UsesKey(String),
    /// An election labelling its leader `key=value`.
    Leads(String, String),
}

impl Term {
    /// Whether the index keeps the list of these terms per namespace (to enumerate, say,
    /// the owners named in a namespace without a scan of its pods).
    fn listed(&self) -> bool {
        matches!(self, Term::Owner(_) | Term::UsesKey(_))
    }
}

/// The terms of a pod.
fn pod_terms(pod: &Pod) -> Vec<Term> {
    let labels = k8s::labels_of(pod);
    let mut terms: Vec<Term> = labels
        .iter()
        .map(|(k, v)| Term::Label(k.clone(), v.clone()))
        .collect();
    match k8s::labelled_by(pod) {
        Some(owner) => terms.push(Term::Owner(owner.to_owned())),
        None => terms.extend(
            labels
                .iter()
                .map(|(k, v)| Term::UnownedLabel(k.clone(), v.clone())),
        ),
    }
    terms
}

/// The terms of an election.
fn election_terms(le: &LeaderElection) -> Vec<Term> {
    let labels = &le.spec.selector.match_labels;
    let mut terms: Vec<Term> = labels
        .iter()
        .map(|(k, v)| Term::Label(k.clone(), v.clone()))
        .collect();
    if terms.is_empty() {
        terms.push(Term::Unindexed);
    }
    let labels = &le.spec.labels;
    terms.push(Term::UsesKey(labels.key.clone()));
    terms.push(Term::Leads(labels.key.clone(), labels.leader.clone()));
    terms
}

/// Namespace and name of an object.
type Id = (String, String);

/// A change of a [`Table`] that another index may follow.
#[derive(Debug)]
enum Change {
    /// An object (namespace, name) came (`true`) or went.
    Member(Id, bool),
    /// A listed term of a namespace got its first object (`true`) or lost its last.
    Listed(String, Term, bool),
}

/// Names of one kind of object by namespace and by term.
#[derive(Debug, Default)]
struct Table {
    by_namespace: HashMap<String, BTreeSet<String>>,
    by_term: HashMap<(String, Term), BTreeSet<String>>,
    /// The terms each object is filed under (to unfile it).
    terms: HashMap<Id, Vec<Term>>,
    /// The [`Term::listed`] terms that have objects, per namespace.
    listed: HashMap<String, BTreeSet<Term>>,
    /// Objects that came or went, and listed terms that got their first object or lost their
    /// last, since [`Table::take_changes`].
    changes: Vec<Change>,
    /// Relists in progress: the scope (`None`: every namespace) and what they listed so far.
    relists: HashMap<Option<String>, HashSet<Id>>,
}

impl Table {
    fn file(&mut self, id: Id, terms: Vec<Term>) {
        if self.terms.get(&id) == Some(&terms) {
            return;
        }
        self.unfile(&id);
        let (namespace, name) = &id;
        if self
            .by_namespace
            .entry(namespace.clone())
            .or_default()
            .insert(name.clone())
        {
            self.changes.push(Change::Member(id.clone(), true));
        }
        for term in &terms {
            let names = self
                .by_term
                .entry((namespace.clone(), term.clone()))
                .or_default();
            if names.is_empty() && term.listed() {
                self.listed
                    .entry(namespace.clone())
                    .or_default()
                    .insert(term.clone());
                self.changes
                    .push(Change::Listed(namespace.clone(), term.clone(), true));
            }
            names.insert(name.clone());
        }
        self.terms.insert(id, terms);
    }

    fn unfile(&mut self, id: &Id) {
        let Some(terms) = self.terms.remove(id) else {
            return;
        };
        let (namespace, name) = id;
        for term in terms {
            let slot = (namespace.clone(), term);
            if let Some(names) = self.by_term.get_mut(&slot) {
                names.remove(name);
                if names.is_empty() {
                    self.by_term.remove(&slot);
                    if slot.1.listed() {
                        self.unlist(&slot.0, &slot.1);
                    }
                }
            }
        }
        if let Some(names) = self.by_namespace.get_mut(namespace) {
            names.remove(name);
            self.changes.push(Change::Member(id.clone(), false));
            if names.is_empty() {
                self.by_namespace.remove(namespace);
            }
        }
    }

    /// Applies one watch event of a watcher over `scope` (a namespace, or all of them).
    fn apply<K: ResourceExt>(
        &mut self,
        scope: Option<&str>,
        event: &watcher::Event<K>,
        terms_of: impl Fn(&K) -> Vec<Term>,
    ) {
        let id = |obj: &K| Some((obj.namespace()?, obj.meta().name.clone()?));
        let scope = scope.map(str::to_owned);
        match event {
            watcher::Event::Apply(obj) => {
                if let Some(id) = id(obj) {
                    self.file(id, terms_of(obj));
                }
            }
            watcher::Event::Delete(obj) => {
                if let Some(id) = id(obj) {
                    self.unfile(&id);
                }
            }
            watcher::Event::Init => {
                self.relists.insert(scope, HashSet::new());
            }
            watcher::Event::InitApply(obj) => {
                if let Some(id) = id(obj) {
                    if let Some(listed) = self.relists.get_mut(&scope) {
                        listed.insert(id.clone());
                    }
                    self.file(id, terms_of(obj));
                }
            }
            watcher::Event::InitDone => {
                let Some(listed) = self.relists.remove(&scope) else {
                    return;
                };
                let gone: Vec<Id> = self
                    .terms
                    .keys()
                    .filter(|id| scope.as_ref().is_none_or(|ns| *ns == id.0))
                    .filter(|id| !listed.contains(*id))
                    .cloned()
                    .collect();
                for id in gone {
                    self.unfile(&id);
                }
            }
        }
    }

    fn unlist(&mut self, namespace: &str, term: &Term) {
        if let Some(terms) = self.listed.get_mut(namespace) {
            terms.remove(term);
            if terms.is_empty() {
                self.listed.remove(namespace);
            }
        }
        self.changes
            .push(Change::Listed(namespace.to_owned(), term.clone(), false));
    }

    /// The listed terms of `namespace`.
    fn listed_in(&self, namespace: &str) -> impl Iterator<Item = &Term> {
        self.listed.get(namespace).into_iter().flatten()
    }

    fn take_changes(&mut self) -> Vec<Change> {
        std::mem::take(&mut self.changes)
    }

    fn has(&self, namespace: &str, name: &str) -> bool {
        self.by_namespace
            .get(namespace)
            .is_some_and(|names| names.contains(name))
    }

    fn names(&self, namespace: &str, term: &Term) -> Option<&BTreeSet<String>> {
        self.by_term.get(&(namespace.to_owned(), term.clone()))
    }

    fn in_namespace(&self, namespace: &str) -> Option<&BTreeSet<String>> {
        self.by_namespace.get(namespace)
    }

    /// The names filed under every one of `terms` (all names of the namespace when `terms`
    /// is empty), read from the smallest set.
    fn filed_under_all(&self, namespace: &str, terms: &[Term]) -> Vec<String> {
        let sets: Option<Vec<&BTreeSet<String>>> =
            terms.iter().map(|t| self.names(namespace, t)).collect();
        let Some(sets) = sets else {
            // One term has no object at all.
            return Vec::new();
        };
        let Some(smallest) = sets.iter().min_by_key(|s| s.len()) else {
            return self
                .in_namespace(namespace)
                .map(|s| s.iter().cloned().collect())
                .unwrap_or_default();
        };
        smallest
            .iter()
            .filter(|name| sets.iter().all(|s| s.contains(*name)))
            .cloned()
            .collect()
    }
}

/// The indexes of pods and elections (names only; the objects are in the stores).
#[derive(Debug, Default)]
pub struct Indexes {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    pods: Table,
    elections: Table,
    /// Per namespace, the elections its pods' `elector.dev/election` annotations name that do
    /// not exist, kept up to date from both tables' changes.
    ghosts: HashMap<String, BTreeSet<String>>,
}

impl Inner {
    /// Follows the changes of both tables into the ghost owners.
    fn settle(&mut self) {
        for change in self.pods.take_changes() {
            if let Change::Listed(namespace, Term::Owner(owner), present) = change {
                if present && !self.elections.has(&namespace, &owner) {
                    self.haunt(namespace, owner);
                } else if !present {
                    self.unhaunt(&namespace, &owner);
                }
            }
        }
        for change in self.elections.take_changes() {
            if let Change::Member((namespace, name), present) = change {
                if present {
                    self.unhaunt(&namespace, &name);
                } else if self
                    .pods
                    .names(&namespace, &Term::Owner(name.clone()))
                    .is_some()
                {
                    self.haunt(namespace, name);
                }
            }
        }
    }

    fn haunt(&mut self, namespace: String, owner: String) {
        self.ghosts.entry(namespace).or_default().insert(owner);
    }

    fn unhaunt(&mut self, namespace: &str, owner: &str) {
        if let Some(ghosts) = self.ghosts.get_mut(namespace) {
            ghosts.remove(owner);
            if ghosts.is_empty() {
                self.ghosts.remove(namespace);
            }
        }
    }
}

impl Indexes {
    fn locked(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Applies a pod watch event (of a watcher over `scope`: a namespace, or `None` for all).
    pub fn pod_event(&self, scope: Option<&str>, event: &watcher::Event<Pod>) {
        let mut inner = self.locked();
        inner.pods.apply(scope, event, pod_terms);
        inner.settle();
    }

    /// Applies an election watch event (of a watcher over `scope`).
    pub fn election_event(&self, scope: Option<&str>, event: &watcher::Event<LeaderElection>) {
        let mut inner = self.locked();
        inner.elections.apply(scope, event, election_terms);
        inner.settle();
    }

    /// The pods of `namespace` filed under every one of `terms` (every pod of the namespace
    /// when `terms` is empty).
    pub fn pods_under_all(&self, namespace: &str, terms: &[Term]) -> Vec<String> {
        self.locked().pods.filed_under_all(namespace, terms)
    }

    /// The pods of `namespace` that carry every label of `match_labels` (every pod of the
    /// namespace when it is empty): the only pods a selector with those `matchLabels` can
    /// select.
    pub fn pods_with_labels<'a>(
        &self,
        namespace: &str,
        match_labels: impl IntoIterator<Item = (&'a String, &'a String)>,
    ) -> Vec<String> {
        let terms: Vec<Term> = match_labels
            .into_iter()
            .map(|(k, v)| Term::Label(k.clone(), v.clone()))
            .collect();
        self.pods_under_all(namespace, &terms)
    }

    /// The owners (by `elector.dev/election`) of `namespace`'s pods that an election with
    /// label key `key` may have labelled without owning them: the elections writing another
    /// label key, and the elections that do not exist (any more).
    pub fn owners_beside(&self, namespace: &str, key: &str) -> Vec<String> {
        let inner = self.locked();
        let mut owners: Vec<String> = inner
            .ghosts
            .get(namespace)
            .map(|g| g.iter().cloned().collect())
            .unwrap_or_default();
        let elections = &inner.elections;
        for term in elections.listed_in(namespace) {
            if let Term::UsesKey(other) = term
                && other != key
                && let Some(names) = elections.names(namespace, term)
            {
                owners.extend(names.iter().cloned());
            }
        }
        owners
    }

    /// The elections of `namespace` whose selector may match a pod with `labels`: those
    /// requiring one of its labels, and those that require none (the caller still matches the
    /// selector).
    pub fn elections_for_labels<'a>(
        &self,
        namespace: &str,
        labels: impl IntoIterator<Item = (&'a String, &'a String)>,
    ) -> BTreeSet<String> {
        let inner = self.locked();
        let table = &inner.elections;
        let mut found: BTreeSet<String> = table
            .names(namespace, &Term::Unindexed)
            .cloned()
            .unwrap_or_default();
        for (k, v) in labels {
            if let Some(names) = table.names(namespace, &Term::Label(k.clone(), v.clone())) {
                found.extend(names.iter().cloned());
            }
        }
        found
    }

    /// The elections of `namespace` that label their leader `key=value`.
    pub fn elections_leading(&self, namespace: &str, key: &str, value: &str) -> Vec<String> {
        self.locked()
            .elections
            .names(namespace, &Term::Leads(key.to_owned(), value.to_owned()))
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// The elections of `namespace` that write label key `key`.
    pub fn elections_using(&self, namespace: &str, key: &str) -> Vec<String> {
        self.locked()
            .elections
            .names(namespace, &Term::UsesKey(key.to_owned()))
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn pod(ns: &str, name: &str, labels: &[(&str, &str)], owner: Option<&str>) -> Pod {
        let mut pod = Pod::default();
        pod.metadata.namespace = Some(ns.into());
        pod.metadata.name = Some(name.into());
        pod.metadata.labels = Some(
            labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        );
        pod.metadata.annotations =
            owner.map(|o| BTreeMap::from([(k8s::ELECTION_ANNOTATION.to_owned(), o.to_owned())]));
        pod
    }

    /// An election of namespace `ns` whose selector requires `match_labels`, writing `key`.
    fn election(
        name: &str,
        match_labels: serde_json::Value,
        key: &str,
    ) -> watcher::Event<LeaderElection> {
        let le = serde_json::from_value(serde_json::json!({
            "apiVersion": "elector.dev/v1alpha1",
            "kind": "LeaderElection",
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {
                "selector": {"matchLabels": match_labels, "matchExpressions": [{"key": "app", "operator": "Exists"}]},
                "labels": {"key": key},
            },
        }))
        .expect("an election");
        watcher::Event::Apply(le)
    }

    fn unowned(k: &str, v: &str) -> Term {
        Term::UnownedLabel(k.into(), v.into())
    }

    fn label(k: &str, v: &str) -> Term {
        Term::Label(k.into(), v.into())
    }

    #[test]
    fn a_pod_is_found_by_its_labels_and_owner_and_refiled_on_change() {
        let index = Indexes::default();
        index.pod_event(
            None,
            &watcher::Event::Apply(pod("a", "p1", &[("app", "web")], None)),
        );
        index.pod_event(
            None,
            &watcher::Event::Apply(pod("b", "p1", &[("app", "web")], Some("e"))),
        );
        assert_eq!(index.pods_under_all("a", &[label("app", "web")]), ["p1"]);
        assert_eq!(index.pods_under_all("a", &[unowned("app", "web")]), ["p1"]);
        assert_eq!(
            index.pods_under_all("b", &[Term::Owner("e".into())]),
            ["p1"]
        );
        assert_eq!(
            index.owners_beside("b", "elector.dev/role"),
            ["e"],
            "a ghost owner"
        );

        index.pod_event(
            None,
            &watcher::Event::Apply(pod("a", "p1", &[("app", "db")], Some("x"))),
        );
        assert!(index.pods_under_all("a", &[label("app", "web")]).is_empty());
        assert!(
            index
                .pods_under_all("a", &[unowned("app", "web")])
                .is_empty()
        );
        assert!(
            index
                .pods_under_all("a", &[unowned("app", "db")])
                .is_empty()
        );
        assert_eq!(
            index.pods_under_all("a", &[Term::Owner("x".into())]),
            ["p1"]
        );

        index.pod_event(None, &watcher::Event::Delete(pod("a", "p1", &[], None)));
        assert!(
            index
                .pods_under_all("a", &[Term::Owner("x".into())])
                .is_empty()
        );
        assert!(index.pods_with_labels("a", []).is_empty());
    }

    #[test]
    fn match_labels_intersect_and_empty_match_labels_mean_the_whole_namespace() {
        let index = Indexes::default();
        for (name, labels) in [
            ("p1", vec![("app", "web"), ("tier", "a")]),
            ("p2", vec![("app", "web"), ("tier", "b")]),
            ("p3", vec![("app", "db"), ("tier", "a")]),
        ] {
            index.pod_event(None, &watcher::Event::Apply(pod("ns", name, &labels, None)));
        }
        let want = BTreeMap::from([
            ("app".to_owned(), "web".to_owned()),
            ("tier".to_owned(), "a".to_owned()),
        ]);
        assert_eq!(index.pods_with_labels("ns", &want), ["p1"]);
        assert_eq!(index.pods_with_labels("ns", []), ["p1", "p2", "p3"]);
        let none = BTreeMap::from([("app".to_owned(), "cache".to_owned())]);
        assert!(index.pods_with_labels("ns", &none).is_empty());
    }

    #[test]
    fn owners_beside_are_elections_with_another_key_and_elections_that_do_not_exist() {
        let index = Indexes::default();
        let election = |name: &str, key: &str| election(name, serde_json::json!({}), key);
        index.election_event(None, &election("same", "elector.dev/role"));
        index.election_event(None, &election("other", "example.com/role"));
        for (pod_name, owner) in [("p1", "same"), ("p2", "other"), ("p3", "gone")] {
            index.pod_event(
                None,
                &watcher::Event::Apply(pod("ns", pod_name, &[], Some(owner))),
            );
        }
        let mut owners = index.owners_beside("ns", "elector.dev/role");
        owners.sort();
        assert_eq!(owners, ["gone", "other"]);
        // The ghost comes to exist: no longer a ghost (the cached answer is dropped).
        index.election_event(None, &election("gone", "elector.dev/role"));
        assert_eq!(index.owners_beside("ns", "elector.dev/role"), ["other"]);
        assert_eq!(
            index.elections_leading("ns", "example.com/role", "leader"),
            ["other"]
        );
    }

    #[test]
    fn a_relist_drops_what_it_did_not_list_in_its_own_scope_only() {
        let index = Indexes::default();
        index.pod_event(
            Some("a"),
            &watcher::Event::Apply(pod("a", "old", &[], None)),
        );
        index.pod_event(
            Some("b"),
            &watcher::Event::Apply(pod("b", "other", &[], None)),
        );
        index.pod_event(Some("a"), &watcher::Event::Init);
        index.pod_event(
            Some("a"),
            &watcher::Event::InitApply(pod("a", "new", &[], None)),
        );
        // Until the relist is done, the old pod stays (as in the store).
        assert_eq!(index.pods_with_labels("a", []), ["new", "old"]);
        index.pod_event(Some("a"), &watcher::Event::InitDone);
        assert_eq!(index.pods_with_labels("a", []), ["new"]);
        assert_eq!(
            index.pods_with_labels("b", []),
            ["other"],
            "another scope is kept"
        );
    }

    #[test]
    fn elections_are_found_by_one_required_label_or_as_unindexed() {
        let index = Indexes::default();
        index.election_event(
            None,
            &election("web", serde_json::json!({"app": "web"}), "elector.dev/role"),
        );
        index.election_event(
            None,
            &election("any", serde_json::json!({}), "elector.dev/role"),
        );
        let labels = BTreeMap::from([("app".to_owned(), "web".to_owned())]);
        assert_eq!(
            index
                .elections_for_labels("ns", &labels)
                .into_iter()
                .collect::<Vec<_>>(),
            ["any", "web"]
        );
        let other = BTreeMap::from([("app".to_owned(), "db".to_owned())]);
        assert_eq!(
            index
                .elections_for_labels("ns", &other)
                .into_iter()
                .collect::<Vec<_>>(),
            ["any"]
        );
        assert_eq!(
            index.elections_using("ns", "elector.dev/role"),
            ["any", "web"]
        );
        assert!(
            index
                .elections_using("elsewhere", "elector.dev/role")
                .is_empty()
        );
    }
}
