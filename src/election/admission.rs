//! Whether the operator may act on an election at all, before the planner runs, and what it
//! does instead: the precedence `controller::apply` follows (docs/design.md section 3).
//!
//! In order, the first that applies wins:
//! 1. an invalid spec is refused (phase Invalid, `InvalidSpec`);
//! 2. a label key that the pods' controller selects is refused the same way
//!    (`LabelKeySelectedByOwner`): writing it would make that controller disown the pods;
//! 3. an older election claiming the same pods under the same label key: this one yields
//!    (phase Conflict, withdraws, wakes the older one);
//! 4. a younger election that yields to this one but still labels a pod leader: this one
//!    waits for its withdrawal (rule 1 across elections);
//! 5. a Consul access the user must fix (a Secret gone or not opted in, an address or
//!    datacenter not allowed): phase Invalid, and the leader label goes as rule 2 says;
//! 6. labels, key, Consul access or session settings other than the recorded ones: the old
//!    ones are withdrawn first, then the election proceeds; while the election is paused the
//!    edit waits for the resume (nothing moves), the leader label staying as rule 2 allows;
//! 7. otherwise it proceeds (the planner's round).
//!
//! Rule 8 over all of them: when the status names another install as serving the election,
//! every outcome but proceeding becomes [`Admission::StandBack`]: an install that does not
//! serve an election writes nothing to it, its pods or its key, whatever it thinks of the
//! spec (its settings may differ: allowlists, RBAC, versions). Proceeding is left to the
//! planner, which takes over only once that install's session no longer holds the key.
//!
//! The inputs are observed lazily ([`Observed`]: `None` until gathered): some cost I/O (the
//! pods' controllers are read from the API server, the Consul access may read a Secret), and
//! none is gathered once an earlier step decided. [`admit`] says which input to gather next
//! ([`Admission::Observe`]) until the ones it has decide.

use super::config::Owner;
use super::plan::{ConditionState, EventReason};

/// The inputs of [`admit`], in its order; each `None` until gathered.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Observed {
    /// The spec's validation: `Err` with the `SpecValid` condition saying what is wrong.
    pub spec: Option<Result<(), ConditionState>>,
    /// The `SpecValid` condition of the label-key check against the pods' controllers
    /// (`status` false: the key is refused), see [`super::label_key_check::check_label_key`].
    pub label_key: Option<ConditionState>,
    /// The oldest older election that conflicts with this one, if any
    /// ([`super::conflict::yields_to`]).
    pub older: Option<Option<String>>,
    /// A pod that a younger, yielding election still labels leader, and that election's
    /// name ([`super::conflict::yielding_to_me`]).
    pub yielding_leader: Option<Option<(String, String)>>,
    /// How the election's Consul access checked out.
    pub access: Option<Access>,
    /// Whether the values recorded in `status.applied` differ from the spec's so that they
    /// must be withdrawn first ([`super::spec_edits::needs_withdrawal`]; false when nothing is
    /// recorded).
    pub needs_withdrawal: Option<bool>,
    /// Another install that the status names as serving the election ([`served_elsewhere`]);
    /// read with the status, so always known.
    pub served_elsewhere: Option<String>,
    /// The spec pauses the election (`spec.paused`); read with the spec, so always known.
    pub paused: bool,
}

/// The install `served_by` (`status.servedBy`) when it is not `owner`, now or before a
/// rename.
pub fn served_elsewhere(served_by: Option<&str>, owner: &Owner) -> Option<String> {
    served_by
        .filter(|other| !owner.is_id(other))
        .map(str::to_owned)
}

/// The outcome of the Consul access check, as data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Access {
    /// The election may use it.
    Usable,
    /// Something the user must fix.
    Invalid {
        /// The `SpecValid` condition saying what.
        spec_valid: ConditionState,
        /// The refused access is the one the operator acts with (`status.applied`, or nothing
        /// recorded): it is not used any more, see [`super::spec_edits::same_access`].
        in_use: bool,
    },
}

