//! Planned moves: a switchover requested on the election (`elector.dev/switchover-to`) and
//! failback to a pod of higher priority. Both move leadership the way rule 4 moves it away
//! from an ineligible leader (label follower, release, destroy, then the new pod's session,
//! acquisition and label: no lock-delay), optionally after announcing the move to the leader
//! with `elector.dev/handover=<deadline>` (`spec.switchover.drainSeconds`).
//!
//! A switchover's record (`status.lastSwitchover`) is written when the request is first seen
//! (`InProgress`, with the leader of that moment as `from`) and finished when the pod asked
//! for leads (`Completed`) or when the request cannot be honoured (`Refused`: nothing moves).
//! Either way the request annotation is then removed. `*` means "the best eligible pod other
//! than `from`", so a completed `*` request is recognised however many plans it took.

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};

use super::{Backing, Builder};
use crate::crd::HANDOVER_DONE;
use crate::election::eligibility::{elapsed, eligibility, successor};
use crate::election::observe::{PodView, SessionView, SwitchoverOutcome, SwitchoverRecord};
use crate::election::plan::{Action, EventReason};

/// The request value meaning "any other eligible pod".
const ANY: &str = "*";

/// What a switchover request asks of the current state.
enum Target<'a> {
    /// The pod asked for already leads.
    Reached,
    /// Leadership should move to this pod.
    MoveTo(&'a PodView),
    /// The request cannot be honoured.
    Refused(String),
}

/// Why a planned move happens.
enum Cause {
    Switchover,
    Failback,
}

