//! What an election asks the executor to do, in one vocabulary that says what to send and
//! never why ([`Request`]), and what the executor reports back ([`Outcome`]). The machine
//! ([`super::machine::Election`]) turns each plan action, withdrawal step and step before
//! planning into a request, and each outcome back into the answer its part expects; the
//! executor performs requests against the API server and Consul without deciding anything.

use std::collections::HashMap;

use tokio::time::Instant;

use super::annotation_owner::SharedPod;
use super::config::LabelConfig;
use super::first_look::{KeyRead, SessionRead};
use super::observe::{LockView, Recorded};
use super::plan::{Action, ConditionState, ElectionEvent, Plan};
use super::plan_loop::Answer;
use super::pod_patch::{PodPatch, PodRole};
use super::refusal::ConsulRefusal;
use super::status_change::StatusChange;
use super::withdrawal::{LabelledPod, Performed, SessionToEnd, Step};

/// Which Consul access a Consul request goes through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    /// The access the spec names, which admission opened.
    Spec,
    /// The access the operator acted with (`status.applied`), which a withdrawal uses: never
    /// the operator's own instead. Answered [`Outcome::NoAccess`] when it cannot be used.
    ActedWith,
}

/// What a released key keeps as its value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kept {
    /// The value it has as last read.
    Value,
    /// Nothing.
    Nothing,
}

/// A request for the executor.
#[derive(Debug, Clone, PartialEq)]
pub enum Request {
    /// Send this pod patch; `replans`: the election plans again on the patched pod in this
    /// reconcile (so the pod's own watch event tells it nothing new). Answered
    /// [`Outcome::Gone`] when that incarnation of the pod no longer exists.
    PatchPod {
        /// The patch.
        patch: PodPatch,
        /// See above.
        replans: bool,
    },
    /// Write this status change, conditional on the status the reconcile's plans decide from
    /// (before they start: on the status as this process knows it). Answered
    /// [`Outcome::StatusWritten`].
    WriteStatus(StatusChange),
    /// Read the election's key. Answered [`Outcome::Key`].
    ReadKey(KeyRead),
    /// Read a session without renewing it. Answered [`Outcome::Session`].
    ReadSession {
        /// The session.
        session: String,
        /// Through which access.
        via: Via,
    },
    /// Take this session over for the pod (renew it, then keep renewing it). Answered
    /// [`Outcome::Adopted`].
    AdoptSession {
        /// The session.
        session: String,
        /// The pod it was created for.
        pod: String,
        /// The pod's UID.
        uid: String,
    },
    /// Create a session for the pod and keep renewing it.
    CreateSession {
        /// Pod name.
        pod: String,
        /// Pod UID.
        uid: String,
    },
    /// Renew this session once. Answered [`Outcome::SessionGone`] when Consul no longer has
    /// it.
    RenewSession(String),
    /// Destroy the session this process holds, or (`Some`) this one, which only the status
    /// names.
    DestroySession {
        /// The session only the status names.
        recorded: Option<String>,
        /// Through which access.
        via: Via,
    },
    /// Stop renewing the session this process holds.
    ForgetSession,
    /// Acquire the election's key with this session for the pod. Answered
    /// [`Outcome::Acquired`], or [`Outcome::SessionGone`].
    Acquire {
        /// The session.
        session: String,
        /// The pod, whose identity the key's value carries.
        pod: String,
    },
    /// Release the election's key held by this session (`?release=`, no lock-delay). Answered
    /// [`Outcome::SessionGone`] when Consul no longer has the session.
    Release {
        /// The session.
        session: String,
        /// The value the key keeps.
        keeps: Kept,
        /// Through which access.
        via: Via,
    },
    /// Remove the election's switchover request if it still reads this.
    ClearRequest(String),
    /// Publish this event on the election (and on the pod it names).
    Publish(ElectionEvent),
    /// Watch the election's key.
    Watch,
    /// Stop watching the election's key.
    Unwatch,
    /// Wake this other election of the namespace.
    Wake(String),
    /// Take the operator's finalizer off the election (it stays).
    RemoveFinalizer,
}

impl Request {
    /// Whether the request is performed inside this process (so it cannot fail).
    pub fn in_process(&self) -> bool {
        matches!(
            self,
            Request::ForgetSession
                | Request::Publish(_)
                | Request::Watch
                | Request::Unwatch
                | Request::Wake(_)
        )
    }
}

