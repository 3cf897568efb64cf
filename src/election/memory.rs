//! What one election's decisions carry from one reconcile to the next, in this process: its
//! key as last written and read ([`KeyMemory`]), its NotReady pods as first seen
//! ([`NotReadyMemory`]), the switchover request it decided ([`DecidedRequest`]), whether it
//! stands back for another install, Consul's standing refusal of its requests, and its status
//! writes failing in a row ([`StatusFailures`]).
//!
//! The executor reports what happened (a plan made, a Consul request refused or accepted);
//! what follows from it is decided here.

use super::key_memory::KeyMemory;
use super::not_ready::NotReadyMemory;
use super::plan::{ElectionEvent, EventReason, StoodBack};
use super::refusal::ConsulRefusal;
use super::status_failures::StatusFailures;
use super::switchover_request::DecidedRequest;

/// One election's memory (see the module docs).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ElectionMemory {
    /// Its Consul key as last written and read.
    pub key: KeyMemory,
    /// Since when its NotReady pods are NotReady.
    pub not_ready: NotReadyMemory,
    /// The switchover request it last decided, until a copy shows it removed.
    pub decided_request: DecidedRequest,
    /// Its status writes failing in a row.
    pub status_failures: StatusFailures,
    stood_back: Option<StoodBack>,
    refusal: Option<ConsulRefusal>,
}

impl ElectionMemory {
    /// A plan was made with `managed_elsewhere` ([`super::plan::Plan::managed_elsewhere`]): the next plan
    /// (of this reconcile or the next) knows whether it stood back for another install, and
    /// since when the key looked free while it did.
    pub fn planned(&mut self, managed_elsewhere: Option<&StoodBack>) {
        self.stood_back = managed_elsewhere.cloned();
    }

    /// What the last plan said about standing back.
    pub fn stood_back(&self) -> Option<&StoodBack> {
        self.stood_back.as_ref()
    }

    /// Consul refused a request of the election for lack of rights. Returns the event that
    /// says so when the refusal is news (not standing already).
    pub fn refused(&mut self, refusal: ConsulRefusal) -> Option<ElectionEvent> {
        let news = self.refusal.as_ref() != Some(&refusal);
        let event = news.then(|| ElectionEvent {
            reason: EventReason::ConsulRefused,
            pod: None,
            note: refusal.message.clone(),
            warning: EventReason::ConsulRefused.is_warning(),
            fenced: None,
        });
        self.refusal = Some(refusal);
        event
    }

    /// A Consul write of the election succeeded: no refusal stands any more.
    pub fn consul_wrote(&mut self) {
        self.refusal = None;
    }

    /// The election's key was read: a refusal of reads no longer stands (a refused write
    /// stands until a write succeeds).
    pub fn key_read(&mut self) {
        if self.refusal.as_ref().is_some_and(|r| r.on_read) {
            self.refusal = None;
        }
    }

    /// Consul's standing refusal of the election's requests, if any.
    pub fn refusal(&self) -> Option<&ConsulRefusal> {
        self.refusal.as_ref()
    }

    /// Whether nothing is remembered (the memory can go).
    pub fn is_empty(&self) -> bool {
        self.key.is_empty()
            && self.not_ready.is_empty()
            && self.decided_request.is_empty()
            && self.status_failures.is_empty()
            && self.stood_back.is_none()
            && self.refusal.is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_is_news_once_and_stands_until_what_it_refused_succeeds() {
        let mut memory = ElectionMemory::default();
        let write = ConsulRefusal::permission_denied("kv put", "elector/ns/a");
        let event = memory.refused(write.clone()).expect("news");
        assert_eq!(event.reason, EventReason::ConsulRefused);
        assert_eq!(event.note, write.message);
        assert_eq!(memory.refused(write.clone()), None);
        memory.key_read();
        assert_eq!(
            memory.refusal(),
            Some(&write),
            "a read ends no refused write"
        );
        memory.consul_wrote();
        assert_eq!(memory.refusal(), None);
        assert!(memory.is_empty());

        let read = ConsulRefusal::permission_denied("kv get", "elector/ns/a");
        assert!(read.on_read);
        assert!(memory.refused(read).is_some());
        memory.key_read();
        assert_eq!(memory.refusal(), None);
    }

    #[test]
    fn standing_back_is_carried_from_one_plan_to_the_next() {
        let mut memory = ElectionMemory::default();
        let stood = StoodBack {
            other: "east/b".into(),
            key_free_since: None,
        };
        memory.planned(Some(&stood));
        assert_eq!(memory.stood_back(), Some(&stood));
        memory.planned(None);
        assert!(memory.is_empty());
    }
}
