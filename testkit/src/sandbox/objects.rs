//! The Kubernetes objects of the sandbox: the CRD (from the operator's own `crd` output), the
//! namespace, the `LeaderElection` the scenario creates, and the switchover request on it.
//!
//! testkit does not link the consul-elector crate, so the few names of the product used here
//! are spelled out; they are the CRD's defaults (docs/design.md §1).

use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ApiResource, DynamicObject, ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::wait::{await_condition, conditions};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

use super::error::SandboxError;

/// The namespace the sandbox works in (the operator watches only this one).
pub(crate) const NAMESPACE: &str = "sandbox";
/// Name of the Deployment and of the LeaderElection.
pub(crate) const APP: &str = "web";
/// Pods of the Deployment, the election's candidates.
pub(crate) const REPLICAS: usize = 3;
/// The label the operator writes on the candidates (`spec.labels.key` default).
pub(crate) const ROLE_LABEL: &str = "elector.dev/role";
/// Value of [`ROLE_LABEL`] on the leader.
pub(crate) const LEADER: &str = "leader";
/// Value of [`ROLE_LABEL`] on the other candidates.
pub(crate) const FOLLOWER: &str = "follower";
/// Prefix of the annotations the operator writes (fencing token, leader-since).
pub(crate) const OPERATOR_ANNOTATION_PREFIX: &str = "elector.dev/";
/// The annotation that asks the operator to move an election's leadership: a pod's name, or
/// [`ANY_OTHER_POD`].
pub(crate) const SWITCHOVER_ANNOTATION: &str = "elector.dev/switchover-to";
/// [`SWITCHOVER_ANNOTATION`]'s value for "any other eligible pod, best by priority".
pub(crate) const ANY_OTHER_POD: &str = "*";
/// `status.lastSwitchover.result` of a request that moved the leadership.
pub(crate) const SWITCHOVER_COMPLETED: &str = "Completed";
/// `status.lastSwitchover.result` of a request the operator turned down (nothing moved).
pub(crate) const SWITCHOVER_REFUSED: &str = "Refused";
/// Session TTL of the sandbox's election: Consul's minimum, so the outage step is short.
pub(crate) const SESSION_TTL: Duration = Duration::from_secs(10);
/// How long the API server gets to establish the CRD.
const CRD_TIMEOUT: Duration = Duration::from_secs(30);

/// The `LeaderElection` resource, for dynamic clients.
pub(crate) fn election_resource() -> ApiResource {
    ApiResource {
        group: "elector.dev".into(),
        version: "v1alpha1".into(),
        api_version: "elector.dev/v1alpha1".into(),
        kind: "LeaderElection".into(),
        plural: "leaderelections".into(),
    }
}

/// The elections of `namespace`, for watches and creates.
pub(crate) fn elections(client: Client, namespace: &str) -> Api<DynamicObject> {
    Api::namespaced_with(client, namespace, &election_resource())
}

/// A `map_err` adapter: a Kubernetes API error while doing `context`.
pub(crate) fn api_error(context: impl Into<String>) -> impl FnOnce(kube::Error) -> SandboxError {
    let context = context.into();
    move |source| SandboxError::Kube { context, source }
}

/// Creates the CRD from `yaml` (the operator's `crd` output) and waits until it is served.
///
/// A plain create, not server-side apply: Kubernetes 1.20 drops the CRD's
/// `x-kubernetes-validations` on create but refuses them in an apply.
pub(crate) async fn install_crd(client: &Client, yaml: &str) -> Result<(), SandboxError> {
    let crd: CustomResourceDefinition = serde_saphyr::from_str(yaml).map_err(|error| {
        SandboxError::Crd(format!("`consul-elector crd` printed no CRD: {error}"))
    })?;
    let name = crd.name_any();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.create(&PostParams::default(), &crd)
        .await
        .map_err(api_error(format!("creating the CRD {name}")))?;
    let established = await_condition(crds, &name, conditions::is_crd_established());
    match tokio::time::timeout(CRD_TIMEOUT, established).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(error)) => Err(SandboxError::Crd(format!(
            "watching the CRD {name} failed: {error}"
        ))),
        Err(_) => Err(SandboxError::Crd(format!(
            "the CRD {name} was not established within {CRD_TIMEOUT:?}"
        ))),
    }
}

