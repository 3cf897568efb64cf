//! Prometheus metrics of the operator, in one `prometheus-client` registry: its own under the
//! prefix `consul_elector`, and the standard `process_*` metrics (`process`), served as
//! OpenMetrics text by [`crate::http`].
//!
//! Every label value is a `&'static str` chosen by the code (a result, a phase, a Consul
//! operation, a reason or an error category), in `snake_case`, never an election, pod or
//! session name and never an error message, so the number of series stays bounded however
//! many elections exist.

mod process;

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::{Registry, Unit};
use tokio::time::Instant;

use crate::consul::RequestObserver;
use crate::election::invariants::Disagreement;
use crate::election::plan_loop::Elected;

/// Prefix of every metric name.
const PREFIX: &str = "consul_elector";

/// Upper bounds (seconds) of the latency histograms: 1 ms to 30 s.
const LATENCY_BUCKETS: [f64; 14] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// How many of [`LATENCY_BUCKETS`] the reconcile duration uses: 1 ms to 5 s.
const RECONCILE_BUCKETS: usize = 12;

/// The `reason` a [`ReconcileTimer`] records when it is dropped without
/// [`ReconcileTimer::finish`]: the reconcile future was cancelled (shutdown) or panicked.
pub const CANCELLED: &str = "cancelled";

/// Label value of a successful operation (`result` and `outcome` labels).
const OK: &str = "ok";
/// Label value of a failed operation (`result` and `outcome` labels).
const ERROR: &str = "error";

pub use crate::election::plan::FencingCause;

