//! How fast the lock watch must confirm each key for rule 2: the wait of its blocking
//! queries and the pause between them. Rule 2 fences a leader whose key went a whole session
//! TTL unconfirmed, so on a healthy Consul every key is confirmed well within a TTL.

use std::time::Duration;

/// The shortest wait a group's blocking queries use, whatever the TTLs (Consul's TTLs are at
/// least 10 s, so [`effective_wait`] never goes below 4 s for them).
const MIN_WAIT: Duration = Duration::from_secs(1);

/// The wait of a group's blocking queries: `configured` (`--lock-watch-wait`), capped at
/// 2/5 of the shortest session TTL among the group's elections.
///
/// Rule 2 counts a key's confirmation from the last answer covering it and fences a leader
/// whose key went a whole TTL without one, so on a healthy Consul every group must answer
/// well within a TTL even when nothing changes. Consul answers an unchanged blocking query
/// after `wait` plus up to `wait / 16` of jitter, and the query starts at most `wait / 8`
/// after the previous answer ([`answer_pause`]): with this cap, an answer comes at most
/// 0.475 × TTL (4.75 s for Consul's shortest TTL, 10 s) after the previous one, leaving more
/// than half a TTL for one slow or lost answer and its retry before anything is fenced. Groups of long-TTL elections
/// keep the longer configured wait, and so their lower steady-state traffic.
pub fn effective_wait(configured: Duration, shortest_ttl: Option<Duration>) -> Duration {
    match shortest_ttl {
        Some(ttl) => configured.min(ttl * 2 / 5).max(MIN_WAIT),
        None => configured,
    }
}

/// How long a group's next query waits for each entry of its last answer.
///
/// Every answer repeats every key under the group's prefix, so during a burst of writes
/// (a cold start acquires a lock per election) answering each write costs O(keys) per write,
/// O(keys²) for the burst. Waiting in proportion to the answer's length folds the writes
/// of that wait into one answer and bounds the watch's decoding to about 4,000 entries per
/// second per group, whatever its size.
const PAUSE_PER_ENTRY: Duration = Duration::from_micros(250);

/// How long a group waits after an answer of `entries` entries before its next query:
/// 0.25 ms per entry, at most `wait / 8` (so an answer still confirms a key well
/// within its TTL, see [`effective_wait`]). Only the next query waits: the changes of an
/// answer are reported when it arrives, and a query parked when a key changes answers at
/// once.
pub fn answer_pause(entries: usize, wait: Duration) -> Duration {
    let entries = u32::try_from(entries).unwrap_or(u32::MAX);
    PAUSE_PER_ENTRY.saturating_mul(entries).min(wait / 8)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wait_leaves_room_for_an_answer_well_within_every_ttl() {
        let secs = Duration::from_secs;
        assert_eq!(effective_wait(secs(60), None), secs(60));
        assert_eq!(effective_wait(secs(60), Some(secs(10))), secs(4));
        assert_eq!(effective_wait(secs(60), Some(secs(15))), secs(6));
        assert_eq!(effective_wait(secs(60), Some(secs(150))), secs(60));
        assert_eq!(effective_wait(secs(2), Some(secs(15))), secs(2));
        assert_eq!(effective_wait(secs(60), Some(Duration::ZERO)), MIN_WAIT);
        // Consul's longest answer (wait plus wait/16 of jitter), after the longest pause,
        // stays under TTL/2 for every TTL Consul accepts.
        for ttl in (10..=86_400).step_by(7).map(secs) {
            let wait = effective_wait(secs(600), Some(ttl));
            let longest = answer_pause(usize::MAX, wait) + wait + wait / 16;
            assert!(longest < ttl / 2, "ttl {ttl:?}: wait {wait:?}");
        }
    }
}
