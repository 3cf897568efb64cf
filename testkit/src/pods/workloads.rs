//! Deployment helpers for tests, and watch-based waits (never fixed sleeps).

use std::{collections::BTreeMap, fmt::Debug, hash::Hash, time::Duration};

use futures::StreamExt;
use k8s_openapi::{
    api::{
        apps::v1::{Deployment, DeploymentSpec, DeploymentStrategy, RollingUpdateDeployment},
        core::v1::{Container, Pod, PodSpec, PodTemplateSpec},
    },
    apimachinery::pkg::{
        apis::meta::v1::{LabelSelector, ObjectMeta},
        util::intstr::IntOrString,
    },
    jiff::Timestamp,
};
use kube::{
    Api, Client, Resource, ResourceExt,
    api::{Patch, PatchParams, PostParams},
    runtime::{WatchStreamExt, reflector, watcher},
};
use serde::de::DeserializeOwned;
use serde_json::json;

/// The image of the pods [`deployment_manifest`] describes; nothing ever pulls it.
pub const SIM_IMAGE: &str = "registry.invalid/sim:1";
/// The pod-template annotation [`rolling_update`] changes.
pub const RESTARTED_AT_ANNOTATION: &str = "testkit.dev/restarted-at";

/// Why a workload helper failed.
#[derive(Debug, thiserror::Error)]
pub enum WorkloadError {
    /// The API server refused a request.
    #[error("Kubernetes API request failed: {0}")]
    Api(#[from] kube::Error),
    /// The awaited state was not reached in time.
    #[error("timed out after {timeout:?} waiting for {what}")]
    Timeout {
        /// What was awaited.
        what: String,
        /// How long it was awaited.
        timeout: Duration,
    },
    /// The Deployment's selector has `matchExpressions`, which the helpers do not translate.
    #[error("deployment {0} has a selector the helpers cannot translate (matchExpressions)")]
    UnsupportedSelector(String),
}

/// The Deployment [`create_deployment`] creates: `replicas` pods labelled `labels` (also
/// the selector), one container `app` with image [`SIM_IMAGE`],
/// `terminationGracePeriodSeconds: 1`, and a RollingUpdate strategy with maxSurge 1 and
/// maxUnavailable 0. Change it and create it yourself for other settings.
pub fn deployment_manifest(
    name: &str,
    replicas: i32,
    labels: BTreeMap<String, String>,
) -> Deployment {
    Deployment {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            labels: Some(labels.clone()),
            ..ObjectMeta::default()
        },
        spec: Some(DeploymentSpec {
            replicas: Some(replicas),
            selector: LabelSelector {
                match_labels: Some(labels.clone()),
                ..LabelSelector::default()
            },
            strategy: Some(DeploymentStrategy {
                type_: Some("RollingUpdate".into()),
                rolling_update: Some(RollingUpdateDeployment {
                    max_surge: Some(IntOrString::Int(1)),
                    max_unavailable: Some(IntOrString::Int(0)),
                }),
            }),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    containers: vec![Container {
                        name: "app".into(),
                        image: Some(SIM_IMAGE.into()),
                        ..Container::default()
                    }],
                    termination_grace_period_seconds: Some(1),
                    ..PodSpec::default()
                }),
            },
            ..DeploymentSpec::default()
        }),
        ..Deployment::default()
    }
}

/// Creates the Deployment of [`deployment_manifest`] in `namespace`.
pub async fn create_deployment(
    client: &Client,
    namespace: &str,
    name: &str,
    replicas: i32,
    labels: BTreeMap<String, String>,
) -> Result<Deployment, WorkloadError> {
    let api: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    let manifest = deployment_manifest(name, replicas, labels);
    Ok(api.create(&PostParams::default(), &manifest).await?)
}

/// Whether the pod's `Ready` condition is true.
pub fn is_pod_ready(pod: &Pod) -> bool {
    let conditions = pod.status.as_ref().and_then(|s| s.conditions.as_deref());
    conditions
        .unwrap_or_default()
        .iter()
        .any(|c| c.type_ == "Ready" && c.status == "True")
}

