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
    /// Status writes that failed in a row before this one, with the last error's category.
    pub failed_writes: Option<(u32, &'static str)>,
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
    /// Whether it is the status a reconcile decides, which carries the `StatusWritten`
    /// condition (else a record made before acting, which leaves the count of failed writes
    /// to the next whole status).
    pub whole: bool,
    /// The Warning to publish once written: a stand-back condition that is news.
    pub event: Option<ElectionEvent>,
}

impl StatusChange {
    /// The status this change makes of `current`, the status as the writer knows it now.
    pub fn render(&self, current: &LeaderElectionStatus, facts: &Facts) -> Rendered {
        let rendering = |labelled, spec_valid: &ConditionState| Rendering {
            old: current,
            generation: facts.generation,
            labelled,
            applied: applied(current, facts),
            spec_valid: spec_valid.clone(),
            lease_timing: facts
                .lease_timing
                .clone()
                .filter(|_| facts.mode == Some(Mode::Managed)),
            failed_writes: facts.failed_writes,
            now: facts.now,
        };
        let whole = |status| Rendered {
            status,
            whole: true,
            event: None,
        };
        let record = |status| Rendered {
            status,
            whole: false,
            event: None,
        };
        match self {
            StatusChange::Decided { plan, spec_valid } => {
                let labelled = facts.labelled.as_deref();
                whole(report::decided(plan, rendering(labelled, spec_valid)))
            }
            StatusChange::Token {
                plan,
                uid,
                token,
                whole: true,
                spec_valid,
            } => whole(report::decided_with_token(
                plan,
                rendering(Some(uid), spec_valid),
                *token,
            )),
            StatusChange::Token { token, .. } => record(report::token_recorded(
                current,
                *token,
                applied(current, facts),
            )),
            StatusChange::Switchover { record: r, .. } => {
                record(report::switchover_recorded(current, r))
            }
            StatusChange::Applied => record(LeaderElectionStatus {
                applied: facts.applied.clone(),
                ..current.clone()
            }),
            StatusChange::StandBack(back) => {
                let (status, event) =
                    report::standing_back(current, facts.generation, back, facts.now);
                Rendered {
                    status,
                    whole: true,
                    event,
                }
            }
            StatusChange::Released => {
                let (status, event) = report::released(current, facts.generation, facts.now);
                Rendered {
                    status,
                    whole: true,
                    event: Some(event),
                }
            }
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
