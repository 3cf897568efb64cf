//! The scenarios. Each starts from a [`Running`] operator that converged from cold over its
//! own population, measures its own thing, and leaves the safety check and the clean-up to
//! [`run`].

mod converge;
mod failover;
mod restart;
mod rolling_update;
mod running;
mod steady;
mod switchover;

use super::environment::Environment;
use super::options::{ScenarioName, Sizes};
use super::population::Population;
use super::report::ScenarioReport;
use running::Running;

/// Runs `scenario` at `sizes` and reports it; with `clean_up`, deletes its elections
/// afterwards so that the next scenario's operator does not see them.
pub(crate) async fn run(
    env: &Environment,
    scenario: ScenarioName,
    sizes: &Sizes,
    clean_up: bool,
) -> ScenarioReport {
    let mut report = ScenarioReport::new(scenario.as_str());
    eprintln!("bench: scenario {}", scenario.as_str());
    let launched = match scenario {
        ScenarioName::RollingUpdate => rolling_update::launch(env, &mut report).await,
        _ => {
            let population = Population::plan(scenario.as_str(), sizes);
            Running::launch(env, population, &mut report).await
        }
    };
    let mut running = match launched {
        Ok(running) => running,
        Err(failure) => {
            report.fail(failure);
            return report;
        }
    };
    let outcome = match scenario {
        ScenarioName::Converge => converge::run(&running, &mut report).await,
        ScenarioName::Steady => steady::run(&running, sizes, &mut report).await,
        ScenarioName::Restart => restart::run(&mut running, &mut report).await,
        ScenarioName::Failover => failover::run(&running, sizes, &mut report).await,
        ScenarioName::RollingUpdate => rolling_update::run(&running, &mut report).await,
        ScenarioName::Switchover => switchover::run(&running, sizes, &mut report).await,
    };
    if let Err(failure) = outcome {
        report.fail(format!(
            "{failure}\n  operator process: {}",
            running.operator.state()
        ));
    }
    running.check_safety(&mut report);
    if clean_up {
        running.clean_up().await;
    }
    report
}
