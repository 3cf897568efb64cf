//! The pod patches of an election's steps: which of the operator's labels and annotations a
//! patch sets or removes, on which incarnation of the pod. Decided here: what each role writes
//! (a new role also ends any planned move the handover announced), and what a role patch does
//! with the annotations of a pod that elections with other label keys share
//! ([`annotations`]); whatever they say, the token annotation of the label key
//! ([`label_token_annotation`]) is written with the label, which no election with another key
//! shares. The executor sends a patch as it is (a JSON merge patch naming only
//! these keys and the pod's UID); the property test's model applies the same patches to its
//! pods.

use std::collections::BTreeMap;

use jiff::Timestamp;

use super::annotation_owner::{Annotations, SharedPod, annotations};
use super::config::LabelConfig;
use super::plan::Action;
use crate::crd::{
    ELECTION_ANNOTATION, FENCING_TOKEN_ANNOTATION, HANDOVER_ANNOTATION, LEADER_SINCE_ANNOTATION,
    label_token_annotation,
};

/// How a pod should be labelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodRole {
    /// `<key>=<leader>` plus the fencing token (also under the label key's own annotation) and
    /// leader-since annotations.
    Leader {
        /// Consul `LockIndex`.
        fencing_token: u64,
        /// Leader since.
        since: Timestamp,
    },
    /// `<key>=<follower>`, leader annotations removed.
    Follower,
    /// No label, no annotation of the operator.
    None,
}

/// A patch of one incarnation of a pod: each label and annotation it names is set (`Some`) or
/// removed (`None`); nothing else is touched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodPatch {
    /// Pod name.
    pub pod: String,
    /// Pod UID: the patch must fail on another incarnation of the name.
    pub uid: String,
    /// Labels set or removed.
    pub labels: BTreeMap<String, Option<String>>,
    /// Annotations set or removed.
    pub annotations: BTreeMap<String, Option<String>>,
}

impl PodPatch {
    /// Gives `pod` (incarnation `uid`) the `role` under `labels` in election `election`; the
    /// operator's annotations are written, kept or given up as `treat` says.
    pub fn role(
        pod: &str,
        uid: &str,
        labels: &LabelConfig,
        election: &str,
        role: PodRole,
        treat: Annotations,
    ) -> Self {
        let (label, token, since, owner) = match role {
            PodRole::Leader {
                fencing_token,
                since,
            } => (
                Some(labels.leader.clone()),
                Some(fencing_token.to_string()),
                Some(since.to_string()),
                Some(election.to_owned()),
            ),
            PodRole::Follower => (
                Some(labels.follower.clone()),
                None,
                None,
                Some(election.to_owned()),
            ),
            PodRole::None => (None, None, None, None),
        };
        let shared: Vec<(&str, Option<String>)> = match treat {
            Annotations::Write => vec![
                (FENCING_TOKEN_ANNOTATION, token.clone()),
                (LEADER_SINCE_ANNOTATION, since),
                (ELECTION_ANNOTATION, owner),
                // A role change ends any planned move the handover announced.
                (HANDOVER_ANNOTATION, None),
            ],
            Annotations::Keep => Vec::new(),
            Annotations::GiveUp => vec![
                (FENCING_TOKEN_ANNOTATION, None),
                (LEADER_SINCE_ANNOTATION, None),
                (ELECTION_ANNOTATION, None),
            ],
        };
        let mut annotations: BTreeMap<String, Option<String>> = shared
            .into_iter()
            .map(|(key, value)| (key.to_owned(), value))
            .collect();
        annotations.insert(label_token_annotation(&labels.key), token);
        PodPatch {
            pod: pod.to_owned(),
            uid: uid.to_owned(),
            labels: BTreeMap::from([(labels.key.clone(), label)]),
            annotations,
        }
    }

    /// Sets (`Some`) or removes the handover annotation of `pod` (incarnation `uid`).
    pub fn handover(pod: &str, uid: &str, value: Option<String>) -> Self {
        PodPatch {
            pod: pod.to_owned(),
            uid: uid.to_owned(),
            labels: BTreeMap::new(),
            annotations: BTreeMap::from([(HANDOVER_ANNOTATION.to_owned(), value)]),
        }
    }

    /// The patch `action` of election `election` (writing `labels`) makes, if it patches a
    /// pod. `shared` tells, for the pod a role patch is for and whether it makes the pod
    /// leader, what the election knows of it as other elections share it; `None` when the pod
    /// is not known (then the annotations are written).
    pub fn of(
        action: &Action,
        labels: &LabelConfig,
        election: &str,
        shared: impl FnOnce(&str, bool) -> Option<SharedPod>,
    ) -> Option<Self> {
        let (pod, uid, role) = match action {
            Action::LabelLeader {
                pod,
                uid,
                fencing_token,
                since,
            } => (
                pod,
                uid,
                PodRole::Leader {
                    fencing_token: *fencing_token,
                    since: *since,
                },
            ),
            Action::LabelFollower { pod, uid } => (pod, uid, PodRole::Follower),
            Action::Unlabel { pod, uid } => (pod, uid, PodRole::None),
            Action::AnnotateHandover { pod, uid, deadline } => {
                return Some(Self::handover(pod, uid, Some(deadline.to_string())));
            }
            Action::ClearHandover { pod, uid } => return Some(Self::handover(pod, uid, None)),
            _ => return None,
        };
        let to_leader = matches!(role, PodRole::Leader { .. });
        let shared = shared(pod, to_leader);
        Some(Self::for_role(pod, uid, labels, election, role, shared))
    }

