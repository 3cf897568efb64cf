//! One election's reconcile over the pod world, driven as the controller drives its machine:
//! each request answered, each step performed with the reconcile's faults.

use std::fmt::Write as _;
use std::time::Duration;

use super::{Pod, Registered, Shared, owner};
use crate::election::config::{LabelConfig, Mode};
use crate::election::first_look::{Adopting, Look, SessionRead};
use crate::election::machine::{Do, Next, Opening, Start};
use crate::election::observe::{LockView, SessionHealth};
use crate::election::plan::Action;
use crate::election::plan_loop::{Answer, World as PlanWorld};
use crate::election::pod_patch::{PodPatch, PodRole};
use crate::election::report;
use crate::election::session_names::session_name;
use crate::election::status_change::{Facts, StatusChange};
use crate::election::tests::support::{applied_of, mono, spec_valid, t};
use crate::election::unusable::LockFacts;
use crate::election::withdrawal::{Performed, SessionToEnd, Step};

impl Shared {
    /// One reconcile of election `e`, driven as the controller drives it; returns when its
    /// last plan asks to look again.
    pub(super) fn reconcile(&mut self, e: usize, mut faults: Faults) -> Option<Duration> {
        let start = Start {
            spec: Ok(()),
            served_elsewhere: None,
            paused: false,
            token_secret: false,
            deleted: self.sims[e].deleted,
        };
        self.sims[e].machine.begin(start);
        let mut lock = LockView::Unknown;
        // As the controller: a failed step fails the reconcile, and a deleted election's
        // finalizer goes only with a reconcile that succeeded.
        let mut failed = false;
        loop {
            let next = self.sims[e].machine.poll();
            match next {
                Next::Gather(input) => {
                    let found = self.gather(e, input);
                    self.sims[e].machine.gathered(found);
                }
                Next::Do(step) => {
                    let _ = writeln!(self.trace, "   {} step {step:?}", self.sims[e].name);
                    if let Do::Report(back) = &step {
                        self.write(e, StatusChange::StandBack(back));
                        self.see(&format!("stood back: {:?}", back.reason));
                    }
                    if matches!(step, Do::Forget) {
                        self.sims[e].registered = None;
                    }
                    if matches!(step, Do::Wake(_))
                        && self.sims[e].machine.why().contains("waiting for a younger")
                    {
                        self.see("waited for a younger election's leader label to go");
                    }
                    self.sims[e].machine.done();
                }
                Next::Judge => {
                    // Rule 2 while the election waits: the world's Consul always answers.
                    let sim = &self.sims[e];
                    let facts = LockFacts {
                        lock: self.lock_view(e),
                        read_at: Some(mono(self.now)),
                        held: self.session_view(e),
                        recorded_session: sim
                            .status
                            .leader_or_last()
                            .and_then(|l| l.session_id.clone()),
                        applied_ttl: Some(sim.config.session.ttl),
                        started_at: mono(t(1000)),
                        now: mono(self.now),
                    };
                    self.sims[e].machine.judged(&facts);
                }
                Next::Left => {
                    let left = self.left(e);
                    self.sims[e].machine.left(left);
                }
                Next::Withdraw(step) => {
                    let performed = self.withdraw(e, &step, &mut faults);
                    failed |= performed == Performed::Failed;
                    self.sims[e].machine.withdrew(performed);
                }
                Next::GiveUp(_) => {
                    failed = false;
                    self.sims[e].registered = None;
                }
                Next::RetryConsul(after) => return Some(after),
                Next::Open => {
                    let sim = &self.sims[e];
                    let opening = Opening {
                        recorded: report::recorded(&sim.status),
                        switchover: None,
                        removal_failed: false,
                        adopting: Adopting {
                            election: sim.key(),
                            mode: Mode::Managed,
                            holds_session: sim.registered.is_some(),
                            recorded_settings: None,
                            spec_settings: sim.config.session,
                            owner: owner(),
                        },
                    };
                    self.sims[e].machine.opened(opening);
                }
                Next::Look(look) => self.look(e, look, &mut lock),
                Next::Observe => {
                    let views = self.views(e);
                    let session = self.session_view(e);
                    let sim = &self.sims[e];
                    let config = sim.config.clone();
                    let now = mono(self.now);
                    let plan = self.sims[e].machine.plan(&PlanWorld {
                        config: &config,
                        pods: &views,
                        lock: &lock,
                        session: session.as_ref(),
                        lock_confirmed_at: now,
                        now,
                        wall: self.now,
                        owner: &owner(),
                    });
                    let actions = plan.map(|p| p.actions.clone()).unwrap_or_default();
                    let _ = writeln!(self.trace, "   {} plan {actions:?}", self.sims[e].name);
                }
                Next::Act(action) => {
                    let answer = self.act(e, &action, &mut faults);
                    failed |= answer == Answer::Failed;
                    self.sims[e].machine.handle(answer, mono(self.now));
                }
                Next::WriteStatus => {
                    self.write_status(e);
                    self.sims[e].machine.status_written();
                }
                Next::Stop(_) => {
                    if self.sims[e].deleted && !failed {
                        self.sims[e].finalized = true;
                        let _ = writeln!(self.trace, "   {} finalized", self.sims[e].name);
                    }
                    break;
                }
            }
        }
        self.sims[e]
            .machine
            .end()
            .and_then(|plan| plan.requeue_after)
    }

