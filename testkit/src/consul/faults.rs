//! Fault injection: latency, canned answers, dropped connections and "no leader" errors
//! on chosen endpoints, for a number of requests or until removed.

use std::time::Duration;

use super::routes::Route;

/// Which requests a fault applies to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// Every `/v1/...` request (the `/_emu/` admin surface is never faulted).
    Any,
    /// `PUT /v1/session/create`.
    SessionCreate,
    /// `/v1/session/destroy/<id>`.
    SessionDestroy,
    /// `/v1/session/renew/<id>`.
    SessionRenew,
    /// `/v1/session/info/<id>`.
    SessionInfo,
    /// `/v1/session/list`.
    SessionList,
    /// `/v1/session/node/<node>`.
    SessionNode,
    /// Every `/v1/kv/...` request.
    Kv,
    /// `/v1/kv/<key>` requests whose key starts with the prefix.
    KvPrefix(String),
    /// `/v1/status/leader`.
    StatusLeader,
}

/// What a matching request gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FaultAction {
    /// A real tokio sleep before the request is handled (composes with other faults).
    Latency(Duration),
    /// A canned answer with a plain-text body and an optional `Retry-After` (seconds).
    Respond {
        /// HTTP status code.
        status: u16,
        /// Plain-text body.
        body: String,
        /// `Retry-After` header value in seconds.
        retry_after: Option<u64>,
    },
    /// Close the TCP connection without any response.
    DropConnection,
    /// 500 `No cluster leader`.
    NoLeaderError,
    /// An error whose body repeats the ACL token the request carried, as a misconfigured
    /// proxy might: for proving that a client never shows the token it sent.
    EchoToken {
        /// HTTP status code.
        status: u16,
    },
}

/// A fault rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fault {
    /// Requests it applies to.
    pub endpoint: Endpoint,
    /// Only this method (`None`: any method).
    pub method: Option<http::Method>,
    /// What happens.
    pub action: FaultAction,
    /// How many matching requests it affects (`None`: until removed).
    pub times: Option<u32>,
}

impl Fault {
    /// A fault on every matching request until removed.
    pub fn always(endpoint: Endpoint, action: FaultAction) -> Self {
        Fault {
            endpoint,
            method: None,
            action,
            times: None,
        }
    }

    /// A fault on the next `n` matching requests.
    pub fn times(endpoint: Endpoint, action: FaultAction, n: u32) -> Self {
        Fault {
            endpoint,
            method: None,
            action,
            times: Some(n),
        }
    }

    fn matches(&self, route: &Route, method: &http::Method) -> bool {
        if self.method.as_ref().is_some_and(|m| m != method) {
            return false;
        }
        match (&self.endpoint, route) {
            (_, Route::Admin(_)) => false,
            (Endpoint::Any, _) => true,
            (Endpoint::SessionCreate, Route::SessionCreate) => true,
            (Endpoint::SessionDestroy, Route::SessionDestroy(_)) => true,
            (Endpoint::SessionRenew, Route::SessionRenew(_)) => true,
            (Endpoint::SessionInfo, Route::SessionInfo(_)) => true,
            (Endpoint::SessionList, Route::SessionList) => true,
            (Endpoint::SessionNode, Route::SessionNode(_)) => true,
            (Endpoint::Kv, Route::Kv(_)) => true,
            (Endpoint::KvPrefix(prefix), Route::Kv(key)) => key.starts_with(prefix.as_str()),
            (Endpoint::StatusLeader, Route::StatusLeader) => true,
            _ => false,
        }
    }
}

/// Identifies an added fault, for [`Emulator::remove_fault`](super::Emulator::remove_fault).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FaultId(pub u64);

/// The active faults, in insertion order.
#[derive(Debug, Default)]
pub(crate) struct FaultSet {
    next: u64,
    faults: Vec<(FaultId, Fault)>,
}

impl FaultSet {
    pub(crate) fn add(&mut self, fault: Fault) -> FaultId {
        self.next += 1;
        let id = FaultId(self.next);
        if fault.times != Some(0) {
            self.faults.push((id, fault));
        }
        id
    }

    pub(crate) fn remove(&mut self, id: FaultId) {
        self.faults.retain(|(fid, _)| *fid != id);
    }

    pub(crate) fn clear(&mut self) {
        self.faults.clear();
    }

    /// The actions for one request, consuming one use of every fault that applies:
    /// all matching latencies in order, then the first matching non-latency action.
    pub(crate) fn take_matching(
        &mut self,
        route: &Route,
        method: &http::Method,
    ) -> Vec<FaultAction> {
        let mut actions = Vec::new();
        for (_, fault) in &mut self.faults {
            if !fault.matches(route, method) {
                continue;
            }
            if let Some(n) = &mut fault.times {
                *n = n.saturating_sub(1);
            }
            let terminal = !matches!(fault.action, FaultAction::Latency(_));
            actions.push(fault.action.clone());
            if terminal {
                break;
            }
        }
        self.faults.retain(|(_, f)| f.times != Some(0));
        actions
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matching_counts_and_ordering() {
        let mut set = FaultSet::default();
        let lat = set.add(Fault::always(
            Endpoint::Any,
            FaultAction::Latency(Duration::from_millis(5)),
        ));
        set.add(Fault::times(
            Endpoint::KvPrefix("svc/".into()),
            FaultAction::DropConnection,
            1,
        ));
        set.add(Fault {
            endpoint: Endpoint::SessionRenew,
            method: Some(http::Method::PUT),
            action: FaultAction::NoLeaderError,
            times: None,
        });
        let kv = Route::Kv("svc/leader".into());
        assert_eq!(
            set.take_matching(&kv, &http::Method::GET),
            vec![
                FaultAction::Latency(Duration::from_millis(5)),
                FaultAction::DropConnection
            ]
        );
        // The one-shot drop is gone.
        assert_eq!(set.take_matching(&kv, &http::Method::GET).len(), 1);
        let renew = Route::SessionRenew("x".into());
        assert_eq!(set.take_matching(&renew, &http::Method::GET).len(), 1);
        assert_eq!(set.take_matching(&renew, &http::Method::PUT).len(), 2);
        set.remove(lat);
        assert!(
            set.take_matching(&Route::Admin(String::new()), &http::Method::PUT)
                .is_empty()
        );
        set.clear();
        assert!(set.take_matching(&renew, &http::Method::PUT).is_empty());
    }
}
