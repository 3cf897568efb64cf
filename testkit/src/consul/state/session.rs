//! Sessions: create validation, destroy/invalidation effects, renew, TTL timers.

use std::time::Duration;

use super::super::duration::{format_go_duration, nanos_to_duration, parse_go_duration};
use super::super::error::ApiError;
use super::check::CheckStatus;
use super::session_types::{Session, SessionBehavior, SessionSpec};
use super::{KvEntry, State};

/// Consul's `SessionTTLMax`.
const SESSION_TTL_MAX_NS: i64 = 24 * 3600 * 1_000_000_000;

/// Why a session goes away.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cause {
    Destroy,
    Invalidation,
}

impl State {
    fn ttl_deadline(&self, ttl_ns: i64, from: Duration) -> Option<Duration> {
        if ttl_ns <= 0 || !self.leader {
            return None;
        }
        let period = nanos_to_duration(ttl_ns).checked_mul(self.cfg.ttl_multiplier)?;
        from.checked_add(period)
    }

    /// Sets (or clears) the TTL deadline of a session, keeping the deadline index in sync.
    pub(super) fn set_deadline(&mut self, key: &str, deadline: Option<Duration>) {
        let Some(session) = self.sessions.get_mut(key) else {
            return;
        };
        if let Some(old) = session.deadline.take() {
            self.deadlines.remove(&(old, key.to_string()));
        }
        session.deadline = deadline;
        if let Some(new) = deadline {
            self.deadlines.insert((new, key.to_string()));
        }
    }

    /// Validates and stores a new session (Behavior, TTL, then the FSM's node and check
    /// checks). The FSM stage consumes a Raft index even when it fails.
    pub(crate) fn create_session(
        &mut self,
        spec: SessionSpec,
        id: String,
        now: Duration,
    ) -> Result<(), ApiError> {
        let behavior = match spec.behavior.as_str() {
            "" | "release" => SessionBehavior::Release,
            "delete" => SessionBehavior::Delete,
            other => {
                return Err(ApiError::internal(format!(
                    "Invalid Behavior setting '{other}'"
                )));
            }
        };
        let ttl_ns = if spec.ttl.is_empty() {
            0
        } else {
            let ttl = parse_go_duration(&spec.ttl).map_err(|e| {
                ApiError::internal(format!("Session TTL '{}' invalid: {e}", spec.ttl))
            })?;
            let min = super::super::duration::duration_to_nanos(self.cfg.session_ttl_min);
            if ttl != 0 && (ttl < min || ttl > SESSION_TTL_MAX_NS) {
                return Err(ApiError::internal(format!(
                    "Invalid Session TTL '{ttl}', must be between [{}={}]",
                    format_go_duration(min),
                    format_go_duration(SESSION_TTL_MAX_NS)
                )));
            }
            ttl
        };
        let idx = self.next_index();
        let Some(node_checks) = self.nodes.get(&spec.node) else {
            return Err(ApiError::internal("Missing node registration"));
        };
        let session = Session {
            id,
            name: spec.name,
            node: spec.node,
            lock_delay_ns: spec.lock_delay_ns,
            behavior,
            ttl: spec.ttl,
            ttl_ns,
            node_checks: spec.node_checks,
            service_checks: spec.service_checks,
            checks: spec.checks,
            create_index: idx,
            modify_index: idx,
            deadline: None,
        };
        for check in session.check_ids() {
            match node_checks.get(check) {
                None => {
                    return Err(ApiError::internal(format!(
                        "Missing check '{check}' registration"
                    )));
                }
                Some(CheckStatus::Critical) => {
                    return Err(ApiError::internal(format!(
                        "Check '{check}' is in critical state"
                    )));
                }
                Some(_) => {}
            }
        }
        let key = session.id.to_lowercase();
        self.sessions.insert(key.clone(), session);
        let deadline = self.ttl_deadline(ttl_ns, now);
        self.set_deadline(&key, deadline);
        self.index.sessions = idx;
        Ok(())
    }

    /// Looks a session up (case-insensitively, like Consul's ID index).
    pub(crate) fn session(&self, id: &str) -> Option<&Session> {
        self.sessions.get(&id.to_lowercase())
    }

    /// All sessions, ordered by ID.
    pub(crate) fn sessions(&self) -> impl Iterator<Item = &Session> {
        self.sessions.values()
    }

    /// Explicit destroy: `false` (and no Raft write) when the session does not exist.
    pub(crate) fn destroy_session(&mut self, id: &str, now: Duration) -> bool {
        let key = id.to_lowercase();
        if !self.sessions.contains_key(&key) {
            return false;
        }
        let idx = self.next_index();
        self.remove_session(idx, &key, now, Cause::Destroy);
        true
    }

    /// Invalidation as if the TTL expired now (`false` when the session does not exist).
    pub(crate) fn invalidate_session(&mut self, id: &str, now: Duration) -> bool {
        let key = id.to_lowercase();
        if !self.sessions.contains_key(&key) {
            return false;
        }
        let idx = self.next_index();
        self.remove_session(idx, &key, now, Cause::Invalidation);
        true
    }

