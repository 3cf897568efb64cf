//! What the chart's pre-delete hook runs before `helm uninstall` removes the operator:
//! `consul-elector release-elections` (the default) or `delete-elections`.
//!
//! Every LeaderElection the operator acted on carries the `elector.dev/cleanup` finalizer,
//! which only the running operator removes, after it has taken its labels off the pods,
//! released the Consul key and destroyed the sessions. An election still carrying it once the
//! operator is gone could never be deleted, nor could its namespace. So while the operator
//! still runs, the hook asks it to release every election it serves: it writes the request on
//! the install's Lease ([`RELEASE_REQUESTED_ANNOTATION`], renewed while it waits, at most once
//! per two lease durations), and the
//! operator withdraws each election in rule 7's order and takes the finalizer off. The
//! objects and their specs stay, so a later install elects again. `delete-elections` also
//! deletes them. The hook waits until no election it covers keeps the finalizer (or, deleting,
//! exists); when the bound passes, it names what is left and the ways out.
//!
//! An election whose status names another install of the operator as serving it
//! (`status.servedBy`) is left alone: uninstalling one of two installs that watch the same
//! namespaces must not touch what the other serves.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};

use crate::crd::{FINALIZER, LeaderElection, RELEASE_REQUESTED_ANNOTATION};
use crate::wall_clock::WallClock;

/// How often the hook looks at the elections again.
const LOOK_AGAIN: Duration = Duration::from_secs(2);

/// The shortest time between two writes of the request (see [`renew_every`]).
const MIN_RENEWAL: Duration = Duration::from_secs(30);

/// How often the request is written again, for a replica that restarts meanwhile: at most
/// once per two lease durations (`lease_duration`, as the Lease says it), since every write
/// of the Lease restarts a standby's count towards taking it over, and a standby must still
/// be able to take over from an active replica that dies during the uninstall.
fn renew_every(lease_duration: Option<Duration>) -> Duration {
    lease_duration.map_or(MIN_RENEWAL, |duration| (duration * 2).max(MIN_RENEWAL))
}

/// Why the hook failed. Messages name the elections involved.
#[derive(Debug, thiserror::Error)]
pub enum UninstallError {
    /// Asking the operator, listing or deleting the elections failed.
    #[error("{action} {scope}: {source}")]
    Api {
        /// What was being done.
        action: &'static str,
        /// `LeaderElections in namespace X`, `the Lease N/X`, ...
        scope: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// Elections still kept the finalizer (or existed) when the bound passed.
    #[error(
        "{} LeaderElection(s) not released after {:?} ({}). Is the operator running? Is Consul \
         reachable? To stop waiting for Consul (the key and session then expire with their \
         TTL), annotate each: kubectl annotate leaderelection NAME -n NAMESPACE \
         elector.dev/skip-consul-cleanup=true; with the operator gone, remove the finalizer \
         (the leader label stays on the pod): kubectl patch leaderelection NAME -n NAMESPACE \
         --type=merge -p '{{\"metadata\":{{\"finalizers\":null}}}}'",
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

/// What the hook does to the elections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Course {
    /// The operator releases them; the objects stay.
    Release,
    /// The operator releases them and they are deleted.
    Delete,
}

/// Where the hook works: the watched namespaces and the install.
#[derive(Debug, Clone)]
pub struct Scope {
    /// The watched namespaces (every namespace when empty).
    pub namespaces: Vec<String>,
    /// The install's Lease: its namespace and name.
    pub lease: (String, String),
    /// The install, `<lease namespace>.<lease name>`.
    pub install: String,
}

/// Whether `served_by` (an election's `status.servedBy`, `<cluster>/<install>`) names an
/// install other than `install` (`<lease namespace>.<lease name>`). Within one cluster the
/// install tells installs apart.
fn served_by_another(served_by: Option<&str>, install: &str) -> bool {
    served_by.is_some_and(|served_by| served_by.rsplit('/').next() != Some(install))
}

/// Asks the install's operator to release every election it serves in `scope`, deletes them
/// too when `course` says so, and waits, at most `timeout` in all, until none that no other
/// install serves keeps the finalizer (or, deleting, exists). Returns how many there were.
pub async fn uninstall(
    client: Client,
    scope: &Scope,
    course: Course,
    timeout: Duration,
    wall: &WallClock,
) -> Result<usize, UninstallError> {
    let apis = scoped(&client, &scope.namespaces);
    let deadline = tokio::time::Instant::now() + timeout;
    // What was left at the last look, for a bound that passes during a request.
    let mut last_left = None;
    let work = async {
        let mut asked = tokio::time::Instant::now();
        let mut every = renew_every(ask(&client, scope, wall).await?);
        let mut covered = 0;
        if course == Course::Delete {
            covered = delete(&client, &apis, &scope.install).await?;
        }
        loop {
            let left = left(&apis, &scope.install, course).await?;
            covered = covered.max(left.len());
            if left.is_empty() {
                return Ok(covered);
            }
            tracing::info!(
                left = left.len(),
                "waiting for the operator to release the LeaderElections"
            );
            last_left = Some(left);
            tokio::time::sleep(LOOK_AGAIN).await;
            if asked.elapsed() >= every {
                asked = tokio::time::Instant::now();
                every = renew_every(ask(&client, scope, wall).await?);
            }
        }
    };
    // Every request, like the wait, ends at the bound.
    let outcome = tokio::time::timeout_at(deadline, work).await;
    outcome.unwrap_or_else(|_| {
        Err(UninstallError::TimedOut {
            remaining: last_left.unwrap_or_else(|| {
                vec!["(not known: the API server did not answer in time)".to_owned()]
            }),
            timeout,
        })
    })
}

/// The election APIs of `namespaces` (every namespace when empty), each with its scope's name.
fn scoped(client: &Client, namespaces: &[String]) -> Vec<(Api<LeaderElection>, String)> {
    if namespaces.is_empty() {
        return vec![(Api::all(client.clone()), "every namespace".to_owned())];
    }
    namespaces
        .iter()
        .map(|ns| {
            (
                Api::namespaced(client.clone(), ns),
                format!("namespace {ns}"),
            )
        })
        .collect()
}

/// Writes the release request, now, on the install's Lease; the Lease's duration as it reads
/// then. A Lease that does not exist (no operator ever ran) asks nothing: whatever keeps the
/// finalizer is named at the bound.
async fn ask(
    client: &Client,
    scope: &Scope,
    wall: &WallClock,
) -> Result<Option<Duration>, UninstallError> {
    let (namespace, name) = &scope.lease;
    let api: Api<Lease> = Api::namespaced(client.clone(), namespace);
    let patch = serde_json::json!({
        "metadata": {"annotations": {RELEASE_REQUESTED_ANNOTATION: wall.now().to_string()}}
    });
    match api
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(lease) => Ok(lease
            .spec
            .and_then(|spec| spec.lease_duration_seconds)
            .and_then(|seconds| u64::try_from(seconds).ok())
            .map(Duration::from_secs)),
        Err(kube::Error::Api(status)) if status.is_not_found() => {
            tracing::warn!(lease = %name, %namespace, "the install's Lease does not exist: no operator runs to release the elections");
            Ok(None)
        }
        Err(source) => Err(UninstallError::Api {
            action: "asking the operator to release its elections through",
            scope: format!("the Lease {namespace}/{name}"),
            source,
        }),
    }
}

