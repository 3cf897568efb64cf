//! The Lease decisions, pure: fed what was read and written, and the monotonic instants of
//! those requests, it says what to do next. No I/O and no clock reads; the shell in
//! [`super`] performs the requests and reads the clock.
//!
//! The rules (the timing argument is in [`crate::write_gate`]):
//! - A replica may write until the instant its last successful acquisition or renewal was
//!   *sent*, plus the renew deadline; past it, it has lost the Lease for good.
//! - A standby counts a Lease's age from the instant *it first saw* the current record (on its
//!   own monotonic clock), never from the `renewTime` written in it: so only clock rates
//!   matter, not clock values. It takes the Lease when it is free (released) or when the
//!   holder left it unchanged for the whole duration.
//! - Every write of the Lease is conditional on the resourceVersion last read, so two
//!   replicas never both succeed from the same record.

use std::time::Duration;

use tokio::time::Instant;

/// What one read (or one successful write) of the Lease showed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// `spec.holderIdentity` (`None`: released or never held).
    pub holder: Option<String>,
    /// `spec.leaseDurationSeconds`, when set.
    pub duration: Option<Duration>,
    /// `metadata.resourceVersion`: any write changes it.
    pub version: Option<String>,
}

/// The timing of the Lease, as this replica uses it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Timing {
    /// This replica's `holderIdentity`.
    pub identity: String,
    /// How long a standby waits after it last saw the record change.
    pub duration: Duration,
    /// How long after sending its last successful renewal the holder may write.
    pub renew_deadline: Duration,
    /// How often the holder renews.
    pub renew_interval: Duration,
    /// How often a standby reads, and how soon a failed request is tried again.
    pub retry: Duration,
}

/// What the shell should do next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    /// Read the Lease, within `timeout`.
    Read {
        /// Bound of the request.
        timeout: Duration,
    },
    /// Write the Lease naming this replica (acquire, or renew when it already does), on the
    /// record last read, within `timeout`.
    Write {
        /// Bound of the request.
        timeout: Duration,
        /// Whether this takes the Lease from another holder or from nobody (then
        /// `acquireTime` and `leaseTransitions` change too).
        takeover: bool,
    },
    /// Nothing to do for this long.
    Sleep(Duration),
    /// The deadline passed without a successful renewal, or another replica holds the Lease:
    /// stop writing for good.
    Lost,
}

/// How a write of the Lease ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteOutcome {
    /// Written: the record as it is now.
    Written(Record),
    /// Refused because the record changed since it was read (HTTP 409): read it again.
    Conflict,
    /// Failed otherwise (timeout, transport, 5xx): it may or may not have been applied.
    Failed,
}

/// The state of this replica's claim.
#[derive(Debug, Clone)]
pub struct Elector {
    timing: Timing,
    /// The record last seen, and when this replica first saw it.
    seen: Option<(Record, Instant)>,
    /// When the last read or write completed (a standby reads every `retry`).
    last_contact: Option<Instant>,
    /// Until when this replica may write.
    held_until: Option<Instant>,
    /// When the last successful write was sent.
    renewed_at: Option<Instant>,
    /// When the last request failed (the next one waits `retry`).
    failed_at: Option<Instant>,
    /// The record is not known well enough to write on it (a conflict, or a write whose
    /// outcome is unknown).
    must_read: bool,
    /// The holder's deadline passed or another replica took the Lease.
    lost: bool,
}

impl Elector {
    /// A replica that has not read the Lease yet.
    pub fn new(timing: Timing) -> Self {
        Elector {
            timing,
            seen: None,
            last_contact: None,
            held_until: None,
            renewed_at: None,
            failed_at: None,
            must_read: true,
            lost: false,
        }
    }

    /// Until when this replica may write (`None`: it does not hold the Lease).
    pub fn held_until(&self) -> Option<Instant> {
        self.held_until
    }

    /// Whether this replica holds the Lease as of `now`.
    pub fn holds(&self, now: Instant) -> bool {
        !self.lost && self.held_until.is_some_and(|until| now < until)
    }

    /// The record last seen.
    pub fn record(&self) -> Option<&Record> {
        self.seen.as_ref().map(|(record, _)| record)
    }

