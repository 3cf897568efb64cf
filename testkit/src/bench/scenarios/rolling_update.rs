//! `rolling-update`: one election over a Deployment of 5 replicas (the real Deployment
//! controller, the pod simulator as kubelet) is rolled; the leader should move exactly
//! once.

use std::time::Duration;

use super::running::Running;
use crate::bench::environment::Environment;
use crate::bench::population::{self, Population};
use crate::bench::report::ScenarioReport;
use crate::bench::tracker::Tracker;
use crate::pods::{self, PodSimulator, SimulatorOptions};
use crate::sandbox::objects;

/// The scenario's name.
const NAME: &str = "rolling-update";
/// The Deployment and the election.
const APP: &str = "web";
/// The Deployment's replicas.
const REPLICAS: usize = 5;
/// How long the Deployment may take to come up, and to roll.
const ROLLOUT_TIMEOUT: Duration = Duration::from_secs(120);
/// The grace period the simulated kubelet honours for a deleted pod.
const MAX_GRACE: Duration = Duration::from_secs(1);

/// Creates the Deployment (with the simulator as its kubelet) and the election, and starts
/// the operator over them.
pub(super) async fn launch<'a>(
    env: &'a Environment,
    report: &mut ScenarioReport,
) -> Result<Running<'a>, String> {
    let population = Population::single(NAME, APP, REPLICAS);
    let namespace = population.elections[0].0.clone();
    let client = &env.client;
    let failed = |error: crate::sandbox::SandboxError| error.to_string();
    objects::create_namespace(client, &namespace)
        .await
        .map_err(failed)?;
    let simulator = PodSimulator::start(
        client.clone(),
        &namespace,
        SimulatorOptions {
            max_grace: Some(MAX_GRACE),
            ..SimulatorOptions::default()
        },
    )
    .await;
    let tracker = Tracker::start(
        client.clone(),
        &population.selector(),
        &population.namespace_prefix(),
    )
    .await?;
    let labels = population.labels(APP);
    let replicas = i32::try_from(REPLICAS).unwrap_or(i32::MAX);
    pods::create_deployment(client, &namespace, APP, replicas, labels)
        .await
        .map_err(|error| format!("creating the Deployment: {error}"))?;
    pods::wait_deployment_ready(client, &namespace, APP, ROLLOUT_TIMEOUT)
        .await
        .map_err(|error| format!("the Deployment: {error}"))?;
    population::create_election(client, &namespace, APP)
        .await
        .map_err(failed)?;
    let mut running = Running::start(env, population, tracker, report).await?;
    running.simulator = Some(simulator);
    Ok(running)
}

/// Returns once the clock is past the second in which the newest pod of `namespace` was
/// created. `creationTimestamp` has a resolution of one second, and the operator prefers the
/// newest pod as a successor: a rollout started within the second the Deployment's first pods
/// were created makes old and new pods tie on "newest" (the name then decides, and may pick an
/// old pod that the rollout deletes next). A Deployment rolled at least a second after it
/// came up, as every real one is, has no such tie.
async fn after_the_creation_second(client: &kube::Client, namespace: &str) -> Result<(), String> {
    let api: kube::Api<k8s_openapi::api::core::v1::Pod> =
        kube::Api::namespaced(client.clone(), namespace);
    let listed = api
        .list(&kube::api::ListParams::default())
        .await
        .map_err(|error| format!("listing the Deployment's pods: {error}"))?;
    let newest = listed
        .items
        .iter()
        .filter_map(|pod| pod.metadata.creation_timestamp.as_ref().map(|t| t.0))
        .max();
    let Some(newest) = newest else {
        return Ok(());
    };
    let next_second = newest.as_second().saturating_add(1);
    let wait_ms = next_second
        .saturating_mul(1000)
        .saturating_sub(k8s_openapi::jiff::Timestamp::now().as_millisecond());
    if let Ok(wait_ms) = u64::try_from(wait_ms) {
        tokio::time::sleep(Duration::from_millis(wait_ms)).await;
    }
    Ok(())
}

/// Rolls the Deployment (a second or more after its pods were created) and counts the leader
/// transitions.
pub(super) async fn run(running: &Running<'_>, report: &mut ScenarioReport) -> Result<(), String> {
    let (namespace, name) = running.population.elections[0].clone();
    let key = (namespace.clone(), name);
    let (from, transitions_before) = {
        let state = running.tracker.state();
        let transitions = state.elections.get(&key).and_then(|e| e.status.transitions);
        (state.label_changes.len(), transitions)
    };
    after_the_creation_second(&running.env.client, &namespace).await?;
    pods::rolling_update(&running.env.client, &namespace, APP, ROLLOUT_TIMEOUT)
        .await
        .map_err(|error| format!("rolling the Deployment: {error}"))?;
    running
        .tracker
        .wait(
            "the election settled over the new pods",
            ROLLOUT_TIMEOUT,
            |state| {
                let entry = state.elections.get(&key)?;
                (entry.settled_leader().is_some() && entry.pods == REPLICAS).then_some(())
            },
        )
        .await?;
    let state = running.tracker.state();
    let leaders = state.label_changes[from..]
        .iter()
        .filter(|c| c.made_leader())
        .count();
    report.target(
        "pods newly labelled leader",
        Some(leaders as f64),
        "",
        Some("exactly 1"),
    );
    let transitions = state.elections.get(&key).and_then(|e| e.status.transitions);
    let delta = transitions
        .zip(transitions_before)
        .map(|(after, before)| after.saturating_sub(before));
    report.target(
        "status.transitions during the rollout",
        delta.map(|d| d as f64),
        "",
        Some("exactly 1"),
    );
    Ok(())
}
