//! Which operator replica may write: the holder of a `coordination.k8s.io/v1` Lease.
//!
//! Several replicas run at once; exactly one of them, the *active* one, writes to Kubernetes
//! and to Consul. The others are *standbys*: they keep their caches warm and write nothing,
//! so that one of them can take over within a lease duration when the active one dies.
//!
//! # The Lease, timed on the monotonic clock
//! The decisions are in [`elector`] (pure); this module reads and writes the Lease for it,
//! each request bounded by its own timeout and independent of any reconcile. The holder
//! renews every `renew_deadline / 2` (whole seconds, at least one) and may write until the
//! last successful renewal was *sent* plus `renew_deadline`: that deadline opens the
//! [`WriteGate`], which every write to the API server and to Consul checks immediately before
//! it is sent. A standby takes the Lease when it was released, or when the holder left it
//! unchanged for `leaseDurationSeconds` *as the standby saw it*, on its own monotonic clock.
//! So the active replica stops writing `duration - renew_deadline` before anybody else may
//! start, whatever the replicas' wall clocks say: the argument needs clocks that run at the
//! same rate, not clocks that agree (`renewTime` is written for people and other tools and
//! never read back). Every write of the Lease is conditional on the resourceVersion last read.
//!
//! Giving up is final: [`Leadership::hold`] returns an error, the controller stops at once
//! (dropping its reconciles and session renewals), and the binary exits non-zero; the
//! restarted container comes back as a standby (or, when nobody took over meanwhile, holds the
//! Lease again under the same identity, the pod name).

pub mod elector;
pub mod release;

pub use crate::wall_clock::WallClock;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::PostParams;
use kube::{Api, Client};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::crd::RELEASE_REQUESTED_ANNOTATION;
use crate::crd::conditions::LEASE_TIMING_SAFE;
use crate::election::plan::ConditionState;
use crate::write_gate::WriteGate;
use elector::{Elector, Next, Record, Timing, WriteOutcome};

/// Time a standby may need, after the Lease expired, to take it and adopt the sessions.
pub const TAKEOVER_MARGIN: Duration = Duration::from_secs(2);
/// Longest pause between two reads of the Lease by a standby, and before a failed request is
/// sent again.
const MAX_CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// Where the Lease is and how it is timed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseSettings {
    /// Name of the Lease object.
    pub name: String,
    /// Namespace of the Lease object (the operator's own).
    pub namespace: String,
    /// This replica's identity in `holderIdentity` (the pod name).
    pub identity: String,
    /// `leaseDurationSeconds`: how long after the last renewal a standby may take over.
    pub duration: Duration,
    /// How long after its last successful renewal the active replica stops writing; shorter
    /// than `duration`.
    pub renew_deadline: Duration,
    /// The clock `renewTime` and `acquireTime` are stamped with (for people and other tools:
    /// no decision reads them back), and the one the controller renders and persists times
    /// with.
    pub wall_clock: WallClock,
}

impl LeaseSettings {
    /// Checks the timing: whole seconds (the Lease counts in seconds), at least two seconds of
    /// renew deadline (two renewal attempts), and a renew deadline shorter than the duration.
    pub fn validate(&self) -> Result<(), String> {
        let whole = |d: Duration| d.subsec_nanos() == 0;
        if !whole(self.duration) || !whole(self.renew_deadline) {
            return Err("the lease duration and renew deadline must be whole seconds".to_owned());
        }
        if self.renew_deadline < Duration::from_secs(2) {
            return Err("the lease renew deadline must be at least 2s".to_owned());
        }
        if self.renew_deadline >= self.duration {
            return Err(format!(
                "the lease renew deadline ({}s) must be shorter than the lease duration ({}s), \
                 so that the active replica stops writing before a standby can take over",
                self.renew_deadline.as_secs(),
                self.duration.as_secs()
            ));
        }
        Ok(())
    }

    /// How often the holder renews: half the renew deadline, at least one second.
    pub fn renew_interval(&self) -> Duration {
        Duration::from_secs((self.renew_deadline.as_secs() / 2).max(1))
    }

    /// How often the Lease is read to check the renew deadline.
    pub fn check_interval(&self) -> Duration {
        (self.renew_interval() / 2).min(MAX_CHECK_INTERVAL)
    }

