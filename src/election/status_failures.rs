//! Status writes failing in a row, and when a Warning event says so: one failure is retried
//! quietly, a run of them means the operator cannot report what it does.

use super::plan::{ElectionEvent, EventReason};
use super::report::truncate;

/// After this many status writes failed in a row, a Warning event says so.
pub const STATUS_FAILURES_REPORTED: u32 = 3;

/// The run of failed status writes of one election (none while the last write succeeded).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StatusFailures(Option<(u32, &'static str)>);

impl StatusFailures {
    /// A status write failed with `error` (of the static `category`); returns the Warning to
    /// publish when the failures in a row reach [`STATUS_FAILURES_REPORTED`] (once per run of
    /// failures; the metric counts every one).
    pub fn failed(&mut self, category: &'static str, error: &str) -> Option<ElectionEvent> {
        let count = self.0.map_or(0, |(n, _)| n).saturating_add(1);
        self.0 = Some((count, category));
        (count == STATUS_FAILURES_REPORTED).then(|| ElectionEvent {
            reason: EventReason::StatusWriteFailed,
            pod: None,
            note: truncate(
                &format!("{count} status writes failed in a row; the last: {error}"),
                1024,
            ),
            warning: true,
            fenced: None,
        })
    }

    /// A whole status was written: the next one reports the run of failures it ended.
    pub fn ended(&mut self) {
        self.0 = None;
    }

    /// Status writes that failed in a row, with the last error's category.
    pub fn run(&self) -> Option<(u32, &'static str)> {
        self.0
    }

    /// Whether no run of failures stands.
    pub fn is_empty(&self) -> bool {
        self.0.is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failed_status_writes_count_until_one_succeeds_and_are_reported_once_a_run() {
        let mut failures = StatusFailures::default();
        let mut reported = Vec::new();
        for run in 0..2 {
            for n in 1..=STATUS_FAILURES_REPORTED + 2 {
                reported.extend(failures.failed("kube", &format!("error {run}.{n}")));
            }
            assert_eq!(failures.run(), Some((STATUS_FAILURES_REPORTED + 2, "kube")));
            failures.ended();
            assert!(failures.is_empty());
        }
        let notes: Vec<_> = reported.iter().map(|e| e.note.as_str()).collect();
        assert_eq!(
            notes,
            [
                "3 status writes failed in a row; the last: error 0.3",
                "3 status writes failed in a row; the last: error 1.3"
            ]
        );
        assert!(reported.iter().all(|e| e.warning));
    }
}
