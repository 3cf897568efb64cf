//! `testkit::kube_faults` and `testkit::recorder` against the real kube-apiserver of the
//! test cluster: injected errors reach the caller as kube would see them from the server,
//! kube-runtime's watcher recovers from cut and expired watches, and the recorder catches
//! two pods carrying the leader label at one resourceVersion.
//!
//! Every wait is on a watch stream or on recorded versions, never a fixed sleep.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::Duration;

use futures::stream::BoxStream;
use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use testkit::cluster::{TestCluster, with_namespace};
use testkit::kube_faults::{FaultAction, KubeFault, KubeFaults, Verb};
use testkit::recorder::WatchRecorder;

/// Bound on every wait.
const TIMEOUT: Duration = Duration::from_secs(60);

/// A client for the shared cluster whose requests go through `faults`.
async fn faulty_client(faults: &KubeFaults) -> Client {
    let cluster = TestCluster::shared().expect("with_namespace runs only with a cluster");
    faults.client(cluster.kube_config()).await
}

/// Creates pod `name` with `labels`; without a node it never runs and deletes at once.
async fn create_pod(pods: &Api<Pod>, name: &str, labels: serde_json::Value) -> Pod {
    let pod = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels},
        "spec": {"containers": [{"name": "main", "image": "busybox"}]},
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap()
}

/// The pods of `ns`, after creating pod `a` there without labels.
async fn pods_with_a(client: Client, ns: &str) -> Api<Pod> {
    let pods = Api::namespaced(client, ns);
    create_pod(&pods, "a", json!({})).await;
    pods
}

/// A rule that applies `action` to the next `verb` request on pods, once.
fn once_on_pods(action: FaultAction, verb: Verb) -> KubeFault {
    KubeFault::new(action).verb(verb).resource("pods").times(1)
}

/// Merge-patches label `key=value` onto pod `name`.
async fn set_label(pods: &Api<Pod>, name: &str, key: &str, value: &str) -> kube::Result<Pod> {
    let patch = json!({"metadata": {"labels": {key: value}}});
    pods.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
}

/// The `Status` of a failed API call; panics on success or a non-API error.
fn api_status(result: kube::Result<Pod>) -> kube::core::Status {
    match result {
        Err(kube::Error::Api(status)) => *status,
        other => panic!("expected kube::Error::Api, got {other:?}"),
    }
}

#[tokio::test]
async fn status_faults_reach_the_caller_as_api_errors() {
    with_namespace("faults-status", |client, ns| async move {
        pods_with_a(client, &ns).await;
        let faults = KubeFaults::new(1);
        let faulty: Api<Pod> = Api::namespaced(faulty_client(&faults).await, &ns);

        let cases = [
            (500, "InternalError", None),
            (429, "TooManyRequests", Some(3)),
            (409, "Conflict", None),
        ];
        for (code, reason, retry_after) in cases {
            let action = FaultAction::Status {
                code,
                reason: reason.into(),
                message: format!("injected {code}"),
                retry_after,
            };
            faults.add(once_on_pods(action, Verb::Patch));
            let status = api_status(set_label(&faulty, "a", "attempt", reason).await);
            assert_eq!((status.code, status.reason.as_str()), (code, reason));
            assert_eq!(status.message, format!("injected {code}"));
            let details = status.details.expect("details");
            assert_eq!(
                (details.name.as_str(), details.kind.as_str()),
                ("a", "pods")
            );
            assert_eq!(details.retry_after_seconds, retry_after.unwrap_or(0) as u32);
            // `times: Some(1)`: the rule is used up, the same patch now reaches the server.
            let patched = set_label(&faulty, "a", "attempt", reason).await.unwrap();
            assert_eq!(patched.labels()["attempt"], reason);
        }
        assert_eq!(faults.injected().len(), cases.len());
        assert!(
            faults
                .injected()
                .iter()
                .all(|i| i.verb == Some(Verb::Patch))
        );
    })
    .await;
}

#[tokio::test]
async fn too_many_requests_carries_retry_after_header() {
    with_namespace("faults-429", |client, ns| async move {
        pods_with_a(client, &ns).await;
        let faults = KubeFaults::new(1);
        let faulty = faulty_client(&faults).await;
        faults.add(
            KubeFault::new(FaultAction::Status {
                code: 429,
                reason: "TooManyRequests".into(),
                message: "slow down".into(),
                retry_after: Some(7),
            })
            .verb(Verb::Patch)
            .namespace(ns.as_str())
            .name("a"),
        );
        let request = kube::core::Request::new(format!("/api/v1/namespaces/{ns}/pods"))
            .patch("a", &PatchParams::default(), &Patch::Merge(json!({})))
            .unwrap();
        let response = faulty.send(request.map(Into::into)).await.unwrap();
        assert_eq!(response.status(), 429);
        assert_eq!(response.headers()[http::header::RETRY_AFTER], "7");
    })
    .await;
}

