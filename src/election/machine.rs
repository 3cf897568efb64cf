//! One election as a sans-IO machine: everything its decisions carry from one reconcile to the
//! next ([`ElectionMemory`]), and each reconcile from its first question to when to look
//! again, as one sequence of requests the driver answers.
//!
//! A reconcile runs [`Reconcile`] (may the operator act, and what comes before planning;
//! a withdrawal it decides runs as the [`Withdrawal`]'s steps, with rule 7's bound on
//! Consul; while an input it gathers is awaited, rule 2 still takes the leader label off when
//! due), then the [`PlanLoop`] (its first look, the plans and their actions), then the
//! status write, and stops with when to look again. A deletion is a reconcile that only
//! withdraws ([`Start::deleted`]), and so is a release by an uninstall that keeps the object,
//! which then takes the finalizer off ([`Start::released`]). The driver (the controller against the API server and
//! Consul, the property tests against their simulated worlds) observes what the machine asks
//! for, performs each [`Request`] as it is and reports its [`Outcome`]; it never decides which
//! request follows, nor what an outcome means:
//!
//! ```text
//! election.begin(start);
//! loop {
//!     match election.poll() {
//!         Next::Observe(what) => {
//!             let input = observe(what); // Input::Gathered, Lock, Left, Opening or World
//!             election.handle(input, now());
//!         }
//!         Next::Perform(request) => {
//!             let (outcome, error) = perform(request);
//!             let reported = election.handle(Input::Outcome(outcome), now());
//!             publish(reported.event);
//!             if reported.failed { keep(error) }
//!         }
//!         Next::GiveUp(give_up) => forget_the_session_and_warn(give_up, kept_error()),
//!         Next::RetryConsul(after) => break fail_and_retry(kept_error(), after),
//!         Next::Stop(look_again) => break kept_error().map_or(requeue(look_again), fail),
//!     }
//! }
//! ```

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use jiff::Timestamp;
use tokio::time::Instant;

use super::admission;
use super::config::{Mode, UnavailablePolicy};
use super::first_look::{Adopting, LeftAlone, Look, SessionRead};
use super::look_again;
use super::memory::ElectionMemory;
use super::observe::{NotReadySince, Recorded};
use super::plan::{Action, ConditionState, ElectionEvent, Plan};
use super::plan_loop::{self, Answer, Elected, PlanLoop, World};
use super::reconcile::{self, Found, Reconcile, Step};
use super::request::{self, Acting, ActionKind, Outcome, Request, Via};
use super::status_change::StatusChange;
use super::switchover_request::{self, RequestStep};
use super::unusable::{LockFacts, UnusableLabel, unusable_label, waiting_label};
use super::withdrawal::{self, Performed, Sessions, Withdrawal};

mod withdrawing;

pub use withdrawing::{ConsulWait, GiveUp, Left};
use withdrawing::{Then, Withdrawing};

/// How many plans with actions one reconcile may make (a move takes three; raising a
/// re-created key's LockIndex takes one per step).
pub const MAX_PLANS: usize = 16;

/// What a reconcile starts from: the election's object as the driver read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Start {
    /// The spec's validation (`Err`: the `SpecValid` condition that says why not).
    pub spec: Result<(), ConditionState>,
    /// The other install the status names as serving the election
    /// ([`super::admission::served_elsewhere`]).
    pub served_elsewhere: Option<String>,
    /// The election is paused.
    pub paused: bool,
    /// It reads its Consul token from a Secret (which nothing watches).
    pub token_secret: bool,
    /// It is being deleted: the reconcile only withdraws it (rule 7).
    pub deleted: bool,
    /// Its install is being uninstalled and keeps the users' objects: the reconcile only
    /// withdraws it (rule 7) and takes the finalizer off ([`Reconcile::released`]).
    pub released: bool,
    /// The spec's mode and its policy for an unavailable Consul (`None`: the spec is
    /// invalid): how rule 2 judges the leader label while an input is awaited
    /// ([`waiting_label`]).
    pub acting: Option<(Mode, UnavailablePolicy)>,
}

