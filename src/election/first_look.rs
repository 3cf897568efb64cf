//! What a reconcile reads before its first plan, as a sans-IO machine: the key, then, for a
//! Managed election that holds no session, the sessions an earlier process left behind.
//!
//! - The key (rule 2): the lock watch's answer may predate a write of this process, and a
//!   stalled watch keeps it, so after its own write the operator reads the key itself
//!   ([`KeyRead::Fresh`]). A read's refusal is what the status reports.
//! - Adoption (rule 3 with rule 8's caution): each [`adoption::candidates`] session is read
//!   without renewing it (a renewal alone keeps a session alive), judged by its name
//!   ([`adoptable_pod`]) and its witness ([`adoption::vouched_for`]), and the first one
//!   vouched for is taken over. A failed take-over ends the adoption: Consul does not answer.
//!
//! [`super::plan_loop::PlanLoop`] runs it before it plans; the controller and the property
//! test answer its reads.

use std::collections::VecDeque;

use super::adoption::{self, Candidate, FoundSettings, Vouching};
use super::config::{ElectionKey, Mode, Owner, SessionConfig};
use super::memory::ElectionMemory;
use super::observe::{LockView, Recorded};
use super::plan::ElectionEvent;
use super::refusal::ConsulRefusal;
use super::session_names::adoptable_pod;

/// How to read the key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyRead {
    /// The lock watch's answer (a direct read when the watch has none yet).
    Watched,
    /// A read of its own: this process wrote the key since it last read it back.
    Fresh,
}

/// A read or a take-over the reconcile asks for before it plans.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Look {
    /// Read the key; answer with [`FirstLook::key_read`].
    ReadKey(KeyRead),
    /// Read this session without renewing it; answer with [`FirstLook::session_read`].
    ReadSession(String),
    /// Take this session over for the pod (renew it, then keep renewing it); answer with
    /// [`FirstLook::adopted`].
    Adopt {
        /// The session.
        session: String,
        /// The pod it was created for.
        pod: String,
        /// The pod's UID, from the witness that vouched for the session.
        uid: String,
    },
}

/// A session as read for adoption.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionRead {
    /// Consul has it, with this name and these settings.
    Found {
        /// Its name.
        name: String,
        /// Its settings.
        settings: FoundSettings,
    },
    /// Consul does not have it, or did not answer: it is not adopted.
    Missing,
}

/// Why a session read for adoption is left alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeftAlone {
    /// Consul does not have it, or did not answer.
    Missing,
    /// Its name is not one this install gives the election's sessions (another cluster's,
    /// another install's, an application's).
    NotNamedByThisInstall,
    /// Nothing only this install writes vouches for it, or its settings are not the
    /// election's.
    NotVouchedFor,
}

impl LeftAlone {
    /// A static reason, for logs.
    pub fn reason(self) -> &'static str {
        match self {
            LeftAlone::Missing => "missing",
            LeftAlone::NotNamedByThisInstall => "not named by this install",
            LeftAlone::NotVouchedFor => "not vouched for",
        }
    }
}

/// What adoption is judged against: the election, this install, and the settings it
/// creates the election's sessions with.
#[derive(Debug, Clone)]
pub struct Adopting {
    /// The election.
    pub election: ElectionKey,
    /// Its mode: only a Managed election adopts.
    pub mode: Mode,
    /// The session manager already holds a session for it.
    pub holds_session: bool,
    /// The session settings `status.applied` records.
    pub recorded_settings: Option<SessionConfig>,
    /// The session settings the spec asks for.
    pub spec_settings: SessionConfig,
    /// This install.
    pub owner: Owner,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    Key,
    ReadingKey(KeyRead),
    Sessions,
    Reading(Candidate),
    Adopt(Look),
    Adopting,
    Done,
}

/// The reads before a reconcile's first plan (see the module docs).
#[derive(Debug, Clone)]
pub struct FirstLook {
    adopting: Adopting,
    state: State,
    lock: LockView,
    candidates: VecDeque<Candidate>,
}

impl FirstLook {
    /// The first look of a reconcile that adopts as `adopting` says.
    pub fn new(adopting: Adopting) -> FirstLook {
        FirstLook {
            adopting,
            state: State::Key,
            lock: LockView::Unknown,
            candidates: VecDeque::new(),
        }
    }

