//! `failover`: round after round, the leader of one election is deleted (even rounds) or
//! goes NotReady (odd rounds) while the other elections idle; timed from the request to
//! the watch event that shows another pod of that election labelled leader. Each round
//! then restores the election (a replacement pod, or Ready again) and waits for it to
//! settle before the next.

use std::time::{Duration, Instant};

use super::running::Running;
use crate::bench::options::Sizes;
use crate::bench::population;
use crate::bench::report::ScenarioReport;

/// Request -> successor labelled, at most.
const FAILOVER_TIMEOUT: Duration = Duration::from_secs(30);
/// Restored -> settled again, at most.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(30);

/// Runs `sizes.failovers` rounds over the elections in turn and reports the latencies.
pub(super) async fn run(
    running: &Running<'_>,
    sizes: &Sizes,
    report: &mut ScenarioReport,
) -> Result<(), String> {
    let elections = &running.population.elections;
    let client = &running.env.client;
    let (mut deleted, mut not_ready) = (Vec::new(), Vec::new());
    report.row(
        "elections idle meanwhile",
        Some(elections.len().saturating_sub(sizes.failovers) as f64),
        "",
    );
    for round in 0..sizes.failovers {
        let election = &elections[round % elections.len()];
        let (namespace, name) = election;
        let old = running.settled_leader(election, SETTLE_TIMEOUT).await?;
        let from = running.tracker.state().label_changes.len();
        let make_not_ready = round % 2 == 1;
        let requested = Instant::now();
        let acted = if make_not_ready {
            population::set_ready(client, namespace, &old, false).await
        } else {
            population::delete_pod(client, namespace, &old).await
        };
        acted.map_err(|error| error.to_string())?;
        let (_, labelled) = running
            .leader_labelled(election, &old, None, from, FAILOVER_TIMEOUT)
            .await?;
        let latency = labelled.saturating_duration_since(requested);
        let restored = if make_not_ready {
            not_ready.push(latency);
            population::set_ready(client, namespace, &old, true).await
        } else {
            deleted.push(latency);
            let replacement = format!("{name}-r{round}");
            running
                .population
                .create_pod(client, namespace, name, &replacement, round)
                .await
        };
        restored.map_err(|error| error.to_string())?;
    }
    report.latencies(
        "leader pod deleted -> successor labelled",
        &deleted,
        "< 0.1 s with 1 election, < 0.25 s with 10,000 idle",
    );
    report.latencies(
        "leader NotReady -> successor labelled",
        &not_ready,
        "< 0.1 s after the failover decision",
    );
    Ok(())
}
