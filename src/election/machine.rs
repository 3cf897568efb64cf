//! One election as a sans-IO machine: everything its decisions carry from one reconcile to the
//! next ([`ElectionMemory`]), and each reconcile from its first question to when to look
//! again, as one sequence of requests the driver answers.
//!
//! A reconcile runs [`Reconcile`] (may the operator act, and what comes before planning),
//! then the [`PlanLoop`] (its first look, the plans and their actions), then the status
//! write, and stops with when to look again. The driver (the controller against the API
//! server and Consul, the property test against its simulated world) performs each request
//! and reports back; it never decides which request follows:
//!
//! ```text
//! election.begin(start);
//! loop {
//!     match election.poll() {
//!         Next::Gather(input) => election.gathered(gather(input)),
//!         Next::Do(step) => election.done(perform(step)),
//!         Next::Open => election.opened(read_the_status_and_the_request()),
//!         Next::Look(look) => election.key_read(read(look)) /* or session_read, adopted */,
//!         Next::Observe => { election.plan(&world_now()); }
//!         Next::Act(action) => publish(election.handle(execute(action), now())),
//!         Next::WriteStatus => { write(election.last_plan()); election.status_written(); }
//!         Next::Stop(look_again) => break requeue(look_again),
//!     }
//! }
//! ```

use std::collections::HashMap;
use std::time::Duration;

use jiff::Timestamp;
use tokio::time::Instant;

use super::admission::Input;
use super::first_look::{Adopting, LeftAlone, Look, SessionRead};
use super::look_again;
use super::memory::ElectionMemory;
use super::observe::{LockView, NotReadySince, Recorded};
use super::plan::{Action, ConditionState, ElectionEvent, Plan};
use super::plan_loop::{self, Answer, Elected, PlanLoop, World};
use super::reconcile::{self, Found, Reconcile, Step};
use super::refusal::ConsulRefusal;

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
}

/// What the plan loop starts from, read once the operator may act ([`Next::Open`]).
#[derive(Debug, Clone)]
pub struct Opening {
    /// The status as this process knows it now.
    pub recorded: Recorded,
    /// The switchover request still to decide (one decided before is removed, not passed).
    pub switchover: Option<String>,
    /// Removing a decided switchover request failed (it is retried soon).
    pub removal_failed: bool,
    /// What the first look may adopt.
    pub adopting: Adopting,
}

/// What the driver does next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    /// Gather this admission input and pass it to [`Election::gathered`].
    Gather(Input),
    /// Perform this step and report it with [`Election::done`].
    Do(Step),
    /// Read what the plan loop starts from and pass it to [`Election::opened`].
    Open,
    /// Read or take over what [`Look`] says, and answer with [`Election::key_read`],
    /// [`Election::session_read`] or [`Election::adopted`].
    Look(Look),
    /// Observe the world and pass it to [`Election::plan`].
    Observe,
    /// Execute this action and pass its answer to [`Election::handle`].
    Act(Action),
    /// Write the status of [`Election::last_plan`] and report it with
    /// [`Election::status_written`].
    WriteStatus,
    /// The reconcile is over: look again after this long.
    Stop(Duration),
}

/// Where a reconcile is.
#[derive(Debug, Clone)]
enum Stage {
    Admitting(Reconcile),
    /// [`Next::Open`] was handed out.
    Opening,
    Planning(PlanLoop),
    /// [`Next::WriteStatus`] was handed out.
    Writing(PlanLoop),
    /// The reconcile is over: look again after this long.
    Over(Duration, Option<Plan>),
}

