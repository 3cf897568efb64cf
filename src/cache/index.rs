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

use std::collections::hash_map::Entry;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::k8s::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;
use kube::runtime::watcher;

use crate::crd::LeaderElection;
use crate::k8s;

/// A string an index holds once, however many entries name it: a namespace, an object's
/// name, a label key or value. At 10,000 elections the index holds about a hundred thousand
/// of them; shared, each costs a pointer per use instead of a copy.
pub type Shared = Arc<str>;

/// What an object is filed under (always within its namespace).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Term {
    /// A label `key=value` (of a pod), or a label a selector requires (of an election).
    Label(Shared, Shared),
    /// A pod whose `elector.dev/election` annotation names this election.
    Owner(Shared),
    /// A label `key=value` of a pod without that annotation (a pod shared by elections with
    /// different label keys, whose owner gave the annotation up, or a pod nobody labelled).
    UnownedLabel(Shared, Shared),
    /// An election whose selector has no `matchLabels`.
    Unindexed,
    /// An election writing this label key.
    UsesKey(Shared),
    /// An election labelling its leader `key=value`.
    Leads(Shared, Shared),
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
        .map(|(k, v)| Term::Label(k.as_str().into(), v.as_str().into()))
        .collect();
    match k8s::labelled_by(pod) {
        Some(owner) => terms.push(Term::Owner(owner.into())),
        None => terms.extend(
            labels
                .iter()
                .map(|(k, v)| Term::UnownedLabel(k.as_str().into(), v.as_str().into())),
        ),
    }
    terms
}

/// The terms of an election.
fn election_terms(le: &LeaderElection) -> Vec<Term> {
    let labels = &le.spec.selector.match_labels;
    let mut terms: Vec<Term> = labels
        .iter()
        .map(|(k, v)| Term::Label(k.as_str().into(), v.as_str().into()))
        .collect();
    if terms.is_empty() {
        terms.push(Term::Unindexed);
    }
    let labels = &le.spec.labels;
    let key: Shared = labels.key.as_str().into();
    terms.push(Term::UsesKey(key.clone()));
    terms.push(Term::Leads(key, labels.leader.as_str().into()));
    terms
}

/// Namespace and name of an object.
type Id = (Shared, Shared);

/// How many names a term keeps in a sorted vector before it moves them into a B-tree.
const FEW_NAMES: usize = 16;

/// The names filed under one term, in order. Most terms name the few pods of one election
/// (its own label value, its owner annotation), for which a B-tree's smallest node would be
/// several times the names themselves; a term shared by a whole namespace (a role label's
/// value) grows into a B-tree, where filing a name does not shift thousands of others.
#[derive(Debug)]
enum Names {
    /// At most [`FEW_NAMES`], sorted.
    Few(Vec<Shared>),
    /// More than [`FEW_NAMES`] at some point.
    Many(BTreeSet<Shared>),
}

impl Default for Names {
    fn default() -> Self {
        Names::Few(Vec::new())
    }
}

impl Names {
    /// Files `name`; `false` when it was there.
    fn insert(&mut self, name: Shared) -> bool {
        match self {
            Names::Few(names) => match names.binary_search(&name) {
                Ok(_) => false,
                Err(at) if names.len() < FEW_NAMES => {
                    names.insert(at, name);
                    true
                }
                Err(_) => {
                    let mut many: BTreeSet<Shared> = names.drain(..).collect();
                    many.insert(name);
                    *self = Names::Many(many);
                    true
                }
            },
            Names::Many(names) => names.insert(name),
        }
    }

    /// Unfiles `name`; `false` when it was not there.
    fn remove(&mut self, name: &str) -> bool {
        match self {
            Names::Few(names) => match names.binary_search_by(|n| (**n).cmp(name)) {
                Ok(at) => {
                    names.remove(at);
                    true
                }
                Err(_) => false,
            },
            Names::Many(names) => names.remove(name),
        }
    }

    fn contains(&self, name: &str) -> bool {
        match self {
            Names::Few(names) => names.binary_search_by(|n| (**n).cmp(name)).is_ok(),
            Names::Many(names) => names.contains(name),
        }
    }

    /// The name as filed (to share it), if it is.
    fn get(&self, name: &str) -> Option<&Shared> {
        match self {
            Names::Few(names) => names
                .binary_search_by(|n| (**n).cmp(name))
                .ok()
                .map(|at| &names[at]),
            Names::Many(names) => names.get(name),
        }
    }

    fn len(&self) -> usize {
        match self {
            Names::Few(names) => names.len(),
            Names::Many(names) => names.len(),
        }
    }

    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The names, in order.
    fn iter(&self) -> impl Iterator<Item = &Shared> {
        let (few, many) = match self {
            Names::Few(names) => (Some(names.iter()), None),
            Names::Many(names) => (None, Some(names.iter())),
        };
        few.into_iter().flatten().chain(many.into_iter().flatten())
    }

