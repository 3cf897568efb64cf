//! Deliberate moves on the test cluster: a switchover requested with the
//! `elector.dev/switchover-to` annotation (to a named pod, or `*`), refused requests, the
//! handover drain, priorities and failback. Every move is a planned one: the old leader is
//! demoted first and its lock released explicitly (no lock-delay), and the never-two-leaders
//! rule is checked over the whole recorded history at the end of each test.

use crate::harness;

use consul_elector::crd::{
    HANDOVER_ANNOTATION, HANDOVER_DONE, LeaderElection, LeaderElectionStatus, PRIORITY_ANNOTATION,
    SWITCHOVER_ANNOTATION, SwitchoverResult, SwitchoverStatus,
};
use harness::{Backend, ConsulUnderTest, Elected, Harness, HarnessOptions, SOON, with_role};
use kube::Client;
use kube::api::{Patch, PatchParams};
use serde_json::json;
use testkit::cluster::with_namespace;
use testkit::kube_faults::{FaultAction, KubeFault, Verb};

fn spec() -> serde_json::Value {
    json!({"selector": {"matchLabels": {"app": "web"}}})
}

/// The spec with failback on, at once.
fn failback_spec() -> serde_json::Value {
    json!({
        "selector": {"matchLabels": {"app": "web"}},
        "failback": {"enabled": true, "minInterval": "0s"},
    })
}

