//! Spec edits of a live election. A changed label key, Consul key, address, datacenter or
//! token Secret moves the election cleanly: the operator first withdraws what it did under
//! the values it recorded in the status (leader label off, old key released, old session
//! destroyed, old labels removed), then elects again under the new ones, so that no pod keeps
//! a label (that a Service may select) without holding the lock. A changed leader or follower
//! value is rewritten in place under the same key, the leader keeping its lock.

use crate::harness;

use std::collections::BTreeMap;
use std::time::Duration;

use harness::{Harness, HarnessOptions, OperatorConsul, ROLE, SOON, status_leader};
use serde_json::json;
use testkit::cluster::with_namespace;
use testkit::consul::{ClockMode, Emulator, EmulatorConfig};

const OTHER_ROLE: &str = "example.com/role";
/// Less than the sessions' default TTL (15 s): what happens within it is the operator's
/// doing, not an expiry.
const PROMPTLY: Duration = Duration::from_secs(8);

fn web() -> serde_json::Value {
    json!({"selector": {"matchLabels": {"app": "web"}}})
}

/// Panics if, at any recorded resourceVersion, one pod carried `old` while a pod carried
/// `new` (each a label `(key, value)`): the old label must be gone before the new one is set.
fn assert_never_both(h: &Harness, old: (&str, &str), new: (&str, &str)) {
    let mut pods: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    let carries = |labels: &BTreeMap<String, String>, (k, v): (&str, &str)| {
        labels.get(k).map(String::as_str) == Some(v)
    };
    let mut versions = h.recorder.versions();
    versions.sort_by_key(|v| v.resource_version);
    for version in versions {
        pods.insert(version.name.clone(), version.labels.clone());
        let with_old = pods.values().any(|l| carries(l, old));
        let with_new = pods.values().any(|l| carries(l, new));
        assert!(
            !(with_old && with_new),
            "{old:?} and {new:?} at once at resourceVersion {}: {pods:#?}",
            version.resource_version
        );
    }
}

/// The pods carrying `key=value` now.
fn carrying(h: &Harness, key: &str, value: &str) -> Vec<String> {
    h.current()
        .into_iter()
        .filter(|(_, p)| p.labels.get(key).map(String::as_str) == Some(value))
        .map(|(n, _)| n)
        .collect()
}

/// Waits until exactly one pod carries `key=leader` and the status names it; returns it.
async fn wait_leader_under(h: &Harness, key: &str, leader: &str) -> String {
    let done = h
        .poll_until(SOON, || carrying(h, key, leader).len() == 1)
        .await;
    assert!(done, "no single {key}={leader} pod: {:#?}", h.current());
    let found = carrying(h, key, leader).concat();
    h.wait_status("web", |le| {
        status_leader(le).as_deref() == Some(found.as_str())
    })
    .await;
    found
}

/// The session holding `key` in `emu`, once the status' session holds it.
async fn wait_key_held_by_status_session(h: &Harness, emu: &Emulator, key: &str) -> String {
    let le = h
        .wait_status("web", |le| {
            let session = le
                .status
                .as_ref()
                .and_then(|s| s.leader.as_ref())
                .and_then(|l| l.session_id.clone());
            session.is_some() && emu.kv_entry(key).and_then(|e| e.session) == session
        })
        .await;
    le.status
        .and_then(|s| s.leader)
        .and_then(|l| l.session_id)
        .expect("a session")
}

