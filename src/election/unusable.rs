//! Rule 2 for an election the operator cannot act on: its spec became invalid, or its Consul
//! access unusable (a Secret gone or no longer opted in, an address or datacenter no longer
//! allowed). The planner cannot run for it, but a leader label it left is still a promise that
//! the pod holds the lock: the label stays only while this process renews the election's
//! session, and otherwise goes a TTL after the lock was last confirmed (after a restart, a TTL
//! after this process started deciding: nothing renews the session any more).

use std::time::Duration;

use jiff::Timestamp;

use super::eligibility::elapsed;

/// What becomes of the leader label of an election the operator cannot act on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnusableLabel {
    /// The label stays; look again after this long (`None`: while the session renews).
    Keep(Option<Duration>),
    /// The label goes now.
    Fence,
}

/// The fate of the leader label: `renewing` when this process renews a healthy session for the
/// election; `confirmed_at` the last moment the lock was known held; `ttl` the session's TTL.
pub fn unusable_label(
    renewing: bool,
    confirmed_at: Timestamp,
    now: Timestamp,
    ttl: Duration,
) -> UnusableLabel {
    if renewing {
        return UnusableLabel::Keep(None);
    }
    let unconfirmed = elapsed(confirmed_at, now);
    if unconfirmed >= ttl {
        UnusableLabel::Fence
    } else {
        UnusableLabel::Keep(Some(ttl - unconfirmed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(s).unwrap()
    }

    const TTL: Duration = Duration::from_secs(15);

    #[test]
    fn a_renewed_session_keeps_the_label() {
        assert_eq!(
            unusable_label(true, t(0), t(1000), TTL),
            UnusableLabel::Keep(None)
        );
    }

    #[test]
    fn without_renewals_the_label_goes_a_ttl_after_the_last_confirmation() {
        assert_eq!(
            unusable_label(false, t(100), t(110), TTL),
            UnusableLabel::Keep(Some(Duration::from_secs(5)))
        );
        assert_eq!(
            unusable_label(false, t(100), t(115), TTL),
            UnusableLabel::Fence
        );
        assert_eq!(
            unusable_label(false, t(100), t(500), TTL),
            UnusableLabel::Fence
        );
    }
}