/// The inputs of [`admit`], in the order it needs them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Input {
    /// [`Observed::spec`].
    Spec,
    /// [`Observed::label_key`].
    LabelKey,
    /// [`Observed::older`].
    Older,
    /// [`Observed::yielding_leader`].
    YieldingLeader,
    /// [`Observed::access`].
    Access,
    /// [`Observed::needs_withdrawal`].
    Applied,
}

/// What the operator does with an election before (or instead of) planning.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admission {
    /// Undecided: gather this input next (every earlier one lets the election go on).
    Observe(Input),
    /// Stand back: phase Invalid with this `SpecValid` condition, `event` when that is news;
    /// the leader label left stays only as long as rule 2 allows.
    Refuse {
        /// The `SpecValid` condition.
        spec_valid: ConditionState,
        /// The event's reason.
        event: EventReason,
    },
    /// An older election claims the same pods: report Conflict, withdraw, wake it.
    Yield {
        /// Its name.
        older: String,
    },
    /// A younger election still labels a pod leader: wake it and look again soon.
    WaitFor {
        /// Its name.
        younger: String,
        /// The pod.
        pod: String,
    },
    /// The Consul access is unusable: phase Invalid (`InvalidSpec`), and the leader label goes
    /// as rule 2 says.
    AccessInvalid {
        /// The `SpecValid` condition.
        spec_valid: ConditionState,
        /// The refused access is the one in use (see [`Access::Invalid`]).
        in_use: bool,
    },
    /// Withdraw what was done with the recorded values, then proceed.
    Withdraw,
    /// A paused election's edit that needs a withdrawal waits for the resume; the leader
    /// label left stays only as long as rule 2 allows.
    EditWaits,
    /// Another install serves the election: write nothing, look again when it changes.
    StandBack {
        /// That install, `<cluster>/<install>`.
        other: String,
    },
    /// Act: record the spec's values if they are new, and run the planner.
    Proceed,
}

/// The decision for an election observed as `observed`, in the module's precedence.
pub fn admit(observed: &Observed) -> Admission {
    match (precedence(observed), &observed.served_elsewhere) {
        (
            Admission::Refuse { .. }
            | Admission::Yield { .. }
            | Admission::WaitFor { .. }
            | Admission::AccessInvalid { .. }
            | Admission::Withdraw
            | Admission::EditWaits,
            Some(other),
        ) => Admission::StandBack {
            other: other.clone(),
        },
        (decision, _) => decision,
    }
}

/// The decision for an election that no other install serves.
fn precedence(observed: &Observed) -> Admission {
    match &observed.spec {
        None => return Admission::Observe(Input::Spec),
        Some(Err(spec_valid)) => {
            return Admission::Refuse {
                spec_valid: spec_valid.clone(),
                event: EventReason::InvalidSpec,
            };
        }
        Some(Ok(())) => {}
    }
    match &observed.label_key {
        None => return Admission::Observe(Input::LabelKey),
        Some(spec_valid) if !spec_valid.status => {
            return Admission::Refuse {
                spec_valid: spec_valid.clone(),
                event: EventReason::LabelKeySelectedByOwner,
            };
        }
        Some(_) => {}
    }
    match &observed.older {
        None => return Admission::Observe(Input::Older),
        Some(Some(older)) => {
            return Admission::Yield {
                older: older.clone(),
            };
        }
        Some(None) => {}
    }
    match &observed.yielding_leader {
        None => return Admission::Observe(Input::YieldingLeader),
        Some(Some((pod, younger))) => {
            return Admission::WaitFor {
                younger: younger.clone(),
                pod: pod.clone(),
            };
        }
        Some(None) => {}
    }
    match &observed.access {
        None => return Admission::Observe(Input::Access),
        Some(Access::Invalid { spec_valid, in_use }) => {
            return Admission::AccessInvalid {
                spec_valid: spec_valid.clone(),
                in_use: *in_use,
            };
        }
        Some(Access::Usable) => {}
    }
    match observed.needs_withdrawal {
        None => Admission::Observe(Input::Applied),
        Some(true) if observed.paused => Admission::EditWaits,
        Some(true) => Admission::Withdraw,
        Some(false) => Admission::Proceed,
    }
}

#[cfg(test)]
mod tests;
