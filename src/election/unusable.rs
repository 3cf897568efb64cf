//! Rule 2 for an election the operator cannot act on: its spec became invalid, or its Consul
//! access unusable (a Secret gone or no longer opted in, an address or datacenter no longer
//! allowed), or it waits for a younger conflicting election to withdraw. The planner cannot
//! run for it, but a leader label it left is still a promise that the pod holds the lock. The
//! promise is about the lock, not the session: the label stays only while the key's last read
//! showed it held by the election's session, and goes a TTL after the lock was last confirmed
//! (the last successful read of the key, or, when none, the moment this process started
//! deciding; no later than the session's last confirmed renewal when nothing renews it).

use std::time::Duration;

use tokio::time::Instant;

use super::observe::LockView;

/// What becomes of the leader label of an election the operator cannot act on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnusableLabel {
    /// The label stays; look again after this long at the latest.
    Keep(Duration),
    /// The label goes now.
    Fence,
}

/// What is known of an unusable election's lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnusableLock<'a> {
    /// The key as last read (`Unknown` while reads fail or nothing watches it).
    pub lock: &'a LockView,
    /// The election's session: the one this process holds, else the one the status records.
    pub session: Option<&'a str>,
    /// When the key was last read successfully; `None` when never by this process.
    pub read_at: Option<Instant>,
    /// `None` while this process renews the session; otherwise the moment the session was
    /// last confirmed (its last renewal, or when this process started deciding).
    pub session_unconfirmed_since: Option<Instant>,
    /// When this process started deciding.
    pub started_at: Instant,
}

/// The fate of the leader label of an election whose lock is `lock`, at `now`, for a session
/// TTL of `ttl`. Every time is on the monotonic clock.
pub fn unusable_label(lock: &UnusableLock<'_>, now: Instant, ttl: Duration) -> UnusableLabel {
    match lock.lock {
        LockView::Held { session, .. } if Some(session.as_str()) == lock.session => {}
        LockView::Unknown => {}
        // Deleted, free, or held by another session: no lock backs the label.
        LockView::Absent | LockView::Free { .. } | LockView::Held { .. } => {
            return UnusableLabel::Fence;
        }
    }
    let read = lock.read_at.unwrap_or(lock.started_at);
    let confirmed_at = lock
        .session_unconfirmed_since
        .map_or(read, |since| since.min(read));
    let unconfirmed = now.saturating_duration_since(confirmed_at);
    if unconfirmed >= ttl {
        UnusableLabel::Fence
    } else {
        UnusableLabel::Keep(ttl - unconfirmed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `s` seconds after a fixed origin.
    fn t(s: u64) -> Instant {
        static ORIGIN: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
        Instant::from_std(*ORIGIN.get_or_init(std::time::Instant::now)) + Duration::from_secs(s)
    }

    const TTL: Duration = Duration::from_secs(15);

    fn held_by(session: &str) -> LockView {
        LockView::Held {
            session: session.into(),
            lock_index: 3,
            value: None,
        }
    }

    fn lock<'a>(view: &'a LockView, read_at: Option<u64>, renewing: bool) -> UnusableLock<'a> {
        UnusableLock {
            lock: view,
            session: Some("s1"),
            read_at: read_at.map(t),
            session_unconfirmed_since: (!renewing).then(|| t(100)),
            started_at: t(0),
        }
    }

    #[test]
    fn a_renewed_session_keeps_the_label_while_the_key_is_read_held_by_it() {
        let held = held_by("s1");
        assert_eq!(
            unusable_label(&lock(&held, Some(990), true), t(1000), TTL),
            UnusableLabel::Keep(Duration::from_secs(5))
        );
    }

    #[test]
    fn a_key_deleted_freed_or_taken_fences_at_once_whatever_the_session() {
        for view in [
            LockView::Absent,
            LockView::Free { lock_index: 3 },
            held_by("outsider"),
        ] {
            assert_eq!(
                unusable_label(&lock(&view, Some(999), true), t(1000), TTL),
                UnusableLabel::Fence,
                "{view:?}"
            );
        }
    }

    #[test]
    fn a_key_that_cannot_be_read_fences_a_ttl_after_its_last_read() {
        let unknown = LockView::Unknown;
        assert_eq!(
            unusable_label(&lock(&unknown, Some(990), true), t(1000), TTL),
            UnusableLabel::Keep(Duration::from_secs(5))
        );
        assert_eq!(
            unusable_label(&lock(&unknown, Some(985), true), t(1000), TTL),
            UnusableLabel::Fence
        );
        // Never read by this process: from its start.
        assert_eq!(
            unusable_label(&lock(&unknown, None, true), t(14), TTL),
            UnusableLabel::Keep(Duration::from_secs(1))
        );
        assert_eq!(
            unusable_label(&lock(&unknown, None, true), t(15), TTL),
            UnusableLabel::Fence
        );
    }

    #[test]
    fn without_renewals_the_label_goes_a_ttl_after_the_last_renewal() {
        let held = held_by("s1");
        assert_eq!(
            unusable_label(&lock(&held, Some(500), false), t(110), TTL),
            UnusableLabel::Keep(Duration::from_secs(5))
        );
        assert_eq!(
            unusable_label(&lock(&held, Some(500), false), t(115), TTL),
            UnusableLabel::Fence
        );
    }
}
