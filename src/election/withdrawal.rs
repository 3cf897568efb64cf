//! Rule 7's order for taking an election off its pods and out of Consul: on deletion, when it
//! yields to an older conflicting election, and before it acts with changed labels, key or
//! Consul access. Also rule 2 for an election the operator cannot act on: only its leader
//! labels go.
//!
//! The steps are decided here from what the election left (the pods it labelled, with the
//! value each carries, and whether it may hold a session), and handed out one at a time by a
//! [`Withdrawal`], which takes each outcome back: a pod patch that fails ends it, so the key
//! is never released while a pod still carries the leader label. Consul failing does not stop
//! the labels after it: the withdrawal ends [`Withdrawn::ConsulFailed`] (see
//! `cleanup_deadline`). The controller and the property test's model drive the same machine.

use super::config::{ElectionConfig, ElectionKey, Mode, Owner};
use super::session_names::{Found, adoptable_pod};
use crate::crd::{AppliedSpec, DEFAULT_ROLE_LABEL};

/// A pod the election labelled, as a withdrawal sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabelledPod {
    /// Pod name.
    pub pod: String,
    /// Pod UID (the patch must not touch another incarnation).
    pub uid: String,
    /// The value the pod carries under the election's label key, if any.
    pub value: Option<String>,
}

/// What the election left behind, as the status recorded it (or as the spec says).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Footprint<'a> {
    /// The follower value the election wrote; `None` when it cannot be told (the spec cannot
    /// be read): then every pod it labelled may be a leader.
    pub follower: Option<&'a str>,
    /// The operator may hold a session for the election (it is not in Observe mode, or it is
    /// moving away from the values it held a session with).
    pub managed: bool,
}

/// What the operator acted with for an election, as far as a withdrawal needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acted {
    /// The label key of its labels.
    pub label_key: String,
    /// The follower value (`None`: cannot be told, see [`Footprint::follower`]).
    pub follower: Option<String>,
    /// Its Consul key.
    pub consul_key: String,
    /// See [`Footprint::managed`].
    pub managed: bool,
}

/// What the operator acted with for an election: the record of its status (`applied`) when
/// there is one, else its spec as it reads now (`config`; `None` when the spec is invalid:
/// then the default label key and `default_key`, the follower value unknown). A session the
/// operator holds (`holds_session`) counts whatever the mode says now: one left from Managed
/// mode that Observe mode did not hand over yet is still released and destroyed.
pub fn acted_with(
    applied: Option<&AppliedSpec>,
    config: Option<&ElectionConfig>,
    holds_session: bool,
    default_key: String,
) -> Acted {
    let managed = holds_session || config.is_none_or(|c| c.mode == Mode::Managed);
    match (applied, config) {
        (Some(applied), _) => Acted {
            label_key: applied.label_key.clone(),
            follower: Some(applied.follower.clone()),
            consul_key: applied.key.clone(),
            managed,
        },
        (None, Some(config)) => Acted {
            label_key: config.labels.key.clone(),
            follower: Some(config.labels.follower.clone()),
            consul_key: config.key.clone(),
            managed,
        },
        (None, None) => Acted {
            label_key: DEFAULT_ROLE_LABEL.to_owned(),
            follower: None,
            consul_key: default_key,
            managed,
        },
    }
}

/// One step of a withdrawal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Take the election's label and annotations off the pod.
    Unlabel {
        /// Pod name.
        pod: String,
        /// Pod UID.
        uid: String,
    },
    /// Release the election's key and destroy its session, through the election's own Consul
    /// access. Its failure does not stop the steps after it.
    ReleaseAndDestroy,
}

impl Footprint<'_> {
    /// Whether `pod` may carry the leader label: every labelled pod but those carrying the
    /// follower value.
    pub fn may_lead(&self, pod: &LabelledPod) -> bool {
        self.follower
            .is_none_or(|follower| pod.value.as_deref() != Some(follower))
    }
}

/// The whole withdrawal, in rule 7's order: every pod that may carry the leader label loses
/// it, then (when managed) the key is released and the session destroyed, then the other
/// pods lose the election's labels and annotations.
pub fn withdrawal(footprint: Footprint<'_>, pods: &[LabelledPod]) -> Vec<Step> {
    let (leaders, others): (Vec<&LabelledPod>, Vec<&LabelledPod>) =
        pods.iter().partition(|pod| footprint.may_lead(pod));
    let unlabel = |pod: &&LabelledPod| Step::Unlabel {
        pod: pod.pod.clone(),
        uid: pod.uid.clone(),
    };
    let mut steps: Vec<Step> = leaders.iter().map(unlabel).collect();
    if footprint.managed {
        steps.push(Step::ReleaseAndDestroy);
    }
    steps.extend(others.iter().map(unlabel));
    steps
}

