//! Before its first write, a replica that became active makes sure its caches are at least as
//! new as a fresh list (docs/design.md rule 8): a standby's watches may lag behind the writes
//! the previous active replica made in its last moments, and a move planned on such a cache
//! could undo them (a leader label that looks absent, a token that looks lower).
//!
//! The pods and elections of every watched scope are listed (metadata only, in pages, a
//! quorum read), and the reflectors' stores are waited for until each listed object is there
//! in the listed version or a later one, or is confirmed deleted since the list (a GET that
//! finds nothing: a store that never shows it again is right), and each object the list of
//! its own scope no longer has is gone from them (or was created after that list). Every
//! request has a timeout; a list the stores cannot catch up with in time is made again.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use kube::api::ListParams;
use kube::runtime::reflector::Store;
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;

use super::caches::Caches;
use super::scoped_stream::scoped_apis;
use crate::crd::LeaderElection;
use crate::k8s::Pod;

/// Objects per page of the fresh list.
const PAGE: u32 = 500;
/// How often the stores are compared with the list while they catch up.
const POLL: Duration = Duration::from_millis(50);
/// After this long without catching up, the lists are made again (and a warning logged).
const RELIST_AFTER: Duration = Duration::from_secs(30);

/// An object's `(namespace, name)`.
type Key = (String, String);

/// What a fresh list of one watched scope showed.
#[derive(Debug, Default)]
struct ScopeList {
    /// The namespace, or every namespace (`None`).
    scope: Option<String>,
    /// Each listed object's resourceVersion.
    versions: HashMap<Key, u64>,
    /// The resourceVersion the list was read at (the newest of its pages).
    at: u64,
}

impl ScopeList {
    fn covers(&self, namespace: &str) -> bool {
        self.scope.as_deref().is_none_or(|scope| scope == namespace)
    }
}

/// How far a store is from the lists.
#[derive(Debug, Default, PartialEq, Eq)]
struct Lag {
    /// Objects cached in a version older than listed, or cached although their scope's list
    /// no longer had them when it was read.
    stale: usize,
    /// Listed objects the store does not have (not known to be deleted since).
    absent: Vec<Key>,
}

/// A resourceVersion as a number (etcd's revision; `None` when it is not one).
fn version(v: Option<&str>) -> Option<u64> {
    v.and_then(|v| v.parse().ok())
}

/// How far the `cached` versions lag behind `lists`, counting as caught up a listed object
/// that is absent but `deleted` since the list.
fn lag(cached: &HashMap<Key, u64>, lists: &[ScopeList], deleted: &HashSet<Key>) -> Lag {
    let mut lag = Lag::default();
    for list in lists {
        for (key, listed) in &list.versions {
            match cached.get(key) {
                Some(cached) if cached >= listed => {}
                Some(_) => lag.stale += 1,
                None if deleted.contains(key) => {}
                None => lag.absent.push(key.clone()),
            }
        }
    }
    for (key, cached) in cached {
        // Only the list of the object's own scope says whether it is gone: another scope's
        // list may have been read later, after this object was created.
        let gone = lists.iter().any(|list| {
            list.covers(&key.0) && !list.versions.contains_key(key) && *cached <= list.at
        });
        if gone {
            lag.stale += 1;
        }
    }
    lag
}

/// The store's objects and versions.
fn snapshot<K>(store: &Store<K>) -> HashMap<Key, u64>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    store
        .state()
        .iter()
        .filter_map(|object| {
            let meta = object.meta();
            Some((
                (meta.namespace.clone()?, meta.name.clone()?),
                version(meta.resource_version.as_deref())?,
            ))
        })
        .collect()
}

/// `request` bounded by [`crate::bounded_read::READ_TIMEOUT`], its error saying `what` it was.
async fn bounded<T>(
    what: &str,
    request: impl Future<Output = Result<T, kube::Error>>,
) -> Result<T, String> {
    crate::bounded_read::bounded(request)
        .await
        .map_err(|error| format!("{what}: {error}"))
}

/// Lists every object of `K` in the watched scopes, one list per scope.
async fn list<K>(client: &Client, namespaces: &[String]) -> Result<Vec<ScopeList>, String>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
{
    let mut lists = Vec::new();
    for (scope, api) in scoped_apis::<K>(client, namespaces) {
        let api: Api<K> = api;
        let mut listed = ScopeList {
            scope,
            ..ScopeList::default()
        };
        let mut params = ListParams::default().limit(PAGE);
        loop {
            let page = bounded("listing", api.list_metadata(&params)).await?;
            listed.at = listed
                .at
                .max(version(page.metadata.resource_version.as_deref()).unwrap_or(0));
            for item in &page.items {
                let meta = &item.metadata;
                if let (Some(ns), Some(name), Some(v)) = (
                    meta.namespace.clone(),
                    meta.name.clone(),
                    version(meta.resource_version.as_deref()),
                ) {
                    listed.versions.insert((ns, name), v);
                }
            }
            match page.metadata.continue_.filter(|c| !c.is_empty()) {
                Some(token) => params = params.continue_token(&token),
                None => break,
            }
        }
        lists.push(listed);
    }
    Ok(lists)
}

/// One resource's lists, and which of its absent objects are known to be deleted since.
struct Tracked<K: Resource<DynamicType = ()> + Clone + 'static> {
    store: Store<K>,
    lists: Vec<ScopeList>,
    deleted: HashSet<Key>,
    asked: HashSet<Key>,
}

