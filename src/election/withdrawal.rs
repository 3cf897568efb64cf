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
//! `cleanup_deadline`). Which session is ended, and whether a session only the status names
//! is this install's to end, is decided here as well: the driver reads, releases, destroys
//! and forgets what it is told to. The controller and the property test's model drive the
//! same machine.

use std::collections::VecDeque;

use super::annotation_owner::SharedPod;
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
    /// What the election knows of the pod as elections writing other label keys share it.
    pub shared: SharedPod,
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
    /// Read this session, which only the status names, and answer
    /// [`Performed::SessionNamed`]: it is ended only if its name says this install created it
    /// for the election ([`ends_recorded`]).
    ReadSession(String),
    /// Release the election's key held by this session (`?release=`, no lock-delay).
    Release {
        /// The session.
        session: String,
    },
    /// Destroy the session.
    Destroy(SessionToEnd),
    /// Stop renewing the session this process holds: the election's own Consul access
    /// cannot be used, and the operator's is never used instead, so it expires in Consul.
    Forget,
}

impl Step {
    /// Whether the step writes or reads Consul (through the election's own access only).
    pub fn in_consul(&self) -> bool {
        !matches!(self, Step::Unlabel { .. } | Step::Forget)
    }
}

/// How a step went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Performed {
    /// It took effect.
    Done,
    /// It failed: the API server or Consul did not answer, or refused.
    Failed,
    /// A Consul step found the election's own Consul access unusable (an invalid spec, a
    /// token Secret that withdrew its opt-in): nothing more is sent to Consul.
    NoAccess,
    /// [`Step::ReadSession`]'s answer: the session's name in Consul (`None`: it is gone).
    SessionNamed(Option<String>),
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
/// it, then (when managed) the key is released and `ends` (the session to end, if any)
/// destroyed, then the other pods lose the election's labels and annotations. A session only
/// the status names is read first; its release and destruction follow once its name is known
/// ([`Withdrawal::done`]).
pub fn withdrawal(
    footprint: Footprint<'_>,
    pods: &[LabelledPod],
    ends: Option<&SessionToEnd>,
) -> Vec<Step> {
    let (leaders, others): (Vec<&LabelledPod>, Vec<&LabelledPod>) =
        pods.iter().partition(|pod| footprint.may_lead(pod));
    let unlabel = |pod: &&LabelledPod| Step::Unlabel {
        pod: pod.pod.clone(),
        uid: pod.uid.clone(),
    };
    let mut steps: Vec<Step> = leaders.iter().map(unlabel).collect();
    match ends.filter(|_| footprint.managed) {
        Some(SessionToEnd::Held(id)) => {
            steps.extend(release_and_destroy(SessionToEnd::Held(id.clone())))
        }
        Some(SessionToEnd::Recorded(id)) => steps.push(Step::ReadSession(id.clone())),
        None => {}
    }
    steps.extend(others.iter().map(unlabel));
    steps
}

/// Releases the key held by `session`, then destroys it.
fn release_and_destroy(session: SessionToEnd) -> [Step; 2] {
    let (SessionToEnd::Held(id) | SessionToEnd::Recorded(id)) = &session;
    [
        Step::Release {
            session: id.clone(),
        },
        Step::Destroy(session),
    ]
}

/// How a withdrawal ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Withdrawn {
    /// A pod patch failed: nothing after it was handed out.
    Stopped,
    /// Every label is off, but releasing the key or destroying the session failed.
    ConsulFailed,
    /// Everything is off (or left to expire in Consul, without an access to end it).
    Done,
}

/// Whose sessions a withdrawal may end: the session this process holds for the election,
/// and the one its status names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sessions {
    /// The session this process holds for the election.
    pub held: Option<String>,
    /// The session the status records for the leader.
    pub recorded: Option<String>,
    /// This install.
    pub owner: Owner,
    /// The election.
    pub election: ElectionKey,
}

/// A withdrawal in rule 7's order, one step at a time (see the module docs):
///
/// ```text
/// while let Some(step) = withdrawal.poll() { withdrawal.done(perform(step)); }
/// match withdrawal.outcome() { ... }
/// ```
#[derive(Debug, Clone)]
pub struct Withdrawal {
    steps: VecDeque<Step>,
    /// The step handed out last, until its outcome comes.
    out: Option<Step>,
    outcome: Withdrawn,
    /// Who may own a session only the status names.
    owner: Option<(Owner, ElectionKey)>,
    /// This process holds the session it ends.
    holds_session: bool,
}

impl Withdrawal {
    /// The whole withdrawal ([`withdrawal`]), ending the session [`session_to_end`] picks.
    pub fn whole(footprint: Footprint<'_>, pods: &[LabelledPod], sessions: Sessions) -> Withdrawal {
        let ends = session_to_end(sessions.held, sessions.recorded);
        let mut withdrawal = Withdrawal::of(withdrawal(footprint, pods, ends.as_ref()));
        withdrawal.owner = Some((sessions.owner, sessions.election));
        withdrawal.holds_session = matches!(ends, Some(SessionToEnd::Held(_)));
        withdrawal
    }

    /// Only the leader labels ([`fence`]).
    pub fn fence(footprint: Footprint<'_>, pods: &[LabelledPod]) -> Withdrawal {
        Withdrawal::of(fence(footprint, pods))
    }

    fn of(steps: Vec<Step>) -> Withdrawal {
        Withdrawal {
            steps: steps.into(),
            out: None,
            outcome: Withdrawn::Done,
            owner: None,
            holds_session: false,
        }
    }

    /// The next step to perform; `None` once the withdrawal is over (or while a step's
    /// outcome is owed).
    pub fn poll(&mut self) -> Option<Step> {
        if self.out.is_some() || self.outcome == Withdrawn::Stopped {
            return None;
        }
        let step = self.steps.pop_front()?;
        self.out = Some(step.clone());
        Some(step)
    }

    /// How the step handed out last went. A failed pod patch ends the withdrawal; a Consul
    /// step that fails, or finds no usable access, ends only what was left to do in Consul.
    pub fn done(&mut self, performed: Performed) {
        let Some(step) = self.out.take() else {
            return;
        };
        match (step, performed) {
            (Step::Unlabel { .. }, Performed::Failed) => self.outcome = Withdrawn::Stopped,
            (step, Performed::Failed) if step.in_consul() => {
                self.outcome = Withdrawn::ConsulFailed;
                self.skip_consul();
            }
            (step, Performed::NoAccess) if step.in_consul() => {
                self.skip_consul();
                if self.holds_session {
                    self.steps.push_front(Step::Forget);
                }
            }
            (Step::ReadSession(id), Performed::SessionNamed(Some(name))) => {
                let ours = self
                    .owner
                    .as_ref()
                    .is_some_and(|(owner, election)| ends_recorded(&name, owner, election));
                if ours {
                    for step in release_and_destroy(SessionToEnd::Recorded(id))
                        .into_iter()
                        .rev()
                    {
                        self.steps.push_front(step);
                    }
                }
            }
            _ => {}
        }
    }

    /// How it ended (so far: a withdrawal still under way reports what went wrong yet).
    pub fn outcome(&self) -> Withdrawn {
        self.outcome
    }

    /// Drops the Consul steps still to come; the labels still come off.
    fn skip_consul(&mut self) {
        self.steps.retain(|step| !step.in_consul());
    }
}

/// The session a withdrawal releases the key with and then destroys.
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
