//! Rule 1's order by construction: a plan's actions come out as every demotion first, then
//! Consul's steps, then the leader label, whatever order the planner thought of them in.
//!
//! An action's stage is read from the action itself: taking the leader label off a pod that
//! carries it is a demotion, a session or key write is Consul's, recording a token and
//! writing the leader label is the label's. Everything else (follower labels, handover
//! annotations, switchover records, events) keeps its place right after the action planned
//! before it, so an event stays with the step it reports.

use super::super::observe::PodView;
use super::super::plan::Action;

/// Where an action stands in rule 1's order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Stage {
    /// A leader label comes off.
    Demote,
    /// The key or a session changes in Consul.
    Consul,
    /// The leader label goes on, after its token was recorded.
    Label,
}

/// The actions of one plan, kept by stage.
pub(super) struct Steps<'a> {
    /// The election's pods as the plan saw them: which of them carries the leader label.
    pods: &'a [PodView],
    /// The leader label's value.
    leader: &'a str,
    /// The actions of each [`Stage`], in the order they were planned.
    stages: [Vec<Action>; 3],
    /// The stage of the last action planned, which an action of no stage of its own joins.
    last: Stage,
}

impl<'a> Steps<'a> {
    /// No action yet, for a plan over `pods` whose leader label value is `leader`.
    pub(super) fn new(pods: &'a [PodView], leader: &'a str) -> Self {
        Steps {
            pods,
            leader,
            stages: [Vec::new(), Vec::new(), Vec::new()],
            last: Stage::Demote,
        }
    }

    /// Plans `action` in its stage.
    pub(super) fn push(&mut self, action: Action) {
        let stage = self.stage_of(&action).unwrap_or(self.last);
        self.stages[stage as usize].push(action);
        self.last = stage;
    }

    /// The actions in rule 1's order: demotions, Consul, the label.
    pub(super) fn into_actions(self) -> Vec<Action> {
        self.stages.into_iter().flatten().collect()
    }

    /// The stage `action` belongs to, if it has one of its own.
    fn stage_of(&self, action: &Action) -> Option<Stage> {
        match action {
            Action::LabelFollower { uid, .. } | Action::Unlabel { uid, .. } => {
                self.carries_leader_label(uid).then_some(Stage::Demote)
            }
            Action::Release { .. }
            | Action::DestroySession { .. }
            | Action::ForgetSession
            | Action::CreateSession { .. }
            | Action::ConfirmSession { .. }
            | Action::Acquire { .. } => Some(Stage::Consul),
            Action::RecordToken { .. } | Action::LabelLeader { .. } => Some(Stage::Label),
            Action::AnnotateHandover { .. }
            | Action::ClearHandover { .. }
            | Action::RecordSwitchover { .. }
            | Action::ClearSwitchover { .. }
            | Action::Emit(_) => None,
        }
    }

    fn carries_leader_label(&self, uid: &str) -> bool {
        self.pods
            .iter()
            .any(|pod| pod.uid == uid && pod.role.as_deref() == Some(self.leader))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::election::plan::{ElectionEvent, EventReason};
    use crate::election::tests::support;

    fn pod(name: &str, role: Option<&str>) -> PodView {
        PodView {
            role: role.map(str::to_owned),
            ..support::pod(name)
        }
    }

    fn follower(name: &str) -> Action {
        Action::LabelFollower {
            pod: name.to_owned(),
            uid: format!("uid-{name}"),
        }
    }

    fn lost(name: &str) -> Action {
        Action::Emit(ElectionEvent {
            reason: EventReason::LeaderLost,
            pod: Some(name.to_owned()),
            note: format!("pod {name} is no longer leader"),
            warning: true,
            fenced: None,
        })
    }

    #[test]
    fn a_demotion_planned_late_still_comes_before_consul_and_the_label() {
        let pods = [pod("a", Some("leader")), pod("b", Some("follower"))];
        let mut steps = Steps::new(&pods, "leader");
        let acquire = Action::Acquire {
            session: "s".into(),
            pod: "b".into(),
        };
        let label = Action::LabelLeader {
            pod: "b".into(),
            uid: "uid-b".into(),
            fencing_token: 7,
            since: jiff::Timestamp::UNIX_EPOCH,
        };
        let release = Action::Release {
            session: "s".into(),
        };
        steps.push(label.clone());
        steps.push(acquire.clone());
        steps.push(follower("a"));
        steps.push(lost("a"));
        steps.push(release.clone());
        assert_eq!(
            steps.into_actions(),
            [follower("a"), lost("a"), acquire, release, label]
        );
    }

    #[test]
    fn a_follower_label_and_an_event_keep_their_place_after_the_step_before_them() {
        let pods = [pod("a", Some("leader")), pod("b", None)];
        let mut steps = Steps::new(&pods, "leader");
        let label = Action::LabelLeader {
            pod: "a".into(),
            uid: "uid-a".into(),
            fencing_token: 3,
            since: jiff::Timestamp::UNIX_EPOCH,
        };
        // `b` carries no leader label: labelling it follower is no demotion.
        steps.push(label.clone());
        steps.push(follower("b"));
        steps.push(lost("b"));
        assert_eq!(steps.into_actions(), [label, follower("b"), lost("b")]);
    }
}
