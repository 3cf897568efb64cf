//! One reconcile's plan/act loop as a sans-IO machine: plan from what is known, hand out the
//! plan's actions one at a time, take each answer back, plan again, until a plan has no
//! actions, an action fails, or the reconcile's plans are used up.
//!
//! [`super::machine::Election`] runs it once a reconcile may act (the controller and the
//! property test drive that machine). No driver decides when to plan again, what a
//! status write changes for the next plan, what a lost session voids, or what an answer means
//! for the election's memory (a key written and read back, a lock-delay, Consul's refusal),
//! nor when the key is read back after the operator's own write (right after the answer,
//! before anything else): the loop does.
//!
//! ```text
//! loop {
//!     match plans.poll(&mut memory) {
//!         Next::Look(look) => { plans.key_read(read(look), &mut memory); }
//!         Next::Observe => { plans.plan(&world_now(), &mut memory); }
//!         Next::Act(action) => publish(plans.handle(execute(action), &mut memory, now())),
//!         Next::Done => break,
//!     }
//! }
//! ```

use std::collections::VecDeque;
use std::time::Duration;

use jiff::Timestamp;
use tokio::time::Instant;

use super::config::{ElectionConfig, Owner};
use super::first_look::{Adopting, FirstLook, KeyRead, LeftAlone, Look, SessionRead};
use super::memory::ElectionMemory;
use super::observe::{LockView, PodView, Recorded, SessionView};
use super::plan::{Action, ElectionEvent, Plan};
use super::planner::{Observation, plan};
use super::refusal::ConsulRefusal;

/// What the driver does next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    /// Before the first plan: read or take over what [`Look`] says, and answer with
    /// [`PlanLoop::key_read`], [`PlanLoop::session_read`] or [`PlanLoop::adopted`].
    Look(Look),
    /// Observe the world and pass it to [`PlanLoop::plan`].
    Observe,
    /// Execute this action and pass its answer to [`PlanLoop::handle`].
    Act(Action),
    /// The reconcile's loop is over: write the status of [`PlanLoop::last_plan`].
    Done,
}

/// A pod labelled leader by this reconcile, for the operator's metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Elected {
    /// It replaced the leader the status recorded (a leadership transition).
    pub transition: bool,
    /// How long since this reconcile began moving the leadership (released the key, let go of
    /// its session, or demoted the leader), if it did.
    pub after_move: Option<Duration>,
}

/// What the executor reports after performing the action [`PlanLoop::poll`] handed out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// It took effect (or had nothing to do).
    Done,
    /// Consul answered an [`Action::Acquire`]: it gave the lock (`true`) or not. The loop
    /// reads the key back before it goes on.
    Acquired(bool),
    /// Consul released the key of an [`Action::Release`]. The loop reads the key back before
    /// it goes on.
    Released,
    /// The status was written with the token record of an [`Action::RecordToken`]; the next
    /// plans decide from this status.
    StatusWritten(Box<Recorded>),
    /// The switchover request of an [`Action::ClearSwitchover`] is removed: the next plans
    /// see none.
    RequestCleared,
    /// Consul no longer has the operator's session: the rest of the plan was made for it and
    /// is void. After a write of the key, the loop reads it back before it plans again.
    SessionGone,
    /// Consul refused it for lack of rights: the loop ends with one more plan (its actions
    /// are not run) for the status to report the refusal.
    Refused(ConsulRefusal),
    /// It failed otherwise: the loop ends.
    Failed,
}

