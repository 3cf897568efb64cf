//! One reconcile of an election up to its plan loop, as a sans-IO machine: whether the
//! operator may act at all ([`admit`]), what it does instead when it may not (the election's
//! course of standing back), and what comes before planning when it may (withdrawing after
//! an edit, recording the values it acts with, watching the key).
//!
//! [`super::machine::Election`] runs it at the start of each reconcile (and the controller and
//! the property test drive that machine); no driver decides what to gather, which steps
//! follow, in which order, or when to look again:
//!
//! ```text
//! let mut reconcile = Reconcile::new(spec, served_elsewhere, paused);
//! loop {
//!     match reconcile.poll() {
//!         Next::Gather(input) => reconcile.gathered(gather(input)),
//!         Next::Do(step) => { let recheck = perform(step)?; reconcile.done(recheck); }
//!         Next::Plan => break run_the_plan_loop(),
//!         Next::Stop(look_again) => break requeue(look_again),
//!     }
//! }
//! ```
//!
//! | Admission | Steps | Then |
//! |---|---|---|
//! | Refuse (invalid spec, label key selected by the owner) | report Invalid, fence | stop, [`INVALID_REQUEUE`] |
//! | Yield to an older election | unwatch, report Conflict, withdraw (rule 7), wake the older one | stop, [`INVALID_REQUEUE`] |
//! | Wait for a younger election's leader label | fence, wake the younger one | stop, [`YIELD_WAIT`] |
//! | Unusable Consul access | report Invalid, fence (the refused access in use is dropped first) | stop, [`SECRET_REQUEUE`] |
//! | A paused election's edit | fence | stop, [`INVALID_REQUEUE`] |
//! | Another install serves it (rule 8) | unwatch | stop, [`INVALID_REQUEUE`] |
//! | Deleted ([`Reconcile::deleted`]) | unwatch, withdraw (rule 7) | stop |
//! | Released by an uninstall ([`Reconcile::released`]) | unwatch, withdraw (rule 7), report released, remove the finalizer; another install's: unwatch | stop |
//! | An edit of labels, key, Consul access or session | unwatch, withdraw whatever the mode, record the values, watch | plan |
//! | Nothing in the way | record the values if edited, watch | plan |
//!
//! A fence keeps the leader label only as long as rule 2 allows and names the instant to
//! judge again, which brings the look forward.

use std::collections::VecDeque;
use std::time::Duration;

use super::admission::{Access, Admission, Input, Observed, admit};
use super::look_again::{INVALID_REQUEUE, SECRET_REQUEUE, YIELD_WAIT};
use super::plan::{ConditionState, EventReason};
use super::report::StandBack;

/// One step before, or instead of, planning.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Stop watching the election's key: nothing plans from it meanwhile.
    Unwatch,
    /// Write this status (and its event when the condition is news).
    Report(StandBack),
    /// Take the election off its pods and out of Consul, in rule 7's order.
    Withdraw {
        /// End the operator's own session of the recorded values even when the spec's mode is
        /// Observe now (after an edit; a yielding election goes by the mode it acted in).
        whatever_mode: bool,
    },
    /// Rule 2 for an election that cannot act: take its leader label off when due, else name
    /// when to judge again ([`Reconcile::done`]).
    Fence {
        /// The Consul access the session was created with is the one refused: stop renewing
        /// the session and watching the key first, so the label goes a TTL after the last
        /// renewal.
        in_use_refused: bool,
    },
    /// Wake this other election of the namespace: it waits on this one.
    Wake(String),
    /// Record the spec's values as the ones the operator acts with (`status.applied`).
    RecordApplied,
    /// Watch the election's key.
    Watch,
    /// Write the status of an election the operator's uninstall released.
    ReportReleased,
    /// Take the operator's finalizer off the election, which stays (an uninstall that keeps
    /// the users' objects).
    RemoveFinalizer,
}

