//! [`Inner`]: the emulator's internals that the server, the handlers and blocking queries share.

use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::{Notify, watch};

use super::clock::Clock;
use super::config::EmulatorConfig;
use super::faults::{Fault, FaultId, FaultSet};
use super::mutex::lock;
use super::notify::Notifier;
use super::parked::Registry;
use super::state::{CheckStatus, Indexes, State};
use super::stats::StatsCollector;

/// Shared emulator internals.
#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) config: EmulatorConfig,
    pub(crate) clock: Clock,
    pub(crate) state: Mutex<State>,
    /// Wakes blocking queries (bumped under the state lock) when what they watch changes.
    pub(crate) notifier: Notifier,
    pub(crate) parked: Registry,
    pub(crate) faults: Mutex<FaultSet>,
    pub(crate) stats: StatsCollector,
    /// Wakes the tokio-clock reaper when deadlines may have moved.
    pub(crate) reaper_wake: Notify,
    pub(crate) shutdown: watch::Sender<bool>,
    pub(crate) addr: SocketAddr,
}

impl Inner {
    /// Runs `f` on the state at the current time, after firing due TTL timers, and wakes
    /// blocking queries if anything they watch changed.
    pub(crate) fn with_state<R>(&self, f: impl FnOnce(&mut State, Duration) -> R) -> R {
        let mut st = lock(&self.state);
        let now = self.clock.now();
        let before = st.indexes();
        let next_deadline = st.next_deadline();
        st.process_expiries(now);
        let result = f(&mut st, now);
        self.publish(&mut st, before);
        let deadline_moved = st.next_deadline() != next_deadline;
        drop(st);
        if deadline_moved && !self.clock.is_manual() {
            self.reaper_wake.notify_one();
        }
        result
    }

    /// Wakes the watchers of every table and key that changed since `before`.
    /// Called with the state lock held, so a query that subscribed before evaluating
    /// cannot miss a change.
    fn publish(&self, st: &mut State, before: Indexes) {
        let after = st.indexes();
        if (after.kvs, after.tombstones) != (before.kvs, before.tombstones) {
            self.notifier.kv_changed();
        }
        if after.sessions != before.sessions {
            self.notifier.sessions_changed();
        }
        self.notifier.keys_changed(&st.take_changed_keys());
    }

    /// Moves the manual clock, firing TTL timers and blocking-query timeouts in time order,
    /// and returns once every parked query has seen the result.
    pub(crate) async fn advance(&self, by: Duration) {
        let target = self.clock.now().saturating_add(by);
        loop {
            let now = self.clock.now();
            let next_expiry = lock(&self.state).next_deadline();
            let next_park = self.parked.next_deadline_after(now);
            let step = [next_expiry, next_park]
                .into_iter()
                .flatten()
                .fold(target, Duration::min)
                .max(now);
            {
                let mut st = lock(&self.state);
                let before = st.indexes();
                self.clock.set_manual(step);
                st.process_expiries(step);
                self.publish(&mut st, before);
            }
            self.parked
                .wait_settled(step, |topic| self.notifier.version(topic))
                .await;
            if step >= target {
                return;
            }
        }
    }

    pub(crate) fn set_leader(&self, present: bool) {
        self.with_state(|st, now| st.set_leader(present, now));
    }

    pub(crate) fn simulate_leader_election(&self) {
        self.with_state(|st, now| {
            if st.has_leader() {
                st.rearm_all(now);
            }
        });
    }

    pub(crate) fn invalidate_session(&self, id: &str) -> bool {
        self.with_state(|st, now| st.invalidate_session(id, now))
    }

    pub(crate) fn register_node(&self, node: &str) {
        self.with_state(|st, _| st.register_node(node));
    }

    pub(crate) fn deregister_node(&self, node: &str) {
        self.with_state(|st, now| st.deregister_node(node, now));
    }

    pub(crate) fn set_check(&self, node: &str, check: &str, status: CheckStatus) {
        self.with_state(|st, now| st.set_check(node, check, status, now));
    }

    pub(crate) fn deregister_check(&self, node: &str, check: &str) {
        self.with_state(|st, now| st.deregister_check(node, check, now));
    }

    pub(crate) fn add_fault(&self, fault: Fault) -> FaultId {
        lock(&self.faults).add(fault)
    }

    pub(crate) fn remove_fault(&self, id: FaultId) {
        lock(&self.faults).remove(id);
    }

    pub(crate) fn clear_faults(&self) {
        lock(&self.faults).clear();
    }

    pub(crate) fn index(&self) -> u64 {
        self.with_state(|st, _| st.indexes().raft)
    }
}
