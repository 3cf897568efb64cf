//! What the planner decides: an ordered list of actions for the I/O layer, the status the
//! election should report, and when to look again.
//!
//! A plan only contains steps whose inputs are known now. The controller executes them in
//! order, stops at the first failure, re-observes and asks the planner again, so a sequence
//! such as "demote A, release, create a session for B" is followed (once B's session exists)
//! by "acquire for B" and then (once the lock index is known) by "label B leader".

use std::time::Duration;

use jiff::Timestamp;
use tokio::time::Instant;

use super::observe::{LeaderRecord, SwitchoverRecord};

/// One step for the I/O layer, in the order of docs/design.md rule 1.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Label the pod as a follower and remove the leader annotations.
    LabelFollower {
        /// Pod name.
        pod: String,
        /// Pod UID (the patch must not touch another incarnation).
        uid: String,
    },
    /// Remove the election's label and annotations from a pod that is no longer selected.
    Unlabel {
        /// Pod name.
        pod: String,
        /// Pod UID.
        uid: String,
    },
    /// Release the key held by the operator's session (`?release=`, no lock-delay).
    Release {
        /// The holding session.
        session: String,
    },
    /// Destroy the operator's session of this election (and stop renewing it).
    DestroySession {
        /// The session.
        session: String,
    },
    /// Stop tracking a session that Consul already invalidated.
    ForgetSession,
    /// Create the election's session for the pod that should lead.
    CreateSession {
        /// Pod name.
        pod: String,
        /// Pod UID.
        uid: String,
    },
    /// Renew the session before it acquires again the key it held, as the status records:
    /// that lock was lost without the operator releasing it, most often because Consul
    /// invalidated the session, and Consul refuses an acquisition during the lock-delay before
    /// it even checks the session. Asking first lets a lost session be handled as lost (the
    /// lock-delay waited out, a new session) instead of racing the lock-delay with a dead one.
    ConfirmSession {
        /// The session.
        session: String,
    },
    /// Acquire the key with the election's current session.
    Acquire {
        /// The session (created for `pod`).
        session: String,
        /// Pod name, for the key's value.
        pod: String,
    },
    /// Write the fencing token into the status before a pod is labelled with it (rule 6
    /// across failures: a token handed out once is never handed out again, even if the key
    /// is re-created and nothing else of this reconcile reaches the status). Planned right
    /// before the [`Action::LabelLeader`] of a token the status does not hold yet.
    RecordToken {
        /// The pod about to be labelled.
        uid: String,
        /// Its token.
        fencing_token: u64,
        /// The status does not name this pod yet: the write is the whole status this plan
        /// decides with the pod labelled, so the write at the end has nothing left to change.
        /// Otherwise (a retry for the same pod) only the token is written.
        whole: bool,
    },
    /// Label the pod leader with its fencing token; only ever planned for the pod whose lock
    /// the operator holds, and only when no other pod carries the leader label.
    LabelLeader {
        /// Pod name.
        pod: String,
        /// Pod UID.
        uid: String,
        /// Consul `LockIndex` of the acquisition.
        fencing_token: u64,
        /// When this pod became leader.
        since: Timestamp,
    },
    /// Annotate the leader `elector.dev/handover=<deadline>` before a planned move.
    AnnotateHandover {
        /// Pod name.
        pod: String,
        /// Pod UID.
        uid: String,
        /// Until when the move waits for the pod to hand over.
        deadline: Timestamp,
    },
    /// Remove the `elector.dev/handover` annotation from a pod that keeps leading (the planned
    /// move was withdrawn).
    ClearHandover {
        /// Pod name.
        pod: String,
        /// Pod UID.
        uid: String,
    },
    /// Write a switchover's record (`status.lastSwitchover`): before the move it starts (the
    /// pod it moves away from must survive a lost end-of-reconcile status write, or a `*`
    /// request would move leadership again from the pod it just moved to), and with its
    /// outcome before the request is removed (whoever waits for the annotation to go finds
    /// the outcome at the same moment, never the previous request's).
    RecordSwitchover {
        /// The record.
        record: SwitchoverRecord,
        /// The request whose outcome this is. It counts as decided from before the write on,
        /// so that neither a write whose answer was lost nor a removal that never came lets a
        /// later reconcile decide it again.
        decides: Option<String>,
    },
    /// Remove the election's `elector.dev/switchover-to` annotation, if it still has this
    /// value (a newer request is left alone). The request counts as decided from before the
    /// removal on.
    ClearSwitchover {
        /// The request decided.
        request: String,
    },
    /// Publish an event on the election (and on `pod` when given).
    Emit(ElectionEvent),
}