    /// The names, in order, as owned strings (for callers outside the index).
    fn to_strings(&self) -> impl Iterator<Item = String> + '_ {
        self.iter().map(|name| name.to_string())
    }
}

/// A change of a [`Table`] that another index may follow.
#[derive(Debug)]
enum Change {
    /// An object (namespace, name) came (`true`) or went.
    Member(Id, bool),
    /// A listed term of a namespace got its first object (`true`) or lost its last.
    Listed(Shared, Term, bool),
}

/// An object's namespace and name, when it has both.
fn named(meta: &ObjectMeta) -> Option<(&str, &str)> {
    Some((meta.namespace.as_deref()?, meta.name.as_deref()?))
}

/// Names of one kind of object by namespace and by term. Every namespace, name and term is
/// held once: filing an object reuses the strings the table already has.
#[derive(Debug, Default)]
struct Table {
    by_namespace: HashMap<Shared, Names>,
    by_term: HashMap<(Shared, Term), Names>,
    /// The terms each object is filed under (to unfile it).
    terms: HashMap<Id, Box<[Term]>>,
    /// The [`Term::listed`] terms that have objects, per namespace.
    listed: HashMap<Shared, BTreeSet<Term>>,
    /// Objects that came or went, and listed terms that got their first object or lost their
    /// last, since [`Table::take_changes`].
    changes: Vec<Change>,
    /// Relists in progress: the scope (`None`: every namespace) and what they listed so far.
    relists: HashMap<Option<String>, HashSet<Id>>,
}

impl Table {
    /// `namespace` and `name` as this table holds them, when it does.
    fn shared_id(&self, namespace: &str, name: &str) -> Id {
        match self.by_namespace.get_key_value(namespace) {
            Some((namespace, names)) => (
                namespace.clone(),
                names.get(name).cloned().unwrap_or_else(|| name.into()),
            ),
            None => (namespace.into(), name.into()),
        }
    }

