//! Handling failed API calls: the bounded exponential retry delay and status codes.

use std::time::Duration;

const FIRST: Duration = Duration::from_millis(50);
const MAX: Duration = Duration::from_secs(2);

/// Doubles from 50 ms up to 2 s; [`Backoff::reset`] after a success.
#[derive(Debug)]
pub(crate) struct Backoff {
    next: Duration,
}

impl Backoff {
    pub(crate) fn new() -> Self {
        Self { next: FIRST }
    }

    /// The delay to wait before the next attempt.
    pub(crate) fn next_delay(&mut self) -> Duration {
        let delay = self.next;
        self.next = (self.next * 2).min(MAX);
        delay
    }

    pub(crate) fn reset(&mut self) {
        self.next = FIRST;
    }
}

/// The HTTP status code of an error the API server answered with.
pub(crate) fn api_code(error: &kube::Error) -> Option<u16> {
    match error {
        kube::Error::Api(status) => Some(status.code),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_up_to_the_cap_and_resets() {
        let mut b = Backoff::new();
        let delays: Vec<_> = (0..8).map(|_| b.next_delay().as_millis()).collect();
        assert_eq!(delays, [50, 100, 200, 400, 800, 1600, 2000, 2000]);
        b.reset();
        assert_eq!(b.next_delay(), FIRST);
    }
}
