//! What a run measured: one section per scenario with its rows (metric, value, unit, target)
//! and details (requests by kind), printed as a table and written as JSON.

use std::path::Path;
use std::time::Duration;

use serde::Serialize;
use serde_json::{Map, Value};

/// One measured value.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Row {
    /// What was measured.
    pub(crate) metric: String,
    /// The value; `None` when it could not be measured.
    pub(crate) value: Option<f64>,
    /// Its unit.
    pub(crate) unit: &'static str,
    /// The product's target for it (docs/design.md §5), if it has one.
    pub(crate) target: Option<&'static str>,
}

/// What one scenario measured.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct ScenarioReport {
    /// The scenario's name.
    pub(crate) scenario: &'static str,
    /// The safety checks and expected states that failed; empty when it passed.
    pub(crate) failures: Vec<String>,
    /// The measured values, in print order.
    pub(crate) rows: Vec<Row>,
    /// Breakdowns (requests by kind, by verb and resource), JSON only.
    pub(crate) details: Map<String, Value>,
}

impl ScenarioReport {
    /// An empty report of `scenario`.
    pub(crate) fn new(scenario: &'static str) -> Self {
        Self {
            scenario,
            ..Self::default()
        }
    }

    /// Whether nothing failed.
    pub(crate) fn passed(&self) -> bool {
        self.failures.is_empty()
    }

    /// Adds a row without a target.
    pub(crate) fn row(
        &mut self,
        metric: impl Into<String>,
        value: Option<f64>,
        unit: &'static str,
    ) {
        self.target(metric, value, unit, None);
    }

    /// Adds a row with the product's target.
    pub(crate) fn target(
        &mut self,
        metric: impl Into<String>,
        value: Option<f64>,
        unit: &'static str,
        target: Option<&'static str>,
    ) {
        self.rows.push(Row {
            metric: metric.into(),
            value,
            unit,
            target,
        });
    }

    /// Adds the p50/p90/p99/max rows of `samples`, `label` naming what was timed.
    pub(crate) fn latencies(&mut self, label: &str, samples: &[Duration], target: &'static str) {
        let summary = Latencies::of(samples);
        self.row(format!("{label}: samples"), Some(samples.len() as f64), "");
        for (name, value) in [
            ("p50", summary.p50),
            ("p90", summary.p90),
            ("p99", summary.p99),
            ("max", summary.max),
        ] {
            let target = (name == "p99").then_some(target);
            self.target(format!("{label}: {name}"), value, "s", target);
        }
    }

    /// Records a failed check.
    pub(crate) fn fail(&mut self, reason: impl Into<String>) {
        self.failures.push(reason.into());
    }

    /// Adds a breakdown to the JSON details.
    pub(crate) fn detail(&mut self, key: &str, value: Value) {
        self.details.insert(key.to_owned(), value);
    }
}

/// Percentiles of a set of durations, in seconds (nearest rank); `None` without samples.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Latencies {
    pub(crate) p50: Option<f64>,
    pub(crate) p90: Option<f64>,
    pub(crate) p99: Option<f64>,
    pub(crate) max: Option<f64>,
}

impl Latencies {
    /// The percentiles of `samples`.
    pub(crate) fn of(samples: &[Duration]) -> Self {
        let mut sorted: Vec<f64> = samples.iter().map(Duration::as_secs_f64).collect();
        sorted.sort_by(f64::total_cmp);
        Self {
            p50: percentile(&sorted, 50.0),
            p90: percentile(&sorted, 90.0),
            p99: percentile(&sorted, 99.0),
            max: sorted.last().copied(),
        }
    }
}

/// The nearest-rank `p`th percentile of ascending `sorted`.
fn percentile(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (p / 100.0 * sorted.len() as f64).ceil() as usize;
    sorted.get(rank.clamp(1, sorted.len()) - 1).copied()
}

/// The whole run: how it was built and sized, and every scenario's report.
#[derive(Debug, Serialize)]
pub(crate) struct RunReport {
    /// `release` or `debug`: the operator binary's profile.
    pub(crate) profile: String,
    /// The Consul the operator ran against (`emulator`, or `real Consul <version>`).
    pub(crate) consul: String,
    /// The sizes, as given.
    pub(crate) sizes: Value,
    /// Every scenario run, in order.
    pub(crate) scenarios: Vec<ScenarioReport>,
}

