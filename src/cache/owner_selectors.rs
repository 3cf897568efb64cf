//! The label keys the selectors of the candidate pods' controllers use, read for
//! [`crate::election::label_key_check::check_label_key`]: one GET of each controller
//! (ReplicaSet, StatefulSet, DaemonSet in `apps/v1`, Job in `batch/v1`), never a watch of
//! them. The selectors of these kinds are immutable, so what was read is kept by the owner's
//! UID; an entry no reconcile used for `UNUSED_FOR` is dropped (every election is
//! reconciled at least every the controller's resync period), so the cache holds about the owners of the
//! pods elections select, whatever the cluster's size. A selector that could not be read is
//! read again after `FORBIDDEN_RETRY` (the operator's role lacks `get` on the kind) or
//! `FAILED_RETRY` (any other failure).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::apps::v1::{DaemonSet, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, OwnerReference};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use tokio::time::Instant;

use crate::election::label_key_check::{OwnedPod, SelectedKeys};
use crate::k8s::Pod;

/// How long a selector the API server refused to show (403) stays unknown before it is read
/// again: an install whose role lacks `get` on the kind is not asked on every reconcile.
const FORBIDDEN_RETRY: Duration = Duration::from_secs(300);
/// How long a selector whose read failed otherwise stays unknown before it is read again.
const FAILED_RETRY: Duration = Duration::from_secs(30);
/// An entry no reconcile used for this long is dropped (twice the resync period).
const UNUSED_FOR: Duration = Duration::from_secs(1200);

/// One owner's selector keys as last read.
#[derive(Debug)]
struct Entry {
    keys: SelectedKeys,
    /// When to read an unknown selector again (`None`: known, never read again).
    read_again_at: Option<Instant>,
    used_at: Instant,
}

/// The selector keys of pod controllers, by owner UID.
#[derive(Debug, Default)]
pub struct OwnerSelectors {
    entries: Mutex<HashMap<String, Entry>>,
    /// The kinds whose refusal (403) was logged as a warning already.
    warned: Mutex<HashSet<&'static str>>,
}

impl OwnerSelectors {
    fn entries(&self) -> MutexGuard<'_, HashMap<String, Entry>> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The controllers of `pods` (in the order given) that are of a kind the operator
    /// reads, each with the label keys its selector uses.
    pub async fn of_pods(&self, client: &Client, pods: &[Arc<Pod>]) -> Vec<OwnedPod> {
        let mut owned = Vec::new();
        for pod in pods {
            let (Some(namespace), Some(name)) = (&pod.metadata.namespace, &pod.metadata.name)
            else {
                continue;
            };
            let Some((owner, kind)) = controller_of(pod) else {
                continue;
            };
            let keys = match self.cached(&owner.uid, Instant::now()) {
                Some(keys) => keys,
                None => self.read(client, namespace, owner, kind).await,
            };
            owned.push(OwnedPod {
                pod: name.clone(),
                kind: owner.kind.clone(),
                owner: format!("{namespace}/{}", owner.name),
                keys,
            });
        }
        owned
    }

    /// The keys remembered for `uid`, unless they are to be read (again).
    fn cached(&self, uid: &str, now: Instant) -> Option<SelectedKeys> {
        let mut entries = self.entries();
        let entry = entries.get_mut(uid)?;
        if entry.read_again_at.is_some_and(|at| at <= now) {
            return None;
        }
        entry.used_at = now;
        Some(entry.keys.clone())
    }

    fn remember(
        &self,
        uid: &str,
        keys: SelectedKeys,
        read_again_at: Option<Instant>,
        now: Instant,
    ) {
        let entry = Entry {
            keys,
            read_again_at,
            used_at: now,
        };
        self.entries().insert(uid.to_owned(), entry);
    }

    /// Reads the selector of `owner` (of `kind`) in `namespace`, and remembers it.
    async fn read(
        &self,
        client: &Client,
        namespace: &str,
        owner: &OwnerReference,
        kind: Kind,
    ) -> SelectedKeys {
        let read = match kind {
            Kind::ReplicaSet => {
                selector_keys::<ReplicaSet>(client, namespace, owner, |o| {
                    o.spec.map(|s| s.selector)
                })
                .await
            }
            Kind::StatefulSet => {
                selector_keys::<StatefulSet>(client, namespace, owner, |o| {
                    o.spec.map(|s| s.selector)
                })
                .await
            }
            Kind::DaemonSet => {
                selector_keys::<DaemonSet>(client, namespace, owner, |o| o.spec.map(|s| s.selector))
                    .await
            }
            Kind::Job => {
                selector_keys::<Job>(client, namespace, owner, |o| {
                    o.spec.and_then(|s| s.selector)
                })
                .await
            }
        };
        let now = Instant::now();
        let (keys, read_again_at) = match read {
            Ok(keys) => (SelectedKeys::Known(keys), None),
            Err(kube::Error::Api(status)) if status.code == 403 => {
                let first = self
                    .warned
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert(kind.resource());
                if first {
                    tracing::warn!(
                        resource = kind.resource(),
                        "the operator may not get the controllers of candidate pods: label keys are not checked against their selectors (grant get on {})",
                        kind.resource()
                    );
                }
                let why = format!("forbidden: get on {}", kind.resource());
                (SelectedKeys::Unknown(why), Some(now + FORBIDDEN_RETRY))
            }
            Err(error) => {
                tracing::debug!(%error, owner = owner.name, "reading a pod controller's selector failed");
                let why = format!("reading it failed: {error}");
                (SelectedKeys::Unknown(why), Some(now + FAILED_RETRY))
            }
        };
        self.remember(&owner.uid, keys.clone(), read_again_at, now);
        keys
    }

