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

use super::config::{Mode, UnavailablePolicy};
use super::observe::{LockView, SessionHealth, SessionView};

/// The session TTL a leader label is judged with when nothing better is known.
pub const DEFAULT_TTL: Duration = Duration::from_secs(15);

/// The TTL an unusable election's label is judged with: the one its status records as
/// applied (the session was created with it), else that of the session this process holds,
/// else [`DEFAULT_TTL`].
pub fn judged_ttl(applied: Option<Duration>, held: Option<Duration>) -> Duration {
    applied.or(held).unwrap_or(DEFAULT_TTL)
}

/// [`UnusableLock::session_unconfirmed_since`] for the session this process holds, of health
/// `health` (`None`: it holds none), when it started deciding at `started_at`. A refused
/// access in use (`in_use_refused`) stops the renewals: the session counts as unconfirmed
/// since its last one.
pub fn session_unconfirmed_since(
    health: Option<SessionHealth>,
    in_use_refused: bool,
    started_at: Instant,
) -> Option<Instant> {
    match health {
        Some(SessionHealth::Alive { renewed_at }) if in_use_refused => Some(renewed_at),
        Some(SessionHealth::Alive { .. }) => None,
        Some(SessionHealth::Unconfirmed { renewed_at }) => Some(renewed_at),
        Some(SessionHealth::Lost) | None => Some(started_at),
    }
}

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
    /// This process wrote the key (acquire, release, destroying its session) and has not read
    /// it back since: [`Self::lock`] may predate that write and says nothing (rule 2).
    pub written_since_read: bool,
}

impl UnusableLock<'_> {
    /// The key as far as it can be trusted: [`LockView::Unknown`] while this process's own
    /// write is unread.
    fn view(&self) -> &LockView {
        match self.written_since_read {
            true => &LockView::Unknown,
            false => self.lock,
        }
    }
}

/// What this process knows of an election's lock, as read for a rule 2 judgement of an
/// election that cannot act.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockFacts {
    /// The key as the watch last saw it.
    pub lock: LockView,
    /// When the key was last read successfully; `None` when never by this process.
    pub read_at: Option<Instant>,
    /// The election's session as this process holds it.
    pub held: Option<SessionView>,
    /// The session the status records for the leader.
    pub recorded_session: Option<String>,
    /// The session TTL the status records as applied.
    pub applied_ttl: Option<Duration>,
    /// When this process started deciding.
    pub started_at: Instant,
    /// Now, on the monotonic clock.
    pub now: Instant,
}

