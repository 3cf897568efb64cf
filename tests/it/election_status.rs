//! The status is written one way (a JSON patch of the status subresource by the operator's
//! field manager, conditional on the status it was based on) and keeps up with the election
//! whatever happened before: candidates that come and go, an election with no candidates at
//! all, status writes failing during a failover, and a write based on an older status.

use crate::harness;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use kube::runtime::watcher;

use harness::{Harness, ROLE, SOON, phase};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde_json::json;
use testkit::cluster::with_namespace;
use testkit::kube_faults::{FaultAction, KubeFault, Verb, WatchHold};

/// The `Ready` condition's status and reason.
fn ready(le: &consul_elector::crd::LeaderElection) -> Option<(String, String)> {
    le.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| (c.status.clone(), c.reason.clone()))
}

fn is(status: &str, reason: &str) -> Option<(String, String)> {
    Some((status.to_owned(), reason.to_owned()))
}

fn web() -> serde_json::Value {
    json!({"selector": {"matchLabels": {"app": "web"}}})
}

async fn scale(h: &Harness, replicas: i32) {
    let deployments: Api<Deployment> = Api::namespaced(h.admin.clone(), &h.ns);
    deployments
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"replicas": replicas}})),
        )
        .await
        .expect("scale");
}

/// The names of the pods of the namespace that are not terminating.
async fn live_pods(h: &Harness) -> BTreeSet<String> {
    let pods: Api<Pod> = Api::namespaced(h.admin.clone(), &h.ns);
    pods.list(&Default::default())
        .await
        .expect("list pods")
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter_map(|p| p.metadata.name)
        .collect()
}

