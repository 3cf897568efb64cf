//! Runs the testkit's real Kubernetes test cluster (etcd, kube-apiserver and
//! kube-controller-manager v1.20.2) on loopback until Ctrl-C or SIGTERM.
//!
//! ```text
//! test-cluster up [--kubeconfig-out PATH] [--log-dir DIR] [--no-controller-manager]
//! ```

use std::path::PathBuf;
use std::process::ExitCode;

use testkit::cli::{self, Invocation};
use testkit::cluster::{ClusterOptions, TestCluster};

const USAGE: &str = "\
usage: test-cluster up [--kubeconfig-out PATH] [--log-dir DIR] [--no-controller-manager]

Starts a Kubernetes v1.20.2 cluster on loopback for manual testing: etcd, kube-apiserver
and kube-controller-manager (deployment, replicaset, endpointslice, garbagecollector,
namespace and serviceaccount-token controllers; no scheduler, no kubelet). The binaries
are built from Debian's kubernetes source package on first use (about 5 minutes, once per
machine). Prints the kubeconfig path and the server URL, then runs until Ctrl-C or SIGTERM
and stops everything.

options:
  --kubeconfig-out PATH    also write the admin kubeconfig to PATH
  --log-dir DIR            keep the process logs in DIR (default: the cluster's temp dir,
                           removed on exit)
  --no-controller-manager  run only etcd and kube-apiserver
  -h, --help               show this help";

/// What `up` was asked for.
struct Up {
    options: ClusterOptions,
    kubeconfig_out: Option<PathBuf>,
}

fn parse_args(mut args: impl Iterator<Item = String>) -> Result<Invocation<Up>, String> {
    match args.next().as_deref() {
        Some("up") => {}
        Some("-h" | "--help") => return Ok(Invocation::Help),
        None => return Err(USAGE.into()),
        Some(other) => return Err(format!("unknown command {other:?}\n{USAGE}")),
    }
    let mut up = Up {
        options: ClusterOptions::default(),
        kubeconfig_out: None,
    };
    while let Some(arg) = args.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((flag, value)) => (flag.to_string(), Some(value.to_string())),
            None => (arg, None),
        };
        let mut value = || {
            inline
                .clone()
                .or_else(|| args.next())
                .map(PathBuf::from)
                .ok_or_else(|| format!("{flag} needs a value"))
        };
        match flag.as_str() {
            "--kubeconfig-out" => up.kubeconfig_out = Some(value()?),
            "--log-dir" => up.options.log_dir = Some(value()?),
            "--no-controller-manager" => up.options.controller_manager = false,
            "-h" | "--help" => return Ok(Invocation::Help),
            other => return Err(format!("unknown argument {other:?}\n{USAGE}")),
        }
    }
    Ok(Invocation::Run(up))
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let up = match cli::run_or_exit(parse_args(std::env::args().skip(1)), USAGE) {
        Ok(up) => up,
        Err(exit) => return exit,
    };
    let stop = match cli::stop_requested() {
        Ok(stop) => stop,
        Err(error) => {
            eprintln!("test-cluster: cannot install the signal handlers: {error}");
            return ExitCode::FAILURE;
        }
    };
    let cluster = match TestCluster::start(up.options) {
        Ok(cluster) => cluster,
        Err(error) => {
            eprintln!("test-cluster: {error}");
            return ExitCode::FAILURE;
        }
    };
    let kubeconfig = match up.kubeconfig_out {
        Some(out) => match std::fs::copy(cluster.kubeconfig_path(), &out) {
            Ok(_) => out,
            Err(error) => {
                eprintln!("test-cluster: cannot write {}: {error}", out.display());
                return ExitCode::FAILURE;
            }
        },
        None => cluster.kubeconfig_path().to_path_buf(),
    };
    println!("kubeconfig: {}", kubeconfig.display());
    println!("server: {}", cluster.server_url());
    println!("running; Ctrl-C or SIGTERM stops the cluster");
    stop.await;
    eprintln!("test-cluster: stopping");
    drop(cluster);
    ExitCode::SUCCESS
}
