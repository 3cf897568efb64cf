//! Bounded retries with exponential backoff and full jitter.

use std::time::Duration;

use rand::Rng;

/// Longest `Retry-After` the client is willing to honour; longer requests are cut to this.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);

/// How often and how patiently a retryable error is retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Total attempts, including the first one (at least 1).
    pub max_attempts: u32,
    /// Backoff cap for the first retry; doubled for every further retry.
    pub base_delay: Duration,
    /// Upper bound of the backoff cap.
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: 4,
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_secs(5),
        }
    }
}

impl RetryPolicy {
    /// A policy that never retries.
    pub fn no_retries() -> Self {
        Self {
            max_attempts: 1,
            ..Self::default()
        }
    }

    /// The exponential cap before retry number `retry` (0 for the first retry):
    /// `min(max_delay, base_delay * 2^retry)`.
    pub fn backoff_cap(&self, retry: u32) -> Duration {
        let factor = 1u32.checked_shl(retry.min(31)).unwrap_or(u32::MAX);
        self.base_delay
            .checked_mul(factor)
            .unwrap_or(self.max_delay)
            .min(self.max_delay)
    }

    /// The pause before retry number `retry`: the server's `Retry-After` when it sent one
    /// (at most one minute), otherwise "full jitter", a uniform draw from `[0, backoff_cap]`,
    /// which spreads the retries of many callers that failed together.
    pub fn delay(&self, retry: u32, retry_after: Option<Duration>, rng: &mut impl Rng) -> Duration {
        if let Some(after) = retry_after {
            return after.min(MAX_RETRY_AFTER);
        }
        let cap = self.backoff_cap(retry);
        let cap_nanos = u64::try_from(cap.as_nanos()).unwrap_or(u64::MAX);
        Duration::from_nanos(rng.random_range(0..=cap_nanos))
    }

    /// Whether another attempt is allowed after `attempts` attempts were made.
    pub fn allows_another(&self, attempts: u32) -> bool {
        attempts < self.max_attempts.max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    #[test]
    fn cap_grows_exponentially_up_to_the_maximum() {
        let policy = RetryPolicy {
            max_attempts: 10,
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_secs(1),
        };
        assert_eq!(policy.backoff_cap(0), Duration::from_millis(100));
        assert_eq!(policy.backoff_cap(1), Duration::from_millis(200));
        assert_eq!(policy.backoff_cap(3), Duration::from_millis(800));
        assert_eq!(policy.backoff_cap(4), Duration::from_secs(1));
        assert_eq!(policy.backoff_cap(200), Duration::from_secs(1));
    }

    #[test]
    fn full_jitter_stays_within_the_cap() {
        let policy = RetryPolicy::default();
        let mut rng = StdRng::seed_from_u64(7);
        let mut distinct = std::collections::BTreeSet::new();
        for retry in 0..6 {
            for _ in 0..50 {
                let delay = policy.delay(retry, None, &mut rng);
                assert!(delay <= policy.backoff_cap(retry));
                distinct.insert(delay);
            }
        }
        assert!(distinct.len() > 100, "delays must be spread out");
    }

    #[test]
    fn honours_retry_after_up_to_a_minute() {
        let policy = RetryPolicy::default();
        let mut rng = StdRng::seed_from_u64(1);
        let after = Some(Duration::from_secs(7));
        assert_eq!(policy.delay(0, after, &mut rng), Duration::from_secs(7));
        let huge = Some(Duration::from_secs(3600));
        assert_eq!(policy.delay(0, huge, &mut rng), Duration::from_secs(60));
    }

    #[test]
    fn attempts_are_bounded() {
        let policy = RetryPolicy {
            max_attempts: 3,
            ..RetryPolicy::default()
        };
        assert!(policy.allows_another(1));
        assert!(policy.allows_another(2));
        assert!(!policy.allows_another(3));
        assert!(!RetryPolicy::no_retries().allows_another(1));
        let zero = RetryPolicy {
            max_attempts: 0,
            ..RetryPolicy::default()
        };
        assert!(!zero.allows_another(1));
    }
}
