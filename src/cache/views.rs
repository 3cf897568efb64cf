//! Reading the world for one election: its pods from the cache, conflicts with other
//! elections, and the mapping from a pod event to the elections it concerns. Every read goes
//! through the indexes ([`super::index`]), so it costs what concerns the election (its own
//! pods, the elections sharing them), never a scan of the namespace or the cluster.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use crate::k8s::Pod;
use jiff::Timestamp;
use kube::ResourceExt;
use kube::runtime::reflector::{ObjectRef, Store};

use super::caches::Caches;
use super::index::{Indexes, Term};
use crate::crd::{LeaderElection, label_token_annotation, selector_matches};
use crate::election::config::{ElectionConfig, ElectionKey};
use crate::election::conflict::{self, Claim, Writer, YieldingLabel, yielding_to_me, yields_to};
use crate::election::observe::{NotReadySince, PodView};
use crate::k8s;

/// The elections of the pod's namespace that a change of this pod can concern: the ones
/// that select it, the one its `elector.dev/election` annotation names and, for a pod without
/// that annotation, the ones writing one of its label keys (a pod shared by elections with
/// different label keys whose owner gave the annotation up).
pub fn elections_of_pod(
    index: &Indexes,
    elections: &Store<LeaderElection>,
    pod: &Pod,
) -> Vec<(String, String)> {
    let Some(namespace) = pod.namespace() else {
        return Vec::new();
    };
    let labels = k8s::labels_of(pod);
    let mut names: BTreeSet<String> = index
        .elections_for_labels(&namespace, labels)
        .into_iter()
        .filter(|name| {
            elections
                .get(&ObjectRef::new(name).within(&namespace))
                .is_some_and(|le| selector_matches(&le.spec.selector, labels))
        })
        .collect();
    match k8s::labelled_by(pod) {
        Some(owner) => {
            names.insert(owner.to_owned());
        }
        None => {
            for key in labels.keys() {
                names.extend(index.elections_using(&namespace, key));
            }
        }
    }
    names
        .into_iter()
        .map(|name| (namespace.clone(), name))
        .collect()
}

/// The names of the pods of `le`'s namespace that it may work on: those its selector's
/// `matchLabels` admit, those it owns, those carrying its label key under another owner (or
/// none), and those this process patched and the cache does not show yet.
fn candidate_pods(caches: &Caches, le: &LeaderElection, namespace: &str) -> BTreeSet<String> {
    let index = &caches.index;
    let mut names: BTreeSet<String> = index
        .pods_with_labels(namespace, &le.spec.selector.match_labels)
        .into_iter()
        .collect();
    if let Some(me) = le.metadata.name.as_deref() {
        names.extend(index.pods_under_all(namespace, &[Term::Owner(me.into())]));
    }
    let labels = &le.spec.labels;
    let owners = index.owners_beside(namespace, &labels.key);
    for value in [&labels.leader, &labels.follower] {
        let unowned = Term::UnownedLabel(labels.key.as_str().into(), value.as_str().into());
        names.extend(index.pods_under_all(namespace, &[unowned]));
        for owner in &owners {
            let carrying = Term::Label(labels.key.as_str().into(), value.as_str().into());
            names.extend(
                index.pods_under_all(namespace, &[Term::Owner(owner.as_str().into()), carrying]),
            );
        }
    }
    names.extend(caches.written.written_pods_in(namespace));
    names
}

/// The pods an election works on, by name: every pod of its namespace that its selector
/// matches (`true`) or that it labelled earlier and no longer matches (`false`), each in
/// the newest version known (the cache's, or this process's own later write).
pub fn pods_of(caches: &Caches, le: &LeaderElection) -> BTreeMap<String, (Arc<Pod>, bool)> {
    let Some(namespace) = le.namespace() else {
        return BTreeMap::new();
    };
    candidate_pods(caches, le, &namespace)
        .into_iter()
        .filter_map(|name| caches.pods.get(&ObjectRef::new(&name).within(&namespace)))
        .filter_map(|p| {
            // Our own latest write of the pod, when the cache has not caught up with it.
            let p = caches.written.freshest(p);
            let selected = selector_matches(&le.spec.selector, k8s::labels_of(&p));
            let ours = labelled_by(caches, le, &p);
            (selected || ours).then(|| (p.name_any(), (p, selected)))
        })
        .collect()
}

