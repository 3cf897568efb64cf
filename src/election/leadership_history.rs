//! The leaderships an election keeps in its status (`status.history`): which pod led, from when
//! until when, with which fencing token, and why it stopped. Events say the same but expire (by
//! default after an hour); the history stays, bounded, with the status.

use jiff::Timestamp;

use crate::crd::{LeaderElectionStatus, LeadershipRecord, Phase, SwitchoverResult};

/// How many leaderships the status keeps: the oldest go first.
pub const HISTORY_LIMIT: usize = 10;

/// Why a leadership ended: the leader was moved by a switchover request.
pub const SWITCHOVER: &str = "Switchover";
/// ...moved back to a pod of higher priority.
pub const FAILBACK: &str = "Failback";
/// ...its pod is no longer selected, or is gone.
pub const POD_GONE: &str = "PodGone";
/// ...its label was taken off because the lock could not be confirmed (rule 2).
pub const FENCED: &str = "Fenced";
/// ...the same pod leads again with a new fencing token (its lock was taken again).
pub const REACQUIRED: &str = "Reacquired";
/// ...another pod leads for none of the reasons above (the lock went to it).
pub const LOCK_LOST: &str = "LockLost";
/// ...the operator's uninstall released the election.
pub const RELEASED: &str = "Released";
/// ...the pod may no longer lead, and its candidate status gives no reason.
pub const NOT_ELIGIBLE: &str = "NotEligible";

/// The history of `new`, a status rendered over one whose history is `old`, at `now`: a
/// leadership that began is added (closing the one before), and one that ended without a
/// successor is closed.
pub fn next(
    old: &[LeadershipRecord],
    new: &LeaderElectionStatus,
    now: Timestamp,
) -> Vec<LeadershipRecord> {
    let mut history = old.to_vec();
    let open = history.last_mut().filter(|r| r.until.is_none());
    match (&new.leader, open) {
        (Some(leader), Some(last))
            if last.uid == leader.uid && last.fencing_token == new.fencing_token => {}
        (Some(leader), open) => {
            if let Some(last) = open {
                last.ended = Some(ended(last, new));
                last.until = Some(leader.since.max(last.since));
            }
            history.push(LeadershipRecord {
                pod: leader.pod.clone(),
                uid: leader.uid.clone(),
                since: leader.since,
                until: None,
                fencing_token: new.fencing_token,
                ended: None,
            });
        }
        (None, Some(last)) => {
            last.ended = Some(ended(last, new));
            last.until = Some(now.max(last.since));
        }
        (None, None) => {}
    }
    let excess = history.len().saturating_sub(HISTORY_LIMIT);
    history.drain(..excess);
    history
}

/// `old` with the leadership still open closed at `now` for `why`.
pub fn closed(old: &[LeadershipRecord], now: Timestamp, why: &str) -> Vec<LeadershipRecord> {
    let mut history = old.to_vec();
    if let Some(last) = history.last_mut().filter(|r| r.until.is_none()) {
        last.ended = Some(why.to_owned());
        last.until = Some(now.max(last.since));
    }
    history
}