/// Waits until the status lists exactly the live pods as candidates.
async fn candidates_follow_the_pods(h: &Harness) {
    let deadline = tokio::time::Instant::now() + SOON;
    loop {
        let listed: BTreeSet<String> = h
            .status("web")
            .await
            .candidates
            .into_iter()
            .map(|c| c.pod)
            .collect();
        let live = live_pods(h).await;
        if listed == live {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the status lists {listed:?}, the pods are {live:?}"
        );
        let _ = h
            .recorder
            .wait_until(std::time::Duration::from_millis(50), |_| false)
            .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_keeps_up_after_candidates_come_and_go() {
    with_namespace("st-cands", |admin, ns| async move {
        let (h, first) = Harness::web_elected(admin, ns, web()).await;
        h.wait_status("web", |le| ready(le) == is("True", "LeaderElected"))
            .await;
        // No candidates at all (Ready: idle on purpose), then some again, then one goes away.
        scale(&h, 0).await;
        h.wait_status("web", |le| {
            le.status.as_ref().is_some_and(|s| s.candidates.is_empty())
                && phase(le).as_deref() == Some("Pending")
                && ready(le) == is("True", "Idle")
        })
        .await;
        scale(&h, 3).await;
        h.wait_elected("web", Some(&first.pod)).await;
        candidates_follow_the_pods(&h).await;
        // Pods selected but none Ready: not Ready, and not idle.
        let pods_now = live_pods(&h).await;
        for pod in &pods_now {
            h.sim.set_ready(pod, false).await;
        }
        h.wait_status("web", |le| ready(le) == is("False", "NoCandidates"))
            .await;
        for pod in &pods_now {
            h.sim.set_ready(pod, true).await;
        }
        h.wait_status("web", |le| ready(le) == is("True", "LeaderElected"))
            .await;
        let second = h.wait_elected("web", None).await;
        let pods: Api<Pod> = Api::namespaced(h.admin.clone(), &h.ns);
        let follower = live_pods(&h)
            .await
            .into_iter()
            .find(|p| *p != second.pod)
            .expect("a follower");
        pods.delete(&follower, &DeleteParams::default())
            .await
            .expect("delete follower");
        candidates_follow_the_pods(&h).await;
        // Every status write is the operator's conditional JSON patch (it tests the fencing
        // token first): no other manager owns any part of the status. (1.20 does not record
        // the subresource; the fields tell.)
        let le = h.elections().get("web").await.expect("election");
        let managers: Vec<(String, String)> = le
            .metadata
            .managed_fields
            .unwrap_or_default()
            .into_iter()
            .filter(|m| {
                m.fields_v1
                    .as_ref()
                    .is_some_and(|f| f.0.get("f:status").is_some())
            })
            .map(|m| {
                (
                    m.manager.unwrap_or_default(),
                    m.operation.unwrap_or_default(),
                )
            })
            .collect();
        assert_eq!(
            managers,
            vec![("consul-elector".to_owned(), "Update".to_owned())],
            "status managers"
        );
        h.finish().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_status_writes_stall_a_failover_safely_and_the_status_recovers() {
    with_namespace("st-500", |admin, ns| async move {
        let (h, first) = Harness::web_elected(admin, ns, web()).await;
        let fault = h.kube_faults.add(
            KubeFault::new(FaultAction::status(500, "InternalError", "etcd is sad"))
                .verb(Verb::Patch)
                .resource("leaderelections/status"),
        );
        let pods: Api<Pod> = Api::namespaced(h.admin.clone(), &h.ns);
        pods.delete(&first.pod, &DeleteParams::default())
            .await
            .expect("delete leader");
        // Let the failover attempts run into the failing status writes for a while.
        let attempted = h
            .poll_until(SOON, || h.kube_faults.injected().len() >= 5)
            .await;
        assert!(attempted, "status writes were attempted");
        // The failures surface: a Warning event, the metric, and on the first status write
        // that succeeds again, the StatusWritten condition (watched from before the fault
        // goes, so the version that carries it cannot be missed).
        let notes = h.wait_event("web", "StatusWriteFailed").await;
        assert!(
            notes
                .iter()
                .any(|n| n.contains("status writes failed in a row")),
            "{notes:?}"
        );
        let failures = h
            .operator()
            .metrics
            .encode()
            .lines()
            .find_map(|l| l.strip_prefix("consul_elector_status_write_failures_total "))
            .and_then(|v| v.parse::<f64>().ok());
        assert!(failures.is_some_and(|n| n >= 3.0), "{failures:?}");
        let (recovered, ()) = tokio::join!(
            h.wait_status("web", |le| {
                harness::condition(le, "StatusWritten")
                    .is_some_and(|c| c.reason == "WrittenAfterFailures")
            }),
            async { h.kube_faults.remove(fault) }
        );
        let written = harness::condition(&recovered, "StatusWritten").expect("StatusWritten");
        assert!(
            written.message.contains("failed before this one"),
            "{}",
            written.message
        );
        let second = h.wait_elected("web", Some(&first.pod)).await;
        assert_ne!(second.pod, first.pod);
        // No flapping: the successor became leader once and stayed.
        let history = h.recorder.label_history(&second.pod, ROLE);
        let elected = history
            .iter()
            .filter(|v| v.as_deref() == Some("leader"))
            .count();
        assert_eq!(elected, 1, "{history:?}");
        assert!(second.token > first.token);
        h.finish().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_label_that_cannot_be_written_is_reported_as_electing_without_flapping() {
    with_namespace("st-truth", |admin, ns| async move {
        // Two bare pods (no replacement appears): when the leader goes, the other is the only
        // successor, and its label cannot be written. The status names the successor once, an
        // instant before its first label write (rule 6's write of the token), then Electing
        // until the label is written: retries do not report it as leading again.
        let mut h = Harness::new(admin, ns).await;
        h.bare_pod("a", &[("app", "web")]).await;
        h.bare_pod("b", &[("app", "web")]).await;
        h.start_operator().await;
        h.election("web", web()).await;
        let first = h.wait_elected("web", None).await;
        let successor = if first.pod == "a" { "b" } else { "a" };
        let statuses = record_statuses(&h, "web");
        assert!(
            h.poll_until(SOON, || statuses.lock().expect("statuses").listed)
                .await,
            "the election watch listed"
        );
        let fault = h
            .kube_faults
            .add(harness::pod_patches_fail().name(successor));
        let pods: Api<Pod> = Api::namespaced(h.admin.clone(), &h.ns);
        pods.delete(&first.pod, &DeleteParams::default())
            .await
            .expect("delete leader");
        let attempted = h
            .poll_until(SOON, || h.kube_faults.injected().len() >= 3)
            .await;
        assert!(attempted, "the failover was attempted");
        let le = h.elections().get("web").await.expect("election");
        let elected = harness::condition(&le, "LeaderElected").expect("LeaderElected");
        assert!(
            harness::with_role(&h.current(), "leader").is_empty(),
            "no pod can carry the label"
        );
        assert_eq!(
            (elected.status.as_str(), phase(&le).as_deref()),
            ("False", Some("Electing")),
            "{}",
            elected.message
        );
        let claims = statuses
            .lock()
            .expect("statuses")
            .seen
            .iter()
            .filter(|s| s["phase"] == "Elected" && s["leader"]["pod"] == successor)
            .count();
        assert!(
            claims <= 1,
            "the successor was reported leading {claims} times while its label failed: {:#?}",
            statuses.lock().expect("statuses").seen
        );
        h.kube_faults.remove(fault);
        let second = h.wait_elected("web", Some(&first.pod)).await;
        assert_eq!(second.pod, successor);
        h.finish().await;
    })
    .await;
}

/// What a watch of one election showed.
#[derive(Default)]
struct Statuses {
    /// The watch's first list is complete.
    listed: bool,
    /// Every status it showed, in order (a version whose status equals the one before it, a
    /// write of the metadata such as the finalizer's, is left out).
    seen: Vec<serde_json::Value>,
}

/// Watches election `name` from now on.
fn record_statuses(h: &Harness, name: &str) -> Arc<Mutex<Statuses>> {
    let recorded = Arc::new(Mutex::new(Statuses::default()));
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let stream = watcher::watcher(h.elections(), config);
    let sink = recorded.clone();
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            let le = match event.expect("election watch") {
                watcher::Event::Apply(le) | watcher::Event::InitApply(le) => le,
                watcher::Event::InitDone => {
                    sink.lock().expect("statuses").listed = true;
                    continue;
                }
                watcher::Event::Init | watcher::Event::Delete(_) => continue,
            };
            let status = serde_json::to_value(&le.status).expect("status as JSON");
            let mut recorded = sink.lock().expect("statuses");
            if recorded.seen.last() != Some(&status) {
                recorded.seen.push(status);
            }
        }
    });
    recorded
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_election_writes_its_status_once_naming_its_leader() {
    with_namespace("st-once", |admin, ns| async move {
        // Rule 6 needs the token in the status before the pod carries it; that one write
        // says everything the election's status has to say, so none follows it.
        let mut h = Harness::new(admin, ns).await;
        h.deployment("web", 3).await;
        h.start_operator().await;
        let statuses = record_statuses(&h, "web");
        // The watch has listed (the election does not exist yet) before it is created.
        assert!(
            h.poll_until(SOON, || statuses.lock().expect("statuses").listed)
                .await,
            "the election watch listed"
        );
        h.election("web", web()).await;
        let elected = h.wait_elected("web", None).await;
        let names_leader = |status: &serde_json::Value| {
            status["phase"] == "Elected"
                && status["leader"]["pod"] == elected.pod.as_str()
                && status["fencingToken"] == elected.token
        };
        let seen = h
            .poll_until(SOON, || {
                statuses
                    .lock()
                    .expect("statuses")
                    .seen
                    .iter()
                    .any(names_leader)
            })
            .await;
        assert!(seen, "the watch shows the elected status");
        let written: Vec<serde_json::Value> = statuses
            .lock()
            .expect("statuses")
            .seen
            .iter()
            .filter(|s| !s.is_null())
            .cloned()
            .collect();
        assert!(
            names_leader(&written[0]),
            "the first status written names the leader: {:#}",
            written[0]
        );
        assert_eq!(
            harness::condition(
                &h.elections().get("web").await.expect("election"),
                "LeaderElected"
            )
            .map(|c| c.status),
            Some("True".to_owned())
        );
        h.finish().await;
    })
    .await;
}

/// The operator's count of failed status writes.
fn status_write_failures(h: &Harness) -> f64 {
    h.operator()
        .metrics
        .encode()
        .lines()
        .find_map(|l| l.strip_prefix("consul_elector_status_write_failures_total "))
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or_default()
}

/// Rule 8: a status write is conditional on the status it was based on, not only on its
/// fencing token. Another writer's status (the test's, standing in for a replica whose write
/// the operator's stalled watch has not delivered) keeps the token and records a switchover
/// the operator never saw; the operator's next write, based on the older status, is refused,
/// and once its watch delivers again it writes on top of the newer one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_status_write_based_on_an_older_status_is_refused() {
    with_namespace("st-stale", |admin, ns| async move {
        let (h, stall, first, record) = stalled_with_a_newer_status(admin, ns).await;
        let elections: Api<consul_elector::crd::LeaderElection> =
            Api::namespaced(h.admin.clone(), &h.ns);
        // A follower goes: the operator writes the candidates, based on what it last saw.
        let follower = delete_a_follower(&h, &first.pod).await;
        let tried = h
            .poll_until(SOON, || status_write_failures(&h) >= 1.0)
            .await;
        let after = elections.get_status("web").await.expect("read status");
        assert!(
            tried && !without_candidate(&after, &follower),
            "a write based on the older status replaced the newer one: {:?}",
            after.status.map(|s| s.last_switchover)
        );

        released_the_record_stays(&h, &stall, &follower, &record).await;
        h.finish().await;
    })
    .await;
}

/// Writes a status as another replica would (a JSON patch conditional on the revision it read,
/// read again when a write of the operator's came first): the same fencing token, a new
/// revision and a switchover record the operator never saw. Returns the record.
async fn other_writer_records_a_switchover(h: &Harness) -> serde_json::Value {
    let elections: Api<consul_elector::crd::LeaderElection> =
        Api::namespaced(h.admin.clone(), &h.ns);
    let record = json!({
        "to": "*",
        "requestedAt": "2026-01-01T00:00:00Z",
        "completedAt": "2026-01-01T00:00:01Z",
        "result": "Refused",
        "message": "decided by another writer",
    });
    let mut refused = 0;
    loop {
        let current = elections.get_status("web").await.expect("read status");
        let status = current.status.unwrap_or_default();
        let mut next = serde_json::to_value(&status).expect("status as JSON");
        next["lastSwitchover"] = record.clone();
        next["revision"] = json!(status.revision.unwrap_or(0) + 1);
        let patch: json_patch::Patch = serde_json::from_value(json!([
            {"op": "test", "path": "/status/revision", "value": status.revision},
            {"op": "add", "path": "/status", "value": next},
        ]))
        .expect("a JSON patch");
        match elections
            .patch_status("web", &PatchParams::default(), &Patch::<()>::Json(patch))
            .await
        {
            Ok(_) => return record,
            Err(kube::Error::Api(e)) if e.code == 422 && refused < 10 => refused += 1,
            Err(e) => panic!("the other writer's status: {e}"),
        }
    }
}

/// `web` elected with three pods, then the operator's election watch stalled and a newer
/// status written by another writer ([`other_writer_records_a_switchover`]): the harness, the
/// stall, the leader elected and the other writer's record.
async fn stalled_with_a_newer_status(
    admin: kube::Client,
    ns: String,
) -> (Harness, WatchHold, harness::Elected, serde_json::Value) {
    let mut h = Harness::new(admin, ns).await;
    h.deployment("web", 3).await;
    let stall = h.election_watch_hold();
    h.start_operator().await;
    h.election("web", web()).await;
    let first = h.wait_elected("web", None).await;
    h.wait_reconciled().await;
    stall.hold();
    let record = other_writer_records_a_switchover(&h).await;
    (h, stall, first, record)
}

/// Deletes a pod of `web` other than `leader`; its name.
async fn delete_a_follower(h: &Harness, leader: &str) -> String {
    let follower = live_pods(h)
        .await
        .into_iter()
        .find(|p| p != leader)
        .expect("a follower");
    let pods: Api<Pod> = Api::namespaced(h.admin.clone(), &h.ns);
    pods.delete(&follower, &DeleteParams::default())
        .await
        .expect("delete a follower");
    follower
}

/// Whether the status no longer lists `pod` among the candidates.
fn without_candidate(le: &consul_elector::crd::LeaderElection, pod: &str) -> bool {
    le.status
        .as_ref()
        .is_some_and(|s| s.candidates.iter().all(|c| c.pod != pod))
}

/// Releases the stalled watch, waits until the operator wrote the candidates without
/// `follower`, and checks that the other writer's `record` is still there.
async fn released_the_record_stays(
    h: &Harness,
    stall: &WatchHold,
    follower: &str,
    record: &serde_json::Value,
) {
    stall.release();
    let caught_up = h
        .wait_status("web", |le| without_candidate(le, follower))
        .await;
    let kept = caught_up.status.and_then(|s| s.last_switchover);
    assert_eq!(
        &serde_json::to_value(kept).expect("record as JSON"),
        record,
        "the other writer's record was lost"
    );
}

/// Rule 8 across a reconcile: a reconcile planned on the older status (its watch stalled), and
/// its pod patch was still on its way when the watch delivered the newer status. Its status
/// write is tested against the revision its plan was based on, not the one current when it is
/// sent, so it does not replace the newer status with what it planned on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_status_planned_on_an_older_status_is_refused_after_the_newer_one_arrived() {
    with_namespace("st-planned", |admin, ns| async move {
        let (h, stall, first, record) = stalled_with_a_newer_status(admin, ns).await;

        // The operator's pod patches take 3 s from now on.
        let slow = h.kube_faults.add(
            KubeFault::new(FaultAction::Latency(std::time::Duration::from_secs(3)))
                .verb(Verb::Patch)
                .resource("pods"),
        );
        let patches = || {
            h.kube_faults
                .seen()
                .iter()
                .filter(|r| r.verb == Some(Verb::Patch) && r.resource.as_deref() == Some("pods"))
                .count()
        };
        let before = patches();
        let follower = delete_a_follower(&h, &first.pod).await;
        // A reconcile planned on the older status labels the replacement pod.
        let patching = h.poll_until(SOON, || patches() > before).await;
        assert!(patching, "the operator labelled the replacement pod");
        released_the_record_stays(&h, &stall, &follower, &record).await;
        h.kube_faults.remove(slow);
        h.finish().await;
    })
    .await;
}