    /// Renew: resets the TTL timer, writes nothing to Raft. `None` for an unknown session.
    pub(crate) fn renew_session(&mut self, id: &str, now: Duration) -> Option<Session> {
        let key = id.to_lowercase();
        let ttl_ns = self.sessions.get(&key)?.ttl_ns;
        let deadline = self.ttl_deadline(ttl_ns, now);
        self.set_deadline(&key, deadline);
        self.sessions.get(&key).cloned()
    }

    /// Deletes a session at Raft index `idx` with the destroy effects of Consul's
    /// `deleteSessionTxn`: every key it holds is released or deleted at `idx`, and gets a
    /// lock-delay of `min(LockDelay, 60s)` from `at`.
    fn remove_session(&mut self, idx: u64, key: &str, at: Duration, cause: Cause) {
        self.set_deadline(key, None);
        let Some(session) = self.sessions.remove(key) else {
            return;
        };
        tracing::debug!(id = %session.id, ?cause, idx, "session removed");
        self.index.sessions = idx;
        let keys = self.held.remove(key).unwrap_or_default();
        for kv_key in keys {
            match session.behavior {
                SessionBehavior::Release => {
                    if let Some(entry) = self.kvs.get(&kv_key) {
                        let released = KvEntry {
                            session: None,
                            modify_index: idx,
                            ..entry.clone()
                        };
                        self.store_entry(released);
                        self.index.kvs = idx;
                    }
                }
                SessionBehavior::Delete => {
                    self.delete_txn(idx, &kv_key);
                }
            }
            self.apply_lock_delay(&kv_key, session.lock_delay_ns, at);
        }
    }

    /// Invalidates the given sessions at one Raft index (check or node changes).
    pub(super) fn invalidate_many(&mut self, idx: u64, keys: Vec<String>, at: Duration) {
        for key in keys {
            self.remove_session(idx, &key, at, Cause::Invalidation);
        }
    }

    /// The earliest armed TTL deadline.
    pub(crate) fn next_deadline(&self) -> Option<Duration> {
        if !self.leader {
            return None;
        }
        self.deadlines.first().map(|(d, _)| *d)
    }

    /// Fires every TTL timer whose deadline is `<= now`, in deadline order (ties by ID),
    /// each at its own Raft index and stamped at its own deadline instant.
    /// Returns how many sessions expired.
    pub(crate) fn process_expiries(&mut self, now: Duration) -> usize {
        let mut fired = 0;
        while self.leader {
            let Some((deadline, key)) = self.deadlines.first().cloned() else {
                break;
            };
            if deadline > now {
                break;
            }
            let idx = self.next_index();
            self.remove_session(idx, &key, deadline, Cause::Invalidation);
            fired += 1;
        }
        fired
    }

