//! Runs a command (the e2e suite) against the test cluster with a real node and the Helm chart
//! installed from locally built images; see `testkit::node_suite`.
//!
//! ```text
//! node-e2e --images DIR --operator-image REPO:TAG --consul-image REPO:TAG --log-dir DIR -- COMMAND…
//! ```

use std::path::PathBuf;
use std::process::ExitCode;

use testkit::cli::{self, Invocation};
use testkit::node_suite::{self, SuiteOptions};

const USAGE: &str = "\
usage: node-e2e --images DIR --operator-image REPO:TAG --consul-image REPO:TAG --log-dir DIR -- COMMAND...

Starts the Kubernetes v1.20.2 test cluster with a real node on this host (containerd, kubelet,
kube-proxy, kube-scheduler; needs root: it adds a bridge and iptables rules, removed again on
exit), imports every *.tar image archive of --images into containerd, installs the Helm chart
(two operator replicas from --operator-image, the dev Consul from --consul-image, pull policy
Never), waits until both are available, then runs COMMAND with KUBECONFIG, ELECTOR_E2E=1,
ELECTOR_E2E_NAMESPACE, ELECTOR_E2E_NODE and ELECTOR_E2E_CONTAINERD set, and exits with its
status. testkit/scripts/build-images.sh makes the archives.

options:
  --images DIR            directory of image archives (docker-archive or oci-archive)
  --operator-image IMAGE  the operator's image as the chart names it (default consul-elector:e2e)
  --consul-image IMAGE    the dev Consul's image (required)
  --log-dir DIR           keep the cluster's and node's logs and the chart values here
  --kube-proxy-min-sync-ms N
                          kube-proxy's iptables.minSyncPeriod in ms (default: its own, 1 s)
  -h, --help              show this help";

fn parse_args(
    mut args: impl Iterator<Item = String>,
) -> Result<Invocation<(SuiteOptions, Vec<String>)>, String> {
    let mut images = None;
    let mut operator = "consul-elector:e2e".to_owned();
    let mut consul = None;
    let mut log_dir = None;
    let mut min_sync = None;
    while let Some(arg) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("{arg} needs a value"));
        match arg.as_str() {
            "--images" => images = Some(PathBuf::from(value()?)),
            "--operator-image" => operator = value()?,
            "--consul-image" => consul = Some(value()?),
            "--log-dir" => log_dir = Some(PathBuf::from(value()?)),
            "--kube-proxy-min-sync-ms" => {
                let ms = value()?;
                let ms: u64 = ms
                    .parse()
                    .map_err(|e| format!("{ms:?} is not milliseconds: {e}"))?;
                min_sync = Some(std::time::Duration::from_millis(ms));
            }
            "-h" | "--help" => return Ok(Invocation::Help),
            "--" => break,
            other => return Err(format!("unknown argument {other:?}\n{USAGE}")),
        }
    }
    let command: Vec<String> = args.collect();
    let images = images.ok_or("--images is required")?;
    let log_dir = log_dir.ok_or("--log-dir is required")?;
    let consul = consul.ok_or("--consul-image is required")?;
    if command.is_empty() {
        return Err(format!("no command after --\n{USAGE}"));
    }
    let archives = node_suite::archives_in(&images)
        .map_err(|e| format!("cannot list {}: {e}", images.display()))?;
    std::fs::create_dir_all(&log_dir)
        .map_err(|e| format!("cannot create {}: {e}", log_dir.display()))?;
    let options = SuiteOptions {
        images: archives,
        operator_image: split_image(&operator)?,
        consul_image: split_image(&consul)?,
        log_dir,
        proxy_min_sync_period: min_sync,
    };
    Ok(Invocation::Run((options, command)))
}

/// `repo:tag` as (repo, tag); the tag follows the last `:` after the last `/`.
fn split_image(image: &str) -> Result<(String, String), String> {
    let name_start = image.rfind('/').map_or(0, |slash| slash + 1);
    match image[name_start..].rsplit_once(':') {
        Some((name, tag)) if !name.is_empty() && !tag.is_empty() => {
            Ok((format!("{}{name}", &image[..name_start]), tag.to_owned()))
        }
        _ => Err(format!("{image:?} is not REPOSITORY:TAG")),
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let (options, command) = match cli::run_or_exit(parse_args(std::env::args().skip(1)), USAGE) {
        Ok(parsed) => parsed,
        Err(exit) => return exit,
    };
    match node_suite::run(options, &command).await {
        Ok(status) if status.success() => ExitCode::SUCCESS,
        Ok(status) => {
            eprintln!("node-e2e: {command:?} failed ({status})");
            ExitCode::FAILURE
        }
        Err(error) => {
            eprintln!("node-e2e: {error}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::split_image;

    #[test]
    fn images_split_at_the_tag() {
        assert_eq!(
            split_image("consul-elector:e2e"),
            Ok(("consul-elector".into(), "e2e".into()))
        );
        assert_eq!(
            split_image("localhost:5000/a/b:1.0.8"),
            Ok(("localhost:5000/a/b".into(), "1.0.8".into()))
        );
        assert!(split_image("localhost:5000/a/b").is_err());
    }
}
