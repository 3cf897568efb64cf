//! Two installs of the operator (two releases of the chart, each with its own Lease, so each
//! has an active replica) watching one namespace (docs/design.md rule 8: one writer). The
//! install whose session holds an election's key serves it; the other stands back, writing
//! nothing, and takes over only once that install's session is gone. Sessions carry their
//! install's name, so neither adopts nor renews the other's.

mod harness;

use std::time::Duration;

use harness::{Elected, Harness, LEASE_DURATION, ROLE, SOON};
use serde_json::json;
use testkit::cluster::with_namespace;
use testkit::kube_faults::{KubeFaults, Verb};

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
            .spawn_install("other", &other_faults, None, OTHER_LEASE)
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
