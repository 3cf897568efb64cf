//! The model's election over its life: each reconcile's [`Reconcile`] up to the plan loop
//! (the spec edits that move it to another label key or Consul key, the old footprint
//! withdrawn in the order of `withdrawal::withdrawal`; an older election claiming its pods,
//! which it yields to; a paused election's edit waiting, its label fenced as rule 2 says),
//! the status write before a leader label, and the deletion that runs the same withdrawal
//! until the finalizer goes (`cleanup_deadline::deadline`). The controller's `apply` and
//! `cleanup` drive the same machine and pure functions.

use std::fmt::Write as _;
use std::time::Duration;

use super::super::support::{applied_of, mono, spec_valid};
use super::{Action, Model, PodView, SessionHealth, model_election, model_owner};
use crate::consul::parse_go_duration;
use crate::crd::AppliedSpec;
use crate::election::admission::{Access, Input, served_elsewhere};
use crate::election::cleanup_deadline::CONSUL_CLEANUP_BOUND;
use crate::election::machine::{ConsulWait, Left, Start};
use crate::election::plan::ConditionState;
use crate::election::reconcile::Found;
use crate::election::request::{Outcome, Request};
use crate::election::spec_edits::{needs_withdrawal, same_access};
use crate::election::status_change::StatusChange;
use crate::election::unusable::LockFacts;
use crate::election::withdrawal::{Acted, LabelledPod, SessionToEnd, Sessions, Step, acted_with};

/// The second label key and Consul key the edits switch to.
const OTHER_LABEL_KEY: &str = "example.com/role";
const KEY_SUFFIX: &str = "-moved";

/// The label key an edit switches to from `key`.
pub fn other_label_key(key: &str) -> String {
    if key == OTHER_LABEL_KEY {
        super::super::support::ROLE.to_owned()
    } else {
        OTHER_LABEL_KEY.to_owned()
    }
}

/// The Consul key an edit switches to from `key`.
pub fn other_key(key: &str) -> String {
    match key.strip_suffix(KEY_SUFFIX) {
        Some(first) => first.to_owned(),
        None => format!("{key}{KEY_SUFFIX}"),
    }
}

/// Which actions of one loop fail: the `fail_at`-th, before or after taking effect.
#[derive(Debug, Clone, Copy)]
pub struct Faults {
    fail_at: Option<usize>,
    after_effect: bool,
    /// Actions attempted so far.
    pub index: usize,
}

impl Faults {
    /// The failures of one loop.
    pub fn new(fail_at: Option<usize>, after_effect: bool) -> Self {
        Self {
            fail_at,
            after_effect,
            index: 0,
        }
    }

    /// Whether no action of the loop fails.
    pub fn none(&self) -> bool {
        self.fail_at.is_none()
    }

    /// For the next action: whether it takes effect, and whether it reports a failure. A step
    /// the operator performs within its own process (`in_process`: forgetting a session,
    /// publishing an event) sends no request and cannot fail.
    pub fn next(&mut self, in_process: bool) -> (bool, bool) {
        if in_process {
            return (true, false);
        }
        let failing = self.fail_at == Some(self.index);
        self.index += 1;
        (!failing || self.after_effect, failing)
    }
}

impl Model {
    /// What the spec makes the operator act with ([`applied_of`]).
    pub(super) fn spec_applied(&self) -> AppliedSpec {
        applied_of(&self.config)
    }

    /// What a reconcile starts from, as the controller reads it: a valid spec, the install
    /// the status names, the pause.
    pub(super) fn start(&self) -> Start {
        Start {
            spec: Ok(()),
            served_elsewhere: served_elsewhere(self.status.served_by.as_deref(), &model_owner()),
            paused: self.config.paused,
            token_secret: false,
            deleted: self.deleted_at.is_some(),
            released: self.released && self.deleted_at.is_none(),
            acting: Some((self.config.mode, self.config.on_consul_unavailable)),
        }
    }

    /// The reconcile stood back instead of planning, and looks again after `look_again`.
    pub(super) fn stood_back(&mut self, look_again: Duration) {
        if self.served_elsewhere() {
            *self
                .seen
                .entry("stood back for another install".into())
                .or_default() += 1;
        }
        let _ = writeln!(
            self.trace,
            "   stood back ({}), look again in {look_again:?}",
            self.election.why()
        );
    }

