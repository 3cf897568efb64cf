//! `switchover`: round after round, a switchover to any other pod (`elector.dev/switchover-to:
//! "*"`) is requested in one election while the others idle; timed from the request's patch
//! to the watch event that shows another pod of that election labelled leader, then waited
//! on until the operator decided the request (annotation removed, `status.lastSwitchover`
//! `Completed`). Then one switchover to a named follower, and one request naming a pod that
//! does not exist, which must be refused with nothing moved.

use std::time::{Duration, Instant};

use super::running::Running;
use crate::bench::options::Sizes;
use crate::bench::population;
use crate::bench::report::Latencies;
use crate::bench::report::ScenarioReport;
use crate::bench::tracker::{Key, SwitchoverChange};
use crate::sandbox::objects::{self, ANY_OTHER_POD, SWITCHOVER_COMPLETED, SWITCHOVER_REFUSED};
use crate::sandbox::snapshot::LastSwitchover;

/// Request -> new leader labelled, at most.
const SWITCHOVER_TIMEOUT: Duration = Duration::from_secs(30);
/// Request -> decided (annotation removed, outcome recorded), at most.
const DECISION_TIMEOUT: Duration = Duration::from_secs(30);
/// Before a request: the election settled with all its pods, at most.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(30);
/// The pod the refused request names: no bench pod is called that.
const NO_SUCH_POD: &str = "no-such-pod";

/// Runs `sizes.switchovers` switchovers over the elections in turn, one to a named pod and
/// one refused, and reports the latencies and outcomes.
pub(super) async fn run(
    running: &Running<'_>,
    sizes: &Sizes,
    report: &mut ScenarioReport,
) -> Result<(), String> {
    if running.population.pods < 2 {
        return Err("a switchover needs at least 2 pods per election (--pods)".to_owned());
    }
    let elections = &running.population.elections;
    let election = |round: usize| &elections[round % elections.len()];
    report.row(
        "elections idle meanwhile",
        Some(elections.len().saturating_sub(sizes.switchovers) as f64),
        "",
    );
    let (mut labelled, mut decided, mut completed) = (Vec::new(), Vec::new(), 0);
    for round in 0..sizes.switchovers {
        let done = switch(running, election(round), None, report).await?;
        labelled.push(done.labelled);
        decided.push(done.decided);
        completed += usize::from(done.completed);
    }
    report.latencies(
        "switchover requested -> new leader labelled",
        &labelled,
        "< 0.1 s",
    );
    let decided = Latencies::of(&decided);
    report.row(
        "switchover requested -> request decided: p50",
        decided.p50,
        "s",
    );
    report.row(
        "switchover requested -> request decided: max",
        decided.max,
        "s",
    );
    report.target(
        format!("switchovers completed, of {}", sizes.switchovers),
        Some(completed as f64),
        "",
        Some("all"),
    );

    let named = election(sizes.switchovers);
    let old = running.settled_leader(named, SETTLE_TIMEOUT).await?;
    let follower = (0..running.population.pods)
        .map(|k| population::pod_name(&named.1, k))
        .find(|pod| *pod != old)
        .ok_or_else(|| format!("{}/{} has no follower", named.0, named.1))?;
    let done = switch(running, named, Some(&follower), report).await?;
    report.row(
        "switchover to a named follower -> it is labelled leader",
        Some(done.labelled.as_secs_f64()),
        "s",
    );

    refused(running, election(sizes.switchovers + 1), report).await
}

/// What one completed or failed switchover measured.
struct Switched {
    /// Request -> new leader labelled.
    labelled: Duration,
    /// Request -> decided.
    decided: Duration,
    /// Whether the operator recorded it `Completed` with the labelled pod as leader.
    completed: bool,
}

