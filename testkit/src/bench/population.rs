//! A scenario's population, made before the operator starts and not timed: namespaces, pods
//! created already bound to a node with a Ready status (one create and one status patch
//! each, with bounded concurrency; no Deployments, so no controller adds work), and the
//! LeaderElections selecting them. Also the pod changes the failover scenario makes.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

use super::options::Sizes;
use super::tracker::{ELECTION_LABEL, Key};
use crate::pods::{SIM_IMAGE, nodes, status};
use crate::sandbox::SandboxError;
use crate::sandbox::objects::{self, api_error};

/// The label every bench pod carries, valued with its scenario's name (the tracker's
/// selector).
pub(crate) const BENCH_LABEL: &str = "elector-bench";
/// The session TTL of every bench election.
pub(crate) const SESSION_TTL: Duration = Duration::from_secs(15);
/// API requests in flight while populating.
const CONCURRENCY: usize = 48;
/// Nodes the pods are bound to round-robin (their names and addresses are the pod
/// simulator's; no kubelet plays them, the bench writes the pods' status itself).
const NODES: usize = 3;

/// The namespaces, elections and pods of one scenario.
#[derive(Debug, Clone)]
pub(crate) struct Population {
    /// The scenario's name: [`BENCH_LABEL`]'s value and the namespaces' infix.
    pub(crate) scenario: &'static str,
    /// The namespaces.
    pub(crate) namespaces: Vec<String>,
    /// The elections, `(namespace, name)`.
    pub(crate) elections: Vec<Key>,
    /// Candidate pods per election.
    pub(crate) pods: usize,
}

impl Population {
    /// The plan for `scenario` at `sizes`: election `e<i>` in namespace
    /// `bench-<scenario>-<i mod namespaces>`, with pods `e<i>-<k>`.
    pub(crate) fn plan(scenario: &'static str, sizes: &Sizes) -> Self {
        let namespaces: Vec<String> = (0..sizes.namespaces.min(sizes.elections))
            .map(|j| format!("{}{j}", Self::prefix_of(scenario)))
            .collect();
        let elections = (0..sizes.elections)
            .map(|i| (namespaces[i % namespaces.len()].clone(), format!("e{i}")))
            .collect();
        Self {
            scenario,
            namespaces,
            elections,
            pods: sizes.pods,
        }
    }

    /// One election `name` over `pods` pods that the scenario makes itself, in namespace
    /// `bench-<scenario>-0`.
    pub(crate) fn single(scenario: &'static str, name: &str, pods: usize) -> Self {
        let namespace = format!("{}0", Self::prefix_of(scenario));
        Self {
            scenario,
            namespaces: vec![namespace.clone()],
            elections: vec![(namespace, name.to_owned())],
            pods,
        }
    }

    fn prefix_of(scenario: &str) -> String {
        format!("bench-{scenario}-")
    }

    /// The prefix of the scenario's namespaces.
    pub(crate) fn namespace_prefix(&self) -> String {
        Self::prefix_of(self.scenario)
    }

    /// The label selector of the scenario's pods.
    pub(crate) fn selector(&self) -> String {
        format!("{BENCH_LABEL}={}", self.scenario)
    }

    /// The labels of the candidates of `election`.
    pub(crate) fn labels(&self, election: &str) -> BTreeMap<String, String> {
        [
            (ELECTION_LABEL.to_owned(), election.to_owned()),
            (BENCH_LABEL.to_owned(), self.scenario.to_owned()),
        ]
        .into()
    }

    /// Creates the namespaces and every pod (Ready), then the elections.
    pub(crate) async fn create(&self, client: &Client) -> Result<(), SandboxError> {
        for namespace in &self.namespaces {
            objects::create_namespace(client, namespace).await?;
        }
        let pods = self.elections.iter().flat_map(|(namespace, election)| {
            (0..self.pods).map(move |k| (namespace, election, pod_name(election, k), k))
        });
        stream::iter(pods)
            .map(|(namespace, election, name, k)| async move {
                self.create_pod(client, namespace, election, &name, k).await
            })
            .buffer_unordered(CONCURRENCY)
            .try_collect::<()>()
            .await?;
        stream::iter(&self.elections)
            .map(|(namespace, election)| create_election(client, namespace, election))
            .buffer_unordered(CONCURRENCY)
            .try_collect::<()>()
            .await
    }

