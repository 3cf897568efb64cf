//! What an election remembers of its Consul key between reconciles: whether the operator
//! wrote the key since it last read it back (rule 2: a cached view may predate a write of
//! our own, and a stalled watch keeps it), and until when Consul probably refuses an
//! acquisition because of a lock-delay.
//!
//! The executor reports what it does to the key and what Consul answered; this module decides
//! what follows from it. It reads no clock: `now` comes in.

use std::time::Duration;

use tokio::time::Instant;

use super::observe::LockView;

/// How long to wait after an acquisition Consul refused although nobody holds the key: a
/// lock-delay of a session the operator did not own, whose length it cannot know.
pub const REFUSED_ACQUIRE_RETRY: Duration = Duration::from_secs(1);

/// An election's memory of its key (see the module docs).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KeyMemory {
    written_since_read: bool,
    lock_delay_until: Option<Instant>,
}

impl KeyMemory {
    /// The operator is about to write the key: acquire or release it, or destroy the session
    /// that may hold it. Reported before the request is sent, since a write whose answer never
    /// came may still have taken effect.
    pub fn writing(&mut self) {
        self.written_since_read = true;
    }

    /// A read of the key that started after its last write answered: views from here on show
    /// that write.
    pub fn read_back(&mut self) {
        self.written_since_read = false;
    }

    /// Whether a cached view of the key may predate the operator's own write. Such a view
    /// says nothing: a reconcile reads the key itself before it plans, and a judgement of the
    /// leader label does not trust it.
    pub fn written_since_read(&self) -> bool {
        self.written_since_read
    }

    /// The operator let go of its lost session: Consul refuses the key to every other session
    /// until the lost one's lock-delay is over.
    pub fn session_forgotten(&mut self, lock_delay: Duration, now: Instant) {
        self.lock_delay_until = Some(now + lock_delay);
    }

    /// Consul answered an acquisition (`acquired`), and `after` is the key as read back
    /// after it. A refusal while nobody holds the key is a lock-delay of a session the
    /// operator did not own: retried after [`REFUSED_ACQUIRE_RETRY`].
    pub fn acquire_answered(&mut self, acquired: bool, after: &LockView, now: Instant) {
        if acquired {
            self.lock_delay_until = None;
        } else if !matches!(after, LockView::Held { .. }) {
            self.lock_delay_until = Some(now + REFUSED_ACQUIRE_RETRY);
        }
    }

    /// Until when an acquisition is probably refused by a lock-delay.
    pub fn lock_delay_until(&self) -> Option<Instant> {
        self.lock_delay_until
    }

    /// Whether nothing is remembered (the memory can go).
    pub fn is_empty(&self) -> bool {
        *self == KeyMemory::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held() -> LockView {
        LockView::Held {
            session: "s".into(),
            lock_index: 1,
            value: None,
        }
    }

    #[test]
    fn a_write_makes_views_untrusted_until_a_read_that_follows_it() {
        let mut key = KeyMemory::default();
        assert!(!key.written_since_read());
        key.writing();
        assert!(key.written_since_read());
        key.read_back();
        assert!(!key.written_since_read());
        assert!(key.is_empty());
    }

    #[test]
    fn a_forgotten_session_delays_acquisitions_by_its_lock_delay() {
        let now = Instant::now();
        let mut key = KeyMemory::default();
        key.session_forgotten(Duration::from_secs(15), now);
        assert_eq!(key.lock_delay_until(), Some(now + Duration::from_secs(15)));
        key.acquire_answered(true, &held(), now);
        assert_eq!(key.lock_delay_until(), None);
    }

    #[test]
    fn a_refusal_of_a_free_key_is_retried_soon_and_one_of_a_held_key_is_not_a_delay() {
        let now = Instant::now();
        let mut key = KeyMemory::default();
        key.acquire_answered(false, &held(), now);
        assert_eq!(key.lock_delay_until(), None, "another session holds it");
        for free in [LockView::Absent, LockView::Free { lock_index: 3 }] {
            key.acquire_answered(false, &free, now);
            assert_eq!(key.lock_delay_until(), Some(now + REFUSED_ACQUIRE_RETRY));
        }
    }
}
