//! `steady`: once converged, the Consul and API requests over a window in which nothing
//! changes.

use std::time::Instant;

use super::Running;
use crate::bench::options::Sizes;
use crate::bench::population::SESSION_TTL;
use crate::bench::report::ScenarioReport;
use crate::bench::usage::Baseline;

/// Counts the requests over `sizes.steady_window`.
pub(super) async fn run(
    running: &Running<'_>,
    sizes: &Sizes,
    report: &mut ScenarioReport,
) -> Result<(), String> {
    let env = running.env;
    let baseline = Baseline::take(env, Some(running.operator.pid())).await?;
    let since = Instant::now();
    // The measurement window itself: nothing is awaited, the counters are read after it.
    tokio::time::sleep(sizes.steady_window).await;
    let usage = baseline
        .finish(env, running.operator.pid(), "steady", report)
        .await?;
    let sessions = running.tracker.state().sessions().len().max(1) as f64;
    let half_ttls = usage.seconds / (SESSION_TTL.as_secs_f64() / 2.0);
    report.row("sessions named by the statuses", Some(sessions), "");
    report.target(
        "Consul requests per session per TTL/2",
        Some(usage.consul.total_requests() as f64 / sessions / half_ttls),
        "",
        Some("<= 1"),
    );
    let (writes, events) = usage.api_writes();
    report.row("API writes in steady state, all clients", Some(writes), "");
    let (elections, _) = usage
        .api
        .writes()
        .to_resources(&["pods", "leaderelections"])
        .total_and_events();
    report.target(
        "API writes to pods and LeaderElections in steady state",
        Some(elections),
        "",
        Some("0"),
    );
    report.row("API event writes in steady state", Some(events), "");
    super::converge::unconfirmed_rows(running, since, report).await
}
