//! A withdrawal under way in a reconcile: what the election left, its steps handed out as
//! requests, and rule 7's bound on Consul.

use std::time::Duration;

use jiff::Timestamp;

use crate::election::cleanup_deadline::{Deadline, deadline};
use crate::election::request::{Request, Withdrawing as WithdrawalRequests};
use crate::election::withdrawal::{
    self, Acted, Footprint, LabelledPod, Sessions, Withdrawal, Withdrawn,
};

/// What an election left on its pods and in Consul, read for `Observable::Left`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Left {
    /// What the operator acted with ([`withdrawal::acted_with`]).
    pub acted: Acted,
    /// The pods it labelled, under [`Acted::label_key`].
    pub pods: Vec<LabelledPod>,
    /// The sessions a withdrawal may end.
    pub sessions: Sessions,
    /// How long Consul is waited for.
    pub wait: ConsulWait,
}

impl Left {
    /// The requests of the withdrawal of what the election left.
    pub fn requests(&self) -> WithdrawalRequests {
        WithdrawalRequests {
            election: self.sessions.election.name.clone(),
            label_key: self.acted.label_key.clone(),
            pods: self.pods.clone(),
        }
    }

    /// The footprint a withdrawal takes off: the operator's own session counts whatever the
    /// mode with `whatever_mode` (after an edit).
    pub fn footprint(&self, whatever_mode: bool) -> Footprint<'_> {
        Footprint {
            follower: self.acted.follower.as_deref(),
            managed: self.acted.managed || whatever_mode,
        }
    }
}

/// How long a withdrawal waits for Consul ([`deadline`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsulWait {
    /// The election's `elector.dev/skip-consul-cleanup` annotation.
    pub skip: Option<String>,
    /// Its `metadata.deletionTimestamp`, or when the uninstall of its install asked for its
    /// release ([`super::Start::released`]).
    pub deleted_at: Option<Timestamp>,
    /// The wall clock as the election was read.
    pub now: Timestamp,
    /// How long after a deletion Consul is waited for.
    pub bound: Duration,
}

/// The operator gives up on Consul for a withdrawal (`Next::GiveUp`): the session is no
/// longer renewed, and a Warning names what was left there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GiveUp {
    /// Why it gives up.
    pub why: String,
    /// The election's key.
    pub consul_key: String,
    /// The session that may still hold it.
    pub session: Option<String>,
}

/// A withdrawal under way in a reconcile.
#[derive(Debug, Clone)]
pub(super) enum Withdrawing {
    /// `Observable::Left` was handed out, for the whole withdrawal (the operator's own session
    /// counting whatever the mode, with `whatever_mode`) or only the leader labels (`fence`).
    Reading { whatever_mode: bool, fence: bool },
    /// Its steps are handed out.
    Running {
        withdrawal: Box<Withdrawal>,
        requests: Box<WithdrawalRequests>,
        consul_key: String,
        session: Option<String>,
        wait: ConsulWait,
    },
    /// It gave up on Consul (`Next::GiveUp` was handed out).
    GaveUp,
}

/// Where a withdrawal takes the reconcile.
pub(super) enum Then {
    /// Hand out this step's request.
    Perform(Request, withdrawal::Step),
    /// Give up on Consul.
    GiveUp(GiveUp),
    /// The withdrawal is over: the reconcile goes on.
    GoOn,
    /// The reconcile ends: it fails and Consul is retried after this long (`Some`), or it
    /// failed otherwise (a pod patch, or the driver asked twice without an answer).
    End(Option<Duration>),
}

impl Withdrawing {
    pub(super) fn poll(&mut self) -> Then {
        let Withdrawing::Running {
            withdrawal,
            requests,
            consul_key,
            session,
            wait,
        } = self
        else {
            return match self {
                Withdrawing::GaveUp => Then::GoOn,
                // Its footprint is owed: the driver asked twice without reading it.
                _ => Then::End(None),
            };
        };
        if let Some(step) = withdrawal.poll() {
            return Then::Perform(requests.request(step.clone()), step);
        }
        match withdrawal.outcome() {
            Withdrawn::Done => Then::GoOn,
            // A pod patch failed: the driver returns its failure, and the withdrawal is
            // retried from the start.
            Withdrawn::Stopped => Then::End(None),
            Withdrawn::ConsulFailed => {
                let skip = wait.skip.as_deref();
                match deadline(skip, wait.deleted_at, wait.now, wait.bound) {
                    Deadline::RetryIn(after) => Then::End(Some(after)),
                    Deadline::GiveUp(why) => {
                        let give_up = GiveUp {
                            why,
                            consul_key: std::mem::take(consul_key),
                            session: session.take(),
                        };
                        *self = Withdrawing::GaveUp;
                        Then::GiveUp(give_up)
                    }
                }
            }
        }
    }
}