    /// Whether a Consul session of `ttl` outlives a failover. Consul keeps a session 2×TTL
    /// after its last renewal, and the operator renews every TTL/2, so when the active replica
    /// crashes its sessions have at least 1.5×TTL left. Its Lease was renewed at the latest at
    /// the crash, so a standby holds it within `duration` and adopts the sessions within
    /// [`TAKEOVER_MARGIN`] more.
    pub fn session_survives_failover(&self, ttl: Duration) -> bool {
        ttl.saturating_mul(3) / 2 >= self.failover_bound()
    }

    /// The longest a failover may take: lease duration plus [`TAKEOVER_MARGIN`].
    pub fn failover_bound(&self) -> Duration {
        self.duration + TAKEOVER_MARGIN
    }

    /// The shortest session TTL that [survives a failover](Self::session_survives_failover),
    /// in whole seconds.
    pub fn min_session_ttl(&self) -> Duration {
        Duration::from_secs((self.failover_bound().as_secs() * 2).div_ceil(3))
    }

    /// The [`LEASE_TIMING_SAFE`] condition of a managed election whose session has `ttl`.
    pub fn timing_condition(&self, ttl: Duration) -> ConditionState {
        let (secs, bound) = (ttl.as_secs(), self.failover_bound().as_secs());
        if self.session_survives_failover(ttl) {
            ConditionState {
                type_: LEASE_TIMING_SAFE,
                status: true,
                reason: "SessionOutlivesFailover",
                message: format!(
                    "the session (TTL {secs}s) outlives a failover of the operator's replicas \
                     (at most {bound}s)"
                ),
            }
        } else {
            ConditionState {
                type_: LEASE_TIMING_SAFE,
                status: false,
                reason: "SessionTTLTooShort",
                message: format!(
                    "after a crash of the active operator replica the session (TTL {secs}s) may \
                     expire before a standby adopts it (up to {bound}s: lease duration plus \
                     takeover), which would re-elect the leader; set spec.session.ttl to at \
                     least {}s",
                    self.min_session_ttl().as_secs()
                ),
            }
        }
    }

    /// The elector's timing.
    fn timing(&self) -> Timing {
        Timing {
            identity: self.identity.clone(),
            duration: self.duration,
            renew_deadline: self.renew_deadline,
            renew_interval: self.renew_interval(),
            retry: self.check_interval(),
        }
    }
}

/// Why this replica stopped being (or could not try to become) the active one.
#[derive(Debug, thiserror::Error)]
pub enum LeadershipError {
    /// The timing settings are inconsistent.
    #[error("invalid lease settings: {0}")]
    Settings(String),
    /// The renew deadline passed without a successful renewal, or another replica took the
    /// Lease.
    #[error(
        "lost Lease {namespace}/{name}: not renewed within the renew deadline; stopped writing"
    )]
    Lost {
        /// Lease namespace.
        namespace: String,
        /// Lease name.
        name: String,
    },
}

/// This replica's claim on the Lease.
pub struct Leadership {
    api: Api<Lease>,
    settings: LeaseSettings,
    elector: Elector,
    /// The Lease as last read or written (its resourceVersion is the next write's condition).
    lease: Option<Lease>,
    /// The release request the Lease carried when last read or written ([`release`]).
    release_requested: watch::Sender<Option<Timestamp>>,
}

impl Leadership {
    /// A claim on the Lease of `settings`, read and written with `client` (which should have
    /// no retry layer of its own: every request here has its own timeout, and the loop
    /// retries). Holds nothing yet.
    pub fn new(client: Client, settings: LeaseSettings) -> Result<Self, LeadershipError> {
        settings.validate().map_err(LeadershipError::Settings)?;
        Ok(Leadership {
            api: Api::namespaced(client, &settings.namespace),
            elector: Elector::new(settings.timing()),
            settings,
            lease: None,
            release_requested: watch::channel(None).0,
        })
    }

    /// The release request on the Lease as last read or written (the uninstall's, see
    /// [`release`]), for every replica, active or not.
    pub fn release_requests(&self) -> watch::Receiver<Option<Timestamp>> {
        self.release_requested.subscribe()
    }