/// An admission input as the driver gathered it for [`Observable::Input`] or
/// [`Observable::Await`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Gathered {
    /// The input.
    Found(Found),
    /// It is still awaited (a read that waits for the API server or a Secret, or a lock that
    /// changed meanwhile): rule 2 judges the leader label while it is.
    Awaited,
    /// It could not be read: the driver keeps the failure; once rule 2 judged the leader
    /// label (and fenced it, when due), the reconcile fails with it.
    Failed,
}

/// What the plan loop starts from, read once the operator may act ([`Observable::Opening`]).
#[derive(Debug, Clone)]
pub struct Opening {
    /// The status as this process knows it now.
    pub recorded: Recorded,
    /// The switchover request on the election, if any: with what this process remembers of
    /// a request it decided ([`super::switchover_request::DecidedRequest`]),
    /// [`switchover_request::step`] decides whether the plans decide it, or a request decided
    /// before is removed again first.
    pub switchover: Option<String>,
    /// The resourceVersion of the election's copy the request was read from.
    pub version: Option<u64>,
    /// What the first look may adopt.
    pub adopting: Adopting,
}

/// What the driver observes for the machine ([`Next::Observe`]), to pass as the [`Input`] of the
/// same name to [`Election::handle`].
#[derive(Debug, Clone, PartialEq)]
pub enum Observable {
    /// Gather this admission input ([`Input::Gathered`]).
    Input(admission::Input),
    /// Go on waiting for the input asked for last ([`Input::Gathered`]): the input, or
    /// [`Gathered::Awaited`] after this long or once a lock changed (`Some`: rule 2 judges
    /// again then; `None`: the label is fenced, only the input is awaited).
    Await(Option<Duration>),
    /// What this process knows of the election's lock ([`Input::Lock`]): rule 2 for an
    /// election that cannot act.
    Lock,
    /// What the election left on its pods and in Consul ([`Input::Left`]).
    Left,
    /// What the plan loop starts from ([`Input::Opening`]).
    Opening,
    /// The world a plan decides from ([`Input::World`]).
    World,
}

/// What the machine is told: what the driver observed, or how a request went.
#[derive(Debug)]
pub enum Input<'a> {
    /// An admission input, for [`Observable::Input`] or [`Observable::Await`].
    Gathered(Gathered),
    /// What this process knows of the lock, for [`Observable::Lock`]: rule 2 decides whether
    /// the leader label goes ([`unusable_label`]).
    Lock(LockFacts),
    /// What the election left, for [`Observable::Left`]: its withdrawal begins.
    Left(Left),
    /// What the plan loop starts from, for [`Observable::Opening`].
    Opening(Opening),
    /// The world, for [`Observable::World`]: the plan loop plans from it.
    World(World<'a>),
    /// How the request handed out last went.
    Outcome(Outcome),
}

/// What the driver does next.
#[derive(Debug, Clone, PartialEq)]
pub enum Next {
    /// Observe this and pass it to [`Election::handle`].
    Observe(Observable),
    /// Perform this request and pass how it went to [`Election::handle`]
    /// ([`Input::Outcome`]).
    Perform(Request),
    /// Stop waiting for Consul: forget the session (no more renewals) and publish the Warning
    /// [`crate::election::cleanup_deadline::gave_up`] renders with the failure kept last.
    GiveUp(GiveUp),
    /// Consul could not be cleaned up yet: the reconcile fails with the failure kept last, to
    /// be retried after this long.
    RetryConsul(Duration),
    /// The reconcile is over (failed, if a failure was kept): look again after this long.
    Stop(Duration),
}

/// What [`Election::handle`] tells the driver of an outcome.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reported {
    /// An event to publish: a refusal by Consul that is news.
    pub event: Option<ElectionEvent>,
    /// The request's failure fails the reconcile: the driver keeps its error to return.
    pub failed: bool,
    /// Why a session read for adoption is left alone, for the log.
    pub left_alone: Option<LeftAlone>,
    /// The leader the request labelled, for the metrics.
    pub elected: Option<Elected>,
}