/// Asks election `web` to switch over to `to`.
async fn request(h: &Harness, to: &str) {
    let patch = json!({"metadata": {"annotations": {SWITCHOVER_ANNOTATION: to}}});
    h.elections()
        .patch("web", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("annotate the election");
}

/// Sets (or removes) annotation `key` on pod `pod`.
async fn annotate_pod(h: &Harness, pod: &str, key: &str, value: Option<&str>) {
    let patch = json!({"metadata": {"annotations": {key: value}}});
    h.pods()
        .patch(pod, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("annotate the pod");
}

/// Waits until the request for `to` is decided, and checks that the first version of the
/// election without the request annotation already carries its final record: whoever waits
/// for the annotation to go must never read the previous request's outcome.
async fn decided(h: &Harness, to: &str) -> SwitchoverStatus {
    let le = h
        .wait_status("web", |le: &LeaderElection| {
            !le.metadata
                .annotations
                .as_ref()
                .is_some_and(|a| a.contains_key(SWITCHOVER_ANNOTATION))
        })
        .await;
    let record = le
        .status
        .and_then(|s| s.last_switchover)
        .expect("the outcome is recorded before the request is removed");
    assert_eq!(record.to, to, "{record:?}");
    assert_ne!(record.result, SwitchoverResult::InProgress, "{record:?}");
    record
}

/// Waits until the status lists `pod` with `priority` and returns that status.
async fn wait_priority(h: &Harness, pod: &str, priority: i32) -> LeaderElectionStatus {
    let le = h
        .wait_status("web", |le: &LeaderElection| {
            le.status.as_ref().is_some_and(|s| {
                s.candidates
                    .iter()
                    .any(|c| c.pod == pod && c.priority == priority)
            })
        })
        .await;
    le.status.unwrap_or_default()
}

/// A follower of the election (not `leader`).
fn a_follower(h: &Harness, leader: &str) -> String {
    with_role(&h.current(), "follower")
        .into_iter()
        .find(|p| p != leader)
        .expect("a follower")
}

/// A follower of the election (not `leader`) given priority 5, once the status shows it.
async fn a_preferred_follower(h: &Harness, leader: &str) -> String {
    let preferred = a_follower(h, leader);
    annotate_pod(h, &preferred, PRIORITY_ANNOTATION, Some("5")).await;
    wait_priority(h, &preferred, 5).await;
    preferred
}

/// A switchover to a named follower: a planned move, recorded in the status and an event.
async fn switchover_to_a_named_pod(backend: Backend) {
    let Some(consul) = ConsulUnderTest::start(backend).await else {
        return;
    };
    with_namespace("so-named", |admin, ns| async move {
        let (h, first) = Harness::web_elected_on(admin, ns, consul, spec()).await;
        let target = a_follower(&h, &first.pod);
        request(&h, &target).await;
        let second = h.wait_elected("web", Some(&first.pod)).await;
        assert_eq!(second.pod, target);
        h.assert_explicit_release("web", &first, &second).await;
        let record = decided(&h, &target).await;
        assert_eq!(record.result, SwitchoverResult::Completed);
        assert_eq!(record.from.as_deref(), Some(first.pod.as_str()));
        assert_eq!(record.leader.as_deref(), Some(target.as_str()));
        assert!(
            record
                .completed_at
                .is_some_and(|c| c >= record.requested_at)
        );
        let notes = h.wait_event("web", "SwitchoverCompleted").await;
        assert!(notes.iter().any(|n| n.contains(&target)), "{notes:?}");
        h.finish().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_switchover_to_a_named_pod_is_a_planned_move_and_is_recorded_on_the_emulator() {
    switchover_to_a_named_pod(Backend::Emulator).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_switchover_to_a_named_pod_is_a_planned_move_and_is_recorded_on_a_real_consul() {
    switchover_to_a_named_pod(Backend::RealConsul).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_switchover_to_any_pod_goes_to_the_highest_priority() {
    with_namespace("so-any", |admin, ns| async move {
        let (h, first) = Harness::web_elected(admin, ns, spec()).await;
        let preferred = a_preferred_follower(&h, &first.pod).await;
        // Stickiness: a higher priority alone does not move a healthy leader.
        assert_eq!(h.wait_elected("web", None).await.pod, first.pod);
        request(&h, "*").await;
        let second = h.wait_elected("web", Some(&first.pod)).await;
        assert_eq!(second.pod, preferred);
        h.assert_explicit_release("web", &first, &second).await;
        let record = decided(&h, "*").await;
        assert_eq!(
            (record.result, record.leader.as_deref()),
            (SwitchoverResult::Completed, Some(preferred.as_str()))
        );
        assert_eq!(
            h.wait_elected("web", None).await.pod,
            preferred,
            "no bounce"
        );
        h.finish().await;
    })
    .await;
}

/// Checks that the `*` request moved leadership from `from` to `to` once: after a reconcile
/// that started later (woken by a change of the third pod) wrote the status, the record still
/// says so and nothing announced a move away from `to`.
async fn decided_once(h: &Harness, from: &str, to: &str) {
    decided(h, "*").await;
    let third = with_role(&h.current(), "follower")
        .into_iter()
        .find(|p| p != from && p != to)
        .expect("a third pod");
    annotate_pod(h, &third, PRIORITY_ANNOTATION, Some("1")).await;
    let status = wait_priority(h, &third, 1).await;
    let record = status.last_switchover.expect("the switchover's record");
    assert_eq!(
        (
            record.result,
            record.leader.as_deref(),
            record.from.as_deref()
        ),
        (SwitchoverResult::Completed, Some(to), Some(from)),
        "{record:?}"
    );
    assert_eq!(status.leader.map(|l| l.pod).as_deref(), Some(to));
    let pods = h.current();
    assert!(
        pods.get(to)
            .is_some_and(|p| !p.annotations.contains_key(HANDOVER_ANNOTATION)),
        "a move away from the new leader was announced: {:?}",
        pods.get(to)
    );
}

/// A `*` switchover is decided once, however stale the operator's copy of the election: its
/// watch of LeaderElections stalls after the operator saw the request, so every later
/// reconcile still reads the annotation the operator itself removed. Read as a new request,
/// it would move leadership away from the pod it just went to.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removed_request_read_from_a_stale_copy_moves_nothing() {
    with_namespace("so-stale", |admin, ns| async move {
        let mut h = Harness::with_options(admin, ns, HarnessOptions::default()).await;
        h.deployment("web", 3).await;
        let stall = h.election_watch_hold();
        h.start_operator().await;
        let spec = json!({
            "selector": {"matchLabels": {"app": "web"}},
            "switchover": {"drainSeconds": 300},
        });
        h.election("web", spec).await;
        let first = h.wait_elected("web", None).await;
        let preferred = a_preferred_follower(&h, &first.pod).await;
        request(&h, "*").await;
        let leader = first.pod.clone();
        h.wait_pods(SOON, "the leader to be told about the handover", |pods| {
            pods.get(&leader)
                .is_some_and(|p| p.annotations.contains_key(HANDOVER_ANNOTATION))
        })
        .await;
        // The operator saw the request; from now on its copy of the election keeps it.
        stall.hold();
        annotate_pod(&h, &first.pod, HANDOVER_ANNOTATION, Some(HANDOVER_DONE)).await;
        let second = h.wait_elected("web", Some(&first.pod)).await;
        assert_eq!(second.pod, preferred);
        decided_once(&h, &first.pod, &preferred).await;
        stall.release();
        assert_eq!(h.wait_elected("web", None).await.pod, preferred);
        h.finish().await;
    })
    .await;
}

/// A `*` switchover whose removal failed is decided once: the next reconcile finds the
/// request still on the election, and removes it rather than deciding it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_whose_removal_failed_moves_nothing_more() {
    with_namespace("so-unremoved", |admin, ns| async move {
        let (h, first, preferred) = removal_failing(admin, ns, Some(1)).await;
        assert_eq!(h.wait_elected("web", Some(&first.pod)).await.pod, preferred);
        decided_once(&h, &first.pod, &preferred).await;
        assert_eq!(h.kube_faults.injected().len(), 1, "the removal failed once");
        h.finish().await;
    })
    .await;
}

/// A decided request whose removal keeps failing is sent again soon, not at the next resync
/// ten minutes later: once the API server accepts the patch, the request is gone within
/// moments, and nothing moved again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_whose_removal_keeps_failing_is_removed_once_it_can_be() {
    with_namespace("so-unremovable", |admin, ns| async move {
        let (h, first, preferred) = removal_failing(admin, ns, None).await;
        assert_eq!(h.wait_elected("web", Some(&first.pod)).await.pod, preferred);
        // The removal failed when the request was decided, and again afterwards.
        let again = h
            .poll_until(SOON, || h.kube_faults.injected().len() >= 2)
            .await;
        assert!(again, "the removal was not sent again");
        h.kube_faults.clear();
        decided_once(&h, &first.pod, &preferred).await;
        h.finish().await;
    })
    .await;
}

/// An elected `web` with a preferred follower, and the election's patches (only the
/// request's removal patches the election itself, not its status) failing `times` times, or
/// until cleared.
async fn removal_failing(
    admin: Client,
    ns: String,
    times: Option<u32>,
) -> (Harness, Elected, String) {
    let (h, first) = Harness::web_elected(admin, ns, spec()).await;
    let preferred = a_preferred_follower(&h, &first.pod).await;
    let fault = KubeFault::new(FaultAction::status(500, "InternalError", "injected"))
        .verb(Verb::Patch)
        .resource("leaderelections");
    h.kube_faults.add(match times {
        Some(times) => fault.times(times),
        None => fault,
    });
    request(&h, "*").await;
    (h, first, preferred)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn switchovers_that_cannot_be_honoured_are_refused_and_nothing_moves() {
    with_namespace("so-refused", |admin, ns| async move {
        let (h, first) = Harness::web_elected(admin, ns, spec()).await;
        request(&h, "no-such-pod").await;
        let record = decided(&h, "no-such-pod").await;
        assert_eq!(record.result, SwitchoverResult::Refused);
        assert!(record.message.contains("no-such-pod"), "{}", record.message);
        h.wait_event("web", "SwitchoverRefused").await;

        let never = a_follower(&h, &first.pod);
        annotate_pod(&h, &never, PRIORITY_ANNOTATION, Some("-1")).await;
        h.wait_status("web", |le: &LeaderElection| {
            le.status.as_ref().is_some_and(|s| {
                s.candidates
                    .iter()
                    .any(|c| c.pod == never && c.reason.as_deref() == Some("NeverLeader"))
            })
        })
        .await;
        request(&h, &never).await;
        let record = decided(&h, &never).await;
        assert_eq!(record.result, SwitchoverResult::Refused);
        let message = record.message;
        assert!(message.contains("NeverLeader"), "{message}");
        let now = h.wait_elected("web", None).await;
        assert_eq!(
            (now.pod.as_str(), now.token, now.transitions),
            (first.pod.as_str(), first.token, first.transitions),
            "nothing moved"
        );
        h.finish().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_announces_the_move_and_the_application_can_end_it() {
    with_namespace("so-drain", |admin, ns| async move {
        let spec = json!({
            "selector": {"matchLabels": {"app": "web"}},
            "switchover": {"drainSeconds": 300},
        });
        let (h, first) = Harness::web_elected(admin, ns, spec).await;
        let target = a_follower(&h, &first.pod);
        request(&h, &target).await;
        let leader = first.pod.clone();
        h.wait_pods(SOON, "the leader to be told about the handover", |pods| {
            pods.get(&leader).is_some_and(|p| {
                p.annotations.contains_key(HANDOVER_ANNOTATION)
                    && p.labels.get(harness::ROLE).map(String::as_str) == Some("leader")
            })
        })
        .await;
        // The application is done well before the 300 s deadline.
        annotate_pod(&h, &first.pod, HANDOVER_ANNOTATION, Some(HANDOVER_DONE)).await;
        let second = h.wait_elected("web", Some(&first.pod)).await;
        assert_eq!(second.pod, target);
        h.assert_explicit_release("web", &first, &second).await;
        let old = first.pod.clone();
        h.wait_pods(
            SOON,
            "the handover annotation to go with the role",
            |pods| {
                pods.get(&old)
                    .is_some_and(|p| !p.annotations.contains_key(HANDOVER_ANNOTATION))
            },
        )
        .await;
        assert_eq!(
            decided(&h, &target).await.result,
            SwitchoverResult::Completed
        );
        h.finish().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failback_moves_leadership_to_a_pod_of_higher_priority() {
    with_namespace("so-failback", |admin, ns| async move {
        let (h, first) = Harness::web_elected(admin, ns, failback_spec()).await;
        let preferred = a_follower(&h, &first.pod);
        annotate_pod(&h, &preferred, PRIORITY_ANNOTATION, Some("10")).await;
        let second = h.wait_elected("web", Some(&first.pod)).await;
        assert_eq!(second.pod, preferred);
        h.assert_explicit_release("web", &first, &second).await;
        let notes = h.wait_event("web", "Failback").await;
        assert!(notes.iter().any(|n| n.contains(&preferred)), "{notes:?}");
        h.finish().await;
    })
    .await;
}

/// A switchover away from the pod of the highest priority, with failback on: leadership
/// moves to another pod and straight back, both moves in one reconcile. The status counts
/// both transitions: the second move is recorded against the status the first one wrote,
/// not the one the reconcile read when it started.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_switchover_undone_by_a_failback_counts_both_transitions() {
    with_namespace("so-there-and-back", |admin, ns| async move {
        let (h, first) = Harness::web_elected(admin, ns, failback_spec()).await;
        annotate_pod(&h, &first.pod, PRIORITY_ANNOTATION, Some("10")).await;
        let before = wait_priority(&h, &first.pod, 10).await;
        request(&h, "*").await;
        decided(&h, "*").await;
        let le = h
            .wait_status("web", |le: &LeaderElection| {
                le.status.as_ref().is_some_and(|s| {
                    s.leader.as_ref().is_some_and(|l| l.pod == first.pod)
                        && s.transitions >= before.transitions + 2
                })
            })
            .await;
        let status = le.status.unwrap_or_default();
        assert_eq!(status.transitions, before.transitions + 2, "{status:#?}");
        assert!(status.fencing_token > before.fencing_token, "{status:#?}");
        let notes = h.wait_event("web", "Failback").await;
        assert!(notes.iter().any(|n| n.contains(&first.pod)), "{notes:?}");
        h.finish().await;
    })
    .await;
}
