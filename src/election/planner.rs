//! The decision: (spec, pods, lock, session, recorded status, now) -> [`Plan`].
//!
//! The rules of docs/design.md section 2 live here:
//! 1. at most one leader label, by construction: a plan's actions come out as its demotions,
//!    then its Consul steps, then the leader label (`steps`), and a pod is labelled leader
//!    only with the proof that every other leader label comes off in the same plan; a move
//!    is "demote, release, destroy, create, (next plan) acquire, (next plan) label";
//! 2. a labelled leader holds the lock: the leader label is only planned for the pod of the
//!    operator's session while Consul shows that session holding the key; a session that
//!    Consul no longer confirms, or a key view no answer has confirmed for a whole TTL, loses
//!    the label (`Fence`) unless the spec says `KeepLeader`;
//! 3. nothing changes when the lock, the session and the labels already agree (an operator
//!    restart that adopted its sessions plans nothing);
//! 4. a leader that stops being eligible is demoted and released explicitly; a lock-delay is
//!    waited out, never raced;
//! 5. stickiness and a deterministic successor ([`super::eligibility::successor`]);
//! 6. the fencing token only grows: a fresh acquisition whose `LockIndex` is not above the
//!    recorded token (the key was deleted and re-created) is released and re-acquired until it
//!    is, before any pod is labelled with it.

mod moves;
mod steps;

use std::time::Duration;

use jiff::Timestamp;
use tokio::time::Instant;

use super::config::{ElectionConfig, Mode, Owner, UnavailablePolicy, ValueFormat};
use super::eligibility::{Ineligible, Tenure, eligibility, tenure};
use super::key_value::{KeyHolder, holder_from_value};
use super::lock_held::LockHeld;
use super::observe::{
    LeaderRecord, LockView, PodView, Recorded, SessionHealth, SessionView, SwitchoverRecord,
};
use super::observed_token::observed_token;
use super::plan::{
    Action, CandidateState, ConditionState, ElectionEvent, EventReason, FencingCause, Phase, Plan,
    StatusState, StoodBack, TAKEOVER_GRACE,
};
use super::refusal::ConsulRefusal;
use steps::Steps;

/// Condition type: a pod is labelled leader and holds the lock.
pub const LEADER_ELECTED: &str = "LeaderElected";
/// Condition type: Consul answers and the operator's session is confirmed.
pub const CONSUL_AVAILABLE: &str = "ConsulAvailable";

/// Everything the planner needs to decide, for one election.
#[derive(Debug, Clone, Copy)]
pub struct Observation<'a> {
    /// The validated spec.
    pub config: &'a ElectionConfig,
    /// Selected pods, and pods that still carry the election's label or annotations.
    pub pods: &'a [PodView],
    /// The key, as last read from Consul.
    pub lock: &'a LockView,
    /// The operator's session for this election, if it has one.
    pub session: Option<&'a SessionView>,
    /// What the status recorded.
    pub recorded: &'a Recorded,
    /// Until when an acquisition is probably refused by a lock-delay (estimated by the caller
    /// from the moment it saw the lock invalidated), on the monotonic clock.
    pub lock_delay_until: Option<Instant>,
    /// The last moment the lock was known to be held as the status says: the arrival of the
    /// last answer covering the key (its watch's or a direct read), or, before any, the moment
    /// this process started deciding (a restart cannot know more). The Fence clock runs from
    /// here: a leader label whose lock has not been confirmed for a whole TTL goes, however
    /// healthy the session's renewals are and whatever [`Observation::lock`] last said (a
    /// cached "held" view ages: rule 2 across outages, stalled watches and restarts). On the
    /// monotonic clock.
    pub lock_confirmed_at: Instant,
    /// The election's pending switchover request (`elector.dev/switchover-to`): a pod name,
    /// or `*` for the best other eligible pod.
    pub switchover: Option<&'a str>,
    /// The current time on the monotonic clock: every decision about durations this process
    /// measured itself (rule 2's Fence clock, lock-delay, the takeover grace) uses it, so a
    /// wall clock stepped either way moves none of them (rule 8).
    pub now: Instant,
    /// The current time on the wall clock: only to render, to persist, and to compare with
    /// times other processes wrote (a pod's readiness change, a leader's `since`, a
    /// switchover request).
    pub wall: Timestamp,
    /// Who this operator is (its cluster and install), to tell a key held by another install
    /// of the operator in this cluster from one held by anybody else.
    pub owner: &'a Owner,
    /// This install stood back for another one at its last decision for this election: a key
    /// that looks free now may be that install's move in progress (or a stale view of one), so
    /// it is taken only once it stayed free for [`TAKEOVER_GRACE`], and nothing is demoted or
    /// relabelled before this install holds the lock itself.
    pub stood_back: Option<&'a StoodBack>,
    /// Consul refused one of this election's writes for lack of rights, and no write of it
    /// succeeded since: `ConsulAvailable` is false and says which right is missing.
    pub consul_refused: Option<&'a ConsulRefusal>,
}

/// Decides what to do next for one election.
pub fn plan(obs: &Observation<'_>) -> Plan {
    let mut builder = Builder::new(obs);
    match obs.config.mode {
        Mode::Managed => {
            builder.managed();
            if obs.config.paused
                && builder.managed_elsewhere.is_none()
                && matches!(
                    builder.phase,
                    Phase::Elected | Phase::Pending | Phase::Electing
                )
            {
                builder.phase = Phase::Paused;
            }
        }
        Mode::Observe => builder.observe(),
    }
    builder.finish()
}