#[tokio::test]
async fn rules_for_other_resources_leave_pods_alone() {
    with_namespace("faults-scope", |client, ns| async move {
        pods_with_a(client, &ns).await;
        let faults = KubeFaults::new(1);
        let pods: Api<Pod> = Api::namespaced(faulty_client(&faults).await, &ns);
        let conflict = FaultAction::status(409, "Conflict", "injected");
        faults.add(KubeFault::new(conflict.clone()).resource("leaderelections"));
        faults.add(KubeFault::new(conflict.clone()).resource("pods/status"));
        faults.add(
            KubeFault::new(conflict)
                .resource("pods")
                .namespace("elsewhere"),
        );
        set_label(&pods, "a", "role", "leader").await.unwrap();
        pods.get("a").await.unwrap();
        assert_eq!(faults.injected(), []);
    })
    .await;
}

#[tokio::test]
async fn latency_delays_but_forwards() {
    with_namespace("faults-latency", |client, ns| async move {
        pods_with_a(client, &ns).await;
        let faults = KubeFaults::new(1);
        let pods: Api<Pod> = Api::namespaced(faulty_client(&faults).await, &ns);
        let rule = faults.add(
            KubeFault::new(FaultAction::Latency(Duration::from_millis(50)))
                .verb(Verb::Get)
                .resource("pods"),
        );
        assert_eq!(pods.get("a").await.unwrap().name_any(), "a");
        let injected = faults.injected();
        assert_eq!(injected.len(), 1);
        assert_eq!(injected[0].rule, rule);
        assert_eq!(injected[0].verb, Some(Verb::Get));
        assert_eq!(injected[0].resource.as_deref(), Some("pods"));
        assert_eq!(injected[0].path, format!("/api/v1/namespaces/{ns}/pods/a"));
    })
    .await;
}

#[tokio::test]
async fn same_seed_same_decisions() {
    with_namespace("faults-seed", |client, ns| async move {
        pods_with_a(client, &ns).await;
        let mut runs = Vec::new();
        for _ in 0..2 {
            let faults = KubeFaults::new(2024);
            let action = FaultAction::status(500, "InternalError", "coin says no");
            faults.add(KubeFault::new(action).verb(Verb::Get).probability(0.5));
            let pods: Api<Pod> = Api::namespaced(faulty_client(&faults).await, &ns);
            let mut failed = Vec::new();
            for _ in 0..24 {
                failed.push(pods.get("a").await.is_err());
            }
            assert_eq!(
                faults.injected().len(),
                failed.iter().filter(|f| **f).count()
            );
            runs.push(failed);
        }
        assert_eq!(runs[0], runs[1]);
        assert!(
            runs[0].contains(&true) && runs[0].contains(&false),
            "{:?}",
            runs[0]
        );
    })
    .await;
}

/// One watcher event, reduced to what the assertions need.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seen {
    Init,
    InitApply(String),
    InitDone,
    Apply(String, Option<String>),
    Delete(String),
    Error(Option<u16>),
}

/// What a pod watcher yields.
type WatchEvent = Result<watcher::Event<Pod>, watcher::Error>;

/// Reads `stream` until `done` holds for an event; returns every event read.
async fn read_until<S>(stream: &mut S, done: impl Fn(&Seen) -> bool) -> Vec<Seen>
where
    S: Stream<Item = WatchEvent> + Unpin,
{
    let mut seen = Vec::new();
    let reading = async {
        while let Some(event) = stream.next().await {
            let event = match event {
                Ok(watcher::Event::Init) => Seen::Init,
                Ok(watcher::Event::InitApply(pod)) => Seen::InitApply(pod.name_any()),
                Ok(watcher::Event::InitDone) => Seen::InitDone,
                Ok(watcher::Event::Apply(pod)) => {
                    let step = pod.labels().get("step").cloned();
                    Seen::Apply(pod.name_any(), step)
                }
                Ok(watcher::Event::Delete(pod)) => Seen::Delete(pod.name_any()),
                Err(watcher::Error::WatchError(status)) => Seen::Error(Some(status.code)),
                Err(_) => Seen::Error(None),
            };
            let finished = done(&event);
            seen.push(event);
            if finished {
                return;
            }
        }
    };
    if tokio::time::timeout(TIMEOUT, reading).await.is_err() {
        panic!("timed out after {TIMEOUT:?}; watcher events so far: {seen:?}");
    }
    seen
}

