//! Which blocking query watches a key: the scopes of the lock watcher's groups and how they
//! are merged when one Consul address would otherwise hold too many long polls. Pure: no
//! I/O, no clock.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;

/// What one blocking query reads.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) enum Scope {
    /// Every key starting with this string (a recursive read; Consul's prefixes are plain
    /// string prefixes, not path segments).
    Prefix(String),
    /// One key without a `/` (a single-key read).
    Key(String),
}

impl Scope {
    /// The narrowest scope a key is watched through: its first two path segments when it has
    /// at least three (`elector/shop/web/leader` through `elector/shop/`), its first segment
    /// when it has two (`custom/web` through `custom/`), and the key itself without a `/`.
    pub(super) fn finest(key: &str) -> Scope {
        let mut slashes = key.match_indices('/').map(|(at, _)| at);
        match (slashes.next(), slashes.next()) {
            (_, Some(second)) => Scope::Prefix(key[..=second].to_owned()),
            (Some(first), None) => Scope::Prefix(key[..=first].to_owned()),
            (None, None) => Scope::Key(key.to_owned()),
        }
    }

    /// Whether this scope's reads return `key`.
    pub(super) fn covers(&self, key: &str) -> bool {
        match self {
            Scope::Prefix(prefix) => key.starts_with(prefix.as_str()),
            Scope::Key(watched) => watched == key,
        }
    }
}

/// The prefix in `prefixes` that `key` starts with. `prefixes` must be prefix-free (no
/// member starts with another), which [`absorbed_by`] keeps true: then the only candidate
/// is the greatest member not above `key`.
pub(super) fn covering<'a>(prefixes: &'a BTreeSet<String>, key: &str) -> Option<&'a String> {
    prefixes
        .range::<str, _>((Bound::Unbounded, Bound::Included(key)))
        .next_back()
        .filter(|prefix| key.starts_with(prefix.as_str()))
}

/// The members of `prefixes` that a group on `prefix` replaces: those starting with it.
pub(super) fn absorbed_by(prefixes: &BTreeSet<String>, prefix: &str) -> Vec<String> {
    prefixes
        .range::<str, _>((Bound::Included(prefix), Bound::Unbounded))
        .take_while(|candidate| candidate.starts_with(prefix))
        .cloned()
        .collect()
}

/// Where to merge so that `new` (weighing 1) can be watched without one more query, given
/// the prefix of each group and its weight (its elections): among the prefixes shared by two
/// neighbours (in key order), the one whose group would weigh least, the longest on a tie.
/// A merge of close neighbours widens a group the least, and weighing keeps the groups
/// even, so every answer stays as small as the budget allows. `None` when no two of them
/// share their first path segment (a merge never reads a whole different root, let alone
/// the whole KV store).
pub(super) fn merge_point(groups: &BTreeMap<String, usize>, new: &str) -> Option<String> {
    let mut all: Vec<(&str, usize)> = groups.iter().map(|(p, w)| (p.as_str(), *w)).collect();
    if let Err(at) = all.binary_search_by(|(prefix, _)| (*prefix).cmp(new)) {
        all.insert(at, (new, 1));
    }
    let weight_under = |shared: &str| -> usize {
        let first = all.partition_point(|(prefix, _)| *prefix < shared);
        all[first..]
            .iter()
            .take_while(|(prefix, _)| prefix.starts_with(shared))
            .map(|(_, weight)| weight)
            .sum()
    };
    all.windows(2)
        .map(|pair| common_prefix(pair[0].0, pair[1].0))
        .filter(|shared| shared.contains('/'))
        .map(|shared| {
            (
                weight_under(shared),
                std::cmp::Reverse(shared.len()),
                shared,
            )
        })
        .min()
        .map(|(_, _, shared)| shared.to_owned())
}