    /// What to do at `now`.
    pub fn next(&self, now: Instant) -> Next {
        if self.lost {
            return Next::Lost;
        }
        let t = &self.timing;
        let backoff = self
            .failed_at
            .map(|at| (at + t.retry).saturating_duration_since(now))
            .filter(|wait| !wait.is_zero());
        if let Some(until) = self.held_until {
            if now >= until {
                return Next::Lost;
            }
            let left = until - now;
            if let Some(wait) = backoff {
                return Next::Sleep(wait.min(left));
            }
            if self.must_read {
                return Next::Read {
                    timeout: left.min(t.retry),
                };
            }
            let due = self.renewed_at.map_or(now, |sent| sent + t.renew_interval);
            return match due.checked_duration_since(now).filter(|d| !d.is_zero()) {
                Some(wait) => Next::Sleep(wait),
                None => Next::Write {
                    timeout: left,
                    takeover: false,
                },
            };
        }
        if let Some(wait) = backoff {
            return Next::Sleep(wait);
        }
        let Some((record, first_seen)) = &self.seen else {
            return Next::Read {
                timeout: t.renew_deadline,
            };
        };
        if self.must_read {
            return Next::Read {
                timeout: t.renew_deadline,
            };
        }
        let write = |takeover| Next::Write {
            timeout: t.renew_deadline,
            takeover,
        };
        match record.holder.as_deref() {
            // Ours already (this identity restarted): renew it.
            Some(holder) if holder == t.identity => write(false),
            None => write(true),
            Some(_) => {
                let expires = *first_seen + record.duration.unwrap_or(t.duration);
                if now >= expires {
                    return write(true);
                }
                let next_read = self.last_contact.map_or(now, |at| at + t.retry);
                match next_read
                    .checked_duration_since(now)
                    .filter(|d| !d.is_zero())
                {
                    Some(wait) => Next::Sleep(wait.min(expires - now)),
                    None => Next::Read {
                        timeout: t.renew_deadline,
                    },
                }
            }
        }
    }

    /// A read that completed at `at` showed `record` (`None`: the Lease does not exist).
    pub fn read(&mut self, record: Option<Record>, at: Instant) {
        self.last_contact = Some(at);
        self.failed_at = None;
        self.must_read = false;
        let record = record.unwrap_or(Record {
            holder: None,
            duration: None,
            version: None,
        });
        if self.held_until.is_some() && record.holder.as_deref() != Some(&self.timing.identity) {
            // Somebody else holds it: whatever the timing said, stop.
            self.lose();
        }
        self.see(record, at);
    }

    /// A read failed at `at`.
    pub fn read_failed(&mut self, at: Instant) {
        self.failed_at = Some(at);
    }

    /// A write sent at `sent` ended at `at` with `outcome`.
    pub fn wrote(&mut self, sent: Instant, at: Instant, outcome: WriteOutcome) {
        self.last_contact = Some(at);
        if self.held_until.is_some_and(|until| at >= until) {
            // The deadline passed while this write was in flight: giving up is final.
            self.lose();
            return;
        }
        match outcome {
            WriteOutcome::Written(record) => {
                self.failed_at = None;
                self.must_read = false;
                self.renewed_at = Some(sent);
                let until = sent + self.timing.renew_deadline;
                // A slow answer can arrive after the deadline it would set: nothing to extend.
                if at < until && !self.lost {
                    self.held_until = Some(until);
                }
                if self.lost {
                    return;
                }
                self.see(record, at);
            }
            WriteOutcome::Conflict => {
                self.must_read = true;
            }
            WriteOutcome::Failed => {
                self.failed_at = Some(at);
                self.must_read = true;
            }
        }
    }

    /// This replica gave the Lease up (released it): it writes no more.
    pub fn lose(&mut self) {
        self.lost = true;
        self.held_until = None;
    }