/// How a request went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// It took effect (or had nothing to do).
    Done,
    /// The incarnation of the pod a patch was for no longer exists.
    Gone,
    /// Consul gave the lock (`true`) or not.
    Acquired(bool),
    /// Consul no longer has the session the request used.
    SessionGone,
    /// The key as read (`Err`: the read failed, with Consul's refusal if it refused it).
    Key(Result<LockView, Option<ConsulRefusal>>),
    /// The session as read.
    Session(SessionRead),
    /// The session was taken over (`false`: it turned out not to be this election's).
    Adopted(bool),
    /// The status was written (or already was as the change makes it): it now reads so.
    StatusWritten(Box<Recorded>),
    /// The switchover request was removed, leaving the election at this resourceVersion
    /// (`None`: the election is gone).
    Removed(Option<u64>),
    /// The Consul access the request goes through cannot be used.
    NoAccess,
    /// Consul refused it for lack of rights.
    Refused(ConsulRefusal),
    /// A status write failed with this error, of this static category.
    StatusFailed {
        /// The error's category.
        category: &'static str,
        /// The error.
        error: String,
    },
    /// It failed otherwise: the API server or Consul did not answer, or refused.
    Failed,
}

impl Outcome {
    /// Whether the request took effect (a step that must not fail did not).
    pub fn took_effect(&self) -> bool {
        matches!(
            self,
            Outcome::Done | Outcome::StatusWritten(_) | Outcome::Removed(_)
        )
    }
}

/// What the requests of a plan loop's actions are made with: the election and the world of
/// its last plan.
#[derive(Debug, Clone, Default)]
pub struct Acting {
    /// The election's name (the owner its pod annotations name).
    pub election: String,
    /// The labels it writes.
    pub labels: LabelConfig,
    /// What it knows of each pod (by name) as elections writing other label keys share it.
    pub shared: HashMap<String, SharedPod>,
    /// When its last plan was made (the world's monotonic now).
    pub planned_at: Option<Instant>,
    /// Its status writes that failed in a row, for a whole status a token record writes.
    pub failed_writes: Option<(u32, &'static str)>,
}

/// What the answer to an action's request means for the plan loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ActionKind {
    /// A release: done, the loop reads the key back.
    Release,
    /// A switchover request's removal: done, the loop sees none.
    Clear,
    /// A token record: its status is what the next plans decide from.
    Token,
    /// Anything else.
    Other,
}

impl Acting {
    /// The request `action` of `plan` makes (`spec_valid`: the plan's `SpecValid` condition).
    pub fn request(
        &self,
        action: Action,
        plan: &Plan,
        spec_valid: &ConditionState,
    ) -> Option<(Request, ActionKind)> {
        let (labels, election) = (&self.labels, self.election.as_str());
        let request = match action {
            pod_action @ (Action::LabelFollower { .. }
            | Action::Unlabel { .. }
            | Action::LabelLeader { .. }
            | Action::AnnotateHandover { .. }
            | Action::ClearHandover { .. }) => {
                let shared = |name: &str, _| self.shared.get(name).copied();
                let patch = PodPatch::of(&pod_action, labels, election, shared)?;
                let replans = true;
                Request::PatchPod { patch, replans }
            }
            Action::Release { session } => {
                let (keeps, via) = (Kept::Value, Via::Spec);
                let release = Request::Release {
                    session,
                    keeps,
                    via,
                };
                return Some((release, ActionKind::Release));
            }
            Action::ClearSwitchover { request } => {
                return Some((Request::ClearRequest(request), ActionKind::Clear));
            }
            Action::RecordToken {
                uid,
                fencing_token,
                whole,
            } => {
                let token = StatusChange::Token {
                    plan: Box::new(plan.clone()),
                    uid,
                    token: fencing_token,
                    whole,
                    spec_valid: spec_valid.clone(),
                    failed_writes: self.failed_writes,
                };
                return Some((Request::WriteStatus(token), ActionKind::Token));
            }
            Action::DestroySession { .. } => Request::DestroySession {
                recorded: None,
                via: Via::Spec,
            },
            Action::ForgetSession => Request::ForgetSession,
            Action::CreateSession { pod, uid } => Request::CreateSession { pod, uid },
            Action::ConfirmSession { session } => Request::RenewSession(session),
            Action::Acquire { session, pod } => Request::Acquire { session, pod },
            Action::RecordSwitchover { record, decides } => {
                Request::WriteStatus(StatusChange::Switchover { record, decides })
            }
            Action::Emit(event) => Request::Publish(event),
        };
        Some((request, ActionKind::Other))
    }
}

impl ActionKind {
    /// The plan loop's answer for `outcome`.
    pub fn answer(self, outcome: Outcome) -> Answer {
        match (self, outcome) {
            (ActionKind::Release, Outcome::Done) => Answer::Released,
            (ActionKind::Clear, Outcome::Done | Outcome::Removed(_)) => Answer::RequestCleared,
            (ActionKind::Token, Outcome::StatusWritten(recorded)) => {
                Answer::StatusWritten(recorded)
            }
            (_, Outcome::Done | Outcome::StatusWritten(_) | Outcome::Removed(_)) => Answer::Done,
            (_, Outcome::Acquired(acquired)) => Answer::Acquired(acquired),
            (_, Outcome::SessionGone) => Answer::SessionGone,
            (_, Outcome::Refused(refusal)) => Answer::Refused(refusal),
            (
                _,
                Outcome::Gone
                | Outcome::Failed
                | Outcome::StatusFailed { .. }
                | Outcome::NoAccess
                | Outcome::Key(_)
                | Outcome::Session(_)
                | Outcome::Adopted(_),
            ) => Answer::Failed,
        }
    }
}

