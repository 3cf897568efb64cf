//! Installing the chart with Helm's own engine (`charts/tests/check_chart.py install`, through
//! the venv of the chart checks), with the values of a user who built the images locally.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use kube::Api;

use super::error::SuiteError;
use super::options::SuiteOptions;
use crate::cluster::TestCluster;

/// The namespace and release of the installed chart.
pub const RELEASE: &str = "consul-elector";
/// The repository root (testkit's parent).
const REPOSITORY: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");

/// Installs release [`RELEASE`] into namespace [`RELEASE`]: two operator replicas from the
/// local image, the dev Consul from the local image, never pulling. The operator reaches the
/// dev Consul at its Service's ClusterIP (the environment variable the kubelet injects for
/// every Service): the test node runs no cluster DNS.
pub(super) fn install(cluster: &TestCluster, options: &SuiteOptions) -> Result<(), SuiteError> {
    let python = helm_python()?;
    let service_host = format!(
        "{}_SERVICE_HOST",
        format!("{RELEASE}-consul-dev")
            .to_uppercase()
            .replace('-', "_")
    );
    let values = serde_json::json!({
        "replicaCount": 2,
        "image": {
            "repository": options.operator_image.0,
            "tag": options.operator_image.1,
            "pullPolicy": "Never",
        },
        "consul": {"address": format!("http://$({service_host}):8500")},
        "consulDev": {
            "enabled": true,
            "image": {
                "repository": options.consul_image.0,
                "tag": options.consul_image.1,
                "pullPolicy": "Never",
            },
        },
    });
    let values_file = values_file(options);
    std::fs::write(&values_file, values.to_string())
        .map_err(|e| SuiteError::Chart(format!("writing {}: {e}", values_file.display())))?;
    let script = Path::new(REPOSITORY).join("charts/tests/check_chart.py");
    let status = Command::new(&python)
        .arg(&script)
        .arg("install")
        .arg("--kubeconfig")
        .arg(cluster.kubeconfig_path())
        .args(["--namespace", RELEASE, "--release", RELEASE, "--values"])
        .arg(&values_file)
        .status()
        .map_err(|e| SuiteError::Chart(format!("cannot run {}: {e}", script.display())))?;
    if status.success() {
        Ok(())
    } else {
        Err(SuiteError::Chart(format!(
            "helm install failed ({status}); see above"
        )))
    }
}

/// Where [`install`] writes the release's values (the uninstall test reinstalls with them).
pub(super) fn values_file(options: &SuiteOptions) -> std::path::PathBuf {
    options.log_dir.join("values.json")
}

/// The python of the chart checks' venv: `$ELECTOR_HELM_PYTHON`, else the one
/// `charts/tests/setup-venv.sh` makes (or reuses) and prints.
pub(super) fn helm_python() -> Result<std::path::PathBuf, SuiteError> {
    if let Some(python) = std::env::var_os("ELECTOR_HELM_PYTHON") {
        return Ok(python.into());
    }
    let script = Path::new(REPOSITORY).join("charts/tests/setup-venv.sh");
    let output = Command::new(&script)
        .output()
        .map_err(|e| SuiteError::Chart(format!("cannot run {}: {e}", script.display())))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    match stdout.lines().last() {
        Some(python) if output.status.success() => Ok(python.trim().into()),
        _ => Err(SuiteError::Chart(format!(
            "{} failed ({}): {}",
            script.display(),
            output.status,
            String::from_utf8_lossy(&output.stderr)
        ))),
    }
}

/// Waits until Deployment `name` has all its replicas updated and available.
pub(super) async fn wait_available(
    deployments: &Api<Deployment>,
    name: &str,
    timeout: Duration,
) -> Result<(), SuiteError> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let last = match deployments.get_opt(name).await {
            Ok(Some(deployment)) => {
                let wanted = deployment.spec.and_then(|spec| spec.replicas).unwrap_or(1);
                let status = deployment.status.unwrap_or_default();
                let available = status.available_replicas.unwrap_or(0);
                let updated = status.updated_replicas.unwrap_or(0);
                if available >= wanted && updated >= wanted {
                    return Ok(());
                }
                format!("{available}/{wanted} available, {updated} updated")
            }
            Ok(None) => "not created".into(),
            Err(error) => error.to_string(),
        };
        if tokio::time::Instant::now() >= deadline {
            return Err(SuiteError::Chart(format!(
                "Deployment {RELEASE}/{name} not available within {timeout:?}: {last}"
            )));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