    /// The model's answer to `input`; `now` is what the spec makes the operator act with.
    pub(super) fn gather(&self, input: Input, now: &AppliedSpec) -> Found {
        match input {
            Input::Spec | Input::LabelKey => Found::LabelKey(spec_valid()),
            Input::Older => Found::Older(self.older.clone()),
            Input::YieldingLeader => {
                Found::YieldingLeader(self.younger.clone().map(|pod| (pod, "younger".to_owned())))
            }
            Input::Access if self.access_refused => Found::Access(Access::Invalid {
                spec_valid: ConditionState {
                    type_: crate::crd::conditions::SPEC_VALID,
                    status: false,
                    reason: "InvalidSpec",
                    message: "the token Secret no longer opts in".into(),
                },
                in_use: self.applied.as_ref().is_none_or(|a| same_access(a, now)),
            }),
            Input::Access => Found::Access(Access::Usable),
            Input::Applied => Found::Applied {
                edited: self.applied.as_ref().is_some_and(|r| r != now),
                needs_withdrawal: self
                    .applied
                    .as_ref()
                    .is_some_and(|r| needs_withdrawal(r, now)),
            },
        }
    }

    /// Performs `step`, a request before planning, as the controller's executor does.
    pub(super) fn perform(&mut self, step: &Request, now: &AppliedSpec) {
        // Rule 8: an election another install serves is that install's to write.
        let writes = matches!(
            step,
            Request::WriteStatus(StatusChange::StandBack(_)) | Request::ForgetSession
        );
        if self.served_elsewhere() && writes {
            self.fail(&format!(
                "rule 8: {step:?} for an election the status says another install serves"
            ));
        }
        match step {
            // The model's key watch is its cached view; the other elections are not modelled.
            Request::Unwatch | Request::Watch => {}
            Request::Wake(other) => {
                if other == "younger" {
                    *self
                        .seen
                        .entry("waited for a younger election".into())
                        .or_default() += 1;
                }
            }
            Request::WriteStatus(StatusChange::StandBack(back)) => {
                *self
                    .seen
                    .entry(format!("stood back: {:?}", back.phase))
                    .or_default() += 1;
            }
            Request::ForgetSession => self.registered = None,
            Request::WriteStatus(applied @ StatusChange::Applied) => {
                let from = self.applied.as_ref().map(|a| a.key.clone());
                if let Some(from) = from.filter(|from| *from != now.key) {
                    self.consul.switch_key(&from, &now.key);
                    self.cached_lock = super::LockView::Unknown;
                }
                self.write(applied, None);
                self.applied = Some(now.clone());
            }
            // A request decided before, removed again before the first plan.
            Request::ClearRequest(request) => {
                if self.switchover.as_ref() == Some(request) {
                    let _ = writeln!(self.trace, "   decided request {request} removed again");
                    *self
                        .seen
                        .entry("decided request removed again".into())
                        .or_default() += 1;
                    self.switchover = None;
                    self.version += 1;
                }
            }
            // The uninstall's release (rule 7's order done first): the status says so,
            // then the finalizer goes and nothing decides for the election any more.
            Request::WriteStatus(released @ StatusChange::Released) => {
                self.check_released_before_the_finalizer();
                self.write(released, None);
            }
            Request::RemoveFinalizer => {
                self.check_released_before_the_finalizer();
                if self.status.phase != Some(crate::crd::Phase::Pending)
                    || self.status.leader.is_some()
                {
                    self.fail("the finalizer went before the status said the election is released");
                }
                self.finalized = true;
                let _ = writeln!(self.trace, "   released; finalizer removed");
                *self
                    .seen
                    .entry("released by an uninstall".into())
                    .or_default() += 1;
            }
            other => self.fail(&format!("{other:?} is no step before planning")),
        }
    }

    /// Rule 7 for an uninstall that keeps the election: nothing of it is left on the pods or
    /// in Consul (its session no longer renewed) before its status says it is released.
    fn check_released_before_the_finalizer(&self) {
        if let Some(p) = self.pods.iter().find(|p| Self::labelled(p)) {
            self.fail(&format!("released with pod {} still labelled", p.name));
        }
        if self.registered.is_some() {
            self.fail("released with its session still renewed");
        }
    }

    /// A withdrawal ended well, and the reconcile goes on with `next`: after yielding to an
    /// older election it wakes that one, after an edit it records the values or watches.
    pub(super) fn withdrew(&mut self, next: &Request) {
        let situation = match next {
            Request::Wake(_) => {
                self.check_yielded();
                "withdrew for an older election"
            }
            _ => "withdrew after an edit",
        };
        *self.seen.entry(situation.into()).or_default() += 1;
    }

    /// What the election was acted with, as `inputs::withdrawal::left` asks
    /// [`acted_with`]: a registered session is the operator's whatever the mode says now.
    fn acted(&self) -> Acted {
        acted_with(
            self.applied.as_ref(),
            Some(&self.config),
            self.registered.is_some(),
            self.config.key.clone(),
        )
    }

    /// Rule 1 across elections: an election that yielded to an older one labels no pod
    /// leader and holds no session.
    fn check_yielded(&mut self) {
        if !self.leaders().is_empty() {
            self.fail("a pod kept the leader label of an election that yielded");
        }
        if self.registered.is_some() {
            self.fail("an election that yielded still holds a session");
        }
    }

