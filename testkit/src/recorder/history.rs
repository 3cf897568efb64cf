//! Pure replay of a recorded pod history: the namespace's pods as of every
//! resourceVersion, who carried a label at the same time, how a label changed.
//!
//! Input order does not matter: versions are replayed sorted by resourceVersion (stably,
//! so equal resourceVersions keep their recorded order). A removal (`Deleted`,
//! `Vanished`) only removes the incarnation it names (same uid), so a stale removal can
//! never delete a re-created pod of the same name.

use std::collections::BTreeMap;

use super::version::PodVersion;

/// The pods that exist at one point of the replay, by name.
pub type PodSet<'a> = BTreeMap<&'a str, &'a PodVersion>;

/// Replays `versions` in resourceVersion order and calls `visit` once per distinct
/// resourceVersion, after applying every version carrying it.
pub fn replay<'a>(versions: &'a [PodVersion], mut visit: impl FnMut(u64, &PodSet<'a>)) {
    let sorted = sorted(versions);
    let mut pods = PodSet::new();
    for (i, version) in sorted.iter().enumerate() {
        let name = version.name.as_str();
        match after(pods.get(name).copied(), version) {
            Some(current) => pods.insert(name, current),
            None => pods.remove(name),
        };
        let last_of_group = sorted
            .get(i + 1)
            .is_none_or(|next| next.resource_version != version.resource_version);
        if last_of_group {
            visit(version.resource_version, &pods);
        }
    }
}

/// The pods that exist after the whole history, by name.
pub fn current(versions: &[PodVersion]) -> BTreeMap<String, PodVersion> {
    let mut state = BTreeMap::new();
    replay(versions, |_, pods| {
        state = pods
            .iter()
            .map(|(name, version)| (name.to_string(), (*version).clone()))
            .collect();
    });
    state
}

/// Two or more pods carrying one label value at one resourceVersion.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Overlap {
    /// The first resourceVersion at which it happened.
    pub resource_version: u64,
    /// The pods carrying the label then.
    pub pods: Vec<String>,
}

/// The largest number of pods (among those `filter` accepts) that carried `key=value`
/// at one resourceVersion.
pub fn max_simultaneous(
    versions: &[PodVersion],
    key: &str,
    value: &str,
    filter: impl Fn(&PodVersion) -> bool,
) -> usize {
    let mut max = 0;
    replay(versions, |_, pods| {
        max = max.max(carriers(pods, key, value, &filter).count());
    });
    max
}

/// The first resourceVersion at which two or more pods (among those `filter` accepts)
/// carried `key=value`.
pub fn first_overlap(
    versions: &[PodVersion],
    key: &str,
    value: &str,
    filter: impl Fn(&PodVersion) -> bool,
) -> Option<Overlap> {
    let mut overlap = None;
    replay(versions, |resource_version, pods| {
        let names: Vec<String> = carriers(pods, key, value, &filter)
            .map(str::to_string)
            .collect();
        if overlap.is_none() && names.len() >= 2 {
            overlap = Some(Overlap {
                resource_version,
                pods: names,
            });
        }
    });
    overlap
}

/// One change of a value seen on the pods of one name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HistoryStep {
    /// The resourceVersion at which the change became visible.
    pub resource_version: u64,
    /// The incarnation that carried the value; `None` while no pod of that name exists.
    pub uid: Option<String>,
    /// The value; `None` when absent (or when no pod of that name exists).
    pub value: Option<String>,
}

/// How the value `value_of` reads changed on the pods named `pod`, one step per change
/// of (incarnation, value).
pub fn timeline(
    versions: &[PodVersion],
    pod: &str,
    value_of: impl Fn(&PodVersion) -> Option<&String>,
) -> Vec<HistoryStep> {
    let mut steps: Vec<HistoryStep> = Vec::new();
    let mut current = None;
    for version in sorted(versions).into_iter().filter(|v| v.name == pod) {
        current = after(current, version);
        let step = HistoryStep {
            resource_version: version.resource_version,
            uid: current.map(|v| v.uid.clone()),
            value: current.and_then(&value_of).cloned(),
        };
        let changed = steps
            .last()
            .is_none_or(|last| (&last.uid, &last.value) != (&step.uid, &step.value));
        if changed {
            steps.push(step);
        }
    }
    steps
}

/// The values of a timeline with consecutive duplicates collapsed. A deleted pod shows
/// as `None`, which is what separates incarnations of one name.
pub fn values(steps: &[HistoryStep]) -> Vec<Option<String>> {
    let mut values: Vec<Option<String>> = steps.iter().map(|step| step.value.clone()).collect();
    values.dedup();
    values
}

fn sorted(versions: &[PodVersion]) -> Vec<&PodVersion> {
    let mut sorted: Vec<&PodVersion> = versions.iter().collect();
    sorted.sort_by_key(|v| v.resource_version);
    sorted
}

/// The incarnation of a name after `version` is applied to `current`.
fn after<'a>(current: Option<&'a PodVersion>, version: &'a PodVersion) -> Option<&'a PodVersion> {
    if !version.removes() {
        Some(version)
    } else if current.is_some_and(|c| c.uid == version.uid) {
        None
    } else {
        current
    }
}