/// What a request handed out stands for, for logs and the property tests' checks (the
/// driver performs the request as it is).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause<'a> {
    /// A step before planning, or of a fence.
    Step,
    /// This withdrawal step.
    Withdrawal(&'a withdrawal::Step),
    /// This read or take-over of the plan loop's first look.
    Look(&'a Look),
    /// This action of the last plan.
    Action(&'a Action),
    /// The reconcile's status write.
    Status,
}

/// Where the request handed out last came from: what its outcome answers.
#[derive(Debug, Clone)]
enum Origin {
    Step,
    /// The removal of a switchover request decided before: when it fails, the reconcile goes
    /// on and looks again soon.
    Removal,
    Withdrawal(withdrawal::Step),
    Look(Look),
    Action(ActionKind),
    Status,
}

/// Where a reconcile is.
#[derive(Debug, Clone)]
enum Stage {
    Admitting(Reconcile),
    /// [`Observable::Opening`] was handed out.
    Opening,
    Planning(PlanLoop),
    /// The status write was handed out.
    Writing(PlanLoop),
    /// The reconcile is over: look again after this long.
    Over(Duration, Option<Plan>),
}

/// Rule 2 carried out for an election that cannot act ([`Step::Fence`]).
#[derive(Debug, Clone)]
enum Fencing {
    /// [`Observable::Lock`] was handed out.
    Judging { in_use_refused: bool },
    /// The requests before the verdict is carried out.
    Carrying {
        before: VecDeque<Request>,
        verdict: UnusableLabel,
    },
}

/// An admission input the driver awaits ([`Gathered`]), and rule 2 meanwhile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Awaiting {
    /// Rule 2 judges the leader label next, or carries out its judgement.
    Judging,
    /// The label stays: judge again after this long or once a lock changed.
    Waiting(Duration),
    /// Only the input is awaited: the label is fenced, or the labels are another install's
    /// (rule 8).
    InputOnly,
    /// The read failed: rule 2 judges the leader label next, or carries out its judgement;
    /// then the reconcile stops.
    Failed,
}

/// One reconcile under way.
#[derive(Debug, Clone)]
struct Run {
    stage: Stage,
    withdrawing: Option<Withdrawing>,
    fencing: Option<Fencing>,
    /// The admission input awaited, if one is.
    awaiting: Option<Awaiting>,
    /// See [`Start::acting`].
    acts_as: Option<(Mode, UnavailablePolicy)>,
    /// The status names another install as serving the election.
    served_elsewhere: bool,
    /// The `SpecValid` condition of a reconcile that plans.
    spec_valid: Option<ConditionState>,
    token_secret: bool,
    removal_failed: bool,
    /// What the requests of the plans' actions are made with.
    acting: Acting,
    /// Where the request handed out last came from, until its outcome is reported.
    pending: Option<Origin>,
    /// The request handed out last writes the status, a whole one (`true`) or a record made
    /// before acting: how it went counts in the status writes failing in a row.
    writing_whole: Option<bool>,
    /// A switchover request decided before, to remove again before the first plan.
    removing: Option<String>,
}

/// One election (see the module docs).
#[derive(Debug, Clone, Default)]
pub struct Election {
    memory: ElectionMemory,
    /// The reconcile under way (boxed: an election waiting for its next reconcile costs a
    /// pointer beside its memory).
    run: Option<Box<Run>>,
}

impl Election {
    /// An election this process knows nothing of yet.
    pub fn new() -> Election {
        Election::default()
    }

    /// Begins a reconcile of the election as `start` has it (an unfinished one is dropped: its
    /// driver failed and returned).
    pub fn begin(&mut self, start: Start) {
        let served_elsewhere = start.served_elsewhere.is_some();
        let reconcile = if start.deleted {
            Reconcile::deleted()
        } else if start.released {
            Reconcile::released(served_elsewhere)
        } else {
            Reconcile::new(start.spec, start.served_elsewhere, start.paused)
        };
        self.run = Some(Box::new(Run {
            stage: Stage::Admitting(reconcile),
            withdrawing: None,
            fencing: None,
            awaiting: None,
            acts_as: start.acting,
            served_elsewhere,
            spec_valid: None,
            token_secret: start.token_secret,
            removal_failed: false,
            acting: Acting::default(),
            pending: None,
            writing_whole: None,
            removing: None,
        }));
    }

    /// What to do next.
    pub fn poll(&mut self) -> Next {
        let next = self.next();
        if let Next::Perform(request) = &next {
            // Decided from here on, even if the write fails: a copy of the election older
            // than the request's removal must not have it decided again.
            match request {
                Request::ClearRequest(decided) => self.memory.decided_request.deciding(decided),
                Request::WriteStatus(change) => {
                    if let Some(decided) = change.decides() {
                        self.memory.decided_request.deciding(decided);
                    }
                    if let Some(run) = self.run.as_deref_mut() {
                        run.writing_whole = Some(change.whole());
                    }
                }
                _ => {}
            }
        }
        next
    }

    fn next(&mut self) -> Next {
        let Some(run) = &mut self.run else {
            return Next::Stop(look_again::ERROR_REQUEUE);
        };
        if run.pending.is_some() {
            // An outcome is owed: the driver asked twice without reporting it.
            return Next::Stop(look_again::ERROR_REQUEUE);
        }
        if let Some(withdrawing) = &mut run.withdrawing {
            match withdrawing.poll() {
                Then::Perform(request, step) => {
                    run.pending = Some(Origin::Withdrawal(step));
                    return Next::Perform(request);
                }
                Then::GiveUp(give_up) => return Next::GiveUp(give_up),
                Then::GoOn => {
                    run.withdrawing = None;
                    if let Some(stop) = run.rule2_done(None) {
                        return stop;
                    }
                }
                Then::End(retry) => {
                    run.withdrawing = None;
                    run.awaiting = None;
                    let after = retry.unwrap_or(look_again::ERROR_REQUEUE);
                    run.stage = Stage::Over(after, None);
                    return retry.map_or(Next::Stop(after), Next::RetryConsul);
                }
            }
        }
        if let Some(fencing) = &mut run.fencing {
            let Fencing::Carrying { before, verdict } = fencing else {
                // The lock facts are owed: the driver asked twice without giving them.
                return Next::Stop(look_again::ERROR_REQUEUE);
            };
            if let Some(request) = before.pop_front() {
                run.pending = Some(Origin::Step);
                return Next::Perform(request);
            }
            let verdict = *verdict;
            run.fencing = None;
            match verdict {
                UnusableLabel::Keep(recheck) => {
                    if let Some(stop) = run.rule2_done(Some(recheck)) {
                        return stop;
                    }
                }
                UnusableLabel::Fence => {
                    run.withdrawing = Some(Withdrawing::Reading {
                        whatever_mode: false,
                        fence: true,
                    });
                    return Next::Observe(Observable::Left);
                }
            }
            return self.next();
        }
        match run.awaiting {
            Some(Awaiting::Waiting(recheck)) => {
                return Next::Observe(Observable::Await(Some(recheck)));
            }
            Some(Awaiting::InputOnly) => return Next::Observe(Observable::Await(None)),
            // Rule 2 is judged next (it is not under way: that is handled above).
            Some(Awaiting::Judging | Awaiting::Failed) => {
                run.fencing = Some(Fencing::Judging {
                    in_use_refused: false,
                });
                return Next::Observe(Observable::Lock);
            }
            None => {}
        }
        // Set only as the plan loop opens: removed before its first plan.
        if let Some(request) = run.removing.take() {
            run.pending = Some(Origin::Removal);
            return Next::Perform(Request::ClearRequest(request));
        }
        match &mut run.stage {
            Stage::Over(after, _) => Next::Stop(*after),
            // An answer is owed: the driver asked twice without giving it.
            Stage::Opening | Stage::Writing(_) => Next::Stop(look_again::ERROR_REQUEUE),
            Stage::Admitting(reconcile) => {
                let step = match reconcile.poll() {
                    reconcile::Next::Gather(input) => {
                        return Next::Observe(Observable::Input(input));
                    }
                    reconcile::Next::Do(Step::Withdraw { whatever_mode }) => {
                        // A withdrawal may release the key: the next look reads it back.
                        self.memory.key.writing();
                        run.withdrawing = Some(Withdrawing::Reading {
                            whatever_mode,
                            fence: false,
                        });
                        return Next::Observe(Observable::Left);
                    }
                    reconcile::Next::Do(Step::Fence { in_use_refused }) => {
                        run.fencing = Some(Fencing::Judging { in_use_refused });
                        return Next::Observe(Observable::Lock);
                    }
                    reconcile::Next::Do(Step::Unwatch) => Request::Unwatch,
                    reconcile::Next::Do(Step::Report(back)) => {
                        Request::WriteStatus(StatusChange::StandBack(back))
                    }
                    reconcile::Next::Do(Step::Wake(other)) => Request::Wake(other),
                    reconcile::Next::Do(Step::RecordApplied) => {
                        Request::WriteStatus(StatusChange::Applied)
                    }
                    reconcile::Next::Do(Step::Watch) => Request::Watch,
                    reconcile::Next::Do(Step::ReportReleased) => {
                        Request::WriteStatus(StatusChange::Released)
                    }
                    reconcile::Next::Do(Step::RemoveFinalizer) => Request::RemoveFinalizer,
                    reconcile::Next::Stop(after) => {
                        run.stage = Stage::Over(after, None);
                        return Next::Stop(after);
                    }
                    reconcile::Next::Plan => {
                        run.spec_valid = reconcile.spec_valid().cloned();
                        run.stage = Stage::Opening;
                        return Next::Observe(Observable::Opening);
                    }
                };
                run.pending = Some(Origin::Step);
                Next::Perform(step)
            }
            Stage::Planning(plans) => match plans.poll(&mut self.memory) {
                plan_loop::Next::Look(look) => {
                    let request = match look.clone() {
                        Look::ReadKey(read) => Request::ReadKey(read),
                        Look::ReadSession(session) => Request::ReadSession {
                            session,
                            via: Via::Spec,
                        },
                        Look::Adopt { session, pod, uid } => {
                            Request::AdoptSession { session, pod, uid }
                        }
                    };
                    run.pending = Some(Origin::Look(look));
                    Next::Perform(request)
                }
                plan_loop::Next::Observe => Next::Observe(Observable::World),
                plan_loop::Next::Act(action) => {
                    run.acting.failed_writes = self.memory.status_failures.run();
                    let made = match (plans.last_plan(), &run.spec_valid) {
                        (Some(plan), Some(spec_valid)) => {
                            run.acting.request(action, plan, spec_valid)
                        }
                        _ => None,
                    };
                    let Some((request, kind)) = made else {
                        // An action no request carries out (none does): it fails, as of the
                        // world it was planned in.
                        let Some(now) = run.acting.planned_at else {
                            return Next::Stop(look_again::ERROR_REQUEUE);
                        };
                        plans.handle(Answer::Failed, &mut self.memory, now);
                        return self.next();
                    };
                    run.pending = Some(Origin::Action(kind));
                    Next::Perform(request)
                }
                // Standing back for another install (rule 8): the status is that install's
                // to write.
                plan_loop::Next::Done => match (plans.last_plan(), &run.spec_valid) {
                    (Some(plan), Some(spec_valid)) if !plan.leaves_status_to_another_install() => {
                        let decided = StatusChange::Decided {
                            plan: Box::new(plan.clone()),
                            spec_valid: spec_valid.clone(),
                            failed_writes: self.memory.status_failures.run(),
                        };
                        run.stage = match std::mem::replace(&mut run.stage, Stage::Opening) {
                            Stage::Planning(plans) => Stage::Writing(plans),
                            other => other,
                        };
                        run.pending = Some(Origin::Status);
                        Next::Perform(Request::WriteStatus(decided))
                    }
                    _ => Next::Stop(run.stop()),
                },
            },
        }
    }

    /// Takes in `input` at `now`: what the driver observed, or how the request handed out
    /// last went (only an outcome tells the driver anything).
    pub fn handle(&mut self, input: Input<'_>, now: Instant) -> Reported {
        match input {
            Input::Gathered(gathered) => self.gathered(gathered),
            Input::Lock(facts) => self.judged(&facts),
            Input::Left(left) => self.left(left),
            Input::Opening(opening) => self.opened(opening),
            Input::World(world) => self.plan(&world),
            Input::Outcome(outcome) => return self.performed(outcome, now),
        }
        Reported::default()
    }

    /// The admission input asked for last, as gathered (or still awaited, or failed).
    fn gathered(&mut self, gathered: Gathered) {
        // Rule 8: another install's labels are that install's to judge.
        let another_install = self.memory.stood_back().is_some();
        let Some(run) = self.run.as_deref_mut() else {
            return;
        };
        let Stage::Admitting(reconcile) = &mut run.stage else {
            return;
        };
        let another_install = another_install || run.served_elsewhere;
        let awaiting = match gathered {
            Gathered::Found(found) => {
                run.awaiting = None;
                reconcile.gathered(found);
                return;
            }
            // Nothing more for rule 2 to take away until the planner runs.
            Gathered::Awaited if run.awaiting == Some(Awaiting::InputOnly) => return,
            Gathered::Awaited if another_install => Awaiting::InputOnly,
            Gathered::Failed if another_install => {
                run.awaiting = None;
                run.stage = Stage::Over(look_again::ERROR_REQUEUE, None);
                return;
            }
            Gathered::Awaited => Awaiting::Judging,
            Gathered::Failed => Awaiting::Failed,
        };
        run.awaiting = Some(awaiting);
    }

    /// How the request handed out last went, at `now`.
    fn performed(&mut self, outcome: Outcome, now: Instant) -> Reported {
        let Some(run) = self.run.as_deref_mut() else {
            return Reported::default();
        };
        let Some(origin) = run.pending.take() else {
            return Reported::default();
        };
        let mut reported = Reported::default();
        if let Outcome::Removed(version) = &outcome {
            self.memory.decided_request.removed(*version);
        }
        let failures = &mut self.memory.status_failures;
        let status_event = match (run.writing_whole.take(), &outcome) {
            (Some(_), Outcome::StatusFailed { category, error }) => {
                failures.failed(category, error)
            }
            (Some(true), written) if written.took_effect() => {
                failures.ended();
                None
            }
            _ => None,
        };
        match origin {
            Origin::Step if !outcome.took_effect() => {
                // The reconcile fails with it, and is retried.
                reported.failed = true;
                run.withdrawing = None;
                run.fencing = None;
                run.awaiting = None;
                run.stage = Stage::Over(look_again::ERROR_REQUEUE, None);
            }
            Origin::Step => {
                if run.fencing.is_none()
                    && let Stage::Admitting(reconcile) = &mut run.stage
                {
                    reconcile.done(None);
                }
            }
            Origin::Removal => run.removal_failed = !outcome.took_effect(),
            Origin::Withdrawal(_) => {
                let performed = request::performed(outcome);
                reported.failed = performed == Performed::Failed;
                if let Some(Withdrawing::Running { withdrawal, .. }) = &mut run.withdrawing {
                    withdrawal.done(performed);
                }
            }
            Origin::Look(look) => {
                let Stage::Planning(plans) = &mut run.stage else {
                    return reported;
                };
                match (look, outcome) {
                    (Look::ReadKey(_), Outcome::Key(read)) => {
                        reported.event = plans.key_read(read, &mut self.memory);
                    }
                    (Look::ReadKey(_), Outcome::Refused(refusal)) => {
                        reported.event = plans.key_read(Err(Some(refusal)), &mut self.memory);
                    }
                    (Look::ReadKey(_), _) => {
                        reported.event = plans.key_read(Err(None), &mut self.memory);
                    }
                    (Look::ReadSession(_), Outcome::Session(read)) => {
                        reported.left_alone = plans.session_read(read);
                    }
                    (Look::ReadSession(_), _) => {
                        reported.left_alone = plans.session_read(SessionRead::Missing);
                    }
                    (Look::Adopt { .. }, Outcome::Adopted(adopted)) => plans.adopted(Ok(adopted)),
                    (Look::Adopt { .. }, _) => plans.adopted(Err(())),
                }
            }
            Origin::Action(kind) => {
                let Stage::Planning(plans) = &mut run.stage else {
                    return reported;
                };
                let answer = kind.answer(outcome);
                reported.failed = matches!(answer, Answer::Failed | Answer::Refused(_));
                reported.event = plans.handle(answer, &mut self.memory, now);
                reported.elected = plans.poll_elected();
            }
            Origin::Status => {
                reported.failed = !outcome.took_effect();
                run.stop();
            }
        }
        reported.event = reported.event.or(status_event);
        reported
    }

    /// Rule 2 on what this process knows of the lock (see [`Input::Lock`]). With the Consul
    /// access in use refused, the session is no longer renewed and the key no longer watched
    /// first.
    fn judged(&mut self, facts: &LockFacts) {
        let written_since_read = self.memory.key.written_since_read();
        let Some(run) = self.run.as_deref_mut() else {
            return;
        };
        let Some(Fencing::Judging { in_use_refused }) = run.fencing else {
            return;
        };
        let verdict = match (run.awaiting, run.acts_as) {
            (None, _) => facts.judge(in_use_refused, written_since_read, unusable_label),
            (Some(_), Some((mode, policy))) => {
                facts.judge(in_use_refused, written_since_read, |lock, now, ttl| {
                    waiting_label(lock, now, ttl, mode, policy)
                })
            }
            // Only a valid spec awaits an input.
            (Some(_), None) => UnusableLabel::Keep(Duration::MAX),
        };
        let before = match in_use_refused {
            true => VecDeque::from([Request::ForgetSession, Request::Unwatch]),
            false => VecDeque::new(),
        };
        run.fencing = Some(Fencing::Carrying { before, verdict });
    }

    /// See [`Input::Left`].
    fn left(&mut self, left: Left) {
        let Some(run) = self.run.as_deref_mut() else {
            return;
        };
        let Some(Withdrawing::Reading {
            whatever_mode,
            fence,
        }) = run.withdrawing
        else {
            return;
        };
        let Sessions { held, recorded, .. } = &left.sessions;
        let session = held.clone().or_else(|| recorded.clone());
        let footprint = left.footprint(whatever_mode);
        let withdrawal = match fence {
            true => Withdrawal::fence(footprint, &left.pods),
            false => Withdrawal::whole(footprint, &left.pods, left.sessions.clone()),
        };
        let requests = Box::new(left.requests());
        run.withdrawing = Some(Withdrawing::Running {
            withdrawal: Box::new(withdrawal),
            requests,
            consul_key: left.acted.consul_key,
            session,
            wait: left.wait,
        });
    }

    /// See [`Input::Opening`]: the plan loop opens.
    fn opened(&mut self, opening: Opening) {
        if let Some(run) = &mut self.run
            && matches!(run.stage, Stage::Opening)
        {
            run.acting.election = opening.adopting.election.name.clone();
            let last = opening.recorded.last_switchover.as_ref();
            let request = opening.switchover.as_deref();
            let seen = self.memory.decided_request.seen(request, opening.version);
            let switchover = match opening.switchover.zip(seen) {
                Some((request, seen)) => match switchover_request::step(seen, last, &request) {
                    RequestStep::Decide => Some(request),
                    RequestStep::Skip => None,
                    RequestStep::Remove => {
                        run.removing = Some(request);
                        None
                    }
                },
                None => None,
            };
            run.stage = Stage::Planning(PlanLoop::new(
                opening.recorded,
                switchover,
                MAX_PLANS,
                opening.adopting,
            ));
        }
    }

    /// Since when each of the NotReady pods `observed` (UID, and when its Ready condition last
    /// changed, as written) is NotReady, counted from when this process first saw the change.
    pub fn not_ready_since(
        &mut self,
        observed: Vec<(String, Timestamp)>,
        now: Instant,
        wall: Timestamp,
    ) -> HashMap<String, NotReadySince> {
        self.memory.not_ready.observe(observed, now, wall)
    }

    /// Plans from `world` ([`PlanLoop::plan`]), when a plan was asked for.
    fn plan(&mut self, world: &World<'_>) {
        let Some(run) = self.run.as_deref_mut() else {
            return;
        };
        let Stage::Planning(plans) = &mut run.stage else {
            return;
        };
        run.acting.labels.clone_from(&world.config.labels);
        run.acting.planned_at = Some(world.now);
        run.acting.shared = world
            .pods
            .iter()
            .map(|view| (view.name.clone(), view.shared))
            .collect();
        plans.plan(world, &mut self.memory);
    }

    /// What the request handed out last stands for, while its outcome is owed.
    pub fn cause(&self) -> Option<Cause<'_>> {
        let run = self.run.as_ref()?;
        Some(match run.pending.as_ref()? {
            Origin::Step | Origin::Removal => Cause::Step,
            Origin::Withdrawal(step) => Cause::Withdrawal(step),
            Origin::Look(look) => Cause::Look(look),
            Origin::Action(_) => match &run.stage {
                Stage::Planning(plans) => Cause::Action(plans.in_flight()?),
                _ => return None,
            },
            Origin::Status => Cause::Status,
        })
    }

    /// Ends the reconcile: returns its last plan, if it planned.
    pub fn end(&mut self) -> Option<Plan> {
        match self.run.take()?.stage {
            Stage::Planning(plans) | Stage::Writing(plans) => plans.last_plan().cloned(),
            Stage::Over(_, last) => last,
            Stage::Admitting(_) | Stage::Opening => None,
        }
    }

    /// The last plan of this reconcile (its status is what the reconcile writes).
    pub fn last_plan(&self) -> Option<&Plan> {
        match &self.run.as_ref()?.stage {
            Stage::Planning(plans) | Stage::Writing(plans) => plans.last_plan(),
            Stage::Over(_, last) => last.as_ref(),
            Stage::Admitting(_) | Stage::Opening => None,
        }
    }

    /// The status the next plan of this reconcile decides from ([`PlanLoop::recorded`]).
    pub fn recorded(&self) -> Option<&Recorded> {
        match &self.run.as_ref()?.stage {
            Stage::Planning(plans) | Stage::Writing(plans) => Some(plans.recorded()),
            _ => None,
        }
    }

    /// The `SpecValid` condition of a reconcile that plans: the label-key check's.
    pub fn spec_valid(&self) -> Option<&ConditionState> {
        self.run.as_ref()?.spec_valid.as_ref()
    }

    /// The token and since of this election's leadership of pod `uid`
    /// ([`PlanLoop::leadership_of`]).
    pub fn leadership_of(&self, uid: &str) -> Option<(u64, Timestamp)> {
        match &self.run.as_ref()?.stage {
            Stage::Planning(plans) | Stage::Writing(plans) => plans.leadership_of(uid),
            _ => None,
        }
    }

    /// Why the reconcile stands back or withdraws, for the log (empty while it does neither).
    pub fn why(&self) -> &'static str {
        match self.run.as_ref().map(|r| &r.stage) {
            Some(Stage::Admitting(reconcile)) => reconcile.why(),
            _ => "",
        }
    }

    /// What the election's decisions carry from one reconcile to the next.
    pub fn memory(&self) -> &ElectionMemory {
        &self.memory
    }

    /// The memory, for the property test's knobs that show what forgetting part of it breaks.
    #[cfg(test)]
    pub(crate) fn memory_mut(&mut self) -> &mut ElectionMemory {
        &mut self.memory
    }

    /// Whether the election can be forgotten: no reconcile is under way and nothing is
    /// remembered.
    pub fn is_empty(&self) -> bool {
        self.run.is_none() && self.memory.is_empty()
    }
}

