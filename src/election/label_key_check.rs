//! A label key that the candidate pods' own controller selects on. A ReplicaSet, StatefulSet,
//! DaemonSet or Job owns the pods its selector matches: if the operator wrote the election's
//! role under one of the selector's keys, the controller would stop owning the pod, create a
//! replacement, and the operator would label that one too, without end. Such a spec is
//! refused: the election writes nothing to any pod and Consul, and `SpecValid` is `False`
//! with reason [`SELECTED_BY_OWNER`], naming the owner, until the key changes.
//!
//! The owners' selectors are read by the controller (one GET per owner, cached by the owner's
//! UID: the selectors of these kinds are immutable); the decision is [`check_label_key`].
//! An owner whose selector cannot be read (the operator's role lacks `get` on its kind, or
//! the API server did not answer) does not stop the election: the key is then unchecked
//! against that owner, which `SpecValid` (still `True`) says with reason [`UNCHECKED`].

use std::collections::BTreeSet;

use super::plan::ConditionState;
use crate::crd::conditions::{SELECTED_BY_OWNER, SPEC_VALID};

/// The `SpecValid` reason of a valid spec whose label key could not be checked against the
/// selector of every pod's controller.
pub const UNCHECKED: &str = "OwnerSelectorUnknown";

/// What the operator knows of the label keys an owner's selector uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SelectedKeys {
    /// The keys of its `matchLabels` and `matchExpressions` (empty when the owner is gone).
    Known(BTreeSet<String>),
    /// Its selector could not be read: why, in a few words (`forbidden`, `timed out`, ...).
    Unknown(String),
}

/// A candidate pod's controller (its owner reference with `controller: true`) and what its
/// selector uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnedPod {
    /// The pod's name.
    pub pod: String,
    /// The owner's kind (`ReplicaSet`, `StatefulSet`, `DaemonSet`, `Job`).
    pub kind: String,
    /// The owner's `namespace/name`.
    pub owner: String,
    /// The label keys its selector uses.
    pub keys: SelectedKeys,
}

impl OwnedPod {
    fn named(&self) -> String {
        format!("{} {} (owner of pod {})", self.kind, self.owner, self.pod)
    }
}

/// Whether an election may write `label_key` on pods whose controllers are `pods` (in a
/// deterministic order, e.g. by pod name): the `SpecValid` condition to report, `status` false
/// when the key is refused. The first refusing owner is named, with how many others refuse.
pub fn check_label_key(label_key: &str, pods: &[OwnedPod]) -> ConditionState {
    let selects =
        |p: &&OwnedPod| matches!(&p.keys, SelectedKeys::Known(keys) if keys.contains(label_key));
    let mut refusing = pods.iter().filter(selects);
    if let Some(first) = refusing.next() {
        let others: BTreeSet<&str> = refusing
            .map(|p| p.owner.as_str())
            .filter(|o| *o != first.owner)
            .collect();
        let more = match others.len() {
            0 => String::new(),
            n => format!(" and {n} other owner(s) of candidate pods"),
        };
        return ConditionState {
            type_: SPEC_VALID,
            status: false,
            reason: SELECTED_BY_OWNER,
            message: format!(
                "spec.labels.key {label_key:?} is in the selector of {}{more}: labelling \
                 the pod under that key would make its controller disown it and create \
                 another; choose a key no controller of these pods selects (the default is \
                 elector.dev/role)",
                first.named()
            ),
        };
    }
    let unknown = pods.iter().find_map(|p| match &p.keys {
        SelectedKeys::Unknown(why) => Some((p, why)),
        SelectedKeys::Known(_) => None,
    });
    match unknown {
        Some((pod, why)) => ConditionState {
            type_: SPEC_VALID,
            status: true,
            reason: UNCHECKED,
            message: format!(
                "the spec is valid, but spec.labels.key {label_key:?} could not be checked \
                 against the selector of {} ({why}); the operator needs get on that kind",
                pod.named()
            ),
        },
        None => ConditionState {
            type_: SPEC_VALID,
            status: true,
            reason: "Valid",
            message: "the spec is valid".into(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owned(pod: &str, owner: &str, keys: &[&str]) -> OwnedPod {
        OwnedPod {
            pod: pod.into(),
            kind: "ReplicaSet".into(),
            owner: format!("shop/{owner}"),
            keys: SelectedKeys::Known(keys.iter().map(|k| (*k).to_owned()).collect()),
        }
    }

    fn unknown(pod: &str, owner: &str) -> OwnedPod {
        OwnedPod {
            keys: SelectedKeys::Unknown("forbidden".into()),
            ..owned(pod, owner, &[])
        }
    }

    #[test]
    fn a_key_the_owner_selects_is_refused_naming_the_owner_and_the_pod() {
        let pods = [
            owned("web-7d9c-a", "web-7d9c", &["app", "pod-template-hash"]),
            owned("web-7d9c-b", "web-7d9c", &["app", "pod-template-hash"]),
        ];
        let check = check_label_key("app", &pods);
        assert!(!check.status);
        assert_eq!(check.reason, SELECTED_BY_OWNER);
        assert!(
            check.message.starts_with(
                "spec.labels.key \"app\" is in the selector of ReplicaSet shop/web-7d9c \
                 (owner of pod web-7d9c-a):"
            ),
            "{}",
            check.message
        );
        let hash = check_label_key("pod-template-hash", &pods);
        assert_eq!(hash.reason, SELECTED_BY_OWNER);
    }

    #[test]
    fn other_refusing_owners_are_counted() {
        let pods = [
            owned("a", "one", &["tier"]),
            owned("b", "two", &["tier"]),
            owned("c", "two", &["tier"]),
            owned("d", "three", &["app"]),
        ];
        let check = check_label_key("tier", &pods);
        assert!(
            check
                .message
                .contains("shop/one (owner of pod a) and 1 other owner(s)"),
            "{}",
            check.message
        );
    }

    #[test]
    fn a_key_no_owner_selects_is_valid() {
        let pods = [owned("a", "one", &["app"])];
        let check = check_label_key("elector.dev/role", &pods);
        assert_eq!((check.status, check.reason), (true, "Valid"));
        let none = check_label_key("app", &[]);
        assert_eq!(
            (none.status, none.reason),
            (true, "Valid"),
            "pods without a controller"
        );
    }

    #[test]
    fn an_unreadable_selector_leaves_the_spec_valid_but_says_so() {
        let pods = [owned("a", "one", &["app"]), unknown("b", "two")];
        let check = check_label_key("elector.dev/role", &pods);
        assert_eq!((check.status, check.reason), (true, UNCHECKED));
        assert!(
            check
                .message
                .contains("shop/two (owner of pod b) (forbidden)"),
            "{}",
            check.message
        );
    }

    #[test]
    fn a_known_refusal_wins_over_an_unknown_owner() {
        let pods = [unknown("a", "one"), owned("b", "two", &["app"])];
        let check = check_label_key("app", &pods);
        assert_eq!((check.status, check.reason), (false, SELECTED_BY_OWNER));
        assert!(
            check.message.contains("shop/two (owner of pod b)"),
            "{}",
            check.message
        );
    }
}