impl<K> Tracked<K>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
        + 'static,
{
    /// How many objects the store still lags behind in; asks the API server once per list
    /// about each listed object the store lacks, which a deletion after the list explains.
    async fn behind(&mut self, client: &Client) -> usize {
        let lag = lag(&snapshot(&self.store), &self.lists, &self.deleted);
        for key in &lag.absent {
            if !self.asked.insert(key.clone()) {
                continue;
            }
            let api: Api<K> = Api::namespaced(client.clone(), &key.0);
            match bounded("reading", api.get_metadata_opt(&key.1)).await {
                Ok(None) => {
                    self.deleted.insert(key.clone());
                }
                Ok(Some(_)) => {}
                // Asked again with the next list, not in a loop.
                Err(error) => {
                    tracing::debug!(%error, namespace = %key.0, name = %key.1, "cannot tell whether a listed object was deleted");
                }
            }
        }
        lag.stale
            + lag
                .absent
                .iter()
                .filter(|k| !self.deleted.contains(*k))
                .count()
    }
}

/// Waits until the pod and election caches are at least as new as a fresh list of the
/// watched `namespaces` (empty: all) through `client`. Returns how long that took. Keeps
/// trying (this replica writes nothing meanwhile) until it succeeds.
pub async fn catch_up(client: &Client, namespaces: &[String], caches: &Caches) -> Duration {
    let started = tokio::time::Instant::now();
    loop {
        let lists = futures::future::try_join(
            list::<Pod>(client, namespaces),
            list::<LeaderElection>(client, namespaces),
        )
        .await;
        let (pods, elections) = match lists {
            Ok(lists) => lists,
            Err(error) => {
                tracing::warn!(%error, "listing pods and elections before the first write failed; retrying");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        let mut pods = Tracked {
            store: caches.pods.clone(),
            lists: pods,
            deleted: HashSet::new(),
            asked: HashSet::new(),
        };
        let mut elections = Tracked {
            store: caches.elections.clone(),
            lists: elections,
            deleted: HashSet::new(),
            asked: HashSet::new(),
        };
        let listed_at = tokio::time::Instant::now();
        loop {
            let behind = pods.behind(client).await + elections.behind(client).await;
            if behind == 0 {
                return started.elapsed();
            }
            if listed_at.elapsed() >= RELIST_AFTER {
                tracing::warn!(
                    behind,
                    "the caches have not caught up with a fresh list yet; listing again"
                );
                break;
            }
            tokio::time::sleep(POLL).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(ns: &str, name: &str) -> Key {
        (ns.into(), name.into())
    }

    fn listed(scope: Option<&str>, at: u64, objects: &[(&str, &str, u64)]) -> ScopeList {
        ScopeList {
            scope: scope.map(str::to_string),
            versions: objects
                .iter()
                .map(|(ns, name, v)| (key(ns, name), *v))
                .collect(),
            at,
        }
    }

    fn cached(objects: &[(&str, &str, u64)]) -> HashMap<Key, u64> {
        objects
            .iter()
            .map(|(ns, name, v)| (key(ns, name), *v))
            .collect()
    }

    #[test]
    fn a_store_as_new_as_the_list_or_newer_has_caught_up() {
        let lists = [listed(None, 20, &[("a", "p", 10), ("a", "q", 12)])];
        let none = HashSet::new();
        assert_eq!(
            lag(&cached(&[("a", "p", 10), ("a", "q", 15)]), &lists, &none),
            Lag::default()
        );
        let old = lag(&cached(&[("a", "p", 9), ("a", "q", 12)]), &lists, &none);
        assert_eq!(
            old,
            Lag {
                stale: 1,
                absent: vec![]
            }
        );
        // Created after the list: not a leftover.
        let newer = cached(&[("a", "p", 10), ("a", "q", 12), ("a", "r", 21)]);
        assert_eq!(lag(&newer, &lists, &none), Lag::default());
        // Deleted before the list, still cached: stale.
        let leftover = cached(&[("a", "p", 10), ("a", "q", 12), ("a", "r", 19)]);
        assert_eq!(lag(&leftover, &lists, &none).stale, 1);
    }

    /// A pod deleted after the list's snapshot never comes back into the store: once the API
    /// server confirms it is gone, the store has caught up (it waited for good before).
    #[test]
    fn a_listed_object_deleted_since_is_caught_up_once_confirmed() {
        let lists = [listed(None, 20, &[("a", "p", 10), ("a", "gone", 11)])];
        let store = cached(&[("a", "p", 10)]);
        let unconfirmed = lag(&store, &lists, &HashSet::new());
        assert_eq!(unconfirmed.absent, vec![key("a", "gone")]);
        let deleted = HashSet::from([key("a", "gone")]);
        assert_eq!(lag(&store, &lists, &deleted), Lag::default());
    }

    /// With several watched namespaces, an object created in one after its own list but
    /// before another namespace's later list is not taken for a leftover.
    #[test]
    fn only_an_objects_own_scope_says_it_is_gone() {
        let lists = [
            listed(Some("a"), 20, &[("a", "p", 10)]),
            listed(Some("b"), 30, &[("b", "q", 25)]),
        ];
        let store = cached(&[("a", "p", 10), ("a", "new", 22), ("b", "q", 25)]);
        assert_eq!(lag(&store, &lists, &HashSet::new()), Lag::default());
    }
}