/// Whether the Deployment's controller has seen its latest spec and every wanted replica is
/// updated and Ready, with no old replica left.
fn is_rolled_out(deployment: &Deployment) -> bool {
    let wanted = deployment
        .spec
        .as_ref()
        .and_then(|s| s.replicas)
        .unwrap_or(1);
    let Some(status) = &deployment.status else {
        return false;
    };
    status.observed_generation >= deployment.metadata.generation
        && status.replicas.unwrap_or(0) == wanted
        && status.updated_replicas.unwrap_or(0) == wanted
        && status.ready_replicas.unwrap_or(0) == wanted
}

/// Waits (by watch) until the Deployment has observed its latest generation and its
/// `replicas`, `updatedReplicas` and `readyReplicas` all equal `spec.replicas`.
pub async fn wait_deployment_ready(
    client: &Client,
    namespace: &str,
    name: &str,
    timeout: Duration,
) -> Result<Deployment, WorkloadError> {
    let api: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    wait_for(api, config, timeout, |deployments| {
        deployments.iter().find(|d| is_rolled_out(d)).cloned()
    })
    .await
}

/// Rolls the Deployment's pods by changing the pod-template annotation
/// [`RESTARTED_AT_ANNOTATION`], and waits until the rollout is complete: the Deployment is
/// ready (see [`wait_deployment_ready`]) and its selector matches exactly `spec.replicas`
/// pods, all Ready and none terminating (the old ones are gone). The real controllers roll;
/// a running [`PodSimulator`](super::PodSimulator) must ready the new pods.
pub async fn rolling_update(
    client: &Client,
    namespace: &str,
    name: &str,
    timeout: Duration,
) -> Result<Deployment, WorkloadError> {
    let deadline = tokio::time::Instant::now() + timeout;
    let api: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    let patch = json!({"spec": {"template": {"metadata": {"annotations": {
        RESTARTED_AT_ANNOTATION: Timestamp::now().to_string(),
    }}}}});
    let patched = api
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    let selector = match_labels_selector(&patched)?;
    let wanted = patched.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    let remaining = |deadline: tokio::time::Instant| {
        deadline.saturating_duration_since(tokio::time::Instant::now())
    };
    let deployment = wait_deployment_ready(client, namespace, name, remaining(deadline)).await?;
    wait_for_pods(
        client,
        namespace,
        &selector,
        |pods| {
            usize::try_from(wanted).is_ok_and(|wanted| pods.len() == wanted)
                && pods
                    .iter()
                    .all(|p| p.metadata.deletion_timestamp.is_none() && is_pod_ready(p))
        },
        remaining(deadline),
    )
    .await?;
    Ok(deployment)
}

/// The Deployment's selector as a label-selector string (`matchLabels` only).
fn match_labels_selector(deployment: &Deployment) -> Result<String, WorkloadError> {
    let selector = deployment.spec.as_ref().map(|s| &s.selector);
    if selector.is_some_and(|s| s.match_expressions.as_ref().is_some_and(|e| !e.is_empty())) {
        return Err(WorkloadError::UnsupportedSelector(deployment.name_any()));
    }
    let labels = selector.and_then(|s| s.match_labels.as_ref());
    let pairs: Vec<_> = labels
        .iter()
        .flat_map(|l| l.iter())
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    Ok(pairs.join(","))
}

/// Watches the pods of `namespace` matching the label `selector` until `pred` holds for
/// them (sorted by name), and returns them.
pub async fn wait_for_pods(
    client: &Client,
    namespace: &str,
    selector: &str,
    pred: impl Fn(&[Pod]) -> bool,
    timeout: Duration,
) -> Result<Vec<Pod>, WorkloadError> {
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let config = watcher::Config::default().labels(selector);
    wait_for(api, config, timeout, |pods| {
        pred(pods).then(|| pods.to_vec())
    })
    .await
}