/// How a withdrawal ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Withdrawn {
    /// A pod patch failed: nothing after it was handed out.
    Stopped,
    /// Every label is off, but releasing the key or destroying the session failed.
    ConsulFailed,
    /// Everything is off.
    Done,
}

/// A withdrawal in rule 7's order, one step at a time (see the module docs):
///
/// ```text
/// while let Some(step) = withdrawal.poll() { withdrawal.done(perform(step)); }
/// match withdrawal.outcome() { ... }
/// ```
#[derive(Debug, Clone)]
pub struct Withdrawal {
    steps: std::vec::IntoIter<Step>,
    /// The step handed out last, until its outcome comes.
    out: Option<Step>,
    outcome: Withdrawn,
}

impl Withdrawal {
    /// The whole withdrawal ([`withdrawal`]).
    pub fn whole(footprint: Footprint<'_>, pods: &[LabelledPod]) -> Withdrawal {
        Withdrawal::of(withdrawal(footprint, pods))
    }

    /// Only the leader labels ([`fence`]).
    pub fn fence(footprint: Footprint<'_>, pods: &[LabelledPod]) -> Withdrawal {
        Withdrawal::of(fence(footprint, pods))
    }

    fn of(steps: Vec<Step>) -> Withdrawal {
        Withdrawal {
            steps: steps.into_iter(),
            out: None,
            outcome: Withdrawn::Done,
        }
    }

    /// The next step to perform; `None` once the withdrawal is over (or while a step's
    /// outcome is owed).
    pub fn poll(&mut self) -> Option<Step> {
        if self.out.is_some() || self.outcome == Withdrawn::Stopped {
            return None;
        }
        let step = self.steps.next()?;
        self.out = Some(step.clone());
        Some(step)
    }

    /// The step handed out last took effect (`ok`) or failed.
    pub fn done(&mut self, ok: bool) {
        match self.out.take() {
            Some(Step::Unlabel { .. }) if !ok => self.outcome = Withdrawn::Stopped,
            Some(Step::ReleaseAndDestroy) if !ok => self.outcome = Withdrawn::ConsulFailed,
            _ => {}
        }
    }

    /// How it ended (so far: a withdrawal still under way reports what went wrong yet).
    pub fn outcome(&self) -> Withdrawn {
        self.outcome
    }
}

/// The session [`Step::ReleaseAndDestroy`] releases the key with and then destroys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionToEnd {
    /// The session this process holds for the election: destroyed through the session
    /// manager, which stops renewing it.
    Held(String),
    /// A session only the status names (this process never adopted it): read first, and
    /// ended only when its name says so ([`ends_recorded`]).
    Recorded(String),
}

/// The session a withdrawal ends: the one this process holds (`held`), else the one the
/// status records for the leader (`recorded`); `None`: nothing to release or destroy.
pub fn session_to_end(held: Option<String>, recorded: Option<String>) -> Option<SessionToEnd> {
    held.map(SessionToEnd::Held)
        .or_else(|| recorded.map(SessionToEnd::Recorded))
}

/// Whether a session only the status names, called `name` in Consul, is this install's to
/// end: its name says `owner` created it for `election` (the status vouches for it, whatever
/// its settings). Another cluster's session, or anybody's, is left alone.
pub fn ends_recorded(name: &str, owner: &Owner, election: &ElectionKey) -> bool {
    adoptable_pod(name, owner, election, Found::InStatus).is_some()
}

/// Rule 2 for an election the operator cannot act on, once its lock went unconfirmed for a
/// TTL (`unusable::unusable_label`): only the pods that may carry the leader label lose the
/// election's labels.
pub fn fence(footprint: Footprint<'_>, pods: &[LabelledPod]) -> Vec<Step> {
    pods.iter()
        .filter(|pod| footprint.may_lead(pod))
        .map(|pod| Step::Unlabel {
            pod: pod.pod.clone(),
            uid: pod.uid.clone(),
        })
        .collect()
}