/// Why the leadership `last` ended, as `new` tells.
fn ended(last: &LeadershipRecord, new: &LeaderElectionStatus) -> String {
    let leader = new.leader.as_ref();
    if leader.is_some_and(|l| l.uid == last.uid) {
        return REACQUIRED.to_owned();
    }
    let switched = new.last_switchover.as_ref().is_some_and(|s| {
        s.result != SwitchoverResult::Refused && s.from.as_deref() == Some(last.pod.as_str())
    });
    if switched {
        return SWITCHOVER.to_owned();
    }
    let candidate = |pod: &str| new.candidates.iter().find(|c| c.pod == pod);
    let Some(was) = candidate(&last.pod) else {
        return POD_GONE.to_owned();
    };
    if !was.eligible {
        return was
            .reason
            .clone()
            .unwrap_or_else(|| NOT_ELIGIBLE.to_owned());
    }
    if new.phase == Some(Phase::Fenced) {
        return FENCED.to_owned();
    }
    let successor = leader.and_then(|l| candidate(&l.pod));
    if successor.is_some_and(|s| s.priority > was.priority) {
        return FAILBACK.to_owned();
    }
    LOCK_LOST.to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::{CandidateStatus, LeaderStatus, SwitchoverStatus};

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + second).unwrap_or_default()
    }

    fn candidate(
        pod: &str,
        eligible: bool,
        reason: Option<&str>,
        priority: i32,
    ) -> CandidateStatus {
        CandidateStatus {
            pod: pod.into(),
            eligible,
            reason: reason.map(str::to_owned),
            priority,
        }
    }

    /// A status whose leader is `leader` (since `since`, with `token`), over `candidates`.
    fn led(
        leader: Option<(&str, i64, u64)>,
        candidates: Vec<CandidateStatus>,
    ) -> LeaderElectionStatus {
        LeaderElectionStatus {
            phase: Some(if leader.is_some() {
                Phase::Elected
            } else {
                Phase::Pending
            }),
            leader: leader.map(|(pod, since, _)| LeaderStatus {
                pod: pod.into(),
                uid: format!("uid-{pod}"),
                pod_ip: None,
                since: at(since),
                session_id: None,
            }),
            fencing_token: leader.map(|(_, _, token)| token),
            candidates,
            ..LeaderElectionStatus::default()
        }
    }

    /// What the history says of each leadership: pod, token, and why it ended.
    fn told(history: &[LeadershipRecord]) -> Vec<(String, Option<u64>, Option<String>)> {
        history
            .iter()
            .map(|r| (r.pod.clone(), r.fencing_token, r.ended.clone()))
            .collect()
    }

    fn row(pod: &str, token: u64, ended: Option<&str>) -> (String, Option<u64>, Option<String>) {
        (pod.into(), Some(token), ended.map(str::to_owned))
    }

    #[test]
    fn each_leadership_is_added_once_and_closed_with_why_it_ended() {
        let both = || vec![candidate("a", true, None, 0), candidate("b", true, None, 0)];
        let first = next(&[], &led(Some(("a", 0, 5)), both()), at(1));
        let again = next(&first, &led(Some(("a", 0, 5)), both()), at(2));
        assert_eq!(again, first, "the same leadership is not added twice");

        let not_ready = vec![
            candidate("a", false, Some("NotReady"), 0),
            candidate("b", true, None, 0),
        ];
        let failover = next(&again, &led(Some(("b", 10, 6)), not_ready), at(10));
        assert_eq!(
            told(&failover),
            [row("a", 5, Some("NotReady")), row("b", 6, None)]
        );
        assert_eq!(
            failover[0].until,
            Some(at(10)),
            "until the successor's since"
        );
        assert_eq!(failover[1].until, None);

        let gone = vec![candidate("c", true, None, 0)];
        let fenced = LeaderElectionStatus {
            phase: Some(Phase::Fenced),
            ..led(None, vec![candidate("b", true, None, 0)])
        };
        let closed = next(&failover, &fenced, at(20));
        assert_eq!(closed[1].ended.as_deref(), Some(FENCED));
        assert_eq!(closed[1].until, Some(at(20)));
        assert_eq!(
            next(&closed, &fenced, at(30)),
            closed,
            "nothing open to close"
        );

        let back = next(
            &closed,
            &led(Some(("b", 40, 9)), vec![candidate("b", true, None, 0)]),
            at(40),
        );
        let moved = next(&back, &led(Some(("c", 50, 10)), gone), at(50));
        assert_eq!(
            told(&moved)[2..],
            [row("b", 9, Some(POD_GONE)), row("c", 10, None)]
        );
    }

    #[test]
    fn a_move_says_whether_a_switchover_a_failback_or_the_lock_moved_it() {
        let old = next(&[], &led(Some(("a", 0, 5)), Vec::new()), at(0));
        let eligible = |pa, pb| {
            vec![
                candidate("a", true, None, pa),
                candidate("b", true, None, pb),
            ]
        };
        let switched = LeaderElectionStatus {
            last_switchover: Some(SwitchoverStatus {
                to: "b".into(),
                from: Some("a".into()),
                leader: Some("b".into()),
                requested_at: at(5),
                completed_at: Some(at(10)),
                result: SwitchoverResult::Completed,
                message: String::new(),
            }),
            ..led(Some(("b", 10, 6)), eligible(0, 0))
        };
        let cases = [
            (switched, SWITCHOVER),
            (led(Some(("b", 10, 6)), eligible(0, 5)), FAILBACK),
            (led(Some(("b", 10, 6)), eligible(0, 0)), LOCK_LOST),
            (led(Some(("a", 10, 6)), eligible(0, 0)), REACQUIRED),
        ];
        for (new, why) in cases {
            let history = next(&old, &new, at(10));
            assert_eq!(history[0].ended.as_deref(), Some(why), "{new:?}");
            assert_eq!(history.len(), 2);
        }
    }

    #[test]
    fn the_history_keeps_the_newest_leaderships_and_a_release_closes_the_last() {
        let mut history = Vec::new();
        for n in 0..(HISTORY_LIMIT as u64 + 3) {
            let pod = if n % 2 == 0 { "a" } else { "b" };
            let since = i64::try_from(n).unwrap_or_default() * 10;
            history = next(&history, &led(Some((pod, since, n)), Vec::new()), at(since));
        }
        assert_eq!(history.len(), HISTORY_LIMIT);
        assert_eq!(history[0].fencing_token, Some(3), "the oldest went first");
        let released = closed(&history, at(500), RELEASED);
        let last = released
            .last()
            .cloned()
            .unwrap_or_else(|| panic!("a leadership"));
        assert_eq!(
            (last.until, last.ended.as_deref()),
            (Some(at(500)), Some(RELEASED))
        );
        assert_eq!(closed(&released, at(600), RELEASED), released);
    }
}