    /// What the model's operator knows of the lock for a rule 2 judgement of an election
    /// that cannot act, as `cleanup::lock_facts` reads it: the watch's last answer (the key
    /// stays watched until the machine says otherwise: an answer comes unless the watch
    /// stalls), the session it renews.
    pub(super) fn lock_facts(&mut self) -> LockFacts {
        if !self.consul.kv_stalled {
            self.read_back();
        }
        LockFacts {
            lock: self.cached_lock.clone(),
            read_at: self.kv_read_at.map(mono),
            held: self.session_view(),
            recorded_session: self
                .recorded()
                .leader
                .as_ref()
                .and_then(|l| l.session_id.clone()),
            applied_ttl: self
                .applied
                .as_ref()
                .and_then(|a| a.session.as_ref())
                .and_then(|s| parse_go_duration(&s.ttl).ok()),
            started_at: mono(self.started_at),
            now: mono(self.now),
        }
    }

    /// Whether the election labelled `pod` (its label or any of its annotations).
    fn labelled(pod: &PodView) -> bool {
        pod.role.is_some()
            || pod.fencing_token.is_some()
            || pod.label_token.is_some()
            || pod.leader_since.is_some()
            || pod.handover.is_some()
    }

    /// What the election left, as `inputs::withdrawal::left` reads it for the machine.
    pub(super) fn left(&self) -> Left {
        Left {
            pods: self.labelled_pods(),
            acted: self.acted(),
            sessions: self.sessions(),
            wait: ConsulWait {
                skip: None,
                deleted_at: self.deleted_at,
                now: self.now,
                bound: CONSUL_CLEANUP_BOUND,
            },
        }
    }

    /// The pods the election labelled, as a withdrawal sees them.
    fn labelled_pods(&self) -> Vec<LabelledPod> {
        self.pods
            .iter()
            .filter(|p| Self::labelled(p))
            .map(|p| LabelledPod {
                pod: p.name.clone(),
                uid: p.uid.clone(),
                value: p.role.clone(),
                shared: Default::default(),
            })
            .collect()
    }

    /// Performs one step of a withdrawal, as `request` carries it out, with `faults`, checked
    /// like a planner's action.
    pub(super) fn withdrawal_step(
        &mut self,
        step: &Step,
        request: &Request,
        faults: &mut Faults,
    ) -> Outcome {
        let before = self.unbacked_labels();
        let leaders_before = self.leaders().len();
        let (executed, failing) = faults.next(request.in_process());
        let performed = if executed {
            self.perform_withdrawal(step, request)
        } else {
            Outcome::Failed
        };
        let performed = match performed {
            Outcome::Done | Outcome::Session(_) if failing => Outcome::Failed,
            performed => performed,
        };
        let ok = performed != Outcome::Failed;
        let _ = writeln!(
            self.trace,
            "   {} withdrawal {step:?}: {performed:?}",
            if ok { "ok  " } else { "FAIL" }
        );
        let kind = match step {
            Step::Unlabel { .. } => "Unlabel",
            Step::ReadSession(_) => "ReadSession",
            Step::Release { .. } => "Release",
            Step::Destroy(_) => "Destroy",
            Step::Forget => "Forget",
        };
        let outcome = match performed {
            Outcome::NoAccess => "without access",
            Outcome::Done | Outcome::Session(_) => "ok",
            _ => "failed",
        };
        *self
            .seen
            .entry(format!("withdrawal {outcome} {kind}"))
            .or_default() += 1;
        let checked_as = match step {
            Step::Unlabel { pod, uid } => Action::Unlabel {
                pod: pod.clone(),
                uid: uid.clone(),
            },
            Step::Release { session } => Action::Release {
                session: session.clone(),
            },
            Step::Destroy(SessionToEnd::Held(id) | SessionToEnd::Recorded(id)) => {
                Action::DestroySession {
                    session: id.clone(),
                }
            }
            Step::ReadSession(_) | Step::Forget => Action::ForgetSession,
        };
        self.check_action(&checked_as, executed, leaders_before, &before);
        performed
    }

    /// Whose sessions a withdrawal may end, as the controller's cleanup tells it: the session
    /// the model's operator renews, and the one the status records.
    fn sessions(&self) -> Sessions {
        Sessions {
            held: self.registered.as_ref().map(|r| r.id.clone()),
            recorded: self
                .recorded()
                .leader
                .as_ref()
                .and_then(|l| l.session_id.clone()),
            owner: model_owner(),
            election: model_election(),
        }
    }

