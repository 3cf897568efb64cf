//! The benchmark driver, `cargo run --release -p testkit --bin bench`: runs the real operator
//! binary as a child process against the test cluster and Consul (the emulator, or a real
//! dev agent with `--consul real`) and reports from recorded history (watch events, Consul's
//! request counters, the API server's metrics, `/proc`), never from the operator's own
//! claims. docs/design.md §5 lists the targets.
//!
//! # Modules
//! - `options`: the command line and the scenario names;
//! - `environment`: the operator binary, the cluster, Consul and the CRD, once per run;
//! - `population`: a scenario's namespaces, Ready pods and elections, made before the
//!   operator starts; the pod changes of the failover scenario;
//! - `tracker`: cluster-wide watches of a scenario's pods and elections, the recorded label
//!   and status changes and the safety checks;
//! - `scenarios`: one module per scenario, on a common cold start;
//! - `usage`, `proc_stats`, `apiserver_metrics`: what a phase cost;
//! - `report`: the table and the JSON file.

mod apiserver_metrics;
mod environment;
mod options;
mod population;
mod proc_stats;
mod report;
mod scenarios;
mod tracker;
mod usage;

pub use options::{Options, ScenarioName, Sizes, USAGE, parse};

use environment::Environment;
use report::RunReport;
use serde_json::json;

use crate::sandbox::operator_process::own_profile;

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Every scenario reached its states and passed its safety checks.
    Passed,
    /// A scenario failed (the table says which and why).
    Failed,
}

/// Sets up the environment, runs the scenarios in order, prints the table and writes the
/// JSON report. Fails only when the environment cannot be set up or the report cannot be
/// written.
pub async fn run(options: &Options) -> Result<Outcome, String> {
    let env = Environment::set_up(options.consul)
        .await
        .map_err(|error| error.to_string())?;
    let consul = env.consul.name();
    let mut reports = Vec::new();
    for (i, scenario) in options.scenarios.iter().enumerate() {
        let more_follow = i + 1 < options.scenarios.len();
        reports.push(scenarios::run(&env, *scenario, &options.sizes, more_follow).await);
    }
    let logs = env.logs.path().display().to_string();
    env.shut_down().await;
    let sizes = &options.sizes;
    let report = RunReport {
        profile: match own_profile().as_str() {
            "dev" => "debug".to_owned(),
            other => other.to_owned(),
        },
        consul,
        sizes: json!({
            "elections": sizes.elections,
            "pods": sizes.pods,
            "namespaces": sizes.namespaces,
            "failovers": sizes.failovers,
            "switchovers": sizes.switchovers,
            "steady_seconds": sizes.steady_window.as_secs_f64(),
            "quick": options.quick,
        }),
        scenarios: reports,
    };
    println!("{}", report.table());
    println!("logs (operator, cluster): {logs}");
    if let Some(path) = &options.json {
        report.write_json(path)?;
        println!("JSON report: {}", path.display());
    }
    Ok(if report.passed() {
        Outcome::Passed
    } else {
        Outcome::Failed
    })
}
