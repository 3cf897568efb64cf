//! [`Running`], the converged operator over its population that `run` and every scenario share.

use std::time::{Duration, Instant};

use crate::bench::environment::Environment;
use crate::bench::population::Population;
use crate::bench::report::ScenarioReport;
use crate::bench::tracker::{Key, Tracker};
use crate::bench::usage::{Baseline, Usage};
use crate::pods::PodSimulator;
use crate::sandbox::objects::LEADER;
use crate::sandbox::operator_process::OperatorProcess;

/// How long the elections' deletion may take at the end of a scenario.
const CLEAN_UP_TIMEOUT: Duration = Duration::from_secs(60);
/// The cold start's time limit: a floor, and a generous time per election.
fn converge_timeout(elections: usize) -> Duration {
    Duration::from_secs(120)
        + Duration::from_millis(100).saturating_mul(u32::try_from(elections).unwrap_or(u32::MAX))
}

/// How many violations a failure message quotes.
const QUOTED: usize = 5;

/// A scenario's population with the operator running over it, converged from cold.
pub(crate) struct Running<'a> {
    /// The environment.
    pub(crate) env: &'a Environment,
    /// The namespaces, elections and pods.
    pub(crate) population: Population,
    /// Their history.
    pub(crate) tracker: Tracker,
    /// The operator.
    pub(crate) operator: OperatorProcess,
    /// What the cold start cost.
    pub(crate) cold_start: Usage,
    /// Consul sessions alive before the operator started.
    pub(crate) sessions_before: usize,
    /// When the operator started.
    pub(crate) started: Instant,
    /// The kubelet of a Deployment's pods, for scenarios that have one.
    pub(crate) simulator: Option<PodSimulator>,
}

impl<'a> Running<'a> {
    /// Creates `population` (untimed), then [`Self::start`]s the operator over it.
    pub(super) async fn launch(
        env: &'a Environment,
        population: Population,
        report: &mut ScenarioReport,
    ) -> Result<Self, String> {
        let tracker = Tracker::start(
            env.client.clone(),
            &population.selector(),
            &population.namespace_prefix(),
        )
        .await?;
        let created = Instant::now();
        population
            .create(&env.client)
            .await
            .map_err(|error| format!("creating the population: {error}"))?;
        report.row(
            format!(
                "population: {} elections x {} pods in {} namespaces, created in",
                population.elections.len(),
                population.pods,
                population.namespaces.len()
            ),
            Some(created.elapsed().as_secs_f64()),
            "s",
        );
        Self::start(env, population, tracker, report).await
    }

    /// Starts the operator and waits until every election has a settled leader, reporting
    /// the time from the operator's start and the cold start's cost.
    pub(super) async fn start(
        env: &'a Environment,
        population: Population,
        tracker: Tracker,
        report: &mut ScenarioReport,
    ) -> Result<Self, String> {
        let sessions_before = env.consul.session_count().await?;
        let baseline = Baseline::take(env, None).await?;
        let operator = env
            .start_operator(population.scenario, &population.namespaces)
            .map_err(|error| error.to_string())?;
        let started = Instant::now();
        let elections = population.elections.len();
        let timeout = converge_timeout(elections);
        let converged = tracker.converged(elections, timeout).await;
        let settled = tracker.state().counts().1;
        report.row("cold start: elections led", Some(settled as f64), "");
        if let Ok(converged) = &converged {
            report.target(
                "cold start: operator start -> every election led (watch)",
                Some(converged.saturating_duration_since(started).as_secs_f64()),
                "s",
                Some("< 60 s at 10,000 x 3"),
            );
        }
        // Reported also when it did not converge: what it cost until then.
        let cold_start = baseline
            .finish(env, operator.pid(), "cold start", report)
            .await?;
        if let Err(failure) = converged {
            let mut operator = operator;
            return Err(format!(
                "cold start: {failure}\n  operator process: {}",
                operator.state()
            ));
        }
        Ok(Self {
            env,
            population,
            tracker,
            operator,
            cold_start,
            sessions_before,
            started,
            simulator: None,
        })
    }