/// Who holds the key, from the operator's point of view.
enum Holder<'a> {
    /// The operator's session, created for `pod`.
    Us(&'a SessionView, Backing),
    /// A session the operator does not own (another cluster's, an application's): never
    /// released or destroyed, every pod a follower.
    Foreign {
        /// The holding session.
        session: &'a str,
        /// The key's value, if any.
        value: Option<&'a [u8]>,
    },
    /// Nobody: the key is absent or unlocked.
    Nobody,
    /// Consul has not answered.
    Unknown,
}

/// What shows that the operator's session holds the key, and the token it leads with.
#[derive(Debug, Clone, Copy)]
enum Backing {
    /// A read of the key shows the session holding it: a pod may be labelled leader.
    Read(LockHeld),
    /// The key cannot be read; the status records the session leading with this token: a
    /// label the pod carries may stay, but none is written.
    Recorded(u64),
}

impl Backing {
    fn token(self) -> u64 {
        match self {
            Backing::Read(held) => held.lock_index(),
            Backing::Recorded(token) => token,
        }
    }
}

/// Rule 1's proof that every pod but this one that carries the leader label is demoted by
/// the plan: made only by [`Builder::demote_all_but_pod`], taken by [`Builder::label_leader`].
struct Sole<'a>(&'a PodView);