    /// Keeps `lease` as the one last read or written, and its release request.
    fn keep(&mut self, lease: Option<Lease>) {
        let requested = lease.as_ref().and_then(|lease| {
            release::parse(
                lease
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(RELEASE_REQUESTED_ANNOTATION))
                    .map(String::as_str),
            )
        });
        self.release_requested.send_if_modified(|now| {
            let changed = *now != requested;
            *now = requested;
            changed
        });
        self.lease = lease;
    }

    /// Tries to acquire the Lease and keeps it renewed, opening `gate` until the deadline of
    /// each successful renewal. Returns only when, after that, the deadline passed or another
    /// replica took the Lease: from then on nothing may be written (the gate is closed).
    pub async fn hold(&mut self, gate: &WriteGate) -> LeadershipError {
        let mut was_active = false;
        loop {
            let now = Instant::now();
            let holds = self.elector.holds(now);
            if holds && !was_active {
                was_active = true;
                tracing::info!(lease = %self.settings.name, identity = %self.settings.identity, "holding the Lease: this replica is active");
            }
            match self.elector.next(now) {
                Next::Lost => {
                    gate.close();
                    return self.lost();
                }
                Next::Sleep(wait) => tokio::time::sleep(wait).await,
                Next::Read { timeout } => self.read(timeout).await,
                Next::Write { timeout, takeover } => {
                    self.write(timeout, takeover).await;
                    if let Some(until) = self.elector.held_until() {
                        gate.open_until(until);
                    }
                }
            }
        }
    }

    /// Gives the Lease up (after the controller stopped), so that a standby takes over at once
    /// instead of waiting for it to expire. Conditional on the Lease being unchanged since
    /// this replica last wrote it.
    pub async fn release(&mut self) {
        let Some(mut lease) = self.lease.clone() else {
            return;
        };
        let ours = lease
            .spec
            .as_ref()
            .and_then(|s| s.holder_identity.as_deref())
            == Some(self.settings.identity.as_str());
        if !ours {
            return;
        }
        self.elector.lose();
        lease.spec = Some(LeaseSpec {
            holder_identity: None,
            lease_duration_seconds: Some(1),
            renew_time: Some(MicroTime(self.settings.wall_clock.now())),
            ..lease.spec.unwrap_or_default()
        });
        let name = self.settings.name.clone();
        let params = PostParams::default();
        let request = self.api.replace(&name, &params, &lease);
        match tokio::time::timeout(self.settings.renew_deadline, request).await {
            Ok(Ok(_)) => tracing::info!(lease = %name, "released the Lease"),
            Ok(Err(error)) => {
                tracing::warn!(%error, lease = %name, "releasing the Lease failed; it expires instead");
            }
            Err(_) => {
                tracing::warn!(lease = %name, "releasing the Lease timed out; it expires instead");
            }
        }
    }

    fn lost(&self) -> LeadershipError {
        LeadershipError::Lost {
            namespace: self.settings.namespace.clone(),
            name: self.settings.name.clone(),
        }
    }

    async fn read(&mut self, timeout: Duration) {
        let request = self.api.get_opt(&self.settings.name);
        match tokio::time::timeout(timeout, request).await {
            Ok(Ok(lease)) => {
                let record = lease.as_ref().map(record_of);
                self.keep(lease);
                self.elector.read(record, Instant::now());
            }
            Ok(Err(error)) => {
                tracing::warn!(%error, lease = %self.settings.name, "reading the Lease failed");
                self.elector.read_failed(Instant::now());
            }
            Err(_) => {
                tracing::warn!(lease = %self.settings.name, ?timeout, "reading the Lease timed out");
                self.elector.read_failed(Instant::now());
            }
        }
    }

    async fn write(&mut self, timeout: Duration, takeover: bool) {
        let now = self.settings.wall_clock.now();
        let mut lease = self.lease.clone().unwrap_or_else(|| Lease {
            metadata: ObjectMeta {
                name: Some(self.settings.name.clone()),
                namespace: Some(self.settings.namespace.clone()),
                ..ObjectMeta::default()
            },
            spec: None,
        });
        let exists = lease.metadata.resource_version.is_some();
        let spec = lease.spec.take().unwrap_or_default();
        let duration = i32::try_from(self.settings.duration.as_secs()).unwrap_or(i32::MAX);
        lease.spec = Some(if takeover {
            LeaseSpec {
                holder_identity: Some(self.settings.identity.clone()),
                acquire_time: Some(MicroTime(now)),
                renew_time: Some(MicroTime(now)),
                lease_duration_seconds: Some(duration),
                lease_transitions: Some(
                    spec.lease_transitions
                        .unwrap_or(0)
                        .saturating_add(i32::from(exists)),
                ),
                ..spec
            }
        } else {
            LeaseSpec {
                holder_identity: Some(self.settings.identity.clone()),
                renew_time: Some(MicroTime(now)),
                lease_duration_seconds: Some(duration),
                ..spec
            }
        });
        let sent = Instant::now();
        let params = PostParams::default();
        let result = if exists {
            tokio::time::timeout(
                timeout,
                self.api.replace(&self.settings.name, &params, &lease),
            )
            .await
        } else {
            tokio::time::timeout(timeout, self.api.create(&params, &lease)).await
        };
        let outcome = match result {
            Ok(Ok(written)) => {
                let record = record_of(&written);
                self.keep(Some(written));
                WriteOutcome::Written(record)
            }
            Ok(Err(kube::Error::Api(status))) if status.code == 409 => WriteOutcome::Conflict,
            Ok(Err(error)) => {
                tracing::warn!(%error, lease = %self.settings.name, takeover, "writing the Lease failed");
                WriteOutcome::Failed
            }
            Err(_) => {
                tracing::warn!(lease = %self.settings.name, ?timeout, takeover, "writing the Lease timed out");
                WriteOutcome::Failed
            }
        };
        self.elector.wrote(sent, Instant::now(), outcome);
    }
}