/// A watcher of the pods of `ns` whose requests go through `faults`.
async fn faulty_watcher(faults: &KubeFaults, ns: &str) -> BoxStream<'static, WatchEvent> {
    let pods: Api<Pod> = Api::namespaced(faulty_client(faults).await, ns);
    watcher(pods, watcher::Config::default()).boxed()
}

fn applied(step: &str) -> impl Fn(&Seen) -> bool {
    move |seen| *seen == Seen::Apply("a".into(), Some(step.into()))
}

#[tokio::test]
async fn watcher_relists_after_an_injected_410() {
    with_namespace("faults-expire", |client, ns| async move {
        let pods = pods_with_a(client, &ns).await;
        let faults = KubeFaults::new(1);
        let expire = FaultAction::ExpireWatch { after_events: 1 };
        let rule = faults.add(once_on_pods(expire, Verb::Watch));
        let mut events = faulty_watcher(&faults, &ns).await;

        let mut seen = read_until(&mut events, |e| *e == Seen::InitDone).await;
        set_label(&pods, "a", "step", "1").await.unwrap();
        // The one event the rule lets through, the in-stream 410, then a full re-list.
        seen.extend(read_until(&mut events, |e| *e == Seen::InitDone).await);
        set_label(&pods, "a", "step", "2").await.unwrap();
        seen.extend(read_until(&mut events, applied("2")).await);

        let a = || "a".to_string();
        assert_eq!(
            seen,
            [
                Seen::Init,
                Seen::InitApply(a()),
                Seen::InitDone,
                Seen::Apply(a(), Some("1".into())),
                Seen::Error(Some(410)),
                Seen::Init,
                Seen::InitApply(a()),
                Seen::InitDone,
                Seen::Apply(a(), Some("2".into())),
            ]
        );
        let injected = faults.injected();
        assert_eq!(injected.len(), 1);
        assert_eq!(
            (injected[0].rule, injected[0].verb),
            (rule, Some(Verb::Watch))
        );
    })
    .await;
}

#[tokio::test]
async fn watcher_resumes_after_a_cut_watch() {
    with_namespace("faults-cut", |client, ns| async move {
        let pods = pods_with_a(client, &ns).await;
        let faults = KubeFaults::new(1);
        let cut = faults.add(once_on_pods(
            FaultAction::CutWatch { after_events: 1 },
            Verb::Watch,
        ));
        // Claims every later watch without changing it, so the log shows the re-watch.
        let rewatch =
            faults.add(KubeFault::new(FaultAction::Latency(Duration::ZERO)).verb(Verb::Watch));
        let mut events = faulty_watcher(&faults, &ns).await;

        let mut seen = read_until(&mut events, |e| *e == Seen::InitDone).await;
        set_label(&pods, "a", "step", "1").await.unwrap();
        seen.extend(read_until(&mut events, applied("1")).await);
        set_label(&pods, "a", "step", "2").await.unwrap();
        seen.extend(read_until(&mut events, applied("2")).await);

        // Resumed from the last resourceVersion: no error surfaced, no re-list.
        let a = || "a".to_string();
        assert_eq!(
            seen,
            [
                Seen::Init,
                Seen::InitApply(a()),
                Seen::InitDone,
                Seen::Apply(a(), Some("1".into())),
                Seen::Apply(a(), Some("2".into())),
            ]
        );
        let rules: Vec<_> = faults.injected().iter().map(|i| i.rule).collect();
        assert_eq!(rules[..2], [cut, rewatch], "{rules:?}");
    })
    .await;
}

/// Waits until the recorder's current pods satisfy `pred`; panics with them otherwise.
async fn settle(
    recorder: &WatchRecorder,
    pred: impl Fn(&std::collections::BTreeMap<String, testkit::recorder::PodVersion>) -> bool,
) {
    if let Err(state) = recorder.wait_until(TIMEOUT, pred).await {
        panic!("{state}");
    }
}

/// Waits until pod `name` carries `role=<value>` in the recorded history.
async fn settle_role(recorder: &WatchRecorder, name: &str, value: &str) {
    settle(recorder, |pods| {
        pods.get(name).is_some_and(|p| p.has_label("role", value))
    })
    .await;
}

