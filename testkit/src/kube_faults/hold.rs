//! [`WatchHold`]: a switch a test flips to stop the events of the watches a
//! [`FaultAction::HoldWatch`](super::FaultAction::HoldWatch) rule matched, and to let them go
//! on later, as a watch connection that stalls and recovers does.

use std::{
    sync::{
        Arc, Mutex, PoisonError,
        atomic::{AtomicBool, Ordering},
    },
    task::{Context, Poll, Waker},
};

/// Shared by every watch one rule matched, and by the test that flips it. Clones share it.
#[derive(Clone, Default)]
pub struct WatchHold {
    shared: Arc<Shared>,
}

#[derive(Default)]
struct Shared {
    held: AtomicBool,
    /// The readers of held watches, woken on release.
    waiting: Mutex<Vec<Waker>>,
}

impl WatchHold {
    /// A switch that lets events through until [`Self::hold`].
    pub fn new() -> Self {
        Self::default()
    }

    /// From now on, the watches stop delivering events (their server streams are not read:
    /// the events wait in the connection, in order).
    pub fn hold(&self) {
        self.shared.held.store(true, Ordering::SeqCst);
    }

    /// The watches deliver again, starting with every event held back.
    pub fn release(&self) {
        self.shared.held.store(false, Ordering::SeqCst);
        let waiting = std::mem::take(
            &mut *self
                .shared
                .waiting
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        waiting.into_iter().for_each(Waker::wake);
    }

    /// `Ready` while the watches may deliver; otherwise registers the reader to be woken on
    /// release.
    pub(crate) fn poll_open(&self, cx: &mut Context<'_>) -> Poll<()> {
        if !self.shared.held.load(Ordering::SeqCst) {
            return Poll::Ready(());
        }
        self.shared
            .waiting
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(cx.waker().clone());
        // A release between the first look and the registration has woken nobody.
        if self.shared.held.load(Ordering::SeqCst) {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    }
}

impl std::fmt::Debug for WatchHold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WatchHold")
            .field("held", &self.shared.held.load(Ordering::SeqCst))
            .finish()
    }
}

/// Two holds are equal when they are the same switch.
impl PartialEq for WatchHold {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }
}