impl LockFacts {
    /// `judge` (such as [`unusable_label`]) over these facts. With `in_use_refused` (the
    /// Consul access the session was created with is the one refused) the session is no
    /// longer renewed and the key no longer watched: the session counts as unconfirmed since
    /// its last renewal, and the key as unread. `written_since_read`: see
    /// [`UnusableLock::written_since_read`].
    pub fn judge(
        &self,
        in_use_refused: bool,
        written_since_read: bool,
        judge: impl FnOnce(&UnusableLock<'_>, Instant, Duration) -> UnusableLabel,
    ) -> UnusableLabel {
        let unwatched = LockView::Unknown;
        let health = self.held.as_ref().map(|s| s.health);
        let lock = UnusableLock {
            lock: if in_use_refused {
                &unwatched
            } else {
                &self.lock
            },
            session: self
                .held
                .as_ref()
                .map(|s| s.id.as_str())
                .or(self.recorded_session.as_deref()),
            read_at: self.read_at.filter(|_| !in_use_refused),
            session_unconfirmed_since: session_unconfirmed_since(
                health,
                in_use_refused,
                self.started_at,
            ),
            started_at: self.started_at,
            written_since_read,
        };
        let ttl = judged_ttl(self.applied_ttl, self.held.as_ref().map(|s| s.ttl));
        judge(&lock, self.now, ttl)
    }
}

/// The fate of the leader label of an election whose lock is `lock`, at `now`, for a session
/// TTL of `ttl`. Every time is on the monotonic clock.
pub fn unusable_label(lock: &UnusableLock<'_>, now: Instant, ttl: Duration) -> UnusableLabel {
    match lock.view() {
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

/// Rule 2 for an election that can act while its reconcile still waits for an input (a token
/// Secret, the pods' owners): the fence it would meet as an election that cannot act,
/// with the two differences the planner makes. Under `KeepLeader` a key that cannot be read
/// keeps the label (only a key read lost fences). In Observe mode the session is the
/// applications', not the operator's to confirm: the key's reads are the confirmation, and
/// whichever session holds the key backs the label until the planner compares it with the
/// labelled pod. A key this process never read is the planner's to read first (after a
/// takeover, an election's first reconcile may come later than a TTL after the start).
pub fn waiting_label(
    lock: &UnusableLock<'_>,
    now: Instant,
    ttl: Duration,
    mode: Mode,
    policy: UnavailablePolicy,
) -> UnusableLabel {
    if lock.read_at.is_none() {
        return UnusableLabel::Keep(ttl);
    }
    let judged = match (mode, lock.view()) {
        (Mode::Managed, _) => unusable_label(lock, now, ttl),
        (Mode::Observe, held) => {
            let holder = match held {
                LockView::Held { session, .. } => Some(session.as_str()),
                _ => None,
            };
            let mirrored = UnusableLock {
                session: holder,
                session_unconfirmed_since: None,
                ..*lock
            };
            unusable_label(&mirrored, now, ttl)
        }
    };
    let read_lost = match lock.view() {
        LockView::Absent | LockView::Free { .. } => true,
        LockView::Held { session, .. } => {
            mode == Mode::Managed && Some(session.as_str()) != lock.session
        }
        LockView::Unknown => false,
    };
    match (judged, policy) {
        (UnusableLabel::Fence, UnavailablePolicy::KeepLeader) if !read_lost => {
            UnusableLabel::Keep(ttl)
        }
        (judged, _) => judged,
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
            written_since_read: false,
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
    fn a_view_older_than_this_process_s_own_write_says_nothing() {
        // Read "deleted" before this process acquired it again: no reason to fence at once,
        // only the Fence clock since the last read.
        let absent = LockView::Absent;
        let unread = UnusableLock {
            written_since_read: true,
            ..lock(&absent, Some(990), true)
        };
        assert_eq!(
            unusable_label(&unread, t(1000), TTL),
            UnusableLabel::Keep(Duration::from_secs(5))
        );
        // Read "held" before this process released it: the label goes a TTL after that read.
        let held = held_by("s1");
        let unread = UnusableLock {
            written_since_read: true,
            ..lock(&held, Some(985), true)
        };
        assert_eq!(unusable_label(&unread, t(1000), TTL), UnusableLabel::Fence);
    }

    #[test]
    fn a_waiting_reconcile_fences_as_an_unusable_election_would() {
        let unknown = LockView::Unknown;
        let managed = |view: &LockView, now| {
            waiting_label(
                &lock(view, Some(985), true),
                t(now),
                TTL,
                Mode::Managed,
                UnavailablePolicy::Fence,
            )
        };
        assert_eq!(managed(&unknown, 1000), UnusableLabel::Fence);
        assert_eq!(
            managed(&held_by("s1"), 990),
            UnusableLabel::Keep(Duration::from_secs(10))
        );
        assert_eq!(managed(&LockView::Absent, 990), UnusableLabel::Fence);
        assert_eq!(managed(&held_by("outsider"), 990), UnusableLabel::Fence);
        // Never read: the planner reads it first, however long ago this process started.
        assert_eq!(
            waiting_label(
                &lock(&unknown, None, true),
                t(1000),
                TTL,
                Mode::Managed,
                UnavailablePolicy::Fence
            ),
            UnusableLabel::Keep(TTL)
        );
    }

    #[test]
    fn keep_leader_keeps_the_label_of_a_waiting_reconcile_only_while_the_key_is_unread() {
        let keep = |view: &LockView| {
            waiting_label(
                &lock(view, Some(985), false),
                t(1000),
                TTL,
                Mode::Managed,
                UnavailablePolicy::KeepLeader,
            )
        };
        assert_eq!(keep(&LockView::Unknown), UnusableLabel::Keep(TTL));
        assert_eq!(keep(&held_by("s1")), UnusableLabel::Keep(TTL));
        assert_eq!(keep(&LockView::Absent), UnusableLabel::Fence);
        assert_eq!(
            keep(&LockView::Free { lock_index: 3 }),
            UnusableLabel::Fence
        );
        assert_eq!(keep(&held_by("outsider")), UnusableLabel::Fence);
    }

    #[test]
    fn in_observe_mode_the_key_s_reads_alone_confirm_the_applications_lock() {
        let observe = |view: &LockView, read_at, now| {
            let unrenewed = UnusableLock {
                session: None,
                ..lock(view, Some(read_at), false)
            };
            waiting_label(
                &unrenewed,
                t(now),
                TTL,
                Mode::Observe,
                UnavailablePolicy::Fence,
            )
        };
        // Held by the applications' session, read recently: the operator renews nothing.
        assert_eq!(
            observe(&held_by("app"), 995, 1000),
            UnusableLabel::Keep(Duration::from_secs(10))
        );
        assert_eq!(observe(&held_by("app"), 985, 1000), UnusableLabel::Fence);
        assert_eq!(
            observe(&LockView::Free { lock_index: 3 }, 999, 1000),
            UnusableLabel::Fence
        );
        assert_eq!(
            observe(&LockView::Unknown, 995, 1000),
            UnusableLabel::Keep(Duration::from_secs(10))
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

    #[test]
    fn a_session_counts_as_confirmed_only_while_this_process_renews_it() {
        let alive = SessionHealth::Alive { renewed_at: t(5) };
        assert_eq!(session_unconfirmed_since(Some(alive), false, t(0)), None);
        // The refused access is not used to renew it any more.
        assert_eq!(
            session_unconfirmed_since(Some(alive), true, t(0)),
            Some(t(5))
        );
        let failing = SessionHealth::Unconfirmed { renewed_at: t(3) };
        assert_eq!(
            session_unconfirmed_since(Some(failing), false, t(0)),
            Some(t(3))
        );
        for none in [Some(SessionHealth::Lost), None] {
            assert_eq!(session_unconfirmed_since(none, false, t(1)), Some(t(1)));
        }
    }

    #[test]
    fn the_ttl_the_session_was_created_with_judges_the_label() {
        let secs = Duration::from_secs;
        assert_eq!(judged_ttl(Some(secs(30)), Some(secs(10))), secs(30));
        assert_eq!(judged_ttl(None, Some(secs(10))), secs(10));
        assert_eq!(judged_ttl(None, None), DEFAULT_TTL);
    }
}