    fn see(&mut self, record: Record, at: Instant) {
        let changed = self.seen.as_ref().is_none_or(|(seen, _)| *seen != record);
        if changed {
            self.seen = Some((record, at));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timing() -> Timing {
        Timing {
            identity: "a".into(),
            duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            renew_interval: Duration::from_secs(5),
            retry: Duration::from_secs(1),
        }
    }

    fn record(holder: Option<&str>, version: &str) -> Record {
        Record {
            holder: holder.map(str::to_owned),
            duration: Some(Duration::from_secs(15)),
            version: Some(version.into()),
        }
    }

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn a_free_lease_is_taken_and_the_deadline_counts_from_the_write_sent() {
        let t0 = Instant::now();
        let mut e = Elector::new(timing());
        assert!(matches!(e.next(t0), Next::Read { .. }));
        e.read(Some(record(None, "1")), t0);
        assert_eq!(
            e.next(t0),
            Next::Write {
                timeout: 10 * S,
                takeover: true
            }
        );
        // Sent at t0, answered 3 s later: writable until t0 + 10 s, not t0 + 13 s.
        e.wrote(
            t0,
            t0 + 3 * S,
            WriteOutcome::Written(record(Some("a"), "2")),
        );
        assert_eq!(e.held_until(), Some(t0 + 10 * S));
        assert!(e.holds(t0 + 9 * S));
        assert!(!e.holds(t0 + 10 * S));
        // Renewed every renew interval after the write was sent.
        assert_eq!(e.next(t0 + 3 * S), Next::Sleep(2 * S));
        assert_eq!(
            e.next(t0 + 5 * S),
            Next::Write {
                timeout: 5 * S,
                takeover: false
            }
        );
    }

    #[test]
    fn renewals_that_fail_until_the_deadline_lose_the_lease_for_good() {
        let t0 = Instant::now();
        let mut e = Elector::new(timing());
        e.read(Some(record(None, "1")), t0);
        e.wrote(t0, t0, WriteOutcome::Written(record(Some("a"), "2")));
        e.wrote(t0 + 5 * S, t0 + 9 * S, WriteOutcome::Failed);
        // The failed write may have been applied: read before writing again.
        assert_eq!(e.next(t0 + 9 * S), Next::Sleep(S));
        assert_eq!(e.next(t0 + 10 * S), Next::Lost);
        // A renewal answered after the deadline cannot bring it back.
        e.wrote(
            t0 + 9 * S,
            t0 + 10 * S,
            WriteOutcome::Written(record(Some("a"), "3")),
        );
        assert_eq!(e.next(t0 + 10 * S), Next::Lost);
        assert!(!e.holds(t0 + 10 * S));
    }

    #[test]
    fn a_process_resumed_after_a_pause_finds_its_lease_lost() {
        let t0 = Instant::now();
        let mut e = Elector::new(timing());
        e.read(Some(record(None, "1")), t0);
        e.wrote(t0, t0, WriteOutcome::Written(record(Some("a"), "2")));
        // Paused (SIGSTOP) for a minute: the monotonic clock ran on.
        assert_eq!(e.next(t0 + 60 * S), Next::Lost);
    }

    #[test]
    fn a_standby_counts_the_duration_from_when_it_saw_the_record_change() {
        let t0 = Instant::now();
        let mut e = Elector::new(timing());
        e.read(Some(record(Some("b"), "7")), t0);
        assert_eq!(e.next(t0), Next::Sleep(S));
        // The holder renews: a new record, seen at t0 + 4 s.
        e.read(Some(record(Some("b"), "8")), t0 + 4 * S);
        // Unchanged records do not move the clock.
        for s in 5..19 {
            e.read(Some(record(Some("b"), "8")), t0 + s * S);
            assert!(
                matches!(e.next(t0 + s * S), Next::Sleep(_) | Next::Read { .. }),
                "at {s}s"
            );
        }
        assert_eq!(
            e.next(t0 + 19 * S),
            Next::Write {
                timeout: 10 * S,
                takeover: true
            }
        );
    }

    #[test]
    fn the_renew_time_written_in_the_lease_is_never_read() {
        // A record carries no wall-clock time at all: whatever a replica's clock says, only
        // the resourceVersion changing and the local monotonic clock decide.
        let t0 = Instant::now();
        let mut e = Elector::new(timing());
        e.read(Some(record(Some("b"), "7")), t0);
        assert!(!matches!(e.next(t0 + 14 * S), Next::Write { .. }));
        assert!(matches!(e.next(t0 + 15 * S), Next::Write { .. }));
    }

    #[test]
    fn a_conflict_reads_again_and_another_holder_means_lost() {
        let t0 = Instant::now();
        let mut e = Elector::new(timing());
        e.read(Some(record(None, "1")), t0);
        e.wrote(t0, t0, WriteOutcome::Written(record(Some("a"), "2")));
        e.wrote(t0 + 5 * S, t0 + 5 * S, WriteOutcome::Conflict);
        assert!(matches!(e.next(t0 + 5 * S), Next::Read { .. }));
        e.read(Some(record(Some("b"), "3")), t0 + 5 * S);
        assert_eq!(e.next(t0 + 5 * S), Next::Lost);
    }

    #[test]
    fn a_restarted_replica_renews_a_lease_that_names_it() {
        let t0 = Instant::now();
        let mut e = Elector::new(timing());
        e.read(Some(record(Some("a"), "5")), t0);
        assert_eq!(
            e.next(t0),
            Next::Write {
                timeout: 10 * S,
                takeover: false
            }
        );
    }

    #[test]
    fn a_missing_lease_is_created() {
        let t0 = Instant::now();
        let mut e = Elector::new(timing());
        e.read(None, t0);
        assert_eq!(e.record().and_then(|r| r.version.clone()), None);
        assert!(matches!(e.next(t0), Next::Write { takeover: true, .. }));
    }
}
