//! A second install of the operator in the model's cluster, as Consul and the pods see it
//! (rule 8): it takes the election's key for a pod when the status does not name this install,
//! then records itself in the status and labels that pod leader, as its own reconcile would.
//! While its session holds the key for a pod of the election, this install must plan no write
//! of its own but ending its own session. Once the election is deleted, the other install does
//! nothing more for it.

use std::fmt::Write as _;
use std::time::Duration;

use super::{Model, OTHER_INSTALL, model_election};
use crate::election::config::{Behavior, Mode, Owner};
use crate::election::key_value::{Holding, holder_from_value, value_for};
use crate::election::observe::{LockView, PodView};
use crate::election::plan::{Action, Plan};

/// The other install's identity.
fn other_owner() -> Owner {
    Owner::new("model-cluster", "other.consul-elector")
}

/// The pod (name, UID) the key's value names, when the other install wrote it.
fn named_by_the_other_install(lock: &LockView) -> Option<(String, Option<String>)> {
    let LockView::Held { value, .. } = lock else {
        return None;
    };
    let holder = holder_from_value(value.as_deref()?)?;
    let other = other_owner();
    let ours = holder.install.as_deref() == Some(other.install.as_str())
        && holder.cluster.as_deref() == Some(other.cluster.as_str());
    ours.then_some((holder.pod, holder.uid))
}

impl Model {
    /// The other install acquires the free key for the `i`th pod, unless the status names this
    /// install (then the other one stands back, rule 8). Managed mode only: in Observe mode no
    /// install writes the key.
    pub(super) fn other_install_acquires(&mut self, i: usize) {
        let claimed_here = self.status.served_by.as_deref().is_some_and(model_owner_is);
        if self.config.mode != Mode::Managed
            || self.deleted_at.is_some()
            || claimed_here
            || !self.consul.all_up()
            || self.consul.holder().is_some()
        {
            return;
        }
        let Some((name, uid)) = self.pod_at(i).map(|p| (p.name.clone(), p.uid.clone())) else {
            return;
        };
        let now = self.now;
        let Ok(id) = self.consul.create_session(
            now,
            Duration::from_secs(15),
            Duration::from_secs(15),
            Behavior::Release,
            None,
        ) else {
            return;
        };
        let holding = Holding {
            pod: &name,
            uid: Some(&uid),
            pod_ip: None,
            node: None,
        };
        let value = value_for(holding, &model_election(), &other_owner(), now);
        let acquired = self
            .consul
            .as_outside_client(|c| c.acquire(&id, now, value));
        if acquired == Ok(true) {
            *self
                .seen
                .entry("another install took the key".into())
                .or_default() += 1;
        } else {
            self.consul.sessions.remove(&id);
        }
    }

    /// The other install, holding the key, records itself and its token in the status and
    /// labels its pod leader (demoting any other leader label first, as its rule 1 says).
    pub(super) fn other_install_labels(&mut self) {
        if self.deleted_at.is_some() {
            // The election is gone: the other install labels nothing for it either.
            return;
        }
        let lock = self.consul.lock_view();
        let Some((pod, uid)) = named_by_the_other_install(&lock) else {
            return;
        };
        let LockView::Held { lock_index, .. } = lock else {
            return;
        };
        let leader = self.config.labels.leader.clone();
        let follower = self.config.labels.follower.clone();
        if !self
            .pods
            .iter()
            .any(|p| p.name == pod && uid.as_deref().is_none_or(|u| u == p.uid))
        {
            return;
        }
        self.status.served_by = Some(OTHER_INSTALL.into());
        self.status.fencing_token = self.status.fencing_token.max(Some(lock_index));
        let since = self.now.to_string();
        for p in &mut self.pods {
            if p.name == pod {
                p.role = Some(leader.clone());
                p.fencing_token = Some(lock_index.to_string());
                p.label_token.clone_from(&p.fencing_token);
                p.leader_since = Some(since.clone());
                p.handover = None;
            } else if p.role.as_deref() == Some(leader.as_str()) {
                p.role = Some(follower.clone());
                p.fencing_token = None;
                p.label_token = None;
                p.leader_since = None;
            }
        }
        if self.released && self.finalized {
            self.labelled_elsewhere_after_release = true;
            *self
                .seen
                .entry("another install labelled after the uninstall".into())
                .or_default() += 1;
        }
        let _ = writeln!(
            self.trace,
            "@{} the other install labels {pod} leader with token {lock_index}",
            self.secs()
        );
    }

    /// Whether the other install's session holds the key now.
    pub(super) fn other_install_holds_the_key(&self) -> bool {
        named_by_the_other_install(&self.consul.lock_view()).is_some()
    }

    /// Rule 8 for a plan made from `lock`: while the other install's session holds the key for
    /// a pod of the election (`pods`), a managed election writes no pod, status record or key;
    /// it only ends its own session.
    pub(super) fn check_standing_back(&mut self, lock: &LockView, pods: &[PodView], plan: &Plan) {
        // In Observe mode the key's holder is the applications' to choose, whoever it is.
        let (Mode::Managed, Some((_, Some(uid)))) =
            (self.config.mode, named_by_the_other_install(lock))
        else {
            return;
        };
        if !pods.iter().any(|p| p.uid == uid) {
            return;
        }
        *self
            .seen
            .entry("planned while another install holds the key".into())
            .or_default() += 1;
        let writes = |a: &&Action| {
            !matches!(
                a,
                Action::Release { .. }
                    | Action::DestroySession { .. }
                    | Action::ForgetSession
                    | Action::Emit(_)
            )
        };
        if let Some(write) = plan.actions.iter().find(writes) {
            self.fail(&format!(
                "rule 8: planned {write:?} while another install's session holds the key"
            ));
        }
    }
}

/// Whether `by` (`status.servedBy`) names the model's own install.
fn model_owner_is(by: &str) -> bool {
    super::model_owner().is_id(by)
}