struct Builder<'a> {
    obs: &'a Observation<'a>,
    /// The plan's actions, in rule 1's order by construction.
    steps: Steps<'a>,
    requeue: Option<Duration>,
    /// The pod that leads (labelled and holding the lock) once this plan has run.
    leader: Option<(&'a PodView, u64, Timestamp)>,
    phase: Phase,
    elected_reason: (&'static str, String),
    consul_ok: bool,
    /// The pod a planned move goes to (a switchover's target), preferred over the rule-5
    /// successor while it is eligible.
    preferred: Option<&'a str>,
    /// `status.lastSwitchover` once this plan has run.
    switchover: Option<SwitchoverRecord>,
    /// Another install serving the election, when this one stands back.
    managed_elsewhere: Option<StoodBack>,
    /// This install stands back for another one (see [`Observation::stood_back`]): as it
    /// remembers, or, at its first look, because the status names another install.
    stood_back: Option<StoodBack>,
    /// The leader is being moved on purpose (a switchover, a failback, the leader pod deleted
    /// or unselected), not because it or its lock failed: its demotion is not a Warning.
    moving_on_purpose: bool,
}

impl<'a> Builder<'a> {
    fn new(obs: &'a Observation<'a>) -> Self {
        Self {
            obs,
            steps: Steps::new(obs.pods, &obs.config.labels.leader),
            requeue: None,
            leader: None,
            phase: Phase::Pending,
            elected_reason: ("NoCandidates", "no selected pod is eligible".into()),
            consul_ok: !matches!(obs.lock, LockView::Unknown),
            preferred: None,
            switchover: obs.recorded.last_switchover.clone(),
            managed_elsewhere: None,
            stood_back: stood_back(obs),
            moving_on_purpose: false,
        }
    }

    fn leader_value(&self) -> &'a str {
        &self.obs.config.labels.leader
    }

    fn follower_value(&self) -> &'a str {
        &self.obs.config.labels.follower
    }

    fn requeue_after(&mut self, d: Duration) {
        self.requeue = Some(self.requeue.map_or(d, |r| r.min(d)));
    }

    fn pod_by_uid(&self, uid: &str) -> Option<&'a PodView> {
        self.obs.pods.iter().find(|p| p.uid == uid)
    }

    fn holder(&self) -> Holder<'a> {
        let ours = self.obs.session.filter(|s| s.health != SessionHealth::Lost);
        if let Some(s) = ours
            && let Some(held) = LockHeld::by_session(self.obs.lock, &s.id)
        {
            return Holder::Us(s, Backing::Read(held));
        }
        match (self.obs.lock, ours) {
            (LockView::Held { session, value, .. }, _) => Holder::Foreign {
                session,
                value: value.as_deref(),
            },
            (LockView::Free { .. } | LockView::Absent, _) => Holder::Nobody,
            (LockView::Unknown, Some(s)) => {
                // Consul's KV cannot be read; if the status says this session was leading,
                // keep treating it as the holder while its renewals are being confirmed.
                let recorded = self.obs.recorded.leader.as_ref();
                match (recorded, self.obs.recorded.fencing_token) {
                    (Some(l), Some(token))
                        if l.session_id.as_deref() == Some(s.id.as_str()) && l.uid == s.pod_uid =>
                    {
                        Holder::Us(s, Backing::Recorded(token))
                    }
                    _ => Holder::Unknown,
                }
            }
            (LockView::Unknown, None) => Holder::Unknown,
        }
    }

    /// Demotes every pod carrying the leader label except `keep` (rule 1: first).
    fn demote_others(&mut self, keep: Option<&str>) {
        self.demote_all_but(keep, None);
    }

    /// Demotes every pod carrying the leader label except `pod`: the proof
    /// [`Builder::label_leader`] needs to label `pod` leader (rule 1).
    fn demote_all_but_pod(&mut self, pod: &'a PodView) -> Sole<'a> {
        self.demote_others(Some(&pod.uid));
        Sole(pod)
    }

    /// Demotes every pod carrying the leader label: nobody holds the lock for it (rule 2).
    fn demote_without_lock(&mut self) {
        self.demote_all_but(None, Some(FencingCause::Lost));
    }

    /// Demotes every pod carrying the leader label except `keep`; `fenced` when the lock
    /// was lost (unless the leader is being moved on purpose).
    fn demote_all_but(&mut self, keep: Option<&str>, fenced: Option<FencingCause>) {
        let leader = self.leader_value();
        for pod in self.obs.pods {
            if pod.role.as_deref() == Some(leader) && Some(pod.uid.as_str()) != keep {
                self.push_demotion(pod, fenced);
            }
        }
    }

    fn push_demotion(&mut self, pod: &PodView, fenced: Option<FencingCause>) {
        self.steps.push(demotion(pod));
        self.steps.push(Action::Emit(ElectionEvent {
            reason: EventReason::LeaderLost,
            pod: Some(pod.name.clone()),
            note: format!("pod {} is no longer leader", pod.name),
            warning: !self.moving_on_purpose,
            fenced: fenced.filter(|_| !self.moving_on_purpose),
        }));
    }

    /// Labels followers and unlabels pods that left the selector, except the leader.
    fn settle_followers(&mut self, leader_uid: Option<&str>) {
        let (leader, follower) = (self.leader_value(), self.follower_value());
        for pod in self.obs.pods {
            if Some(pod.uid.as_str()) == leader_uid || pod.role.as_deref() == Some(leader) {
                continue;
            }
            let has_leader_annotations = pod.fencing_token.is_some()
                || pod.leader_since.is_some()
                || pod.label_token.is_some();
            if pod.selected {
                if pod.role.as_deref() != Some(follower) || has_leader_annotations || pod.reclaim {
                    self.steps.push(Action::LabelFollower {
                        pod: pod.name.clone(),
                        uid: pod.uid.clone(),
                    });
                }
            } else if pod.role.is_some() || has_leader_annotations {
                self.steps.push(Action::Unlabel {
                    pod: pod.name.clone(),
                    uid: pod.uid.clone(),
                });
            }
        }
    }

    fn emit(&mut self, reason: EventReason, pod: Option<&str>, note: String) {
        self.push_event(reason, pod, note, None);
    }

    /// A `ConsulUnavailable` event for the leader label of `pod` taken because its lock
    /// cannot be confirmed.
    fn emit_unconfirmed(&mut self, pod: &str, note: String) {
        let reason = EventReason::ConsulUnavailable;
        self.push_event(reason, Some(pod), note, Some(FencingCause::Unconfirmed));
    }

    fn push_event(
        &mut self,
        reason: EventReason,
        pod: Option<&str>,
        note: String,
        fenced: Option<FencingCause>,
    ) {
        self.steps.push(Action::Emit(ElectionEvent {
            reason,
            pod: pod.map(str::to_owned),
            note,
            warning: reason.is_warning(),
            fenced,
        }));
    }

    /// When `pod` became leader: kept from the status for the same incarnation.
    fn since_of(&self, pod: &PodView, token: u64) -> Timestamp {
        if let Some(l) = &self.obs.recorded.leader
            && l.uid == pod.uid
        {
            return l.since;
        }
        // Labelled by an earlier plan for this same acquisition: keep that time, so that
        // consecutive plans (and a status that lags behind) never rewrite it.
        let labelled_for_token = pod.role.as_deref() == Some(self.leader_value())
            && pod.fencing_token.as_deref() == Some(token.to_string().as_str());
        match pod.leader_since.as_deref().map(str::parse::<Timestamp>) {
            Some(Ok(since)) if labelled_for_token => since,
            _ => self.obs.wall,
        }
    }

    /// Labels the `sole` pod leader with `token` unless it already carries exactly that;
    /// `sole` is rule 1's proof that every other leader label comes off in this plan, `_held`
    /// rule 2's that a read of the key showed it held for the pod.
    fn label_leader(&mut self, sole: Sole<'a>, token: u64, _held: LockHeld) {
        let Sole(pod) = sole;
        let since = self.since_of(pod, token);
        let token_text = token.to_string();
        let since_text = since.to_string();
        let up_to_date = pod.role.as_deref() == Some(self.leader_value())
            && pod.fencing_token.as_deref() == Some(token_text.as_str())
            && pod.label_token.as_deref() == Some(token_text.as_str())
            && pod.leader_since.as_deref() == Some(since_text.as_str());
        if !up_to_date {
            let newly = pod.role.as_deref() != Some(self.leader_value());
            let recorded = &self.obs.recorded;
            if recorded.fencing_token < Some(token) {
                self.steps.push(Action::RecordToken {
                    uid: pod.uid.clone(),
                    fencing_token: token,
                    whole: recorded.leader.as_ref().is_none_or(|l| l.uid != pod.uid),
                });
            }
            self.steps.push(Action::LabelLeader {
                pod: pod.name.clone(),
                uid: pod.uid.clone(),
                fencing_token: token,
                since,
            });
            if newly {
                self.emit(
                    EventReason::LeaderElected,
                    Some(&pod.name),
                    format!("pod {} is leader with fencing token {token}", pod.name),
                );
            }
        }
        self.leader = Some((pod, token, since));
        self.phase = Phase::Elected;
        self.elected_reason = ("Elected", format!("pod {} is leader", pod.name));
    }

    fn managed(&mut self) {
        match self.holder() {
            Holder::Us(session, backing) => self.held(session, backing),
            Holder::Foreign { session, value } => {
                if let Some(other) = self.another_install() {
                    self.stand_back(other);
                    return;
                }
                // A paused election decides no request (rule 5): it waits for the resume.
                if let Some(request) = self.obs.switchover.filter(|_| !self.obs.config.paused) {
                    self.refuse(
                        request,
                        "the key is held outside the operator; nothing to move".into(),
                    );
                }
                // Not fencing: a key held elsewhere is a state of its own
                // (`lock_held_elsewhere`), not a lost lock.
                self.demote_others(None);
                if let Some(s) = self.obs.session {
                    self.drop_session(s);
                }
                self.settle_followers(None);
                self.phase = Phase::Pending;
                self.elected_reason = ("LockHeldElsewhere", held_elsewhere(session, value));
            }
            Holder::Nobody if self.obs.config.paused => {
                // No lock to back a leader label (rule 2), and no election while paused.
                self.demote_without_lock();
                self.paused_without_leader();
            }
            Holder::Nobody => {
                let taking_over = self.stood_back.is_some();
                if let Some(stood) = self.stood_back.clone() {
                    let since = stood.key_free_since.unwrap_or(self.obs.now);
                    let free_for = self.obs.now.saturating_duration_since(since);
                    if free_for < TAKEOVER_GRACE {
                        self.requeue_after(TAKEOVER_GRACE - free_for);
                        self.phase = Phase::Pending;
                        self.elected_reason = (
                            "ManagedElsewhere",
                            format!(
                                "install {} of the operator serves this election",
                                stood.other
                            ),
                        );
                        self.managed_elsewhere = Some(StoodBack {
                            other: stood.other.clone(),
                            key_free_since: Some(since),
                        });
                        return;
                    }
                } else {
                    self.demote_without_lock();
                }
                // The pod about to be elected is labelled leader once it holds the lock:
                // labelling it follower first would be a write for nothing.
                self.prefer_requested(None);
                let next = self.next_leader(None).map(|p| p.uid.as_str());
                if taking_over {
                    // Taking over after the grace: the pod about to be elected keeps the
                    // label the other install gave it (it is acquired for, then labelled)
                    // unless a lock-delay holds that acquisition back past this reconcile;
                    // any other leader label has no lock behind it (rule 2).
                    let delayed = self
                        .obs
                        .lock_delay_until
                        .is_some_and(|until| until > self.obs.now);
                    let keep = next.filter(|_| !delayed);
                    self.demote_all_but(keep, Some(FencingCause::Lost));
                } else {
                    self.settle_followers(next);
                }
                self.elect();
            }
            Holder::Unknown => {
                // Nothing can be confirmed or changed in Consul; labels stay as they are,
                // unless no leader label can be backed by a lock any more (rule 2), whichever
                // pod carries it: the operator's session is known lost (whatever the spec
                // says: Consul has answered that the lock is gone), or, with Fence, its
                // session has gone a whole TTL unconfirmed, or the key has not been read for
                // a whole TTL (after a restart in an outage there is no session to ask).
                let lost = self
                    .obs
                    .session
                    .is_some_and(|s| s.health == SessionHealth::Lost);
                let unconfirmed = self
                    .obs
                    .session
                    .is_some_and(|s| matches!(s.health, SessionHealth::Unconfirmed { .. }));
                let ttl = self
                    .obs
                    .session
                    .map_or(self.obs.config.session.ttl, |s| s.ttl);
                let fence = self.obs.config.on_consul_unavailable == UnavailablePolicy::Fence;
                if lost || (fence && (unconfirmed || self.key_unread_too_long(ttl))) {
                    self.fence_all();
                    if let Some(s) = self.obs.session.filter(|_| lost) {
                        self.drop_session(s);
                    }
                    self.settle_followers(None);
                    self.phase = Phase::Fenced;
                    self.elected_reason = if lost {
                        (
                            "Fenced",
                            "the operator's session is gone: no lock backs a leader".into(),
                        )
                    } else {
                        (
                            "Fenced",
                            "no lock can be confirmed while Consul does not answer".into(),
                        )
                    };
                    return;
                }
                if fence {
                    self.requeue_at_unread_deadline(ttl);
                }
                self.keep_one_label();
                self.settle_followers(None);
                self.phase = Phase::Electing;
                self.elected_reason = ("ConsulUnavailable", "Consul does not answer".into());
            }
        }
    }

    /// The other install of the operator serving this election, if any (see
    /// [`served_elsewhere`]).
    fn another_install(&self) -> Option<String> {
        served_elsewhere(self.obs.lock, self.obs.owner, self.obs.pods)
    }

    /// Another install serves the election (rule 8: one writer): write nothing, drop a
    /// session of this install's own if it has one, and say so. The key held by the other
    /// install's session wakes this election again when it changes.
    fn stand_back(&mut self, other: String) {
        if let Some(s) = self.obs.session {
            self.drop_session(s);
        }
        // Said once, when this install starts standing back: a plan that only repeated the
        // event would never settle.
        if self.stood_back.is_none() {
            self.emit(
                EventReason::ManagedElsewhere,
                None,
                format!(
                    "install {other} of the operator serves this election; this install ({}/{}) \
                 stands back until that install's session no longer holds the key",
                    self.obs.owner.cluster, self.obs.owner.install
                ),
            );
        }
        self.phase = Phase::Pending;
        self.elected_reason = (
            "ManagedElsewhere",
            format!("install {other} of the operator serves this election"),
        );
        self.managed_elsewhere = Some(StoodBack {
            other,
            key_free_since: None,
        });
    }

    /// Whether the key has gone unread for at least `ttl` (see
    /// [`Observation::lock_confirmed_at`]).
    fn key_unread_too_long(&self, ttl: Duration) -> bool {
        self.unread_for() >= ttl
    }

    /// How long ago the key was last confirmed.
    fn unread_for(&self) -> Duration {
        self.obs
            .now
            .saturating_duration_since(self.obs.lock_confirmed_at)
    }

    /// Plans the next look for the moment the key will have gone unread for `ttl`: nothing
    /// else wakes the election then (renewals may keep succeeding).
    fn requeue_at_unread_deadline(&mut self, ttl: Duration) {
        let unread = self.unread_for();
        self.requeue_after(ttl.saturating_sub(unread).max(Duration::from_millis(100)));
    }

    /// `Fence` (the label goes, with `note` as the event) or `KeepLeader` (the label stays)
    /// for a leader whose lock cannot be confirmed.
    fn unconfirmed_leader(&mut self, pod: &'a PodView, token: u64, note: String) {
        self.consul_ok = false;
        let labelled = pod.role.as_deref() == Some(self.leader_value());
        self.settle_followers(Some(&pod.uid));
        if self.obs.config.on_consul_unavailable == UnavailablePolicy::KeepLeader && labelled {
            self.leader = Some((pod, token, self.since_of(pod, token)));
            self.phase = Phase::Elected;
            self.elected_reason = (
                "KeptWhileConsulUnavailable",
                format!(
                    "pod {} keeps the leader label; its lock cannot be confirmed",
                    pod.name
                ),
            );
            return;
        }
        if labelled && self.obs.config.on_consul_unavailable == UnavailablePolicy::Fence {
            self.steps.push(Action::LabelFollower {
                pod: pod.name.clone(),
                uid: pod.uid.clone(),
            });
            self.emit_unconfirmed(&pod.name, note);
        }
        self.phase = Phase::Fenced;
        self.elected_reason = (
            "Fenced",
            format!("the lock of pod {} cannot be confirmed", pod.name),
        );
    }

    /// Rule 1 without Consul: when several pods carry the leader label (somebody else put
    /// it there) and the lock cannot be read to tell which is right, only the leader the
    /// status recorded may keep it.
    fn keep_one_label(&mut self) {
        let leader = self.leader_value();
        let labelled = self
            .obs
            .pods
            .iter()
            .filter(|p| p.role.as_deref() == Some(leader))
            .count();
        if labelled > 1 {
            let recorded = self.obs.recorded.leader.as_ref().map(|l| l.uid.as_str());
            self.demote_others(recorded);
        }
    }

    /// Removes every leader label because no lock can be confirmed (`Fence`).
    fn fence_all(&mut self) {
        let leader = self.leader_value();
        for pod in self.obs.pods {
            if pod.role.as_deref() != Some(leader) {
                continue;
            }
            self.steps.push(demotion(pod));
            self.emit_unconfirmed(
                &pod.name,
                format!(
                    "the lock of pod {} cannot be confirmed; leader label removed",
                    pod.name
                ),
            );
        }
    }

    /// The operator's session holds the key.
    fn held(&mut self, session: &'a SessionView, backing: Backing) {
        if self.obs.config.paused {
            // Nothing moves: the pod the session was created for keeps leading, however it
            // is; gone, the session keeps the key until the election is resumed.
            match self.pod_by_uid(&session.pod_uid) {
                Some(pod) => self.keep(pod, session, backing),
                None => self.paused_without_leader(),
            }
            return;
        }
        let holder = self
            .pod_by_uid(&session.pod_uid)
            .map(|pod| (pod, tenure(pod, self.obs.config, self.obs.now)));
        match holder {
            Some((pod, Tenure::Keep)) => self.keep_or_move(pod, session, backing),
            Some((pod, Tenure::KeepFor(remaining))) => {
                self.requeue_after(remaining);
                self.keep(pod, session, backing);
            }
            Some((_, Tenure::Replace(reason))) => {
                self.moving_on_purpose =
                    matches!(reason, Ineligible::Terminating | Ineligible::NotSelected);
                self.prefer_requested(None);
                self.move_leader(session);
            }
            None => {
                self.prefer_requested(None);
                self.move_leader(session);
            }
        }
    }

    /// Paused with no pod to keep leading: followers stay followers, nobody is elected.
    fn paused_without_leader(&mut self) {
        self.settle_followers(None);
        self.elected_reason = (
            "Paused",
            "the election is paused (spec.paused) and no pod leads; nothing moves until it is \
             resumed"
                .into(),
        );
    }

    /// The leader keeps leading: confirm the label, or fence it while Consul is silent.
    fn keep(&mut self, pod: &'a PodView, session: &'a SessionView, backing: Backing) {
        let token = backing.token();
        let sole = self.demote_all_but_pod(pod);
        if let SessionHealth::Unconfirmed { renewed_at } = session.health {
            let silent_for = self.obs.now.saturating_duration_since(renewed_at);
            let note = format!(
                "the lock of pod {} has not been confirmed for {}s; leader label removed",
                pod.name,
                silent_for.as_secs()
            );
            self.unconfirmed_leader(pod, token, note);
            return;
        }
        if self.key_unread_too_long(session.ttl) {
            // No answer covering the key for a whole TTL, whether the key cannot be read or
            // its cached view still says held (a stalled blocking query hides a deletion or
            // a takeover as well as an error does): the lock is not confirmed. Renewals prove
            // the session, not that it still holds the key.
            let note = format!(
                "the key of pod {}'s lock has not been confirmed for a whole TTL; leader label \
                 removed",
                pod.name
            );
            self.unconfirmed_leader(pod, token, note);
            return;
        }
        let Backing::Read(held) = backing else {
            // The key cannot be read, so the lock cannot be confirmed (it may have been
            // deleted or taken meanwhile, and `token` only comes from the status): a label
            // the pod already carries stays while the key was read less than a TTL ago, but
            // no pod is labelled leader, nor re-labelled with another token, until Consul
            // answers.
            self.requeue_at_unread_deadline(session.ttl);
            self.settle_followers(Some(&pod.uid));
            if pod.role.as_deref() == Some(self.leader_value()) {
                self.leader = Some((pod, token, self.since_of(pod, token)));
                self.phase = Phase::Elected;
                self.elected_reason = ("Elected", format!("pod {} is leader", pod.name));
            } else {
                self.phase = Phase::Electing;
                self.elected_reason = ("ConsulUnavailable", "Consul does not answer".into());
            }
            return;
        };
        if self.needs_higher_token(pod, token) {
            self.bump_lock_index(session, pod);
            return;
        }
        self.look_again_if_confirmations_lag(session.ttl);
        self.label_leader(sole, token, held);
        self.settle_followers(Some(&pod.uid));
    }

    /// With `Fence`, plans the next look for the moment a held view would go a whole `ttl`
    /// unconfirmed, once its last confirmation is older than half of it: a healthy watch
    /// confirms every key well within `ttl / 2` (see [`super::confirmation_pace::effective_wait`]), so
    /// this costs nothing in steady state, and it catches a watch that stalls after a
    /// direct read confirmed the key.
    fn look_again_if_confirmations_lag(&mut self, ttl: Duration) {
        let fence = self.obs.config.on_consul_unavailable == UnavailablePolicy::Fence;
        if fence && self.unread_for() >= ttl / 2 {
            self.requeue_at_unread_deadline(ttl);
        }
    }

    /// Rule 6: a fresh acquisition whose LockIndex is not above the recorded token.
    ///
    /// The acquisition the status recorded (same session, same token) is recognised only
    /// while `pod` still carries its leader label with that token: every plan that loses the
    /// key demotes first, so a label that survived means the key never changed hands. Once
    /// the label is gone, an equal LockIndex may belong to a re-created key that merely
    /// counted up to the old token again, and one token must never name two acquisitions.
    ///
    /// The status may also name no leader, or the previous one, while the pod already carries
    /// the recorded token: the token is recorded just before the label is written, and the
    /// final status write was lost (a crash, a failed write). The label with that very token
    /// was then written for this acquisition by the operator's session for that pod, so it is
    /// recognised too, instead of demoting the pod and electing it again with a higher token.
    fn needs_higher_token(&self, pod: &PodView, token: u64) -> bool {
        let recorded = self.obs.recorded.fencing_token.unwrap_or(0);
        let token_text = token.to_string();
        let our_session = self.obs.session.map(|s| s.id.as_str());
        let recorded_session = self
            .obs
            .recorded
            .leader
            .as_ref()
            .is_some_and(|l| l.session_id.as_deref() == our_session);
        let status_write_lost =
            !recorded_session && self.obs.session.is_some_and(|s| s.pod_uid == pod.uid);
        let same_acquisition = (recorded_session || status_write_lost)
            && self.obs.recorded.fencing_token == Some(token)
            && pod.role.as_deref() == Some(self.leader_value())
            && pod.fencing_token.as_deref() == Some(token_text.as_str());
        !same_acquisition && token <= recorded
    }

    /// Releases and re-acquires: every acquisition of an unlocked key increments LockIndex.
    fn bump_lock_index(&mut self, session: &SessionView, pod: &PodView) {
        // Rule 1 order: a pod carrying the leader label (with another token, or put there by
        // somebody else) loses it before the lock is let go, even for a moment.
        if pod.role.as_deref() == Some(self.leader_value()) {
            self.push_demotion(pod, None);
        }
        self.steps.push(Action::Release {
            session: session.id.clone(),
        });
        self.acquire(&session.id, &pod.name);
        self.settle_followers(None);
        self.phase = Phase::Electing;
        self.elected_reason = (
            "RaisingFencingToken",
            "the key was re-created; raising its lock index above the last fencing token".into(),
        );
    }

    /// Acquires the key with `session` for `pod`; a session the status records as the
    /// leader's is confirmed first ([`Action::ConfirmSession`]).
    fn acquire(&mut self, session: &str, pod: &str) {
        let recorded = self.obs.recorded.leader.as_ref();
        if recorded.is_some_and(|l| l.session_id.as_deref() == Some(session)) {
            self.steps.push(Action::ConfirmSession {
                session: session.to_owned(),
            });
        }
        self.steps.push(Action::Acquire {
            session: session.to_owned(),
            pod: pod.to_owned(),
        });
    }

    /// The leader must go: demote, release, destroy, then start the successor.
    fn move_leader(&mut self, session: &SessionView) {
        self.demote_others(None);
        self.steps.push(Action::Release {
            session: session.id.clone(),
        });
        self.steps.push(Action::DestroySession {
            session: session.id.clone(),
        });
        self.settle_followers(None);
        self.start_successor(Some(&session.pod_uid), None);
    }

    /// Nobody holds the key: make sure the right pod's session acquires it.
    fn elect(&mut self) {
        match self.obs.session {
            Some(s) if s.health == SessionHealth::Lost => {
                self.steps.push(Action::ForgetSession);
                self.emit(
                    EventReason::SessionLost,
                    Some(&s.pod),
                    format!("Consul invalidated the session of pod {}", s.pod),
                );
                self.start_successor(None, None);
            }
            Some(s) => self.start_successor(None, Some(s)),
            None => self.start_successor(None, None),
        }
    }

    /// Chooses the successor and plans its session and acquisition.
    fn start_successor(&mut self, exclude: Option<&str>, existing: Option<&SessionView>) {
        let Some(next) = self.next_leader(exclude) else {
            if let Some(s) = existing {
                self.steps.push(Action::DestroySession {
                    session: s.id.clone(),
                });
            }
            self.phase = Phase::Pending;
            self.elected_reason = ("NoCandidates", "no selected pod is eligible".into());
            return;
        };
        self.phase = Phase::Electing;
        self.elected_reason = ("Electing", format!("electing pod {}", next.name));
        match existing {
            Some(s) if s.pod_uid == next.uid && s.health != SessionHealth::Lost => {
                if let Some(until) = self.obs.lock_delay_until
                    && until > self.obs.now
                {
                    self.requeue_after(until.saturating_duration_since(self.obs.now));
                    self.elected_reason = (
                        "LockDelay",
                        format!(
                            "waiting for Consul's lock-delay before electing pod {}",
                            next.name
                        ),
                    );
                    return;
                }
                self.acquire(&s.id, &next.name);
            }
            Some(s) => {
                self.steps.push(Action::DestroySession {
                    session: s.id.clone(),
                });
                self.steps.push(Action::CreateSession {
                    pod: next.name.clone(),
                    uid: next.uid.clone(),
                });
            }
            None => self.steps.push(Action::CreateSession {
                pod: next.name.clone(),
                uid: next.uid.clone(),
            }),
        }
    }

    /// Drops a session that does not hold the key (Foreign holder).
    fn drop_session(&mut self, s: &SessionView) {
        if s.health == SessionHealth::Lost {
            self.steps.push(Action::ForgetSession);
            self.emit(
                EventReason::SessionLost,
                Some(&s.pod),
                format!("Consul invalidated the session of pod {}", s.pod),
            );
        } else {
            self.steps.push(Action::DestroySession {
                session: s.id.clone(),
            });
        }
    }

    /// Observe mode with a session of the operator's left from Managed mode: take the leader
    /// label off first (rule 1), release the key if the session holds it (explicitly, so the
    /// applications meet no lock-delay), destroy the session. The applications elect from
    /// then on; the next plan mirrors them.
    fn hand_over(&mut self, session: &'a SessionView) {
        self.demote_others(None);
        if matches!(self.holder(), Holder::Us(..)) {
            self.steps.push(Action::Release {
                session: session.id.clone(),
            });
        }
        self.drop_session(session);
        self.settle_followers(None);
        self.elected_reason = (
            "HandingOver",
            "releasing the operator's lock for the applications (Observe mode)".into(),
        );
    }

    /// Observe mode: mirror the holder named in the key's value; never write to Consul.
    fn observe(&mut self) {
        self.phase = Phase::Observing;
        if let Some(request) = self.obs.switchover {
            self.refuse(
                request,
                "in Observe mode the applications elect; the operator moves nobody".into(),
            );
        }
        if let Some(session) = self.obs.session {
            self.hand_over(session);
            return;
        }
        let ttl = self.obs.config.session.ttl;
        let lock = match self.obs.lock {
            // A mirrored holder needs the same confirmation as the operator's own lock.
            LockView::Held { .. } if self.key_unread_too_long(ttl) => &LockView::Unknown,
            lock => lock,
        };
        self.consul_ok = !matches!(lock, LockView::Unknown);
        let holder = match lock {
            LockView::Unknown => {
                // Rule 2 as in Managed mode: with Fence, a mirrored leader label goes once the
                // key has gone unread for a whole TTL (the spec's: the application's own
                // session is not the operator's to know).
                if self.obs.config.on_consul_unavailable == UnavailablePolicy::Fence {
                    if self.key_unread_too_long(ttl) {
                        self.fence_all();
                        self.settle_followers(None);
                        self.phase = Phase::Fenced;
                        self.elected_reason = (
                            "Fenced",
                            "no lock can be confirmed while Consul does not answer".into(),
                        );
                        return;
                    }
                    self.requeue_at_unread_deadline(ttl);
                }
                self.keep_one_label();
                self.settle_followers(None);
                self.elected_reason = ("ConsulUnavailable", "Consul does not answer".into());
                return;
            }
            LockView::Held {
                lock_index, value, ..
            } => value
                .as_deref()
                .and_then(|v| named_holder(v, &self.obs.config.value_format))
                .and_then(|h| {
                    self.obs.pods.iter().find(|p| {
                        p.selected && p.name == h.pod && h.uid.as_deref().is_none_or(|u| u == p.uid)
                    })
                })
                .map(|p| {
                    let recorded = self.obs.recorded.fencing_token;
                    let labelled = p.role.as_deref() == Some(self.leader_value())
                        && p.fencing_token.as_deref() == recorded.map(|t| t.to_string()).as_deref();
                    (p, observed_token(recorded, labelled, *lock_index))
                }),
            LockView::Free { .. } | LockView::Absent => None,
        };
        match holder.zip(LockHeld::by_anyone(lock)) {
            Some(((pod, token), held)) => {
                let sole = self.demote_all_but_pod(pod);
                self.label_leader(sole, token, held);
                self.phase = Phase::Observing;
                self.settle_followers(Some(&pod.uid));
            }
            None => {
                self.demote_without_lock();
                self.settle_followers(None);
                self.elected_reason = (
                    "NoHolder",
                    "no selected pod holds the key (its value names no selected pod)".into(),
                );
            }
        }
    }

    fn finish(self) -> Plan {
        let obs = self.obs;
        let candidates = {
            let mut c: Vec<CandidateState> = obs
                .pods
                .iter()
                .filter(|p| p.selected)
                .map(|p| {
                    let e = eligibility(p, obs.config);
                    CandidateState {
                        pod: p.name.clone(),
                        eligible: e.is_ok(),
                        reason: e.err().map(|r| r.as_str()),
                        priority: p.priority.unwrap_or(0),
                    }
                })
                .collect();
            c.sort_by(|a, b| a.pod.cmp(&b.pod));
            c
        };
        let leader = self.leader.map(|(pod, _, since)| LeaderRecord {
            pod: pod.name.clone(),
            uid: pod.uid.clone(),
            pod_ip: pod.pod_ip.clone(),
            since,
            session_id: match obs.config.mode {
                Mode::Managed => obs.session.map(|s| s.id.clone()),
                Mode::Observe => None,
            },
        });
        let changed_pod = match (&leader, &obs.recorded.leader) {
            (Some(new), Some(old)) => new.uid != old.uid,
            _ => false,
        };
        let transitions = obs.recorded.transitions + u64::from(changed_pod);
        // Rule 8: the install whose session backs the leader claims the election; anything
        // else (Observe mode, no leader, standing back) keeps the claim recorded.
        let served_by = match (&leader, obs.config.mode) {
            (Some(_), Mode::Managed) => Some(obs.owner.id()),
            _ => obs.recorded.served_by.clone(),
        };
        let fencing_token = self
            .leader
            .map(|(_, token, _)| token)
            .or(obs.recorded.fencing_token);
        // Keep the last leader in the status while a move or a fence is in progress, so the
        // record of who led (and its session, for adoption) survives until a successor leads.
        let leader = leader.or_else(|| obs.recorded.leader.clone());
        let elected = self.leader.is_some();
        let (reason, message) = self.elected_reason;
        let consul = match (self.obs.consul_refused, self.consul_ok) {
            (Some(refusal), _) => ConditionState {
                type_: CONSUL_AVAILABLE,
                status: false,
                reason: refusal.reason,
                message: refusal.message.clone(),
            },
            (None, true) => ConditionState {
                type_: CONSUL_AVAILABLE,
                status: true,
                reason: "Available",
                message: "Consul answers".into(),
            },
            (None, false) => ConditionState {
                type_: CONSUL_AVAILABLE,
                status: false,
                reason: "Unreachable",
                message: "Consul does not answer or does not confirm the session".into(),
            },
        };
        let conditions = vec![
            ConditionState {
                type_: LEADER_ELECTED,
                status: elected,
                reason,
                message,
            },
            consul,
        ];
        Plan {
            managed_elsewhere: self.managed_elsewhere,
            actions: self.steps.into_actions(),
            status: StatusState {
                phase: self.phase,
                leader,
                fencing_token,
                transitions,
                candidates,
                conditions,
                last_switchover: self.switchover,
                served_by,
            },
            requeue_after: self.requeue,
        }
    }
}

