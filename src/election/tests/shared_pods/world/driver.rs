//! One election's reconcile over the pod world, driven as the controller drives its machine:
//! each request answered, each step performed with the reconcile's faults.

use std::fmt::Write as _;
use std::time::Duration;

use super::{Pod, Registered, Shared, owner};
use crate::election::config::Mode;
use crate::election::first_look::{Adopting, SessionRead};
use crate::election::machine::{Gathered, Input, Next, Observable, Opening, Start};
use crate::election::observe::{LockView, SessionHealth};
use crate::election::plan_loop::World as PlanWorld;
use crate::election::report;
use crate::election::request::{Outcome, Request};
use crate::election::session_names::session_name;
use crate::election::status_change::{Facts, StatusChange};
use crate::election::tests::support::{applied_of, failed_outcome, mono, t};
use crate::election::unusable::LockFacts;

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
            released: false,
            acting: Some((
                self.sims[e].config.mode,
                self.sims[e].config.on_consul_unavailable,
            )),
        };
        self.sims[e].machine.begin(start);
        let mut lock = LockView::Unknown;
        // As the controller: a failed step fails the reconcile, and a deleted election's
        // finalizer goes only with a reconcile that succeeded.
        let mut failed = false;
        loop {
            let next = self.sims[e].machine.poll();
            match next {
                Next::Observe(Observable::Input(input)) => {
                    let found = self.gather(e, input);
                    self.sims[e]
                        .machine
                        .handle(Input::Gathered(Gathered::Found(found)), mono(self.now));
                }
                Next::Perform(request) => {
                    let outcome = self.execute(e, &request, &mut faults, &mut lock);
                    let reported = self.sims[e]
                        .machine
                        .handle(Input::Outcome(outcome), mono(self.now));
                    failed |= reported.failed;
                }
                Next::Observe(Observable::Lock) => {
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
                    self.sims[e]
                        .machine
                        .handle(Input::Lock(facts), mono(self.now));
                }
                Next::Observe(Observable::Left) => {
                    let left = self.left(e);
                    self.sims[e]
                        .machine
                        .handle(Input::Left(left), mono(self.now));
                }
                Next::GiveUp(_) => {
                    failed = false;
                    self.sims[e].registered = None;
                }
                Next::RetryConsul(after) => return Some(after),
                Next::Observe(Observable::Await(_)) => {
                    panic!("the world's admission inputs answer at once")
                }
                Next::Observe(Observable::Opening) => {
                    let sim = &self.sims[e];
                    let opening = Opening {
                        recorded: report::recorded(&sim.status),
                        switchover: None,
                        version: None,
                        adopting: Adopting {
                            election: sim.key(),
                            mode: Mode::Managed,
                            holds_session: sim.registered.is_some(),
                            recorded_settings: None,
                            spec_settings: sim.config.session,
                            owner: owner(),
                        },
                    };
                    self.sims[e]
                        .machine
                        .handle(Input::Opening(opening), mono(self.now));
                }
                Next::Observe(Observable::World) => {
                    let views = self.views(e);
                    let session = self.session_view(e);
                    let sim = &self.sims[e];
                    let config = sim.config.clone();
                    let now = mono(self.now);
                    self.sims[e].machine.handle(
                        Input::World(PlanWorld {
                            config: &config,
                            pods: &views,
                            lock: &lock,
                            session: session.as_ref(),
                            lock_confirmed_at: now,
                            now,
                            wall: self.now,
                            owner: &owner(),
                        }),
                        mono(self.now),
                    );
                    let plan = self.sims[e].machine.last_plan();
                    let actions = plan.map(|p| p.actions.clone()).unwrap_or_default();
                    let _ = writeln!(self.trace, "   {} plan {actions:?}", self.sims[e].name);
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

    /// Performs `request` of election `e` against the world with the reconcile's `faults`, as
    /// the controller's executor performs it (`lock`: the key as the reconcile last read it).
    fn execute(
        &mut self,
        e: usize,
        request: &Request,
        faults: &mut Faults,
        lock: &mut LockView,
    ) -> Outcome {
        let (executed, failing) = faults.next(request.in_process());
        let before = self.leaders_per_election();
        let cause = format!("{:?}", self.sims[e].machine.cause());
        let outcome = match executed {
            true => self.perform(e, request, lock),
            false => failed_outcome(request),
        };
        let outcome = if failing {
            failed_outcome(request)
        } else {
            outcome
        };
        let name = &self.sims[e].name;
        let _ = writeln!(self.trace, "   {name} {request:?} ({cause}): {outcome:?}");
        self.check_step(&before, &format!("{name} {request:?} ({cause})"));
        outcome
    }

    /// Carries out `request` of election `e`.
    fn perform(&mut self, e: usize, request: &Request, lock: &mut LockView) -> Outcome {
        match request {
            Request::PatchPod { patch, replans } => {
                if !self.apply_patch(patch) {
                    return Outcome::Gone;
                }
                if !replans {
                    self.see("withdrew a label");
                }
                Outcome::Done
            }
            Request::WriteStatus(change) => {
                if let StatusChange::StandBack(back) = change {
                    self.see(&format!("stood back: {:?}", back.reason));
                }
                self.write(e, change);
                Outcome::StatusWritten(Box::new(report::recorded(&self.sims[e].status)))
            }
            Request::ReadKey(_) => {
                *lock = self.lock_view(e);
                Outcome::Key(Ok(lock.clone()))
            }
            Request::ReadSession { session, .. } => {
                let sim = &self.sims[e];
                let read = match (self.sessions.get(session), &sim.registered) {
                    (Some(_), Some(r)) if r.id == *session => SessionRead::Found {
                        name: session_name(&owner(), &sim.key(), &r.pod),
                        settings: crate::election::adoption::FoundSettings {
                            ttl: Some(sim.config.session.ttl),
                            lock_delay: sim.config.session.lock_delay,
                            behavior: sim.config.session.behavior,
                        },
                    },
                    _ => SessionRead::Missing,
                };
                Outcome::Session(read)
            }
            Request::AdoptSession { .. } => Outcome::Adopted(false),
            Request::CreateSession { pod, uid } => {
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
                Outcome::Done
            }
            Request::RenewSession(session) | Request::Acquire { session, .. }
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
                Outcome::SessionGone
            }
            Request::RenewSession(_) => Outcome::Done,
            Request::DestroySession { recorded, .. } => {
                let held = self.sims[e].registered.as_ref().map(|r| r.id.clone());
                if let Some(id) = recorded.clone().or(held) {
                    self.end_session(e, &id);
                }
                Outcome::Done
            }
            Request::ForgetSession => {
                self.sims[e].registered = None;
                Outcome::Done
            }
            Request::Acquire { session, .. } => {
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
                Outcome::Acquired(acquired)
            }
            Request::Release { session, .. } => {
                let sim = &mut self.sims[e];
                if sim.holder.as_ref() == Some(session) {
                    sim.holder = None;
                }
                Outcome::Done
            }
            Request::Wake(_) => {
                if self.sims[e].machine.why().contains("waiting for a younger") {
                    self.see("waited for a younger election's leader label to go");
                }
                Outcome::Done
            }
            Request::ClearRequest(_)
            | Request::Publish(_)
            | Request::Watch
            | Request::Unwatch
            | Request::RemoveFinalizer => Outcome::Done,
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

    /// Renders `change` on election `e`'s status as the controller does
    /// ([`StatusChange::render`]) and writes it.
    fn write(&mut self, e: usize, change: &StatusChange) {
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
        let facts = Facts {
            generation: Some(1),
            applied: Some(applied_of(&sim.config)),
            mode: Some(sim.config.mode),
            lease_timing: None,
            labelled,
            now: self.now,
        };
        self.sims[e].status = change.render(&sim.status, &facts).status;
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
