//! The catalog: nodes and their checks, and the session invalidations they cause.

use std::time::Duration;

use super::State;
use super::check::{CheckStatus, SERF_HEALTH};
use super::session_types::Session;

impl State {
    /// Lowercased keys of the sessions on `node` selected by `pred`.
    fn sessions_on(&self, node: &str, pred: impl Fn(&Session) -> bool) -> Vec<String> {
        self.sessions
            .iter()
            .filter(|(_, s)| s.node == node && pred(s))
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// Registers a node with a passing `serfHealth`, like an agent joining the cluster
    /// (a Raft write; an existing node keeps its checks).
    pub(crate) fn register_node(&mut self, node: &str) {
        self.next_index();
        self.nodes.entry(node.to_string()).or_insert_with(|| {
            [(SERF_HEALTH.to_string(), CheckStatus::Passing)]
                .into_iter()
                .collect()
        });
    }

    /// Deregisters a node and its checks; every session on it is invalidated at that index.
    pub(crate) fn deregister_node(&mut self, node: &str, now: Duration) {
        let idx = self.next_index();
        self.nodes.remove(node);
        let doomed = self.sessions_on(node, |_| true);
        self.invalidate_many(idx, doomed, now);
    }

    /// Registers or updates a check (registering the node if needed). A critical status
    /// invalidates the sessions bound to it in the same index.
    pub(crate) fn set_check(
        &mut self,
        node: &str,
        check: &str,
        status: CheckStatus,
        now: Duration,
    ) {
        let idx = self.next_index();
        self.nodes
            .entry(node.to_string())
            .or_default()
            .insert(check.to_string(), status);
        if status == CheckStatus::Critical {
            let doomed = self.sessions_on(node, |s| s.check_ids().any(|c| c == check));
            self.invalidate_many(idx, doomed, now);
        }
    }

    /// Deregisters a check; sessions bound to it are invalidated at that index.
    pub(crate) fn deregister_check(&mut self, node: &str, check: &str, now: Duration) {
        let idx = self.next_index();
        if let Some(checks) = self.nodes.get_mut(node) {
            checks.remove(check);
        }
        let doomed = self.sessions_on(node, |s| s.check_ids().any(|c| c == check));
        self.invalidate_many(idx, doomed, now);
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{create, secs, state};
    use super::*;

    #[test]
    fn critical_check_invalidates_bound_sessions_in_one_index() {
        let mut st = state();
        st.set_check("node1", "svc", CheckStatus::Passing, secs(0));
        create(&mut st, "s1", |_| {}, secs(0));
        create(
            &mut st,
            "s2",
            |s| s.checks = Some(vec!["svc".into()]),
            secs(0),
        );
        create(&mut st, "s3", |s| s.node_checks = Some(vec![]), secs(0));
        assert_eq!(st.session("s2").map(|s| s.check_ids().count()), Some(2));
        assert_eq!(st.kv_acquire("k1", "s1", vec![], 0, secs(0)), Ok(true));
        assert_eq!(st.kv_acquire("k2", "s1", vec![], 0, secs(0)), Ok(true));
        st.set_check("node1", SERF_HEALTH, CheckStatus::Critical, secs(3));
        let idx = st.indexes().raft;
        assert!(st.session("s1").is_none() && st.session("s2").is_none());
        assert!(st.session("s3").is_some(), "check-less session survives");
        for k in ["k1", "k2"] {
            let e = st.kv_get(k).1.cloned().expect("entry");
            assert_eq!((e.session, e.modify_index), (None, idx));
            assert_eq!(st.lock_delay_until(k, secs(3)), Some(secs(18)));
        }
        // New sessions are refused while critical.
        let mut spec = super::super::SessionSpec::defaults("node1");
        spec.fixup_checks();
        let err = st.create_session(spec, "s4".into(), secs(4)).unwrap_err();
        assert_eq!(err.body, "Check 'serfHealth' is in critical state");
    }

    #[test]
    fn deregistrations_invalidate() {
        let mut st = state();
        st.set_check("node1", "svc", CheckStatus::Warning, secs(0));
        create(
            &mut st,
            "s1",
            |s| s.checks = Some(vec!["svc".into()]),
            secs(0),
        );
        create(&mut st, "s2", |_| {}, secs(0));
        st.deregister_check("node1", "svc", secs(1));
        assert!(st.session("s1").is_none());
        assert!(st.session("s2").is_some());
        st.register_node("other");
        create(&mut st, "s3", |s| s.node = "other".into(), secs(0));
        assert_eq!(
            st.session("s3").map(|s| s.check_ids().collect::<Vec<_>>()),
            Some(vec![SERF_HEALTH])
        );
        st.deregister_node("node1", secs(2));
        assert!(st.session("s2").is_none());
        assert!(st.session("s3").is_some());
    }
}
