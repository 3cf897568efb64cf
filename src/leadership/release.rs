//! Whether the uninstall asked this process to release its elections: the request is the
//! time the chart's pre-delete hook wrote on the install's Lease
//! ([`crate::crd::RELEASE_REQUESTED_ANNOTATION`]). It applies to the replicas that ran when it
//! was written; a replica started after it belongs to a later install of the same name, and
//! elects as usual. The hook writes it again while it waits (once per two lease durations, so
//! a standby can still take the Lease over), so a replica that restarts during the uninstall
//! sees a request newer than itself, at the latest then, and releases too.

use jiff::Timestamp;

/// The time of the release request `written` on the Lease, when it applies to a process
/// `started` at that time (both on wall clocks: the hook's and this process's).
pub fn applies(written: Option<Timestamp>, started: Timestamp) -> Option<Timestamp> {
    written.filter(|at| *at >= started)
}

/// The request as the Lease's annotation reads (`None` when absent or not a time).
pub fn parse(annotation: Option<&str>) -> Option<Timestamp> {
    annotation.and_then(|value| value.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_applies_to_the_processes_that_ran_when_it_was_written() {
        let started: Timestamp = "2026-11-30T10:00:00Z".parse().unwrap();
        let before: Timestamp = "2026-11-30T09:59:59Z".parse().unwrap();
        let after: Timestamp = "2026-11-30T10:05:00Z".parse().unwrap();
        assert_eq!(applies(Some(after), started), Some(after));
        assert_eq!(applies(Some(started), started), Some(started));
        // Left on the Lease by the uninstall of an earlier install of the same name.
        assert_eq!(applies(Some(before), started), None);
        assert_eq!(applies(None, started), None);
    }

    #[test]
    fn only_a_time_is_a_request() {
        assert_eq!(
            parse(Some("2026-11-30T10:05:00Z")),
            Some("2026-11-30T10:05:00Z".parse().unwrap())
        );
        assert_eq!(parse(Some("yes")), None);
        assert_eq!(parse(None), None);
    }
}