impl Action {
    /// Whether the action may change the election's key: an acquisition, a release, or the
    /// destruction of the session that may hold it.
    pub fn writes_key(&self) -> bool {
        matches!(
            self,
            Self::Acquire { .. } | Self::Release { .. } | Self::DestroySession { .. }
        )
    }

    /// Whether the action writes to Consul (and so needs the token's write rights).
    pub fn writes_consul(&self) -> bool {
        matches!(
            self,
            Self::CreateSession { .. }
                | Self::Acquire { .. }
                | Self::Release { .. }
                | Self::DestroySession { .. }
        )
    }
}

/// Event reasons of docs/design.md section 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventReason {
    /// A pod became leader.
    LeaderElected,
    /// A pod stopped being leader.
    LeaderLost,
    /// Consul invalidated the operator's session.
    SessionLost,
    /// Consul does not answer; the lock cannot be confirmed.
    ConsulUnavailable,
    /// The spec cannot be acted on.
    InvalidSpec,
    /// The spec's label key is in the selector of a candidate pod's controller.
    LabelKeySelectedByOwner,
    /// Another election selects the same pods with the same label key.
    Conflict,
    /// A deletion (or a move to other Consul settings) stopped waiting for Consul and left
    /// the key or the session there.
    ConsulCleanupSkipped,
    /// A requested switchover completed.
    SwitchoverCompleted,
    /// A requested switchover was refused; nothing moved.
    SwitchoverRefused,
    /// Leadership moves back to a pod of higher priority.
    Failback,
    /// Another install of the operator in this cluster serves the election: this one stands
    /// back and writes nothing.
    ManagedElsewhere,
    /// Consul refused one of the election's writes for lack of ACL rights.
    ConsulRefused,
    /// The election's status writes keep failing.
    StatusWriteFailed,
    /// The operator's uninstall released the election and kept it.
    Released,
}

impl EventReason {
    /// The reason string (CamelCase, as Kubernetes events use).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::LeaderElected => "LeaderElected",
            Self::LeaderLost => "LeaderLost",
            Self::SessionLost => "SessionLost",
            Self::ConsulUnavailable => "ConsulUnavailable",
            Self::InvalidSpec => "InvalidSpec",
            Self::LabelKeySelectedByOwner => crate::crd::conditions::SELECTED_BY_OWNER,
            Self::Conflict => "Conflict",
            Self::ConsulCleanupSkipped => "ConsulCleanupSkipped",
            Self::SwitchoverCompleted => "SwitchoverCompleted",
            Self::SwitchoverRefused => "SwitchoverRefused",
            Self::Failback => "Failback",
            Self::ManagedElsewhere => "ManagedElsewhere",
            Self::ConsulRefused => "ConsulRefused",
            Self::StatusWriteFailed => "StatusWriteFailed",
            Self::Released => "Released",
        }
    }

    /// Whether an event of this reason is a Warning (otherwise Normal), unless the planner
    /// says otherwise ([`ElectionEvent::warning`]). Only what needs a look is a Warning:
    /// another install serving the election is a state the user chose.
    pub fn is_warning(self) -> bool {
        !matches!(
            self,
            Self::LeaderElected
                | Self::SwitchoverCompleted
                | Self::Failback
                | Self::ManagedElsewhere
                | Self::Released
        )
    }
}

/// An event to publish.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ElectionEvent {
    /// Why.
    pub reason: EventReason,
    /// The pod concerned, if any (the event is also published on it).
    pub pod: Option<String>,
    /// Human-readable note.
    pub note: String,
    /// Published as a Warning (otherwise Normal): [`EventReason::is_warning`], except that a
    /// leader the operator moves away on purpose (a switchover, a failback, the leader pod
    /// deleted or no longer selected) is no longer leader without anything having failed.
    pub warning: bool,
    /// The event tells of a leader label taken because the lock was lost or could not be
    /// confirmed (rule 2): counted once per label taken, by cause.
    pub fenced: Option<FencingCause>,
}

