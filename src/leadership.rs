//! Which operator replica may write: the holder of a `coordination.k8s.io/v1` Lease.
//!
//! Several replicas run at once; exactly one of them, the *active* one, writes to Kubernetes
//! and to Consul. The others are *standbys*: they keep their caches warm and write nothing,
//! so that one of them can take over within a lease duration when the active one dies.
//!
//! # Acquiring and renewing
//! [`kube_lease_manager`] acquires the Lease and renews it: the holder renews every
//! `renew_deadline / 2` (whole seconds, at least one), a standby takes the Lease once
//! `renewTime + leaseDurationSeconds` has passed on its clock.
//!
//! # Stopping before anybody else can start: the renew deadline
//! The crate reports a lost Lease only when it reads another holder; when its renewals fail
//! (an unreachable or slow API server) it keeps retrying and keeps saying "leader" long after
//! the Lease expired. So this module does not trust that flag alone: it reads the Lease itself
//! every [`check_interval`](LeaseSettings::check_interval) and counts this replica as active
//! only while the Lease names it and `renewTime + renew_deadline` lies ahead. `renewTime` was
//! stamped by this process' own clock, and a standby cannot take the Lease before
//! `renewTime + duration`, so with `renew_deadline < duration` the active gives up
//! `duration - renew_deadline` before anybody else may start (that margin also covers the
//! requests still in flight). A failed read keeps the last known `renewTime`: the true one
//! can only be later.
//!
//! A standby also reads the Lease every check interval, so that it takes a released Lease at
//! once instead of at the expiry the crate last saw.
//!
//! Giving up is final: [`Leadership::hold`] returns an error, the controller stops at once
//! (dropping its reconciles and session renewals), and the binary exits non-zero; the
//! restarted container comes back as a standby (or, when nobody took over meanwhile, holds the
//! Lease again under the same identity, the pod name). As with every Lease, the safety of a
//! takeover assumes the replicas' clocks agree to well within `duration - renew_deadline`.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::Timestamp;
use kube::{Api, Client};
use kube_lease_manager::{LeaseManager, LeaseManagerBuilder, LeaseManagerError};
use tokio::sync::watch;

/// Time a standby may need, after the Lease expired, to take it and adopt the sessions.
pub const TAKEOVER_MARGIN: Duration = Duration::from_secs(2);
/// Pause before asking the crate again after it failed.
const RETRY: Duration = Duration::from_secs(1);
/// Longest pause between two reads of the Lease while holding or trying to hold it.
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

    /// The crate's grace: how long before expiry it renews.
    fn grace_secs(&self) -> u64 {
        self.duration
            .as_secs()
            .saturating_sub(self.renew_interval().as_secs())
    }
}

/// Why this replica stopped being (or could not try to become) the active one.
#[derive(Debug, thiserror::Error)]
pub enum LeadershipError {
    /// The Lease could not be set up (created or read).
    #[error("cannot set up Lease {namespace}/{name}: {source}")]
    Setup {
        /// Lease namespace.
        namespace: String,
        /// Lease name.
        name: String,
        /// The crate's error.
        #[source]
        source: LeaseManagerError,
    },
    /// The timing settings are inconsistent.
    #[error("invalid lease settings: {0}")]
    Settings(String),
    /// The renew deadline passed without a successful renewal.
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
    manager: Arc<LeaseManager>,
    client: Client,
    api: Api<Lease>,
    settings: LeaseSettings,
}

/// The crate's next report of whether this replica holds the Lease.
type Changed = Pin<Box<dyn Future<Output = Result<bool, LeaseManagerError>> + Send>>;

/// What one read of the Lease showed.
enum Observed {
    /// It names this replica: writing is allowed until this instant.
    Ours(Option<Timestamp>),
    /// Another replica holds it.
    Theirs,
    /// Nobody holds it (it was released).
    Free,
}

impl Leadership {
    /// Sets up the Lease (created when missing); holds nothing yet.
    pub async fn new(client: Client, settings: LeaseSettings) -> Result<Self, LeadershipError> {
        settings.validate().map_err(LeadershipError::Settings)?;
        let manager = Arc::new(build_manager(&client, &settings).await?);
        Ok(Leadership {
            manager,
            api: Api::namespaced(client.clone(), &settings.namespace),
            client,
            settings,
        })
    }

