//! Rule 7's bound: a deleted election whose Consul cleanup fails (Consul unreachable) is
//! retried with a growing delay, and the operator gives up on Consul once the bound has passed
//! since `metadata.deletionTimestamp`, or at once when the election carries
//! [`SKIP_CONSUL_CLEANUP_ANNOTATION`] = `"true"`: a namespace must never stay Terminating
//! because Consul is unreachable.

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};

use super::plan::{ElectionEvent, EventReason};
use crate::crd::SKIP_CONSUL_CLEANUP_ANNOTATION;

/// How long after a LeaderElection's deletion (its `metadata.deletionTimestamp`) the operator
/// keeps retrying to release its key and destroy its session in Consul before it gives up,
/// removes the finalizer anyway and says in a Warning event what was left behind.
pub const CONSUL_CLEANUP_BOUND: Duration = Duration::from_secs(300);

/// How long Consul is waited for while the install is being uninstalled (counted from the
/// uninstall's release request, or a deletion): shorter than the hook waits by default, so
/// an uninstall with Consul gone (an environment torn down) completes.
pub const UNINSTALL_BOUND: Duration = Duration::from_secs(60);
/// Shortest and longest wait between two attempts to clean up in Consul.
pub const RETRY_BOUNDS: (Duration, Duration) = (Duration::from_secs(1), Duration::from_secs(30));

/// Whether a cleanup still waits for Consul.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Deadline {
    /// Try again after this delay.
    RetryIn(Duration),
    /// Stop waiting, for this reason.
    GiveUp(String),
}

/// The Warning saying what a cleanup that gave up on Consul (`why`, after `error`) left
/// there: the key `consul_key`, held perhaps by `session`, which is no longer renewed.
pub fn gave_up(consul_key: &str, session: Option<&str>, why: &str, error: &str) -> ElectionEvent {
    let left = match session {
        Some(session) => format!(
            "the key {consul_key} may still be held by session {session}, which is no longer renewed and expires after its TTL"
        ),
        None => format!("the key {consul_key} may still exist"),
    };
    ElectionEvent {
        reason: EventReason::ConsulCleanupSkipped,
        pod: None,
        note: format!("gave up cleaning up in Consul ({why}; last error: {error}): {left}"),
        warning: true,
        fenced: None,
    }
}

/// The bound on Consul of a withdrawal: `configured`, or [`UNINSTALL_BOUND`] when shorter
/// while the install is `uninstalling`.
pub fn bound(uninstalling: bool, configured: Duration) -> Duration {
    if uninstalling {
        configured.min(UNINSTALL_BOUND)
    } else {
        configured
    }
}

/// When to try Consul again, or why not any more. `skip` is the value of the election's
/// [`SKIP_CONSUL_CLEANUP_ANNOTATION`], `deleted_at` its `metadata.deletionTimestamp` (none: an
/// election not deleted, such as one withdrawing before a spec edit, counts from `now`). The
/// retry delay grows with the time since the deletion (a quarter of it, within
/// [`RETRY_BOUNDS`]) and never passes the bound.
pub fn deadline(
    skip: Option<&str>,
    deleted_at: Option<Timestamp>,
    now: Timestamp,
    bound: Duration,
) -> Deadline {
    if skip == Some("true") {
        return Deadline::GiveUp(format!(
            "the annotation {SKIP_CONSUL_CLEANUP_ANNOTATION} says so"
        ));
    }
    let elapsed = deleted_at
        .and_then(|at| Duration::try_from(now.duration_since(at)).ok())
        .unwrap_or_default();
    let Some(left) = bound.checked_sub(elapsed).filter(|l| !l.is_zero()) else {
        return Deadline::GiveUp(format!(
            "Consul could not be reached for {}s after the deletion",
            SignedDuration::try_from(elapsed)
                .unwrap_or_default()
                .as_secs()
        ));
    };
    let (min, max) = RETRY_BOUNDS;
    Deadline::RetryIn((elapsed / 4).clamp(min, max).min(left))
}
