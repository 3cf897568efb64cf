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