/// Everything a plan needs that neither the loop nor the election's memory carries, as
/// observed just now.
#[derive(Debug, Clone, Copy)]
pub struct World<'a> {
    /// See [`Observation::config`].
    pub config: &'a ElectionConfig,
    /// See [`Observation::pods`].
    pub pods: &'a [PodView],
    /// See [`Observation::lock`].
    pub lock: &'a LockView,
    /// See [`Observation::session`].
    pub session: Option<&'a SessionView>,
    /// See [`Observation::lock_confirmed_at`].
    pub lock_confirmed_at: Instant,
    /// See [`Observation::now`].
    pub now: Instant,
    /// See [`Observation::wall`].
    pub wall: Timestamp,
    /// See [`Observation::owner`].
    pub owner: &'a Owner,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// The reads before the first plan ([`FirstLook`]).
    Looking,
    /// A plan is to be made.
    Planning,
    /// The last plan's actions are being handed out.
    Acting,
    /// An action is out; its outcome is awaited.
    Awaiting,
    /// The key is read back after the operator's own write ([`Look::ReadKey`] of
    /// [`KeyRead::Fresh`]): a plan never decides from a view older than that write (rule 2).
    ReadingBack,
    /// That read is out; its answer is awaited.
    ReadBackOut,
    /// One more plan, for the status only.
    Reporting,
    Done,
}

/// The plan/act loop of one reconcile (see the module docs).
#[derive(Debug, Clone)]
pub struct PlanLoop {
    /// The status the next plan decides from.
    recorded: Recorded,
    /// A status this reconcile wrote, for the next plan.
    written: Option<Recorded>,
    /// The election's switchover request, until this reconcile removed it.
    switchover: Option<String>,
    last: Option<Plan>,
    pending: VecDeque<Action>,
    /// The action handed out, until its answer comes.
    in_flight: Option<Action>,
    /// The lock-delay of the election's sessions (as last planned with).
    lock_delay: Duration,
    /// The pod (UID) this reconcile labelled leader, with its token and since.
    labelled: Option<(String, u64, Timestamp)>,
    plans_left: usize,
    /// The pods (UIDs) labelled leader in the world last planned from.
    leaders: Vec<String>,
    /// The last instant the loop was told (its latest plan or answer): when it hands out an
    /// action, the action starts about then.
    last_now: Option<Instant>,
    /// When this reconcile began moving the leadership.
    move_started: Option<Instant>,
    /// A leader labelled, until [`PlanLoop::poll_elected`] takes it.
    elected: Option<Elected>,
    look: FirstLook,
    state: State,
    /// Where the loop goes once the key is read back.
    after_read_back: State,
    /// Consul's answer to the acquisition whose read back is awaited.
    acquired: Option<bool>,
    unfinished: bool,
    /// A read back failed: the reconcile ends, to be retried soon.
    read_back_failed: bool,
}

impl PlanLoop {
    /// A loop deciding from the status `recorded` and the pending switchover request, making
    /// at most `max_plans` plans that have actions, after a first look that adopts as
    /// `adopting` says.
    pub fn new(
        recorded: Recorded,
        switchover: Option<String>,
        max_plans: usize,
        adopting: Adopting,
    ) -> PlanLoop {
        PlanLoop {
            recorded,
            written: None,
            switchover,
            last: None,
            pending: VecDeque::new(),
            in_flight: None,
            lock_delay: Duration::ZERO,
            labelled: None,
            plans_left: max_plans,
            leaders: Vec::new(),
            last_now: None,
            move_started: None,
            elected: None,
            look: FirstLook::new(adopting),
            state: State::Looking,
            after_read_back: State::Acting,
            acquired: None,
            unfinished: false,
            read_back_failed: false,
        }
    }

    /// What to do next. An action that writes the election's key is recorded in `memory`
    /// as written from the moment it is handed out: a write whose answer never comes may
    /// still have taken effect.
    pub fn poll(&mut self, memory: &mut ElectionMemory) -> Next {
        match self.state {
            State::Looking => match self.look.poll(memory) {
                Some(look) => Next::Look(look),
                None if self.look.is_over() => {
                    self.state = State::Planning;
                    self.poll(memory)
                }
                // An answer is owed: the driver asked twice without giving it.
                None => Next::Done,
            },
            State::Planning if self.plans_left == 0 => {
                self.unfinished = true;
                self.state = State::Done;
                Next::Done
            }
            State::Planning | State::Reporting => Next::Observe,
            State::Acting => match self.pending.pop_front() {
                Some(action) => {
                    if action.writes_key() {
                        memory.key.writing();
                    }
                    if matches!(action, Action::Release { .. } | Action::ForgetSession) {
                        self.move_started = self.move_started.or(self.last_now);
                    }
                    self.state = State::Awaiting;
                    self.in_flight = Some(action.clone());
                    Next::Act(action)
                }
                None => {
                    self.state = State::Planning;
                    self.poll(memory)
                }
            },
            State::ReadingBack => {
                self.state = State::ReadBackOut;
                Next::Look(Look::ReadKey(KeyRead::Fresh))
            }
            // An answer is owed: the driver asked twice without executing or reading.
            State::Awaiting | State::ReadBackOut | State::Done => Next::Done,
        }
    }