    /// [`Self::role`], with the annotations treated as [`annotations`] says for a pod shared as
    /// `shared` (`None`: a pod not known, whose annotations are written).
    pub fn for_role(
        pod: &str,
        uid: &str,
        labels: &LabelConfig,
        election: &str,
        role: PodRole,
        shared: Option<SharedPod>,
    ) -> Self {
        let to_leader = matches!(role, PodRole::Leader { .. });
        let treat = shared.map_or(Annotations::Write, |shared| annotations(shared, to_leader));
        Self::role(pod, uid, labels, election, role, treat)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels() -> LabelConfig {
        LabelConfig {
            key: "elector.dev/role".into(),
            leader: "leader".into(),
            follower: "follower".into(),
        }
    }

    fn set(value: &str) -> Option<String> {
        Some(value.to_owned())
    }

    #[test]
    fn a_leader_patch_names_only_the_operators_keys() {
        let since: Timestamp = "2026-11-21T10:00:00Z".parse().expect("timestamp");
        let role = PodRole::Leader {
            fencing_token: 7,
            since,
        };
        let p = PodPatch::role("web-1", "u1", &labels(), "web", role, Annotations::Write);
        assert_eq!((p.pod.as_str(), p.uid.as_str()), ("web-1", "u1"));
        assert_eq!(
            p.labels,
            BTreeMap::from([("elector.dev/role".to_owned(), set("leader"))])
        );
        assert_eq!(
            p.annotations,
            BTreeMap::from([
                (FENCING_TOKEN_ANNOTATION.to_owned(), set("7")),
                (
                    LEADER_SINCE_ANNOTATION.to_owned(),
                    set("2026-11-21T10:00:00Z")
                ),
                (ELECTION_ANNOTATION.to_owned(), set("web")),
                (HANDOVER_ANNOTATION.to_owned(), None),
                ("fencing-token.elector.dev/role".to_owned(), set("7")),
            ])
        );
    }

    #[test]
    fn a_follower_loses_the_leader_annotations_and_no_role_loses_everything() {
        let follower = PodPatch::role(
            "p",
            "u1",
            &labels(),
            "web",
            PodRole::Follower,
            Annotations::Write,
        );
        assert_eq!(follower.labels["elector.dev/role"], set("follower"));
        assert_eq!(follower.annotations[FENCING_TOKEN_ANNOTATION], None);
        assert_eq!(follower.annotations[ELECTION_ANNOTATION], set("web"));
        let none = PodPatch::role(
            "p",
            "u1",
            &labels(),
            "web",
            PodRole::None,
            Annotations::Write,
        );
        assert_eq!(none.labels["elector.dev/role"], None);
        assert!(none.annotations.values().all(Option::is_none));
    }

    #[test]
    fn another_elections_annotations_are_kept_or_given_up_never_written() {
        let kept = PodPatch::role(
            "p",
            "u1",
            &labels(),
            "web",
            PodRole::Follower,
            Annotations::Keep,
        );
        assert_eq!(kept.labels["elector.dev/role"], set("follower"));
        // The label key's token annotation goes with the label, whatever the shared ones do.
        let own = label_token_annotation("elector.dev/role");
        assert_eq!(kept.annotations.keys().collect::<Vec<_>>(), [&own]);
        assert_eq!(kept.annotations[&own], None);
        let given_up = PodPatch::role(
            "p",
            "u1",
            &labels(),
            "web",
            PodRole::Follower,
            Annotations::GiveUp,
        );
        assert!(given_up.annotations.values().all(Option::is_none));
        assert!(!given_up.annotations.contains_key(HANDOVER_ANNOTATION));
        let since: Timestamp = "2026-11-21T10:00:00Z".parse().expect("timestamp");
        let role = PodRole::Leader {
            fencing_token: 9,
            since,
        };
        let kept_leader = PodPatch::role("p", "u1", &labels(), "web", role, Annotations::Keep);
        assert_eq!(
            kept_leader.annotations,
            BTreeMap::from([(own, set("9"))]),
            "a pod another election leads still carries this one's token"
        );
    }

    #[test]
    fn actions_that_patch_a_pod_make_their_patch_and_the_others_none() {
        let shared_leader = |_: &str, _: bool| {
            Some(SharedPod {
                foreign_owner_leads: Some(true),
                owned_by_me: false,
                led_by_another: false,
            })
        };
        let follower = Action::LabelFollower {
            pod: "p".into(),
            uid: "u1".into(),
        };
        let patch = PodPatch::of(&follower, &labels(), "web", shared_leader).expect("a patch");
        // Another election leads the pod and owns its annotations: they stay its own.
        assert!(
            patch
                .annotations
                .keys()
                .all(|key| *key == label_token_annotation("elector.dev/role"))
        );
        let unknown = PodPatch::of(&follower, &labels(), "web", |_, _| None).expect("a patch");
        assert_eq!(unknown.annotations[ELECTION_ANNOTATION], set("web"));
        let clear = Action::ClearHandover {
            pod: "p".into(),
            uid: "u1".into(),
        };
        assert_eq!(
            PodPatch::of(&clear, &labels(), "web", shared_leader),
            Some(PodPatch::handover("p", "u1", None))
        );
        assert_eq!(
            PodPatch::of(&Action::ForgetSession, &labels(), "web", shared_leader),
            None
        );
    }
}