/// The planner's view of those pods. Since when a NotReady pod is NotReady is what `since`
/// answers for each (its UID, and when its Ready condition last changed as written): the
/// election keeps it from the moment this process first saw the change
/// ([`crate::election::not_ready::NotReadyMemory`]).
pub fn views(
    pods: &BTreeMap<String, (Arc<Pod>, bool)>,
    config: &ElectionConfig,
    since: impl FnOnce(Vec<(String, Timestamp)>) -> HashMap<String, NotReadySince>,
) -> Vec<PodView> {
    // Named once per election, not once per pod.
    let token_annotation = label_token_annotation(&config.labels.key);
    let mut views: Vec<PodView> = pods
        .values()
        .filter_map(|(pod, selected)| {
            k8s::pod_view(pod, *selected, &config.labels.key, &token_annotation)
        })
        .collect();
    let not_ready = views
        .iter()
        .filter(|view| !view.ready)
        .filter_map(|view| {
            let pod = &pods.get(&view.name)?.0;
            Some((view.uid.clone(), k8s::ready_changed_at(pod)?))
        })
        .collect();
    let since = since(not_ready);
    for view in &mut views {
        view.not_ready_since = since.get(&view.uid).copied();
    }
    views
}

/// The cached pods of `namespace` that `le`'s selector matches.
pub fn selected_pods(caches: &Caches, le: &LeaderElection, namespace: &str) -> Vec<Arc<Pod>> {
    caches
        .index
        .pods_with_labels(namespace, &le.spec.selector.match_labels)
        .into_iter()
        .filter_map(|name| caches.pods.get(&ObjectRef::new(&name).within(namespace)))
        .filter(|p| selector_matches(&le.spec.selector, k8s::labels_of(p)))
        .collect()
}

/// The claims of other elections, each with its election.
type Claims = Vec<(Claim, Arc<LeaderElection>)>;

/// The claim of `le` (with label key `config.labels.key`) and those of the other live
/// elections of its namespace that select one of its pods under the same label key, each
/// with its election. The others' claims name only the pods they share with `le`: that is all
/// the conflict rules look at.
fn claims(
    caches: &Caches,
    le: &LeaderElection,
    config: &ElectionConfig,
) -> Option<(Claim, Claims)> {
    let namespace = le.namespace()?;
    let me = le.metadata.name.clone()?;
    let mine = selected_pods(caches, le, &namespace);
    let mut others: BTreeMap<String, (Claim, Arc<LeaderElection>)> = BTreeMap::new();
    for pod in &mine {
        let Some(uid) = pod.metadata.uid.as_ref() else {
            continue;
        };
        let labels = k8s::labels_of(pod);
        for name in caches.index.elections_for_labels(&namespace, labels) {
            if name == me {
                continue;
            }
            if let Some((claim, _)) = others.get_mut(&name) {
                claim.pods.push(uid.clone());
                continue;
            }
            let Some(other) = caches
                .elections
                .get(&ObjectRef::new(&name).within(&namespace))
            else {
                continue;
            };
            let Some(created_at) = other.metadata.creation_timestamp.as_ref().map(|t| t.0) else {
                continue;
            };
            if other.metadata.deletion_timestamp.is_some()
                || !selector_matches(&other.spec.selector, labels)
            {
                continue;
            }
            let Ok(other_config) = caches
                .validated
                .of(&election_key_of(&namespace, &name), &other)
            else {
                continue;
            };
            if other_config.labels.key != config.labels.key {
                continue;
            }
            let claim = Claim {
                name: name.clone(),
                created_at,
                label_key: other_config.labels.key.clone(),
                pods: vec![uid.clone()],
            };
            others.insert(name, (claim, other));
        }
    }
    let me = Claim {
        name: me,
        created_at: le.metadata.creation_timestamp.as_ref()?.0,
        label_key: config.labels.key.clone(),
        pods: mine.iter().filter_map(|p| p.metadata.uid.clone()).collect(),
    };
    Some((me, others.into_values().collect()))
}