    /// Plans from `world`, what the loop carries (the status as recorded or written, the
    /// switchover request) and what the election remembers (`memory`: a lock-delay, standing
    /// back, Consul's refusal), which the plan then updates; returns the plan.
    pub fn plan(&mut self, world: &World<'_>, memory: &mut ElectionMemory) -> &Plan {
        self.lock_delay = world.config.session.lock_delay;
        self.last_now = Some(world.now);
        let leader = world.config.labels.leader.as_str();
        self.leaders = world
            .pods
            .iter()
            .filter(|p| p.role.as_deref() == Some(leader))
            .map(|p| p.uid.clone())
            .collect();
        if let Some(written) = self.written.take() {
            // A second leader in one reconcile (a switchover, then a failback) must be
            // recorded against the first one's record, or the final status write would take
            // the transitions and the token record back to what was read at the start.
            let carried = self.recorded.last_switchover.take();
            self.recorded = written;
            self.recorded.last_switchover = carried;
        }
        let decided = plan(&Observation {
            config: world.config,
            pods: world.pods,
            lock: world.lock,
            session: world.session,
            recorded: &self.recorded,
            lock_delay_until: memory.key.lock_delay_until(),
            lock_confirmed_at: world.lock_confirmed_at,
            switchover: self.switchover.as_deref(),
            now: world.now,
            wall: world.wall,
            owner: world.owner,
            stood_back: memory.stood_back(),
            consul_refused: memory.refusal(),
        });
        memory.planned(decided.managed_elsewhere.as_ref());
        // The next plans of this reconcile continue the same request (its `from` and
        // `requestedAt`), as the next reconcile will from the status written at its end.
        self.recorded
            .last_switchover
            .clone_from(&decided.status.last_switchover);
        self.state = match self.state {
            State::Reporting => State::Done,
            _ if decided.actions.is_empty() => State::Done,
            _ => {
                self.plans_left -= 1;
                self.pending = decided.actions.iter().cloned().collect();
                State::Acting
            }
        };
        self.last.insert(decided)
    }

    /// Takes the answer to the action [`Self::poll`] handed out last, at `now`, and records
    /// in `memory` what it means for the election. Returns an event to publish: a refusal
    /// by Consul that is news.
    pub fn handle(
        &mut self,
        answer: Answer,
        memory: &mut ElectionMemory,
        now: Instant,
    ) -> Option<ElectionEvent> {
        let action = self.in_flight.take()?;
        self.state = State::Acting;
        self.last_now = Some(now);
        if action == Action::ForgetSession {
            // Letting go of a session takes effect whatever its answer says: the lock-delay
            // Consul may hold the key for counts from now.
            memory.key.session_forgotten(self.lock_delay, now);
        }
        match answer {
            Answer::Failed => {
                self.pending.clear();
                self.state = State::Done;
                None
            }
            Answer::Refused(refusal) => {
                self.pending.clear();
                self.state = State::Reporting;
                memory.refused(refusal)
            }
            Answer::SessionGone => {
                self.pending.clear();
                self.state = State::Planning;
                if action.writes_key() {
                    self.read_back_then(State::Planning);
                }
                None
            }
            answer => {
                if action.writes_consul() {
                    memory.consul_wrote();
                }
                match answer {
                    Answer::Acquired(acquired) => {
                        self.acquired = Some(acquired);
                        self.read_back_then(State::Acting);
                    }
                    Answer::Released => self.read_back_then(State::Acting),
                    Answer::StatusWritten(recorded) => self.written = Some(*recorded),
                    Answer::RequestCleared => self.switchover = None,
                    Answer::Done => match action {
                        Action::LabelLeader {
                            uid,
                            fencing_token,
                            since,
                            ..
                        } => {
                            let transition =
                                self.recorded.leader.as_ref().is_some_and(|l| l.uid != uid);
                            self.elected = Some(Elected {
                                transition,
                                after_move: self
                                    .move_started
                                    .take()
                                    .map(|started| now.saturating_duration_since(started)),
                            });
                            self.labelled = Some((uid, fencing_token, since));
                        }
                        Action::LabelFollower { uid, .. } if self.leaders.contains(&uid) => {
                            self.move_started = self.move_started.or(Some(now));
                        }
                        _ => {}
                    },
                    Answer::Failed | Answer::Refused(_) | Answer::SessionGone => {}
                }
                None
            }
        }
    }