/// The message of the panic of `recorder.assert_never_two("role", "leader")`; `expected`
/// says why it must panic.
fn never_two_leaders_panic(recorder: &WatchRecorder, expected: &str) -> String {
    let caught = catch_unwind(AssertUnwindSafe(|| {
        recorder.assert_never_two("role", "leader")
    }));
    let message = caught.expect_err(expected);
    message
        .downcast_ref::<String>()
        .expect("a formatted panic")
        .clone()
}

fn values(values: &[&str]) -> Vec<Option<String>> {
    values.iter().map(|v| Some(v.to_string())).collect()
}

#[tokio::test]
async fn recorder_sees_safe_and_unsafe_leader_moves() {
    with_namespace("recorder-moves", |client, ns| async move {
        let recorder = WatchRecorder::start(client.clone(), &ns).await.unwrap();
        let pods: Api<Pod> = Api::namespaced(client, &ns);
        create_pod(&pods, "a", json!({"role": "leader"})).await;
        create_pod(&pods, "b", json!({"role": "follower"})).await;

        // Safe: a off, then b on.
        set_label(&pods, "a", "role", "follower").await.unwrap();
        set_label(&pods, "b", "role", "leader").await.unwrap();
        settle_role(&recorder, "b", "leader").await;
        recorder.assert_never_two("role", "leader");
        assert_eq!(recorder.max_simultaneous("role", "leader"), 1);
        assert_eq!(
            recorder.label_history("a", "role"),
            values(&["leader", "follower"])
        );
        assert_eq!(
            recorder.label_history("b", "role"),
            values(&["follower", "leader"])
        );
        assert_eq!(recorder.gaps(), 0);

        // Unsafe: a on before b off.
        set_label(&pods, "a", "role", "leader").await.unwrap();
        set_label(&pods, "b", "role", "follower").await.unwrap();
        settle_role(&recorder, "b", "follower").await;
        assert_eq!(recorder.max_simultaneous("role", "leader"), 2);
        let message = never_two_leaders_panic(&recorder, "two leaders must be caught");
        assert!(message.contains(r#"["a", "b"]"#), "{message}");
        // Only the pods an election selects count for it.
        assert_eq!(
            recorder.max_simultaneous_among("role", "leader", |p| p.name == "a"),
            1
        );
        recorder.stop().await;
    })
    .await;
}

#[tokio::test]
async fn recorder_tracks_deletion_recreation_and_annotations() {
    with_namespace("recorder-incarnations", |client, ns| async move {
        let recorder = WatchRecorder::start(client.clone(), &ns).await.unwrap();
        let pods: Api<Pod> = Api::namespaced(client, &ns);
        let first = create_pod(&pods, "a", json!({"role": "leader"})).await;
        let token = json!({"metadata": {"annotations": {"elector.dev/fencing-token": "7"}}});
        pods.patch("a", &PatchParams::default(), &Patch::Merge(&token))
            .await
            .unwrap();
        pods.delete("a", &DeleteParams::default()).await.unwrap();
        settle(&recorder, |pods| pods.is_empty()).await;
        let second = create_pod(&pods, "a", json!({"role": "leader"})).await;
        settle(&recorder, |pods| pods.contains_key("a")).await;

        assert_eq!(
            recorder.label_history("a", "role"),
            [Some("leader".into()), None, Some("leader".into())]
        );
        let uids: Vec<_> = recorder
            .label_timeline("a", "role")
            .into_iter()
            .map(|step| step.uid)
            .collect();
        assert_eq!(uids, [first.metadata.uid, None, second.metadata.uid]);
        assert_eq!(
            recorder.annotation_history("a", "elector.dev/fencing-token"),
            [None, Some("7".into()), None]
        );
        recorder.assert_never_two("role", "leader");
    })
    .await;
}

#[tokio::test]
async fn recorder_relists_after_410_and_reports_the_gap() {
    with_namespace("recorder-gap", |client, ns| async move {
        let faults = KubeFaults::new(1);
        faults.add(
            KubeFault::new(FaultAction::ExpireWatch { after_events: 1 })
                .verb(Verb::Watch)
                .times(1),
        );
        let recorder = WatchRecorder::start(faulty_client(&faults).await, &ns)
            .await
            .unwrap();
        let pods: Api<Pod> = Api::namespaced(client, &ns);
        create_pod(&pods, "a", json!({"role": "follower"})).await;
        settle(&recorder, |_| recorder.gaps() == 1).await;
        set_label(&pods, "a", "role", "leader").await.unwrap();
        settle_role(&recorder, "a", "leader").await;

        assert_eq!(recorder.max_simultaneous("role", "leader"), 1);
        let message = never_two_leaders_panic(&recorder, "an incomplete history proves nothing");
        assert!(message.contains("gap"), "{message}");
    })
    .await;
}