/// The longest common prefix of `a` and `b`, ending on a character boundary.
fn common_prefix<'a>(a: &'a str, b: &str) -> &'a str {
    let end = a
        .char_indices()
        .zip(b.chars())
        .find(|((_, x), y)| x != y)
        .map_or(a.len().min(b.len()), |((at, _), _)| at);
    &a[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn weighed(groups: &[(&str, usize)]) -> BTreeMap<String, usize> {
        groups.iter().map(|(p, w)| ((*p).to_owned(), *w)).collect()
    }

    fn set(prefixes: &[&str]) -> BTreeSet<String> {
        prefixes.iter().map(|p| (*p).to_owned()).collect()
    }

    #[test]
    fn keys_are_watched_through_their_first_two_segments() {
        let prefix = |p: &str| Scope::Prefix(p.to_owned());
        assert_eq!(
            Scope::finest("elector/shop/web/leader"),
            prefix("elector/shop/")
        );
        assert_eq!(Scope::finest("a/b/"), prefix("a/b/"));
        assert_eq!(Scope::finest("custom/web"), prefix("custom/"));
        assert_eq!(Scope::finest("a/"), prefix("a/"));
        assert_eq!(Scope::finest("leader"), Scope::Key("leader".to_owned()));
        assert!(prefix("elector/ns-1").covers("elector/ns-12/a/leader"));
        assert!(!prefix("elector/ns-1/").covers("elector/ns-12/a/leader"));
        assert!(!Scope::Key("leader".to_owned()).covers("leader/x"));
    }

    #[test]
    fn the_covering_prefix_is_found_in_a_prefix_free_set() {
        let prefixes = set(&["elector/a/", "elector/ns-1", "elector/ns-2/", "other/"]);
        let cover = |key| covering(&prefixes, key).map(String::as_str);
        assert_eq!(cover("elector/ns-17/x/leader"), Some("elector/ns-1"));
        assert_eq!(cover("elector/ns-2/x/leader"), Some("elector/ns-2/"));
        assert_eq!(cover("elector/ns-20/x/leader"), None);
        assert_eq!(cover("elector/b/x/leader"), None);
        assert_eq!(cover("other/z"), Some("other/"));
        assert_eq!(
            absorbed_by(&prefixes, "elector/ns-"),
            vec!["elector/ns-1".to_owned(), "elector/ns-2/".to_owned()]
        );
        assert_eq!(absorbed_by(&prefixes, "elector/c"), Vec::<String>::new());
    }

    #[test]
    fn merges_happen_between_the_closest_neighbours_within_a_root() {
        let groups = weighed(&[
            ("elector/alpha/", 1),
            ("elector/beta/", 1),
            ("elector/shop-1/", 1),
        ]);
        assert_eq!(
            merge_point(&groups, "elector/shop-2/").as_deref(),
            Some("elector/shop-")
        );
        assert_eq!(
            merge_point(&groups, "elector/gamma/").as_deref(),
            Some("elector/")
        );
        // The lighter merge wins over the longer prefix.
        let heavy = weighed(&[
            ("elector/ab", 50),
            ("elector/abc/", 50),
            ("elector/x1/", 2),
            ("elector/x2/", 2),
        ]);
        assert_eq!(
            merge_point(&heavy, "elector/z/").as_deref(),
            Some("elector/x")
        );
        // Another root shares nothing with these.
        let roots = weighed(&[("a/x/", 1), ("b/y/", 1)]);
        assert_eq!(merge_point(&roots, "c/z/"), None);
        assert_eq!(merge_point(&roots, "a/w/").as_deref(), Some("a/"));
        // Multi-byte characters are never split.
        assert_eq!(common_prefix("k/é", "k/è"), "k/");
    }

    /// How evenly merging spreads 1,000 namespaces of 10 elections over 32 queries.
    #[test]
    fn a_thousand_namespaces_fit_the_budget_in_small_groups() {
        let budget = 32;
        let namespace = |i: usize| format!("elector/ns-{i}/");
        let mut groups: BTreeMap<String, usize> = BTreeMap::new();
        // Arrival in an order unrelated to the names, each namespace's elections together.
        for i in (0..1000).map(|i| (i * 7919) % 1000) {
            for _ in 0..10 {
                let new = namespace(i);
                let prefixes: BTreeSet<String> = groups.keys().cloned().collect();
                if let Some(prefix) = covering(&prefixes, &new) {
                    *groups.entry(prefix.clone()).or_default() += 1;
                    continue;
                }
                let prefix = match groups.len() < budget {
                    true => new.clone(),
                    false => merge_point(&groups, &new).unwrap_or(new.clone()),
                };
                let weight: usize = absorbed_by(&prefixes, &prefix)
                    .iter()
                    .filter_map(|absorbed| groups.remove(absorbed))
                    .sum();
                groups.insert(prefix.clone(), weight);
                if !new.starts_with(&prefix) {
                    groups.insert(new.clone(), 0);
                }
                let own = groups
                    .keys()
                    .rfind(|p| new.starts_with(p.as_str()))
                    .cloned();
                *groups.entry(own.unwrap_or(new)).or_default() += 1;
            }
        }
        assert!(groups.len() <= budget, "{groups:?}");
        assert_eq!(groups.values().sum::<usize>(), 10_000);
        let largest = groups.values().max().copied();
        assert!(largest <= Some(1110), "{largest:?} elections in {groups:?}");
    }
}
