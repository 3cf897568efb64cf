//! Two elections that select the same pod with the same label key would fight over its
//! label. The younger one (created later; on a tie, the greater name) reports `Conflict` and
//! writes nothing; if it led when the overlap began, it withdraws (labels, key, session).
//!
//! `creationTimestamp` has one-second resolution, so elections created in the same second
//! are ordered by name (unique within the namespace, which is the scope of every
//! comparison): the order never depends on which election is looked at first.
//!
//! Yielding is decided pairwise: an election yields to every older election it overlaps,
//! even one that itself yields to a third. In a chain A-B-C (A overlaps B, B overlaps C,
//! A and C disjoint), B and C both stand back and only A acts. Letting C act because B
//! stands back would make C's labels depend on how fast B withdraws from the pods they
//! share; the pairwise rule depends on the claims only.

use jiff::Timestamp;

/// What an election claims: the pods its selector matches, under one label key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    /// Election name (same namespace as every other claim compared).
    pub name: String,
    /// Creation time of the election.
    pub created_at: Timestamp,
    /// The label key it writes.
    pub label_key: String,
    /// UIDs of the pods its selector matches.
    pub pods: Vec<String>,
}

impl Claim {
    fn is_older_than(&self, other: &Claim) -> bool {
        (self.created_at, &self.name) < (other.created_at, &other.name)
    }

    fn overlaps(&self, other: &Claim) -> bool {
        self.label_key == other.label_key && self.pods.iter().any(|p| other.pods.contains(p))
    }
}

/// The oldest claim that conflicts with `me` and is older than it, if any: then `me` must
/// stand back. Claims with `me`'s own name are ignored.
pub fn yields_to<'a>(me: &Claim, others: &'a [Claim]) -> Option<&'a Claim> {
    others
        .iter()
        .filter(|o| o.name != me.name && o.overlaps(me) && o.is_older_than(me))
        .min_by(|a, b| (a.created_at, &a.name).cmp(&(b.created_at, &b.name)))
}

/// The claims that conflict with `me` and are younger: the elections that yield to `me`,
/// whose leader labels `me` waits to see gone before it acts. Claims with `me`'s own name are
/// ignored.
pub fn yielding_to_me<'a>(me: &Claim, others: &'a [Claim]) -> Vec<&'a Claim> {
    others
        .iter()
        .filter(|o| o.name != me.name && o.overlaps(me) && me.is_older_than(o))
        .collect()
}

/// A leader label under an election's key on a pod that an election yielding to it selects
/// (or that election's own label, wherever it is), for [`label_to_wait_for`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct YieldingLabel {
    /// The pod's name.
    pub pod: String,
    /// The election that wrote the label ([`labelled_by`]).
    pub writer: String,
    /// Whether that election yields itself (to whichever older election it overlaps): then it
    /// withdraws the label.
    pub writer_yields: bool,
    /// Whether that election's selector matches the pod: when it no longer does, the election
    /// takes the label off at its next reconcile.
    pub writer_selects: bool,
}

/// The leader label `me` waits to see gone before it acts, if any: one on the pods of an
/// election that yields to `me` (`labels`), written by an election other than `me` that takes
/// it off: one that yields, or that no longer selects the pod. That is the yielding election's
/// own label; in a chain A-B-C, C's label on a pod B shares with C; or the label an election
/// left on a pod its selector stopped matching. Until it goes, a Service selecting B's pods
/// would reach it and the leader A is about to label. A label an election that acts keeps on a
/// pod it selects is never waited for, as it does not go (B, overlapping two elections that
/// act, reports `Conflict` either way).
pub fn label_to_wait_for<'a>(me: &str, labels: &'a [YieldingLabel]) -> Option<&'a YieldingLabel> {
    labels
        .iter()
        .find(|l| l.writer != me && (l.writer_yields || !l.writer_selects))
}

/// An election that may have written a label, for [`labelled_by`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Writer {
    /// Election name.
    pub name: String,
    /// Creation time of the election.
    pub created_at: Timestamp,
}

