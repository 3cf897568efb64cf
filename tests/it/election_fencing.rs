//! Rule 2 on every path where the lock is not confirmed: a key that cannot be read while the
//! session renews, a restart during an outage, a session known lost while the key cannot be
//! read, and changes to the key made from outside. Each test measures how long a leader label
//! stayed without a confirmed lock and prints it.

use crate::harness;

use std::time::{Duration, Instant};

use harness::{
    Harness, HarnessOptions, OperatorConsul, ROLE, SOON, phase, status_leader, with_role,
};
use serde_json::json;
use testkit::cluster::with_namespace;
use testkit::consul::{Endpoint, Fault, FaultAction, FaultId};

/// The sessions' TTL in these tests (Consul's minimum).
const TTL: Duration = Duration::from_secs(10);
/// Slack for a reconcile and a pod patch on a loaded machine.
const SLACK: Duration = Duration::from_secs(3);
/// Generous bound for waits that include a TTL.
const TTL_BOUND: Duration = Duration::from_secs(45);

fn web() -> serde_json::Value {
    json!({
        "selector": {"matchLabels": {"app": "web"}},
        "session": {"ttl": "10s", "lockDelay": "1s"},
    })
}

/// Every read of a key answers 500; writes and sessions work.
fn kv_reads_fail() -> Fault {
    Fault {
        method: Some(http::Method::GET),
        ..Fault::always(
            Endpoint::Kv,
            FaultAction::Respond {
                status: 500,
                body: "rpc error: kv unavailable".into(),
                retry_after: None,
            },
        )
    }
}

/// Wakes the operator's blocking query on the namespace's prefix `elector/<ns>/` with a
/// write to a key no election uses, so that its next read (failing) starts now.
async fn wake_the_watch(h: &Harness) {
    let path = format!("/v1/kv/elector/{}/unrelated", h.ns);
    let reply = h.consul("PUT", &path, "x").await;
    assert_eq!(reply.status, 200, "{}", reply.body);
}

/// Makes every later read of the namespace's keys hang far past any client timeout (no
/// answer, no error); writes and sessions work.
fn stall_the_reads(h: &Harness) -> FaultId {
    h.emu().add_fault(Fault {
        method: Some(http::Method::GET),
        ..Fault::always(
            Endpoint::KvPrefix(format!("elector/{}/", h.ns)),
            FaultAction::Latency(Duration::from_secs(600)),
        )
    })
}

/// Waits until no pod carries the leader label and returns when the recorder saw `pod` lose
/// it, measured from `since`.
async fn label_gone(h: &Harness, pod: &str, since: Instant) -> Duration {
    h.leader_label_gone_after(pod, since, TTL_BOUND).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_unreadable_for_a_ttl_fences_although_the_session_renews() {
    with_namespace("fe-kv500", |admin, ns| async move {
        let (h, first) = Harness::web_elected(admin, ns, web()).await;
        h.emu().add_fault(kv_reads_fail());
        h.emu().reset_stats();
        let last_read = Instant::now();
        wake_the_watch(&h).await;
        let stayed = label_gone(&h, &first.pod, last_read).await;
        eprintln!("key unreadable, session renewing: leader label removed after {stayed:?}");
        assert!(
            stayed <= TTL + SLACK,
            "the label stayed {stayed:?} after the key was last read (TTL {TTL:?})"
        );
        assert!(
            stayed >= TTL - SLACK,
            "fenced after {stayed:?}, before the key went a TTL unread"
        );
        assert!(
            h.emu().stats().requests_to("session.renew") >= 1,
            "the session kept renewing meanwhile"
        );
        let le = h
            .wait_status("web", |le| phase(le).as_deref() == Some("Fenced"))
            .await;
        // Nobody leads; the status keeps the last leader apart.
        let status = le.status.unwrap_or_default();
        assert_eq!(status.leader, None);
        assert_eq!(
            status.last_leader.map(|l| l.pod).as_deref(),
            Some(first.pod.as_str())
        );
        h.finish().await;
    })
    .await;
}

/// The operator's blocking queries on the namespace's keys stall in the network (no answer, no
/// error) while the session renews and the key is deleted from outside: the cached "held" view
/// must age out after one TTL without an answer covering the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_watch_fences_a_ttl_after_its_last_answer() {
    with_namespace("fe-stall", |admin, ns| async move {
        let (h, first) = Harness::web_elected(admin, ns, web()).await;
        let key = h.key("web");
        let stall = stall_the_reads(&h);
        // The pending long polls (the prefix watch woken by this write, the lock watch at the
        // end of its bounded wait) answer; their successors stall. Only then is the key
        // deleted, so that no answer reports it.
        let last_answer = Instant::now();
        wake_the_watch(&h).await;
        tokio::time::timeout(TTL, h.emu().wait_for_no_blocked_queries())
            .await
            .expect("the pending long polls answered within a TTL");
        h.app_delete_key(&key).await;
        h.emu().reset_stats();
        let stayed = label_gone(&h, &first.pod, last_answer).await;
        eprintln!("watch stalled, key deleted, session renewing: label removed after {stayed:?}");
        assert!(
            stayed <= TTL + SLACK,
            "the label stayed {stayed:?} after the watch's last answer (TTL {TTL:?})"
        );
        assert!(
            h.emu().stats().requests_to("session.renew") >= 1,
            "the session kept renewing meanwhile"
        );
        // Consul answers again: a leader is elected anew, with a higher token.
        h.emu().remove_fault(stall);
        let again = h.wait_elected("web", None).await;
        assert!(again.token > first.token);
        h.finish().await;
    })
    .await;
}