/// Watches the objects of `api` that `config` selects until `decide` returns something for
/// the complete, name-sorted set of them (evaluated after the initial list and after every
/// change), and returns that. Watch errors are logged and retried (the watcher re-lists)
/// until `timeout`.
pub async fn wait_for<K, T>(
    api: Api<K>,
    config: watcher::Config,
    timeout: Duration,
    decide: impl Fn(&[K]) -> Option<T>,
) -> Result<T, WorkloadError>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone,
{
    let what = format!(
        "{} (labels {:?}, fields {:?})",
        api.resource_url(),
        config.label_selector.as_deref().unwrap_or_default(),
        config.field_selector.as_deref().unwrap_or_default(),
    );
    let (store, writer) = reflector::store();
    let events = reflector(writer, watcher(api, config)).default_backoff();
    let wait = async {
        let mut events = std::pin::pin!(events);
        let mut listed = false;
        while let Some(event) = events.next().await {
            match event {
                Ok(watcher::Event::InitDone) => listed = true,
                Ok(_) => {}
                Err(error) => {
                    tracing::warn!(%error, what, "watch failed; retrying");
                    continue;
                }
            }
            if !listed {
                continue;
            }
            let mut objects: Vec<K> = store.state().iter().map(|o| K::clone(o)).collect();
            objects.sort_by_key(|o| o.name_any());
            if let Some(found) = decide(&objects) {
                return Some(found);
            }
        }
        None
    };
    match tokio::time::timeout(timeout, wait).await {
        Ok(Some(found)) => Ok(found),
        // The watch stream never ends; treat an end like a timeout.
        Ok(None) | Err(_) => Err(WorkloadError::Timeout { what, timeout }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels() -> BTreeMap<String, String> {
        BTreeMap::from([("app".into(), "web".into()), ("tier".into(), "fe".into())])
    }

    #[test]
    fn manifest_has_the_promised_shape() {
        let d = deployment_manifest("web", 3, labels());
        let spec = d.spec.clone().unwrap_or_default();
        assert_eq!(spec.replicas, Some(3));
        assert_eq!(spec.selector.match_labels, Some(labels()));
        let rolling = spec
            .strategy
            .and_then(|s| s.rolling_update)
            .unwrap_or_default();
        assert_eq!(rolling.max_surge, Some(IntOrString::Int(1)));
        assert_eq!(rolling.max_unavailable, Some(IntOrString::Int(0)));
        let pod = spec.template.spec.unwrap_or_default();
        assert_eq!(pod.termination_grace_period_seconds, Some(1));
        assert_eq!(pod.containers[0].name, "app");
        assert_eq!(pod.containers[0].image.as_deref(), Some(SIM_IMAGE));
        assert_eq!(
            match_labels_selector(&d).ok().as_deref(),
            Some("app=web,tier=fe")
        );
    }

    #[test]
    fn expressions_are_refused() {
        let mut d = deployment_manifest("web", 1, labels());
        if let Some(spec) = d.spec.as_mut() {
            spec.selector.match_expressions = Some(vec![Default::default()]);
        }
        assert!(matches!(
            match_labels_selector(&d),
            Err(WorkloadError::UnsupportedSelector(name)) if name == "web"
        ));
    }

    #[test]
    fn rolled_out_needs_the_latest_generation_and_every_count() {
        use k8s_openapi::api::apps::v1::DeploymentStatus;
        let mut d = deployment_manifest("web", 2, labels());
        d.metadata.generation = Some(2);
        let done = DeploymentStatus {
            observed_generation: Some(2),
            replicas: Some(2),
            updated_replicas: Some(2),
            ready_replicas: Some(2),
            ..DeploymentStatus::default()
        };
        d.status = Some(done.clone());
        assert!(is_rolled_out(&d));
        for stale in [
            DeploymentStatus {
                observed_generation: Some(1),
                ..done.clone()
            },
            DeploymentStatus {
                replicas: Some(3),
                ..done.clone()
            },
            DeploymentStatus {
                updated_replicas: Some(1),
                ..done.clone()
            },
            DeploymentStatus {
                ready_replicas: None,
                ..done.clone()
            },
        ] {
            d.status = Some(stale);
            assert!(!is_rolled_out(&d));
        }
    }
}