    /// The key as read for [`Look::ReadKey`] (`Err`: the read failed, with Consul's refusal
    /// if it refused it). Returns the event of a new refusal.
    pub fn key_read(
        &mut self,
        read: Result<LockView, Option<ConsulRefusal>>,
        memory: &mut ElectionMemory,
    ) -> Option<ElectionEvent> {
        if self.state != State::ReadBackOut {
            return self.look.key_read(read, &self.recorded, memory);
        }
        match read {
            Ok(lock) => {
                memory.key.read_back();
                if let (Some(acquired), Some(now)) = (self.acquired.take(), self.last_now) {
                    memory.key.acquire_answered(acquired, &lock, now);
                }
                self.state = self.after_read_back;
                None
            }
            // Nothing is planned on a key this process cannot see after its own write.
            Err(refusal) => {
                self.pending.clear();
                self.read_back_failed = true;
                match refusal {
                    Some(refusal) => {
                        self.state = State::Reporting;
                        memory.refused(refusal)
                    }
                    None => {
                        self.state = State::Done;
                        None
                    }
                }
            }
        }
    }

    /// Reads the key back before the loop goes on as `then`.
    fn read_back_then(&mut self, then: State) {
        self.state = State::ReadingBack;
        self.after_read_back = then;
    }

    /// The session of [`Look::ReadSession`], as read; why it is left alone, if it is.
    pub fn session_read(&mut self, read: SessionRead) -> Option<LeftAlone> {
        self.look.session_read(read, &self.recorded)
    }

    /// The outcome of [`Look::Adopt`] ([`FirstLook::adopted`]).
    pub fn adopted(&mut self, outcome: Result<bool, ()>) {
        self.look.adopted(outcome);
    }

    /// The leader this reconcile labelled since the last call, if any (for the metrics).
    pub fn poll_elected(&mut self) -> Option<Elected> {
        self.elected.take()
    }

    /// The action whose answer is owed, if one is.
    pub fn in_flight(&self) -> Option<&Action> {
        self.in_flight.as_ref()
    }

    /// The last plan made (its status is what the reconcile writes).
    pub fn last_plan(&self) -> Option<&Plan> {
        self.last.as_ref()
    }

    /// The last plan made, the loop being over.
    pub fn into_last_plan(self) -> Option<Plan> {
        self.last
    }

    /// The status the next plan decides from.
    pub fn recorded(&self) -> &Recorded {
        &self.recorded
    }

    /// The token and since of this election's leadership of pod `uid`: as labelled in this
    /// reconcile, else as the status records it.
    pub fn leadership_of(&self, uid: &str) -> Option<(u64, Timestamp)> {
        if let Some((labelled, token, since)) = &self.labelled
            && labelled == uid
        {
            return Some((*token, *since));
        }
        let leader = self.recorded.leader.as_ref().filter(|l| l.uid == uid)?;
        Some((self.recorded.fencing_token?, leader.since))
    }

    /// Whether the loop stopped with work left (the driver looks again at once).
    pub fn unfinished(&self) -> bool {
        self.unfinished
    }

    /// Whether a read of the key back after the operator's own write failed (the driver
    /// looks again soon).
    pub fn read_back_failed(&self) -> bool {
        self.read_back_failed
    }
}