/// The operator's own release makes its cached view of the key false. The watch stalls (no
/// answer, no error) and the election switches to Observe mode: the operator releases the key
/// but cannot read it back, and then Consul invalidates its session, so it no longer knows
/// the holder in its cache as its own. That cached view ("held, for the old leader") is
/// younger than a TTL, yet it must not bring the leader label back: only a read after the
/// release counts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_watch_does_not_bring_back_a_lock_the_operator_released() {
    with_namespace("fe-released", |admin, ns| async move {
        // Reads that hang fail after 1 s. With a 30 s TTL the next renewal (at most 15 s after
        // the invalidation) tells the operator its session is gone while the cached view is
        // still within its Fence window, so only the rule under test keeps the label off.
        let options = HarnessOptions {
            operator_consul: OperatorConsul {
                env: vec![("ELECTOR_CONSUL_REQUEST_TIMEOUT".into(), "1s".into())],
                ..OperatorConsul::default()
            },
            ..HarnessOptions::default()
        };
        let spec = json!({
            "selector": {"matchLabels": {"app": "web"}},
            "session": {"ttl": "30s", "lockDelay": "1s"},
        });
        let (h, first) = Harness::web_elected_with(admin, ns, options, spec).await;
        let key = h.key("web");
        let stall = stall_the_reads(&h);
        // The operator cannot destroy its session itself either: only the renewal's answer
        // tells it the session is gone, whichever reconcile runs first.
        let no_destroy = h.emu().add_fault(Fault::always(
            Endpoint::SessionDestroy,
            FaultAction::Respond {
                status: 500,
                body: "rpc error: session destroy unavailable".into(),
                retry_after: None,
            },
        ));
        wake_the_watch(&h).await;
        tokio::time::timeout(TTL_BOUND, h.emu().wait_for_no_blocked_queries())
            .await
            .expect("the pending long polls answered");

        h.patch_spec("web", json!({"mode": "Observe"})).await;
        let released = h
            .poll_until(SOON, || {
                h.emu()
                    .kv_entry(&key)
                    .is_some_and(|entry| entry.session.is_none())
            })
            .await;
        assert!(
            released,
            "the key is still held: {:?}",
            h.emu().kv_entry(&key)
        );
        h.wait_pods(SOON, "nobody labelled leader", |pods| {
            with_role(pods, "leader").is_empty()
        })
        .await;
        assert!(h.emu().invalidate_session(&first.session));
        // The renewal finds the session gone; the reconciles from then on would label the old
        // leader again if they planned on the cached view.
        h.wait_event("web", "SessionLost").await;
        for _ in 0..2 {
            h.touch_and_wait_reconcile("web").await;
        }

        h.emu().remove_fault(no_destroy);
        h.emu().remove_fault(stall);
        h.wait_status("web", |le| {
            phase(le).as_deref() == Some("Observing") && status_leader(le).is_none()
        })
        .await;
        let history = h.recorder.label_history(&first.pod, ROLE);
        let leader = Some("leader".to_owned());
        let demoted = history
            .iter()
            .skip_while(|value| **value != leader)
            .skip_while(|value| **value == leader);
        assert!(
            !demoted.clone().any(|value| *value == leader),
            "the released leader was labelled again: {history:?}"
        );
        h.finish().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_during_an_outage_fences_a_ttl_after_the_start() {
    with_namespace("fe-restart", |admin, ns| async move {
        let (mut h, first) = Harness::web_elected(admin, ns, web()).await;
        h.kill_operator().await;
        let outage = h
            .emu()
            .add_fault(Fault::always(Endpoint::Any, FaultAction::DropConnection));
        let started = Instant::now();
        h.start_operator().await;
        let stayed = label_gone(&h, &first.pod, started).await;
        eprintln!("restarted during an outage: leader label removed {stayed:?} after the start");
        assert!(
            stayed <= TTL + SLACK,
            "the label stayed {stayed:?} after a restart that could confirm nothing"
        );
        // Consul answers again: the same pod leads, with its session adopted or replaced.
        h.emu().remove_fault(outage);
        let again = h.wait_elected("web", None).await;
        assert_eq!(again.pod, first.pod);
        assert!(
            again.token > first.token,
            "a fenced leader gets a new token"
        );
        h.finish().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_known_lost_fences_at_once_while_the_key_is_unreadable() {
    with_namespace("fe-lost", |admin, ns| async move {
        let (h, first) = Harness::web_elected(
            admin,
            ns,
            json!({
                "selector": {"matchLabels": {"app": "web"}},
                "session": {"ttl": "10s", "lockDelay": "1s"},
                "onConsulUnavailable": "KeepLeader",
            }),
        )
        .await;
        h.emu().add_fault(kv_reads_fail());
        wake_the_watch(&h).await;
        let lost = Instant::now();
        assert!(h.emu().invalidate_session(&first.session));
        let stayed = label_gone(&h, &first.pod, lost).await;
        eprintln!(
            "session invalidated while the key is unreadable: label removed after {stayed:?}"
        );
        // The next renewal (at most TTL/2 and a 250 ms tick away) learns of the loss;
        // KeepLeader does not keep a label whose lock Consul said is gone.
        assert!(stayed <= TTL / 2 + SLACK, "the label stayed {stayed:?}");
        h.finish().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outside_changes_to_the_key_are_seen_at_once() {
    with_namespace("fe-outside", |admin, ns| async move {
        let (h, first) = Harness::web_elected(admin, ns, web()).await;
        let key = h.key("web");
        // Some churn under the watched prefix first, so that a paced watch would lag.
        for i in 0..4 {
            let reply = h
                .consul("PUT", &format!("/v1/kv/elector/churn-{i}"), "x")
                .await;
            assert_eq!(reply.status, 200);
        }
        let deleted = Instant::now();
        h.app_delete_key(&key).await;
        let stayed = label_gone(&h, &first.pod, deleted).await;
        eprintln!("key deleted from outside: leader label removed after {stayed:?}");
        // A blocking query paced to one answer per second after churn left the label on for
        // up to a second; the watch must answer the change itself at once.
        assert!(
            stayed < Duration::from_millis(500),
            "the label stayed {stayed:?} after the key was deleted"
        );
        let again = h.wait_elected("web", None).await;
        assert!(again.token > first.token);
        h.finish().await;
    })
    .await;
}

/// Election `web` elected with a token of its own, from Secret `own-token` that opted in.
async fn elected_with_own_token(admin: kube::Client, ns: String) -> (Harness, harness::Elected) {
    let options = harness::HarnessOptions {
        secret_access: true,
        ..harness::HarnessOptions::default()
    };
    let mut h = Harness::with_options(admin, ns, options).await;
    h.deployment("web", 3).await;
    h.token_secret("own-token", "election-token", "web").await;
    h.start_operator().await;
    let mut spec = web();
    spec["consul"] = json!({"tokenSecretRef": {"name": "own-token", "key": "token"}});
    h.election("web", spec).await;
    let first = h.wait_elected("web", None).await;
    (h, first)
}

/// Secret `own-token` withdraws its opt-in for election `web`.
async fn withdraw_opt_in(h: &Harness) {
    let secrets: kube::Api<k8s_openapi::api::core::v1::Secret> =
        kube::Api::namespaced(h.admin.clone(), &h.ns);
    let withdrawn = json!({"metadata": {"annotations": {
        consul_elector::crd::SECRET_ALLOWED_ELECTIONS_ANNOTATION: "another-election",
    }}});
    secrets
        .patch(
            "own-token",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&withdrawn),
        )
        .await
        .expect("withdraw the opt-in");
}

/// An election whose Consul access became unusable (its token Secret withdrew the opt-in)
/// cannot be planned for, and after an operator restart nothing renews its session: rule 2
/// applies to it like to any other, so its leader label goes a TTL after the restart instead
/// of staying forever while the lock lapses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unusable_election_is_fenced_a_ttl_after_a_restart() {
    with_namespace("fence-unusable", |admin, ns| async move {
        let (mut h, first) = elected_with_own_token(admin, ns).await;

        // The Secret withdraws its opt-in, then the operator restarts.
        withdraw_opt_in(&h).await;
        h.kill_operator().await;
        let restarted = Instant::now();
        h.start_operator().await;
        h.wait_status("web", |le| phase(le).as_deref() == Some("Invalid"))
            .await;
        assert!(
            leader_label_gone_within_a_ttl(&h).await,
            "{} kept the leader label {:?} after a restart that can renew nothing",
            first.pod,
            restarted.elapsed()
        );
        let after = restarted.elapsed();
        assert!(after >= TTL - SLACK, "not before a TTL: {after:?}");
        h.finish().await;
    })
    .await;
}

/// A token Secret that withdraws its opt-in while the operator runs: the operator stops using
/// that token at once (no renewal of the session with it any more) and, since the lock then
/// lapses, takes the leader label off a TTL after the last renewal (rule 2).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_withdrawn_token_is_no_longer_used_and_the_label_goes() {
    with_namespace("fence-withdrawn", |admin, ns| async move {
        let (h, first) = elected_with_own_token(admin, ns).await;

        withdraw_opt_in(&h).await;
        // Any change of the election makes the operator look at its access again.
        h.touch("web").await;
        h.wait_status("web", |le| phase(le).as_deref() == Some("Invalid"))
            .await;
        let noticed = h.emu().stats().requests_with_token("election-token");
        let fenced = h
            .pods_become(TTL + SLACK + SLACK, |pods| {
                with_role(pods, "leader").is_empty()
            })
            .await;
        assert!(fenced, "{} kept the leader label", first.pod);
        assert_eq!(
            h.emu().stats().requests_with_token("election-token"),
            noticed,
            "the withdrawn token was used after the operator noticed"
        );
        h.finish().await;
    })
    .await;
}

/// Whether no pod carries the leader label within a TTL and some slack.
async fn leader_label_gone_within_a_ttl(h: &Harness) -> bool {
    h.pods_become(TTL + SLACK + SLACK, |pods| {
        with_role(pods, "leader").is_empty()
    })
    .await
}

/// How the lock of an election the operator cannot act on is lost while its session lives.
#[derive(Debug, Clone, Copy)]
enum LockLoss {
    /// An outside client deletes the key.
    Deleted,
    /// An outside client deletes the key and acquires it with its own session.
    Taken,
    /// Every read of the key fails from then on: the lock cannot be confirmed.
    Unreadable,
}

/// Rule 2 is about the lock, not the session: an election refused after an edit (a label key
/// the pods' ReplicaSet selects) keeps its leader label only while the key is confirmed held
/// by its session, which the operator still renews. Once the key is lost, or cannot be read,
/// the label goes within a TTL.
async fn an_unusable_election_loses_its_label_with_its_lock(loss: LockLoss) {
    let ns = format!("fence-refused-{loss:?}").to_lowercase();
    with_namespace(&ns, |admin, ns| async move {
        let (h, first) = Harness::web_elected(admin, ns, web()).await;
        h.patch_spec("web", json!({"labels": {"key": "app"}})).await;
        h.wait_status("web", |le| phase(le).as_deref() == Some("Invalid"))
            .await;
        let key = h.key("web");
        match loss {
            LockLoss::Deleted => h.app_delete_key(&key).await,
            LockLoss::Taken => {
                h.app_delete_key(&key).await;
                let outsider = h.app_session("outsider", "0s").await;
                assert!(h.app_acquire(&key, &outsider, "outsider").await);
            }
            LockLoss::Unreadable => {
                h.emu().add_fault(kv_reads_fail());
                wake_the_watch(&h).await;
            }
        }
        let lost = Instant::now();
        assert!(
            leader_label_gone_within_a_ttl(&h).await,
            "{} kept the leader label {:?} after its lock was {loss:?}",
            first.pod,
            lost.elapsed()
        );
        h.emu().clear_faults();
        h.finish().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_election_loses_its_label_when_its_key_is_deleted() {
    an_unusable_election_loses_its_label_with_its_lock(LockLoss::Deleted).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_election_loses_its_label_when_its_key_is_taken() {
    an_unusable_election_loses_its_label_with_its_lock(LockLoss::Taken).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_election_loses_its_label_when_its_key_cannot_be_read() {
    an_unusable_election_loses_its_label_with_its_lock(LockLoss::Unreadable).await;
}
