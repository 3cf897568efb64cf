//! Rule 2 by construction: the planner labels a pod leader only with a [`LockHeld`] in hand,
//! and a [`LockHeld`] comes only from a read of the key that shows it held: by the operator's
//! session (Managed mode), or by an application's session naming the pod (Observe mode). A
//! view of the key that is unknown, free or absent yields none, and nothing else makes one.

use super::observe::LockView;

/// A read of the key showed it held (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockHeld {
    lock_index: u64,
}

impl LockHeld {
    /// The key as read (`lock`) is held by `session`.
    pub fn by_session(lock: &LockView, session: &str) -> Option<LockHeld> {
        match lock {
            LockView::Held {
                session: holder,
                lock_index,
                ..
            } if holder == session => Some(LockHeld {
                lock_index: *lock_index,
            }),
            _ => None,
        }
    }

    /// The key as read (`lock`) is held, whoever holds it (Observe mode mirrors the
    /// applications' holder, which the key's value names).
    pub fn by_anyone(lock: &LockView) -> Option<LockHeld> {
        match lock {
            LockView::Held { lock_index, .. } => Some(LockHeld {
                lock_index: *lock_index,
            }),
            _ => None,
        }
    }

    /// The key's LockIndex as read: the fencing token of a Managed election's acquisition.
    pub fn lock_index(self) -> u64 {
        self.lock_index
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_read_showing_the_key_held_is_proof() {
        let held = LockView::Held {
            session: "s1".into(),
            lock_index: 7,
            value: None,
        };
        assert_eq!(
            LockHeld::by_session(&held, "s1").map(LockHeld::lock_index),
            Some(7)
        );
        assert_eq!(LockHeld::by_session(&held, "s2"), None, "another session's");
        assert_eq!(
            LockHeld::by_anyone(&held).map(LockHeld::lock_index),
            Some(7)
        );
        for view in [
            LockView::Unknown,
            LockView::Absent,
            LockView::Free { lock_index: 7 },
        ] {
            assert_eq!(LockHeld::by_session(&view, "s1"), None, "{view:?}");
            assert_eq!(LockHeld::by_anyone(&view), None, "{view:?}");
        }
    }
}