impl Run {
    /// Rule 2 was carried out: the label stays until `recheck`, or (`None`) it was fenced.
    /// Goes back to the input awaited, if one is; stops a reconcile whose read failed
    /// (returned); otherwise the step of the reconcile is done.
    fn rule2_done(&mut self, recheck: Option<Duration>) -> Option<Next> {
        match (self.awaiting, recheck) {
            (None, _) => {
                if let Stage::Admitting(reconcile) = &mut self.stage {
                    reconcile.done(recheck);
                }
            }
            (Some(Awaiting::Failed), _) => {
                self.awaiting = None;
                self.stage = Stage::Over(look_again::ERROR_REQUEUE, None);
                return Some(Next::Stop(look_again::ERROR_REQUEUE));
            }
            (Some(_), Some(recheck)) => self.awaiting = Some(Awaiting::Waiting(recheck)),
            (Some(_), None) => self.awaiting = Some(Awaiting::InputOnly),
        }
        None
    }

    /// Ends the reconcile after its plan loop: returns when to look again.
    fn stop(&mut self) -> Duration {
        let plans = match std::mem::replace(&mut self.stage, Stage::Opening) {
            Stage::Planning(plans) | Stage::Writing(plans) => Some(plans),
            _ => None,
        };
        let unfinished = plans.as_ref().is_some_and(PlanLoop::unfinished);
        let read_back_failed = plans.as_ref().is_some_and(PlanLoop::read_back_failed);
        let last = plans.and_then(PlanLoop::into_last_plan);
        let after = look_again::after(look_again::Round {
            planned: last.as_ref().and_then(|p| p.requeue_after),
            unfinished,
            retry_soon: self.removal_failed || read_back_failed,
            token_secret: self.token_secret,
        });
        self.stage = Stage::Over(after, last);
        after
    }
}
