//! Before its first write, a replica that became active makes sure its caches are at least as
//! new as a fresh list (docs/design.md rule 8): a standby's watches may lag behind the writes
//! the previous active replica made in its last moments, and a move planned on such a cache
//! could undo them (a leader label that looks absent, a token that looks lower).
//!
//! The pods and elections of every watched scope are listed (metadata only, in pages, a
//! quorum read), and the reflectors' stores are waited for until each listed object is there
//! in the listed version or a later one, and each object the list no longer has is gone from
//! them (or was created after the list).

use std::collections::HashMap;
use std::time::Duration;

use kube::api::ListParams;
use kube::runtime::reflector::{ObjectRef, Store};
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

/// What a fresh list showed: each object's version, and the list's own version.
#[derive(Debug, Default)]
struct Listed {
    /// `(namespace, name)` -> resourceVersion.
    versions: HashMap<(String, String), u64>,
    /// The resourceVersion the list was read at (the newest of its pages).
    at: u64,
}

/// A resourceVersion as a number (etcd's revision; `None` when it is not one).
fn version(v: Option<&str>) -> Option<u64> {
    v.and_then(|v| v.parse().ok())
}

/// Lists every object of `K` in the watched scopes.
async fn list<K>(client: &Client, namespaces: &[String]) -> Result<Listed, kube::Error>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
{
    let mut listed = Listed::default();
    for (_, api) in scoped_apis::<K>(client, namespaces) {
        let api: Api<K> = api;
        let mut params = ListParams::default().limit(PAGE);
        loop {
            let page = api.list_metadata(&params).await?;
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
    }
    Ok(listed)
}

/// How many objects `store` still lags behind `listed` in (0: caught up).
fn lagging<K>(store: &Store<K>, listed: &Listed) -> usize
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    let behind = listed
        .versions
        .iter()
        .filter(|((ns, name), listed_version)| {
            let cached = store.get(&ObjectRef::new(name).within(ns));
            cached
                .and_then(|c| version(c.meta().resource_version.as_deref()))
                .is_none_or(|v| v < **listed_version)
        })
        .count();
    let gone = store
        .state()
        .iter()
        .filter(|cached| {
            let meta = cached.meta();
            let key = (
                meta.namespace.clone().unwrap_or_default(),
                meta.name.clone().unwrap_or_default(),
            );
            !listed.versions.contains_key(&key)
                && version(meta.resource_version.as_deref()).is_some_and(|v| v <= listed.at)
        })
        .count();
    behind + gone
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
        let listed_at = tokio::time::Instant::now();
        loop {
            let behind = lagging(&caches.pods, &pods) + lagging(&caches.elections, &elections);
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