    /// The next read or take-over; `None` once the look is over (or while an answer is owed).
    pub fn poll(&mut self, memory: &ElectionMemory) -> Option<Look> {
        match &self.state {
            State::Key => {
                let read = match memory.key.written_since_read() {
                    true => KeyRead::Fresh,
                    false => KeyRead::Watched,
                };
                self.state = State::ReadingKey(read);
                Some(Look::ReadKey(read))
            }
            State::Adopt(adopt) => {
                let adopt = adopt.clone();
                self.state = State::Adopting;
                Some(adopt)
            }
            State::Sessions => match self.candidates.pop_front() {
                Some(candidate) => {
                    let session = candidate.session.clone();
                    self.state = State::Reading(candidate);
                    Some(Look::ReadSession(session))
                }
                None => {
                    self.state = State::Done;
                    None
                }
            },
            State::ReadingKey(_) | State::Reading(_) | State::Adopting | State::Done => None,
        }
    }

    /// The key as read (`Err`: the read failed, with Consul's refusal if it refused it), and
    /// the status the candidates come from. Returns the event of a new refusal.
    pub fn key_read(
        &mut self,
        read: Result<LockView, Option<ConsulRefusal>>,
        recorded: &Recorded,
        memory: &mut ElectionMemory,
    ) -> Option<ElectionEvent> {
        let State::ReadingKey(kind) = self.state else {
            return None;
        };
        let event = match read {
            Ok(lock) => {
                if kind == KeyRead::Fresh {
                    memory.key.read_back();
                }
                if lock != LockView::Unknown {
                    memory.key_read();
                }
                self.lock = lock;
                None
            }
            Err(refusal) => refusal.and_then(|r| memory.refused(r)),
        };
        let a = &self.adopting;
        self.candidates = adoption::candidates(a.mode, a.holds_session, &self.lock, recorded)
            .into_iter()
            .collect();
        self.state = State::Sessions;
        event
    }

    /// The session asked for, as read; `recorded` is the status it is judged against. The
    /// next poll takes it over when it may be adopted, or reads the next candidate; returns
    /// why it is left alone, if it is.
    pub fn session_read(&mut self, read: SessionRead, recorded: &Recorded) -> Option<LeftAlone> {
        let State::Reading(candidate) = std::mem::replace(&mut self.state, State::Sessions) else {
            return None;
        };
        match self.judge(candidate, read, recorded) {
            Ok(adopt) => {
                self.state = State::Adopt(adopt);
                None
            }
            Err(why) => Some(why),
        }
    }

    /// The take-over of `candidate`, read as `read`, when its name and its witness allow it.
    fn judge(
        &self,
        candidate: Candidate,
        read: SessionRead,
        recorded: &Recorded,
    ) -> Result<Look, LeftAlone> {
        let SessionRead::Found { name, settings } = read else {
            return Err(LeftAlone::Missing);
        };
        let a = &self.adopting;
        let pod = adoptable_pod(&name, &a.owner, &a.election, candidate.found)
            .ok_or(LeftAlone::NotNamedByThisInstall)?;
        let uid = adoption::vouched_for(
            &candidate,
            &Vouching {
                pod,
                settings: &settings,
                lock: &self.lock,
                recorded,
                recorded_settings: a.recorded_settings.as_ref(),
                spec_settings: &a.spec_settings,
                owner: &a.owner,
            },
        )
        .ok_or(LeftAlone::NotVouchedFor)?;
        Ok(Look::Adopt {
            session: candidate.session,
            pod: pod.to_owned(),
            uid,
        })
    }

    /// The take-over's outcome: `Ok(true)` adopted, `Ok(false)` Consul no longer has the
    /// session (the next candidate is read), `Err(())` the request failed.
    pub fn adopted(&mut self, outcome: Result<bool, ()>) {
        if self.state != State::Adopting {
            return;
        }
        self.state = match outcome {
            Ok(false) => State::Sessions,
            Ok(true) | Err(()) => State::Done,
        };
    }

    /// Whether the look is over.
    pub fn is_over(&self) -> bool {
        self.state == State::Done
    }

    /// The key as first read.
    pub fn lock(&self) -> &LockView {
        &self.lock
    }
}

#[cfg(test)]
mod tests;