/// An admission input, as gathered (see [`Observed`] for each).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    /// [`Observed::label_key`].
    LabelKey(ConditionState),
    /// [`Observed::older`].
    Older(Option<String>),
    /// [`Observed::yielding_leader`]: the pod and the younger election.
    YieldingLeader(Option<(String, String)>),
    /// [`Observed::access`].
    Access(Access),
    /// The spec's values against those `status.applied` records.
    Applied {
        /// They differ (nothing recorded is no edit).
        edited: bool,
        /// [`Observed::needs_withdrawal`].
        needs_withdrawal: bool,
    },
}

/// What the driver does next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    /// Gather this input and pass it to [`Reconcile::gathered`].
    Gather(Input),
    /// Perform this step and report it with [`Reconcile::done`].
    Do(Step),
    /// Run the plan loop.
    Plan,
    /// The reconcile is over: look again after this long.
    Stop(Duration),
}

/// One reconcile up to its plan loop (see the module docs).
#[derive(Debug, Clone)]
pub struct Reconcile {
    observed: Observed,
    edited: bool,
    /// The steps decided, not yet handed out.
    steps: VecDeque<Step>,
    /// A step is out; its outcome is awaited.
    awaiting: bool,
    /// After the steps: plan (`None`) or stop and look again after this long.
    then: Option<Option<Duration>>,
    why: &'static str,
}

impl Reconcile {
    /// A reconcile of an election whose spec validated as `spec`, that the status names as
    /// served by `served_elsewhere` (another install, [`super::admission::served_elsewhere`]),
    /// and that is `paused`.
    pub fn new(
        spec: Result<(), ConditionState>,
        served_elsewhere: Option<String>,
        paused: bool,
    ) -> Reconcile {
        Reconcile {
            observed: Observed {
                spec: Some(spec),
                served_elsewhere,
                paused,
                ..Observed::default()
            },
            edited: false,
            steps: VecDeque::new(),
            awaiting: false,
            then: None,
            why: "",
        }
    }

    /// A reconcile of an election being deleted: it stops watching the key and withdraws the
    /// election (rule 7), whatever its spec, and plans nothing.
    pub fn deleted() -> Reconcile {
        let mut reconcile = Reconcile::new(Ok(()), None, false);
        reconcile.stand_back(
            [
                Step::Unwatch,
                Step::Withdraw {
                    whatever_mode: false,
                },
            ],
            INVALID_REQUEUE,
            "the election is deleted",
        );
        reconcile
    }

    /// A reconcile of an election whose install is being uninstalled and keeps the users'
    /// objects: it stops watching the key, withdraws the election (rule 7), reports it
    /// released and takes the finalizer off, and plans nothing. One another install serves (`served_elsewhere`,
    /// rule 8) is that install's: only the watch stops.
    pub fn released(served_elsewhere: bool) -> Reconcile {
        let mut reconcile = Reconcile::new(Ok(()), None, false);
        if served_elsewhere {
            reconcile.stand_back(
                [Step::Unwatch],
                INVALID_REQUEUE,
                "the install is being uninstalled; another install serves the election",
            );
        } else {
            reconcile.stand_back(
                [
                    Step::Unwatch,
                    Step::Withdraw {
                        whatever_mode: false,
                    },
                    Step::ReportReleased,
                    Step::RemoveFinalizer,
                ],
                INVALID_REQUEUE,
                "the install is being uninstalled",
            );
        }
        reconcile
    }