/// Whether the election `me` counts as the writer of the label under its key on a pod. The
/// pod names one election in its annotations (`elector.dev/election`), and a pod shared by
/// elections with different label keys names only one of them, so the annotations alone
/// cannot say which of two elections writing the same key labelled it:
/// - `owned_by_me`: the annotations name `me`: yes;
/// - `same_key_owner`: another live election writing `me`'s key owns the annotations: the
///   label is that one's;
/// - `selecting`: the live elections writing `me`'s key that select the pod (`me` among them
///   if it does): the conflict rules let only the oldest of them act on the pod, so the label
///   is the oldest one's, and an election that yields or is deleted never takes off a label
///   of the one that acts (nor does the one that acts take its labels for another's);
/// - nobody live selects it: any election writing the key that finds it there
///   (`carries`) counts, so that a label left on a pod no election selects any more is
///   taken off.
pub fn labelled_by(
    me: &str,
    owned_by_me: bool,
    same_key_owner: bool,
    selecting: &[Writer],
    carries: bool,
) -> bool {
    if owned_by_me {
        return true;
    }
    if same_key_owner || !carries {
        return false;
    }
    selecting
        .iter()
        .min_by(|a, b| (a.created_at, &a.name).cmp(&(b.created_at, &b.name)))
        .is_none_or(|oldest| oldest.name == me)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(name: &str, secs: i64, key: &str, pods: &[&str]) -> Claim {
        Claim {
            name: name.into(),
            created_at: Timestamp::from_second(secs).expect("valid"),
            label_key: key.into(),
            pods: pods.iter().map(|p| (*p).to_owned()).collect(),
        }
    }

    #[test]
    fn an_election_waits_for_the_labels_of_yielding_elections_only() {
        let label = |pod: &str, writer: &str, writer_yields, writer_selects| YieldingLabel {
            pod: pod.into(),
            writer: writer.into(),
            writer_yields,
            writer_selects,
        };
        // Its own label on a yielding election's pod, and one of an election that acts.
        let acting = [label("p1", "a", false, true), label("p2", "d", false, true)];
        assert_eq!(label_to_wait_for("a", &acting), None);
        // The yielding election's own label, or one further down the chain.
        let chain = [label("p1", "a", false, true), label("p2", "c", true, true)];
        assert_eq!(label_to_wait_for("a", &chain), Some(&chain[1]));
        // One left by an election that acts, on a pod it no longer selects.
        let left = [
            label("p1", "a", false, false),
            label("p2", "d", false, false),
        ];
        assert_eq!(label_to_wait_for("a", &left), Some(&left[1]));
    }

    #[test]
    fn the_younger_of_two_overlapping_elections_yields() {
        let a = claim("a", 10, "elector.dev/role", &["p1", "p2"]);
        let b = claim("b", 20, "elector.dev/role", &["p2", "p3"]);
        let all = [a.clone(), b.clone()];
        assert_eq!(yields_to(&b, &all).map(|c| c.name.as_str()), Some("a"));
        assert_eq!(yields_to(&a, &all), None);
    }

    #[test]
    fn different_label_keys_or_disjoint_pods_do_not_conflict() {
        let a = claim("a", 10, "elector.dev/role", &["p1"]);
        let b = claim("b", 20, "other/role", &["p1"]);
        let c = claim("c", 30, "elector.dev/role", &["p9"]);
        let all = [a, b.clone(), c.clone()];
        assert_eq!(yields_to(&b, &all), None);
        assert_eq!(yields_to(&c, &all), None);
    }

    #[test]
    fn a_chain_of_overlaps_leaves_only_the_oldest_acting_whatever_the_order() {
        let a = claim("a", 10, "k", &["p1"]);
        let b = claim("b", 20, "k", &["p1", "p2"]);
        let c = claim("c", 30, "k", &["p2"]);
        let orders = [
            [a.clone(), b.clone(), c.clone()],
            [c.clone(), b.clone(), a.clone()],
            [b.clone(), c.clone(), a.clone()],
        ];
        for all in &orders {
            assert_eq!(yields_to(&a, all), None);
            assert_eq!(yields_to(&b, all).map(|c| c.name.as_str()), Some("a"));
            assert_eq!(yields_to(&c, all).map(|c| c.name.as_str()), Some("b"));
        }
    }

    #[test]
    fn the_older_of_two_overlapping_elections_sees_the_younger_yield_to_it() {
        let a = claim("a", 10, "k", &["p1"]);
        let b = claim("b", 20, "k", &["p1", "p2"]);
        let c = claim("c", 30, "k", &["p2"]);
        let d = claim("d", 40, "other", &["p1"]);
        let all = [a.clone(), b.clone(), c.clone(), d];
        let names = |v: Vec<&Claim>| v.into_iter().map(|c| c.name.clone()).collect::<Vec<_>>();
        assert_eq!(names(yielding_to_me(&a, &all)), ["b"]);
        assert_eq!(names(yielding_to_me(&b, &all)), ["c"]);
        assert!(yielding_to_me(&c, &all).is_empty());
    }

    #[test]
    fn same_creation_time_is_broken_by_name() {
        let a = claim("a", 10, "k", &["p"]);
        let b = claim("b", 10, "k", &["p"]);
        let all = [a.clone(), b.clone()];
        assert_eq!(yields_to(&b, &all).map(|c| c.name.as_str()), Some("a"));
        assert_eq!(yields_to(&a, &all), None);
    }
    fn writer(name: &str, secs: i64) -> Writer {
        Writer {
            name: name.into(),
            created_at: Timestamp::from_second(secs).expect("valid"),
        }
    }

    #[test]
    fn a_label_is_the_owners_then_the_oldest_selecting_elections() {
        let both = [writer("young", 20), writer("old", 10)];
        // The annotations name it.
        assert!(labelled_by("young", true, false, &both, true));
        // Another election writing the same key owns the annotations.
        assert!(!labelled_by("young", false, true, &[], true));
        // Annotations of an election with another key (or none): the oldest selecting one's.
        assert!(labelled_by("old", false, false, &both, true));
        assert!(!labelled_by("young", false, false, &both, true));
        // A pod that only the younger one selects now: its label.
        assert!(labelled_by("young", false, false, &both[..1], true));
        assert!(!labelled_by("old", false, false, &both[..1], true));
        // Nobody selects it: anyone writing the key may take it off.
        assert!(labelled_by("young", false, false, &[], true));
        assert!(labelled_by("old", false, false, &[], true));
        // Without the key's label there is nothing to take.
        assert!(!labelled_by("old", false, false, &both, false));
    }

    #[test]
    fn the_writer_of_a_label_does_not_depend_on_the_order_of_the_elections() {
        let tie = [writer("b", 10), writer("a", 10)];
        let reversed = [writer("a", 10), writer("b", 10)];
        for selecting in [&tie, &reversed] {
            assert!(labelled_by("a", false, false, selecting, true));
            assert!(!labelled_by("b", false, false, selecting, true));
        }
    }
}
