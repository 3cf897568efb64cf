//! `steady`: once converged, the Consul and API requests over a window in which nothing
//! changes.

use std::time::Instant;

use super::running::Running;
use crate::bench::options::Sizes;
use crate::bench::population::SESSION_TTL;
use crate::bench::report::ScenarioReport;
use crate::bench::usage::{Baseline, Usage};

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
    upkeep_rows(running, &usage, report);
    super::converge::unconfirmed_rows(running, since, report).await
}

/// The cold start's renewals priced at what the steady window cost per renewal, and the
/// cold-start CPU per election without them. Renewals go on for as long as the cold start
/// lasts, which is the API server's time, so their share grows with N; the rest is the
/// cost of converging. The steady window's price is an upper bound: it also pays for the
/// invariant checker, the lock watch's long polls and the events still queued from the
/// cold start.
fn upkeep_rows(running: &Running<'_>, steady: &Usage, report: &mut ScenarioReport) {
    let renewals = |usage: &Usage| usage.consul.requests_to("session.renew") as f64;
    let cold = &running.cold_start;
    let n = running.elections() as f64;
    let price = price_per_renewal(steady.operator_cpu, renewals(steady));
    report.row(
        "cold start: session renewals per election",
        Some(renewals(cold) / n),
        "",
    );
    report.row(
        "steady: operator CPU per session renewal",
        price.map(|price| price * 1e6),
        "us",
    );
    report.row(
        "cold start: operator CPU per election, renewals at the steady price taken out",
        price.map(|price| without_renewals(cold.operator_cpu, renewals(cold), price, n) * 1000.0),
        "ms",
    );
}

/// CPU seconds per renewal of a window that spent `cpu` seconds and made `renewals`; none
/// without renewals.
fn price_per_renewal(cpu: f64, renewals: f64) -> Option<f64> {
    (renewals > 0.0).then(|| cpu / renewals)
}

/// CPU seconds per election of a phase that spent `cpu` seconds on `elections` elections,
/// its `renewals` taken out at `price` seconds each.
fn without_renewals(cpu: f64, renewals: f64, price: f64, elections: f64) -> f64 {
    (cpu - renewals * price) / elections
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cold_start_pays_its_renewals_at_the_steady_price() {
        // 39,025 renewals cost 4.25 s in the window: 108.9 us each.
        let price = price_per_renewal(4.25, 39_025.0).unwrap_or_default();
        assert!((price * 1e6 - 108.9).abs() < 0.1, "price {price}");
        // 145,643 of them in a 58.33 s cold start of 10,000 elections: 4.25 ms per election.
        let net = without_renewals(58.33, 145_643.0, price, 10_000.0);
        assert!((net * 1000.0 - 4.247).abs() < 0.01, "net {net}");
    }

    #[test]
    fn a_window_without_renewals_gives_no_price() {
        assert_eq!(price_per_renewal(1.0, 0.0), None);
    }
}