/// Requests a switchover of `election` to `to` (`None`: any other pod) once it is settled,
/// waits for the new leader's label and the decision, and fails `report` when the decision
/// is not `Completed` with that leader.
async fn switch(
    running: &Running<'_>,
    election: &Key,
    to: Option<&str>,
    report: &mut ScenarioReport,
) -> Result<Switched, String> {
    let (namespace, name) = election;
    let target = to.unwrap_or(ANY_OTHER_POD);
    let old = running.settled_leader(election, SETTLE_TIMEOUT).await?;
    let since = history_lengths(running, election);
    let requested = request(running, election, target).await?;
    let (leader, labelled) = running
        .leader_labelled(election, &old, to, since.labels, SWITCHOVER_TIMEOUT)
        .await?;
    let decision = decision(running, election, &since, target).await?;
    let outcome = &decision.switchover.last;
    let completed = outcome.result.as_deref() == Some(SWITCHOVER_COMPLETED)
        && outcome.leader.as_deref() == Some(leader.as_str());
    if !completed {
        report.fail(format!(
            "{namespace}/{name}: switchover to {target:?} moved the leader label from {old} \
             to {leader} but was recorded as {outcome:?}"
        ));
    }
    Ok(Switched {
        labelled: labelled.saturating_duration_since(requested),
        decided: decision.at.saturating_duration_since(requested),
        completed,
    })
}

/// Requests a switchover of `election` to a pod that does not exist once it is settled;
/// reports the leader label changes until the decision (none expected) and fails `report`
/// unless the request was `Refused` and the leader kept.
async fn refused(
    running: &Running<'_>,
    election: &Key,
    report: &mut ScenarioReport,
) -> Result<(), String> {
    let (namespace, name) = election;
    let old = running.settled_leader(election, SETTLE_TIMEOUT).await?;
    let since = history_lengths(running, election);
    let requested = request(running, election, NO_SUCH_POD).await?;
    let decision = decision(running, election, &since, NO_SUCH_POD).await?;
    report.row(
        "switchover to an unknown pod -> refused",
        Some(
            decision
                .at
                .saturating_duration_since(requested)
                .as_secs_f64(),
        ),
        "s",
    );
    let (moved, leader) = {
        let state = running.tracker.state();
        let moved = state.label_changes[since.labels..]
            .iter()
            .filter(|c| &c.election == election)
            .count();
        let leader = state
            .elections
            .get(election)
            .and_then(|e| e.settled_leader().map(str::to_owned));
        (moved, leader)
    };
    report.target(
        "switchover to an unknown pod: role label changes",
        Some(moved as f64),
        "",
        Some("0"),
    );
    let result = decision.switchover.last.result.as_deref();
    if result != Some(SWITCHOVER_REFUSED) || moved > 0 || leader.as_deref() != Some(&old) {
        report.fail(format!(
            "{namespace}/{name}: a switchover to {NO_SUCH_POD:?} should be refused with \
             {old} still leading; recorded {:?}, {moved} role label change(s), leader now \
             {leader:?}",
            decision.switchover.last
        ));
    }
    Ok(())
}

/// Where the histories stood before a request: what it caused is found after them.
struct History {
    /// The length of the label history.
    labels: usize,
    /// The length of the switchover history.
    switchovers: usize,
    /// The election's `status.lastSwitchover`.
    record: LastSwitchover,
}

/// The histories' lengths and the election's switchover record now.
fn history_lengths(running: &Running<'_>, election: &Key) -> History {
    let state = running.tracker.state();
    History {
        labels: state.label_changes.len(),
        switchovers: state.switchover_changes.len(),
        record: state
            .elections
            .get(election)
            .map(|e| e.status.switchover.last.clone())
            .unwrap_or_default(),
    }
}

/// Annotates `election` with a request to `to`; returns when the patch returned.
async fn request(running: &Running<'_>, election: &Key, to: &str) -> Result<Instant, String> {
    let (namespace, name) = election;
    objects::request_switchover(&running.env.client, namespace, name, to)
        .await
        .map_err(|error| error.to_string())?;
    Ok(Instant::now())
}

/// Waits for the decision on the request to `to` of `election` made after `since`.
async fn decision(
    running: &Running<'_>,
    election: &Key,
    since: &History,
    to: &str,
) -> Result<SwitchoverChange, String> {
    let (namespace, name) = election;
    running
        .tracker
        .wait(
            &format!(
                "the switchover of {namespace}/{name} to {to:?} decided (annotation removed, \
                 status.lastSwitchover.result Completed or Refused)"
            ),
            DECISION_TIMEOUT,
            |state| {
                state
                    .switchover_decided(election, since.switchovers, to, &since.record)
                    .cloned()
            },
        )
        .await
}
