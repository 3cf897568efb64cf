//! A client of the leader Service, as a user's application sees it: a request to the Service's
//! ClusterIP every 10 ms, each on a new connection (kube-proxy balances connections, not
//! requests), recording who answered and when; and what a failover looked like to it.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use testkit::recorder::PodVersion;

use crate::harness::{LEADER, ROLE};

/// How often the client sends a request.
pub const INTERVAL: Duration = Duration::from_millis(10);
/// How long one request may take, connection included.
const REQUEST_TIMEOUT: Duration = Duration::from_millis(500);

/// One request and its outcome.
#[derive(Debug, Clone)]
pub struct Probe {
    pub sent: Instant,
    pub answered: Instant,
    /// The answering pod's name, or why there was no answer.
    pub outcome: Result<String, String>,
}

/// A running client; [`LeaderClient::stop`] returns what it recorded.
pub struct LeaderClient {
    probes: Arc<Mutex<Vec<Probe>>>,
    task: tokio::task::JoinHandle<()>,
    /// The requests sent so far (each ends within [`REQUEST_TIMEOUT`]).
    requests: Arc<Mutex<Vec<tokio::task::JoinHandle<()>>>>,
}

impl LeaderClient {
    /// Starts sending `GET http://<cluster_ip>/hostname` every [`INTERVAL`].
    pub fn start(cluster_ip: &str) -> LeaderClient {
        let http = reqwest::Client::builder()
            .timeout(REQUEST_TIMEOUT)
            .pool_max_idle_per_host(0)
            .build()
            .expect("an HTTP client");
        let url = format!("http://{cluster_ip}/hostname");
        let probes = Arc::new(Mutex::new(Vec::new()));
        let recorded = Arc::clone(&probes);
        let requests = Arc::new(Mutex::new(Vec::new()));
        let sent_requests = Arc::clone(&requests);
        let task = tokio::spawn(async move {
            let mut ticks = tokio::time::interval(INTERVAL);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticks.tick().await;
                let http = http.clone();
                let url = url.clone();
                let recorded = Arc::clone(&recorded);
                let request = tokio::spawn(async move {
                    let sent = Instant::now();
                    let outcome = match http.get(&url).send().await {
                        Ok(response) if response.status().is_success() => response
                            .text()
                            .await
                            .map(|body| body.trim().to_owned())
                            .map_err(|e| format!("reading the body: {e}")),
                        Ok(response) => Err(format!("status {}", response.status())),
                        Err(error) => Err(error.to_string()),
                    };
                    let probe = Probe {
                        sent,
                        answered: Instant::now(),
                        outcome,
                    };
                    recorded
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .push(probe);
                });
                sent_requests
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(request);
            }
        });
        LeaderClient {
            probes,
            task,
            requests,
        }
    }

    /// Whether some request sent at or after `since` was answered by `pod`.
    pub fn answered_by_since(&self, pod: &str, since: Instant) -> bool {
        let probes = self.probes.lock().unwrap_or_else(PoisonError::into_inner);
        probes
            .iter()
            .any(|p| p.sent >= since && p.outcome.as_deref() == Ok(pod))
    }

    /// Whether `pod` answered a request sent at or after `since`, and no other pod did.
    pub fn only_answered_by_since(&self, pod: &str, since: Instant) -> bool {
        let probes = self.probes.lock().unwrap_or_else(PoisonError::into_inner);
        let mut answers = probes
            .iter()
            .filter(|p| p.sent >= since)
            .filter_map(|p| p.outcome.as_deref().ok())
            .peekable();
        answers.peek().is_some() && answers.all(|answered| answered == pod)
    }

    /// The first pod other than `old` that answered a request sent at or after `since` while
    /// `versions` (the recorded label history) show it labelled leader: the leader this client
    /// reached after a failover. Not simply the first pod labelled after `old`: when several
    /// pods fail together (a node falls silent) the leadership may pass through one of them
    /// before it stands, and the client never reaches that one.
    pub fn leader_answering_since(
        &self,
        old: &str,
        since: Instant,
        versions: &[PodVersion],
    ) -> Option<String> {
        let probes = self.probes.lock().unwrap_or_else(PoisonError::into_inner);
        let mut answers: Vec<(&Probe, &str)> = probes
            .iter()
            .filter(|p| p.sent >= since)
            .filter_map(|p| Some((p, p.outcome.as_deref().ok()?)))
            .filter(|(p, pod)| *pod != old && leader_at(versions, pod, p.answered))
            .collect();
        answers.sort_by_key(|(p, _)| p.sent);
        answers.first().map(|(_, pod)| (*pod).to_owned())
    }

    /// Stops sending, waits for the requests in flight, and returns every probe by send time.
    pub async fn stop(self) -> Vec<Probe> {
        self.task.abort();
        let _ = self.task.await;
        let requests =
            std::mem::take(&mut *self.requests.lock().unwrap_or_else(PoisonError::into_inner));
        for request in requests {
            // Each ends within REQUEST_TIMEOUT; one that panicked recorded nothing.
            let _ = request.await;
        }
        let mut probes = self
            .probes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        probes.sort_by_key(|p| p.sent);
        probes
    }
}