    /// What to do next.
    pub fn poll(&mut self) -> Next {
        if self.awaiting {
            // An outcome is owed: the driver asked twice without performing the step.
            return Next::Stop(super::look_again::ERROR_REQUEUE);
        }
        if let Some(then) = self.then {
            return match self.steps.pop_front() {
                Some(step) => {
                    self.awaiting = true;
                    Next::Do(step)
                }
                None => then.map_or(Next::Plan, Next::Stop),
            };
        }
        let fence = Step::Fence {
            in_use_refused: false,
        };
        match admit(&self.observed) {
            Admission::Observe(input) => return Next::Gather(input),
            Admission::Withdraw => self.proceed(true),
            Admission::Proceed => self.proceed(false),
            Admission::Refuse { spec_valid, event } => self.stand_back(
                [Step::Report(StandBack::invalid(spec_valid, event)), fence],
                INVALID_REQUEUE,
                "the spec cannot be acted on",
            ),
            // The older election may be waiting for this withdrawal, and the pod patches that
            // end it do not wake it when it does not select those pods.
            Admission::Yield { older } => self.stand_back(
                [
                    Step::Unwatch,
                    Step::Report(StandBack::conflict(&older)),
                    Step::Withdraw {
                        whatever_mode: false,
                    },
                    Step::Wake(older),
                ],
                INVALID_REQUEUE,
                "an older election claims the same pods",
            ),
            // Nothing else wakes the younger one: this election writes nothing meanwhile.
            Admission::WaitFor { younger, .. } => self.stand_back(
                [fence, Step::Wake(younger)],
                YIELD_WAIT,
                "waiting for a younger conflicting election to withdraw its leader label",
            ),
            Admission::AccessInvalid { spec_valid, in_use } => self.stand_back(
                [
                    Step::Report(StandBack::invalid(spec_valid, EventReason::InvalidSpec)),
                    Step::Fence {
                        in_use_refused: in_use,
                    },
                ],
                SECRET_REQUEUE,
                "the Consul access cannot be used",
            ),
            // Nothing moves while paused: the edit is carried out once resumed (a spec
            // change, which wakes the election).
            Admission::EditWaits => self.stand_back(
                [fence],
                INVALID_REQUEUE,
                "an edit of a paused election waits for the resume",
            ),
            // Rule 8: nothing is written; the other install's writes or its claim going wake
            // this election.
            Admission::StandBack { .. } => self.stand_back(
                [Step::Unwatch],
                INVALID_REQUEUE,
                "another install serves this election",
            ),
        }
        self.poll()
    }

    /// The input asked for last, as gathered.
    pub fn gathered(&mut self, found: Found) {
        let observed = &mut self.observed;
        match found {
            Found::LabelKey(check) => observed.label_key = Some(check),
            Found::Older(older) => observed.older = Some(older),
            Found::YieldingLeader(leader) => observed.yielding_leader = Some(leader),
            Found::Access(access) => observed.access = Some(access),
            Found::Applied {
                edited,
                needs_withdrawal,
            } => {
                self.edited = edited;
                observed.needs_withdrawal = Some(needs_withdrawal);
            }
        }
    }

    /// The step handed out last was performed; a fence names when to judge again
    /// (`recheck`), which brings the look forward.
    pub fn done(&mut self, recheck: Option<Duration>) {
        self.awaiting = false;
        if let (Some(Some(look_again)), Some(recheck)) = (&mut self.then, recheck) {
            *look_again = (*look_again).min(recheck);
        }
    }

    /// The `SpecValid` condition of a reconcile that plans: the label-key check's.
    pub fn spec_valid(&self) -> Option<&ConditionState> {
        self.observed.label_key.as_ref()
    }

    /// Why the reconcile stands back or withdraws, for the log (empty while it does neither).
    pub fn why(&self) -> &'static str {
        self.why
    }

    fn proceed(&mut self, withdraw: bool) {
        if withdraw {
            self.steps.push_back(Step::Unwatch);
            self.steps.push_back(Step::Withdraw {
                whatever_mode: true,
            });
            self.why =
                "labels, key, Consul access or session changed: withdrawing the old ones first";
        }
        if self.edited {
            self.steps.push_back(Step::RecordApplied);
        }
        self.steps.push_back(Step::Watch);
        self.then = Some(None);
    }

    fn stand_back(
        &mut self,
        steps: impl IntoIterator<Item = Step>,
        look_again: Duration,
        why: &'static str,
    ) {
        self.steps = steps.into_iter().collect();
        self.then = Some(Some(look_again));
        self.why = why;
    }
}

#[cfg(test)]
mod tests;
