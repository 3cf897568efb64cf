//! The standing invariants of one election, compared across the three places that must agree:
//! the pods carrying the leader label, the Consul lock, and the status.
//!
//! Pure: the caller passes what it observed. A disagreement is normal for the instant of a
//! move (a lock acquired an instant before its pod is labelled); the caller reports one only
//! when it outlives a reconcile.

use super::config::{Mode, Owner};
use super::observe::{LockView, PodView, Recorded, SessionHealth, SessionView};
use super::planner::served_elsewhere;

/// A way the pods, the lock and the status disagree.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Disagreement {
    /// More than one pod carries the leader label.
    TwoLeaderLabels,
    /// A pod carries the leader label but the key is not held by the operator's session for
    /// it (Managed mode, while the key can be read).
    LabelWithoutLock,
    /// The operator's session holds the key for a pod that does not carry the leader label.
    LockWithoutLabel,
    /// Exactly one pod carries the leader label and the status names another leader, or none.
    StaleStatus,
}

impl Disagreement {
    /// Every kind, for metrics that start at zero.
    pub const ALL: [Disagreement; 4] = [
        Disagreement::TwoLeaderLabels,
        Disagreement::LabelWithoutLock,
        Disagreement::LockWithoutLabel,
        Disagreement::StaleStatus,
    ];

    /// The metric label value and event wording of the kind.
    pub fn as_str(self) -> &'static str {
        match self {
            Disagreement::TwoLeaderLabels => "two_leader_labels",
            Disagreement::LabelWithoutLock => "label_without_lock",
            Disagreement::LockWithoutLabel => "lock_without_label",
            Disagreement::StaleStatus => "stale_status",
        }
    }
}

/// What one election looks like right now.
#[derive(Debug, Clone, Copy)]
pub struct Snapshot<'a> {
    /// Managed or Observe.
    pub mode: Mode,
    /// The leader label's value.
    pub leader_value: &'a str,
    /// The election's pods (selected, or still labelled).
    pub pods: &'a [PodView],
    /// The key as last read.
    pub lock: &'a LockView,
    /// The operator's session for the election, if any.
    pub session: Option<&'a SessionView>,
    /// What the status says.
    pub recorded: &'a Recorded,
    /// This operator: an election another install serves is not its to judge.
    pub owner: &'a Owner,
    /// The election plans. One that cannot (refused, in conflict) has no status or lock kept
    /// up to date, but rules 1 and 2 hold for it too: it is checked for two leader labels and
    /// a label without its lock only.
    pub acting: bool,
}

/// The disagreements in `snapshot`, each kind once, in a fixed order.
pub fn disagreements(snapshot: &Snapshot<'_>) -> Vec<Disagreement> {
    if served_elsewhere(snapshot.lock, snapshot.owner, snapshot.pods).is_some() {
        return Vec::new();
    }
    let labelled: Vec<&PodView> = snapshot
        .pods
        .iter()
        .filter(|p| p.role.as_deref() == Some(snapshot.leader_value))
        .collect();
    let mut found = Vec::new();
    if labelled.len() > 1 {
        found.push(Disagreement::TwoLeaderLabels);
    }
    // The lock is compared only when it is known: the key was read and the session's health
    // is settled (an unconfirmed session is Fence's or KeepLeader's business, not a drift).
    let unconfirmed = snapshot
        .session
        .is_some_and(|s| matches!(s.health, SessionHealth::Unconfirmed { .. }));
    if snapshot.mode == Mode::Managed && *snapshot.lock != LockView::Unknown && !unconfirmed {
        let holder = match (snapshot.lock, snapshot.session) {
            (LockView::Held { session, .. }, Some(s))
                if *session == s.id && s.health != SessionHealth::Lost =>
            {
                Some(s.pod_uid.as_str())
            }
            _ => None,
        };
        if labelled.iter().any(|p| Some(p.uid.as_str()) != holder) {
            found.push(Disagreement::LabelWithoutLock);
        }
        if snapshot.acting && holder.is_some_and(|uid| !labelled.iter().any(|p| p.uid == uid)) {
            found.push(Disagreement::LockWithoutLabel);
        }
    }
    if let [only] = labelled.as_slice()
        && snapshot.acting
        && snapshot.recorded.leader.as_ref().map(|l| l.uid.as_str()) != Some(only.uid.as_str())
    {
        found.push(Disagreement::StaleStatus);
    }
    found
}