/// What one failover looked like to the client.
#[derive(Debug, Clone)]
pub struct Failover {
    /// From the event to the first answer by the new leader (to a request sent after it).
    pub to_new_leader: Duration,
    /// The longest stretch of requests without an answer from anyone, around the event.
    pub unanswered: Duration,
    /// Requests without an answer after the event.
    pub failed: usize,
    /// Answers by a pod that did not carry the leader label when it answered.
    pub wrong: usize,
    /// From the first to the last such answer (zero without any).
    pub wrong_window: Duration,
}

/// Reads `probes` against the label history `versions`: the failover from `event` to
/// `new_leader`.
pub fn failover(
    probes: &[Probe],
    versions: &[PodVersion],
    event: Instant,
    new_leader: &str,
) -> Failover {
    let after: Vec<&Probe> = probes.iter().filter(|p| p.sent >= event).collect();
    let first_new = after
        .iter()
        .find(|p| p.outcome.as_deref() == Ok(new_leader))
        .expect("the new leader answered");
    let mut unanswered = Duration::ZERO;
    let mut last_answer = probes
        .iter()
        .filter(|p| p.sent < event && p.outcome.is_ok())
        .map(|p| p.sent)
        .next_back()
        .unwrap_or(event);
    for probe in probes
        .iter()
        .filter(|p| p.sent >= event && p.sent <= first_new.sent)
    {
        if probe.outcome.is_ok() {
            unanswered = unanswered.max(probe.sent.duration_since(last_answer));
            last_answer = probe.sent;
        }
    }
    let wrong: Vec<&Probe> = probes
        .iter()
        .filter(|p| match &p.outcome {
            Ok(pod) => !leader_at(versions, pod, p.answered),
            Err(_) => false,
        })
        .collect();
    let wrong_window = match (wrong.first(), wrong.last()) {
        (Some(first), Some(last)) => last.answered.duration_since(first.answered),
        _ => Duration::ZERO,
    };
    Failover {
        to_new_leader: first_new.answered.duration_since(event),
        unanswered,
        failed: after
            .iter()
            .filter(|p| p.outcome.is_err() && p.sent <= first_new.sent)
            .count(),
        wrong: wrong.len(),
        wrong_window,
    }
}

/// Whether the latest version of `pod` recorded at or before `at` (or, for an answer that came
/// before the recorder saw the label, the next one) carries the leader label.
fn leader_at(versions: &[PodVersion], pod: &str, at: Instant) -> bool {
    let of_pod = versions.iter().filter(|v| v.name == pod);
    let before = of_pod.clone().rfind(|v| v.at <= at);
    before.or_else(|| of_pod.clone().next()).is_some_and(|v| {
        !v.event.eq(&testkit::recorder::PodEvent::Deleted) && v.has_label(ROLE, LEADER)
    })
}

/// The p-th percentile (0-100, nearest rank) of `values`.
pub fn percentile(values: &[Duration], p: usize) -> Duration {
    let mut sorted = values.to_vec();
    sorted.sort();
    let rank = (p * sorted.len()).div_ceil(100).max(1);
    sorted.get(rank - 1).copied().unwrap_or_default()
}

/// Prints one line per failover and p50/p99 over them, tagged `scenario`.
pub fn report(scenario: &str, runs: &[Failover]) {
    for (i, run) in runs.iter().enumerate() {
        println!(
            "CLIENT_FAILOVER {scenario} run={} new_leader_answers_after={:?} unanswered={:?} \
             failed={} wrong={} wrong_window={:?}",
            i + 1,
            run.to_new_leader,
            run.unanswered,
            run.failed,
            run.wrong,
            run.wrong_window
        );
    }
    let to_new: Vec<Duration> = runs.iter().map(|r| r.to_new_leader).collect();
    let unanswered: Vec<Duration> = runs.iter().map(|r| r.unanswered).collect();
    println!(
        "CLIENT_FAILOVER_SUMMARY {scenario} runs={} new_leader_p50={:?} new_leader_p99={:?} \
         unanswered_p50={:?} unanswered_p99={:?} wrong_total={} wrong_window_max={:?}",
        runs.len(),
        percentile(&to_new, 50),
        percentile(&to_new, 99),
        percentile(&unanswered, 50),
        percentile(&unanswered, 99),
        runs.iter().map(|r| r.wrong).sum::<usize>(),
        runs.iter()
            .map(|r| r.wrong_window)
            .max()
            .unwrap_or_default(),
    );
}
