//! Moves Consul decides (docs/design.md rules 2, 4 and 6): a session Consul invalidates, a key
//! deleted or taken from outside, Consul not answering, and Observe mode, where the
//! applications hold the lock and the operator only mirrors it.

use crate::harness;

use std::time::{Duration, Instant};

use consul_elector::crd::FENCING_TOKEN_ANNOTATION;
use harness::{
    Backend, ConsulUnderTest, Harness, ROLE, SOON, condition, has_condition, phase, role_in,
    with_role,
};
use serde_json::json;
use testkit::cluster::with_namespace;
use testkit::consul::{Endpoint, Fault, FaultAction};

/// Generous bound for waits that include a session TTL (10 s) and its consequences.
const TTL_BOUND: Duration = Duration::from_secs(45);

fn web(extra: serde_json::Value) -> serde_json::Value {
    let mut spec = json!({"selector": {"matchLabels": {"app": "web"}}});
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
        spec.extend(extra.clone());
    }
    spec
}

/// How a test makes Consul invalidate the operator's session.
#[derive(Clone, Copy, Debug)]
enum Kill {
    /// The emulator's hook: exactly what a TTL expiry does.
    Invalidate,
    /// `PUT /v1/session/destroy/<id>` by someone else.
    DestroyOverHttp,
}