/// Why a leader label was taken without the leader having been moved on purpose (rule 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FencingCause {
    /// Renewals failed for a whole TTL, or the key went unread: the lock could not be
    /// confirmed.
    Unconfirmed,
    /// Consul invalidated the session, or the key was deleted, released or taken by another
    /// holder.
    Lost,
}

impl FencingCause {
    /// Every cause.
    pub const ALL: [Self; 2] = [Self::Unconfirmed, Self::Lost];

    /// The metrics' `cause` label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Unconfirmed => "unconfirmed",
            Self::Lost => "lost",
        }
    }
}

/// The election's phase, as shown by `kubectl get le`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// No pod can lead (none selected, none eligible) or the lock is held outside the operator.
    Pending,
    /// A leader is being chosen, moved or re-acquired.
    Electing,
    /// A pod is labelled leader and the operator holds its lock.
    Elected,
    /// The lock cannot be confirmed and the leader label was removed.
    Fenced,
    /// Observe mode: the operator mirrors a lock held by the applications.
    Observing,
    /// `spec.paused`: nothing moves; the leader, if any, keeps leading.
    Paused,
}

/// The state of one status condition, before `lastTransitionTime` bookkeeping.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConditionState {
    /// Condition type (`LeaderElected`, `ConsulAvailable`).
    pub type_: &'static str,
    /// True or False.
    pub status: bool,
    /// CamelCase reason.
    pub reason: &'static str,
    /// Human-readable message.
    pub message: String,
}

/// Whether one selected pod may lead, and why not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CandidateState {
    /// Pod name.
    pub pod: String,
    /// May lead.
    pub eligible: bool,
    /// Why not (`NotReady`, `Terminating`, `Finished`, `NeverLeader`, `InvalidPriority`).
    pub reason: Option<&'static str>,
    /// Its `elector.dev/priority` (0 when absent or not an integer).
    pub priority: i32,
}

/// The status the election should report, computed from the same observation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusState {
    /// Phase.
    pub phase: Phase,
    /// The leader (labelled and holding the lock), if any.
    pub leader: Option<LeaderRecord>,
    /// The fencing token of the current leader, or the last one recorded.
    pub fencing_token: Option<u64>,
    /// Leadership changes so far.
    pub transitions: u64,
    /// Every selected pod, sorted by name.
    pub candidates: Vec<CandidateState>,
    /// `LeaderElected` and `ConsulAvailable`.
    pub conditions: Vec<ConditionState>,
    /// The last switchover request and how it went.
    pub last_switchover: Option<SwitchoverRecord>,
    /// The install that serves the election: this one while its session holds the key for
    /// a leader (Managed mode), otherwise the one recorded.
    pub served_by: Option<String>,
}

/// The planner's decision for one observation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Steps to execute in order; the first failure stops the rest.
    pub actions: Vec<Action>,
    /// The status this observation implies.
    pub status: StatusState,
    /// Look again after this long even if nothing changes (failover delay, lock-delay).
    pub requeue_after: Option<Duration>,
    /// Another install of the operator in this cluster serves the election: this one writes
    /// neither pods nor the status (the status is the serving install's), and takes over only
    /// once that install's session no longer holds the key. The caller remembers it and passes
    /// it back with the next observation.
    pub managed_elsewhere: Option<StoodBack>,
}

impl Plan {
    /// Whether the status is another install's to write (rule 8, see
    /// [`Plan::managed_elsewhere`]).
    pub fn leaves_status_to_another_install(&self) -> bool {
        self.managed_elsewhere.is_some()
    }
}

/// This install stands back for another one (see [`Plan::managed_elsewhere`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoodBack {
    /// The serving install, `<cluster>/<install>`.
    pub other: String,
    /// Since when the key has looked free while standing back (the other install's move in
    /// progress, or the install gone): it is acquired only once it stayed free for
    /// [`TAKEOVER_GRACE`].
    /// On the monotonic clock.
    pub key_free_since: Option<Instant>,
}

/// How long a key must stay free before an install that stood back takes it: a move of the
/// serving install frees it for milliseconds, a serving install that is gone for good.
pub const TAKEOVER_GRACE: Duration = Duration::from_secs(2);
