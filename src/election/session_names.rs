//! The names of the operator's Consul sessions, and which sessions an operator may take over
//! after a restart (rule 3) without ever touching another cluster's or another install's lock
//! (rule 8). A name says who created the session for which pod:
//! `consul-elector/<cluster>/<install>/<namespace>/<election>/<pod>`.

use std::collections::HashMap;

use super::config::{ElectionKey, Owner};

/// First segment of every session name the operator writes.
pub const SESSION_NAME_PREFIX: &str = "consul-elector";

/// The Consul session name of the session `owner` created for `pod` in `election`:
/// `consul-elector/<cluster>/<install>/<namespace>/<election>/<pod>`.
pub fn session_name(owner: &Owner, election: &ElectionKey, pod: &str) -> String {
    format!(
        "{SESSION_NAME_PREFIX}/{}/{}/{}/{}/{pod}",
        owner.cluster, owner.install, election.namespace, election.name
    )
}

/// Where the operator found a session it considers adopting after a restart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Found {
    /// Holding the election's key: any Consul client may have put it there.
    HoldingKey,
    /// Recorded in the election's `status.leader.sessionID`, which only the operator writes.
    InStatus,
}

/// The pod a session named `name` was created for, when `owner` may adopt it for `election`;
/// `None` when it must leave the session alone.
///
/// Accepted wherever found: `owner`'s own name for this election ([`session_name`]). The
/// names earlier versions wrote, without the install
/// (`consul-elector/<cluster>/<namespace>/<election>/<pod>`) or without the cluster too
/// (`consul-elector/<namespace>/<election>/<pod>`), are accepted only for a session found in
/// the status: anybody (another install, another cluster's operator, an application) can hold
/// the key with a session so named, but only the operator records session IDs in this
/// election's status, so an upgrade keeps its leader. A current name of another install is
/// never accepted.
///
/// Namespaces, election and pod names contain no `/` and an install name (with its `.`) is
/// never a namespace, so the segments of a name cannot be read two ways.
pub fn adoptable_pod<'n>(
    name: &'n str,
    owner: &Owner,
    election: &ElectionKey,
    found: Found,
) -> Option<&'n str> {
    let scope = format!("{}/{}/", election.namespace, election.name);
    let rest = name.strip_prefix(SESSION_NAME_PREFIX)?.strip_prefix('/')?;
    let segment = |text: &'n str, head: &str| text.strip_prefix(head)?.strip_prefix('/');
    let current = owner.identities().find_map(|(cluster, install)| {
        segment(rest, cluster)
            .and_then(|r| segment(r, install))
            .and_then(|r| r.strip_prefix(scope.as_str()))
    });
    let pod = match current {
        Some(pod) => pod,
        None if found == Found::InStatus => segment(rest, &owner.cluster)
            .and_then(|r| r.strip_prefix(scope.as_str()))
            .or_else(|| rest.strip_prefix(scope.as_str()))?,
        None => return None,
    };
    (!pod.is_empty() && !pod.contains('/')).then_some(pod)
}

/// `consul-elector/<cluster>/<install>/` for each identity of `owner`.
fn name_prefixes(owner: &Owner) -> Vec<String> {
    owner
        .identities()
        .map(|(cluster, install)| format!("{SESSION_NAME_PREFIX}/{cluster}/{install}/"))
        .collect()
}

/// Whether `name` is one `owner` gives its sessions, now or before a rename of its cluster
/// or install (names of earlier versions, without an install, are not: such a session is
/// adopted only from the status that records it).
pub fn named_by(name: &str, owner: &Owner) -> bool {
    name_prefixes(owner).iter().any(|p| name.starts_with(p))
}

