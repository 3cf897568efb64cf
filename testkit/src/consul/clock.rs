//! The emulator's clock: virtual (moved only by `Emulator::advance`) or tokio time.
//!
//! Every instant inside the emulator is a `Duration` since the emulator started, so the
//! state machine never reads a clock itself: callers pass `now` in.

use std::time::Duration;

use tokio::sync::watch;

/// Which clock drives TTLs, lock-delays and blocking-query timeouts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ClockMode {
    /// Virtual time starting at 0 that only moves through `Emulator::advance`.
    #[default]
    Manual,
    /// `tokio::time::Instant`, so it also follows tokio's paused test clock.
    Tokio,
}

/// A running clock.
#[derive(Debug)]
pub(crate) enum Clock {
    /// Virtual time; the watch channel wakes sleepers when `advance` moves it.
    Manual(watch::Sender<Duration>),
    /// Real (or tokio-paused) time measured from the given start instant.
    Tokio(tokio::time::Instant),
}

impl Clock {
    pub(crate) fn new(mode: ClockMode) -> Self {
        match mode {
            ClockMode::Manual => Clock::Manual(watch::Sender::new(Duration::ZERO)),
            ClockMode::Tokio => Clock::Tokio(tokio::time::Instant::now()),
        }
    }

    pub(crate) fn is_manual(&self) -> bool {
        matches!(self, Clock::Manual(_))
    }

    /// Time since the emulator started.
    pub(crate) fn now(&self) -> Duration {
        match self {
            Clock::Manual(tx) => *tx.borrow(),
            Clock::Tokio(start) => start.elapsed(),
        }
    }

    /// Moves virtual time forward to `to` (never backwards). No-op for the tokio clock.
    pub(crate) fn set_manual(&self, to: Duration) {
        if let Clock::Manual(tx) = self {
            tx.send_if_modified(|now| {
                if to > *now {
                    *now = to;
                    true
                } else {
                    false
                }
            });
        }
    }

    /// Resolves once the clock reads `deadline` or later.
    pub(crate) async fn sleep_until(&self, deadline: Duration) {
        match self {
            Clock::Manual(tx) => {
                let mut rx = tx.subscribe();
                // `wait_for` checks the current value first, so no advance is missed.
                // The sender lives as long as `self`, so an error cannot happen while we wait.
                let _ = rx.wait_for(|now| *now >= deadline).await;
            }
            Clock::Tokio(start) => match start.checked_add(deadline) {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn manual_clock_moves_only_forward_and_wakes_sleepers() {
        let clock = std::sync::Arc::new(Clock::new(ClockMode::Manual));
        assert_eq!(clock.now(), Duration::ZERO);
        let c2 = clock.clone();
        let sleeper = tokio::spawn(async move { c2.sleep_until(Duration::from_secs(5)).await });
        clock.set_manual(Duration::from_secs(4));
        tokio::task::yield_now().await;
        assert!(!sleeper.is_finished());
        clock.set_manual(Duration::from_secs(5));
        sleeper.await.expect("sleeper");
        clock.set_manual(Duration::from_secs(1));
        assert_eq!(clock.now(), Duration::from_secs(5));
    }

    #[tokio::test(start_paused = true)]
    async fn tokio_clock_follows_paused_time() {
        let clock = Clock::new(ClockMode::Tokio);
        clock.sleep_until(Duration::from_secs(30)).await;
        assert!(clock.now() >= Duration::from_secs(30));
        assert!(!clock.is_manual());
    }
}
