//! The pure state machine: Raft/table indexes, sessions, KV entries, tombstones,
//! lock-delays and the catalog. No I/O and no clock: every time-dependent operation takes
//! `now` (time since the emulator started) as an argument.

mod catalog;
mod check;
mod kv;
mod session;
mod session_types;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

pub use check::CheckStatus;
pub(crate) use session_types::{ServiceCheck, Session, SessionSpec};
pub use session_types::{SessionBehavior, SessionInfo};

use check::SERF_HEALTH;

/// A KV entry as stored (Consul's `DirEntry`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KvEntry {
    /// Number of times the key was acquired while unlocked (reset to 0 by plain/CAS PUTs).
    pub lock_index: u64,
    /// The key.
    pub key: String,
    /// Opaque client flags.
    pub flags: u64,
    /// The value bytes (empty is rendered as `"Value": null`).
    pub value: Vec<u8>,
    /// Holding session, if any (stored as given in `?acquire=`).
    pub session: Option<String>,
    /// Raft index that created the key.
    pub create_index: u64,
    /// Raft index of the last change.
    pub modify_index: u64,
}

/// Consul's `MaxLockDelay`: lock-delays are capped to 60 s when applied.
const MAX_LOCK_DELAY: Duration = Duration::from_secs(60);

/// Per-table and global Raft indexes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Indexes {
    /// Global Raft index: bumped by every write that reaches Raft.
    pub(crate) raft: u64,
    /// Max index of the `kvs` table.
    pub(crate) kvs: u64,
    /// Max index of the `tombstones` table.
    pub(crate) tombstones: u64,
    /// Max index of the `sessions` table.
    pub(crate) sessions: u64,
}

/// Settings the state machine needs from the emulator configuration.
#[derive(Debug, Clone)]
pub(crate) struct StateConfig {
    pub(crate) ttl_multiplier: u32,
    pub(crate) session_ttl_min: Duration,
    pub(crate) node_name: String,
}

/// The whole emulated Consul state.
#[derive(Debug)]
pub(crate) struct State {
    cfg: StateConfig,
    index: Indexes,
    kvs: BTreeMap<String, KvEntry>,
    /// Key (or recursive-delete prefix) → index of its deletion. Never reaped.
    tombstones: BTreeMap<String, u64>,
    /// Sessions by lowercased ID (Consul indexes the table case-insensitively).
    sessions: BTreeMap<String, Session>,
    /// (deadline, session key) for every armed TTL timer.
    deadlines: BTreeSet<(Duration, String)>,
    /// Lowercased session ID → keys whose entry names that session.
    held: HashMap<String, BTreeSet<String>>,
    /// Key → lock-delay expiry instant.
    lock_delays: HashMap<String, Duration>,
    /// Node → check ID → status.
    nodes: BTreeMap<String, BTreeMap<String, CheckStatus>>,
    leader: bool,
    /// Keys whose entry changed since the last [`State::take_changed_keys`].
    changed_keys: Vec<String>,
}

impl State {
    /// A fresh state: the agent's node with a passing `serfHealth`, registered at Raft
    /// index 1 as a real agent's first catalog write.
    pub(crate) fn new(cfg: StateConfig) -> Self {
        let mut state = State {
            cfg,
            index: Indexes::default(),
            kvs: BTreeMap::new(),
            tombstones: BTreeMap::new(),
            sessions: BTreeMap::new(),
            deadlines: BTreeSet::new(),
            held: HashMap::new(),
            lock_delays: HashMap::new(),
            nodes: BTreeMap::new(),
            leader: true,
            changed_keys: Vec::new(),
        };
        let node = state.cfg.node_name.clone();
        state.set_check(&node, SERF_HEALTH, CheckStatus::Passing, Duration::ZERO);
        state
    }

    /// Allocates the next Raft index.
    fn next_index(&mut self) -> u64 {
        self.index.raft += 1;
        self.index.raft
    }

    /// Current indexes (compared before/after a write to find what changed).
    pub(crate) fn indexes(&self) -> Indexes {
        self.index
    }

    /// The keys whose entry was written or deleted since the last call.
    pub(crate) fn take_changed_keys(&mut self) -> Vec<String> {
        std::mem::take(&mut self.changed_keys)
    }

    /// Whether a Raft leader is present.
    pub(crate) fn has_leader(&self) -> bool {
        self.leader
    }

    /// Sets leader presence. Losing the leader drops every TTL timer (no session can expire
    /// without a leader); gaining one re-arms them all, like `establishLeadership`.
    pub(crate) fn set_leader(&mut self, present: bool, now: Duration) {
        if present == self.leader {
            return;
        }
        self.leader = present;
        if present {
            self.rearm_all(now);
        } else {
            let ids: Vec<String> = self.sessions.keys().cloned().collect();
            for id in ids {
                self.set_deadline(&id, None);
            }
        }
    }

    /// Applies a lock-delay of `min(delay, 60s)` from `at` to `key`, when positive.
    fn apply_lock_delay(&mut self, key: &str, delay_ns: i64, at: Duration) {
        let delay = super::duration::nanos_to_duration(delay_ns).min(MAX_LOCK_DELAY);
        if !delay.is_zero() {
            self.lock_delays.insert(key.to_string(), at + delay);
        }
    }

    /// The active lock-delay expiry of `key`, if it is still in the future. Expired
    /// entries are ignored (and dropped when the key is next acquired).
    pub(crate) fn lock_delay_until(&self, key: &str, now: Duration) -> Option<Duration> {
        self.lock_delays
            .get(key)
            .copied()
            .filter(|until| *until > now)
    }
}

#[cfg(test)]
pub(crate) mod test_support {
    use super::*;

    pub(crate) fn state() -> State {
        State::new(StateConfig {
            ttl_multiplier: 2,
            session_ttl_min: Duration::from_secs(10),
            node_name: "node1".to_string(),
        })
    }

    pub(crate) fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    /// Creates a session from the defaults changed by `tweak` (then the check fixup rules
    /// run, like in the HTTP layer), returning its ID.
    pub(crate) fn create(
        state: &mut State,
        id: &str,
        tweak: impl FnOnce(&mut SessionSpec),
        now: Duration,
    ) -> String {
        let mut spec = SessionSpec::defaults("node1");
        tweak(&mut spec);
        spec.fixup_checks();
        state
            .create_session(spec, id.to_string(), now)
            .expect("create session");
        id.to_string()
    }
}