/// The sessions a new active replica of `owner` adopts from a listing of `(name, entry)`
/// before its first reconcile: for each election, its only session named by `owner`, with
/// the election and the pod it was created for. An election with two such sessions is left
/// to its reconcile, which adopts the one its key or its status names.
pub fn sole_sessions<'n, T>(
    owner: &Owner,
    sessions: impl IntoIterator<Item = (&'n str, T)>,
) -> Vec<(ElectionKey, &'n str, T)> {
    let prefixes = name_prefixes(owner);
    let mut by_election: HashMap<ElectionKey, Vec<(&'n str, T)>> = HashMap::new();
    for (name, entry) in sessions {
        let Some(rest) = prefixes.iter().find_map(|p| name.strip_prefix(p.as_str())) else {
            continue;
        };
        let mut parts = rest.splitn(3, '/');
        let (Some(namespace), Some(election)) = (parts.next(), parts.next()) else {
            continue;
        };
        let key = ElectionKey {
            namespace: namespace.to_owned(),
            name: election.to_owned(),
        };
        by_election.entry(key).or_default().push((name, entry));
    }
    by_election
        .into_iter()
        .filter_map(|(key, mut found)| {
            let (name, entry) = found.pop().filter(|_| found.is_empty())?;
            let pod = adoptable_pod(name, owner, &key, Found::HoldingKey)?;
            Some((key, pod, entry))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn web() -> ElectionKey {
        ElectionKey {
            namespace: "shop".into(),
            name: "web".into(),
        }
    }

    const BOTH: [Found; 2] = [Found::HoldingKey, Found::InStatus];

    fn owner(cluster: &str) -> Owner {
        Owner::new(cluster, "ops.consul-elector")
    }

    #[test]
    fn the_name_carries_cluster_install_namespace_election_and_pod() {
        assert_eq!(
            session_name(&owner("east"), &web(), "web-0"),
            "consul-elector/east/ops.consul-elector/shop/web/web-0"
        );
    }

    #[test]
    fn this_installs_name_for_this_election_is_adopted_wherever_found() {
        let name = session_name(&owner("east"), &web(), "web-0");
        for found in BOTH {
            assert_eq!(
                adoptable_pod(&name, &owner("east"), &web(), found),
                Some("web-0"),
                "{found:?}"
            );
        }
    }

    #[test]
    fn another_clusters_or_another_installs_session_is_never_adopted() {
        let other_install = Owner::new("east", "team-b.consul-elector");
        for name in [
            session_name(&owner("west"), &web(), "web-0"),
            session_name(&other_install, &web(), "web-0"),
        ] {
            for found in BOTH {
                assert_eq!(
                    adoptable_pod(&name, &owner("east"), &web(), found),
                    None,
                    "{name} ({found:?})"
                );
            }
        }
    }

    #[test]
    fn the_names_of_earlier_versions_are_adopted_only_from_the_status() {
        for earlier in [
            "consul-elector/shop/web/web-0",
            "consul-elector/east/shop/web/web-0",
        ] {
            assert_eq!(
                adoptable_pod(earlier, &owner("east"), &web(), Found::InStatus),
                Some("web-0"),
                "{earlier}"
            );
            assert_eq!(
                adoptable_pod(earlier, &owner("east"), &web(), Found::HoldingKey),
                None,
                "{earlier}"
            );
        }
    }

    #[test]
    fn other_elections_and_foreign_names_are_never_adopted() {
        let other = ElectionKey {
            namespace: "shop".into(),
            name: "api".into(),
        };
        let names = [
            session_name(&owner("east"), &other, "web-0"),
            "consul-elector/shop/api/web-0".to_owned(),
            "consul-elector/east/shop/api/web-0".to_owned(),
            // Another cluster whose name ends like ours, or starts with it.
            session_name(&owner("north-east"), &web(), "web-0"),
            session_name(&owner("east/shop"), &web(), "web-0"),
            // Our prefix followed by more segments, or by nothing.
            "consul-elector/east/ops.consul-elector/shop/web/web-0/extra".to_owned(),
            "consul-elector/east/ops.consul-elector/shop/web/".to_owned(),
            "consul-elector/east/shop/web/".to_owned(),
            "consul-elector/shop/web/".to_owned(),
            "intruder".to_owned(),
            String::new(),
        ];
        for name in &names {
            for found in BOTH {
                assert_eq!(
                    adoptable_pod(name, &owner("east"), &web(), found),
                    None,
                    "{name} ({found:?})"
                );
            }
        }
    }

    #[test]
    fn a_cluster_name_that_looks_like_a_namespace_is_no_loophole() {
        // Cluster "shop" and the legacy name of election shop/web: the legacy form has fewer
        // segments than any current name, so neither passes for the other.
        let legacy_of_web_in_shop = "consul-elector/shop/web/web-0";
        assert_eq!(
            adoptable_pod(
                legacy_of_web_in_shop,
                &owner("shop"),
                &web(),
                Found::HoldingKey
            ),
            None
        );
        let current = session_name(&owner("shop"), &web(), "web-0");
        assert_eq!(
            adoptable_pod(&current, &owner("shop"), &web(), Found::HoldingKey),
            Some("web-0")
        );
    }

    #[test]
    fn a_restart_adopts_each_elections_only_session_of_this_install() {
        let names = [
            "consul-elector/blue/ops.ce/shop/web/web-0",
            "consul-elector/green/ops.ce/shop/web/web-1",
            "consul-elector/blue/ops.ce/shop/api/api-0",
            "consul-elector/blue/ops.ce/shop/api/api-1",
            "consul-elector/shop/web/web-2",
            "consul-elector/blue/ops.ce/shop/db/a/b",
            "someone-else",
            // Another install in the same cluster: never renewed, never adopted.
            "consul-elector/blue/team.ce/shop/queue/queue-0",
            // This cluster's name of an earlier version: adopted only from the status.
            "consul-elector/blue/shop/queue/queue-1",
        ];
        let owner = Owner::new("blue", "ops.ce");
        let named: Vec<usize> = (0..names.len())
            .filter(|&i| named_by(names[i], &owner))
            .collect();
        assert_eq!(named, vec![0, 2, 3, 5]);
        let found = sole_sessions(&owner, names.iter().copied().zip(0..));
        let found: Vec<(String, &str, usize)> = found
            .into_iter()
            .map(|(key, pod, i)| (key.to_string(), pod, i))
            .collect();
        assert_eq!(
            found,
            vec![("shop/web".to_owned(), "web-0", 0)],
            "only shop/web has exactly one valid session"
        );
    }
}
