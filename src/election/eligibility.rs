//! Which pods may lead, which may keep leading, and who succeeds (docs/design.md rules 4 and 5,
//! with priorities: the eligible pod of highest `elector.dev/priority` is preferred, and a pod
//! of negative priority never leads).

use std::time::Duration;

use jiff::Timestamp;
use tokio::time::Instant;

use super::config::ElectionConfig;
use super::observe::{PodView, Recorded};

/// Why a pod may not lead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ineligible {
    /// It no longer matches the selector.
    NotSelected,
    /// It is being deleted.
    Terminating,
    /// Its phase is Succeeded or Failed.
    Finished,
    /// Its Ready condition is not True and the spec requires readiness.
    NotReady,
    /// Its `elector.dev/priority` is negative.
    NeverLeader,
    /// Its `elector.dev/priority` is not an integer.
    InvalidPriority,
}

impl Ineligible {
    /// The reason as shown in `status.candidates[].reason`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NotSelected => "NotSelected",
            Self::Terminating => "Terminating",
            Self::Finished => "Finished",
            Self::NotReady => "NotReady",
            Self::NeverLeader => "NeverLeader",
            Self::InvalidPriority => "InvalidPriority",
        }
    }
}

/// Whether `pod` may become leader now.
pub fn eligibility(pod: &PodView, config: &ElectionConfig) -> Result<(), Ineligible> {
    if !pod.selected {
        Err(Ineligible::NotSelected)
    } else if pod.deleting {
        Err(Ineligible::Terminating)
    } else if pod.finished {
        Err(Ineligible::Finished)
    } else if pod.priority.is_none() {
        Err(Ineligible::InvalidPriority)
    } else if pod.priority.is_some_and(|p| p < 0) {
        Err(Ineligible::NeverLeader)
    } else if config.require_ready && !pod.ready {
        Err(Ineligible::NotReady)
    } else {
        Ok(())
    }
}

/// Whether the current leader keeps leading.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tenure {
    /// It stays leader.
    Keep,
    /// It is NotReady but within `failover.delay`; look again after this long.
    KeepFor(Duration),
    /// It must be replaced.
    Replace(Ineligible),
}

/// Rule 4: a leader is replaced when it is deleted, terminating, no longer selected, or
/// NotReady for at least `failover.delay` (measured from its Ready condition's last change,
/// on the monotonic clock: [`crate::election::observe::NotReadySince`]).
pub fn tenure(leader: &PodView, config: &ElectionConfig, now: Instant) -> Tenure {
    match eligibility(leader, config) {
        Ok(()) => Tenure::Keep,
        Err(Ineligible::NotReady) => {
            let not_ready_for = leader
                .not_ready_since
                .map_or(Duration::ZERO, |since| since.elapsed(now));
            if not_ready_for >= config.failover_delay {
                Tenure::Replace(Ineligible::NotReady)
            } else {
                Tenure::KeepFor(config.failover_delay - not_ready_for)
            }
        }
        Err(reason) => Tenure::Replace(reason),
    }
}

/// Rule 5 with priorities: among the eligible pods of the highest priority, the previous
/// leader if it is one of them, else the newest, ties broken by name. `exclude` is a pod UID
/// that must not be chosen (the leader being replaced).
pub fn successor<'a>(
    pods: &'a [PodView],
    config: &ElectionConfig,
    recorded: &Recorded,
    exclude: Option<&str>,
) -> Option<&'a PodView> {
    let previous = recorded.leader.as_ref().map(|l| l.uid.as_str());
    pods.iter()
        .filter(|p| Some(p.uid.as_str()) != exclude && eligibility(p, config).is_ok())
        .max_by(|a, b| {
            let rank = |p: &PodView| {
                (
                    p.priority.unwrap_or(0),
                    Some(p.uid.as_str()) == previous,
                    p.created_at,
                )
            };
            rank(a).cmp(&rank(b)).then_with(|| b.name.cmp(&a.name))
        })
}

/// Time from `since` to `now` on the wall clock (for times another process, or an earlier one,
/// wrote: a leader's `since`, a switchover request), zero when `since` is in the future.
pub fn elapsed(since: Timestamp, now: Timestamp) -> Duration {
    Duration::try_from(now.duration_since(since)).unwrap_or(Duration::ZERO)
}
