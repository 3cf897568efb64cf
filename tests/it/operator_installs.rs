//! Two installs of the operator (two releases of the chart, each with its own Lease, so each
//! has an active replica) watching one namespace (docs/design.md rule 8: one writer). The
//! install whose session holds an election's key serves it; the other stands back, writing
//! nothing, and takes over only once that install's session is gone. Sessions carry their
//! install's name, so neither adopts nor renews the other's.

use crate::harness;

use std::time::Duration;

use consul_elector::uninstall::{self, Course};
use consul_elector::wall_clock::WallClock;
use harness::{Elected, Harness, HarnessOptions, LEASE_DURATION, ROLE, SOON};
use serde_json::json;
use testkit::cluster::with_namespace;
use testkit::kube_faults::{FaultAction, KubeFault, KubeFaults, Verb};

/// The second install's Lease (the harness' own install uses `consul-elector`).
const OTHER_LEASE: &str = "consul-elector-b";
/// Leader moves the test makes by deleting the leader pod.
const DELETIONS: u64 = 4;

/// The install segment of the operator's session name `name`
/// (`consul-elector/<cluster>/<install>/<namespace>/<election>/<pod>`).
fn install_of(name: &str) -> &str {
    name.split('/').nth(2).unwrap_or_default()
}

/// Panics if a fencing token on a leader-labelled pod version is lower than one recorded
/// before it (in resourceVersion order): rule 6 over the whole history.
fn assert_tokens_never_go_back(h: &Harness) {
    let mut versions = h.recorder.versions();
    versions.sort_by_key(|v| v.resource_version);
    let mut highest = 0u64;
    for v in versions {
        if v.labels.get(ROLE).map(String::as_str) != Some("leader") {
            continue;
        }
        let Some(token) = v
            .annotations
            .get(consul_elector::crd::FENCING_TOKEN_ANNOTATION)
            .and_then(|t| t.parse::<u64>().ok())
        else {
            continue;
        };
        assert!(
            token >= highest,
            "token {token} on {} at resourceVersion {} after {highest}",
            v.name,
            v.resource_version
        );
        highest = token;
    }
}

