//! The operator's own lifecycle (docs/design.md rules 3 and 7): a crash and restart changes no
//! leader, label, token or transition and adopts the Consul session; a crash in the middle
//! of a move never yields two leaders; deleting a LeaderElection cleans up everything, and the
//! chart's pre-delete hook has every election released (or deleted) while the operator can
//! still clean up.

use crate::harness;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use consul_elector::crd::FINALIZER;
use consul_elector::crd::LeaderElection;
use consul_elector::uninstall::{self, Course, UninstallError};
use consul_elector::wall_clock::WallClock;
use harness::{Backend, ConsulUnderTest, Harness, HarnessOptions, ROLE, SOON, TRACKED, with_role};
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::conditions;
use kube::runtime::wait::await_condition;
use kube::{Api, ResourceExt};
use serde_json::json;
use testkit::cluster::{TestCluster, with_namespace};
use testkit::consul::{Endpoint, Fault, FaultAction};
use testkit::kube_faults::{self, KubeFault, Verb};

fn spec() -> serde_json::Value {
    json!({
        "selector": {"matchLabels": {"app": "web"}},
        "session": {"ttl": "10s"},
    })
}

/// A crash and restart changes no leader, label, token or transition and adopts the session
/// (rule 3): the new process keeps it alive past 2×TTL after the crash, and creates,
/// destroys and writes nothing in Consul.
async fn crash_and_restart(backend: Backend) {
    let Some(consul) = ConsulUnderTest::start(backend).await else {
        return;
    };
    with_namespace("lc-restart", |admin, ns| async move {
        let (mut h, first) = Harness::web_elected_on(admin, ns, consul, spec()).await;
        let before = h.histories();
        let status_before = h.status("web").await;
        let sessions_before = h.session_ids().await;
        let key_before = h.key_lock(&h.key("web")).await.expect("key");

        h.kill_operator().await;
        let killed_at = Instant::now();
        if let Some(emu) = h.consul.as_emulator() {
            emu.reset_stats();
        }
        h.start_operator().await;

        // Consul invalidates a session 2×TTL after its last renewal, so it outlives 2×TTL
        // (20 s) after the crash only if the new process renews it. Watch it until then
        // (real time has to pass here).
        let ttl = Duration::from_secs(10);
        while killed_at.elapsed() < 2 * ttl + Duration::from_secs(2) {
            assert!(
                h.session_exists(&first.session).await,
                "the adopted session is still alive {:?} after the crash",
                killed_at.elapsed()
            );
            let _ = h
                .recorder
                .wait_until(Duration::from_millis(250), |_| false)
                .await;
        }
        if let Some(emu) = h.consul.as_emulator() {
            let stats = emu.stats();
            assert!(stats.requests_to("session.renew") >= 2, "{stats:?}");
            assert_eq!(stats.requests_to("kv.put"), 0, "{stats:?}");
        }
        // Rule 3: nothing but renewals and reads: no session created or destroyed, the key
        // not written (not even acquired again by its holder, which would move ModifyIndex).
        assert_eq!(h.session_ids().await, sessions_before, "sessions");
        assert_eq!(
            h.key_lock(&h.key("web")).await.as_ref(),
            Some(&key_before),
            "the key is untouched"
        );
        assert!(
            h.poll_until(SOON, || h.reconciles() > 0).await,
            "the new process reconciled the election"
        );

        let now = h.wait_elected("web", None).await;
        assert_eq!(now, first, "same leader, token, session and transitions");
        assert_eq!(h.histories(), before, "no label or annotation changed");
        let status_after = h.status("web").await;
        assert_eq!(status_after.leader, status_before.leader);
        assert_eq!(status_after.fencing_token, status_before.fencing_token);
        assert_eq!(status_after.transitions, status_before.transitions);
        h.finish().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_and_restart_changes_nothing_and_adopts_the_session_on_the_emulator() {
    crash_and_restart(Backend::Emulator).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_and_restart_changes_nothing_and_adopts_the_session_on_a_real_consul() {
    crash_and_restart(Backend::RealConsul).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_in_the_middle_of_a_move_never_yields_two_leaders() {
    with_namespace("lc-midmove", |admin, ns| async move {
        let (mut h, first) = Harness::web_elected(admin, ns, spec()).await;

        // Hold the successor's session creation, start a move, and crash while it hangs:
        // the old leader is demoted and released, nobody leads yet.
        let hold = h.emu().add_fault(Fault::always(
            Endpoint::SessionCreate,
            FaultAction::Latency(Duration::from_secs(3)),
        ));
        let started = Instant::now();
        h.sim.set_ready(&first.pod, false).await;
        let old = first.pod.clone();
        h.wait_pods(SOON, "the old leader demoted", |pods| {
            pods.get(&old)
                .is_some_and(|p| p.labels.get(ROLE).map(String::as_str) != Some("leader"))
        })
        .await;
        h.kill_operator().await;
        assert!(with_role(&h.current(), "leader").is_empty());
        h.emu().remove_fault(hold);
        h.start_operator().await;

        let second = h.wait_elected("web", Some(&first.pod)).await;
        eprintln!(
            "move completed by the restarted operator {:?} after it began",
            started.elapsed()
        );
        assert!(second.token > first.token);
        assert_eq!(second.transitions, first.transitions + 1);
        assert!(h.emu().session(&first.session).is_none());

        // A second crash, right after the next move's first step, whatever it was.
        let third_started = Instant::now();
        h.sim.set_ready(&second.pod, false).await;
        let old = second.pod.clone();
        h.wait_pods(SOON, "the second leader demoted", |pods| {
            pods.get(&old)
                .is_some_and(|p| p.labels.get(ROLE).map(String::as_str) != Some("leader"))
        })
        .await;
        h.kill_operator().await;
        h.start_operator().await;
        let third = h.wait_elected("web", Some(&second.pod)).await;
        eprintln!(
            "second interrupted move completed after {:?}",
            third_started.elapsed()
        );
        assert_ne!(third.pod, first.pod, "the first leader is still NotReady");
        assert!(third.token > second.token);
        h.finish().await;
    })
    .await;
}

/// Deleting the LeaderElection releases the key explicitly, destroys the session and takes
/// every label and annotation of the operator off the pods before the finalizer goes.
async fn deletion_cleans_up(backend: Backend) {
    let Some(consul) = ConsulUnderTest::start(backend).await else {
        return;
    };
    with_namespace("lc-delete", |admin, ns| async move {
        let mut h = Harness::with_consul(admin, ns, HarnessOptions::default(), consul).await;
        h.deployment("web", 3).await;
        h.start_operator().await;
        let created = h.election("web", spec()).await;
        let first = h.wait_elected("web", None).await;
        let key = h.key("web");
        let le = h.elections().get("web").await.expect("election");
        assert!(
            le.metadata
                .finalizers
                .as_ref()
                .is_some_and(|f| f.iter().any(|f| f == "elector.dev/cleanup")),
            "the operator set its finalizer"
        );

        h.elections()
            .delete("web", &Default::default())
            .await
            .expect("delete election");
        let uid = created.metadata.uid.clone().expect("uid");
        tokio::time::timeout(
            SOON,
            await_condition(h.elections(), "web", conditions::is_deleted(&uid)),
        )
        .await
        .expect("the election is gone (finalizer removed) in time")
        .expect("watch election");
        let gone: Option<LeaderElection> = h.elections().get_opt("web").await.expect("get");
        assert!(gone.is_none());

        // Consul: released, session destroyed, no session of the operator left.
        let entry = h.key_lock(&key).await;
        assert!(
            entry.as_ref().is_none_or(|e| e.session.is_none()),
            "the key is released: {entry:?}"
        );
        assert!(!h.session_exists(&first.session).await, "session destroyed");
        assert_eq!(h.session_ids().await, BTreeSet::new(), "sessions left");
        // Released explicitly before the destroy: no lock-delay (15 s by default) keeps an
        // application from taking the key at once.
        let app = h.app_session("app", "15s").await;
        assert!(
            h.app_acquire(&key, &app, "app").await,
            "the key is free at once, with no lock-delay"
        );

        // Every pod loses the label and every annotation of the operator.
        h.wait_pods(SOON, "every pod cleaned", |pods| {
            pods.values().all(|p| {
                !p.labels.contains_key(ROLE)
                    && TRACKED.iter().all(|a| !p.annotations.contains_key(*a))
            })
        })
        .await;
        h.finish().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_the_election_releases_destroys_and_unlabels_everything_on_the_emulator() {
    deletion_cleans_up(Backend::Emulator).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_the_election_releases_destroys_and_unlabels_everything_on_a_real_consul() {
    deletion_cleans_up(Backend::RealConsul).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lagging_pod_cache_never_undoes_the_operators_own_labels() {
    with_namespace("lc-lag", |admin, ns| async move {
        let mut h = Harness::new(admin, ns).await;
        h.deployment("web", 3).await;
        // The operator's pod watch starts 3 s late: its cache keeps showing the pods as they
        // were listed (unlabelled) while it elects, and every reconcile in between (woken by
        // its own status writes) plans on that old view unless it knows its own writes.
        h.kube_faults.add(
            KubeFault::new(kube_faults::FaultAction::Latency(Duration::from_secs(3)))
                .verb(Verb::Watch)
                .resource("pods")
                .times(1),
        );
        h.start_operator().await;
        h.election("web", spec()).await;
        let first = h.wait_elected("web", None).await;
        let started = Instant::now();
        // Let the lag pass and the delayed events arrive: nothing may change meanwhile.
        let changed = h
            .pods_become(Duration::from_secs(5), |pods| {
                with_role(pods, "leader") != vec![first.pod.clone()]
            })
            .await;
        assert!(!changed, "the leader label moved");
        assert!(started.elapsed() >= Duration::from_secs(3));
        assert!(
            !h.kube_faults.injected().is_empty(),
            "the watch was delayed"
        );
        let now = h.wait_elected("web", None).await;
        // Regression: the stale view showed the new leader unlabelled, so the next reconcile
        // "re-elected" it - a leader->follower->leader flap and token 1 -> 2.
        assert_eq!(now, first, "same leader, session and token");
        assert_eq!(first.token, 1);
        let history = h.recorder.label_history(&first.pod, ROLE);
        assert_eq!(
            history
                .iter()
                .filter(|v| v.as_deref() == Some("leader"))
                .count(),
            1,
            "{history:?}"
        );
        h.finish().await;
    })
    .await;
}

/// Deletes election `name` and waits until it is gone (its finalizer removed) within `within`.
async fn delete_and_wait_gone(h: &Harness, name: &str, within: Duration) {
    let le = h.elections().get(name).await.expect("election");
    let uid = le.metadata.uid.clone().expect("uid");
    h.elections()
        .delete(name, &Default::default())
        .await
        .expect("delete election");
    tokio::time::timeout(
        within,
        await_condition(h.elections(), name, conditions::is_deleted(&uid)),
    )
    .await
    .expect("the election is gone (finalizer removed) in time")
    .expect("watch election");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deletion_takes_the_leader_label_off_before_the_lock_is_released() {
    with_namespace("lc-del-order", |admin, ns| async move {
        let (h, first) = Harness::web_elected(admin, ns, spec()).await;
        let key = h.key("web");
        // Every pod patch of the operator fails: the leader label cannot come off.
        let failing = h.kube_faults.add(harness::pod_patches_fail());
        h.elections()
            .delete("web", &Default::default())
            .await
            .expect("delete election");
        // Rule 2 through a deletion: while a pod carries the leader label, the operator's
        // session holds the key. Watch for a violation while the patches keep failing.
        let violated = h
            .poll_until(Duration::from_secs(5), || {
                let held = h
                    .emu()
                    .kv_entry(&key)
                    .and_then(|e| e.session)
                    .is_some_and(|s| s == first.session);
                !held && !with_role(&h.current(), "leader").is_empty()
            })
            .await;
        assert!(
            !h.kube_faults.injected().is_empty(),
            "a pod patch of the cleanup failed"
        );
        assert!(
            !violated,
            "a pod carried the leader label while the key was not held: {:?}",
            h.emu().kv_entry(&key)
        );
        assert!(
            h.elections().get_opt("web").await.expect("get").is_some(),
            "the finalizer stays while the leader label cannot come off"
        );

        h.kube_faults.remove(failing);
        let le = h.elections().get("web").await.expect("election");
        let uid = le.metadata.uid.clone().expect("uid");
        tokio::time::timeout(
            SOON,
            await_condition(h.elections(), "web", conditions::is_deleted(&uid)),
        )
        .await
        .expect("the election is gone once pods can be patched")
        .expect("watch election");
        let entry = h.emu().kv_entry(&key);
        assert!(
            entry.as_ref().is_none_or(|e| e.session.is_none()),
            "{entry:?}"
        );
        assert!(
            h.emu().session(&first.session).is_none(),
            "session destroyed"
        );
        h.wait_pods(SOON, "every pod cleaned", |pods| {
            pods.values().all(|p| {
                !p.labels.contains_key(ROLE)
                    && TRACKED.iter().all(|a| !p.annotations.contains_key(*a))
            })
        })
        .await;
        // In the recorded history, the leader lost its label before anything else changed
        // at the end: no later version of it carries the label again.
        let history = h.recorder.label_history(&first.pod, ROLE);
        assert_eq!(history.last(), Some(&None), "{history:?}");
        h.finish().await;
    })
    .await;
}

/// The pods all lose the operator's label within `within`, while the election still exists.
async fn labels_gone_while_election_exists(h: &Harness, within: Duration) {
    h.wait_pods(within, "every label removed at once", |pods| {
        pods.values().all(|p| !p.labels.contains_key(ROLE))
    })
    .await;
    assert!(
        h.elections().get_opt("web").await.expect("get").is_some(),
        "the labels came off before the deletion finished"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deletion_while_consul_is_down_unlabels_at_once_and_gives_up_after_the_bound() {
    with_namespace("lc-del-down", |admin, ns| async move {
        let bound = Duration::from_secs(8);
        let options = HarnessOptions {
            consul_cleanup_bound: bound,
            ..HarnessOptions::default()
        };
        let (h, first) = Harness::web_elected_with(admin, ns, options, spec()).await;
        let key = h.key("web");
        h.emu()
            .add_fault(Fault::always(Endpoint::Any, FaultAction::DropConnection));

        let started = Instant::now();
        h.elections()
            .delete("web", &Default::default())
            .await
            .expect("delete election");
        labels_gone_while_election_exists(&h, Duration::from_secs(5)).await;

        let le = h.elections().get("web").await.expect("election");
        let uid = le.metadata.uid.clone().expect("uid");
        tokio::time::timeout(
            bound + SOON,
            await_condition(h.elections(), "web", conditions::is_deleted(&uid)),
        )
        .await
        .expect("the election is deleted after the bound")
        .expect("watch election");
        // deletionTimestamp has one-second resolution.
        assert!(
            started.elapsed() + Duration::from_secs(1) >= bound,
            "gave up after {:?}, before the bound",
            started.elapsed()
        );
        let notes = h.wait_event("web", "ConsulCleanupSkipped").await;
        assert!(
            notes
                .iter()
                .any(|n| n.contains(&key) && n.contains(&first.session)),
            "the event names the key and the session left in Consul: {notes:?}"
        );
        h.finish().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_skip_annotation_lets_a_deletion_finish_at_once_while_consul_is_down() {
    with_namespace("lc-del-skip", |admin, ns| async move {
        let (h, first) = Harness::web_elected(admin, ns, spec()).await;
        let key = h.key("web");
        h.emu()
            .add_fault(Fault::always(Endpoint::Any, FaultAction::DropConnection));
        let patch =
            json!({"metadata": {"annotations": {"elector.dev/skip-consul-cleanup": "true"}}});
        h.elections()
            .patch(
                "web",
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(&patch),
            )
            .await
            .expect("annotate");
        // The default bound is minutes: finishing within SOON means the annotation worked.
        delete_and_wait_gone(&h, "web", SOON).await;
        let current = h.current();
        assert!(
            current.values().all(|p| !p.labels.contains_key(ROLE)),
            "{current:?}"
        );
        let notes = h.wait_event("web", "ConsulCleanupSkipped").await;
        assert!(
            notes
                .iter()
                .any(|n| n.contains(&key) && n.contains(&first.session)),
            "{notes:?}"
        );
        h.finish().await;
    })
    .await;
}

/// The rules of the chart's pre-delete hook (`consul-elector release-elections`), in the
/// watched namespaces and in the release's.
const RBAC_UNINSTALL_RULES: [&str; 2] = [
    include_str!("../../charts/consul-elector/files/rbac-uninstall-rules.yaml"),
    include_str!("../../charts/consul-elector/files/rbac-uninstall-lease-rules.yaml"),
];

/// A client acting as the pre-delete hook's ServiceAccount in `h`'s namespace, with exactly
/// the chart's hook rules (a Role there, as the chart grants it when it watches namespaces;
/// the harness' Lease is in that namespace too).
async fn hook_client(h: &Harness) -> kube::Client {
    let rules: Vec<PolicyRule> = RBAC_UNINSTALL_RULES
        .iter()
        .flat_map(|rules| {
            serde_saphyr::from_str::<Vec<PolicyRule>>(rules).expect("hook RBAC rules parse")
        })
        .collect();
    let name = "consul-elector-uninstall";
    let role = Role {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        rules: Some(rules),
    };
    Api::<Role>::namespaced(h.admin.clone(), &h.ns)
        .create(&PostParams::default(), &role)
        .await
        .expect("hook role");
    let binding = RoleBinding {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".into(),
            kind: "Role".into(),
            name: name.into(),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".into(),
            name: name.into(),
            namespace: Some(h.ns.clone()),
            ..Subject::default()
        }]),
    };
    Api::<RoleBinding>::namespaced(h.admin.clone(), &h.ns)
        .create(&PostParams::default(), &binding)
        .await
        .expect("hook role binding");
    TestCluster::shared()
        .expect("cluster (with_namespace checked)")
        .service_account_client(&h.ns, name)
        .await
}

/// No session is left, the keys of `elections` are released, and (within [`SOON`]) no pod keeps
/// a label or annotation of the operator.
async fn assert_nothing_left(h: &Harness, elections: &[&str]) {
    assert_eq!(h.session_ids().await, BTreeSet::new(), "no session is left");
    for name in elections {
        let key = h.key(name);
        let entry = h.key_lock(&key).await;
        assert!(
            entry.as_ref().is_none_or(|e| e.session.is_none()),
            "{key} is released: {entry:?}"
        );
    }
    h.wait_pods(SOON, "no pod keeps a mark of the operator", |pods| {
        pods.values().all(|p| {
            p.labels.keys().all(|k| !k.starts_with("elector.dev/"))
                && TRACKED.iter().all(|a| !p.annotations.contains_key(*a))
        })
    })
    .await;
}

/// The pre-delete hook as the chart runs it by default, with its own rights only: while the
/// operator runs, it asks it to release every election and returns once each is released
/// (labels off, keys released, sessions destroyed, finalizer gone) with its object and spec
/// kept. An operator started after that (a reinstall) elects again with no manual step.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_uninstall_hook_releases_every_election_and_keeps_the_objects() {
    with_namespace("lc-release", |admin, ns| async move {
        let mut h = Harness::new(admin, ns).await;
        h.deployment("web", 3).await;
        h.start_operator().await;
        h.election("web", spec()).await;
        let first = h.wait_elected("web", None).await;
        let hook = hook_client(&h).await;

        let released = uninstall::uninstall(
            hook,
            &h.hook_scope(),
            Course::Release,
            SOON,
            &WallClock::system(),
        )
        .await
        .expect("the hook finishes while the operator runs");
        assert_eq!(released, 1);
        let kept = h
            .elections()
            .get("web")
            .await
            .expect("the election is kept");
        assert!(
            !kept.finalizers().iter().any(|f| f == FINALIZER),
            "its finalizer is gone: {:?}",
            kept.metadata.finalizers
        );
        let status = kept.status.clone().unwrap_or_default();
        assert_eq!(status.leader, None, "nobody leads: {status:?}");
        assert_eq!(status.served_by, None, "no install serves it: {status:?}");
        assert!(
            status
                .conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "False" && c.reason == "Released"),
            "{status:?}"
        );
        assert_nothing_left(&h, &["web"]).await;

        // The operator that runs on keeps its hands off; one started later elects again.
        h.stop_operator().await;
        h.start_operator().await;
        let again = h.wait_elected("web", None).await;
        assert!(again.token > first.token, "{again:?} after {first:?}");
        let back = h.elections().get("web").await.expect("get");
        assert!(
            back.finalizers().iter().any(|f| f == FINALIZER),
            "the finalizer is back"
        );
        h.finish().await;
    })
    .await;
}

/// The pre-delete hook set to delete, with its own rights only: while the operator runs, it
/// deletes every election of the namespace and returns once the operator has cleaned up each
/// (labels off, keys released, sessions destroyed). Once the operator is gone, it gives up after its bound,
/// names what is left and the recovery, and that recovery (removing the finalizer) works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_uninstall_hook_deletes_every_election_and_waits_for_the_cleanup() {
    with_namespace("lc-uninstall", |admin, ns| async move {
        let mut h = Harness::new(admin, ns).await;
        h.deployment("web", 3).await;
        h.deployment("api", 2).await;
        h.start_operator().await;
        h.election("web", spec()).await;
        let mut second = spec();
        second["selector"] = json!({"matchLabels": {"app": "api"}});
        // Its own label key: the recorder checks rule 1 on the default one, for `web`.
        second["labels"] = json!({"key": "elector.dev/api-role"});
        h.election("second", second).await;
        h.wait_elected("web", None).await;
        h.wait_status("second", |le| {
            le.status.as_ref().is_some_and(|s| s.leader.is_some())
        })
        .await;
        assert_eq!(h.session_ids().await.len(), 2, "one session per election");
        let hook = hook_client(&h).await;

        let deleted = uninstall::uninstall(hook.clone(), &h.hook_scope(), Course::Delete, SOON, &WallClock::system())
            .await
            .expect("the hook finishes while the operator runs");
        assert_eq!(deleted, 2);
        let left = h.elections().list(&Default::default()).await.expect("list");
        assert!(left.items.is_empty(), "no election is left");
        assert_nothing_left(&h, &["web", "second"]).await;

        // With the operator gone, an election keeps its finalizer: the hook gives up after its
        // bound and says how to recover. (The operator that ran stands back once asked; one
        // started after the request elects.)
        h.stop_operator().await;
        h.start_operator().await;
        h.election("late", spec()).await;
        h.wait_elected("late", None).await;
        h.stop_operator().await;
        let bound = Duration::from_secs(2);
        let error = uninstall::uninstall(hook, &h.hook_scope(), Course::Delete, bound, &WallClock::system())
            .await
            .expect_err("nothing cleans up without the operator");
        let message = error.to_string();
        let late = format!("{}/late", h.ns);
        assert!(
            matches!(&error, UninstallError::TimedOut { remaining, .. } if remaining == std::slice::from_ref(&late)),
            "{message}"
        );
        assert!(message.contains(&late) && message.contains("kubectl patch"), "{message}");
        // The recovery the message names: the finalizer removed by a merge patch.
        let patch = json!({"metadata": {"finalizers": null}});
        h.elections()
            .patch("late", &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .expect("remove the finalizer");
        let gone = h.elections().get_opt("late").await.expect("get");
        assert!(gone.is_none(), "the election is gone once its finalizer is");
        h.finish().await;
    })
    .await;
}

/// Deleting an election switched to Observe mode before its operator session was handed over
/// (Consul refused the release) still releases the key and destroys the session: the session
/// is the operator's, whatever the mode says now, and must not be renewed for an election that
/// no longer exists.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_an_election_switched_to_observe_destroys_the_session_left_from_managed() {
    with_namespace("lc-observe-delete", |admin, ns| async move {
        let (h, first) = Harness::web_elected(admin, ns, spec()).await;
        let error = |status| FaultAction::Respond {
            status,
            body: "injected".into(),
            retry_after: None,
        };
        let refuse_release = h.emu().add_fault(Fault {
            method: Some(http::Method::PUT),
            ..Fault::always(Endpoint::Kv, error(500))
        });
        let refuse_destroy = h
            .emu()
            .add_fault(Fault::always(Endpoint::SessionDestroy, error(500)));
        h.patch_spec("web", json!({"mode": "Observe"})).await;
        // The hand-over took the leader label off, then could not release the key.
        h.wait_pods(SOON, "no leader label", |pods| {
            with_role(pods, "leader").is_empty()
        })
        .await;
        assert!(h.session_exists(&first.session).await);
        let uid = h
            .elections()
            .get("web")
            .await
            .expect("election")
            .metadata
            .uid
            .expect("uid");
        h.elections()
            .delete("web", &Default::default())
            .await
            .expect("delete election");
        // Rule 7: while Consul refuses the release, the finalizer waits (up to its bound).
        let gone = || await_condition(h.elections(), "web", conditions::is_deleted(&uid));
        assert!(
            tokio::time::timeout(Duration::from_secs(3), gone())
                .await
                .is_err(),
            "the election went while its session could not be destroyed"
        );
        h.emu().remove_fault(refuse_release);
        h.emu().remove_fault(refuse_destroy);
        tokio::time::timeout(Duration::from_secs(30), gone())
            .await
            .expect("the election is deleted within 30 s")
            .expect("watch the election");
        // Not renewed any more, it would expire after 2×TTL (20 s); destroyed, it is gone at
        // once.
        let mut destroyed = false;
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            if !h.session_exists(&first.session).await {
                destroyed = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(
            destroyed,
            "the session of the deleted election is still in Consul 15 s after the deletion"
        );
        assert!(
            h.key_lock(&h.key("web"))
                .await
                .is_none_or(|lock| lock.session.is_none()),
            "the key is released"
        );
        h.finish().await;
    })
    .await;
}
