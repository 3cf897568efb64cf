//! The operator's environment variables are named `ELECTOR_*`. Earlier versions named some
//! `CONSUL_ELECTOR_*`; those names are still read when the current one is unset, and the
//! operator warns at start that they are ([`former_in_use`]).

/// Each renamed variable: its current name and the one it had before.
pub const RENAMED: [(&str, &str); 11] = [
    (
        "ELECTOR_ALLOWED_ADDRESSES",
        "CONSUL_ELECTOR_ALLOWED_ADDRESSES",
    ),
    (
        "ELECTOR_ALLOWED_DATACENTERS",
        "CONSUL_ELECTOR_ALLOWED_DATACENTERS",
    ),
    ("ELECTOR_CLUSTER_NAME", "CONSUL_ELECTOR_CLUSTER_NAME"),
    ("ELECTOR_FORMER_NAMES", "CONSUL_ELECTOR_FORMER_NAMES"),
    (
        "ELECTOR_CONSUL_MAX_CONNECTIONS",
        "CONSUL_ELECTOR_MAX_CONNECTIONS",
    ),
    (
        "ELECTOR_CONSUL_REQUEST_TIMEOUT",
        "CONSUL_ELECTOR_REQUEST_TIMEOUT",
    ),
    (
        "ELECTOR_CONSUL_CONNECT_TIMEOUT",
        "CONSUL_ELECTOR_CONNECT_TIMEOUT",
    ),
    (
        "ELECTOR_CONSUL_RETRY_ATTEMPTS",
        "CONSUL_ELECTOR_RETRY_ATTEMPTS",
    ),
    (
        "ELECTOR_CONSUL_RETRY_BASE_DELAY",
        "CONSUL_ELECTOR_RETRY_BASE_DELAY",
    ),
    (
        "ELECTOR_CONSUL_RETRY_MAX_DELAY",
        "CONSUL_ELECTOR_RETRY_MAX_DELAY",
    ),
    (
        "ELECTOR_CREDENTIALS_RELOAD",
        "CONSUL_ELECTOR_CREDENTIALS_RELOAD",
    ),
];

/// The former name of variable `current`, if it was renamed.
pub fn former(current: &str) -> Option<&'static str> {
    RENAMED
        .iter()
        .find(|(now, _)| *now == current)
        .map(|(_, before)| *before)
}

/// The variable to read for `current` through `lookup`: `current` when it is set (not blank),
/// else its former name when that is set; with the name read.
pub fn read(
    lookup: impl Fn(&str) -> Option<String>,
    current: &'static str,
) -> Option<(String, &'static str)> {
    let set = |name: &'static str| {
        lookup(name)
            .filter(|value| !value.trim().is_empty())
            .map(|value| (value, name))
    };
    set(current).or_else(|| former(current).and_then(set))
}

/// The former names set through `lookup` whose current name is not: read in their stead.
pub fn former_in_use(lookup: impl Fn(&str) -> Option<String>) -> Vec<(&'static str, &'static str)> {
    RENAMED
        .iter()
        .filter(|(current, _)| read(&lookup, current).is_some_and(|(_, name)| name != *current))
        .copied()
        .collect()
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |name| map.get(name).cloned()
    }

    #[test]
    fn the_current_name_wins_and_the_former_one_is_read_in_its_stead() {
        let both = env(&[
            ("ELECTOR_CLUSTER_NAME", "blue"),
            ("CONSUL_ELECTOR_CLUSTER_NAME", "green"),
        ]);
        assert_eq!(
            read(&both, "ELECTOR_CLUSTER_NAME"),
            Some(("blue".into(), "ELECTOR_CLUSTER_NAME"))
        );
        assert_eq!(former_in_use(&both), []);
        let before = env(&[("CONSUL_ELECTOR_CLUSTER_NAME", "green")]);
        assert_eq!(
            read(&before, "ELECTOR_CLUSTER_NAME"),
            Some(("green".into(), "CONSUL_ELECTOR_CLUSTER_NAME"))
        );
        assert_eq!(
            former_in_use(&before),
            [("ELECTOR_CLUSTER_NAME", "CONSUL_ELECTOR_CLUSTER_NAME")]
        );
        // Blank counts as unset, as for every variable the operator reads.
        let blank = env(&[
            ("ELECTOR_CLUSTER_NAME", " "),
            ("CONSUL_ELECTOR_CLUSTER_NAME", "green"),
        ]);
        assert_eq!(
            read(&blank, "ELECTOR_CLUSTER_NAME").map(|(value, _)| value),
            Some("green".into())
        );
        assert_eq!(read(env(&[]), "ELECTOR_CLUSTER_NAME"), None);
    }

    #[test]
    fn every_former_name_has_the_old_prefix_and_every_current_one_the_new() {
        for (current, before) in RENAMED {
            assert!(current.starts_with("ELECTOR_"), "{current}");
            assert!(before.starts_with("CONSUL_ELECTOR_"), "{before}");
        }
    }
}