/// Deletes every election of `apis` that no other install than `install` serves; returns how
/// many.
async fn delete(
    client: &Client,
    apis: &[(Api<LeaderElection>, String)],
    install: &str,
) -> Result<usize, UninstallError> {
    let mut deleted = 0;
    for election in ours(apis, install).await? {
        let (Some(namespace), name) = (election.namespace(), election.name_any()) else {
            continue;
        };
        let api: Api<LeaderElection> = Api::namespaced(client.clone(), &namespace);
        match api.delete(&name, &DeleteParams::default()).await {
            Ok(_) => deleted += 1,
            // Deleted meanwhile by someone else: nothing left to do for it.
            Err(kube::Error::Api(status)) if status.is_not_found() => {}
            Err(source) => {
                return Err(UninstallError::Api {
                    action: "deleting",
                    scope: format!("LeaderElection {namespace}/{name}"),
                    source,
                });
            }
        }
        tracing::info!(%namespace, %name, "deleted the LeaderElection");
    }
    Ok(deleted)
}

/// `namespace/name` of each election the hook still waits for: one no other install serves
/// that keeps the finalizer, or, deleting, still exists.
async fn left(
    apis: &[(Api<LeaderElection>, String)],
    install: &str,
    course: Course,
) -> Result<Vec<String>, UninstallError> {
    Ok(ours(apis, install)
        .await?
        .into_iter()
        .filter(|election| {
            course == Course::Delete || election.finalizers().iter().any(|f| f == FINALIZER)
        })
        .map(|election| {
            format!(
                "{}/{}",
                election.namespace().unwrap_or_default(),
                election.name_any()
            )
        })
        .collect())
}

/// The elections of `apis` that no other install than `install` serves.
async fn ours(
    apis: &[(Api<LeaderElection>, String)],
    install: &str,
) -> Result<Vec<LeaderElection>, UninstallError> {
    let mut ours = Vec::new();
    for (api, scope) in apis {
        let list =
            api.list(&ListParams::default())
                .await
                .map_err(|source| UninstallError::Api {
                    action: "listing",
                    scope: format!("LeaderElections in {scope}"),
                    source,
                })?;
        ours.extend(list.into_iter().filter(|election| {
            let served_by = election.status.as_ref().and_then(|s| s.served_by.as_deref());
            let another = served_by_another(served_by, install);
            if another {
                tracing::debug!(namespace = ?election.namespace(), name = %election.name_any(), "another install serves the LeaderElection; leaving it");
            }
            !another
        }));
    }
    Ok(ours)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_request_is_renewed_rarely_enough_for_a_standby_to_take_over() {
        let lease = |seconds| Some(Duration::from_secs(seconds));
        assert_eq!(renew_every(lease(15)), Duration::from_secs(30));
        assert_eq!(renew_every(lease(60)), Duration::from_secs(120));
        assert_eq!(renew_every(lease(3)), Duration::from_secs(30));
        assert_eq!(renew_every(None), Duration::from_secs(30));
        for seconds in [1, 15, 60, 3600] {
            assert!(renew_every(lease(seconds)) > Duration::from_secs(seconds));
        }
    }

    #[test]
    fn only_elections_another_install_serves_are_left() {
        let own = "ops.consul-elector";
        assert!(!served_by_another(None, own));
        assert!(!served_by_another(Some("prod/ops.consul-elector"), own));
        assert!(served_by_another(Some("prod/team.consul-elector"), own));
    }
}