fn election_key_of(namespace: &str, name: &str) -> ElectionKey {
    ElectionKey {
        namespace: namespace.to_owned(),
        name: name.to_owned(),
    }
}

/// The name of an older election of the same namespace that selects one of this election's
/// pods under the same label key, if any: this one then reports `Conflict` and writes nothing.
pub fn conflicting_election(
    caches: &Caches,
    le: &LeaderElection,
    config: &ElectionConfig,
) -> Option<String> {
    let (me, others) = claims(caches, le, config)?;
    let others: Vec<Claim> = others.into_iter().map(|(c, _)| c).collect();
    yields_to(&me, &others).map(|c| c.name.clone())
}

/// The leader label `le` waits to see gone before it acts ([`conflict::label_to_wait_for`]):
/// its pod's name and the name of the election that wrote it. Looked for on the pods of each
/// younger election that yields to `le`: that election's own leader labels (wherever they
/// are), and the leader labels on the pods it selects under the same key, with whether their
/// writer yields itself and still selects the pod.
pub fn yielding_leader(
    caches: &Caches,
    le: &LeaderElection,
    config: &ElectionConfig,
) -> Option<(String, String)> {
    let (me, others) = claims(caches, le, config)?;
    let claims: Vec<Claim> = others.iter().map(|(c, _)| c.clone()).collect();
    let namespace = le.namespace()?;
    let key = config.labels.key.as_str();
    let mut labels = Vec::new();
    for claim in yielding_to_me(&me, &claims) {
        let Some((_, younger)) = others.iter().find(|(c, _)| c.name == claim.name) else {
            continue;
        };
        let own = [Term::Label(
            key.into(),
            younger.spec.labels.leader.as_str().into(),
        )];
        for pod in pods_named(
            caches,
            &namespace,
            caches.index.pods_under_all(&namespace, &own),
        ) {
            if labelled_by(caches, younger, &pod) {
                labels.push(YieldingLabel {
                    pod: pod.name_any(),
                    writer: claim.name.clone(),
                    writer_yields: true,
                    writer_selects: selector_matches(&younger.spec.selector, k8s::labels_of(&pod)),
                });
            }
        }
        for pod in selected_pods(caches, younger, &namespace) {
            let Some(writer) = leader_writer(caches, &namespace, key, &pod) else {
                continue;
            };
            let writer_yields = caches
                .validated
                .of(&election_key_of(&namespace, &writer.name_any()), &writer)
                .is_ok_and(|writes| conflicting_election(caches, &writer, &writes).is_some());
            labels.push(YieldingLabel {
                pod: pod.name_any(),
                writer: writer.name_any(),
                writer_yields,
                writer_selects: selector_matches(&writer.spec.selector, k8s::labels_of(&pod)),
            });
        }
    }
    conflict::label_to_wait_for(&me.name, &labels).map(|l| (l.pod.clone(), l.writer.clone()))
}

/// The cached pods of `namespace` with these names.
fn pods_named(
    caches: &Caches,
    namespace: &str,
    names: impl IntoIterator<Item = String>,
) -> Vec<Arc<Pod>> {
    names
        .into_iter()
        .filter_map(|name| caches.pods.get(&ObjectRef::new(&name).within(namespace)))
        .collect()
}