/// Whether this install stands back for another one as `obs` begins: as it remembers from its
/// last plan, or, when it remembers nothing, because the status names another install as
/// serving the election (a first look after a start or a takeover of the Lease must not take
/// a key the serving install frees for an instant).
fn stood_back(obs: &Observation<'_>) -> Option<StoodBack> {
    if let Some(stood) = obs.stood_back {
        return Some(stood.clone());
    }
    let other = obs.recorded.served_by.as_ref()?;
    (!obs.owner.is_id(other)).then(|| StoodBack {
        other: other.clone(),
        key_free_since: None,
    })
}

/// Takes the leader label off `pod`: follower while it is selected, no label once it is not.
fn demotion(pod: &PodView) -> Action {
    let (name, uid) = (pod.name.clone(), pod.uid.clone());
    if pod.selected {
        Action::LabelFollower { pod: name, uid }
    } else {
        Action::Unlabel { pod: name, uid }
    }
}

/// The other install of the operator (`<cluster>/<install>`) that holds `lock`, when its key
/// value names a pod of this Kubernetes cluster (one whose UID is among `pods`): that install
/// elects among the same pods, so this one must write nothing for the election. `None` for
/// this install's own value, and for values without an install (earlier versions,
/// applications), which are handled as any other holder.
pub fn served_elsewhere(lock: &LockView, owner: &Owner, pods: &[PodView]) -> Option<String> {
    let LockView::Held { value, .. } = lock else {
        return None;
    };
    let holder = value.as_deref().and_then(holder_from_value)?;
    let install = holder.install?;
    let cluster = holder.cluster.unwrap_or_default();
    if owner.is(&cluster, &install) {
        return None;
    }
    let uid = holder.uid?;
    pods.iter()
        .any(|p| p.uid == uid)
        .then(|| format!("{cluster}/{install}"))
}

