//! The scenario: six steps, each changing one thing and waiting for the state docs/design.md
//! promises, measuring how long the operator took. The first step that does not reach its
//! state in time ends the scenario; the report says which and what was seen instead.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::DeleteParams;

use super::objects::{
    self, ANY_OTHER_POD, APP, FOLLOWER, NAMESPACE, OPERATOR_ANNOTATION_PREFIX, ROLE_LABEL,
    SESSION_TTL, SWITCHOVER_ANNOTATION, SWITCHOVER_COMPLETED,
};
use super::report::{Report, StepFailure};
use super::setup::Sandbox;
use super::snapshot::Snapshot;
use super::timeline::{describe, duration, short};
use crate::recorder::PodVersion;

/// Creating the election → a settled leader (includes the operator's start-up).
const ELECTION_TIMEOUT: Duration = Duration::from_secs(30);
/// A failover the operator decides → the successor labelled.
const FAILOVER_TIMEOUT: Duration = Duration::from_secs(15);
/// A labelled successor → the election at rest (replacement pod labelled, status written).
const SETTLE_TIMEOUT: Duration = Duration::from_secs(20);
/// Consul unreachable → leader label removed: a TTL without confirmation, plus slack.
const FENCE_TIMEOUT: Duration = Duration::from_secs(2 * SESSION_TTL.as_secs() + 5);
/// Consul back → the same leader labelled again.
const RECOVERY_TIMEOUT: Duration = Duration::from_secs(15);
/// The restarted operator → its first renewal of the adopted session.
const ADOPTION_TIMEOUT: Duration = Duration::from_secs(20);
/// How long the operator stays dead (the session outlives it by 2×TTL).
const OPERATOR_DOWN: Duration = Duration::from_secs(2);
/// After the adoption, how long the sandbox keeps watching for label changes.
const QUIET: Duration = Duration::from_secs(2);
/// How often the session's renewal mark is read.
const POLL: Duration = Duration::from_millis(100);

/// Runs the scenario against `sandbox` and returns what it measured.
pub(crate) async fn run(sandbox: &mut Sandbox) -> Report {
    let mut scenario = Scenario {
        sandbox,
        report: Report::default(),
    };
    if let Err(failure) = scenario.steps().await {
        let operator = scenario.sandbox.operator.state();
        let reason = format!("{}\n  operator process: {operator}", failure.reason);
        scenario.report.failure = Some(StepFailure { reason, ..failure });
    }
    let Scenario {
        sandbox,
        mut report,
    } = scenario;
    sandbox.observer.set_step("done");
    report.transitions = sandbox
        .observer
        .current()
        .election
        .and_then(|election| election.transitions);
    let recorder = &sandbox.recorder;
    report.max_leaders = recorder.max_simultaneous(ROLE_LABEL, objects::LEADER);
    report.pod_versions = recorder.versions().len();
    report.history_gaps = recorder.gaps();
    report
}

/// The operator's marks on a pod: its role label and its `elector.dev/` annotations.
type Marks = (Option<String>, BTreeMap<String, String>);

fn marks(version: &PodVersion) -> Marks {
    let annotations = version
        .annotations
        .iter()
        .filter(|(key, _)| key.starts_with(OPERATOR_ANNOTATION_PREFIX))
        .map(|(key, value)| (key.clone(), value.clone()))
        .collect();
    (version.labels.get(ROLE_LABEL).cloned(), annotations)
}

struct Scenario<'a> {
    sandbox: &'a mut Sandbox,
    report: Report,
}