    /// Forgets the owners no reconcile asked about for `UNUSED_FOR`.
    pub fn prune(&self, now: Instant) {
        self.entries()
            .retain(|_, entry| now.saturating_duration_since(entry.used_at) < UNUSED_FOR);
    }
}

/// The pod controllers whose selectors the operator reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    ReplicaSet,
    StatefulSet,
    DaemonSet,
    Job,
}

impl Kind {
    /// The resource, as an RBAC rule names it.
    fn resource(self) -> &'static str {
        match self {
            Kind::ReplicaSet => "replicasets.apps",
            Kind::StatefulSet => "statefulsets.apps",
            Kind::DaemonSet => "daemonsets.apps",
            Kind::Job => "jobs.batch",
        }
    }
}

/// The pod's controller, if it is of a kind the operator reads.
fn controller_of(pod: &Pod) -> Option<(&OwnerReference, Kind)> {
    let owner = pod
        .metadata
        .owner_references
        .as_deref()?
        .iter()
        .find(|r| r.controller == Some(true))?;
    let kind = match (owner.api_version.as_str(), owner.kind.as_str()) {
        ("apps/v1", "ReplicaSet") => Kind::ReplicaSet,
        ("apps/v1", "StatefulSet") => Kind::StatefulSet,
        ("apps/v1", "DaemonSet") => Kind::DaemonSet,
        ("batch/v1", "Job") => Kind::Job,
        _ => return None,
    };
    Some((owner, kind))
}

/// The label keys of the selector of `owner` (read as a `K`; `selector` takes it out): none
/// when the owner is gone (or its name now belongs to another object), for its controller
/// then no longer owns the pod.
async fn selector_keys<K>(
    client: &Client,
    namespace: &str,
    owner: &OwnerReference,
    selector: impl FnOnce(K) -> Option<LabelSelector>,
) -> Result<BTreeSet<String>, kube::Error>
where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(client.clone(), namespace);
    let Some(object) = crate::bounded_read::bounded(api.get_opt(&owner.name)).await? else {
        return Ok(BTreeSet::new());
    };
    if object.meta().uid.as_deref() != Some(owner.uid.as_str()) {
        return Ok(BTreeSet::new());
    }
    Ok(selector(object).map(|s| keys_of(&s)).unwrap_or_default())
}

/// The label keys a selector uses: its `matchLabels` keys and its `matchExpressions` keys.
fn keys_of(selector: &LabelSelector) -> BTreeSet<String> {
    let labels = selector.match_labels.iter().flat_map(|m| m.keys().cloned());
    let expressions = selector
        .match_expressions
        .iter()
        .flatten()
        .map(|e| e.key.clone());
    labels.chain(expressions).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_selector_uses_the_keys_of_its_labels_and_expressions() {
        let selector: LabelSelector = serde_json::from_value(serde_json::json!({
            "matchLabels": {"app": "web", "pod-template-hash": "7d9c"},
            "matchExpressions": [{"key": "tier", "operator": "In", "values": ["db"]}],
        }))
        .expect("a selector");
        let keys: Vec<_> = keys_of(&selector).into_iter().collect();
        assert_eq!(keys, ["app", "pod-template-hash", "tier"]);
        assert!(keys_of(&LabelSelector::default()).is_empty());
    }

    #[test]
    fn only_the_controller_of_a_read_kind_counts() {
        let pod = |refs: serde_json::Value| -> Pod {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "p", "namespace": "ns", "ownerReferences": refs},
            }))
            .expect("a pod")
        };
        let owner = |api: &str, kind: &str, controller: bool| {
            serde_json::json!({"apiVersion": api, "kind": kind, "name": "o", "uid": "u",
                               "controller": controller})
        };
        let kind = |p: &Pod| controller_of(p).map(|(_, k)| k);
        assert_eq!(
            kind(&pod(serde_json::json!([owner(
                "apps/v1",
                "ReplicaSet",
                true
            )]))),
            Some(Kind::ReplicaSet)
        );
        assert_eq!(
            kind(&pod(serde_json::json!([owner("batch/v1", "Job", true)]))),
            Some(Kind::Job)
        );
        assert_eq!(
            kind(&pod(serde_json::json!([owner(
                "apps/v1",
                "ReplicaSet",
                false
            )]))),
            None
        );
        assert_eq!(
            kind(&pod(serde_json::json!([owner(
                "example.com/v1",
                "Database",
                true
            )]))),
            None,
            "a custom controller's selector is not known"
        );
    }

    #[test]
    fn known_keys_are_kept_unknown_ones_read_again_and_unused_ones_dropped() {
        let cache = OwnerSelectors::default();
        let t0 = Instant::now();
        let known = SelectedKeys::Known(BTreeSet::from(["app".to_owned()]));
        cache.remember("rs", known.clone(), None, t0);
        let unknown = SelectedKeys::Unknown("forbidden".into());
        cache.remember("sts", unknown.clone(), Some(t0 + FORBIDDEN_RETRY), t0);
        let later = t0 + FORBIDDEN_RETRY - Duration::from_secs(1);
        assert_eq!(cache.cached("rs", later), Some(known.clone()));
        assert_eq!(cache.cached("sts", later), Some(unknown));
        assert_eq!(
            cache.cached("sts", t0 + FORBIDDEN_RETRY),
            None,
            "read again"
        );
        // "rs" was used at `later`, "sts" last at `later` too; a use keeps an entry.
        cache.prune(later + UNUSED_FOR - Duration::from_secs(1));
        assert_eq!(cache.cached("rs", later + UNUSED_FOR), Some(known));
        cache.prune(later + UNUSED_FOR + UNUSED_FOR);
        assert!(cache.entries().is_empty());
    }
}