    /// How many elections there are.
    pub(crate) fn elections(&self) -> usize {
        self.population.elections.len()
    }

    /// Waits until `election` is settled with all its pods and returns its leader.
    pub(crate) async fn settled_leader(
        &self,
        election: &Key,
        timeout: Duration,
    ) -> Result<String, String> {
        let (namespace, name) = election;
        self.tracker
            .wait(&format!("{namespace}/{name} settled"), timeout, |state| {
                let entry = state.elections.get(election)?;
                let leader = entry.settled_leader()?;
                (entry.pods == self.population.pods).then(|| leader.to_owned())
            })
            .await
    }

    /// Waits until a pod of `election` other than `old` is labelled leader by a change after
    /// the first `since` of the label history (`Some(pod)`: that pod); returns the pod and
    /// when its watch event arrived.
    pub(crate) async fn leader_labelled(
        &self,
        election: &Key,
        old: &str,
        pod: Option<&str>,
        since: usize,
        timeout: Duration,
    ) -> Result<(String, Instant), String> {
        let (namespace, name) = election;
        let expected = match pod {
            Some(pod) => format!("pod {pod} of {namespace}/{name} labelled leader"),
            None => format!("a pod of {namespace}/{name} other than {old} labelled leader"),
        };
        self.tracker
            .wait(&expected, timeout, |state| {
                state.label_changes[since..]
                    .iter()
                    .find(|c| {
                        &c.election == election
                            && c.made_leader()
                            && c.pod != old
                            && pod.is_none_or(|pod| c.pod == pod)
                    })
                    .map(|c| (c.pod.clone(), c.at))
            })
            .await
    }

    /// Leader labels removed since `since` (a leader label replaced by anything, or its
    /// pod gone).
    pub(crate) fn leader_labels_removed(&self, since: Instant) -> usize {
        self.tracker
            .state()
            .label_changes
            .iter()
            .filter(|c| c.at >= since && c.from.as_deref() == Some(LEADER))
            .count()
    }

    /// Fails the report on any safety violation; reports the history's gaps.
    pub(super) fn check_safety(&self, report: &mut ScenarioReport) {
        let state = self.tracker.state();
        report.row("watch re-lists (history gaps)", Some(state.gaps as f64), "");
        report.target(
            "safety violations (two leaders, token backwards)",
            Some(state.violations.len() as f64),
            "",
            Some("0"),
        );
        if !state.violations.is_empty() {
            let quoted: Vec<&String> = state.violations.iter().take(QUOTED).collect();
            report.fail(format!(
                "{} safety violation(s), first ones: {quoted:?}",
                state.violations.len()
            ));
        }
    }

    /// Deletes the elections while the operator still runs and waits until they are gone,
    /// stops the operator, then deletes the pods and waits until they are gone too (the
    /// namespaces stay: deleting them would keep the namespace controller busy during the
    /// next scenario's measurements).
    pub(super) async fn clean_up(self) {
        let Self {
            env,
            population,
            tracker,
            operator,
            simulator,
            ..
        } = self;
        let elections_gone = match population.delete_elections(&env.client).await {
            Ok(()) => {
                tracker
                    .wait("every election deleted", CLEAN_UP_TIMEOUT, |state| {
                        (state.counts().0 == 0).then_some(())
                    })
                    .await
            }
            Err(error) => Err(error.to_string()),
        };
        drop(operator);
        if let Some(simulator) = simulator {
            simulator.stop().await;
        }
        let pods_gone = match population.delete_pods(&env.client).await {
            Ok(()) => {
                tracker
                    .wait("every pod deleted", CLEAN_UP_TIMEOUT, |state| {
                        (state.pod_count() == 0).then_some(())
                    })
                    .await
            }
            Err(error) => Err(error.to_string()),
        };
        for error in [elections_gone, pods_gone]
            .into_iter()
            .filter_map(Result::err)
        {
            eprintln!("bench: cleaning up after {}: {error}", population.scenario);
        }
        tracker.stop();
    }
}