/// Creates the namespace `name`.
pub(crate) async fn create_namespace(client: &Client, name: &str) -> Result<(), SandboxError> {
    let namespace = Namespace {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    };
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &namespace)
        .await
        .map_err(api_error(format!("creating namespace {name}")))?;
    Ok(())
}

/// The labels of the Deployment's pods, which the election selects.
pub(crate) fn app_labels() -> std::collections::BTreeMap<String, String> {
    [("app".to_owned(), APP.to_owned())].into()
}

/// The scenario's `LeaderElection`: selects `app=web`, TTL 10 s, lock-delay 1 s, every other
/// field defaulted (labels `elector.dev/role`, `requireReady`, `failover.delay: 0s`,
/// `onConsulUnavailable: Fence`).
pub(crate) fn sandbox_election() -> Result<DynamicObject, SandboxError> {
    election_manifest(NAMESPACE, APP, &app_labels(), SESSION_TTL)
}

/// A `LeaderElection` `namespace/name` selecting the pods with all of `labels`, with session
/// TTL `ttl` and lock-delay 1 s, every other field defaulted.
pub(crate) fn election_manifest(
    namespace: &str,
    name: &str,
    labels: &std::collections::BTreeMap<String, String>,
    ttl: Duration,
) -> Result<DynamicObject, SandboxError> {
    let resource = election_resource();
    let manifest = json!({
        "apiVersion": resource.api_version,
        "kind": resource.kind,
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "selector": {"matchLabels": labels},
            "session": {"ttl": format!("{}s", ttl.as_secs()), "lockDelay": "1s"},
        },
    });
    serde_json::from_value(manifest)
        .map_err(|error| SandboxError::Crd(format!("the LeaderElection manifest: {error}")))
}

/// Creates the scenario's `LeaderElection`.
pub(crate) async fn create_election(client: &Client) -> Result<(), SandboxError> {
    elections(client.clone(), NAMESPACE)
        .create(&PostParams::default(), &sandbox_election()?)
        .await
        .map_err(api_error(format!("creating LeaderElection {APP}")))?;
    Ok(())
}

/// Asks the operator to move the leadership of election `namespace/name` to pod `to` (or
/// [`ANY_OTHER_POD`]): a merge patch of [`SWITCHOVER_ANNOTATION`], as
/// `kubectl annotate leaderelection <name> elector.dev/switchover-to=<to>` writes it.
pub(crate) async fn request_switchover(
    client: &Client,
    namespace: &str,
    name: &str,
    to: &str,
) -> Result<(), SandboxError> {
    let patch = switchover_patch(to);
    elections(client.clone(), namespace)
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(api_error(format!(
            "requesting a switchover of LeaderElection {namespace}/{name} to {to:?}"
        )))?;
    Ok(())
}

/// The merge patch that sets [`SWITCHOVER_ANNOTATION`] to `to`.
fn switchover_patch(to: &str) -> serde_json::Value {
    json!({"metadata": {"annotations": {SWITCHOVER_ANNOTATION: to}}})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_election_selects_the_deployment_with_a_short_ttl() {
        let le = sandbox_election().unwrap();
        assert_eq!(
            le.types.as_ref().map(|t| t.kind.as_str()),
            Some("LeaderElection")
        );
        assert_eq!(le.data["spec"]["selector"]["matchLabels"]["app"], "web");
        assert_eq!(le.data["spec"]["session"]["ttl"], "10s");
        assert_eq!(le.data["spec"]["session"]["lockDelay"], "1s");
        assert!(
            le.data["spec"].get("onConsulUnavailable").is_none(),
            "Fence by default"
        );
    }

    #[test]
    fn a_switchover_request_touches_only_its_annotation() {
        assert_eq!(
            switchover_patch(ANY_OTHER_POD),
            json!({"metadata": {"annotations": {"elector.dev/switchover-to": "*"}}})
        );
    }

    #[test]
    fn the_committed_crd_parses_as_a_crd() {
        let yaml = include_str!("../../../crds/leaderelections.elector.dev.yaml");
        let crd: CustomResourceDefinition = serde_saphyr::from_str(yaml).unwrap();
        let resource = election_resource();
        assert_eq!(crd.spec.group, resource.group);
        assert_eq!(crd.spec.names.plural, resource.plural);
        assert_eq!(crd.spec.names.kind, resource.kind);
        assert!(crd.spec.versions.iter().any(|v| v.name == resource.version));
    }
}