    /// Re-arms every TTL timer at `now + multiplier × TTL` (a leader election).
    pub(crate) fn rearm_all(&mut self, now: Duration) {
        let sessions: Vec<(String, i64)> = self
            .sessions
            .iter()
            .map(|(k, s)| (k.clone(), s.ttl_ns))
            .collect();
        for (key, ttl_ns) in sessions {
            let deadline = self.ttl_deadline(ttl_ns, now);
            self.set_deadline(&key, deadline);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{create, secs, state};
    use super::*;

    #[test]
    fn fixup_rules() {
        let serf = || Some(vec!["serfHealth".to_string()]);
        // Defaults: Checks dropped, NodeChecks decides.
        let mut s = SessionSpec::defaults("n");
        s.fixup_checks();
        assert_eq!((s.node_checks.clone(), s.checks.clone()), (serf(), None));
        // Rule 1: Checks [] empties NodeChecks even if given.
        let mut s = SessionSpec::defaults("n");
        s.checks = Some(vec![]);
        s.node_checks = Some(vec!["a".into()]);
        s.fixup_checks();
        assert_eq!(
            (s.node_checks.clone(), s.checks.clone()),
            (Some(vec![]), Some(vec![]))
        );
        // Checks null behaves like [].
        let mut s = SessionSpec::defaults("n");
        s.checks = None;
        s.fixup_checks();
        assert_eq!(s.node_checks, Some(vec![]));
        // Rule 3: NodeChecks [] drops Checks.
        let mut s = SessionSpec::defaults("n");
        s.checks = Some(vec!["a".into()]);
        s.node_checks = Some(vec![]);
        s.fixup_checks();
        assert_eq!(
            (s.node_checks.clone(), s.checks.clone()),
            (Some(vec![]), None)
        );
        // Rule 4: both kept.
        let mut s = SessionSpec::defaults("n");
        s.checks = Some(vec!["a".into()]);
        s.fixup_checks();
        assert_eq!(
            (s.node_checks.clone(), s.checks.clone()),
            (serf(), Some(vec!["a".to_string()]))
        );
    }

    #[test]
    fn create_validation_order_and_indexes() {
        let mut st = state();
        let start = st.indexes().raft;
        let mut spec = SessionSpec::defaults("node1");
        spec.behavior = "Release".into();
        spec.ttl = "nope".into();
        let err = st
            .create_session(spec.clone(), "a".into(), secs(0))
            .unwrap_err();
        assert_eq!(err.body, "Invalid Behavior setting 'Release'");
        spec.behavior = "delete".into();
        let err = st
            .create_session(spec.clone(), "a".into(), secs(0))
            .unwrap_err();
        assert_eq!(
            err.body,
            "Session TTL 'nope' invalid: time: invalid duration \"nope\""
        );
        spec.ttl = "9s".into();
        let err = st
            .create_session(spec.clone(), "a".into(), secs(0))
            .unwrap_err();
        assert_eq!(
            err.body,
            "Invalid Session TTL '9000000000', must be between [10s=24h0m0s]"
        );
        // Validation failures before Raft consume no index.
        assert_eq!(st.indexes().raft, start);
        spec.node = "ghost".into();
        spec.ttl = "0s".into();
        let err = st
            .create_session(spec.clone(), "a".into(), secs(0))
            .unwrap_err();
        assert_eq!(err.body, "Missing node registration");
        // FSM failures do.
        assert_eq!(st.indexes().raft, start + 1);
        assert_eq!(st.indexes().sessions, 0);
        spec.node = "node1".into();
        spec.node_checks = Some(vec!["nope".into()]);
        let err = st
            .create_session(spec.clone(), "a".into(), secs(0))
            .unwrap_err();
        assert_eq!(err.body, "Missing check 'nope' registration");
        spec.node_checks = Some(vec![]);
        st.create_session(spec, "a".into(), secs(0))
            .expect("create");
        let s = st.session("A").expect("case-insensitive lookup");
        assert_eq!(s.create_index, st.indexes().raft);
        assert_eq!(st.indexes().sessions, s.create_index);
        assert_eq!(s.deadline, None);
    }

    #[test]
    fn ttl_deadline_renew_and_expiry_order() {
        let mut st = state();
        create(&mut st, "b", |s| s.ttl = "10s".into(), secs(0));
        create(&mut st, "a", |s| s.ttl = "10s".into(), secs(0));
        create(&mut st, "c", |s| s.ttl = "15s".into(), secs(1));
        assert_eq!(st.next_deadline(), Some(secs(20)));
        // Renew b at 5s: deadline 25s.
        let before = st.indexes();
        let renewed = st.renew_session("b", secs(5)).expect("renew");
        assert_eq!(renewed.deadline, Some(secs(25)));
        assert_eq!(st.indexes(), before, "renew writes nothing");
        assert_eq!(st.process_expiries(secs(20) - Duration::from_nanos(1)), 0);
        assert_eq!(st.process_expiries(secs(30)), 2);
        assert!(st.session("a").is_none() && st.session("b").is_none());
        assert!(st.session("c").is_some());
        // a expired first (deadline 20s), then b (25s): b has the higher index.
        assert_eq!(st.indexes().sessions, st.indexes().raft);
    }

    #[test]
    fn invalidation_releases_and_sets_lock_delay_at_deadline() {
        let mut st = state();
        create(&mut st, "s1", |s| s.ttl = "10s".into(), secs(0));
        assert_eq!(
            st.kv_acquire("k", "s1", b"v".to_vec(), 0, secs(1)),
            Ok(true)
        );
        let before = st.kv_get("k").1.cloned().expect("k");
        st.process_expiries(secs(25));
        let after = st.kv_get("k").1.cloned().expect("k");
        assert_eq!(after.session, None);
        assert_eq!(after.lock_index, before.lock_index);
        assert_eq!(after.value, b"v".to_vec());
        assert_eq!(after.create_index, before.create_index);
        assert_eq!(after.modify_index, st.indexes().sessions);
        // Lock-delay started at the deadline (20s), not at processing time (25s).
        assert_eq!(st.lock_delay_until("k", secs(25)), Some(secs(35)));
    }

    #[test]
    fn delete_behavior_and_lock_delay_cap() {
        let mut st = state();
        create(
            &mut st,
            "s1",
            |s| {
                s.behavior = "delete".into();
                s.lock_delay_ns = 120_000_000_000;
            },
            secs(0),
        );
        assert_eq!(st.kv_acquire("k", "s1", vec![], 0, secs(0)), Ok(true));
        assert!(st.destroy_session("s1", secs(1)));
        let (idx, entry) = st.kv_get("k");
        assert!(entry.is_none());
        assert_eq!(idx, st.indexes().raft);
        assert_eq!(st.indexes().tombstones, st.indexes().raft);
        assert_eq!(st.lock_delay_until("k", secs(1)), Some(secs(61)));
        assert!(!st.destroy_session("s1", secs(1)));
    }

    #[test]
    fn leaderless_means_no_expiry_and_election_rearms() {
        let mut st = state();
        create(&mut st, "s1", |s| s.ttl = "10s".into(), secs(0));
        st.set_leader(false, secs(5));
        assert_eq!(st.next_deadline(), None);
        assert_eq!(st.process_expiries(secs(100)), 0);
        st.set_leader(true, secs(100));
        assert_eq!(st.session("s1").and_then(|s| s.deadline), Some(secs(120)));
        st.rearm_all(secs(110));
        assert_eq!(st.next_deadline(), Some(secs(130)));
    }
}