/// How many times a pod version gained the leader label (a pod's first version with it, or
/// one after a version without it).
fn leader_labellings(h: &Harness) -> u64 {
    let mut versions = h.recorder.versions();
    versions.sort_by_key(|v| v.resource_version);
    let mut leading = std::collections::BTreeSet::new();
    let mut gained = 0;
    for v in versions {
        let leader = v.labels.get(ROLE).map(String::as_str) == Some("leader") && !v.deleting;
        if leader && leading.insert(v.uid.clone()) {
            gained += 1;
        } else if !leader {
            leading.remove(&v.uid);
        }
    }
    gained
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_installs_never_fight_and_the_second_takes_over_when_the_first_is_gone() {
    with_namespace("installs", |admin, ns| async move {
        let mut h = Harness::new(admin, ns).await;
        h.deployment("web", 3).await;
        h.start_operator().await;
        let other_faults = KubeFaults::new(21);
        let other = h
            .spawn_install("other", &other_faults, h.operator_consul(), OTHER_LEASE)
            .await;
        let both = h
            .poll_until(SOON, || h.operator().is_active() && other.is_active())
            .await;
        assert!(both, "each install has its active replica");
        h.election(
            "web",
            json!({
                "selector": {"matchLabels": {"app": "web"}},
                "session": {"ttl": "10s", "lockDelay": "0s"},
            }),
        )
        .await;
        let first = h.wait_elected("web", None).await;

        // Leader churn: one move per deletion, whoever serves.
        let mut last: Elected = first.clone();
        for _ in 0..DELETIONS {
            h.pods()
                .delete(&last.pod, &Default::default())
                .await
                .expect("delete the leader");
            let next = h.wait_elected("web", Some(&last.pod)).await;
            assert_eq!(next.transitions, last.transitions + 1, "one move");
            assert!(next.token > last.token, "the token grows");
            last = next;
        }
        let names = h.session_names().await;
        let serving = install_of(&names[0]).to_owned();
        assert!(
            names.iter().all(|n| install_of(n) == serving),
            "the sessions of one install only: {names:?}"
        );
        let own = format!("{}.consul-elector", h.ns);
        let (served_by_harness, standing_faults) = if serving == own {
            (true, other_faults.clone())
        } else {
            assert_eq!(serving, format!("{}.{OTHER_LEASE}", h.ns));
            (false, h.kube_faults.clone())
        };
        // The install standing back patched no pod and no status while the other served.
        let patches: Vec<String> = standing_faults
            .forwarded()
            .into_iter()
            .filter(|f| f.request.verb == Some(Verb::Patch))
            .filter(|f| f.request.resource.as_deref() != Some("leases"))
            .map(|f| format!("{:?} {:?}", f.request.resource, f.request.name))
            .collect();
        eprintln!("serving install: {serving}; the other's patches: {patches:?}");
        let events = patches.iter().filter(|p| p.contains("events")).count();
        assert!(
            events <= 1,
            "the standing install says so once, not at every reconcile: {patches:?}"
        );
        assert_tokens_never_go_back(&h);
        assert_eq!(
            leader_labellings(&h),
            DELETIONS + 1,
            "each leader labelled once: no install took another's leader label off"
        );

        // The serving install goes away (a crash: its session stays until Consul expires it,
        // 2 x TTL); the other takes over then, not before.
        let standing = if served_by_harness {
            h.kill_operator().await;
            other
        } else {
            other.kill().await;
            h.take_operator()
        };
        h.wait_status_within(
            "web",
            Duration::from_secs(20) + LEASE_DURATION + SOON,
            |le| le.status.as_ref().and_then(|s| s.fencing_token) > Some(last.token),
        )
        .await;
        let after = h.wait_elected("web", None).await;
        assert!(
            after.token > last.token,
            "a new acquisition by the other install"
        );
        let names = h.session_names().await;
        assert!(
            names.iter().all(|n| install_of(n) != serving),
            "the other install's sessions only: {names:?}"
        );
        h.set_operator(standing);
        assert_tokens_never_go_back(&h);
        h.finish().await;
    })
    .await;
}

/// How the second install's settings differ from the serving one's, each making the election
/// unusable for it alone.
#[derive(Debug, Clone, Copy)]
enum Difference {
    /// Its datacenter allowlist lacks the election's datacenter.
    Datacenter,
    /// Its address allowlist lacks the election's Consul address.
    Address,
    /// It may not read the election's token Secret (`rbac.secretAccess` off).
    SecretAccess,
    /// It may not read the pods' ReplicaSets (no RBAC for them), and the election's label
    /// key is one their selector uses: only the serving install sees that it is.
    OwnerReads,
}

/// Over this long with nothing changing, the install that cannot act on the election must
/// write nothing: more than two session TTLs, so that any fence of its own would have run.
const QUIET: Duration = Duration::from_secs(25);

/// The sum of the reconcile counters in `metrics` (every result).
fn reconciles(metrics: &str) -> u64 {
    metrics
        .lines()
        .filter(|l| l.starts_with("consul_elector_reconcile_total"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

/// Rule 8 whatever the second install thinks of the spec: install A serves an election that
/// install B, configured differently, cannot act on. B writes nothing (no pod, no status, no
/// event, nothing in Consul) and A's leader keeps its label and token.
async fn an_install_that_cannot_act_writes_nothing(difference: Difference) {
    let ns = format!("installs-{difference:?}").to_lowercase();
    with_namespace(&ns, |admin, ns| async move {
        let mut options = HarnessOptions::default();
        let mut spec = json!({
            "selector": {"matchLabels": {"app": "web"}},
            "session": {"ttl": "10s", "lockDelay": "0s"},
        });
        let other_faults = KubeFaults::new(22);
        let mut other_consul = options.operator_consul.clone();
        match difference {
            Difference::Datacenter => {
                options.operator_consul.allowed_datacenters = vec!["dc1".into()];
                other_consul.allowed_datacenters = vec!["dc2".into()];
                spec["consul"] = json!({"datacenter": "dc1"});
            }
            Difference::Address | Difference::SecretAccess | Difference::OwnerReads => {
                options.secret_access = true;
            }
        }
        let mut h = Harness::with_options(admin, ns, options).await;
        match difference {
            Difference::Datacenter => {}
            Difference::Address => {
                // The same Consul under another name: only the serving install allows it.
                let alias = h.consul.url().replace("127.0.0.1", "localhost");
                spec["consul"] = json!({"address": alias.clone()});
                let mut consul = h.operator_consul().clone();
                consul.allowed_addresses = vec![alias];
                h.set_operator_consul(consul);
            }
            Difference::SecretAccess => {
                h.token_secret("web-token", "web-token-value", "web").await;
                spec["consul"] = json!({"tokenSecretRef": {"name": "web-token", "key": "token"}});
                other_faults.add(
                    KubeFault::new(FaultAction::status(
                        403,
                        "Forbidden",
                        "secrets is forbidden for this install",
                    ))
                    .resource("secrets"),
                );
            }
            Difference::OwnerReads => {
                other_faults.add(
                    KubeFault::new(FaultAction::status(
                        403,
                        "Forbidden",
                        "replicasets is forbidden for this install",
                    ))
                    .resource("replicasets"),
                );
            }
        }
        h.deployment("web", 3).await;
        h.start_operator().await;
        h.election("web", spec).await;
        let elected = h.wait_elected("web", None).await;
        let other = h
            .spawn_install("other", &other_faults, &other_consul, OTHER_LEASE)
            .await;
        let reconciled = h
            .poll_until(SOON, || {
                other.is_active() && reconciles(&other.metrics.encode()) > 0
            })
            .await;
        assert!(
            reconciled,
            "the other install is active and reconciles the election"
        );
        // Not a synchronisation: a window in which nothing may happen.
        let _ = h.poll_until(QUIET, || false).await;
        // Every write but its own Lease's, counted by verb and resource.
        let mut writes = std::collections::BTreeMap::<String, u32>::new();
        for f in other_faults.forwarded() {
            let read = matches!(
                f.request.verb,
                Some(Verb::Get | Verb::List | Verb::Watch) | None
            );
            if read || f.request.resource.as_deref() == Some("leases") {
                continue;
            }
            let what = format!(
                "{:?} {}",
                f.request.verb,
                f.request.resource.unwrap_or_default()
            );
            *writes.entry(what).or_default() += 1;
        }
        assert!(
            writes.is_empty(),
            "the install that cannot act wrote: {writes:?}"
        );
        let now = h.wait_elected("web", None).await;
        assert_eq!(
            (now.pod.as_str(), now.token),
            (elected.pod.as_str(), elected.token),
            "the serving install's leader keeps its label and token"
        );
        assert_eq!(leader_labellings(&h), 1, "the leader label never moved");
        other.kill().await;
        h.finish().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_install_refusing_the_datacenter_writes_nothing() {
    an_install_that_cannot_act_writes_nothing(Difference::Datacenter).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_install_refusing_the_address_writes_nothing() {
    an_install_that_cannot_act_writes_nothing(Difference::Address).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_install_that_may_not_read_the_token_secret_writes_nothing() {
    an_install_that_cannot_act_writes_nothing(Difference::SecretAccess).await;
}

/// `helm uninstall` of one of two installs watching the same namespace: its pre-delete hook,
/// set to delete, deletes the elections it serves (and those nobody serves), never one the
/// other install serves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uninstalling_one_install_leaves_the_elections_the_other_serves() {
    with_namespace("installs-uninstall", |admin, ns| async move {
        let (h, elected) = Harness::web_elected(
            admin,
            ns,
            json!({"selector": {"matchLabels": {"app": "web"}}}),
        )
        .await;
        let wall = WallClock::system();
        let other = h.hook_scope_of(OTHER_LEASE);
        let deleted = uninstall::uninstall(h.admin.clone(), &other, Course::Delete, SOON, &wall)
            .await
            .expect("the other install's hook finishes");
        assert_eq!(
            deleted, 0,
            "the other install's hook deleted an election it does not serve"
        );
        let still = h.wait_elected("web", None).await;
        assert_eq!((still.pod, still.token), (elected.pod, elected.token));

        let deleted = uninstall::uninstall(
            h.admin.clone(),
            &h.hook_scope(),
            Course::Delete,
            SOON,
            &wall,
        )
        .await
        .expect("the serving install's hook finishes while it runs");
        assert_eq!(
            deleted, 1,
            "the serving install's hook deletes what it serves"
        );
        h.finish().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_install_that_may_not_read_replica_sets_writes_nothing() {
    an_install_that_cannot_act_writes_nothing(Difference::OwnerReads).await;
}

/// The rename path (docs/design.md rule 3): an install started under a new name (here a new
/// Lease; a new cluster name works the same) with its former name in `--former-names` adopts
/// what the old name holds, so the rename changes no leader, token or session. Without it,
/// the key would look held by another install until that session expired.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renamed_install_keeps_every_leader() {
    with_namespace("installs-rename", |admin, ns| async move {
        let (mut h, first) = Harness::web_elected(
            admin,
            ns,
            json!({
                "selector": {"matchLabels": {"app": "web"}},
                "session": {"ttl": "10s"},
            }),
        )
        .await;
        h.kill_operator().await;
        let former = (h.cluster_name().to_owned(), h.install());
        h.set_former_names(vec![former]);
        let renamed = h
            .spawn_install(
                "renamed",
                &h.kube_faults.clone(),
                h.operator_consul(),
                OTHER_LEASE,
            )
            .await;
        // Past the old session's expiry had nobody renewed it (2 x TTL).
        let _ = h.poll_until(Duration::from_secs(25), || false).await;
        let now = h.wait_elected("web", None).await;
        assert_eq!(
            now, first,
            "the rename changed the leader, its token or its session"
        );
        h.set_operator(renamed);
        h.finish().await;
    })
    .await;
}
