//! Helpers of the session and lock-watcher tests: an emulator on tokio's clock (so that
//! `#[tokio::test(start_paused = true)]` drives Consul's TTLs and blocking timeouts together
//! with the operator's timers), election keys, and waiting for change reports.

use std::time::Duration;

use consul_elector::election::config::ElectionKey;
use testkit::consul::{ClockMode, Emulator, EmulatorConfig};
use tokio::sync::mpsc::UnboundedReceiver;

use crate::common;

/// How long (in paused, virtual time) a test waits for an expected report before failing.
pub const REPORT_GUARD: Duration = Duration::from_secs(3600);

/// An emulator whose TTLs and blocking timeouts follow tokio's (paused) clock, without jitter.
pub async fn tokio_clock_emulator() -> Emulator {
    common::emulator_with(EmulatorConfig {
        clock: ClockMode::Tokio,
        ..EmulatorConfig::default()
    })
    .await
}

/// The election `shop/<name>`.
pub fn election(name: &str) -> ElectionKey {
    ElectionKey {
        namespace: "shop".to_owned(),
        name: name.to_owned(),
    }
}

/// The next reported election; fails after [`REPORT_GUARD`] of virtual time.
pub async fn next_report(reports: &mut UnboundedReceiver<ElectionKey>) -> ElectionKey {
    tokio::time::timeout(REPORT_GUARD, reports.recv())
        .await
        .expect("no report within the guard")
        .expect("the report channel is open")
}

/// Every report already sent, in order.
pub fn pending_reports(reports: &mut UnboundedReceiver<ElectionKey>) -> Vec<ElectionKey> {
    std::iter::from_fn(|| reports.try_recv().ok()).collect()
}
