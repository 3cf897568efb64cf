//! Every status write of a reconcile as one vocabulary: what it changes on the status as the
//! writer knows it now, rendered by [`StatusChange::render`]. The controller sends the result
//! conditional on the status it was decided from; the property tests apply it to their
//! simulated status, so both write what the same code renders.

use jiff::Timestamp;

use super::config::Mode;
use super::observe::SwitchoverRecord;
use super::plan::{ConditionState, ElectionEvent, Plan};
use super::report::{self, Rendering, StandBack};
use crate::crd::{AppliedSpec, LeaderElectionStatus};

/// A status write.
#[derive(Debug, Clone, PartialEq)]
pub enum StatusChange {
    /// The status `plan` decides, as far as it was carried out ([`Facts::labelled`]).
    Decided {
        /// The plan.
        plan: Box<Plan>,
        /// The `SpecValid` condition (True).
        spec_valid: ConditionState,
        /// Status writes that failed in a row before this one, with the last error's category.
        failed_writes: Option<(u32, &'static str)>,
    },
    /// Rule 6 before pod `uid` is labelled with `token`: for a `whole` record the status
    /// `plan` decides once the pod carries the label, else the status as it is with the token.
    Token {
        /// The plan that labels the pod.
        plan: Box<Plan>,
        /// The pod's UID.
        uid: String,
        /// Its token.
        token: u64,
        /// See above.
        whole: bool,
        /// The `SpecValid` condition (True).
        spec_valid: ConditionState,
        /// See [`StatusChange::Decided`].
        failed_writes: Option<(u32, &'static str)>,
    },
    /// How a switchover request was decided; `decides`: the request it decides, decided from
    /// now on even if the write fails.
    Switchover {
        /// The record.
        record: SwitchoverRecord,
        /// See above.
        decides: Option<String>,
    },
    /// The spec's values ([`Facts::applied`]) are the ones the operator acts with from now on
    /// (`status.applied`), recorded before it acts with them.
    Applied,
    /// The election stands back (an invalid spec, an older election claiming its pods).
    StandBack(StandBack),
    /// The uninstall of the operator released the election and keeps it: nobody leads, and no
    /// install serves it ([`report::released`]).
    Released,
}

/// What a status is rendered from beside the change and the status before it.
#[derive(Debug, Clone)]
pub struct Facts {
    /// The election's `metadata.generation`.
    pub generation: Option<i64>,
    /// What the spec makes the operator act with (`None` for a spec that is not valid): the
    /// values recorded by the first write of a new election.
    pub applied: Option<AppliedSpec>,
    /// The spec's mode (`None` for a spec that is not valid).
    pub mode: Option<Mode>,
    /// The `LeaseTimingSafe` condition for the spec's session TTL (reported for a managed
    /// election only).
    pub lease_timing: Option<ConditionState>,
    /// The UID of the one pod that carries the election's leader label now, if one does.
    pub labelled: Option<String>,
    /// The wall clock, for the transition times of conditions that change.
    pub now: Timestamp,
}

/// A rendered status write.
#[derive(Debug, Clone, PartialEq)]
pub struct Rendered {
    /// The status to write (nothing is written when it is the status before).
    pub status: LeaderElectionStatus,
    /// The Warning to publish once written: a stand-back condition that is news.
    pub event: Option<ElectionEvent>,
}

impl StatusChange {
    /// The status this change makes of `current`, the status as the writer knows it now.
    pub fn render(&self, current: &LeaderElectionStatus, facts: &Facts) -> Rendered {
        let rendering = |labelled, spec_valid: &ConditionState, failed_writes| Rendering {
            old: current,
            generation: facts.generation,
            labelled,
            applied: applied(current, facts),
            spec_valid: spec_valid.clone(),
            lease_timing: facts
                .lease_timing
                .clone()
                .filter(|_| facts.mode == Some(Mode::Managed)),
            failed_writes,
            now: facts.now,
        };
        let (status, event) = match self {
            StatusChange::Decided {
                plan,
                spec_valid,
                failed_writes,
            } => {
                let labelled = facts.labelled.as_deref();
                let rendering = rendering(labelled, spec_valid, *failed_writes);
                (report::decided(plan, rendering), None)
            }
            StatusChange::Token {
                plan,
                uid,
                token,
                whole: true,
                spec_valid,
                failed_writes,
            } => {
                let rendering = rendering(Some(uid), spec_valid, *failed_writes);
                (report::decided_with_token(plan, rendering, *token), None)
            }
            StatusChange::Token { token, .. } => {
                let applied = applied(current, facts);
                (report::token_recorded(current, *token, applied), None)
            }
            StatusChange::Switchover { record, .. } => {
                (report::switchover_recorded(current, record), None)
            }
            StatusChange::Applied => {
                let applied = facts.applied.clone();
                (
                    LeaderElectionStatus {
                        applied,
                        ..current.clone()
                    },
                    None,
                )
            }
            StatusChange::StandBack(back) => {
                report::standing_back(current, facts.generation, back, facts.now)
            }
            StatusChange::Released => {
                let (status, event) = report::released(current, facts.generation, facts.now);
                (status, Some(event))
            }
        };
        Rendered { status, event }
    }

    /// Whether it writes the status a reconcile decides, which carries the `StatusWritten`
    /// condition: once written, no run of failed writes stands.
    pub fn whole(&self) -> bool {
        match self {
            StatusChange::Decided { .. } | StatusChange::StandBack(_) | StatusChange::Released => {
                true
            }
            StatusChange::Token { whole, .. } => *whole,
            StatusChange::Switchover { .. } | StatusChange::Applied => false,
        }
    }

    /// The switchover request this write decides, if it decides one.
    pub fn decides(&self) -> Option<&str> {
        match self {
            StatusChange::Switchover { decides, .. } => decides.as_deref(),
            _ => None,
        }
    }
}

/// What the status records as applied: the record, or for a new election what it acts with.
/// (First written with the first status: until then nothing was done that an edit of the spec
/// would have to undo, see [`super::spec_edits`].)
fn applied(current: &LeaderElectionStatus, facts: &Facts) -> Option<AppliedSpec> {
    current.applied.clone().or_else(|| facts.applied.clone())
}
