//! `consul-elector delete-elections`: what the chart's pre-delete hook runs before `helm
//! uninstall` removes the operator.
//!
//! Every LeaderElection carries the `elector.dev/cleanup` finalizer, which only the running
//! operator removes, after it has taken its labels off the pods, released the Consul key and
//! destroyed the sessions. An election still present once the operator is gone stays
//! Terminating forever, and so does its namespace. This command deletes every election in the
//! given namespaces while the operator still runs, and waits until the operator has cleaned up
//! each of them. When the bound passes, it names what is left and the one-line recovery.
//!
//! An election whose status names another install of the operator as serving it
//! (`status.servedBy`) is left alone: uninstalling one of two installs that watch the same
//! namespaces must not delete what the other serves.

use std::time::Duration;

use futures::StreamExt;
use kube::api::{DeleteParams, ListParams};
use kube::runtime::wait::{await_condition, conditions};
use kube::{Api, Client, ResourceExt};

use crate::crd::LeaderElection;

/// Why `delete-elections` failed. Messages name the elections involved.
#[derive(Debug, thiserror::Error)]
pub enum UninstallError {
    /// Listing or deleting the elections failed.
    #[error("{action} LeaderElections in {scope}: {source}")]
    Api {
        /// What was being done.
        action: &'static str,
        /// `namespace X` or `every namespace`.
        scope: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// Elections were still present when the bound passed.
    #[error(
        "{} LeaderElection(s) still present after {:?} ({}): is the operator running? Each keeps \
         its finalizer until the operator has cleaned it up. To give up the cleanup (labels, \
         Consul keys and sessions stay behind until their TTL), remove the finalizers: \
         kubectl patch leaderelection NAME -n NAMESPACE --type=merge -p \
         '{{\"metadata\":{{\"finalizers\":null}}}}'",
        remaining.len(),
        timeout,
        remaining.join(", ")
    )]
    TimedOut {
        /// `namespace/name` of each election left.
        remaining: Vec<String>,
        /// The bound that passed.
        timeout: Duration,
    },
}

/// Whether `served_by` (an election's `status.servedBy`, `<cluster>/<install>`) names an
/// install other than `install` (`<lease namespace>.<lease name>`). Within one cluster the
/// install tells installs apart.
fn served_by_another(served_by: Option<&str>, install: &str) -> bool {
    served_by.is_some_and(|served_by| served_by.rsplit('/').next() != Some(install))
}

/// Deletes every LeaderElection in `namespaces` (every namespace when empty) that no other
/// install than `install` serves, and waits, at most `timeout` in all, until each is gone.
/// Returns how many elections were deleted.
pub async fn delete_elections(
    client: Client,
    namespaces: &[String],
    install: &str,
    timeout: Duration,
) -> Result<usize, UninstallError> {
    let scopes: Vec<(Api<LeaderElection>, String)> = if namespaces.is_empty() {
        vec![(Api::all(client.clone()), "every namespace".to_owned())]
    } else {
        namespaces
            .iter()
            .map(|ns| {
                (
                    Api::namespaced(client.clone(), ns),
                    format!("namespace {ns}"),
                )
            })
            .collect()
    };
    let mut deleted = Vec::new();
    for (api, scope) in &scopes {
        let elections =
            api.list(&ListParams::default())
                .await
                .map_err(|source| UninstallError::Api {
                    action: "listing",
                    scope: scope.clone(),
                    source,
                })?;
        for election in elections {
            let (Some(namespace), Some(uid)) = (election.namespace(), election.uid()) else {
                continue;
            };
            let name = election.name_any();
            let served_by = election
                .status
                .as_ref()
                .and_then(|s| s.served_by.as_deref());
            if served_by_another(served_by, install) {
                tracing::info!(%namespace, %name, "another install serves the LeaderElection; leaving it");
                continue;
            }
            let namespaced: Api<LeaderElection> = Api::namespaced(client.clone(), &namespace);
            match namespaced.delete(&name, &DeleteParams::default()).await {
                Ok(_) => {}
                // Deleted meanwhile by someone else: nothing left to do for it.
                Err(kube::Error::Api(status)) if status.code == 404 => continue,
                Err(source) => {
                    return Err(UninstallError::Api {
                        action: "deleting",
                        scope: format!("namespace {namespace}"),
                        source,
                    });
                }
            }
            tracing::info!(%namespace, %name, "deleted the LeaderElection; waiting for its cleanup");
            deleted.push((namespaced, namespace, name, uid));
        }
    }
    let count = deleted.len();
    let waits = deleted
        .into_iter()
        .map(|(api, namespace, name, uid)| async move {
            let gone = await_condition(api, &name, conditions::is_deleted(&uid)).await;
            (format!("{namespace}/{name}"), gone.is_ok())
        });
    let mut pending = futures::stream::iter(waits).buffer_unordered(64);
    let mut remaining = Vec::new();
    let deadline = tokio::time::sleep(timeout);
    tokio::pin!(deadline);
    loop {
        tokio::select! {
            next = pending.next() => match next {
                Some((_, true)) => {}
                Some((name, false)) => remaining.push(name),
                None => break,
            },
            () = &mut deadline => {
                drop(pending);
                return Err(UninstallError::TimedOut {
                    remaining: still_present(&scopes).await,
                    timeout,
                });
            }
        }
    }
    if remaining.is_empty() {
        Ok(count)
    } else {
        Err(UninstallError::TimedOut { remaining, timeout })
    }
}

/// `namespace/name` of every election still listed in `scopes`; a scope that cannot be
/// listed is named instead.
async fn still_present(scopes: &[(Api<LeaderElection>, String)]) -> Vec<String> {
    let mut names = Vec::new();
    for (api, scope) in scopes {
        match api.list(&ListParams::default()).await {
            Ok(list) => names.extend(list.into_iter().map(|election| {
                format!(
                    "{}/{}",
                    election.namespace().unwrap_or_default(),
                    election.name_any()
                )
            })),
            Err(error) => names.push(format!("(cannot list {scope}: {error})")),
        }
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_elections_another_install_serves_are_left() {
        let own = "ops.consul-elector";
        assert!(!served_by_another(None, own));
        assert!(!served_by_another(Some("prod/ops.consul-elector"), own));
        assert!(served_by_another(Some("prod/team.consul-elector"), own));
    }
}
