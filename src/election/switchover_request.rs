//! Whether a reconcile decides the switchover request on its copy of the election. A request
//! is decided once: the copy may predate the request's removal (the watch is late), or the
//! removal may have failed, and a `*` decided again would be a new request: "move away from
//! whoever leads now", the pod leadership just went to.

use super::observe::{SwitchoverOutcome, SwitchoverRecord};

/// What the process that holds the copy knows of the request on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestSeen {
    /// Nothing: a request to decide.
    New,
    /// This process decided it and removed it; the copy is older than the removal.
    Decided,
    /// This process decided it, and does not know whether the removal happened.
    Unremoved,
}

/// The switchover request this process last decided, until a copy of the election shows it
/// removed: a copy older than the removal still carries it, and a `*` decided again would
/// move leadership once more. Decided from when its outcome or removal is sent, even if that
/// write fails.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DecidedRequest {
    /// The annotation's value, and the election's resourceVersion without it (the removal's
    /// answer; `None` while the removal's outcome is unknown).
    decided: Option<(String, Option<u64>)>,
}

impl DecidedRequest {
    /// This process decides `request` now.
    pub fn deciding(&mut self, request: &str) {
        self.decided = Some((request.to_owned(), None));
    }

    /// The request was removed, leaving the election at `version` (`None`: the election is
    /// gone, nothing to remember).
    pub fn removed(&mut self, version: Option<u64>) {
        match (&mut self.decided, version) {
            (Some((_, removed_in)), Some(version)) => *removed_in = Some(version),
            (_, None) => self.decided = None,
            (None, Some(_)) => {}
        }
    }

    /// What `request` on a copy of the election at `copy` (its resourceVersion) is to this
    /// process. A copy that shows the removal (a version from the removal on, or no request
    /// when the removal's answer was lost) ends the memory: copies read later are never
    /// older.
    pub fn seen(&mut self, request: Option<&str>, copy: Option<u64>) -> Option<RequestSeen> {
        let seen = match (&self.decided, request) {
            (_, None) => None,
            (Some((decided, removed_in)), Some(request)) if decided == request => {
                Some(match removed_in {
                    None => RequestSeen::Unremoved,
                    Some(removed) if copy < Some(*removed) => RequestSeen::Decided,
                    // Written again after the removal.
                    Some(_) => RequestSeen::New,
                })
            }
            (_, Some(_)) => Some(RequestSeen::New),
        };
        let shows_removal = match &self.decided {
            Some((_, Some(removed))) => copy >= Some(*removed),
            // The removal's answer was lost: a copy without the request shows it.
            Some((_, None)) => request.is_none(),
            None => false,
        };
        if shows_removal {
            self.decided = None;
        }
        seen
    }

    /// Whether nothing is remembered.
    pub fn is_empty(&self) -> bool {
        self.decided.is_none()
    }
}

/// What a reconcile does with the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestStep {
    /// Pass it to the planner.
    Decide,
    /// Leave it: it was decided and is gone.
    Skip,
    /// Remove it without deciding it again.
    Remove,
}

/// The step for `request`, given what the process knows of it and the status's record of
/// the last switchover. A request whose removal may not have happened is removed once the
/// status holds its outcome; while the record still says `InProgress` (every write of the
/// outcome failed), it is decided again, which that record makes a no-op: a `*` is then
/// measured against the record's `from`, the pod it was asked away from.
pub fn step(seen: RequestSeen, last: Option<&SwitchoverRecord>, request: &str) -> RequestStep {
    match seen {
        RequestSeen::New => RequestStep::Decide,
        RequestSeen::Decided => RequestStep::Skip,
        RequestSeen::Unremoved => {
            let outcome_recorded =
                last.is_some_and(|r| r.to == request && r.outcome != SwitchoverOutcome::InProgress);
            match outcome_recorded {
                true => RequestStep::Remove,
                false => RequestStep::Decide,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(to: &str, outcome: SwitchoverOutcome) -> SwitchoverRecord {
        SwitchoverRecord {
            to: to.to_owned(),
            from: Some("web-0".to_owned()),
            leader: None,
            requested_at: jiff::Timestamp::UNIX_EPOCH,
            completed_at: None,
            outcome,
            message: String::new(),
        }
    }

    #[test]
    fn a_removed_request_is_decided_on_older_copies_only_until_a_copy_shows_the_removal() {
        use RequestSeen::*;
        let mut memory = DecidedRequest::default();
        assert_eq!(memory.seen(Some("*"), Some(7)), Some(New));
        memory.deciding("*");
        assert_eq!(memory.seen(Some("*"), Some(7)), Some(Unremoved));
        memory.removed(Some(9));
        assert_eq!(memory.seen(Some("*"), Some(7)), Some(Decided));
        // Another request is news; the memory stays for the copies older than the removal.
        assert_eq!(memory.seen(Some("web-1"), Some(8)), Some(New));
        assert_eq!(memory.seen(Some("*"), Some(8)), Some(Decided));
        // The same one written again after the removal: news, and the memory ends.
        assert_eq!(memory.seen(Some("*"), Some(10)), Some(New));
        assert!(memory.is_empty());
        // A removal whose answer was lost: a copy without the request shows it.
        memory.deciding("*");
        assert_eq!(memory.seen(None, Some(11)), None);
        assert!(memory.is_empty());
        // A removal that found the election gone leaves nothing to remember.
        memory.deciding("*");
        memory.removed(None);
        assert!(memory.is_empty());
    }

    #[test]
    fn a_request_is_decided_once_and_removed_again_only_once_its_outcome_is_recorded() {
        let done = record("*", SwitchoverOutcome::Completed);
        let refused = record("*", SwitchoverOutcome::Refused);
        let running = record("*", SwitchoverOutcome::InProgress);
        let other = record("web-2", SwitchoverOutcome::Completed);
        use RequestSeen::*;
        use RequestStep::*;
        for (seen, last, expected) in [
            (New, Some(&done), Decide),
            (New, None, Decide),
            (Decided, Some(&done), Skip),
            (Decided, None, Skip),
            (Unremoved, Some(&done), Remove),
            (Unremoved, Some(&refused), Remove),
            (Unremoved, Some(&running), Decide),
            (Unremoved, Some(&other), Decide),
            (Unremoved, None, Decide),
        ] {
            assert_eq!(step(seen, last, "*"), expected, "{seen:?} {last:?}");
        }
    }
}