    fn look(&mut self, e: usize, look: Look, lock: &mut LockView) {
        match look {
            Look::ReadKey(_) => {
                *lock = self.lock_view(e);
                self.sims[e].machine.key_read(Ok(lock.clone()));
            }
            Look::ReadSession(id) => {
                let read = match (self.sessions.get(&id), &self.sims[e].registered) {
                    (Some(_), Some(r)) if r.id == id => SessionRead::Found {
                        name: session_name(&owner(), &self.sims[e].key(), &r.pod),
                        settings: crate::election::adoption::FoundSettings {
                            ttl: Some(self.sims[e].config.session.ttl),
                            lock_delay: self.sims[e].config.session.lock_delay,
                            behavior: self.sims[e].config.session.behavior,
                        },
                    },
                    _ => SessionRead::Missing,
                };
                self.sims[e].machine.session_read(read);
            }
            Look::Adopt { .. } => self.sims[e].machine.adopted(Ok(false)),
        }
    }

    /// Performs `action` of election `e` and answers for it.
    fn act(&mut self, e: usize, action: &Action, faults: &mut Faults) -> Answer {
        let in_process = matches!(action, Action::ForgetSession | Action::Emit(_));
        let (executed, failing) = faults.next(in_process);
        let before = self.leaders_per_election();
        let answer = if executed {
            self.perform(e, action)
        } else {
            Some(Answer::Failed)
        };
        let answer = match answer {
            Some(answer) if !failing => answer,
            _ => Answer::Failed,
        };
        let _ = writeln!(
            self.trace,
            "   {} {} {action:?}",
            self.sims[e].name,
            if answer == Answer::Failed {
                "FAIL"
            } else {
                "ok  "
            }
        );
        self.check_step(&before, &format!("{} {action:?}", self.sims[e].name));
        answer
    }

    /// Carries out `action` of election `e`; `None` when it could not be (a pod patch for an
    /// incarnation that is gone).
    fn perform(&mut self, e: usize, action: &Action) -> Option<Answer> {
        match action {
            Action::RecordToken {
                uid,
                fencing_token,
                whole,
            } => {
                let plan = self.sims[e].machine.last_plan().cloned()?;
                let spec_valid = spec_valid();
                self.write(
                    e,
                    StatusChange::Token {
                        plan: &plan,
                        uid,
                        token: *fencing_token,
                        whole: *whole,
                        spec_valid: &spec_valid,
                    },
                );
                let recorded = report::recorded(&self.sims[e].status);
                Some(Answer::StatusWritten(Box::new(recorded)))
            }
            Action::CreateSession { pod, uid } => {
                self.writes += 1;
                self.next_session += 1;
                let id = format!("s{}", self.next_session);
                self.sessions.insert(id.clone(), e);
                self.sims[e].registered = Some(Registered {
                    id,
                    pod: pod.clone(),
                    pod_uid: uid.clone(),
                    health: SessionHealth::Alive {
                        renewed_at: mono(self.now),
                    },
                });
                Some(Answer::Done)
            }
            Action::ConfirmSession { session } | Action::Acquire { session, .. }
                if !self.sessions.contains_key(session) =>
            {
                // Consul answered `invalid session`: the operator marks its session lost.
                if let Some(r) = self.sims[e]
                    .registered
                    .as_mut()
                    .filter(|r| r.id == *session)
                {
                    r.health = SessionHealth::Lost;
                }
                Some(Answer::SessionGone)
            }
            Action::ConfirmSession { .. } => Some(Answer::Done),
            Action::DestroySession { session } => {
                self.end_session(e, session);
                Some(Answer::Done)
            }
            Action::ForgetSession => {
                self.sims[e].registered = None;
                Some(Answer::Done)
            }
            Action::Acquire { session, .. } => {
                self.writes += 1;
                let sim = &mut self.sims[e];
                let acquired = match &sim.holder {
                    None => {
                        sim.lock_index += 1;
                        sim.holder = Some(session.clone());
                        true
                    }
                    Some(holder) => holder == session,
                };
                Some(Answer::Acquired(acquired))
            }
            Action::Release { session } => {
                let sim = &mut self.sims[e];
                if sim.holder.as_ref() == Some(session) {
                    sim.holder = None;
                }
                Some(Answer::Released)
            }
            Action::Emit(_) | Action::RecordSwitchover { .. } => Some(Answer::Done),
            Action::ClearSwitchover { .. } => Some(Answer::RequestCleared),
            Action::LabelFollower { .. }
            | Action::Unlabel { .. }
            | Action::LabelLeader { .. }
            | Action::AnnotateHandover { .. }
            | Action::ClearHandover { .. } => {
                let sim = &self.sims[e];
                let shared = |pod: &str, to_leader: bool| {
                    let p = self.pods.iter().find(|p| p.name == pod)?;
                    Some(self.shared(e, p, to_leader))
                };
                let patch = PodPatch::of(action, &sim.config.labels, &sim.name, shared)?;
                self.apply_patch(&patch).then_some(Answer::Done)
            }
        }
    }