    fn file(&mut self, namespace: &str, name: &str, terms: Vec<Term>) {
        let id = self.shared_id(namespace, name);
        if self.terms.get(&id).is_some_and(|filed| **filed == *terms) {
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
        let mut filed = Vec::with_capacity(terms.len());
        for term in terms {
            // The term as the table holds it when another object has it too.
            let term = match self.by_term.entry((namespace.clone(), term)) {
                Entry::Occupied(mut slot) => {
                    slot.get_mut().insert(name.clone());
                    slot.key().1.clone()
                }
                Entry::Vacant(slot) => {
                    let term = slot.key().1.clone();
                    slot.insert(Names::default()).insert(name.clone());
                    if term.listed() {
                        self.listed
                            .entry(namespace.clone())
                            .or_default()
                            .insert(term.clone());
                        self.changes
                            .push(Change::Listed(namespace.clone(), term.clone(), true));
                    }
                    term
                }
            };
            filed.push(term);
        }
        self.terms.insert(id, filed.into_boxed_slice());
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
        match event {
            watcher::Event::Apply(obj) => {
                if let Some((namespace, name)) = named(obj.meta()) {
                    self.file(namespace, name, terms_of(obj));
                }
            }
            watcher::Event::Delete(obj) => {
                if let Some((namespace, name)) = named(obj.meta()) {
                    let id = self.shared_id(namespace, name);
                    self.unfile(&id);
                }
            }
            watcher::Event::Init => {
                self.relists
                    .insert(scope.map(str::to_owned), HashSet::new());
            }
            watcher::Event::InitApply(obj) => {
                if let Some((namespace, name)) = named(obj.meta()) {
                    self.file(namespace, name, terms_of(obj));
                    let id = self.shared_id(namespace, name);
                    if let Some(listed) = self.relists.get_mut(&scope.map(str::to_owned)) {
                        listed.insert(id);
                    }
                }
            }
            watcher::Event::InitDone => {
                let Some(listed) = self.relists.remove(&scope.map(str::to_owned)) else {
                    return;
                };
                let gone: Vec<Id> = self
                    .terms
                    .keys()
                    .filter(|id| scope.is_none_or(|ns| *ns == *id.0))
                    .filter(|id| !listed.contains(*id))
                    .cloned()
                    .collect();
                for id in gone {
                    self.unfile(&id);
                }
            }
        }
    }

    fn unlist(&mut self, namespace: &Shared, term: &Term) {
        if let Some(terms) = self.listed.get_mut(namespace) {
            terms.remove(term);
            if terms.is_empty() {
                self.listed.remove(namespace);
            }
        }
        self.changes
            .push(Change::Listed(namespace.clone(), term.clone(), false));
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

    fn names(&self, namespace: &str, term: &Term) -> Option<&Names> {
        self.by_term.get(&(Shared::from(namespace), term.clone()))
    }

    /// The names filed under every one of `terms` (all names of the namespace when `terms`
    /// is empty), read from the smallest set.
    fn filed_under_all(&self, namespace: &str, terms: &[Term]) -> Vec<String> {
        let sets: Option<Vec<&Names>> = terms.iter().map(|t| self.names(namespace, t)).collect();
        let Some(sets) = sets else {
            // One term has no object at all.
            return Vec::new();
        };
        let Some(smallest) = sets.iter().min_by_key(|s| s.len()) else {
            return self
                .by_namespace
                .get(namespace)
                .map(|s| s.to_strings().collect())
                .unwrap_or_default();
        };
        smallest
            .iter()
            .filter(|name| sets.iter().all(|s| s.contains(name)))
            .map(|name| name.to_string())
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
    ghosts: HashMap<Shared, BTreeSet<Shared>>,
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

    fn haunt(&mut self, namespace: Shared, owner: Shared) {
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
            .map(|(k, v)| Term::Label(k.as_str().into(), v.as_str().into()))
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
            .map(|g| g.iter().map(|owner| owner.to_string()).collect())
            .unwrap_or_default();
        let elections = &inner.elections;
        for term in elections.listed_in(namespace) {
            if let Term::UsesKey(other) = term
                && **other != *key
                && let Some(names) = elections.names(namespace, term)
            {
                owners.extend(names.to_strings());
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
            .map(|names| names.to_strings().collect())
            .unwrap_or_default();
        for (k, v) in labels {
            let term = Term::Label(k.as_str().into(), v.as_str().into());
            if let Some(names) = table.names(namespace, &term) {
                found.extend(names.to_strings());
            }
        }
        found
    }

    /// The elections of `namespace` that label their leader `key=value`.
    pub fn elections_leading(&self, namespace: &str, key: &str, value: &str) -> Vec<String> {
        self.locked()
            .elections
            .names(namespace, &Term::Leads(key.into(), value.into()))
            .map(|names| names.to_strings().collect())
            .unwrap_or_default()
    }

    /// The elections of `namespace` that write label key `key`.
    pub fn elections_using(&self, namespace: &str, key: &str) -> Vec<String> {
        self.locked()
            .elections
            .names(namespace, &Term::UsesKey(key.into()))
            .map(|names| names.to_strings().collect())
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
        pod.metadata.annotations = owner
            .map(|o| BTreeMap::from([(crate::crd::ELECTION_ANNOTATION.to_owned(), o.to_owned())]));
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
    fn names_stay_ordered_and_complete_when_they_outgrow_the_vector() {
        let mut names = Names::default();
        let all: Vec<String> = (0..=FEW_NAMES * 2)
            .rev()
            .map(|i| format!("p{i:03}"))
            .collect();
        for (filed, name) in all.iter().enumerate() {
            assert!(names.insert(name.as_str().into()));
            assert!(!names.insert(name.as_str().into()), "filed twice");
            assert_eq!(matches!(names, Names::Many(_)), filed >= FEW_NAMES);
        }
        let mut sorted = all.clone();
        sorted.sort();
        assert_eq!(names.to_strings().collect::<Vec<_>>(), sorted);
        assert!(names.remove("p005") && !names.remove("p005"));
        assert!(!names.contains("p005") && names.contains("p006"));
        assert_eq!(names.len(), all.len() - 1);

        let mut few = Names::default();
        for name in ["b", "c", "a"] {
            few.insert(name.into());
        }
        assert!(few.remove("b") && !few.remove("x"));
        assert_eq!(few.to_strings().collect::<Vec<_>>(), ["a", "c"]);
        assert_eq!(few.get("c").map(|c| &**c), Some("c"));
    }

    #[test]
    fn objects_under_one_term_share_its_strings_and_their_namespace() {
        let index = Indexes::default();
        for name in ["p1", "p2"] {
            index.pod_event(
                None,
                &watcher::Event::Apply(pod("ns", name, &[("app", "web")], Some("e"))),
            );
        }
        let inner = index.locked();
        let filed = |name: &str| {
            let (id, terms) = inner
                .pods
                .terms
                .get_key_value(&(Shared::from("ns"), Shared::from(name)))
                .expect("the pod is filed");
            (id.clone(), terms.clone())
        };
        let ((ns1, _), terms1) = filed("p1");
        let ((ns2, _), terms2) = filed("p2");
        assert!(Arc::ptr_eq(&ns1, &ns2), "one namespace string");
        assert_eq!(terms1, terms2);
        for (a, b) in terms1.iter().zip(terms2.iter()) {
            let (Term::Label(k1, v1), Term::Label(k2, v2)) = (a, b) else {
                let (Term::Owner(o1), Term::Owner(o2)) = (a, b) else {
                    panic!("unexpected terms {a:?}, {b:?}");
                };
                assert!(Arc::ptr_eq(o1, o2), "one owner string");
                continue;
            };
            assert!(
                Arc::ptr_eq(k1, k2) && Arc::ptr_eq(v1, v2),
                "one label string"
            );
        }
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