    /// Creates pod `name` of `election`, bound to node `k mod NODES`, and writes its status
    /// Ready.
    pub(crate) async fn create_pod(
        &self,
        client: &Client,
        namespace: &str,
        election: &str,
        name: &str,
        k: usize,
    ) -> Result<(), SandboxError> {
        let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
        let pod = Pod {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                labels: Some(self.labels(election)),
                ..ObjectMeta::default()
            },
            spec: Some(PodSpec {
                node_name: Some(nodes::node_name(k % NODES)),
                termination_grace_period_seconds: Some(1),
                containers: vec![Container {
                    name: "app".into(),
                    image: Some(SIM_IMAGE.into()),
                    ..Container::default()
                }],
                ..PodSpec::default()
            }),
            ..Pod::default()
        };
        let created = api
            .create(&PostParams::default(), &pod)
            .await
            .map_err(api_error(format!("creating pod {namespace}/{name}")))?;
        let target = status::Target {
            host_ip: nodes::host_ip(k % NODES),
            pod_ip: nodes::allocate_pod_ip(k % NODES),
            ready: true,
        };
        // The operator may label the new pod before its status is written.
        write_status_retrying(&api, namespace, name, Some(created), |_| target.clone()).await
    }

    /// Deletes the scenario's pods at once (grace 0). Thousands of pods in one namespace
    /// can outlast the API server's request timeout; each attempt deletes more of them, so a
    /// deletion the server gave up on is sent again, up to [`DELETE_ATTEMPTS`] times.
    pub(crate) async fn delete_pods(&self, client: &Client) -> Result<(), SandboxError> {
        let now = DeleteParams {
            grace_period_seconds: Some(0),
            ..DeleteParams::default()
        };
        let selector = kube::api::ListParams::default().labels(&self.selector());
        for namespace in &self.namespaces {
            let api = Api::<Pod>::namespaced(client.clone(), namespace);
            let mut attempt = 1;
            loop {
                match api.delete_collection(&now, &selector).await {
                    Ok(_) => break,
                    Err(error) if server_gave_up(&error) && attempt < DELETE_ATTEMPTS => {
                        attempt += 1;
                    }
                    Err(error) => {
                        return Err(api_error(format!("deleting the pods of {namespace}"))(
                            error,
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    /// Deletes the scenario's elections (the operator, still running, releases their
    /// locks and labels and removes its finalizers).
    pub(crate) async fn delete_elections(&self, client: &Client) -> Result<(), SandboxError> {
        for namespace in &self.namespaces {
            objects::elections(client.clone(), namespace)
                .delete_collection(&DeleteParams::default(), &Default::default())
                .await
                .map_err(api_error(format!(
                    "deleting the LeaderElections of {namespace}"
                )))?;
        }
        Ok(())
    }
}

/// How often [`Population::delete_pods`] sends the deletion of one namespace's pods.
const DELETE_ATTEMPTS: u32 = 4;

/// Whether the API server gave up on a request at its own timeout (504 `Timeout`, or 500
/// `context deadline exceeded`), having perhaps done part of it: an idempotent request is
/// worth sending again.
fn server_gave_up(error: &kube::Error) -> bool {
    match error {
        kube::Error::Api(status) => {
            status.code == 504
                || status.reason == "Timeout"
                || (status.code == 500 && status.message.contains("deadline exceeded"))
        }
        _ => false,
    }
}

/// The name of candidate `k` of `election` that [`Population::create`] makes.
pub(crate) fn pod_name(election: &str, k: usize) -> String {
    format!("{election}-{k}")
}

/// Creates LeaderElection `namespace/election`, selecting the pods labelled
/// [`ELECTION_LABEL`]`=<election>`, session TTL [`SESSION_TTL`].
pub(crate) async fn create_election(
    client: &Client,
    namespace: &str,
    election: &str,
) -> Result<(), SandboxError> {
    let labels = [(ELECTION_LABEL.to_owned(), election.to_owned())].into();
    let manifest = objects::election_manifest(namespace, election, &labels, SESSION_TTL)?;
    objects::elections(client.clone(), namespace)
        .create(&PostParams::default(), &manifest)
        .await
        .map_err(api_error(format!(
            "creating LeaderElection {namespace}/{election}"
        )))
        .map(drop)
}

/// Writes the pod's status as the simulated kubelet would (`Running`, conditions, IPs, the
/// container running), `Ready` as `target` says.
async fn write_status(
    api: &Api<Pod>,
    pod: &Pod,
    target: &status::Target,
) -> Result<(), SandboxError> {
    let name = pod.metadata.name.clone().unwrap_or_default();
    let now = Time(Timestamp::now());
    let patch = json!({
        "metadata": {"uid": pod.metadata.uid, "resourceVersion": pod.metadata.resource_version},
        "status": status::render(pod, target, &now),
    });
    api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(api_error(format!("writing the status of pod {name}")))
        .map(drop)
}

/// Conflicting status writes tolerated in a row: the operator patches the same pod's labels
/// at the same time (the write carries the pod's resourceVersion, as a kubelet's does).
const STATUS_CONFLICTS: u32 = 10;
/// Pause after a conflict, times the conflicts so far: lets the operator's burst of patches
/// of that pod (a demotion is several) pass before reading it again.
const CONFLICT_BACKOFF: std::time::Duration = std::time::Duration::from_millis(20);

/// Sets the Ready condition of pod `namespace/name`, keeping its addresses.
pub(crate) async fn set_ready(
    client: &Client,
    namespace: &str,
    name: &str,
    ready: bool,
) -> Result<(), SandboxError> {
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    write_status_retrying(&api, namespace, name, None, |pod| {
        let reported = |field: fn(&k8s_openapi::api::core::v1::PodStatus) -> Option<&String>| {
            pod.status
                .as_ref()
                .and_then(field)
                .cloned()
                .unwrap_or_default()
        };
        status::Target {
            host_ip: reported(|s| s.host_ip.as_ref()),
            pod_ip: reported(|s| s.pod_ip.as_ref()),
            ready,
        }
    })
    .await
}

/// Writes the status `target` makes of pod `namespace/name` (`known`: the pod as just
/// written, else it is read first), reading it and writing again after a conflict with a
/// concurrent write such as the operator's label patch.
async fn write_status_retrying(
    api: &Api<Pod>,
    namespace: &str,
    name: &str,
    known: Option<Pod>,
    target: impl Fn(&Pod) -> status::Target,
) -> Result<(), SandboxError> {
    let mut conflicts = 0;
    let mut known = known;
    loop {
        let pod = match known.take() {
            Some(pod) => pod,
            None => api
                .get(name)
                .await
                .map_err(api_error(format!("reading pod {namespace}/{name}")))?,
        };
        match write_status(api, &pod, &target(&pod)).await {
            Err(SandboxError::Kube {
                source: kube::Error::Api(status),
                ..
            }) if status.is_conflict() && conflicts < STATUS_CONFLICTS => {
                conflicts += 1;
                tokio::time::sleep(CONFLICT_BACKOFF * conflicts).await;
            }
            other => return other,
        }
    }
}

/// Deletes pod `namespace/name` at once (grace 0), as a kubelet's final step or a crash of
/// its node would end it.
pub(crate) async fn delete_pod(
    client: &Client,
    namespace: &str,
    name: &str,
) -> Result<(), SandboxError> {
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let now = DeleteParams {
        grace_period_seconds: Some(0),
        ..DeleteParams::default()
    };
    api.delete(name, &now)
        .await
        .map_err(api_error(format!("deleting pod {namespace}/{name}")))
        .map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn elections_are_spread_round_robin_over_the_namespaces() {
        let sizes = Sizes {
            elections: 5,
            namespaces: 2,
            ..Sizes::quick()
        };
        let plan = Population::plan("converge", &sizes);
        assert_eq!(plan.namespaces, ["bench-converge-0", "bench-converge-1"]);
        assert_eq!(
            plan.elections[3],
            ("bench-converge-1".to_owned(), "e3".to_owned())
        );
        assert_eq!(plan.selector(), "elector-bench=converge");
        let one = Population::plan(
            "steady",
            &Sizes {
                elections: 1,
                ..sizes
            },
        );
        assert_eq!(one.namespaces.len(), 1, "no empty namespaces");
    }

    #[test]
    fn only_a_request_the_api_server_timed_out_is_sent_again() {
        let status = |code: u16, reason: &str, message: &str| {
            kube::Error::Api(Box::new(kube::core::Status {
                code,
                reason: reason.to_owned(),
                message: message.to_owned(),
                ..kube::core::Status::default()
            }))
        };
        assert!(server_gave_up(&status(504, "Timeout", "")));
        assert!(server_gave_up(&status(
            500,
            "InternalError",
            "Internal error occurred: context deadline exceeded"
        )));
        assert!(!server_gave_up(&status(
            500,
            "InternalError",
            "etcd is down"
        )));
        assert!(!server_gave_up(&status(403, "Forbidden", "")));
        assert!(!server_gave_up(&status(409, "Conflict", "")));
    }
}