    /// Consul no longer has `session` of election `e` (destroyed): its key is released.
    fn end_session(&mut self, e: usize, session: &str) {
        if self.sessions.remove(session).is_some() {
            self.writes += 1;
        }
        let sim = &mut self.sims[e];
        if sim.holder.as_deref() == Some(session) {
            sim.holder = None;
        }
        if sim.registered.as_ref().is_some_and(|r| r.id == session) {
            sim.registered = None;
        }
    }

    /// Performs withdrawal `step` of election `e` (`cleanup::Withdrawer::perform`).
    fn withdraw(&mut self, e: usize, step: &Step, faults: &mut Faults) -> Performed {
        let (executed, failing) = faults.next(matches!(step, Step::Forget));
        let before = self.leaders_per_election();
        let performed = if executed {
            self.perform_withdrawal(e, step)
        } else {
            Performed::Failed
        };
        let performed = match performed {
            Performed::Done | Performed::SessionNamed(_) if failing => Performed::Failed,
            performed => performed,
        };
        let _ = writeln!(
            self.trace,
            "   {} withdrawal {step:?}: {performed:?}",
            self.sims[e].name
        );
        if matches!(step, Step::Unlabel { .. }) && performed == Performed::Done {
            self.see("withdrew a label");
        }
        self.check_step(
            &before,
            &format!("{} withdrawal {step:?}", self.sims[e].name),
        );
        performed
    }

    fn perform_withdrawal(&mut self, e: usize, step: &Step) -> Performed {
        match step {
            Step::Unlabel { pod, uid } => {
                let labels = LabelConfig {
                    key: self.left(e).acted.label_key,
                    leader: String::new(),
                    follower: String::new(),
                };
                let shared = self
                    .pods
                    .iter()
                    .find(|p| p.uid == *uid)
                    .map(|p| self.shared(e, p, false));
                let name = self.sims[e].name.clone();
                let patch = PodPatch::for_role(pod, uid, &labels, &name, PodRole::None, shared);
                // A pod gone meanwhile needs nothing.
                self.apply_patch(&patch);
                Performed::Done
            }
            Step::ReadSession(id) => {
                let sim = &self.sims[e];
                let named = sim
                    .registered
                    .as_ref()
                    .filter(|r| r.id == *id && self.sessions.contains_key(id))
                    .map(|r| session_name(&owner(), &sim.key(), &r.pod));
                Performed::SessionNamed(named)
            }
            Step::Release { session } => {
                let sim = &mut self.sims[e];
                if sim.holder.as_ref() == Some(session) {
                    sim.holder = None;
                }
                Performed::Done
            }
            Step::Destroy(SessionToEnd::Held(id) | SessionToEnd::Recorded(id)) => {
                self.end_session(e, id);
                Performed::Done
            }
            Step::Forget => {
                self.sims[e].registered = None;
                Performed::Done
            }
        }
    }

    /// Renders `change` on election `e`'s status as the controller does
    /// ([`StatusChange::render`]) and writes it.
    fn write(&mut self, e: usize, change: StatusChange<'_>) {
        let sim = &self.sims[e];
        let facts = Facts {
            generation: Some(1),
            applied: Some(applied_of(&sim.config)),
            mode: Some(sim.config.mode),
            lease_timing: None,
            failed_writes: None,
            now: self.now,
        };
        self.sims[e].status = change.render(&sim.status, &facts).status;
    }

    fn write_status(&mut self, e: usize) {
        let Some(plan) = self.sims[e].machine.last_plan().cloned() else {
            return;
        };
        let sim = &self.sims[e];
        let leaders: Vec<&Pod> = self
            .pods
            .iter()
            .filter(|p| sim.leads(p) && self.labelled_by(sim, p))
            .collect();
        let labelled = match leaders[..] {
            [one] => Some(one.uid.clone()),
            _ => None,
        };
        let spec_valid = spec_valid();
        let decided = StatusChange::Decided {
            plan: &plan,
            labelled: labelled.as_deref(),
            spec_valid: &spec_valid,
        };
        self.write(e, decided);
    }
}

/// The failures of one reconcile: the `fail_at`-th write fails.
pub(super) struct Faults {
    fail_at: Option<usize>,
    after_effect: bool,
    index: usize,
}

impl Faults {
    pub(super) fn new(fail_at: Option<usize>, after_effect: bool) -> Self {
        Faults {
            fail_at,
            after_effect,
            index: 0,
        }
    }

    /// Whether the next step takes effect, and whether it reports a failure; a step within
    /// the operator's process cannot fail.
    fn next(&mut self, in_process: bool) -> (bool, bool) {
        if in_process {
            return (true, false);
        }
        let failing = self.fail_at == Some(self.index);
        self.index += 1;
        (!failing || self.after_effect, failing)
    }
}
