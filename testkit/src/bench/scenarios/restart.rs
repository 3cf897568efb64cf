//! `restart`: the operator is killed with SIGKILL and started again over its converged
//! elections. Nothing may change (leader, labels, fencing tokens, transitions), and every
//! session must be renewed again soon (each one's renewal mark moves on: the emulator's TTL
//! deadline, or the real server's meter seeing it renewed).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::running::Running;
use crate::bench::report::ScenarioReport;
use crate::bench::usage::Baseline;

/// After the last renewal, how long changes are still looked for.
const QUIET: Duration = Duration::from_secs(3);
/// How often the renewal marks are read while waiting for renewals.
const POLL: Duration = Duration::from_millis(50);
/// How many changes the JSON report quotes.
const QUOTED: usize = 20;

/// Kills and restarts the operator and reports what changed and when sessions were renewed.
pub(super) async fn run(
    running: &mut Running<'_>,
    report: &mut ScenarioReport,
) -> Result<(), String> {
    let env = running.env;
    let (sessions, labels_before, statuses_before) = {
        let state = running.tracker.state();
        (
            state.sessions(),
            state.label_changes.len(),
            state.status_changes.len(),
        )
    };
    let deadline = |id: &str| env.consul.renewal_mark(id);
    let baseline = Baseline::take(env, None).await?;
    running.operator.kill();
    // Read after the kill: a renewal by the old process must not count as the new one's.
    let before: BTreeMap<&String, Option<Duration>> =
        sessions.iter().map(|id| (id, deadline(id))).collect();
    running
        .operator
        .restart()
        .map_err(|error| format!("restarting the operator: {error}"))?;
    let restarted = Instant::now();
    let timeout = Duration::from_secs(30) + Duration::from_millis(2) * sessions.len() as u32;
    loop {
        let pending: Vec<&&String> = before
            .iter()
            .filter(|(id, old)| deadline(id) <= **old)
            .map(|(id, _)| id)
            .collect();
        if pending.is_empty() {
            break;
        }
        if restarted.elapsed() > timeout {
            return Err(format!(
                "{} of {} sessions not renewed within {timeout:?} of the restart, e.g. {:?}",
                pending.len(),
                sessions.len(),
                pending.first()
            ));
        }
        tokio::time::sleep(POLL).await;
    }
    report.target(
        format!("restart -> all {} sessions renewed again", sessions.len()),
        Some(restarted.elapsed().as_secs_f64()),
        "s",
        Some("< 5 s"),
    );
    // Changes may still follow the renewals: watch for a while before counting.
    tokio::time::sleep(QUIET).await;
    baseline
        .finish(env, running.operator.pid(), "restart", report)
        .await?;
    let state = running.tracker.state();
    let labels = &state.label_changes[labels_before..];
    let statuses = &state.status_changes[statuses_before..];
    let since = |at: Instant| at.saturating_duration_since(restarted).as_secs_f64();
    let changes: Vec<String> = labels
        .iter()
        .map(|c| {
            format!(
                "+{:.3}s {}/{} pod {}: {:?} -> {:?}",
                since(c.at),
                c.election.0,
                c.election.1,
                c.pod,
                c.from,
                c.to
            )
        })
        .chain(statuses.iter().map(|c| {
            let s = &c.status;
            format!(
                "+{:.3}s {}/{} status: leader {:?} token {:?} transitions {:?}",
                since(c.at),
                c.election.0,
                c.election.1,
                s.leader,
                s.token,
                s.transitions
            )
        }))
        .take(QUOTED)
        .collect();
    report.detail(
        "changes after the restart (first ones)",
        serde_json::json!(changes),
    );
    report.target(
        "role labels changed",
        Some(labels.len() as f64),
        "",
        Some("0"),
    );
    report.target(
        "pods newly labelled leader",
        Some(labels.iter().filter(|c| c.made_leader()).count() as f64),
        "",
        Some("0"),
    );
    report.target(
        "status changes (leader, fencing token, transitions)",
        Some(statuses.len() as f64),
        "",
        Some("0"),
    );
    Ok(())
}