/// The live election that labelled `pod` leader under `key`, if any.
fn leader_writer(
    caches: &Caches,
    namespace: &str,
    key: &str,
    pod: &Pod,
) -> Option<Arc<LeaderElection>> {
    let value = k8s::labels_of(pod).get(key)?;
    caches
        .index
        .elections_leading(namespace, key, value)
        .into_iter()
        .filter_map(|name| {
            caches
                .elections
                .get(&ObjectRef::new(&name).within(namespace))
        })
        .find(|e| e.metadata.deletion_timestamp.is_none() && labelled_by(caches, e, pod))
}

/// The existing election of `pod`'s namespace, other than `me`, that owns the pod's
/// annotations.
pub fn foreign_owner(caches: &Caches, me: &str, pod: &Pod) -> Option<Arc<LeaderElection>> {
    let owner = k8s::labelled_by(pod).filter(|owner| *owner != me)?;
    let namespace = pod.namespace()?;
    caches
        .elections
        .get(&ObjectRef::new(owner).within(&namespace))
        .filter(|le| le.metadata.deletion_timestamp.is_none())
}

/// Whether `election` labels `pod` leader under its own label key.
pub fn leads(election: &LeaderElection, pod: &Pod) -> bool {
    let labels = &election.spec.labels;
    k8s::labels_of(pod).get(&labels.key) == Some(&labels.leader)
}

/// Whether an election of the pod's namespace other than `me`, writing another label key than
/// `key` (`me`'s), labels it leader. (Under `me`'s own key the label is `me`'s: two elections
/// writing one key on one pod are in conflict, and the younger withdraws.)
pub fn led_by_another(caches: &Caches, me: &str, key: &str, pod: &Pod) -> bool {
    let Some(namespace) = pod.namespace() else {
        return false;
    };
    k8s::labels_of(pod)
        .iter()
        .filter(|(k, _)| k.as_str() != key)
        .any(|(k, v)| {
            caches
                .index
                .elections_leading(&namespace, k, v)
                .iter()
                .any(|name| {
                    name != me
                        && caches
                            .elections
                            .get(&ObjectRef::new(name).within(&namespace))
                            .is_some_and(|le| leads(&le, pod))
                })
        })
}

/// Whether `le` labelled `pod` ([`conflict::labelled_by`]): the annotation names it; or the
/// pod carries its label key (with its leader or follower value), no other live election
/// writing that key owns the annotation, and `le` is the oldest of the live elections writing
/// that key that select the pod (or none selects it).
pub fn labelled_by(caches: &Caches, le: &LeaderElection, pod: &Pod) -> bool {
    let me = le.metadata.name.as_deref().unwrap_or_default();
    if k8s::labelled_by(pod) == Some(me) {
        return true;
    }
    let labels = &le.spec.labels;
    let value = k8s::labels_of(pod).get(&labels.key);
    if value != Some(&labels.leader) && value != Some(&labels.follower) {
        return false;
    }
    let same_key_owner =
        foreign_owner(caches, me, pod).is_some_and(|owner| owner.spec.labels.key == labels.key);
    let selecting = selecting_under(caches, &labels.key, pod);
    conflict::labelled_by(me, false, same_key_owner, &selecting, true)
}

/// The live elections of the pod's namespace with a valid spec writing `key` that select it.
fn selecting_under(caches: &Caches, key: &str, pod: &Pod) -> Vec<Writer> {
    let Some(namespace) = pod.namespace() else {
        return Vec::new();
    };
    let labels = k8s::labels_of(pod);
    caches
        .index
        .elections_for_labels(&namespace, labels)
        .into_iter()
        .filter_map(|name| {
            let le = caches
                .elections
                .get(&ObjectRef::new(&name).within(&namespace))?;
            let config = caches
                .validated
                .of(&election_key_of(&namespace, &name), &le)
                .ok()?;
            let selects = le.metadata.deletion_timestamp.is_none()
                && config.labels.key == key
                && selector_matches(&le.spec.selector, labels);
            selects.then(|| {
                Some(Writer {
                    name,
                    created_at: le.metadata.creation_timestamp.as_ref()?.0,
                })
            })?
        })
        .collect()
}
