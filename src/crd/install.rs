//! Installing the CRD from code (tests, development clusters). Production installs apply
//! `crds/leaderelections.elector.dev.yaml` (or the chart) instead.

use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::PostParams;
use kube::runtime::wait::{await_condition, conditions};
use kube::{Api, Client, CustomResourceExt};

use super::names::CRD_NAME;
use super::spec::LeaderElection;

/// How often a create/replace race with another installer is retried.
const ATTEMPTS: usize = 5;

/// Why the CRD could not be installed.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    /// The API server refused a request.
    #[error("cannot install the {CRD_NAME} CRD: {0}")]
    Api(#[from] kube::Error),
    /// Watching the CRD for `Established` failed.
    #[error("cannot watch the {CRD_NAME} CRD: {0}")]
    Watch(#[from] kube::runtime::wait::Error),
    /// Other installers kept replacing the CRD under this one.
    #[error("cannot install the {CRD_NAME} CRD: it kept changing during {ATTEMPTS} attempts")]
    Contended,
    /// The API server did not report the CRD `Established` in time.
    #[error("the {CRD_NAME} CRD was not established within {0:?}")]
    NotEstablished(Duration),
}

/// Creates the `LeaderElection` CRD, or replaces the installed one with this build's, then
/// waits (at most `timeout`) until the API server serves it.
///
/// Uses create and replace, never server-side apply: Kubernetes before 1.25 drops the CEL
/// rules (`x-kubernetes-validations`) it does not know on create and replace, but fails a
/// server-side apply that contains them. Safe to run from several processes at once (a
/// replace that loses a race is retried on the newer version).
pub async fn install(client: Client, timeout: Duration) -> Result<(), InstallError> {
    let crds: Api<CustomResourceDefinition> = Api::all(client);
    let desired = LeaderElection::crd();
    let mut installed = false;
    for _ in 0..ATTEMPTS {
        installed = create_or_replace(&crds, &desired).await?;
        if installed {
            break;
        }
    }
    if !installed {
        return Err(InstallError::Contended);
    }
    let established = await_condition(crds, CRD_NAME, conditions::is_crd_established());
    match tokio::time::timeout(timeout, established).await {
        Ok(result) => result.map(drop).map_err(InstallError::from),
        Err(_) => Err(InstallError::NotEstablished(timeout)),
    }
}

/// One create-or-replace; `false` when another installer changed or deleted the CRD between
/// the read and the replace.
async fn create_or_replace(
    crds: &Api<CustomResourceDefinition>,
    desired: &CustomResourceDefinition,
) -> Result<bool, kube::Error> {
    match crds.create(&PostParams::default(), desired).await {
        Ok(_) => return Ok(true),
        Err(kube::Error::Api(status)) if status.is_already_exists() => {}
        Err(error) => return Err(error),
    }
    let current = match crds.get(CRD_NAME).await {
        Ok(current) => current,
        Err(kube::Error::Api(status)) if status.is_not_found() => return Ok(false),
        Err(error) => return Err(error),
    };
    let mut replacement = desired.clone();
    replacement.metadata.resource_version = current.metadata.resource_version;
    match crds
        .replace(CRD_NAME, &PostParams::default(), &replacement)
        .await
    {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(status)) if status.is_conflict() || status.is_not_found() => Ok(false),
        Err(error) => Err(error),
    }
}