fn carriers<'a, 'p>(
    pods: &'p PodSet<'a>,
    key: &'p str,
    value: &'p str,
    filter: &'p impl Fn(&PodVersion) -> bool,
) -> impl Iterator<Item = &'a str> + 'p {
    pods.iter()
        .filter(move |(_, v)| v.has_label(key, value) && filter(v))
        .map(|(name, _)| *name)
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::super::version::PodEvent::{self, *};
    use super::*;

    fn version(name: &str, uid: &str, rv: u64, event: PodEvent, role: Option<&str>) -> PodVersion {
        PodVersion {
            name: name.into(),
            uid: uid.into(),
            resource_version: rv,
            event,
            labels: role
                .map(|r| ("role".to_string(), r.to_string()))
                .into_iter()
                .collect(),
            annotations: BTreeMap::new(),
            ready: true,
            deleting: false,
            at: Instant::now(),
        }
    }

    fn leaders(history: &[PodVersion]) -> usize {
        max_simultaneous(history, "role", "leader", |_| true)
    }

    /// Leadership moves a → b in the safe order: a off, then b on.
    fn safe_move() -> Vec<PodVersion> {
        vec![
            version("a", "ua", 10, InitialList, Some("leader")),
            version("b", "ub", 11, InitialList, Some("follower")),
            version("a", "ua", 12, Modified, Some("follower")),
            version("b", "ub", 13, Modified, Some("leader")),
        ]
    }

    #[test]
    fn safe_order_never_has_two() {
        let history = safe_move();
        assert_eq!(leaders(&history), 1);
        assert_eq!(first_overlap(&history, "role", "leader", |_| true), None);
        let role = |v: &PodVersion| v.labels.get("role").cloned();
        let now: Vec<_> = current(&history).values().map(role).collect();
        assert_eq!(now, [Some("follower".into()), Some("leader".into())]);
    }

    #[test]
    fn bad_order_is_caught_at_its_resource_version() {
        let mut history = safe_move();
        history[2].resource_version = 14; // b on (13) before a off (14)
        assert_eq!(leaders(&history), 2);
        assert_eq!(
            first_overlap(&history, "role", "leader", |_| true),
            Some(Overlap {
                resource_version: 13,
                pods: vec!["a".into(), "b".into()],
            })
        );
    }

    #[test]
    fn out_of_order_input_is_sorted() {
        let mut history = safe_move();
        history.reverse();
        assert_eq!(leaders(&history), 1);
        let steps = timeline(&history, "a", |v| v.labels.get("role"));
        assert_eq!(
            values(&steps),
            [Some("leader".into()), Some("follower".into())]
        );
    }

    #[test]
    fn filter_limits_the_count_to_one_election() {
        let mut history = safe_move();
        history.push(version("x", "ux", 20, Added, Some("leader")));
        history[4].labels.insert("app".into(), "other".into());
        assert_eq!(leaders(&history), 2);
        let web_only = |v: &PodVersion| !v.labels.contains_key("app");
        assert_eq!(max_simultaneous(&history, "role", "leader", web_only), 1);
    }

    #[test]
    fn deleted_pod_stops_counting() {
        let history = vec![
            version("a", "ua", 1, Added, Some("leader")),
            // DELETED carries the last state (still labelled) at the new resourceVersion.
            version("a", "ua", 2, Deleted, Some("leader")),
            version("b", "ub", 3, Added, Some("leader")),
        ];
        assert_eq!(leaders(&history), 1);
        assert!(current(&history).keys().eq(["b"]));
    }

    #[test]
    fn recreated_pod_is_a_new_incarnation() {
        let history = vec![
            version("a", "u1", 1, Added, Some("leader")),
            version("a", "u1", 2, Deleted, Some("leader")),
            version("a", "u2", 3, Added, Some("leader")),
            version("a", "u2", 4, Modified, Some("follower")),
        ];
        let steps = timeline(&history, "a", |v| v.labels.get("role"));
        let uids: Vec<_> = steps.iter().map(|s| s.uid.as_deref()).collect();
        assert_eq!(uids, [Some("u1"), None, Some("u2"), Some("u2")]);
        assert_eq!(
            values(&steps),
            [
                Some("leader".into()),
                None,
                Some("leader".into()),
                Some("follower".into())
            ]
        );
        assert_eq!(leaders(&history), 1);
    }

    #[test]
    fn stale_removal_does_not_remove_a_newer_incarnation() {
        let history = vec![
            version("a", "u1", 1, Added, Some("leader")),
            version("a", "u2", 5, InitialList, Some("leader")),
            // Recorded after a gap: u1 vanished, at the new incarnation's resourceVersion.
            version("a", "u1", 5, Vanished, Some("leader")),
        ];
        assert_eq!(current(&history)["a"].uid, "u2");
        assert_eq!(leaders(&history), 1);
    }

    #[test]
    fn duplicates_collapse_and_missing_label_is_none() {
        let history = vec![
            version("a", "ua", 1, Added, None),
            version("a", "ua", 2, Modified, None),
            version("a", "ua", 3, Modified, Some("follower")),
            version("a", "ua", 4, Modified, Some("follower")),
            version("a", "ua", 5, Modified, None),
        ];
        let steps = timeline(&history, "a", |v| v.labels.get("role"));
        assert_eq!(steps.len(), 3);
        assert_eq!(values(&steps), [None, Some("follower".into()), None]);
        assert!(timeline(&history, "nobody", |v| v.labels.get("role")).is_empty());
    }
}