/// Who the key's value names as holder, read as `format` says: the operator's JSON, a JSON
/// object with the pod's name in another member, or a plain name (Patroni's leader key).
pub fn named_holder(value: &[u8], format: &ValueFormat) -> Option<KeyHolder> {
    let plain = |pod: &str| {
        let pod = pod.trim();
        (!pod.is_empty()).then(|| KeyHolder {
            pod: pod.to_owned(),
            uid: None,
            cluster: None,
            install: None,
        })
    };
    match format {
        ValueFormat::Operator => holder_from_value(value),
        ValueFormat::Plain => plain(std::str::from_utf8(value).ok()?),
        ValueFormat::Json { field } => {
            let v: serde_json::Value = serde_json::from_slice(value).ok()?;
            plain(v.get(field)?.as_str()?)
        }
    }
}

/// The `LeaderElected` message while `session` (not the operator's) holds the key: the
/// session and, when the key's value names them, the cluster and pod it holds it for.
fn held_elsewhere(session: &str, value: Option<&[u8]>) -> String {
    let holder = value.and_then(holder_from_value);
    let on_behalf = match holder {
        Some(KeyHolder {
            pod,
            cluster: Some(cluster),
            ..
        }) => format!(" for pod {pod} of cluster {cluster}"),
        Some(KeyHolder { pod, .. }) => format!(" for pod {pod}"),
        None => String::new(),
    };
    format!("the key is held by session {session}{on_behalf}, which the operator does not own")
}
