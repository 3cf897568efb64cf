//! When the operator looks at an election again without being woken: the fallbacks behind
//! the watches (pods, elections, the key, the session), and the looks that no watch can
//! stand in for (a token Secret, a decided switchover request whose removal failed).

use std::time::Duration;

/// After a reconcile that failed.
pub const ERROR_REQUEUE: Duration = Duration::from_secs(2);
/// An election whose spec cannot be acted on (any change of it wakes it anyway).
pub const INVALID_REQUEUE: Duration = Duration::from_secs(300);
/// An election whose token Secret is missing or unreadable: Secrets are not watched (the
/// operator may only `get` the one it needs), so soon, but calmly.
pub const SECRET_REQUEUE: Duration = Duration::from_secs(30);
/// The longest an election using a token Secret goes without a look at that Secret: the
/// operator stops using a token within this long of its Secret withdrawing the opt-in.
pub const SECRET_RECHECK: Duration = Duration::from_secs(60);
/// An election waiting for a younger conflicting one to take its leader label off (the
/// withdrawal's pod patch wakes it first).
pub const YIELD_WAIT: Duration = Duration::from_secs(1);
/// A healthy election (Consul and pod changes wake it anyway).
pub const RESYNC: Duration = Duration::from_secs(600);

/// How a reconcile that ran the planner ended, as far as looking again goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Round {
    /// The last plan's own instant to look again (a failover delay, a lock-delay, ...).
    pub planned: Option<Duration>,
    /// The loop stopped with work left.
    pub unfinished: bool,
    /// Something failed that only a look soon repairs: removing a decided switchover
    /// request, or reading the key back after the operator's own write.
    pub retry_soon: bool,
    /// The election reads its Consul token from a Secret.
    pub token_secret: bool,
}

/// When to look at the election again after `round`.
pub fn after(round: Round) -> Duration {
    if round.unfinished {
        return Duration::ZERO;
    }
    let mut after = round.planned.map_or(RESYNC, |d| d.min(RESYNC));
    if round.retry_soon {
        after = after.min(ERROR_REQUEUE);
    }
    if round.token_secret {
        // Secrets are not watched: a withdrawn opt-in is seen at the next look.
        after = after.min(SECRET_RECHECK);
    }
    after
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_round_with_work_left_goes_on_at_once() {
        let round = Round {
            unfinished: true,
            planned: Some(RESYNC),
            ..Round::default()
        };
        assert_eq!(after(round), Duration::ZERO);
    }

    #[test]
    fn the_plan_the_secret_and_a_failed_removal_bring_the_look_forward() {
        assert_eq!(after(Round::default()), RESYNC);
        let planned = Duration::from_secs(5);
        let round = Round {
            planned: Some(planned),
            ..Round::default()
        };
        assert_eq!(after(round), planned);
        let round = Round {
            token_secret: true,
            ..Round::default()
        };
        assert_eq!(after(round), SECRET_RECHECK);
        let round = Round {
            retry_soon: true,
            token_secret: true,
            ..Round::default()
        };
        assert_eq!(after(round), ERROR_REQUEUE);
    }
}
