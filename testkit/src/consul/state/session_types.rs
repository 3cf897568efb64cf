//! The session types: a create request, a stored session, its public view, its behavior.

use std::fmt;
use std::time::Duration;

use super::super::duration::nanos_to_duration;
use super::check::SERF_HEALTH;

/// What happens to a session's keys when it is invalidated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionBehavior {
    /// Keys are unlocked (`Session` cleared); value, flags and LockIndex are kept.
    Release,
    /// Keys are deleted.
    Delete,
}

impl SessionBehavior {
    /// Consul's spelling: `"release"` or `"delete"`.
    pub fn as_str(self) -> &'static str {
        match self {
            SessionBehavior::Release => "release",
            SessionBehavior::Delete => "delete",
        }
    }
}

impl fmt::Display for SessionBehavior {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<&str> for SessionBehavior {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

/// A service check reference in a session (`{"ID": …, "Namespace": …}`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ServiceCheck {
    pub(crate) id: String,
    pub(crate) namespace: String,
}

/// A decoded session-create request, after the HTTP defaults and the check fixup rules.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SessionSpec {
    pub(crate) name: String,
    pub(crate) node: String,
    pub(crate) lock_delay_ns: i64,
    /// Raw behavior string, validated by
    /// [`State::create_session`](super::State::create_session).
    pub(crate) behavior: String,
    pub(crate) ttl: String,
    pub(crate) node_checks: Option<Vec<String>>,
    pub(crate) service_checks: Option<Vec<ServiceCheck>>,
    pub(crate) checks: Option<Vec<String>>,
}

impl SessionSpec {
    /// The defaults the HTTP layer applies before reading the body.
    pub(crate) fn defaults(node: &str) -> Self {
        SessionSpec {
            name: String::new(),
            node: node.to_string(),
            lock_delay_ns: 15_000_000_000,
            behavior: "release".to_string(),
            ttl: String::new(),
            node_checks: Some(vec![SERF_HEALTH.to_string()]),
            service_checks: None,
            checks: Some(vec![SERF_HEALTH.to_string()]),
        }
    }

    /// Consul's `fixupEmptySessionChecks`, run after the body overwrote the defaults.
    pub(crate) fn fixup_checks(&mut self) {
        let checks_len = self.checks.as_ref().map_or(0, Vec::len);
        if checks_len == 0 {
            // `"Checks": []` (or null) empties NodeChecks: no node or legacy checks at all.
            self.node_checks = Some(Vec::new());
            return;
        }
        if self.checks.as_deref() == Some(&[SERF_HEALTH.to_string()][..]) {
            // The default value: NodeChecks decides.
            self.checks = None;
            return;
        }
        if self.node_checks.as_ref().is_none_or(Vec::is_empty) {
            self.checks = None;
        }
    }
}

/// A stored session.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Session {
    pub(crate) id: String,
    pub(crate) name: String,
    pub(crate) node: String,
    pub(crate) lock_delay_ns: i64,
    pub(crate) behavior: SessionBehavior,
    pub(crate) ttl: String,
    pub(crate) ttl_ns: i64,
    pub(crate) node_checks: Option<Vec<String>>,
    pub(crate) service_checks: Option<Vec<ServiceCheck>>,
    pub(crate) checks: Option<Vec<String>>,
    pub(crate) create_index: u64,
    pub(crate) modify_index: u64,
    /// When the TTL timer fires (`None`: no TTL, or no leader).
    pub(crate) deadline: Option<Duration>,
}

impl Session {
    /// Every check ID the session is bound to (NodeChecks, then Checks, then ServiceChecks).
    pub(crate) fn check_ids(&self) -> impl Iterator<Item = &str> {
        self.node_checks
            .iter()
            .flatten()
            .chain(self.checks.iter().flatten())
            .map(String::as_str)
            .chain(self.service_checks.iter().flatten().map(|c| c.id.as_str()))
    }

    /// The public view.
    pub(crate) fn info(&self) -> SessionInfo {
        SessionInfo {
            id: self.id.clone(),
            name: self.name.clone(),
            node: self.node.clone(),
            lock_delay: nanos_to_duration(self.lock_delay_ns),
            behavior: self.behavior,
            ttl: self.ttl.clone(),
            deadline: self.deadline,
            checks: self.check_ids().map(str::to_string).collect(),
            create_index: self.create_index,
            modify_index: self.modify_index,
        }
    }
}

/// A session as seen through [`Emulator::session`](crate::consul::Emulator::session).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionInfo {
    /// Session ID (lowercase UUID).
    pub id: String,
    /// Name given at create.
    pub name: String,
    /// Node the session belongs to.
    pub node: String,
    /// Stored lock-delay (not yet capped to 60 s; negative values read as zero).
    pub lock_delay: Duration,
    /// Invalidation behavior.
    pub behavior: SessionBehavior,
    /// TTL string exactly as given (`""` = none).
    pub ttl: String,
    /// When the TTL timer fires, as time since emulator start (`None`: no TTL or no leader).
    pub deadline: Option<Duration>,
    /// Every check ID the session is bound to.
    pub checks: Vec<String>,
    /// Raft index of the create.
    pub create_index: u64,
    /// Raft index of the last change (equals `create_index`: sessions are never rewritten).
    pub modify_index: u64,
}
