//! The wall clock, injectable: it renders and persists times and is compared with times
//! other processes wrote, and is the write gate's second opinion; no duration a process
//! measures itself reads it. Tests step it.

use std::sync::Arc;

/// A wall clock: the system's, or one a test offsets or steps to show what a clock step
/// changes. The Lease's timestamps and the controller's renderings are written with it, and
/// the write gate reads it as a second opinion on its deadline.
#[derive(Clone)]
pub struct WallClock(Arc<dyn Fn() -> jiff::Timestamp + Send + Sync>);

impl WallClock {
    /// The system clock.
    pub fn system() -> Self {
        WallClock(Arc::new(jiff::Timestamp::now))
    }

    /// A clock that reads `now` (a test's stepped clock).
    pub fn from_fn(now: impl Fn() -> jiff::Timestamp + Send + Sync + 'static) -> Self {
        WallClock(Arc::new(now))
    }

    pub(crate) fn now(&self) -> jiff::Timestamp {
        (self.0)()
    }
}

impl Default for WallClock {
    fn default() -> Self {
        Self::system()
    }
}

impl std::fmt::Debug for WallClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WallClock")
    }
}

/// Any two wall clocks compare equal: settings are compared for their timing.
impl PartialEq for WallClock {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for WallClock {}