/// One reconcile under way.
#[derive(Debug, Clone)]
struct Run {
    stage: Stage,
    /// The `SpecValid` condition of a reconcile that plans.
    spec_valid: Option<ConditionState>,
    token_secret: bool,
    removal_failed: bool,
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
        self.run = Some(Box::new(Run {
            stage: Stage::Admitting(Reconcile::new(
                start.spec,
                start.served_elsewhere,
                start.paused,
            )),
            spec_valid: None,
            token_secret: start.token_secret,
            removal_failed: false,
        }));
    }

    /// What to do next.
    pub fn poll(&mut self) -> Next {
        let Some(run) = &mut self.run else {
            return Next::Stop(look_again::ERROR_REQUEUE);
        };
        match &mut run.stage {
            Stage::Over(after, _) => Next::Stop(*after),
            // An answer is owed: the driver asked twice without giving it.
            Stage::Opening | Stage::Writing(_) => Next::Stop(look_again::ERROR_REQUEUE),
            Stage::Admitting(reconcile) => match reconcile.poll() {
                reconcile::Next::Gather(input) => Next::Gather(input),
                reconcile::Next::Do(step) => {
                    if matches!(step, Step::Withdraw { .. }) {
                        // A withdrawal may release the key: the next look reads it back.
                        self.memory.key.writing();
                    }
                    Next::Do(step)
                }
                reconcile::Next::Stop(after) => {
                    run.stage = Stage::Over(after, None);
                    Next::Stop(after)
                }
                reconcile::Next::Plan => {
                    run.spec_valid = reconcile.spec_valid().cloned();
                    run.stage = Stage::Opening;
                    Next::Open
                }
            },
            Stage::Planning(plans) => match plans.poll(&mut self.memory) {
                plan_loop::Next::Look(look) => Next::Look(look),
                plan_loop::Next::Observe => Next::Observe,
                plan_loop::Next::Act(action) => Next::Act(action),
                // Standing back for another install (rule 8): the status is that install's
                // to write.
                plan_loop::Next::Done => match plans.last_plan() {
                    Some(plan) if !plan.leaves_status_to_another_install() => {
                        run.stage = match std::mem::replace(&mut run.stage, Stage::Opening) {
                            Stage::Planning(plans) => Stage::Writing(plans),
                            other => other,
                        };
                        Next::WriteStatus
                    }
                    _ => Next::Stop(run.stop()),
                },
            },
        }
    }

    /// The admission input asked for last, as gathered.
    pub fn gathered(&mut self, found: Found) {
        if let Some(Stage::Admitting(reconcile)) = self.stage() {
            reconcile.gathered(found);
        }
    }

    /// The step handed out last was performed; a fence names when to judge again.
    pub fn done(&mut self, recheck: Option<Duration>) {
        if let Some(Stage::Admitting(reconcile)) = self.stage() {
            reconcile.done(recheck);
        }
    }

    /// What the plan loop starts from, as read for [`Next::Open`].
    pub fn opened(&mut self, opening: Opening) {
        if let Some(run) = &mut self.run
            && matches!(run.stage, Stage::Opening)
        {
            run.removal_failed = opening.removal_failed;
            run.stage = Stage::Planning(PlanLoop::new(
                opening.recorded,
                opening.switchover,
                MAX_PLANS,
                opening.adopting,
            ));
        }
    }

    /// The key as read for [`Look::ReadKey`] (`Err`: the read failed, with Consul's refusal
    /// if it refused it). Returns the event of a new refusal.
    pub fn key_read(
        &mut self,
        read: Result<LockView, Option<ConsulRefusal>>,
    ) -> Option<ElectionEvent> {
        let Some(Stage::Planning(plans)) = self.run.as_deref_mut().map(|r| &mut r.stage) else {
            return None;
        };
        plans.key_read(read, &mut self.memory)
    }

    /// The session of [`Look::ReadSession`], as read; why it is left alone, if it is.
    pub fn session_read(&mut self, read: SessionRead) -> Option<LeftAlone> {
        let Some(Stage::Planning(plans)) = self.stage() else {
            return None;
        };
        plans.session_read(read)
    }

    /// The outcome of [`Look::Adopt`].
    pub fn adopted(&mut self, outcome: Result<bool, ()>) {
        if let Some(Stage::Planning(plans)) = self.stage() {
            plans.adopted(outcome);
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

    /// Plans from `world` ([`PlanLoop::plan`]); `None` when no plan was asked for.
    pub fn plan(&mut self, world: &World<'_>) -> Option<&Plan> {
        let Some(Stage::Planning(plans)) = self.run.as_deref_mut().map(|r| &mut r.stage) else {
            return None;
        };
        Some(plans.plan(world, &mut self.memory))
    }

    /// Takes the answer to the action handed out last, at `now`. Returns an event to publish:
    /// a refusal by Consul that is news.
    pub fn handle(&mut self, answer: Answer, now: Instant) -> Option<ElectionEvent> {
        let Some(Stage::Planning(plans)) = self.run.as_deref_mut().map(|r| &mut r.stage) else {
            return None;
        };
        plans.handle(answer, &mut self.memory, now)
    }

    /// The status of [`Next::WriteStatus`] was written.
    pub fn status_written(&mut self) {
        if let Some(run) = &mut self.run
            && matches!(run.stage, Stage::Writing(_))
        {
            run.stop();
        }
    }

    /// Ends the reconcile: returns its last plan, if it planned.
    pub fn end(&mut self) -> Option<Plan> {
        match self.run.take()?.stage {
            Stage::Planning(plans) | Stage::Writing(plans) => plans.last_plan().cloned(),
            Stage::Over(_, last) => last,
            Stage::Admitting(_) | Stage::Opening => None,
        }
    }

    /// The leader this reconcile labelled since the last call, if any (for the metrics).
    pub fn poll_elected(&mut self) -> Option<Elected> {
        match self.stage() {
            Some(Stage::Planning(plans)) => plans.poll_elected(),
            _ => None,
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

    /// Whether this process wrote the election's key since it last read it back (a cached
    /// view of the key may predate the write).
    pub fn key_written_since_read(&self) -> bool {
        self.memory.key.written_since_read()
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

    fn stage(&mut self) -> Option<&mut Stage> {
        self.run.as_deref_mut().map(|r| &mut r.stage)
    }
}

impl Run {
    /// Ends the reconcile after its plan loop: returns when to look again.
    fn stop(&mut self) -> Duration {
        let plans = match std::mem::replace(&mut self.stage, Stage::Opening) {
            Stage::Planning(plans) | Stage::Writing(plans) => Some(plans),
            _ => None,
        };
        let unfinished = plans.as_ref().is_some_and(PlanLoop::unfinished);
        let last = plans.and_then(PlanLoop::into_last_plan);
        let after = look_again::after(look_again::Round {
            planned: last.as_ref().and_then(|p| p.requeue_after),
            unfinished,
            removal_failed: self.removal_failed,
            token_secret: self.token_secret,
        });
        self.stage = Stage::Over(after, last);
        after
    }
}