impl Scenario<'_> {
    async fn steps(&mut self) -> Result<(), StepFailure> {
        let leader = self.initial_election().await?;
        let leader = self.delete_leader(&leader).await?;
        let leader = self.leader_not_ready(&leader).await?;
        let leader = self.switchover(&leader).await?;
        self.consul_outage(&leader).await?;
        self.operator_restart(&leader).await
    }

    /// Prints the step's title and names it on the following timeline rows.
    fn begin(&self, number: u8, step: &'static str, title: &str) {
        let style = self.sandbox.style;
        println!("{}", style.bold(&format!("[{number}] {title}")));
        self.sandbox.observer.set_step(step);
    }

    /// Prints a result line.
    fn passed(&self, text: &str) {
        println!("    {} {text}", self.sandbox.style.good("✓"));
    }

    /// Prints what the sandbox does next, within a step.
    fn act(&self, step: &'static str, text: &str) {
        println!("    {} {text}", self.sandbox.style.bold("→"));
        self.sandbox.observer.set_step(step);
    }

    /// Waits until `decide` returns something, or fails `step` saying `expected`.
    async fn expect<T>(
        &self,
        step: &'static str,
        expected: &str,
        timeout: Duration,
        decide: impl FnMut(&Snapshot) -> Option<T>,
    ) -> Result<T, StepFailure> {
        self.sandbox
            .observer
            .wait_for(timeout, decide)
            .await
            .map_err(|last| StepFailure {
                step,
                reason: format!(
                    "expected {expected} within {timeout:?}; last observed: {}",
                    describe(&last)
                ),
            })
    }

    /// Waits for a pod other than `old` to be labelled leader (returning when that was seen),
    /// then for the election to come to rest (returning the leader).
    async fn successor(
        &self,
        step: &'static str,
        old: &str,
    ) -> Result<(Instant, String), StepFailure> {
        let labelled = self
            .expect(step, "another pod labelled leader", FAILOVER_TIMEOUT, |s| {
                s.sole_leader().filter(|p| p.name != old).map(|_| s.at)
            })
            .await?;
        let leader = self.settled(step).await?;
        Ok((labelled, leader))
    }

    /// Waits until the election is at rest and returns its leader.
    async fn settled(&self, step: &'static str) -> Result<String, StepFailure> {
        self.expect(
            step,
            "the election at rest (3 pods, one Ready leader named by the status, the others \
             followers, phase Elected)",
            SETTLE_TIMEOUT,
            |s| s.settled_leader().map(|p| p.name.clone()),
        )
        .await
    }

    fn token(&self) -> String {
        let election = self.sandbox.observer.current().election;
        election
            .and_then(|e| e.token)
            .map_or_else(|| "none".to_owned(), |t| t.to_string())
    }

    /// `status.leader.sessionID`.
    fn session(&self) -> Option<String> {
        self.sandbox.observer.current().election?.session
    }

    async fn initial_election(&mut self) -> Result<String, StepFailure> {
        const STEP: &str = "1 elect";
        self.begin(
            1,
            STEP,
            "initial election: create LeaderElection web (selects app=web; session ttl 10s, \
             lockDelay 1s)",
        );
        let created = Instant::now();
        objects::create_election(&self.sandbox.client)
            .await
            .map_err(|error| StepFailure {
                step: STEP,
                reason: error.to_string(),
            })?;
        let labelled = self
            .expect(STEP, "a pod labelled leader", ELECTION_TIMEOUT, |s| {
                s.sole_leader().map(|_| s.at)
            })
            .await?;
        let leader = self.settled(STEP).await?;
        let latency = labelled.saturating_duration_since(created);
        self.report.initial_election = Some(latency);
        self.passed(&format!(
            "{} labelled leader {} after the LeaderElection was created (fencing token {})",
            short(&leader),
            duration(latency),
            self.token()
        ));
        Ok(leader)
    }

    async fn delete_leader(&mut self, leader: &str) -> Result<String, StepFailure> {
        const STEP: &str = "2 delete leader";
        self.begin(2, STEP, &format!("the leader pod {leader} is deleted"));
        let pods: Api<Pod> = Api::namespaced(self.sandbox.client.clone(), NAMESPACE);
        let deleted = Instant::now();
        pods.delete(leader, &DeleteParams::default())
            .await
            .map_err(|error| StepFailure {
                step: STEP,
                reason: format!("cannot delete pod {leader}: {error}"),
            })?;
        let (labelled, successor) = self.successor(STEP, leader).await?;
        let latency = labelled.saturating_duration_since(deleted);
        self.report.deletion_failover = Some(latency);
        self.passed(&format!(
            "{} labelled leader {} after the deletion (token {}); the Deployment's replacement \
             pod joined as {FOLLOWER}",
            short(&successor),
            duration(latency),
            self.token()
        ));
        Ok(successor)
    }

    async fn leader_not_ready(&mut self, leader: &str) -> Result<String, StepFailure> {
        const STEP: &str = "3 leader NotReady";
        self.begin(3, STEP, &format!("the leader {leader} goes NotReady"));
        let not_ready = Instant::now();
        self.sandbox.simulator.set_ready(leader, false).await;
        let (labelled, successor) = self.successor(STEP, leader).await?;
        let latency = labelled.saturating_duration_since(not_ready);
        self.report.not_ready_failover = Some(latency);
        self.passed(&format!(
            "{} labelled leader {} after {} went NotReady (failover.delay 0s; token {})",
            short(&successor),
            duration(latency),
            short(leader),
            self.token()
        ));

        const READY: &str = "3 Ready again";
        self.act(READY, &format!("{} becomes Ready again", short(leader)));
        self.sandbox.simulator.set_ready(leader, true).await;
        self.expect(
            READY,
            &format!("{leader} Ready and a follower, {successor} still leader"),
            SETTLE_TIMEOUT,
            |s| {
                let back = s
                    .pod(leader)
                    .is_some_and(|p| p.ready && p.role.as_deref() == Some(FOLLOWER));
                let sticky = s.settled_leader().is_some_and(|p| p.name == successor);
                (back && sticky).then_some(())
            },
        )
        .await?;
        self.passed(&format!(
            "{} is Ready again and stays follower: a leader keeps leading while eligible",
            short(leader)
        ));
        Ok(successor)
    }

    async fn switchover(&mut self, leader: &str) -> Result<String, StepFailure> {
        const STEP: &str = "4 switchover";
        self.begin(
            4,
            STEP,
            &format!(
                "a switchover is requested: LeaderElection {APP} annotated \
                 {SWITCHOVER_ANNOTATION}: \"{ANY_OTHER_POD}\""
            ),
        );
        objects::request_switchover(&self.sandbox.client, NAMESPACE, APP, ANY_OTHER_POD)
            .await
            .map_err(|error| StepFailure {
                step: STEP,
                reason: error.to_string(),
            })?;
        let requested = Instant::now();
        let (labelled, successor) = self.successor(STEP, leader).await?;
        let latency = labelled.saturating_duration_since(requested);
        self.report.switchover = Some(latency);
        self.passed(&format!(
            "{} labelled leader {} after the request (token {}); {} stays Ready as a \
             {FOLLOWER}",
            short(&successor),
            duration(latency),
            self.token(),
            short(leader)
        ));
        self.expect(
            STEP,
            &format!(
                "the annotation removed and status.lastSwitchover {SWITCHOVER_COMPLETED} with \
                 leader {successor}"
            ),
            SETTLE_TIMEOUT,
            |s| {
                let switchover = &s.election.as_ref()?.switchover;
                let leader = switchover.last.leader.as_deref();
                (switchover.decided(ANY_OTHER_POD) == Some(SWITCHOVER_COMPLETED)
                    && leader == Some(successor.as_str()))
                .then_some(())
            },
        )
        .await?;
        self.passed(&format!(
            "the request is decided: the operator removed the annotation and recorded \
             lastSwitchover {SWITCHOVER_COMPLETED} ({} -> {})",
            short(leader),
            short(&successor)
        ));
        Ok(successor)
    }

    async fn consul_outage(&mut self, leader: &str) -> Result<(), StepFailure> {
        const STEP: &str = "5 Consul down";
        self.begin(
            5,
            STEP,
            &format!(
                "Consul becomes unreachable (every connection dropped) for longer than the TTL \
                 ({}s)",
                SESSION_TTL.as_secs()
            ),
        );
        let (token_before, session_before) = (self.token(), self.session());
        let consul = &self.sandbox.consul;
        let cut = consul.cut();
        let cut_at = Instant::now();
        let fenced = self
            .expect(
                STEP,
                "no pod labelled leader (onConsulUnavailable: Fence)",
                FENCE_TIMEOUT,
                |s| s.leaders().next().is_none().then_some(s.at),
            )
            .await;
        let fenced = match fenced {
            Ok(fenced) => fenced,
            Err(failure) => {
                consul.restore(cut);
                return Err(failure);
            }
        };
        let fenced_after = fenced.saturating_duration_since(cut_at);
        self.report.fenced_after = Some(fenced_after);
        let phase = self
            .expect(STEP, "phase Fenced", SETTLE_TIMEOUT, |s| {
                (s.phase() == Some("Fenced")).then_some(())
            })
            .await;
        consul.restore(cut);
        phase?;
        self.passed(&format!(
            "leader label removed {} after Consul became unreachable: the lock went a TTL \
             without confirmation; phase Fenced",
            duration(fenced_after)
        ));

        const BACK: &str = "5 Consul back";
        self.act(BACK, "Consul is reachable again");
        let back = Instant::now();
        let labelled = self
            .expect(
                BACK,
                &format!("{leader} labelled leader again"),
                RECOVERY_TIMEOUT,
                |s| s.sole_leader().filter(|p| p.name == leader).map(|_| s.at),
            )
            .await?;
        let settled = self.settled(BACK).await?;
        if settled != leader {
            return Err(StepFailure {
                step: BACK,
                reason: format!("expected {leader} to lead again, but {settled} leads"),
            });
        }
        let recovered = labelled.saturating_duration_since(back);
        self.report.recovered_after = Some(recovered);
        let session = if self.session() == session_before {
            "the same session, which outlived the outage"
        } else {
            "a new session"
        };
        let token_after = self.token();
        let token = if token_after == token_before {
            format!("fencing token {token_after} unchanged")
        } else {
            format!(
                "fencing token {token_before} -> {token_after} (the lock was acquired anew: \
                 one token never names two leaderships)"
            )
        };
        self.passed(&format!(
            "{} is leader again {} after Consul came back, with {session}; {token}",
            short(leader),
            duration(recovered),
        ));
        Ok(())
    }

    async fn operator_restart(&mut self, leader: &str) -> Result<(), StepFailure> {
        const STEP: &str = "6 operator killed";
        self.begin(
            6,
            STEP,
            "the operator is killed (SIGKILL) and started again",
        );
        let fail = |reason: String| StepFailure { step: STEP, reason };
        let before = self.sandbox.observer.current();
        let election = before.election.clone().unwrap_or_default();
        let session = election
            .session
            .clone()
            .ok_or_else(|| fail("the status names no Consul session".to_owned()))?;
        let deadline = |sandbox: &Sandbox| sandbox.consul.renewal_mark(&session);
        let renewed_before = deadline(self.sandbox)
            .ok_or_else(|| fail(format!("Consul has no session {session} with a TTL")))?;
        let marks_before: BTreeMap<String, Marks> = self
            .sandbox
            .recorder
            .current()
            .into_iter()
            .map(|(name, version)| (name, marks(&version)))
            .collect();

        self.sandbox.operator.kill();
        let killed = Instant::now();
        println!(
            "    {} operator killed; its Consul session lives on for 2×TTL",
            self.sandbox.style.bold("→")
        );
        tokio::time::sleep(OPERATOR_DOWN).await;
        self.sandbox
            .operator
            .restart()
            .map_err(|error| fail(error.to_string()))?;
        const RESTARTED: &str = "6 restarted";
        self.act(
            RESTARTED,
            &format!(
                "operator started again: {}",
                self.sandbox.operator.describe()
            ),
        );
        let restarted = Instant::now();
        let adopted = tokio::time::timeout(ADOPTION_TIMEOUT, async {
            while deadline(self.sandbox).is_none_or(|d| d <= renewed_before) {
                tokio::time::sleep(POLL).await;
            }
        })
        .await;
        if adopted.is_err() {
            return Err(StepFailure {
                step: RESTARTED,
                reason: format!(
                    "expected the restarted operator to renew session {session} within \
                     {ADOPTION_TIMEOUT:?}; its renewal mark is still {:?}",
                    deadline(self.sandbox)
                ),
            });
        }
        self.passed(&format!(
            "the new process adopted session {session} from the status and renewed it {} \
             after its start",
            duration(restarted.elapsed())
        ));
        tokio::time::sleep(QUIET).await;

        let changes: Vec<String> = self
            .sandbox
            .recorder
            .versions()
            .iter()
            .filter(|version| version.at >= killed)
            .filter(|version| marks_before.get(&version.name) != Some(&marks(version)))
            .map(|version| {
                format!(
                    "{} at resourceVersion {}: {:?}",
                    version.name,
                    version.resource_version,
                    marks(version)
                )
            })
            .collect();
        let after = self.sandbox.observer.current();
        let status_kept = after.election.as_ref().is_some_and(|now| {
            (&now.leader, now.token, now.transitions)
                == (&election.leader, election.token, election.transitions)
        });
        let leader_kept = after.sole_leader().is_some_and(|p| p.name == leader);
        self.report.restart_unchanged = Some(changes.is_empty() && status_kept && leader_kept);
        if !changes.is_empty() || !status_kept || !leader_kept {
            return Err(StepFailure {
                step: RESTARTED,
                reason: format!(
                    "expected no change across the restart; pod label/annotation changes: \
                     {changes:?}; before: {}; after: {}",
                    describe(&before),
                    describe(&after)
                ),
            });
        }
        self.passed(&format!(
            "no label changed across the restart: {} leads with token {}, transitions {}",
            short(leader),
            self.token(),
            election
                .transitions
                .map_or_else(|| "-".to_owned(), |n| n.to_string())
        ));
        Ok(())
    }
}
