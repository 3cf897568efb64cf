//! A pod simulator for the test cluster: it plays the scheduler's binding and the kubelet
//! for every pod of one namespace, against a real kube-apiserver and
//! kube-controller-manager (v1.20.2) that have neither.
//!
//! ```no_run
//! # async fn demo(client: kube::Client) -> Result<(), testkit::pods::WorkloadError> {
//! use std::{collections::BTreeMap, time::Duration};
//! use testkit::pods::{self, PodSimulator, SimulatorOptions};
//! let sim = PodSimulator::start(client.clone(), "shop", SimulatorOptions::default()).await;
//! let labels = BTreeMap::from([("app".to_owned(), "web".to_owned())]);
//! pods::create_deployment(&client, "shop", "web", 3, labels).await?;
//! pods::wait_deployment_ready(&client, "shop", "web", Duration::from_secs(30)).await?;
//! sim.stop().await;
//! # Ok(()) }
//! ```
//!
//! # What the simulator does for each pod
//! - **Scheduler**: an unbound pod is bound (`POST pods/<name>/binding`, with the pod's UID
//!   as precondition) round-robin to one of the Nodes `sim-node-0..N`, skipping failed
//!   nodes. The simulator creates those cluster-scoped Nodes (with a `Ready` condition) if
//!   missing: the EndpointSlice controller skips pods whose Node it cannot find.
//! - **Kubelet**: a bound pod gets phase `Running`, a `podIP`/`podIPs` unique within the
//!   process, the node's `hostIP`, `startTime`, the conditions `PodScheduled`, `Initialized`,
//!   `ContainersReady`, `Ready` and one running `containerStatus` per container. `Ready`
//!   (with `ContainersReady` and every container's `ready`) is true unless
//!   [`SimulatorOptions::start_ready`] is false, [`PodSimulator::set_ready`] said otherwise,
//!   the node is failed, [`SimulatorOptions::ready_delay`] has not yet passed, or the pod is
//!   terminating. Every write goes through `/status` as a merge patch carrying the pod's
//!   `uid` and `resourceVersion`, so it never lands on a newer version or on another pod
//!   of the same name; a 409 re-reads the pod and re-decides.
//! - **Graceful deletion**: a pod that gets a `deletionTimestamp` is marked NotReady at once;
//!   after its `deletionGracePeriodSeconds` (capped by [`SimulatorOptions::max_grace`],
//!   counted from when the simulator saw the deletion) it is deleted with grace 0 and a UID
//!   precondition, as the kubelet's final step does.
//!
//! Pods bound to a node the simulator does not own are left alone, like pods of another
//! kubelet. Failing a node is local to the simulator: Nodes are shared by every namespace
//! (and every concurrently running test), so their objects are never marked NotReady.
//!
//! # Architecture
//! - `simulator`: [`PodSimulator`], the watcher that dispatches pod events to one worker
//!   task per pod UID, and the commands, which change the shared desired state, wake the
//!   workers and wait for their acknowledgement; `shared`: that state; `options`: how the
//!   simulator behaves.
//! - `worker`: one pod's level-triggered loop (bind, write status, terminate) and its API
//!   calls; `status`: pure rendering and comparison of pod status; `nodes`: node names,
//!   addresses, the round-robin pool and the Node objects; `retry`: the bounded retry
//!   delay and API status codes.
//! - `workloads`: Deployment helpers and watch-based waits for tests ([`wait_for`] for any
//!   resource). They return [`WorkloadError`] rather than panicking; tests unwrap.

pub(crate) mod nodes;
mod options;
mod retry;
mod shared;
mod simulator;
pub(crate) mod status;
mod worker;
mod workloads;

pub use options::SimulatorOptions;
pub use simulator::PodSimulator;
pub use workloads::{
    RESTARTED_AT_ANNOTATION, SIM_IMAGE, WorkloadError, create_deployment, deployment_manifest,
    is_pod_ready, rolling_update, wait_deployment_ready, wait_for, wait_for_pods,
};