/// Waits until the old session is destroyed and the old key released in `emu`, well before
/// the session's TTL (15 s) could have expired it.
async fn wait_old_lock_gone(h: &Harness, emu: &Emulator, key: &str, session: &str) {
    let gone = h
        .poll_until(PROMPTLY, || {
            emu.session(session).is_none() && emu.kv_entry(key).is_none_or(|e| e.session.is_none())
        })
        .await;
    assert!(
        gone,
        "the old lock stays: session {:?}, key {:?}",
        emu.session(session),
        emu.kv_entry(key)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changing_the_label_key_moves_the_labels() {
    with_namespace("ed-label-key", |admin, ns| async move {
        let (h, _first) = Harness::web_elected(admin, ns, web()).await;
        h.patch_spec("web", json!({"labels": {"key": OTHER_ROLE}}))
            .await;
        wait_leader_under(&h, OTHER_ROLE, "leader").await;
        h.wait_pods(SOON, "the old label key gone from every pod", |pods| {
            pods.values().all(|p| !p.labels.contains_key(ROLE))
                && pods.values().all(|p| p.labels.contains_key(OTHER_ROLE))
        })
        .await;
        assert_never_both(&h, (ROLE, "leader"), (OTHER_ROLE, "leader"));
        h.recorder.assert_never_two(OTHER_ROLE, "leader");
        h.finish().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changing_the_leader_value_moves_the_leader_label() {
    with_namespace("ed-leader-value", |admin, ns| async move {
        let (h, first) = Harness::web_elected(admin, ns, web()).await;
        h.patch_spec("web", json!({"labels": {"leader": "primary"}}))
            .await;
        // Rewritten in place under the same label key: same leader, same lock.
        let leader = wait_leader_under(&h, ROLE, "primary").await;
        assert_eq!(leader, first.pod);
        h.wait_pods(SOON, "no pod labelled with the old leader value", |pods| {
            pods.values()
                .all(|p| p.labels.get(ROLE).map(String::as_str) != Some("leader"))
        })
        .await;
        assert_never_both(&h, (ROLE, "leader"), (ROLE, "primary"));
        h.recorder.assert_never_two(ROLE, "primary");
        let key = h.key("web");
        let session = wait_key_held_by_status_session(&h, h.emu(), &key).await;
        assert_eq!(session, first.session);
        h.finish().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changing_the_follower_value_relabels_the_followers() {
    with_namespace("ed-follower-value", |admin, ns| async move {
        let (h, _first) = Harness::web_elected(admin, ns, web()).await;
        h.patch_spec("web", json!({"labels": {"follower": "standby"}}))
            .await;
        h.wait_pods(SOON, "followers relabelled", |pods| {
            let role = |v: &str| {
                pods.values()
                    .filter(|p| p.labels.get(ROLE).map(String::as_str) == Some(v))
                    .count()
            };
            role("follower") == 0 && role("standby") == 2 && role("leader") == 1
        })
        .await;
        wait_leader_under(&h, ROLE, "leader").await;
        h.finish().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changing_the_consul_key_releases_the_old_one_first() {
    with_namespace("ed-key", |admin, ns| async move {
        let (h, first) = Harness::web_elected(admin, ns, web()).await;
        let old_key = h.key("web");
        let new_key = format!("elector/{}/web/moved", h.ns);
        h.patch_spec("web", json!({"key": new_key})).await;
        wait_old_lock_gone(&h, h.emu(), &old_key, &first.session).await;
        let session = wait_key_held_by_status_session(&h, h.emu(), &new_key).await;
        assert_ne!(session, first.session);
        wait_leader_under(&h, ROLE, "leader").await;
        h.finish().await;
    })
    .await;
}

/// The old session is destroyed (the key released first), and a new one leads.
async fn old_session_replaced(h: &Harness, first: &harness::Elected, key: &str) {
    let replaced = h
        .poll_until(PROMPTLY, || h.emu().session(&first.session).is_none())
        .await;
    assert!(replaced, "the old session is still there");
    let session = wait_key_held_by_status_session(h, h.emu(), key).await;
    assert_ne!(session, first.session);
    wait_leader_under(h, ROLE, "leader").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changing_the_datacenter_recreates_the_session() {
    with_namespace("ed-dc", |admin, ns| async move {
        // The operator's own token may go to dc1 only because the admin allowed it.
        let options = HarnessOptions {
            operator_consul: OperatorConsul {
                allowed_datacenters: vec!["dc1".into()],
                ..OperatorConsul::default()
            },
            ..HarnessOptions::default()
        };
        let (h, first) = Harness::web_elected_with(admin, ns, options, web()).await;
        let key = h.key("web");
        h.patch_spec("web", json!({"consul": {"datacenter": "dc1"}}))
            .await;
        old_session_replaced(&h, &first, &key).await;
        h.finish().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changing_the_consul_address_leaves_the_old_consul_clean() {
    with_namespace("ed-address", |admin, ns| async move {
        let other = Emulator::start(EmulatorConfig {
            clock: ClockMode::Tokio,
            ..EmulatorConfig::default()
        })
        .await
        .expect("emulator");
        let options = HarnessOptions {
            operator_consul: OperatorConsul {
                token: None,
                allowed_addresses: vec![other.url()],
                ..OperatorConsul::default()
            },
            ..HarnessOptions::default()
        };
        let (h, first) = Harness::web_elected_with(admin, ns, options, web()).await;
        let key = h.key("web");
        h.patch_spec("web", json!({"consul": {"address": other.url()}}))
            .await;
        wait_old_lock_gone(&h, h.emu(), &key, &first.session).await;
        wait_key_held_by_status_session(&h, &other, &key).await;
        wait_leader_under(&h, ROLE, "leader").await;
        h.finish().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changing_the_token_secret_recreates_the_session() {
    with_namespace("ed-token", |admin, ns| async move {
        let options = HarnessOptions {
            secret_access: true,
            ..HarnessOptions::default()
        };
        let (h, first) = Harness::web_elected_with(admin, ns, options, web()).await;
        h.token_secret("consul-token", "any-token-the-emulator-accepts", "web")
            .await;
        let key = h.key("web");
        h.patch_spec(
            "web",
            json!({"consul": {"tokenSecretRef": {"name": "consul-token", "key": "token"}}}),
        )
        .await;
        old_session_replaced(&h, &first, &key).await;
        h.finish().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unusable_new_consul_access_keeps_the_old_leader_and_lock() {
    with_namespace("ed-bad-token", |admin, ns| async move {
        let options = HarnessOptions {
            secret_access: true,
            ..HarnessOptions::default()
        };
        let (h, first) = Harness::web_elected_with(admin, ns, options, web()).await;
        // A Secret that does not exist: the spec is reported, nothing is withdrawn for it.
        h.patch_spec(
            "web",
            json!({"consul": {"tokenSecretRef": {"name": "no-such-secret", "key": "token"}}}),
        )
        .await;
        h.wait_status("web", |le| harness::phase(le).as_deref() == Some("Invalid"))
            .await;
        h.touch_and_wait_reconcile("web").await;
        assert_eq!(carrying(&h, ROLE, "leader"), vec![first.pod.clone()]);
        let entry = h.emu().kv_entry(&h.key("web")).expect("key");
        assert_eq!(entry.session.as_deref(), Some(first.session.as_str()));

        // Fixed back: the same leader, lock and session, nothing moved.
        h.patch_spec("web", json!({"consul": null})).await;
        let now = h.wait_elected("web", None).await;
        assert_eq!(now, first);
        h.finish().await;
    })
    .await;
}

/// A new `session.ttl` is applied to the session that holds the lock: the session is replaced
/// in a planned move (leader label off, old session released and destroyed, a new one with
/// the new TTL acquires, the label comes back), never left running with the old TTL while the
/// Fence window and the Lease-timing check already count with the new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_session_ttl_replaces_the_held_session_in_a_planned_move() {
    with_namespace("ed-ttl", |admin, ns| async move {
        let spec = json!({
            "selector": {"matchLabels": {"app": "web"}},
            "session": {"ttl": "10s"},
        });
        let (h, first) = Harness::web_elected(admin, ns, spec).await;
        assert_eq!(
            h.emu().session(&first.session).map(|s| s.ttl),
            Some("10s".to_owned())
        );
        h.patch_spec("web", json!({"session": {"ttl": "30s"}}))
            .await;
        let ttl_of_holder = || {
            let holder = h.emu().kv_entry(&h.key("web"))?.session?;
            h.emu().session(&holder).map(|s| s.ttl)
        };
        let replaced = h
            .poll_until(PROMPTLY, || ttl_of_holder().as_deref() == Some("30s"))
            .await;
        assert!(
            replaced,
            "the lock is held by a session with the new TTL: {:?}",
            ttl_of_holder()
        );
        let second = h.wait_elected("web", None).await;
        assert_ne!(second.session, first.session);
        assert!(second.token > first.token, "a new acquisition, a new token");
        assert!(
            h.emu().session(&first.session).is_none(),
            "the old session was destroyed"
        );
        h.finish().await;
    })
    .await;
}

/// A paused election moves nothing (docs/design.md rule 5): an edit of its labels waits for
/// the resume, the leader keeps its label, lock and token meanwhile, and the edit is carried
/// out once the election is resumed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edit_of_a_paused_election_waits_for_the_resume() {
    with_namespace("ed-paused", |admin, ns| async move {
        let (h, first) = Harness::web_elected(admin, ns, web()).await;
        h.patch_spec("web", json!({"paused": true})).await;
        h.wait_status("web", |le| harness::phase(le).as_deref() == Some("Paused"))
            .await;
        h.patch_spec("web", json!({"labels": {"key": OTHER_ROLE}}))
            .await;
        // A window in which nothing may move, not a synchronisation.
        let moved = h
            .poll_until(PROMPTLY, || {
                carrying(&h, ROLE, "leader") != [first.pod.clone()]
            })
            .await;
        assert!(
            !moved,
            "the paused leader lost its label: {:#?}",
            h.current()
        );
        assert!(carrying(&h, OTHER_ROLE, "leader").is_empty());
        let entry = h.emu().kv_entry(&h.key("web")).expect("the key");
        assert_eq!(
            (entry.session.as_deref(), entry.lock_index),
            (Some(first.session.as_str()), first.token),
            "the paused leader keeps its lock and token"
        );

        h.patch_spec("web", json!({"paused": false})).await;
        wait_leader_under(&h, OTHER_ROLE, "leader").await;
        assert!(carrying(&h, ROLE, "leader").is_empty());
        assert_never_both(&h, (ROLE, "leader"), (OTHER_ROLE, "leader"));
        h.finish().await;
    })
    .await;
}