impl<'a> Builder<'a> {
    /// The successor: the pod a planned move goes to while it is eligible, else rule 5.
    pub(super) fn next_leader(&self, exclude: Option<&str>) -> Option<&'a PodView> {
        let preferred = self.preferred.and_then(|uid| {
            self.obs.pods.iter().find(|p| {
                p.uid == uid
                    && Some(p.uid.as_str()) != exclude
                    && eligibility(p, self.obs.config).is_ok()
            })
        });
        preferred.or_else(|| successor(self.obs.pods, self.obs.config, self.obs.recorded, exclude))
    }

    /// While no pod leads (or the leader is being replaced anyway), makes a pending request's
    /// pod the successor, or refuses the request.
    pub(super) fn prefer_requested(&mut self, leader: Option<&'a PodView>) {
        let Some(request) = self.obs.switchover else {
            return;
        };
        self.record_request(request);
        match self.target(request, leader) {
            Target::MoveTo(pod) => {
                self.persist_request();
                self.preferred = Some(pod.uid.as_str());
            }
            Target::Reached => {}
            Target::Refused(message) => self.refuse(request, message),
        }
    }

    /// The operator's session holds the key for `pod`, which may keep leading: keep it, or
    /// start the planned move a request or failback asks for.
    pub(super) fn keep_or_move(
        &mut self,
        pod: &'a PodView,
        session: &'a SessionView,
        backing: Backing,
    ) {
        let labelled = pod.role.as_deref() == Some(self.leader_value())
            && pod.fencing_token.as_deref() == Some(backing.token().to_string().as_str());
        if let Some(request) = self.obs.switchover {
            self.record_request(request);
            match self.target(request, Some(pod)) {
                Target::MoveTo(next) => {
                    return self.planned_move(pod, session, backing, next, Cause::Switchover);
                }
                Target::Reached => {
                    self.keep(pod, session, backing);
                    if labelled && self.leader.is_some() {
                        self.complete(request, pod);
                    }
                    return;
                }
                Target::Refused(message) => self.refuse(request, message),
            }
        } else if let Some(next) = self.failback_to(pod) {
            return self.planned_move(pod, session, backing, next, Cause::Failback);
        }
        if pod.handover.is_some() {
            // A move was announced and then withdrawn (the request removed, or failback no
            // longer applies): the leader keeps leading and should not keep waiting for it.
            self.steps.push(Action::ClearHandover {
                pod: pod.name.clone(),
                uid: pod.uid.clone(),
            });
        }
        self.keep(pod, session, backing);
    }

    /// The pod failback moves leadership to now, if any: enabled, an eligible pod of higher
    /// priority than `leader`'s, and the leader has led for at least the minimum interval
    /// (otherwise look again when it has).
    fn failback_to(&mut self, leader: &'a PodView) -> Option<&'a PodView> {
        let interval = self.obs.config.failback?;
        let best = successor(self.obs.pods, self.obs.config, self.obs.recorded, None)?;
        if best.priority.unwrap_or(0) <= leader.priority.unwrap_or(0) {
            return None;
        }
        let since = self
            .obs
            .recorded
            .leader
            .as_ref()
            .filter(|l| l.uid == leader.uid)
            .map_or(self.obs.wall, |l| l.since);
        let led_for = elapsed(since, self.obs.wall);
        if led_for < interval {
            self.requeue_after(interval - led_for);
            return None;
        }
        Some(best)
    }

    /// Moves leadership from `leader` to `next`: first, with a drain time, announce it and wait
    /// (the leader keeps leading meanwhile); then as rule 4 moves it.
    fn planned_move(
        &mut self,
        leader: &'a PodView,
        session: &'a SessionView,
        backing: Backing,
        next: &'a PodView,
        cause: Cause,
    ) {
        if matches!(cause, Cause::Switchover) {
            self.persist_request();
        }
        if let Some(wait) = self.handover_wait(leader) {
            self.keep(leader, session, backing);
            if self.leader.is_some() {
                self.requeue_after(wait);
                self.elected_reason = (
                    "HandingOver",
                    format!(
                        "pod {} is handing over to pod {} (elector.dev/handover)",
                        leader.name, next.name
                    ),
                );
            }
            return;
        }
        let note = match cause {
            Cause::Switchover => format!(
                "switchover: moving leadership from pod {} to pod {}",
                leader.name, next.name
            ),
            Cause::Failback => format!(
                "failback: moving leadership from pod {} (priority {}) to pod {} (priority {})",
                leader.name,
                leader.priority.unwrap_or(0),
                next.name,
                next.priority.unwrap_or(0)
            ),
        };
        if matches!(cause, Cause::Failback) {
            self.emit(EventReason::Failback, Some(&next.name), note.clone());
        }
        self.preferred = Some(next.uid.as_str());
        self.moving_on_purpose = true;
        self.move_leader(session);
        self.elected_reason = ("Moving", note);
    }

    /// How much longer a planned move waits for `leader` to hand over; `None` when it may go
    /// on now (no drain time, the deadline passed, or the application said `done`). The first
    /// time, the deadline is announced on the pod.
    fn handover_wait(&mut self, leader: &PodView) -> Option<Duration> {
        let drain = self.obs.config.drain;
        if drain.is_zero() {
            return None;
        }
        match leader.handover.as_deref() {
            None => {
                let deadline = SignedDuration::try_from(drain)
                    .ok()
                    .and_then(|d| self.obs.wall.checked_add(d).ok())?;
                self.steps.push(Action::AnnotateHandover {
                    pod: leader.name.clone(),
                    uid: leader.uid.clone(),
                    deadline,
                });
                Some(drain)
            }
            Some(HANDOVER_DONE) => None,
            Some(value) => match value.parse::<Timestamp>() {
                Ok(deadline) if deadline > self.obs.wall => {
                    // Never longer than the drain time, whatever the annotation says.
                    Some(elapsed(self.obs.wall, deadline).min(drain))
                }
                _ => None,
            },
        }
    }

    /// What `request` asks, given the pod that leads now (`None` while none does).
    fn target(&self, request: &str, leader: Option<&'a PodView>) -> Target<'a> {
        let from = self
            .switchover
            .as_ref()
            .filter(|r| r.outcome == SwitchoverOutcome::InProgress)
            .and_then(|r| r.from.as_deref());
        if request == ANY {
            // Asked while nobody led, or the leader is no longer the one it was asked away
            // from: whoever leads now is the answer.
            if let Some(leader) = leader
                && from.is_none_or(|from| from != leader.name)
            {
                return Target::Reached;
            }
            let exclude = from
                .and_then(|from| self.obs.pods.iter().find(|p| p.name == from))
                .map(|p| p.uid.as_str());
            return match successor(self.obs.pods, self.obs.config, self.obs.recorded, exclude) {
                Some(best) => Target::MoveTo(best),
                None => Target::Refused(no_other(from)),
            };
        }
        let Some(pod) = self.obs.pods.iter().find(|p| p.name == request) else {
            return Target::Refused(format!("pod {request} is not a candidate of this election"));
        };
        if leader.is_some_and(|l| l.uid == pod.uid) {
            return Target::Reached;
        }
        match eligibility(pod, self.obs.config) {
            Ok(()) => Target::MoveTo(pod),
            Err(reason) => {
                Target::Refused(format!("pod {request} cannot lead: {}", reason.as_str()))
            }
        }
    }

    /// Records `request` as in progress unless it already is.
    fn record_request(&mut self, request: &str) {
        let pending = self
            .switchover
            .as_ref()
            .is_some_and(|r| r.outcome == SwitchoverOutcome::InProgress && r.to == request);
        if pending {
            return;
        }
        let leader = self.leader_value();
        let from = self
            .obs
            .pods
            .iter()
            .find(|p| p.role.as_deref() == Some(leader))
            .map(|p| p.name.clone())
            .or_else(|| self.obs.recorded.leader.as_ref().map(|l| l.pod.clone()));
        self.switchover = Some(SwitchoverRecord {
            to: request.to_owned(),
            from,
            leader: None,
            requested_at: self.obs.wall,
            completed_at: None,
            outcome: SwitchoverOutcome::InProgress,
            message: String::new(),
        });
    }

    /// Writes the request's record ahead of the move unless the status already has it.
    fn persist_request(&mut self) {
        if let Some(record) = &self.switchover
            && self.obs.recorded.last_switchover.as_ref() != Some(record)
        {
            self.steps.push(Action::RecordSwitchover {
                record: record.clone(),
                decides: None,
            });
        }
    }

    /// `pod` leads as `request` asked: record it, say so, remove the request.
    fn complete(&mut self, request: &str, pod: &PodView) {
        let message = format!("pod {} leads", pod.name);
        self.finish_request(request, SwitchoverOutcome::Completed, Some(pod), &message);
        self.emit(
            EventReason::SwitchoverCompleted,
            Some(&pod.name),
            format!("switchover to {request}: {message}"),
        );
    }

    /// `request` cannot be honoured: record why, say so, remove the request. Nothing moves.
    pub(super) fn refuse(&mut self, request: &str, message: String) {
        self.record_request(request);
        self.finish_request(request, SwitchoverOutcome::Refused, None, &message);
        self.emit(
            EventReason::SwitchoverRefused,
            None,
            format!("switchover to {request} refused: {message}"),
        );
    }

    fn finish_request(
        &mut self,
        request: &str,
        outcome: SwitchoverOutcome,
        leader: Option<&PodView>,
        message: &str,
    ) {
        if let Some(record) = self.switchover.as_mut() {
            record.outcome = outcome;
            record.leader = leader.map(|p| p.name.clone());
            record.completed_at = Some(self.obs.wall);
            record.message = message.to_owned();
            self.steps.push(Action::RecordSwitchover {
                record: record.clone(),
                decides: Some(request.to_owned()),
            });
        }
        self.steps.push(Action::ClearSwitchover {
            request: request.to_owned(),
        });
    }
}

/// Why a `*` request finds nobody.
fn no_other(from: Option<&str>) -> String {
    match from {
        Some(from) => format!("no pod other than {from} is eligible"),
        None => "no pod is eligible".to_owned(),
    }
}