    /// Performs one step of a withdrawal as the controller's executor performs its `request`,
    /// through the election's own Consul access (refused while the model refuses it).
    fn perform_withdrawal(&mut self, step: &Step, request: &Request) -> Outcome {
        let done =
            |result: Result<(), super::Failed>| result.map_or(Outcome::Failed, |()| Outcome::Done);
        if step.in_consul() && self.access_refused {
            return Outcome::NoAccess;
        }
        match step {
            Step::Unlabel { .. } => {
                // The patch the core made; a pod gone meanwhile needs nothing.
                if let Request::PatchPod { patch, .. } = request {
                    self.apply_patch(patch);
                }
                Outcome::Done
            }
            Step::ReadSession(id) => self.read_session(id),
            Step::Release { session } => done(self.consul.release(session).map(|_| ())),
            Step::Destroy(session) => {
                let (SessionToEnd::Held(id) | SessionToEnd::Recorded(id)) = session;
                let now = self.now;
                let destroyed = self.consul.destroy(id, now);
                if destroyed.is_ok() && matches!(session, SessionToEnd::Held(_)) {
                    self.registered = None;
                }
                done(destroyed)
            }
            Step::Forget => {
                self.registered = None;
                Outcome::Done
            }
        }
    }

    /// Executes [`Action::RecordToken`] as its `request` says, with the controller's
    /// rendering: the token, and for a `whole` record the status the plan decides with its pod
    /// labelled.
    pub(super) fn record_token(&mut self, request: &Request, token: u64) {
        if self.status.fencing_token >= Some(token) {
            self.fail(&format!(
                "RecordToken of {token}, but the status holds {:?} already",
                self.status.fencing_token
            ));
        }
        let Request::WriteStatus(change @ StatusChange::Token { .. }) = request else {
            self.fail(&format!("a token record sent as {request:?}"));
        };
        self.write(change, None);
        if self.applied.is_none() {
            self.applied = Some(self.spec_applied());
        }
    }

    /// One loop of a deleted election, or of one an uninstall releases: the same machine
    /// withdraws it, with its Consul bound; the finalizer goes once that reconcile succeeds.
    pub(super) fn finalize(&mut self, faults: Faults) {
        if self.finalized {
            self.tick_sessions();
            return;
        }
        self.drive_machine(faults);
    }

    /// Quiesce for a deleted (or released) election: Consul answers again, the cleanup finishes, and
    /// nothing of the election is left: no label or annotation on any pod, no session
    /// renewed, and (once the sessions the operator lost track of expired) no session of
    /// the operator in Consul.
    pub(super) fn quiesce_deleted(&mut self) {
        self.consul.up = true;
        self.consul.kv_up = true;
        self.consul.kv_stalled = false;
        self.consul.sessions_up = true;
        self.tick_sessions();
        for _ in 0..10 {
            if self.finalized {
                break;
            }
            self.finalize(Faults::new(None, false));
            self.advance(Duration::from_secs(1));
        }
        if !self.finalized {
            self.fail("the withdrawn election's cleanup never finished with Consul up");
        }
        // (What it left when it released was checked then; a label since is not its own.)
        if !self.labelled_elsewhere_after_release
            && let Some(p) = self.pods.iter().find(|p| Self::labelled(p))
        {
            self.fail(&format!(
                "pod {} kept the withdrawn election's labels",
                p.name
            ));
        }
        if self.registered.is_some() {
            self.fail("a session of the withdrawn election is still renewed");
        }
        let ttl = self.config.session.ttl.max(Duration::from_secs(15));
        self.advance(3 * ttl);
        let left: Vec<&String> = self
            .consul
            .sessions
            .iter()
            .filter(|(_, s)| !s.foreign)
            .map(|(id, _)| id)
            .collect();
        if !left.is_empty() {
            self.fail(&format!("the withdrawn election left sessions {left:?}"));
        }
        if let Some(r) = &self.registered
            && r.health != SessionHealth::Lost
        {
            self.fail("a session is registered after the cleanup");
        }
    }

    /// A later install of the operator (reinstalled after the uninstall): the election it kept
    /// says it was released, and the new process elects it again, as after a restart.
    pub(super) fn reinstall(&mut self) {
        let released = self.status.conditions.iter().any(|c| {
            c.type_ == crate::election::planner::LEADER_ELECTED
                && c.reason == crate::crd::conditions::RELEASED
        });
        if self.status.phase != Some(crate::crd::Phase::Pending)
            || self.status.leader.is_some()
            || !released
        {
            self.fail(&format!(
                "a released election reads {:?}",
                self.status.phase
            ));
        }
        self.released = false;
        self.finalized = false;
        self.labelled_elsewhere_after_release = false;
        self.reinstalled = true;
        let _ = writeln!(self.trace, "@{} reinstalled", self.secs());
        self.apply(&super::Event::Restart);
    }
}