/// What the requests of a withdrawal's steps are made with: the election as the operator
/// acted on it.
#[derive(Debug, Clone)]
pub struct Withdrawing {
    /// The election's name.
    pub election: String,
    /// The label key of its labels.
    pub label_key: String,
    /// The pods it labelled.
    pub pods: Vec<LabelledPod>,
}

impl Withdrawing {
    /// The request of withdrawal `step`: through the Consul access the operator acted with,
    /// never its own.
    pub fn request(&self, step: Step) -> Request {
        let via = Via::ActedWith;
        match step {
            Step::Unlabel { pod, uid } => {
                let labels = LabelConfig {
                    key: self.label_key.clone(),
                    leader: String::new(),
                    follower: String::new(),
                };
                let shared = self.pods.iter().find(|p| p.uid == uid).map(|p| p.shared);
                let role = PodRole::None;
                let patch = PodPatch::for_role(&pod, &uid, &labels, &self.election, role, shared);
                // The withdrawal does not plan again on the pod: its own event may wake it.
                let replans = false;
                Request::PatchPod { patch, replans }
            }
            Step::ReadSession(session) => Request::ReadSession { session, via },
            Step::Release { session } => Request::Release {
                session,
                keeps: Kept::Nothing,
                via,
            },
            Step::Destroy(SessionToEnd::Held(_)) => Request::DestroySession {
                recorded: None,
                via,
            },
            Step::Destroy(SessionToEnd::Recorded(id)) => Request::DestroySession {
                recorded: Some(id),
                via,
            },
            Step::Forget => Request::ForgetSession,
        }
    }
}

/// The withdrawal's answer for `outcome`: a pod gone needs nothing, and a session Consul no
/// longer has holds nothing to release.
pub fn performed(outcome: Outcome) -> Performed {
    match outcome {
        Outcome::Done
        | Outcome::Gone
        | Outcome::SessionGone
        | Outcome::StatusWritten(_)
        | Outcome::Removed(_) => Performed::Done,
        Outcome::NoAccess => Performed::NoAccess,
        Outcome::Session(SessionRead::Found { name, .. }) => Performed::SessionNamed(Some(name)),
        Outcome::Session(SessionRead::Missing) => Performed::SessionNamed(None),
        Outcome::Acquired(_)
        | Outcome::Key(_)
        | Outcome::Adopted(_)
        | Outcome::Refused(_)
        | Outcome::StatusFailed { .. }
        | Outcome::Failed => Performed::Failed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::election::refusal::ConsulRefusal;

    #[test]
    fn an_actions_outcome_is_the_answer_its_kind_expects() {
        use ActionKind::*;
        assert_eq!(Release.answer(Outcome::Done), Answer::Released);
        assert_eq!(Clear.answer(Outcome::Done), Answer::RequestCleared);
        assert_eq!(Other.answer(Outcome::Done), Answer::Done);
        let recorded = Box::new(Recorded::default());
        assert_eq!(
            Token.answer(Outcome::StatusWritten(recorded.clone())),
            Answer::StatusWritten(recorded.clone())
        );
        // A switchover record is a write the next plans need not read back.
        assert_eq!(Other.answer(Outcome::StatusWritten(recorded)), Answer::Done);
        assert_eq!(Other.answer(Outcome::SessionGone), Answer::SessionGone);
        let refusal = ConsulRefusal::token_not_found("kv write", "elector/default/web");
        assert_eq!(
            Other.answer(Outcome::Refused(refusal.clone())),
            Answer::Refused(refusal)
        );
        // A pod gone before its patch stops the loop, like any failure.
        assert_eq!(Other.answer(Outcome::Gone), Answer::Failed);
    }

    #[test]
    fn a_withdrawal_goes_on_past_a_pod_or_a_session_that_is_gone() {
        assert_eq!(performed(Outcome::Gone), Performed::Done);
        // Consul no longer has the session: nothing of it holds the key.
        assert_eq!(performed(Outcome::SessionGone), Performed::Done);
        assert_eq!(performed(Outcome::NoAccess), Performed::NoAccess);
        assert_eq!(
            performed(Outcome::Session(SessionRead::Missing)),
            Performed::SessionNamed(None)
        );
        assert_eq!(performed(Outcome::Failed), Performed::Failed);
    }
}
