//! What the scenario measured, and the closing summary.

use std::time::Duration;

use super::objects::SESSION_TTL;
use super::operator_process::LOG_FILTER_ENV;
use super::setup::LogDir;
use super::timeline::{Style, duration};

/// A step that did not reach its expected state.
#[derive(Debug, Clone)]
pub(crate) struct StepFailure {
    /// The step, as the timeline names it.
    pub(crate) step: &'static str,
    /// What was expected and what was seen instead.
    pub(crate) reason: String,
}

/// Everything the summary reports.
#[derive(Debug, Default)]
pub(crate) struct Report {
    /// LeaderElection created → leader labelled.
    pub(crate) initial_election: Option<Duration>,
    /// Leader pod deleted → successor labelled.
    pub(crate) deletion_failover: Option<Duration>,
    /// Leader set NotReady → successor labelled.
    pub(crate) not_ready_failover: Option<Duration>,
    /// Switchover requested → new leader labelled.
    pub(crate) switchover: Option<Duration>,
    /// Consul unreachable → leader label removed.
    pub(crate) fenced_after: Option<Duration>,
    /// Consul reachable again → the same pod labelled leader.
    pub(crate) recovered_after: Option<Duration>,
    /// Whether no label, annotation or status field changed across the operator restart.
    pub(crate) restart_unchanged: Option<bool>,
    /// `status.transitions` at the end.
    pub(crate) transitions: Option<u64>,
    /// The most pods labelled leader at one resourceVersion, over every recorded version.
    pub(crate) max_leaders: usize,
    /// How many pod versions were recorded.
    pub(crate) pod_versions: usize,
    /// Times the recorded history may have lost versions.
    pub(crate) history_gaps: usize,
    /// The first step that failed.
    pub(crate) failure: Option<StepFailure>,
}

impl Report {
    /// Whether every step passed and no two pods ever carried the leader label at once.
    pub(crate) fn passed(&self) -> bool {
        self.failure.is_none() && self.max_leaders <= 1
    }

    /// Prints the summary.
    pub(crate) fn print(&self, style: Style, logs: &LogDir) {
        let measured = |value: Option<Duration>| value.map_or_else(|| "-".to_owned(), duration);
        println!("\n{}", style.bold("Summary"));
        let line = |label: &str, value: String, note: &str| {
            println!("  {label:<32} {value:>9}  {note}");
        };
        line(
            "initial election",
            measured(self.initial_election),
            "LeaderElection created -> leader labelled",
        );
        line(
            "failover, leader pod deleted",
            measured(self.deletion_failover),
            "deletion -> successor labelled",
        );
        line(
            "failover, leader NotReady",
            measured(self.not_ready_failover),
            "NotReady -> successor labelled",
        );
        line(
            "switchover",
            measured(self.switchover),
            "switchover-to: \"*\" requested -> new leader labelled",
        );
        line(
            "fenced, Consul unreachable",
            measured(self.fenced_after),
            &format!(
                "Consul gone -> leader label removed (TTL {}s)",
                SESSION_TTL.as_secs()
            ),
        );
        line(
            "leader back, Consul reachable",
            measured(self.recovered_after),
            "Consul back -> same pod labelled leader",
        );
        line(
            "transitions",
            self.transitions
                .map_or_else(|| "-".to_owned(), |n| n.to_string()),
            "status.transitions",
        );
        let restart = match self.restart_unchanged {
            Some(true) => style.good("no label changed across the restart"),
            Some(false) => style.bad("labels changed across the restart"),
            None => "not checked".to_owned(),
        };
        println!("  {:<32} {restart}", "operator killed and restarted");
        let safe = if self.max_leaders <= 1 {
            style.good("yes")
        } else {
            style.bad(&format!("no: {} pods at once", self.max_leaders))
        };
        let gaps = if self.history_gaps == 0 {
            String::new()
        } else {
            style.warn(&format!(
                ", but the history has {} gap(s)",
                self.history_gaps
            ))
        };
        println!(
            "  at most one leader at every observed pod version: {safe} ({} versions recorded{gaps})",
            self.pod_versions
        );
        println!("  operator log: {}", logs.operator_log().display());
        println!("  cluster logs: {}", logs.path().display());
        match &self.failure {
            None if self.passed() => println!("{}", style.good(&style.bold("PASSED"))),
            None => println!(
                "{}",
                style.bad("FAILED: two pods carried the leader label at once")
            ),
            Some(failure) => {
                println!(
                    "{} step {}: {}",
                    style.bad("FAILED at"),
                    failure.step,
                    failure.reason
                );
                println!(
                    "  the operator's log may say why; {LOG_FILTER_ENV}=info,consul_elector=debug \
                     makes it detailed"
                );
            }
        }
    }
}