/// The `operation` label value of a Consul operation as the client names it (`session renew`
/// becomes `session_renew`); `other` for one this list does not know.
fn operation_label(operation: &'static str) -> &'static str {
    match operation {
        "client setup" => "client_setup",
        "kv acquire" => "kv_acquire",
        "kv cas" => "kv_cas",
        "kv delete" => "kv_delete",
        "kv get" => "kv_get",
        "kv list" => "kv_list",
        "kv put" => "kv_put",
        "kv release" => "kv_release",
        "session adopt" => "session_adopt",
        "session create" => "session_create",
        "session destroy" => "session_destroy",
        "session info" => "session_info",
        "session list" => "session_list",
        "session renew" => "session_renew",
        _ => "other",
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ResultLabel {
    result: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ReasonLabel {
    reason: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct CauseLabel {
    cause: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct KindLabel {
    kind: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ConsulRequestLabels {
    operation: &'static str,
    outcome: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct CredentialReloadLabels {
    credential: &'static str,
    result: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct OperationLabel {
    operation: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct PhaseLabel {
    phase: &'static str,
}

/// Why elections have no leader, as the `reason` label of
/// `consul_elector_elections_without_leader`: the `LeaderElected` condition's reason in
/// `snake_case`.
pub const WITHOUT_LEADER_REASONS: [&str; 13] = [
    "not_reconciled",
    "no_candidates",
    "lock_held_elsewhere",
    "managed_elsewhere",
    "electing",
    "moving",
    "handing_over",
    "lock_delay",
    "raising_fencing_token",
    "fenced",
    "consul_unavailable",
    "no_holder",
    "paused",
];

/// The [`WITHOUT_LEADER_REASONS`] entry of a `LeaderElected` condition's reason (`None`: no
/// condition yet); `other` for a reason this list does not know.
pub fn without_leader_reason(condition_reason: Option<&str>) -> &'static str {
    match condition_reason {
        None => "not_reconciled",
        Some("NoCandidates") => "no_candidates",
        Some("LockHeldElsewhere") => "lock_held_elsewhere",
        Some("ManagedElsewhere") => "managed_elsewhere",
        Some("Electing") => "electing",
        Some("Moving") => "moving",
        Some("HandingOver") => "handing_over",
        Some("LockDelay") => "lock_delay",
        Some("RaisingFencingToken") => "raising_fencing_token",
        Some("Fenced") => "fenced",
        Some("ConsulUnavailable") => "consul_unavailable",
        Some("NoHolder") => "no_holder",
        Some("Paused") => "paused",
        Some(_) => "other",
    }
}

/// The `ok`/`error` label value of an outcome.
fn outcome_label(outcome: Result<(), &'static str>) -> &'static str {
    match outcome {
        Ok(()) => OK,
        Err(_) => ERROR,
    }
}

/// A histogram over [`LATENCY_BUCKETS`].
fn latency_histogram() -> Histogram {
    Histogram::new(LATENCY_BUCKETS)
}

/// The operator's metrics. Cheap to clone: every clone records into the same registry.
#[derive(Clone)]
pub struct Metrics {
    inner: Arc<Inner>,
}

struct Inner {
    registry: Registry,
    reconciles: Family<ResultLabel, Counter>,
    reconcile_errors: Family<ReasonLabel, Counter>,
    reconcile_duration: Histogram,
    leader_transitions: Counter,
    status_write_failures: Counter,
    events_suppressed: Counter,
    leader_elected: Histogram,
    fencing_actions: Family<CauseLabel, Counter>,
    elections: Family<PhaseLabel, Gauge>,
    without_leader: Family<ReasonLabel, Gauge>,
    sessions: Gauge,
    disagreements: Family<KindLabel, Counter>,
    active: Gauge,
    consul_requests: Family<ConsulRequestLabels, Counter>,
    consul_request_duration: Family<OperationLabel, Histogram>,
    credential_reloads: Family<CredentialReloadLabels, Counter>,
}

impl RequestObserver for Metrics {
    fn observe(
        &self,
        operation: &'static str,
        outcome: Result<(), &'static str>,
        elapsed: Duration,
        blocking: bool,
    ) {
        let outcome = match outcome {
            Ok(()) => OK,
            Err(category) => category,
        };
        let operation = operation_label(operation);
        self.inner
            .consul_requests
            .get_or_create(&ConsulRequestLabels { operation, outcome })
            .inc();
        if !blocking {
            self.inner
                .consul_request_duration
                .get_or_create(&OperationLabel { operation })
                .observe(elapsed.as_secs_f64());
        }
    }

    fn credential_reload(&self, credential: &'static str, result: &'static str) {
        self.inner
            .credential_reloads
            .get_or_create(&CredentialReloadLabels { credential, result })
            .inc();
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Metrics {
    /// A fresh registry with every metric family registered.
    pub fn new() -> Self {
        let mut root = Registry::default();
        root.register_collector(Box::new(process::ProcessCollector));
        let registry = root.sub_registry_with_prefix(PREFIX);
        registry.register(
            "build",
            "The operator's version",
            Info::new(vec![("version", env!("CARGO_PKG_VERSION"))]),
        );

        let reconciles = Family::<ResultLabel, Counter>::default();
        for result in [OK, ERROR] {
            // Creates the series at zero, so rates work from the first event.
            let _ = reconciles.get_or_create(&ResultLabel { result });
        }
        registry.register(
            "reconcile",
            "Reconciles of LeaderElections, by result",
            reconciles.clone(),
        );
        let reconcile_errors = Family::<ReasonLabel, Counter>::default();
        registry.register(
            "reconcile_errors",
            "Failed reconciles, by error category",
            reconcile_errors.clone(),
        );
        let reconcile_duration = Histogram::new(LATENCY_BUCKETS[..RECONCILE_BUCKETS].to_vec());
        registry.register_with_unit(
            "reconcile_duration",
            "Duration of one reconcile",
            Unit::Seconds,
            reconcile_duration.clone(),
        );

        let leader_transitions = Counter::default();
        registry.register(
            "leader_transitions",
            "Times an election's leader changed",
            leader_transitions.clone(),
        );
        let status_write_failures = Counter::default();
        registry.register(
            "status_write_failures",
            "Status writes of LeaderElections the API server refused or did not answer",
            status_write_failures.clone(),
        );
        let events_suppressed = Counter::default();
        registry.register(
            "events_suppressed",
            "Kubernetes events not published because more were due than the operator's event \
             rate limit allows (a burst of 100, then 20 per second), or because 2,000 were \
             already waiting to be written",
            events_suppressed.clone(),
        );
        let leader_elected = latency_histogram();
        registry.register_with_unit(
            "leader_elected",
            "Time from deciding to move leadership to the successor being labelled leader",
            Unit::Seconds,
            leader_elected.clone(),
        );
        let fencing_actions = Family::<CauseLabel, Counter>::default();
        for cause in FencingCause::ALL {
            let _ = fencing_actions.get_or_create(&CauseLabel {
                cause: cause.as_str(),
            });
        }
        registry.register(
            "fencing_actions",
            "Leader labels removed because the Consul lock could not be confirmed, by cause",
            fencing_actions.clone(),
        );

        let elections = Family::<PhaseLabel, Gauge>::default();
        registry.register(
            "elections",
            "LeaderElections known to the operator, by status phase (lower case)",
            elections.clone(),
        );
        let without_leader = Family::<ReasonLabel, Gauge>::default();
        for reason in WITHOUT_LEADER_REASONS.into_iter().chain(["other"]) {
            let _ = without_leader.get_or_create(&ReasonLabel { reason });
        }
        registry.register(
            "elections_without_leader",
            "LeaderElections whose LeaderElected condition is not True (Invalid and Conflict \
             elections apart), by the condition's reason",
            without_leader.clone(),
        );
        let sessions = Gauge::default();
        registry.register(
            "sessions",
            "Consul sessions the operator holds and renews",
            sessions.clone(),
        );

        let disagreements = Family::<KindLabel, Counter>::default();
        for kind in Disagreement::ALL {
            let _ = disagreements.get_or_create(&KindLabel {
                kind: kind.as_str(),
            });
        }
        let active = Gauge::default();
        registry.register(
            "active",
            "1 while this replica holds the Lease and writes, 0 on a standby",
            active.clone(),
        );

        let consul_requests = Family::<ConsulRequestLabels, Counter>::default();
        registry.register(
            "consul_requests",
            "Consul HTTP request attempts (retries count again), by operation (`kv_acquire`, \
             `session_renew`, ...) and outcome (`ok` or the error category)",
            consul_requests.clone(),
        );
        let consul_request_duration =
            Family::<OperationLabel, Histogram>::new_with_constructor(latency_histogram);
        registry.register_with_unit(
            "consul_request_duration",
            "Duration of Consul HTTP request attempts by operation, blocking queries apart \
             (they last as long as Consul waits for a change)",
            Unit::Seconds,
            consul_request_duration.clone(),
        );
        let credential_reloads = Family::<CredentialReloadLabels, Counter>::default();
        // Each credential's `reloaded` series exists (at zero) from the start, so that the
        // family is exported, and a rate over it is defined, before the first rotation.
        for credential in ["token", "client_certificate", "ca"] {
            let _ = credential_reloads.get_or_create(&CredentialReloadLabels {
                credential,
                result: "reloaded",
            });
        }
        registry.register(
            "consul_credential_reloads",
            "Consul credential files re-read with new contents, by credential (`token`, \
             `client_certificate`, `ca`) and result: `reloaded`, or why the new contents were \
             refused and the credential in use kept (`unreadable`, `empty`, `not_utf8`, \
             `invalid_header`, `invalid_pem`, `no_certificate`, `invalid_key`, `key_mismatch`, \
             `invalid_ca`)",
            credential_reloads.clone(),
        );

        registry.register(
            "disagreements",
            "Disagreements between leader labels, the Consul lock and the status that outlived \
             a reconcile, by kind",
            disagreements.clone(),
        );

        Self {
            inner: Arc::new(Inner {
                registry: root,
                reconciles,
                reconcile_errors,
                reconcile_duration,
                leader_transitions,
                status_write_failures,
                events_suppressed,
                leader_elected,
                fencing_actions,
                elections,
                without_leader,
                sessions,
                disagreements,
                active,
                consul_requests,
                consul_request_duration,
                credential_reloads,
            }),
        }
    }

    /// This registry as an observer of Consul requests
    /// ([`crate::consul::ConsulClient::observe_requests`]).
    pub fn consul_observer(&self) -> Arc<dyn RequestObserver> {
        Arc::new(self.clone())
    }

    /// The registry in the OpenMetrics text format, ending with `# EOF`.
    pub fn encode(&self) -> String {
        let mut buffer = String::new();
        if let Err(error) = text::encode(&mut buffer, &self.inner.registry) {
            // Writing to a String cannot fail and every value is encodable; keep what was
            // written rather than failing a scrape.
            tracing::warn!(%error, "encoding metrics failed");
        }
        buffer
    }

    /// Records a finished reconcile: `Ok(())`, or `Err(reason)` with a static error category.
    pub fn reconcile_finished(&self, outcome: Result<(), &'static str>, duration: Duration) {
        let inner = &self.inner;
        inner
            .reconciles
            .get_or_create(&ResultLabel {
                result: outcome_label(outcome),
            })
            .inc();
        if let Err(reason) = outcome {
            inner
                .reconcile_errors
                .get_or_create(&ReasonLabel { reason })
                .inc();
        }
        inner.reconcile_duration.observe(duration.as_secs_f64());
    }

    /// Starts timing a reconcile. The returned timer records it when it is finished or dropped.
    pub fn count_and_measure(&self) -> ReconcileTimer {
        ReconcileTimer {
            metrics: self.clone(),
            start: Instant::now(),
            outcome: Err(CANCELLED),
        }
    }

    /// Counts one failed status write.
    pub fn status_write_failed(&self) {
        self.inner.status_write_failures.inc();
    }

    /// Counts one event not published (rate limit, or the event queue full).
    pub fn event_suppressed(&self) {
        self.inner.events_suppressed.inc();
    }

    /// Counts a pod labelled leader: a change of an election's leader (a `transition`), and
    /// how long a leadership move took, from the decision to the successor's label.
    pub fn elected(&self, elected: Elected) {
        if elected.transition {
            self.inner.leader_transitions.inc();
        }
        if let Some(latency) = elected.after_move {
            self.inner.leader_elected.observe(latency.as_secs_f64());
        }
    }

    /// Counts one leader label removed for `cause`.
    pub fn fenced(&self, cause: FencingCause) {
        self.inner
            .fencing_actions
            .get_or_create(&CauseLabel {
                cause: cause.as_str(),
            })
            .inc();
    }

    /// Sets how many elections have no leader for `reason` (one of
    /// [`WITHOUT_LEADER_REASONS`] or `other`). Call it for every reason, so stale counts go
    /// to zero.
    pub fn set_without_leader(&self, reason: &'static str, count: i64) {
        self.inner
            .without_leader
            .get_or_create(&ReasonLabel { reason })
            .set(count);
    }

    /// Sets how many elections are in `phase` (a status phase name in lower case: `elected`).
    /// Call it for every phase, including those with no election, so stale counts go to zero.
    pub fn set_phase_count(&self, phase: &'static str, count: i64) {
        self.inner
            .elections
            .get_or_create(&PhaseLabel { phase })
            .set(count);
    }

    /// Counts one disagreement between labels, lock and status that outlived a reconcile.
    pub fn disagreement(&self, kind: Disagreement) {
        self.inner
            .disagreements
            .get_or_create(&KindLabel {
                kind: kind.as_str(),
            })
            .inc();
    }

    /// Sets how many Consul sessions the operator holds.
    pub fn set_sessions(&self, count: i64) {
        self.inner.sessions.set(count);
    }

    /// Sets whether this replica is the active one (holds the Lease and writes).
    pub fn set_active(&self, active: bool) {
        self.inner.active.set(i64::from(active));
    }
}

/// Times one reconcile (see [`Metrics::count_and_measure`]). Finish it with its outcome; if it
/// is dropped unfinished (the reconcile was cancelled or panicked), it records an error with
/// the reason [`CANCELLED`].
#[must_use = "a reconcile timer records when it is finished or dropped"]
#[derive(Debug)]
pub struct ReconcileTimer {
    metrics: Metrics,
    start: Instant,
    outcome: Result<(), &'static str>,
}

impl ReconcileTimer {
    /// Records the reconcile with `outcome`: `Ok(())` or `Err(reason)` with a static category.
    pub fn finish(mut self, outcome: Result<(), &'static str>) {
        self.outcome = outcome;
    }
}

impl Drop for ReconcileTimer {
    fn drop(&mut self) {
        self.metrics
            .reconcile_finished(self.outcome, self.start.elapsed());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The value of the sample line `name{labels} value` (or `name value`) in `text`.
    fn sample(text: &str, series: &str) -> Option<f64> {
        text.lines().find_map(|line| {
            let value = line.strip_prefix(series)?.strip_prefix(' ')?;
            value.parse().ok()
        })
    }

    #[test]
    fn series_with_fixed_labels_exist_at_zero_from_the_start() {
        let text = Metrics::new().encode();
        for series in [
            r#"consul_elector_reconcile_total{result="ok"}"#,
            r#"consul_elector_reconcile_total{result="error"}"#,
            r#"consul_elector_fencing_actions_total{cause="unconfirmed"}"#,
            r#"consul_elector_fencing_actions_total{cause="lost"}"#,
            r#"consul_elector_elections_without_leader{reason="no_candidates"}"#,
            r#"consul_elector_elections_without_leader{reason="other"}"#,
            "consul_elector_reconcile_duration_seconds_count",
            "consul_elector_leader_transitions_total",
            "consul_elector_status_write_failures_total",
            "consul_elector_leader_elected_seconds_count",
            "consul_elector_sessions",
            r#"consul_elector_disagreements_total{kind="two_leader_labels"}"#,
            r#"consul_elector_disagreements_total{kind="stale_status"}"#,
        ] {
            assert_eq!(sample(&text, series), Some(0.0), "{series} in\n{text}");
        }
        assert!(text.ends_with("# EOF\n"), "{text}");
    }

    #[test]
    fn encode_lists_every_family() {
        let metrics = Metrics::new();
        // prometheus-client leaves out families without series: give each one a series.
        metrics.reconcile_finished(Err("kube"), Duration::ZERO);
        metrics.set_phase_count("elected", 0);
        let text = metrics.encode();
        for family in [
            "# TYPE consul_elector_reconcile counter",
            "# TYPE consul_elector_reconcile_errors counter",
            "# TYPE consul_elector_reconcile_duration_seconds histogram",
            "# UNIT consul_elector_reconcile_duration_seconds seconds",
            "# TYPE consul_elector_leader_transitions counter",
            "# TYPE consul_elector_leader_elected_seconds histogram",
            "# UNIT consul_elector_leader_elected_seconds seconds",
            "# TYPE consul_elector_fencing_actions counter",
            "# TYPE consul_elector_elections gauge",
            "# TYPE consul_elector_elections_without_leader gauge",
            "# TYPE consul_elector_build info",
            "# TYPE consul_elector_sessions gauge",
            "# TYPE consul_elector_disagreements counter",
        ] {
            assert!(text.contains(family), "{family} missing in\n{text}");
        }
    }

    #[test]
    fn consul_requests_are_counted_by_operation_and_outcome_and_timed_unless_blocking() {
        let metrics = Metrics::new();
        let observer = metrics.consul_observer();
        observer.observe("session renew", Ok(()), Duration::from_millis(2), false);
        observer.observe(
            "session renew",
            Err("transport"),
            Duration::from_secs(1),
            false,
        );
        observer.observe("kv list", Ok(()), Duration::from_secs(300), true);
        let text = metrics.encode();
        let value = |series: &str| sample(&text, series);
        let renew = |outcome: &str| {
            format!(
                r#"consul_elector_consul_requests_total{{operation="session_renew",outcome="{outcome}"}}"#
            )
        };
        assert_eq!(value(&renew("ok")), Some(1.0), "{text}");
        assert_eq!(value(&renew("transport")), Some(1.0), "{text}");
        assert_eq!(
            value(r#"consul_elector_consul_requests_total{operation="kv_list",outcome="ok"}"#),
            Some(1.0)
        );
        assert_eq!(
            value(
                r#"consul_elector_consul_request_duration_seconds_count{operation="session_renew"}"#
            ),
            Some(2.0)
        );
        assert_eq!(
            value(r#"consul_elector_consul_request_duration_seconds_count{operation="kv_list"}"#),
            None,
            "a blocking query's wait is not a latency"
        );
    }

    #[test]
    fn label_values_are_snake_case() {
        let metrics = Metrics::new();
        let observer = metrics.consul_observer();
        observer.observe("session create", Ok(()), Duration::ZERO, false);
        observer.observe("a new operation", Ok(()), Duration::ZERO, false);
        metrics.set_phase_count("elected", 1);
        let text = metrics.encode();
        // Every `name="value"` of every sample, histogram bounds (`le`) apart.
        let values: Vec<&str> = text
            .lines()
            .filter(|line| !line.starts_with('#'))
            .flat_map(|line| {
                let parts: Vec<&str> = line.split('"').collect();
                (1..parts.len())
                    .step_by(2)
                    .filter(|&i| !parts[i - 1].ends_with("le="))
                    .map(|i| parts[i])
                    .collect::<Vec<_>>()
            })
            .collect();
        assert!(values.contains(&"session_create"), "{text}");
        assert!(values.contains(&"other"), "{text}");
        let version = env!("CARGO_PKG_VERSION");
        for value in values.iter().filter(|v| **v != version) {
            assert!(
                value
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '.'),
                "label value {value:?} is not snake_case in\n{text}"
            );
        }
    }

    #[test]
    fn every_known_leader_elected_reason_has_its_own_series() {
        for reason in [
            "NoCandidates",
            "LockHeldElsewhere",
            "ManagedElsewhere",
            "Electing",
            "Moving",
            "HandingOver",
            "LockDelay",
            "RaisingFencingToken",
            "Fenced",
            "ConsulUnavailable",
            "NoHolder",
            "Paused",
        ] {
            let label = without_leader_reason(Some(reason));
            assert!(
                WITHOUT_LEADER_REASONS.contains(&label),
                "{reason} -> {label}"
            );
        }
        assert_eq!(without_leader_reason(Some("Unheard")), "other");
        assert_eq!(without_leader_reason(None), "not_reconciled");
    }

    #[test]
    fn the_build_and_the_process_are_reported() {
        let text = Metrics::new().encode();
        let build = format!(
            r#"consul_elector_build_info{{version="{}"}}"#,
            env!("CARGO_PKG_VERSION")
        );
        assert_eq!(sample(&text, &build), Some(1.0), "{text}");
        if cfg!(target_os = "linux") {
            let rss = sample(&text, "process_resident_memory_bytes");
            assert!(rss.is_some_and(|bytes| bytes > 1e6), "{text}");
            for series in [
                "process_cpu_seconds_total",
                "process_open_fds",
                "process_max_fds",
                "process_start_time_seconds",
                "process_threads",
            ] {
                assert!(sample(&text, series).is_some(), "{series} in\n{text}");
            }
        }
    }

    #[test]
    fn reconciles_are_counted_by_result_and_reason() {
        let metrics = Metrics::new();
        metrics.reconcile_finished(Ok(()), Duration::from_millis(3));
        metrics.reconcile_finished(Err("kube_api"), Duration::from_millis(20));
        metrics.reconcile_finished(Err("kube_api"), Duration::from_secs(9));
        let text = metrics.encode();

        let value = |series| sample(&text, series);
        assert_eq!(
            value(r#"consul_elector_reconcile_total{result="ok"}"#),
            Some(1.0)
        );
        assert_eq!(
            value(r#"consul_elector_reconcile_total{result="error"}"#),
            Some(2.0)
        );
        assert_eq!(
            value(r#"consul_elector_reconcile_errors_total{reason="kube_api"}"#),
            Some(2.0)
        );
        assert_eq!(
            value("consul_elector_reconcile_duration_seconds_count"),
            Some(3.0)
        );
        assert_eq!(
            value(r#"consul_elector_reconcile_duration_seconds_bucket{le="0.005"}"#),
            Some(1.0)
        );
        assert_eq!(
            value(r#"consul_elector_reconcile_duration_seconds_bucket{le="5.0"}"#),
            Some(2.0)
        );
        assert_eq!(
            value(r#"consul_elector_reconcile_duration_seconds_bucket{le="+Inf"}"#),
            Some(3.0)
        );
        assert!(!text.contains(r#"reconcile_duration_seconds_bucket{le="10.0"}"#));
    }

    #[tokio::test(start_paused = true)]
    async fn reconcile_timer_measures_and_records_cancellation() {
        let metrics = Metrics::new();
        let timer = metrics.count_and_measure();
        tokio::time::advance(Duration::from_millis(40)).await;
        timer.finish(Ok(()));
        drop(metrics.count_and_measure());
        let text = metrics.encode();

        let value = |series| sample(&text, series);
        assert_eq!(
            value(r#"consul_elector_reconcile_total{result="ok"}"#),
            Some(1.0)
        );
        assert_eq!(
            value(r#"consul_elector_reconcile_errors_total{reason="cancelled"}"#),
            Some(1.0)
        );
        assert_eq!(
            value(r#"consul_elector_reconcile_duration_seconds_bucket{le="0.025"}"#),
            Some(1.0),
            "only the cancelled reconcile took no time"
        );
        assert_eq!(
            value(r#"consul_elector_reconcile_duration_seconds_bucket{le="0.05"}"#),
            Some(2.0)
        );
    }

    #[test]
    fn leadership_metrics() {
        let metrics = Metrics::new();
        let elected = |transition, after| Elected {
            transition,
            after_move: Some(after),
        };
        metrics.elected(elected(true, Duration::from_millis(80)));
        metrics.elected(elected(true, Duration::from_secs(20)));
        metrics.elected(Elected {
            transition: false,
            after_move: None,
        });
        metrics.fenced(FencingCause::Lost);
        metrics.fenced(FencingCause::Unconfirmed);
        metrics.fenced(FencingCause::Unconfirmed);
        let text = metrics.encode();

        let value = |series| sample(&text, series);
        assert_eq!(value("consul_elector_leader_transitions_total"), Some(2.0));
        assert_eq!(
            value(r#"consul_elector_leader_elected_seconds_bucket{le="0.1"}"#),
            Some(1.0)
        );
        assert_eq!(
            value(r#"consul_elector_leader_elected_seconds_bucket{le="30.0"}"#),
            Some(2.0)
        );
        assert_eq!(
            value(r#"consul_elector_fencing_actions_total{cause="unconfirmed"}"#),
            Some(2.0)
        );
        assert_eq!(
            value(r#"consul_elector_fencing_actions_total{cause="lost"}"#),
            Some(1.0)
        );
    }

    #[test]
    fn gauges_follow_the_latest_value() {
        let metrics = Metrics::new();
        metrics.set_phase_count("Elected", 7);
        metrics.set_phase_count("Pending", 2);
        metrics.set_phase_count("Elected", 6);
        metrics.set_sessions(6);
        let text = metrics.encode();

        let value = |series| sample(&text, series);
        assert_eq!(
            value(r#"consul_elector_elections{phase="Elected"}"#),
            Some(6.0)
        );
        assert_eq!(
            value(r#"consul_elector_elections{phase="Pending"}"#),
            Some(2.0)
        );
        assert_eq!(value("consul_elector_sessions"), Some(6.0));
    }
}