/// What the elector needs of a Lease.
fn record_of(lease: &Lease) -> Record {
    let spec = lease.spec.as_ref();
    Record {
        holder: spec.and_then(|s| s.holder_identity.clone()),
        duration: spec
            .and_then(|s| s.lease_duration_seconds)
            .and_then(|d| u64::try_from(d).ok())
            .map(Duration::from_secs),
        version: lease.metadata.resource_version.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(duration: u64, renew_deadline: u64) -> LeaseSettings {
        LeaseSettings {
            name: "consul-elector".into(),
            namespace: "ops".into(),
            identity: "consul-elector-0".into(),
            duration: Duration::from_secs(duration),
            renew_deadline: Duration::from_secs(renew_deadline),
            wall_clock: WallClock::system(),
        }
    }

    #[test]
    fn defaults_renew_twice_within_the_deadline_and_stop_well_before_expiry() {
        let s = settings(15, 10);
        assert_eq!(s.validate(), Ok(()));
        assert_eq!(s.renew_interval(), Duration::from_secs(5));
        assert_eq!(s.check_interval(), Duration::from_secs(1));
    }

    #[test]
    fn short_test_timings() {
        let s = settings(3, 2);
        assert_eq!(s.validate(), Ok(()));
        assert_eq!(s.renew_interval(), Duration::from_secs(1));
        assert_eq!(s.check_interval(), Duration::from_millis(500));
    }

    #[test]
    fn a_session_must_outlive_the_lease_duration_and_the_takeover() {
        let s = settings(15, 10);
        // 1.5 × TTL against 15 s + 2 s.
        assert_eq!(s.min_session_ttl(), Duration::from_secs(12));
        assert!(s.session_survives_failover(Duration::from_secs(12)));
        assert!(s.session_survives_failover(Duration::from_secs(15)));
        assert!(!s.session_survives_failover(Duration::from_secs(11)));
        assert!(!s.session_survives_failover(Duration::from_secs(10)));
        assert!(settings(3, 2).session_survives_failover(Duration::from_secs(10)));
        let safe = s.timing_condition(Duration::from_secs(12));
        assert_eq!(
            (safe.status, safe.reason),
            (true, "SessionOutlivesFailover")
        );
        let short = s.timing_condition(Duration::from_secs(10));
        assert_eq!((short.status, short.reason), (false, "SessionTTLTooShort"));
        assert!(short.message.ends_with("at least 12s"), "{}", short.message);
    }

    #[test]
    fn a_deadline_at_or_after_expiry_is_refused() {
        for (duration, deadline) in [(10, 10), (10, 12), (15, 1)] {
            assert!(
                settings(duration, deadline).validate().is_err(),
                "{duration}/{deadline}"
            );
        }
        let mut s = settings(15, 10);
        s.duration = Duration::from_millis(15_500);
        assert!(s.validate().unwrap_err().contains("whole seconds"));
    }
}
