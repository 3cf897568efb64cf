//! Waiting, with bounded timeouts, for cluster processes to serve.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use std::path::{Path, PathBuf};

use super::error::ClusterError;
use super::processes::ManagedProcess;

/// Spawns `program` (output to `log`) and waits until `GET <url><health_path>` answers 2xx.
pub(crate) async fn spawn_serving(
    name: &'static str,
    program: &Path,
    args: &[String],
    log: PathBuf,
    url: &str,
    health_path: &str,
) -> Result<ManagedProcess, ClusterError> {
    let mut process = ManagedProcess::spawn(name, program, args, log)?;
    let probe = health_client(url).map_err(|e| process.not_ready(e))?;
    wait_until(&mut process, health_path, || get_ok(&probe, health_path)).await?;
    Ok(process)
}

/// How long a process may take to become ready.
pub(crate) const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// How long one probe may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);
/// Pause between failed probes.
const PROBE_INTERVAL: Duration = Duration::from_millis(100);

/// Probes until `probe` succeeds; fails with the process log when the process exits first or
/// when [`READY_TIMEOUT`] passes.
pub(crate) async fn wait_until<F, Fut>(
    process: &mut ManagedProcess,
    what: &str,
    mut probe: F,
) -> Result<(), ClusterError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(), String>>,
{
    let deadline = Instant::now() + READY_TIMEOUT;
    let mut last_error = String::from("no probe finished");
    loop {
        if let Some(status) = process.exited() {
            return Err(process.not_ready(format!(
                "exited ({status}) before {what} (last probe: {last_error})"
            )));
        }
        if Instant::now() >= deadline {
            return Err(process.not_ready(format!(
                "no {what} within {READY_TIMEOUT:?} (last probe: {last_error})"
            )));
        }
        match tokio::time::timeout(PROBE_TIMEOUT, probe()).await {
            Ok(Ok(())) => return Ok(()),
            Ok(Err(error)) => last_error = error,
            Err(_) => last_error = format!("no answer within {PROBE_TIMEOUT:?}"),
        }
        tokio::time::sleep(PROBE_INTERVAL).await;
    }
}

/// An unauthenticated client for health endpoints of `base_url` (http, or https with any
/// certificate: the apiserver and controller-manager serve self-signed ones).
pub(crate) fn health_client(base_url: &str) -> Result<kube::Client, String> {
    let url = base_url
        .parse()
        .map_err(|e| format!("bad URL {base_url}: {e}"))?;
    let mut config = kube::Config::new(url);
    config.accept_invalid_certs = true;
    // A probe retries itself; kube's 503 retries would only hide the answer.
    config.default_retry = false;
    kube::Client::try_from(config).map_err(|e| format!("cannot build a client for {base_url}: {e}"))
}

/// GETs `path` and succeeds on a 2xx answer.
pub(crate) async fn get_ok(client: &kube::Client, path: &str) -> Result<(), String> {
    let request = http::Request::get(path)
        .body(Vec::new())
        .map_err(|e| format!("bad path {path}: {e}"))?;
    client
        .request_text(request)
        .await
        .map(drop)
        .map_err(|e| format!("GET {path}: {e}"))
}
