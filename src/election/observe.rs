//! What the planner is given: a snapshot of the pods, the Consul lock and the operator's own
//! session for one election, taken by the I/O layers. Plain data, no I/O handles.

use std::time::Duration;

use jiff::Timestamp;
use tokio::time::Instant;

/// A pod as the planner sees it: a candidate, or a pod that still carries the election's
/// label although it no longer matches the selector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodView {
    /// Pod name.
    pub name: String,
    /// Pod UID (an incarnation of the name).
    pub uid: String,
    /// Matches the election's selector now.
    pub selected: bool,
    /// The Ready condition is True.
    pub ready: bool,
    /// While the pod is NotReady, since when (on this process' monotonic clock), if known.
    pub not_ready_since: Option<NotReadySince>,
    /// Has a deletion timestamp (terminating).
    pub deleting: bool,
    /// `status.phase` is Succeeded or Failed: the pod will never run again.
    pub finished: bool,
    /// Creation timestamp (newer pods are preferred as successors).
    pub created_at: Timestamp,
    /// Pod IP, once assigned.
    pub pod_ip: Option<String>,
    /// Node name, once scheduled.
    pub node: Option<String>,
    /// Current value of the election's label key on the pod.
    pub role: Option<String>,
    /// Current `elector.dev/fencing-token` annotation.
    pub fencing_token: Option<String>,
    /// Current fencing token annotation of the election's label key
    /// ([`crate::crd::label_token_annotation`]).
    pub label_token: Option<String>,
    /// Current `elector.dev/leader-since` annotation.
    pub leader_since: Option<String>,
    /// The `elector.dev/priority` annotation: 0 when absent, `None` when it is not an integer.
    pub priority: Option<i32>,
    /// Current `elector.dev/handover` annotation (a planned move's deadline, or `done`).
    pub handover: Option<String>,
    /// A follower of this election whose operator annotations no election owns (their owner
    /// went away): labelling it again claims them ([`super::annotation_owner::shared_view`]).
    pub reclaim: bool,
    /// What the election knows of the pod as elections writing other label keys share it:
    /// what a role patch does with its annotations.
    pub shared: SharedPod,
}

/// What one election knows of a pod it is about to patch (the default: nothing shares it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SharedPod {
    /// Another existing election owns the pod's annotations; `Some(true)` when that election
    /// labels the pod leader.
    pub foreign_owner_leads: Option<bool>,
    /// The annotations name this election as their owner.
    pub owned_by_me: bool,
    /// Another election, writing another label key, labels the pod leader.
    pub led_by_another: bool,
}

/// The Consul lock (the election's key) as last read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LockView {
    /// Consul has not answered (unreachable, no cluster leader, not read yet).
    Unknown,
    /// The key does not exist.
    Absent,
    /// The key exists and no session holds it.
    Free {
        /// Consul's `LockIndex` of the key.
        lock_index: u64,
    },
    /// The key is held by `session`.
    Held {
        /// The holding session.
        session: String,
        /// Consul's `LockIndex`: the fencing token of this acquisition.
        lock_index: u64,
        /// The key's value (JSON written by the holder), if any.
        value: Option<Vec<u8>>,
    },
}

/// Since when a pod has been NotReady, on this process' monotonic clock: its Ready
/// condition's last change is a time the kubelet wrote on its wall clock, read once, when
/// this process first saw the change, against its own wall clock; from then on only the
/// monotonic clock counts, so a wall clock stepped later moves nothing (docs/design.md rule
/// 8).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotReadySince {
    /// When this process first saw the change.
    pub seen_at: Instant,
    /// How long the pod had been NotReady then (zero for a change the wall clock put in the
    /// future).
    pub before: Duration,
}

impl NotReadySince {
    /// A change made at `changed_at` (wall clock), first seen at `now` when the wall clock read
    /// `wall`.
    pub fn first_seen(changed_at: Timestamp, now: Instant, wall: Timestamp) -> Self {
        NotReadySince {
            seen_at: now,
            before: Duration::try_from(wall.duration_since(changed_at)).unwrap_or_default(),
        }
    }

    /// How long the pod has been NotReady at `now`.
    pub fn elapsed(&self, now: Instant) -> Duration {
        self.before
            .saturating_add(now.saturating_duration_since(self.seen_at))
    }
}

/// Health of the operator's session, as reported by the renewal loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionHealth {
    /// The last renewal (or the creation) succeeded: the request that Consul confirmed was
    /// sent at `renewed_at` (monotonic clock).
    Alive {
        /// When the last confirmed request was sent.
        renewed_at: Instant,
    },
    /// Renewals are failing with transient errors; the last confirmed request was sent at
    /// `renewed_at` (monotonic clock).
    Unconfirmed {
        /// When the last confirmed request was sent.
        renewed_at: Instant,
    },
    /// Consul answered that the session does not exist (expired or destroyed).
    Lost,
}

/// The session the operator holds for this election (one per election, created for the pod
/// it elects).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionView {
    /// Consul session ID.
    pub id: String,
    /// The pod the session was created for.
    pub pod: String,
    /// That pod's UID.
    pub pod_uid: String,
    /// Renewal state.
    pub health: SessionHealth,
    /// The session's TTL.
    pub ttl: Duration,
}

/// A leader as the election's status records it: read back by the next reconcile
/// ([`Recorded`]) and produced by the planner ([`super::plan::StatusState`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderRecord {
    /// Pod name.
    pub pod: String,
    /// Pod UID.
    pub uid: String,
    /// Pod IP when it was elected.
    pub pod_ip: Option<String>,
    /// When it became leader.
    pub since: Timestamp,
    /// Its Consul session.
    pub session_id: Option<String>,
}

/// What the status said before this reconcile.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Recorded {
    /// The recorded leader, if any.
    pub leader: Option<LeaderRecord>,
    /// The recorded fencing token.
    pub fencing_token: Option<u64>,
    /// Number of leadership changes so far.
    pub transitions: u64,
    /// The last switchover request and how it went.
    pub last_switchover: Option<SwitchoverRecord>,
    /// The install of the operator that wrote the status (`<cluster>/<install>`), when it
    /// says so.
    pub served_by: Option<String>,
}

/// A switchover request as the status records it (`status.lastSwitchover`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SwitchoverRecord {
    /// The pod asked for, or `*`.
    pub to: String,
    /// The leader when the request was first seen.
    pub from: Option<String>,
    /// The leader once the move completed.
    pub leader: Option<String>,
    /// When the request was first seen.
    pub requested_at: Timestamp,
    /// When it was completed or refused.
    pub completed_at: Option<Timestamp>,
    /// Where it stands.
    pub outcome: SwitchoverOutcome,
    /// Why it was refused, or what was done.
    pub message: String,
}

/// Where a switchover stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SwitchoverOutcome {
    /// The move is under way.
    InProgress,
    /// The pod asked for leads.
    Completed,
    /// Nothing moved.
    Refused,
}