/// The operator's session is lost (`kill`): the leader is unlabelled at once and the same pod
/// re-elected with a new session once the lock-delay Consul set is over.
async fn session_lost_then_reelected_after_the_lock_delay(
    backend: Backend,
    prefix: &str,
    kill: Kill,
) {
    let Some(consul) = ConsulUnderTest::start(backend).await else {
        return;
    };
    with_namespace(prefix, |admin, ns| async move {
        let (h, first) = Harness::web_elected_on(
            admin,
            ns,
            consul,
            web(json!({"session": {"ttl": "10s", "lockDelay": "2s"}})),
        )
        .await;
        let key = h.key("web");

        if let Some(emu) = h.consul.as_emulator() {
            emu.reset_stats();
        }
        let started = Instant::now();
        match kill {
            Kill::Invalidate => assert!(h.emu().invalidate_session(&first.session)),
            Kill::DestroyOverHttp => h.app_destroy_session(&first.session).await,
        }
        let delay_ends = h.consul.as_emulator().map(|emu| {
            emu.lock_delay_until(&key)
                .expect("Consul set a lock-delay")
        });
        assert_eq!(h.key_lock(&key).await.and_then(|e| e.session), None);

        // The label goes at once: the lock is no longer held.
        h.wait_pods(SOON, "no leader label", |pods| {
            with_role(pods, "leader").is_empty()
        })
        .await;
        let unlabelled = h
            .leader_label_gone_at(&first.pod, started)
            .expect("leader unlabelled");
        let notes = h.wait_event("web", "SessionLost").await;
        assert!(notes.iter().any(|n| n.contains(&first.pod)), "{notes:?}");

        // Stickiness: the same pod, with a new session, once the lock-delay is over.
        let second = h.wait_elected("web", None).await;
        let relabelled = h
            .role_seen_at(&second.pod, "leader", started)
            .expect("re-labelled");
        eprintln!(
            "{backend:?}, {kill:?}: leader unlabelled after {:?}; re-elected after {:?} (lockDelay 2s)",
            unlabelled - started,
            relabelled - started
        );
        assert_eq!(second.pod, first.pod, "the same pod, still eligible");
        assert_ne!(second.session, first.session);
        assert_eq!(second.token, first.token + 1);
        assert!(
            relabelled - started >= Duration::from_secs(2),
            "re-labelled {:?} after the invalidation, inside the 2 s lock-delay",
            relabelled - started
        );
        if let (Some(emu), Some(delay_ends)) = (h.consul.as_emulator(), delay_ends) {
            assert!(emu.now() >= delay_ends);
            // The lock-delay was waited out, not raced: one acquisition, no refused attempt.
            let stats = emu.stats();
            assert_eq!(
                stats.requests_to("kv.put"),
                1,
                "one acquire after the lock-delay: {stats:?}"
            );
            assert_eq!(stats.requests_to("session.create"), 1, "{stats:?}");
        }
        // The pod was demoted (follower) in between, never a second leader.
        let history = h.recorder.label_history(&first.pod, ROLE);
        assert!(
            history.ends_with(&[
                Some("leader".into()),
                Some("follower".into()),
                Some("leader".into())
            ]),
            "{history:?}"
        );
        h.finish().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_invalidated_by_consul_is_replaced_after_its_lock_delay() {
    session_lost_then_reelected_after_the_lock_delay(
        Backend::Emulator,
        "cs-invalid",
        Kill::Invalidate,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_destroyed_from_outside_is_replaced_after_its_lock_delay_on_the_emulator() {
    session_lost_then_reelected_after_the_lock_delay(
        Backend::Emulator,
        "cs-destroy",
        Kill::DestroyOverHttp,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_destroyed_from_outside_is_replaced_after_its_lock_delay_on_a_real_consul() {
    session_lost_then_reelected_after_the_lock_delay(
        Backend::RealConsul,
        "cs-destroy",
        Kill::DestroyOverHttp,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_key_is_reacquired_with_a_token_above_the_last_one() {
    with_namespace("cs-delkey", |admin, ns| async move {
        let mut h = Harness::new(admin, ns).await;
        h.deployment("web", 3).await;
        let key = h.key("web");
        // History before the operator: the key was acquired three times (LockIndex 3).
        let app = h.app_session("someone-before", "0s").await;
        for _ in 0..3 {
            assert!(h.app_acquire(&key, &app, "{}").await);
            assert!(h.app_release(&key, &app).await);
        }
        h.app_destroy_session(&app).await;
        h.start_operator().await;
        h.election("web", web(json!({}))).await;
        let first = h.wait_elected("web", None).await;
        assert_eq!(first.token, 4);

        let started = Instant::now();
        h.app_delete_key(&key).await;
        let old_token = first.token;
        h.wait_pods(SOON, "the leader re-labelled with a higher token", |pods| {
            pods.values().any(|p| {
                p.labels.get(ROLE).map(String::as_str) == Some("leader")
                    && p.annotations
                        .get(FENCING_TOKEN_ANNOTATION)
                        .and_then(|t| t.parse::<u64>().ok())
                        .is_some_and(|t| t > old_token)
            })
        })
        .await;
        let second = h.wait_elected("web", None).await;
        let relabelled = h
            .role_seen_at(&second.pod, "leader", started)
            .expect("re-labelled");
        eprintln!(
            "key deleted -> leader re-labelled after {:?}",
            relabelled - started
        );
        let unlabelled = h
            .leader_label_gone_at(&first.pod, started)
            .expect("the label is removed while the key is gone");
        assert!(unlabelled < relabelled);
        assert_eq!(second.pod, first.pod, "stickiness");
        // Rule 6: the re-created key counts from 1 again; the operator raised it above 4
        // before labelling anyone with it.
        assert!(
            second.token > first.token,
            "token {} after the re-created key, was {}",
            second.token,
            first.token
        );
        let tokens: Vec<u64> = h
            .recorder
            .annotation_history(&first.pod, FENCING_TOKEN_ANNOTATION)
            .into_iter()
            .flatten()
            .map(|t| t.parse().expect("numeric token"))
            .collect();
        assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
        assert_eq!(tokens.last(), Some(&second.token));
        h.finish().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_held_by_a_foreign_session_makes_everyone_a_follower() {
    with_namespace("cs-foreign", |admin, ns| async move {
        let (h, first) = Harness::web_elected(
            admin,
            ns,
            web(json!({"session": {"ttl": "10s", "lockDelay": "0s"}})),
        )
        .await;
        let key = h.key("web");

        // Someone else takes the lock: our session is destroyed and, before the operator can
        // create another (session creation is held back meanwhile), a foreign one acquires.
        let foreign = h.app_session("intruder", "0s").await;
        let hold = h.emu().add_fault(Fault::always(
            Endpoint::SessionCreate,
            FaultAction::Respond {
                status: 500,
                body: "held back by the test".into(),
                retry_after: None,
            },
        ));
        h.app_destroy_session(&first.session).await;
        assert!(
            h.app_acquire(&key, &foreign, r#"{"pod":"elsewhere"}"#)
                .await
        );
        h.emu().remove_fault(hold);

        let le = h
            .wait_status("web", |le| {
                phase(le).as_deref() == Some("Pending")
                    && condition(le, "LeaderElected")
                        .is_some_and(|c| c.status == "False" && c.reason == "LockHeldElsewhere")
            })
            .await;
        h.wait_pods(SOON, "every pod a follower", |pods| {
            with_role(pods, "follower").len() == 3
        })
        .await;
        assert_eq!(
            h.emu().kv_entry(&key).and_then(|e| e.session).as_deref(),
            Some(foreign.as_str()),
            "the operator leaves a foreign lock alone"
        );
        assert_eq!(
            le.status.as_ref().and_then(|s| s.fencing_token),
            Some(first.token),
            "the recorded token stays"
        );

        // The foreign session lets go: the operator elects again (the previous leader).
        let started = Instant::now();
        assert!(h.app_release(&key, &foreign).await);
        let second = h.wait_elected("web", None).await;
        eprintln!(
            "foreign lock released -> leader labelled after {:?}",
            started.elapsed()
        );
        assert_eq!(second.pod, first.pod, "stickiness");
        assert!(
            second.token > first.token + 1,
            "the foreign acquisition counted too"
        );
        h.finish().await;
    })
    .await;
}

/// Waits until the leader label is gone because Consul no longer confirms the lock.
async fn consul_unavailable(prefix: &str, policy: &str, drop_connections: bool) {
    let policy = policy.to_owned();
    with_namespace(prefix, |admin, ns| async move {
        let (h, first) = Harness::web_elected(
            admin,
            ns,
            web(json!({"session": {"ttl": "10s"}, "onConsulUnavailable": policy})),
        )
        .await;
        let fence = policy == "Fence";

        let started = Instant::now();
        let fault = if drop_connections {
            Some(
                h.emu()
                    .add_fault(Fault::always(Endpoint::Any, FaultAction::DropConnection)),
            )
        } else {
            h.emu().set_leader(false);
            None
        };
        let le = h
            .wait_status_within("web", TTL_BOUND, |le| {
                has_condition(le, "ConsulAvailable", "False")
                    && (!fence || phase(le).as_deref() == Some("Fenced"))
            })
            .await;
        eprintln!(
            "{policy}: ConsulAvailable=False after {:?}",
            started.elapsed()
        );
        if fence {
            h.wait_pods(SOON, "no leader label while fenced", |pods| {
                with_role(pods, "leader").is_empty()
            })
            .await;
            let gone = h
                .leader_label_gone_at(&first.pod, started)
                .expect("label removed");
            // Not before a whole TTL without confirmation (the last renewal was at most
            // TTL/2 before the outage began).
            assert!(
                gone - started >= Duration::from_secs(5),
                "fenced after {:?}",
                gone - started
            );
            eprintln!("Fence: leader label removed after {:?}", gone - started);
            let notes = h.wait_event("web", "ConsulUnavailable").await;
            assert!(notes.iter().any(|n| n.contains(&first.pod)), "{notes:?}");
        } else {
            assert_eq!(phase(&le).as_deref(), Some("Elected"));
            assert_eq!(role_in(&h.current(), &first.pod), Some("leader"));
        }

        // Consul answers again: the same pod leads (again).
        let restored = Instant::now();
        match fault {
            Some(id) => h.emu().remove_fault(id),
            None => h.emu().set_leader(true),
        }
        h.wait_status_within("web", TTL_BOUND, |le| {
            has_condition(le, "ConsulAvailable", "True")
        })
        .await;
        let again = h.wait_elected("web", None).await;
        eprintln!(
            "{policy}: leader confirmed again {:?} after Consul answered",
            restored.elapsed()
        );
        assert_eq!(again.pod, first.pod, "the same pod, still eligible");
        let history = h.recorder.label_history(&first.pod, ROLE);
        if fence {
            assert!(
                history.ends_with(&[
                    Some("leader".into()),
                    Some("follower".into()),
                    Some("leader".into())
                ]),
                "{history:?}"
            );
            assert!(again.token >= first.token);
        } else {
            // KeepLeader: the label never moved.
            assert_eq!(
                history
                    .iter()
                    .filter(|v| v.as_deref() == Some("leader"))
                    .count(),
                1,
                "{history:?}"
            );
            assert_eq!(history.last(), Some(&Some("leader".into())));
            assert_eq!(again, first, "same session, token and transitions");
        }
        h.finish().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fence_drops_the_leader_label_when_consul_is_unreachable() {
    consul_unavailable("cs-fence", "Fence", true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fence_drops_the_leader_label_when_consul_has_no_leader() {
    consul_unavailable("cs-fence-nl", "Fence", false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_leader_keeps_the_label_while_consul_is_unreachable() {
    consul_unavailable("cs-keep", "KeepLeader", true).await;
}

/// Patroni's leader key holds the member's name and nothing else; with `valueFormat: Plain`
/// an Observe election mirrors it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observe_mode_reads_a_leader_key_as_patroni_writes_it() {
    with_namespace("cs-patroni", |admin, ns| async move {
        let mut h = Harness::new(admin, ns).await;
        h.deployment("web", 3).await;
        let key = h.key("web");
        let names: Vec<String> = h.current().keys().cloned().collect();
        let holder = names[0].clone();
        let app = h.app_session("patroni", "0s").await;
        assert!(h.app_acquire(&key, &app, &holder).await);
        h.start_operator().await;
        h.election(
            "web",
            web(json!({"mode": "Observe", "observe": {"valueFormat": "Plain"}})),
        )
        .await;
        let le = h
            .wait_status("web", |le| {
                phase(le).as_deref() == Some("Observing")
                    && harness::status_leader(le).as_deref() == Some(holder.as_str())
            })
            .await;
        assert_eq!(
            harness::status_leader(&le).as_deref(),
            Some(holder.as_str())
        );
        let expected = holder.clone();
        h.wait_pods(
            SOON,
            "the member named in the key labelled leader",
            |pods| {
                with_role(pods, "leader") == vec![expected.clone()]
                    && with_role(pods, "follower").len() == 2
            },
        )
        .await;
        h.finish().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observe_mode_mirrors_the_application_lock_and_never_writes_to_consul() {
    with_namespace("cs-observe", |admin, ns| async move {
        let mut h = Harness::new(admin, ns).await;
        h.deployment("web", 3).await;
        let key = h.key("web");
        let pods = with_role(&h.current(), "none-yet");
        assert!(pods.is_empty());
        let names: Vec<String> = h.current().keys().cloned().collect();
        let holder = names[1].clone();
        let app = h.app_session("app-web", "0s").await;
        assert!(
            h.app_acquire(&key, &app, &json!({"pod": holder}).to_string())
                .await
        );
        let token = h.emu().kv_entry(&key).expect("key").lock_index;

        h.emu().reset_stats();
        h.start_operator().await;
        h.election("web", web(json!({"mode": "Observe"}))).await;
        let le = h
            .wait_status("web", |le| {
                phase(le).as_deref() == Some("Observing")
                    && le.status.as_ref().and_then(|s| s.leader.as_ref()).is_some()
            })
            .await;
        let status = le.status.expect("status");
        assert_eq!(
            status.leader.as_ref().map(|l| l.pod.as_str()),
            Some(holder.as_str())
        );
        assert_eq!(status.fencing_token, Some(token));
        let expected_holder = holder.clone();
        h.wait_pods(
            SOON,
            "the holder labelled leader, the others followers",
            |pods| {
                with_role(pods, "leader") == vec![expected_holder.clone()]
                    && with_role(pods, "follower").len() == 2
            },
        )
        .await;

        // The application moves the lock to another pod: the operator follows.
        let next = names[2].clone();
        assert!(h.app_release(&key, &app).await);
        let app2 = h.app_session("app-web-2", "0s").await;
        assert!(
            h.app_acquire(&key, &app2, &json!({"pod": next}).to_string())
                .await
        );
        let token = h.emu().kv_entry(&key).expect("key").lock_index;
        let before = h.emu().stats();
        let expected_next = next.clone();
        h.wait_pods(SOON, "the new holder labelled leader", |pods| {
            with_role(pods, "leader") == vec![expected_next.clone()]
                && with_role(pods, "follower").len() == 2
        })
        .await;
        let le = h
            .wait_status("web", |le| {
                harness::status_leader(le).as_deref() == Some(next.as_str())
                    && le.status.as_ref().and_then(|s| s.fencing_token) == Some(token)
            })
            .await;
        assert_eq!(phase(&le).as_deref(), Some("Observing"));
        assert_eq!(
            le.status
                .as_ref()
                .and_then(|s| s.leader.as_ref())
                .and_then(|l| l.session_id.clone()),
            None,
            "the operator holds no session in Observe mode"
        );

        // The operator only read: from the first reset on, every write was the
        // application's (one release, one session, one acquire); after the second snapshot
        // nothing but reads at all.
        let stats = h.emu().stats();
        assert_eq!(stats.requests_to("session.create"), 1, "{stats:?}");
        assert_eq!(stats.requests_to("kv.put"), 2, "{stats:?}");
        for write in [
            "session.create",
            "session.renew",
            "session.destroy",
            "kv.put",
            "kv.delete",
        ] {
            assert_eq!(
                stats.requests_to(write),
                before.requests_to(write),
                "the operator sent {write}: {stats:?}"
            );
        }
        assert_eq!(stats.requests_to("session.renew"), 0, "{stats:?}");
        assert_eq!(stats.requests_to("session.destroy"), 0, "{stats:?}");
        assert_eq!(stats.requests_to("kv.delete"), 0, "{stats:?}");
        assert!(stats.requests_to("kv.get") > 0, "it does watch the key");
        let entry = h.emu().kv_entry(&key).expect("key");
        assert_eq!(entry.session.as_deref(), Some(app2.as_str()));
        h.finish().await;
    })
    .await;
}

/// In Observe mode the applications may re-create the key (Patroni's leader key goes with its
/// session), which restarts Consul's LockIndex at 1: the token on the pod and in status still
/// only grows (rule 6).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observe_mode_tokens_only_grow_when_the_applications_re_create_the_key() {
    with_namespace("cs-recreate", |admin, ns| async move {
        let mut h = Harness::new(admin, ns).await;
        h.deployment("web", 3).await;
        let key = h.key("web");
        let names: Vec<String> = h.current().keys().cloned().collect();
        let (a, b) = (names[0].clone(), names[1].clone());
        h.start_operator().await;
        h.election("web", web(json!({"mode": "Observe"}))).await;
        let mut last = 0;
        for (round, holder) in [&a, &b, &a, &b].into_iter().enumerate() {
            if round == 3 {
                h.app_delete_key(&key).await;
            }
            let app = h.app_session(&format!("app-{round}"), "0s").await;
            assert!(
                h.app_acquire(&key, &app, &json!({"pod": holder}).to_string())
                    .await
            );
            let lock_index = h.emu().kv_entry(&key).expect("key").lock_index;
            let le = h
                .wait_status("web", |le| {
                    harness::status_leader(le).as_deref() == Some(holder.as_str())
                })
                .await;
            let token = le.status.and_then(|s| s.fencing_token).expect("token");
            assert!(token > last, "round {round}: token {token} after {last}");
            let expected = (holder.clone(), token.to_string());
            h.wait_pods(SOON, "the holder labelled with the status' token", |pods| {
                pods.get(&expected.0).is_some_and(|p| {
                    p.labels.get(ROLE).map(String::as_str) == Some("leader")
                        && p.annotations.get(FENCING_TOKEN_ANNOTATION) == Some(&expected.1)
                })
            })
            .await;
            eprintln!("round {round}: {holder} LockIndex {lock_index}, token {token}");
            last = token;
            assert!(h.app_release(&key, &app).await);
        }
        h.finish().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn switching_to_observe_hands_the_key_over_to_the_applications() {
    with_namespace("cs-to-observe", |admin, ns| async move {
        let (h, first) = Harness::web_elected(admin, ns, web(json!({}))).await;
        let key = h.key("web");
        h.patch_spec("web", json!({"mode": "Observe"})).await;

        // The operator lets go: its session destroyed, the key released (no lock-delay).
        let released = h
            .poll_until(SOON, || {
                h.emu().session(&first.session).is_none()
                    && h.emu().kv_entry(&key).is_none_or(|e| e.session.is_none())
            })
            .await;
        assert!(
            released,
            "the operator still holds the key: {:?}",
            h.emu().kv_entry(&key)
        );
        h.wait_pods(SOON, "nobody labelled leader", |pods| {
            with_role(pods, "leader").is_empty()
        })
        .await;

        // An application can now take the key, and the operator mirrors it.
        let names: Vec<String> = h.current().keys().cloned().collect();
        let holder = names
            .iter()
            .find(|n| **n != first.pod)
            .expect("another pod")
            .clone();
        let app = h.app_session("app-web", "0s").await;
        assert!(
            h.app_acquire(&key, &app, &json!({"pod": holder}).to_string())
                .await,
            "the application acquires the released key"
        );
        let expected = holder.clone();
        h.wait_pods(SOON, "the application's holder labelled leader", |pods| {
            with_role(pods, "leader") == vec![expected.clone()]
        })
        .await;
        let le = h
            .wait_status("web", |le| {
                harness::status_leader(le).as_deref() == Some(holder.as_str())
            })
            .await;
        assert_eq!(phase(&le).as_deref(), Some("Observing"));
        let entry = h.emu().kv_entry(&key).expect("key");
        assert_eq!(entry.session.as_deref(), Some(app.as_str()));
        h.finish().await;
    })
    .await;
}
