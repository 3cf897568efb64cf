//! Since when each NotReady pod of an election has been NotReady, for rule 5's failover
//! delay. The kubelet writes the Ready condition's change on its wall clock; each change is
//! converted to this process's monotonic clock once, when first seen, so a wall clock stepped
//! later moves nothing (rule 8).

use std::collections::HashMap;

use jiff::{SignedDuration, Timestamp};
use tokio::time::Instant;

use super::observe::NotReadySince;

/// The NotReady changes of one election as first seen (see the module docs).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NotReadyMemory {
    /// Each NotReady pod's UID, its Ready condition's `lastTransitionTime`, and since when.
    seen: Vec<(String, Timestamp, NotReadySince)>,
}

impl NotReadyMemory {
    /// Since when each pod of `not_ready` (a NotReady pod's UID and its Ready condition's
    /// `lastTransitionTime`) is NotReady, at `now` when the wall clock reads `wall`. A change
    /// seen before keeps its first sight; pods no longer NotReady are forgotten.
    ///
    /// A `lastTransitionTime` has one-second resolution (the fraction is dropped), so the
    /// change happened somewhere in the second after it. It counts from the end of that second:
    /// a leader is never replaced before it has certainly been NotReady for the failover delay
    /// (at worst a second later).
    pub fn observe(
        &mut self,
        not_ready: Vec<(String, Timestamp)>,
        now: Instant,
        wall: Timestamp,
    ) -> HashMap<String, NotReadySince> {
        let seen = std::mem::take(&mut self.seen);
        self.seen = not_ready
            .into_iter()
            .map(|(uid, written)| {
                let since = seen
                    .iter()
                    .find(|(u, w, _)| *u == uid && *w == written)
                    .map_or_else(
                        || {
                            let changed = written
                                .checked_add(SignedDuration::from_secs(1))
                                .unwrap_or(written);
                            NotReadySince::first_seen(changed, now, wall)
                        },
                        |(_, _, since)| *since,
                    );
                (uid, written, since)
            })
            .collect();
        self.seen
            .iter()
            .map(|(uid, _, since)| (uid.clone(), *since))
            .collect()
    }

    /// Whether no pod is NotReady (the memory can go).
    pub fn is_empty(&self) -> bool {
        self.seen.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_change_is_converted_once_from_the_end_of_its_second_and_forgotten_when_it_ends() {
        let mut memory = NotReadyMemory::default();
        let written: Timestamp = "2026-11-29T10:00:00Z".parse().unwrap();
        let seen = Instant::now();
        let wall = written + SignedDuration::from_secs(4);
        let first = memory.observe(vec![("p1".into(), written)], seen, wall);
        assert_eq!(first["p1"].before, Duration::from_secs(3));
        assert_eq!(first["p1"].seen_at, seen);
        // The wall clock stepped an hour forward: the same change keeps its first sight.
        let later = seen + Duration::from_secs(2);
        let stepped = wall + SignedDuration::from_secs(3600);
        let again = memory.observe(vec![("p1".into(), written)], later, stepped);
        assert_eq!(again["p1"], first["p1"]);
        assert_eq!(again["p1"].elapsed(later), Duration::from_secs(5));
        // A new change is seen anew; a pod Ready again is forgotten.
        let next = written + SignedDuration::from_secs(60);
        let renewed = memory.observe(vec![("p1".into(), next)], later, stepped);
        assert_eq!(renewed["p1"].before, Duration::from_secs(3600 + 4 - 61));
        assert!(memory.observe(Vec::new(), later, stepped).is_empty());
        assert!(memory.is_empty());
    }

    #[test]
    fn a_change_written_in_this_very_second_has_not_begun_yet() {
        let mut memory = NotReadyMemory::default();
        let written: Timestamp = "2026-11-29T10:00:00Z".parse().unwrap();
        let now = Instant::now();
        let wall = written + SignedDuration::from_millis(300);
        let since = memory.observe(vec![("p1".into(), written)], now, wall);
        assert_eq!(since["p1"].before, Duration::ZERO);
    }
}