    /// Tries to acquire the Lease and keeps it renewed. Sends `true` on `active` once this
    /// replica holds it with a renewal younger than the renew deadline. Returns only when, after
    /// that, the renew deadline passed: from then on nothing may be written.
    ///
    /// A standby reads the Lease too: the crate sleeps until the expiry it last saw, so a Lease
    /// released by a graceful stop would otherwise wait for that expiry. On seeing it free, the
    /// standby starts over with a fresh manager, which reads the Lease and takes it at once.
    pub async fn hold(&mut self, active: &watch::Sender<bool>) -> LeadershipError {
        let mut changed = self.changed_after(Duration::ZERO);
        let mut held_until: Option<Timestamp> = None;
        let mut was_active = false;
        // What the crate last said: whether this replica holds the Lease.
        let mut claimed = false;
        loop {
            let now = Timestamp::now();
            let fresh = held_until.is_some_and(|until| now < until);
            if was_active && !fresh {
                active.send_replace(false);
                return LeadershipError::Lost {
                    namespace: self.settings.namespace.clone(),
                    name: self.settings.name.clone(),
                };
            }
            if fresh && !was_active {
                was_active = true;
                tracing::info!(lease = %self.settings.name, identity = %self.settings.identity, "holding the Lease: this replica is active");
                active.send_replace(true);
            }
            let until_deadline = held_until
                .filter(|_| was_active)
                .and_then(|until| Duration::try_from(until.duration_since(now)).ok())
                .unwrap_or(Duration::MAX);
            let wait = self.settings.check_interval().min(until_deadline);
            tokio::select! {
                result = &mut changed => {
                    let delay = match result {
                        Ok(holder) => {
                            tracing::debug!(holder, "the Lease changed hands");
                            claimed = holder;
                            Duration::ZERO
                        }
                        Err(error) => {
                            tracing::warn!(%error, lease = %self.settings.name, "renewing or acquiring the Lease failed");
                            RETRY
                        }
                    };
                    changed = self.changed_after(delay);
                }
                () = tokio::time::sleep(wait) => {}
            }
            match self.observe().await {
                Ok(Observed::Ours(until)) => held_until = until,
                Ok(Observed::Theirs) => held_until = None,
                Ok(Observed::Free) if !claimed && !was_active => {
                    match build_manager(&self.client, &self.settings).await {
                        Ok(manager) => {
                            drop(changed);
                            self.manager = Arc::new(manager);
                            changed = self.changed_after(Duration::ZERO);
                        }
                        Err(error) => tracing::warn!(%error, "setting up the Lease again failed"),
                    }
                }
                Ok(Observed::Free) => held_until = None,
                Err(error) => {
                    tracing::warn!(%error, lease = %self.settings.name, "reading the Lease failed");
                }
            }
        }
    }

    /// Gives the Lease up (after the controller stopped), so that a standby takes over at once
    /// instead of waiting for it to expire.
    pub async fn release(&self) {
        match self.manager.release().await {
            Ok(()) => tracing::info!(lease = %self.settings.name, "released the Lease"),
            Err(error) => {
                tracing::warn!(%error, lease = %self.settings.name, "releasing the Lease failed; it expires instead");
            }
        }
    }

    /// The crate's next change of holder, asked for after `delay`.
    fn changed_after(&self, delay: Duration) -> Changed {
        let manager = self.manager.clone();
        Box::pin(async move {
            tokio::time::sleep(delay).await;
            manager.changed().await
        })
    }

    /// Reads the Lease: whose it is and, when ours, until when this replica may write
    /// (`renewTime + renew_deadline`).
    async fn observe(&self) -> Result<Observed, kube::Error> {
        let lease = self.api.get(&self.settings.name).await?;
        let spec = lease.spec.unwrap_or_default();
        Ok(match spec.holder_identity.as_deref() {
            None => Observed::Free,
            Some(holder) if holder == self.settings.identity => Observed::Ours(
                spec.renew_time
                    .and_then(|renewed| renewed.0.checked_add(self.settings.renew_deadline).ok()),
            ),
            Some(_) => Observed::Theirs,
        })
    }
}

/// A lease manager for `settings` (creates the Lease when missing).
async fn build_manager(
    client: &Client,
    settings: &LeaseSettings,
) -> Result<LeaseManager, LeadershipError> {
    LeaseManagerBuilder::new(client.clone(), &settings.name)
        .with_namespace(&settings.namespace)
        .with_identity(&settings.identity)
        .with_duration(settings.duration.as_secs())
        .with_grace(settings.grace_secs())
        .build()
        .await
        .map_err(|source| LeadershipError::Setup {
            namespace: settings.namespace.clone(),
            name: settings.name.clone(),
            source,
        })
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
        }
    }

    #[test]
    fn defaults_renew_twice_within_the_deadline_and_stop_well_before_expiry() {
        let s = settings(15, 10);
        assert_eq!(s.validate(), Ok(()));
        assert_eq!(s.renew_interval(), Duration::from_secs(5));
        // The crate renews `grace` before `renewTime + duration`: 5 s after each renewal.
        assert_eq!(s.grace_secs(), 10);
        assert_eq!(s.check_interval(), Duration::from_secs(1));
    }

    #[test]
    fn short_test_timings() {
        let s = settings(3, 2);
        assert_eq!(s.validate(), Ok(()));
        assert_eq!(s.renew_interval(), Duration::from_secs(1));
        assert_eq!(s.grace_secs(), 2);
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