impl RunReport {
    /// Whether every scenario passed.
    pub(crate) fn passed(&self) -> bool {
        self.scenarios.iter().all(ScenarioReport::passed)
    }

    /// The table printed on stdout.
    pub(crate) fn table(&self) -> String {
        let mut out = format!(
            "\nconsul-elector benchmark (operator built in the {} profile; Consul: {}; {})\n",
            self.profile, self.consul, self.sizes
        );
        if self.profile == "debug" {
            out.push_str(
                "note: a debug build; the targets are for release builds \
                 (cargo run --release -p testkit --bin bench)\n",
            );
        }
        for scenario in &self.scenarios {
            let verdict = if scenario.passed() {
                "PASSED"
            } else {
                "FAILED"
            };
            out.push_str(&format!("\n== {} [{verdict}]\n", scenario.scenario));
            for row in &scenario.rows {
                let value = row.value.map_or_else(|| "-".to_owned(), format_value);
                let target = row
                    .target
                    .map(|t| format!("  (target {t})"))
                    .unwrap_or_default();
                out.push_str(&format!(
                    "  {:<58} {value:>12} {:<5}{target}\n",
                    row.metric, row.unit
                ));
            }
            for failure in &scenario.failures {
                out.push_str(&format!("  FAILED: {failure}\n"));
            }
        }
        out
    }

    /// Writes the JSON report to `path`.
    pub(crate) fn write_json(&self, path: &Path) -> Result<(), String> {
        let json = serde_json::to_string_pretty(self)
            .map_err(|error| format!("serialising the report: {error}"))?;
        std::fs::write(path, json + "\n")
            .map_err(|error| format!("writing {}: {error}", path.display()))
    }
}

/// Whole numbers without decimals, others with up to four significant decimals.
fn format_value(value: f64) -> String {
    if value.fract() == 0.0 && value.abs() < 1e15 {
        format!("{value:.0}")
    } else if value.abs() >= 100.0 {
        format!("{value:.1}")
    } else {
        format!("{value:.4}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_use_the_nearest_rank() {
        let ms = |n: u64| Duration::from_millis(n);
        let samples: Vec<Duration> = (1..=100).rev().map(ms).collect();
        let summary = Latencies::of(&samples);
        assert_eq!(summary.p50, Some(0.05));
        assert_eq!(summary.p90, Some(0.09));
        assert_eq!(summary.p99, Some(0.099));
        assert_eq!(summary.max, Some(0.1));
        let one = Latencies::of(&[ms(7)]);
        assert_eq!(
            (one.p50, one.p99, one.max),
            (Some(0.007), Some(0.007), Some(0.007))
        );
        assert_eq!(Latencies::of(&[]).p99, None);
    }

    #[test]
    fn the_json_report_names_scenarios_rows_targets_and_failures() {
        let mut converge = ScenarioReport::new("converge");
        converge.target("converge time", Some(12.5), "s", Some("< 60 s"));
        converge.row("unmeasured", None, "");
        converge.detail("consul_requests", serde_json::json!({"session.create": 20}));
        let mut failover = ScenarioReport::new("failover");
        failover.fail("two leaders in bench/e1");
        let report = RunReport {
            profile: "release".into(),
            consul: "emulator".into(),
            sizes: serde_json::json!({"elections": 20}),
            scenarios: vec![converge, failover],
        };
        assert!(!report.passed());
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["scenarios"][0]["rows"][0]["value"], 12.5);
        assert_eq!(json["scenarios"][0]["rows"][0]["target"], "< 60 s");
        assert!(json["scenarios"][0]["rows"][1]["value"].is_null());
        assert_eq!(
            json["scenarios"][0]["details"]["consul_requests"]["session.create"],
            20
        );
        assert_eq!(
            json["scenarios"][1]["failures"][0],
            "two leaders in bench/e1"
        );
        let table = report.table();
        assert!(table.contains("== converge [PASSED]") && table.contains("== failover [FAILED]"));
        assert!(table.contains("12.5000") && table.contains("(target < 60 s)"));
    }
}
