//! `converge`: N elections x P pods from cold. [`Running::launch`] measured the time and
//! the cost; this adds them per election and what shows that no session went unconfirmed.

use super::running::Running;
use crate::bench::report::ScenarioReport;

/// Reports the cold start per election and the signs of unconfirmed sessions.
pub(super) async fn run(running: &Running<'_>, report: &mut ScenarioReport) -> Result<(), String> {
    let n = running.elections() as f64;
    let cold = &running.cold_start;
    let (writes, events) = cold.api_writes();
    report.target(
        "operator cold-start CPU per election",
        Some(cold.operator_cpu / n * 1000.0),
        "ms",
        Some("<= 2 ms, flat in N"),
    );
    report.target(
        "API writes per election, events apart",
        Some(writes / n),
        "",
        Some("<= 5"),
    );
    report.row("API event writes per election", Some(events / n), "");
    unconfirmed_rows(running, running.started, report).await
}

/// What shows sessions went unconfirmed while Consul was healthy: leader labels removed
/// and sessions that ended without being destroyed (TTL expiries), since `since` and
/// since the operator started.
pub(super) async fn unconfirmed_rows(
    running: &Running<'_>,
    since: std::time::Instant,
    report: &mut ScenarioReport,
) -> Result<(), String> {
    report.target(
        "leader labels removed (no fault injected)",
        Some(running.leader_labels_removed(since) as f64),
        "",
        Some("0"),
    );
    let consul = &running.cold_start.consul;
    let alive_now = running.env.consul.session_count().await?;
    let created = consul.requests_to("session.create") as usize;
    let destroyed = consul.requests_to("session.destroy") as usize;
    let ended = (created + running.sessions_before).saturating_sub(destroyed + alive_now);
    report.target(
        "Consul sessions ended without a destroy (expired)",
        Some(ended as f64),
        "",
        Some("0"),
    );
    Ok(())
}
