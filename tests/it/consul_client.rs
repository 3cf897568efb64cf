//! The Consul client against the testkit Consul emulator: every operation, every error
//! category, blocking-query index rules, retries, the connection cap, settings and TLS.

use crate::common;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use consul_elector::consul::{
    BlockingIndex, ConsulClient, ConsulError, ConsulSettings, ConsulToken, IndexChange, Overrides,
    QueryOptions, SessionBehavior, SessionRequest, Tenancy,
};
use testkit::consul::{AclPolicy, Endpoint, Fault, FaultAction};

use common::{client, emulator, emulator_with_tokens, settings, with_token};

const LOCK_FLAGS: u64 = 3_304_740_253_564_472_344;

fn session_request(name: &str) -> SessionRequest {
    SessionRequest::new(name)
        .ttl(Duration::from_secs(15))
        .lock_delay(Duration::from_millis(1500))
}

#[tokio::test]
async fn session_lifecycle() {
    let emu = emulator().await;
    let consul = client(&emu);

    let id = consul
        .create_session(&session_request("consul-elector/shop/web/web-0"))
        .await
        .unwrap();
    let stored = emu.session(&id).unwrap();
    assert!(stored.checks.is_empty(), "NodeChecks: [] means no checks");
    assert_eq!(stored.ttl, "15s");
    assert_eq!(stored.lock_delay, Duration::from_millis(1500));

    let info = consul
        .session_info(&id, QueryOptions::default())
        .await
        .unwrap();
    let entry = info.value.unwrap();
    assert_eq!(entry.id, id);
    assert_eq!(entry.name, "consul-elector/shop/web/web-0");
    assert_eq!(entry.node, "node1");
    assert_eq!(entry.ttl(), Some(Duration::from_secs(15)));
    assert_eq!(entry.lock_delay, Duration::from_millis(1500));
    assert_eq!(entry.behavior, SessionBehavior::Release);
    assert!(entry.node_checks.is_empty());
    assert!(info.meta.index >= 1);
    assert!(info.meta.known_leader);

    let list = consul.list_sessions(QueryOptions::default()).await.unwrap();
    assert_eq!(list.value.len(), 1);
    assert_eq!(list.value[0].id, id);

    // Renew just before the 2×TTL deadline keeps the session alive.
    emu.advance(Duration::from_secs(29)).await;
    let renewed = consul.renew_session(&id).await.unwrap();
    assert_eq!(renewed.id, id);
    emu.advance(Duration::from_secs(29)).await;
    assert!(emu.session(&id).is_some());

    consul.destroy_session(&id).await.unwrap();
    let info = consul
        .session_info(&id, QueryOptions::default())
        .await
        .unwrap();
    assert_eq!(info.value, None);
    // Destroying an unknown session succeeds, renewing it is a typed 404.
    consul.destroy_session(&id).await.unwrap();
    let error = consul.renew_session(&id).await.unwrap_err();
    assert!(
        matches!(error, ConsulError::SessionNotFound { .. }),
        "{error:?}"
    );
    assert_eq!(error.category(), "session_not_found");
    assert!(!error.is_retryable());
    assert!(error.to_string().contains(&id));

    let delete = consul
        .create_session(&SessionRequest::new("d").behavior(SessionBehavior::Delete))
        .await
        .unwrap();
    let entry = consul
        .session_info(&delete, QueryOptions::default())
        .await
        .unwrap()
        .value
        .unwrap();
    assert_eq!(entry.behavior, SessionBehavior::Delete);
    assert_eq!(entry.ttl(), None);
}

#[tokio::test]
async fn session_expires_after_twice_the_ttl() {
    let emu = emulator().await;
    let consul = client(&emu);
    let id = consul
        .create_session(&session_request("ttl"))
        .await
        .unwrap();
    emu.advance(Duration::from_secs(30)).await;
    let error = consul.renew_session(&id).await.unwrap_err();
    assert!(matches!(error, ConsulError::SessionNotFound { .. }));
}

#[tokio::test]
async fn kv_locking() {
    let emu = emulator().await;
    let consul = client(&emu);
    let key = "elector/shop/web/leader";
    let s1 = consul.create_session(&session_request("s1")).await.unwrap();
    let s2 = consul.create_session(&session_request("s2")).await.unwrap();

    let missing = consul.kv_get(key, QueryOptions::default()).await.unwrap();
    assert_eq!(missing.value, None);
    assert!(missing.meta.index >= 1);

    assert!(
        consul
            .kv_acquire(key, &s1, b"{\"pod\":\"web-0\"}", LOCK_FLAGS)
            .await
            .unwrap()
    );
    let held = consul.kv_get(key, QueryOptions::default()).await.unwrap();
    let entry = held.value.unwrap();
    assert_eq!(entry.session.as_deref(), Some(s1.as_str()));
    assert_eq!(entry.lock_index, 1);
    assert_eq!(entry.flags, LOCK_FLAGS);
    assert_eq!(entry.value, b"{\"pod\":\"web-0\"}");
    assert_eq!(held.meta.index, entry.modify_index);

    assert!(!consul.kv_acquire(key, &s2, b"x", LOCK_FLAGS).await.unwrap());
    assert!(!consul.kv_release(key, &s2, b"x", LOCK_FLAGS).await.unwrap());
    assert!(
        consul
            .kv_release(key, &s1, b"bye", LOCK_FLAGS)
            .await
            .unwrap()
    );
    let released = consul
        .kv_get(key, QueryOptions::default())
        .await
        .unwrap()
        .value
        .unwrap();
    assert_eq!(released.session, None);
    assert_eq!(released.value, b"bye");

    // An explicit release sets no lock-delay: the next session gets the lock at once.
    assert!(
        consul
            .kv_acquire(key, &s2, b"v2", LOCK_FLAGS)
            .await
            .unwrap()
    );
    let entry = emu.kv_entry(key).unwrap();
    assert_eq!(entry.lock_index, 2);

    // Destroying the holder starts the lock-delay.
    consul.destroy_session(&s2).await.unwrap();
    assert!(
        !consul
            .kv_acquire(key, &s1, b"v3", LOCK_FLAGS)
            .await
            .unwrap()
    );
    emu.advance(Duration::from_millis(1500)).await;
    assert!(
        consul
            .kv_acquire(key, &s1, b"v3", LOCK_FLAGS)
            .await
            .unwrap()
    );
    assert_eq!(emu.kv_entry(key).unwrap().lock_index, 3);
}

#[tokio::test]
async fn kv_writes_reads_and_deletes() {
    let emu = emulator().await;
    let consul = client(&emu);

    consul.kv_put("app/a", b"one", 0).await.unwrap();
    consul.kv_put("app/b", b"", 7).await.unwrap();
    consul.kv_put("other/c", b"three", 0).await.unwrap();
    let b = consul
        .kv_get("app/b", QueryOptions::default())
        .await
        .unwrap()
        .value
        .unwrap();
    assert!(b.value.is_empty());
    assert_eq!(b.flags, 7);

    let list = consul
        .kv_list("app/", QueryOptions::default())
        .await
        .unwrap();
    let keys: Vec<_> = list.value.iter().map(|e| e.key.as_str()).collect();
    assert_eq!(keys, ["app/a", "app/b"]);
    let top = list.value.iter().map(|e| e.modify_index).max().unwrap();
    assert_eq!(list.meta.index, top);
    let none = consul
        .kv_list("nothing/", QueryOptions::default())
        .await
        .unwrap();
    assert!(none.value.is_empty());

    let a = consul
        .kv_get("app/a", QueryOptions::default())
        .await
        .unwrap()
        .value
        .unwrap();
    assert!(
        !consul.kv_cas("app/a", b"x", 0, 0).await.unwrap(),
        "cas=0 on an existing key"
    );
    assert!(
        !consul
            .kv_cas("app/a", b"x", 0, a.modify_index + 100)
            .await
            .unwrap()
    );
    assert!(
        consul
            .kv_cas("app/a", b"two", 0, a.modify_index)
            .await
            .unwrap()
    );
    assert!(consul.kv_cas("app/new", b"n", 0, 0).await.unwrap());
    assert_eq!(emu.kv_entry("app/a").unwrap().value, b"two");

    let a = emu.kv_entry("app/a").unwrap();
    assert!(
        !consul
            .kv_delete("app/a", Some(a.modify_index - 1))
            .await
            .unwrap()
    );
    assert!(
        consul
            .kv_delete("app/a", Some(a.modify_index))
            .await
            .unwrap()
    );
    assert!(emu.kv_entry("app/a").is_none());
    assert!(consul.kv_delete("app/b", None).await.unwrap());
    assert!(consul.kv_delete("app/absent", None).await.unwrap());

    // Keys are encoded per path segment.
    consul.kv_put("odd/a b?c#d", b"v", 0).await.unwrap();
    assert!(emu.kv_entry("odd/a b?c#d").is_some());

    let error = consul
        .kv_get("/leading", QueryOptions::default())
        .await
        .unwrap_err();
    assert_eq!(error.category(), "invalid_request");
}

#[tokio::test]
async fn blocking_get_on_a_missing_key_is_woken_by_its_creation() {
    let emu = emulator().await;
    let consul = client(&emu);
    let key = "watch/missing";
    let first = consul.kv_get(key, QueryOptions::default()).await.unwrap();
    assert_eq!(first.value, None);

    let mut index = BlockingIndex::new();
    index.observe(first.meta.index);
    let waiter = {
        let consul = consul.clone();
        let options = QueryOptions::blocking(index.index(), Duration::from_secs(60));
        tokio::spawn(async move { consul.kv_get(key, options).await })
    };
    emu.wait_for_blocked_queries(1).await;
    consul.kv_put("watch/other", b"x", 0).await.unwrap();
    consul.kv_put(key, b"hello", 0).await.unwrap();
    let answer = waiter.await.unwrap().unwrap();
    assert_eq!(answer.value.unwrap().value, b"hello");
    assert_eq!(index.observe(answer.meta.index), IndexChange::Advanced);
}

#[tokio::test]
async fn blocking_get_times_out_with_the_same_index() {
    let emu = emulator().await;
    let consul = client(&emu);
    consul.kv_put("watch/k", b"v", 0).await.unwrap();
    let first = consul
        .kv_get("watch/k", QueryOptions::default())
        .await
        .unwrap();
    let mut index = BlockingIndex::new();
    index.observe(first.meta.index);

    let waiter = {
        let consul = consul.clone();
        let options = QueryOptions::blocking(index.index(), Duration::from_secs(30));
        tokio::spawn(async move { consul.kv_get("watch/k", options).await })
    };
    emu.wait_for_blocked_queries(1).await;
    emu.advance(Duration::from_secs(29)).await;
    assert!(!waiter.is_finished());
    emu.advance(Duration::from_secs(1)).await;
    let answer = waiter.await.unwrap().unwrap();
    assert_eq!(answer.meta.index, first.meta.index);
    assert_eq!(index.observe(answer.meta.index), IndexChange::Unchanged);
    assert_eq!(index.index(), first.meta.index);
}

#[tokio::test]
async fn blocking_index_resets_when_the_server_index_goes_backwards() {
    let emu = emulator().await;
    let consul = client(&emu);
    consul.kv_put("watch/k", b"v", 0).await.unwrap();
    let current = emu.kv_entry("watch/k").unwrap().modify_index;

    // As after a snapshot restore: the client's index is ahead of the server's.
    let mut index = BlockingIndex::new();
    index.observe(999_999);
    let waiter = {
        let consul = consul.clone();
        let options = QueryOptions::blocking(index.index(), Duration::from_secs(5));
        tokio::spawn(async move { consul.kv_get("watch/k", options).await })
    };
    emu.wait_for_blocked_queries(1).await;
    emu.advance(Duration::from_secs(5)).await;
    let answer = waiter.await.unwrap().unwrap();
    assert_eq!(answer.meta.index, current);
    assert_eq!(index.observe(answer.meta.index), IndexChange::Reset);
    assert_eq!(index.index(), 0);
    // Index 0 is a non-blocking re-read.
    let reread = consul
        .kv_get(
            "watch/k",
            QueryOptions::blocking(index.index(), Duration::from_secs(5)),
        )
        .await
        .unwrap();
    assert_eq!(index.observe(reread.meta.index), IndexChange::Advanced);
    assert_eq!(index.index(), current);
}

#[tokio::test]
async fn watch_of_a_prefix_is_woken_by_a_write_and_by_a_session_loss() {
    let emu = emulator().await;
    let consul = client(&emu);
    let session = consul.create_session(&session_request("w")).await.unwrap();
    assert!(
        consul
            .kv_acquire("elector/a", &session, b"a", 0)
            .await
            .unwrap()
    );

    let mut watch = consul.watch(Duration::from_secs(60));
    let (first, change) = watch
        .next(|options| consul.kv_list("elector/", options))
        .await
        .unwrap();
    assert_eq!(change, IndexChange::Advanced);
    assert_eq!(first.value.len(), 1);

    let (woken, ()) = tokio::join!(
        watch.next(|options| consul.kv_list("elector/", options)),
        async {
            emu.wait_for_blocked_queries(1).await;
            consul.kv_put("elector/b", b"b", 0).await.unwrap();
        }
    );
    let (woken, change) = woken.unwrap();
    assert_eq!(change, IndexChange::Advanced);
    assert_eq!(woken.value.len(), 2);

    // The lock holder's session expires: the watch sees the key without a session.
    let ((lost, _), ()) = tokio::join!(
        async {
            watch
                .next(|options| consul.kv_list("elector/", options))
                .await
                .unwrap()
        },
        async {
            emu.wait_for_blocked_queries(1).await;
            emu.advance(Duration::from_secs(30)).await;
        }
    );
    let a = lost.value.iter().find(|e| e.key == "elector/a").unwrap();
    assert_eq!(a.session, None);
}

#[tokio::test]
async fn permission_errors_come_from_acls() {
    let emu = emulator_with_tokens([
        (
            "reader-token",
            AclPolicy {
                key_read: vec![String::new()],
                ..AclPolicy::default()
            },
        ),
        (
            "writer-token",
            AclPolicy {
                key_write: vec!["elector/".to_owned()],
                session_write: true,
                ..AclPolicy::default()
            },
        ),
    ])
    .await;
    let mut reader_settings = settings(&emu);
    reader_settings.token = ConsulToken::new("reader-token");
    let reader = ConsulClient::new(&reader_settings).unwrap();

    let error = reader.kv_put("elector/k", b"v", 0).await.unwrap_err();
    assert!(
        matches!(error, ConsulError::PermissionDenied { .. }),
        "{error:?}"
    );
    assert_eq!(error.category(), "permission_denied");
    assert!(!error.is_retryable());
    assert_eq!(emu.stats().requests_to("kv.put"), 1, "403 is not retried");

    let writer = with_token(&reader, "writer-token");
    writer.kv_put("elector/k", b"v", 0).await.unwrap();
    writer
        .create_session(&session_request("acl"))
        .await
        .unwrap();

    let stranger = with_token(&reader, "unknown-token");
    let error = stranger
        .kv_get("elector/k", QueryOptions::default())
        .await
        .unwrap_err();
    assert!(
        matches!(error, ConsulError::AclNotFound { .. }),
        "{error:?}"
    );
    assert_eq!(error.category(), "acl_not_found");
    assert!(!error.is_retryable());
}

#[tokio::test]
async fn server_side_errors_are_typed() {
    let emu = emulator().await;
    let consul = client(&emu);

    let big = vec![b'x'; 524_289];
    let error = consul.kv_put("big", &big, 0).await.unwrap_err();
    assert!(
        matches!(error, ConsulError::ValueTooLarge { .. }),
        "{error:?}"
    );
    assert!(!error.is_retryable());
    consul.kv_put("big", &big[..524_288], 0).await.unwrap();

    let ghost = "11111111-2222-3333-4444-555555555555";
    let error = consul.kv_acquire("k", ghost, b"", 0).await.unwrap_err();
    assert!(
        matches!(error, ConsulError::InvalidSession { .. }),
        "{error:?}"
    );
    assert_eq!(error.category(), "invalid_session");
    assert!(error.to_string().contains("kv acquire \"k\""));

    emu.add_fault(Fault {
        endpoint: Endpoint::Kv,
        method: None,
        action: FaultAction::Respond {
            status: 502,
            body: "bad gateway".into(),
            retry_after: None,
        },
        times: Some(1),
    });
    let error = consul
        .kv_get("k", QueryOptions::default())
        .await
        .unwrap_err();
    match &error {
        ConsulError::Unexpected { status, body, .. } => {
            assert_eq!(*status, 502);
            assert_eq!(body, "bad gateway");
        }
        other => panic!("unexpected error {other:?}"),
    }
    assert_eq!(error.category(), "unexpected");

    // The datacenter travels as ?dc=; the emulator only serves dc1.
    let elsewhere = consul
        .with_overrides(Overrides {
            datacenter: Some("dc2".into()),
            ..Overrides::default()
        })
        .unwrap();
    assert_eq!(elsewhere.datacenter(), Some("dc2"));
    let error = elsewhere
        .kv_get("k", QueryOptions::default())
        .await
        .unwrap_err();
    assert_eq!(error.category(), "unexpected", "{error}");
    let here = consul
        .with_overrides(Overrides {
            datacenter: Some("dc1".into()),
            ..Overrides::default()
        })
        .unwrap();
    here.kv_get("k", QueryOptions::default()).await.unwrap();
}

#[tokio::test]
async fn an_enterprise_namespace_and_partition_go_with_every_request_and_consul_ce_refuses_them() {
    let emu = emulator().await;
    let consul = client(&emu);
    let namespaced = consul
        .with_overrides(Overrides {
            tenancy: Tenancy {
                namespace: Some("team-a".into()),
                partition: None,
            },
            ..Overrides::default()
        })
        .unwrap();
    // A part an override leaves unset keeps the handle's; an empty one too.
    let partitioned = namespaced
        .with_overrides(Overrides {
            tenancy: Tenancy {
                namespace: Some(String::new()),
                partition: Some("east".into()),
            },
            ..Overrides::default()
        })
        .unwrap();
    assert_eq!(
        *partitioned.tenancy(),
        Tenancy {
            namespace: Some("team-a".into()),
            partition: Some("east".into()),
        }
    );
    let namespaces = "Namespaces are a Consul Enterprise feature";
    let refused = [
        namespaced.kv_get("k", QueryOptions::default()).await.err(),
        namespaced.kv_acquire("k", "nobody", b"v", 0).await.err(),
        namespaced.create_session(&session_request("s")).await.err(),
    ];
    for error in refused {
        let error = error.map(|e| e.to_string()).unwrap_or_default();
        assert!(error.contains(namespaces), "{error}");
    }
    let only_partition = consul
        .with_overrides(Overrides {
            tenancy: Tenancy {
                namespace: None,
                partition: Some("east".into()),
            },
            ..Overrides::default()
        })
        .unwrap();
    let error = only_partition.kv_get("k", QueryOptions::default()).await;
    let error = error.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(
        error.contains("Partitions are a Consul Enterprise feature"),
        "{error}"
    );
    assert_eq!(emu.kv_entry("k"), None, "nothing was written");
    assert!(emu.sessions().is_empty(), "no session was created");
    // Without either, nothing is added: the emulator serves the request.
    consul.kv_get("k", QueryOptions::default()).await.unwrap();
}

#[tokio::test]
async fn no_leader_is_retried_until_it_succeeds() {
    let emu = emulator().await;
    let consul = client(&emu);
    emu.add_fault(Fault::times(Endpoint::Kv, FaultAction::NoLeaderError, 2));
    consul.kv_put("k", b"v", 0).await.unwrap();
    assert_eq!(emu.stats().requests_to("kv.put"), 3);
    assert_eq!(emu.kv_entry("k").unwrap().value, b"v");
}

#[tokio::test]
async fn rate_limits_are_retried_until_they_succeed() {
    let emu = emulator().await;
    let consul = client(&emu);
    emu.add_fault(Fault {
        endpoint: Endpoint::Kv,
        method: None,
        action: FaultAction::Respond {
            status: 429,
            body: "rate limit exceeded, try again later or against a different server".into(),
            retry_after: None,
        },
        times: Some(2),
    });
    assert!(
        consul.kv_cas("k", b"v", 0, 0).await.unwrap(),
        "429 proves nothing was applied"
    );
    assert_eq!(emu.stats().requests_to("kv.put"), 3);
}

#[tokio::test]
async fn retries_are_bounded() {
    let emu = emulator().await;
    let consul = client(&emu);

    let leaderless = emu.add_fault(Fault::always(Endpoint::Kv, FaultAction::NoLeaderError));
    let error = consul.kv_put("k", b"v", 0).await.unwrap_err();
    assert!(
        matches!(error, ConsulError::NoClusterLeader { .. }),
        "{error:?}"
    );
    assert!(error.is_retryable());
    assert_eq!(emu.stats().requests_to("kv.put"), 3, "exactly max_attempts");
    emu.remove_fault(leaderless);

    emu.reset_stats();
    emu.add_fault(Fault::always(
        Endpoint::SessionRenew,
        FaultAction::Respond {
            status: 503,
            body: "rate limit exceeded for operation that can only be performed by the leader, try again later".into(),
            retry_after: None,
        },
    ));
    let error = consul
        .renew_session("00000000-0000-0000-0000-000000000000")
        .await
        .unwrap_err();
    assert!(
        matches!(error, ConsulError::RateLimited { status: 503, .. }),
        "{error:?}"
    );
    assert_eq!(emu.stats().requests_to("session.renew"), 3);
}

#[tokio::test]
async fn whole_emulator_without_leader() {
    let emu = emulator().await;
    let consul = client(&emu);
    emu.set_leader(false);
    let error = consul
        .create_session(&session_request("x"))
        .await
        .unwrap_err();
    assert_eq!(error.category(), "no_cluster_leader");
    assert_eq!(emu.stats().requests_to("session.create"), 3);
    emu.set_leader(true);
    consul.create_session(&session_request("x")).await.unwrap();
}

#[tokio::test]
async fn retry_after_is_reported() {
    let emu = emulator().await;
    let mut no_retries = settings(&emu);
    no_retries.retry.max_attempts = 1;
    let consul = ConsulClient::new(&no_retries).unwrap();
    emu.add_fault(Fault::times(
        Endpoint::Kv,
        FaultAction::Respond {
            status: 429,
            body: String::new(),
            retry_after: Some(2),
        },
        1,
    ));
    let error = consul
        .kv_get("k", QueryOptions::default())
        .await
        .unwrap_err();
    assert_eq!(error.retry_after(), Some(Duration::from_secs(2)));
    assert_eq!(error.category(), "rate_limited");
}

#[tokio::test]
async fn ambiguous_failures_are_retried_only_for_idempotent_requests() {
    let emu = emulator().await;
    let consul = client(&emu);
    emu.add_fault(Fault::always(Endpoint::Kv, FaultAction::DropConnection));

    let error = consul.kv_cas("k", b"v", 0, 0).await.unwrap_err();
    assert_eq!(error.category(), "transport");
    assert!(error.is_retryable());
    assert_eq!(
        emu.stats().requests_to("kv.put"),
        1,
        "a CAS may have been applied"
    );

    let error = consul
        .kv_get("k", QueryOptions::default())
        .await
        .unwrap_err();
    assert_eq!(error.category(), "transport");
    assert_eq!(emu.stats().requests_to("kv.get"), 3);
}

#[tokio::test]
async fn connect_failures_are_transport_errors() {
    let emu = emulator().await;
    let mut dead = settings(&emu);
    // A port that nothing listens on: bind one, then free it.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    dead.address =
        consul_elector::consul::ConsulAddress::parse(&format!("127.0.0.1:{port}"), false).unwrap();
    let consul = ConsulClient::new(&dead).unwrap();
    let error = consul
        .create_session(&session_request("x"))
        .await
        .unwrap_err();
    assert!(
        matches!(
            error,
            ConsulError::Transport {
                failure: consul_elector::consul::TransportFailure::Connect,
                ..
            }
        ),
        "{error:?}"
    );
    assert!(error.request_not_applied());
}

async fn hammer(cap: usize) -> testkit::consul::Stats {
    let emu = emulator().await;
    let mut settings = settings(&emu);
    settings.max_connections = cap;
    let root = ConsulClient::new(&settings).unwrap();
    // Keep requests in flight long enough for concurrency to build up.
    emu.add_fault(Fault::always(
        Endpoint::Any,
        FaultAction::Latency(Duration::from_millis(2)),
    ));
    let handles: Arc<Vec<ConsulClient>> = Arc::new(
        (0..4)
            .map(|i| with_token(&root, format!("token-{i}")))
            .chain([root.clone()])
            .collect(),
    );
    let session = root.create_session(&session_request("cap")).await.unwrap();
    // A hundred watches fill the long-poll lane for the whole run, so every lane is busy.
    root.kv_put("parked", b"v", 0).await.unwrap();
    let parked_index = emu.kv_entry("parked").unwrap().modify_index;
    let watches: Vec<_> = (0..100)
        .map(|_| {
            let consul = root.clone();
            tokio::spawn(async move {
                let wait = QueryOptions::blocking(parked_index, Duration::from_secs(300));
                consul.kv_get("parked", wait).await
            })
        })
        .collect();
    emu.wait_for_blocked_queries((cap / 2).max(1)).await;
    let tasks: Vec<_> = (0..1000)
        .map(|i| {
            let handles = handles.clone();
            let session = session.clone();
            tokio::spawn(async move {
                let consul = &handles[i % handles.len()];
                let key = format!("cap/{}", i % 50);
                match i % 4 {
                    0 => consul.kv_put(&key, b"v", 0).await.map(|_| ()),
                    1 => consul
                        .kv_get(&key, QueryOptions::default())
                        .await
                        .map(|_| ()),
                    2 => consul.kv_acquire(&key, &session, b"v", 0).await.map(|_| ()),
                    _ => consul.renew_session(&session).await.map(|_| ()),
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap().unwrap();
    }
    root.kv_put("parked", b"w", 0).await.unwrap();
    for watch in watches {
        assert_eq!(watch.await.unwrap().unwrap().value.unwrap().value, b"w");
    }
    let stats = emu.stats();
    eprintln!(
        "cap {cap}: connections_max {} connections_total {} in_flight_total_max {} requests {}",
        stats.connections_max,
        stats.connections_total,
        stats.in_flight_total_max,
        stats.total_requests()
    );
    assert_eq!(stats.total_requests(), 1 + 1 + 100 + 1000 + 1);
    stats
}

/// How many connections beyond the cap a burst may briefly open: the budgets bound requests
/// in flight exactly, but reqwest returns a connection to its pool from a background task, so
/// a request starting in that window may open a new one.
const OVERSHOOT: usize = 6;

/// Requests in flight never exceed the cap; connections exceed it by at most a few, and are
/// reused rather than churned.
fn assert_within(cap: usize, stats: &testkit::consul::Stats) {
    assert!(stats.in_flight_total_max <= cap, "{stats:?}");
    assert!(stats.connections_max <= cap + OVERSHOOT, "{stats:?}");
    assert!(
        stats.connections_total <= u64::try_from(cap + OVERSHOOT).unwrap(),
        "connections are reused, not churned: {stats:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_thousand_callers_never_exceed_the_default_cap() {
    assert_within(64, &hammer(64).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_thousand_callers_never_exceed_a_small_cap() {
    assert_within(8, &hammer(8).await);
}

#[tokio::test]
async fn a_cancelled_request_gives_its_permit_back() {
    let emu = emulator().await;
    let mut one = settings(&emu);
    // The smallest cap: one permit per lane.
    one.max_connections = 1;
    let consul = ConsulClient::new(&one).unwrap();
    consul.kv_put("k", b"v", 0).await.unwrap();
    let index = emu.kv_entry("k").unwrap().modify_index;
    let blocking = move || QueryOptions::blocking(index, Duration::from_secs(300));

    // A watch parked on the long-poll lane's only permit, then dropped by its caller.
    let watch = {
        let consul = consul.clone();
        tokio::spawn(async move { consul.kv_get("k", blocking()).await })
    };
    emu.wait_for_blocked_queries(1).await;
    watch.abort();
    assert!(watch.await.unwrap_err().is_cancelled());

    // The permit is free again: the next blocking query (answered at once, since the key
    // changed) gets it.
    consul.kv_put("k", b"w", 0).await.unwrap();
    let read = tokio::time::timeout(Duration::from_secs(5), consul.kv_get("k", blocking()))
        .await
        .expect("the long-poll permit was given back")
        .unwrap();
    assert_eq!(read.value.unwrap().value, b"w");
}

/// Long polls draw from their own budget (half the cap): a hundred of them parked on one
/// address neither delay a session renewal nor a write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_long_polls_cannot_delay_a_renewal() {
    let emu = emulator().await;
    let consul = ConsulClient::new(&settings(&emu)).unwrap();
    let long_polls = consul_elector::consul::ConsulSettings::default().max_connections / 2;
    let session = consul
        .create_session(&session_request("busy"))
        .await
        .unwrap();
    consul.kv_put("watched", b"v", 0).await.unwrap();
    let index = emu.kv_entry("watched").unwrap().modify_index;
    let polls: Vec<_> = (0..100)
        .map(|_| {
            let consul = consul.clone();
            tokio::spawn(async move {
                consul
                    .kv_get(
                        "watched",
                        QueryOptions::blocking(index, Duration::from_secs(300)),
                    )
                    .await
            })
        })
        .collect();
    tokio::time::timeout(
        Duration::from_secs(10),
        emu.wait_for_blocked_queries(long_polls),
    )
    .await
    .expect("the long-poll lane fills up");

    let renewed = tokio::time::timeout(Duration::from_secs(5), consul.renew_session(&session))
        .await
        .expect("a renewal does not wait behind long polls")
        .unwrap();
    assert_eq!(renewed.id, session);
    tokio::time::timeout(Duration::from_secs(5), consul.kv_put("other", b"v", 0))
        .await
        .expect("a write does not wait behind long polls")
        .unwrap();
    assert_eq!(
        emu.blocked_queries().await,
        long_polls,
        "within the lane budget"
    );
    for poll in polls {
        poll.abort();
    }
}

#[tokio::test]
async fn settings_from_an_env_map_reach_the_server() {
    let emu = emulator_with_tokens([(
        "file-token",
        AclPolicy {
            key_write: vec![String::new()],
            ..AclPolicy::default()
        },
    )])
    .await;
    let dir = std::env::temp_dir().join(format!("consul-client-it-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let token_file = dir.join("token");
    std::fs::write(&token_file, "file-token\n").unwrap();
    let env: HashMap<&str, String> = HashMap::from([
        ("CONSUL_HTTP_ADDR", emu.addr().to_string()),
        (
            "CONSUL_HTTP_TOKEN_FILE",
            token_file.to_str().unwrap().to_owned(),
        ),
        ("CONSUL_HTTP_TOKEN", "ignored-token".to_owned()),
        ("CONSUL_DATACENTER", "dc1".to_owned()),
        ("ELECTOR_CONSUL_MAX_CONNECTIONS", "2".to_owned()),
    ]);
    let settings = ConsulSettings::from_env(|name| env.get(name).cloned()).unwrap();
    assert!(!settings.address.is_tls());
    let consul = ConsulClient::new(&settings).unwrap();
    consul.kv_put("from/env", b"v", 0).await.unwrap();
    assert_eq!(emu.kv_entry("from/env").unwrap().value, b"v");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `unix://` addresses go to the agent's Unix socket (here a relay to the emulator).
#[cfg(unix)]
#[tokio::test]
async fn a_unix_socket_address_reaches_the_agent() {
    let emu = emulator().await;
    let dir = std::env::temp_dir().join(format!("consul-client-uds-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let socket = dir.join("agent.sock");
    let _ = std::fs::remove_file(&socket);
    let listener = tokio::net::UnixListener::bind(&socket).unwrap();
    let target = emu.addr();
    tokio::spawn(async move {
        while let Ok((mut unix, _)) = listener.accept().await {
            tokio::spawn(async move {
                if let Ok(mut tcp) = tokio::net::TcpStream::connect(target).await {
                    let _ = tokio::io::copy_bidirectional(&mut unix, &mut tcp).await;
                }
            });
        }
    });
    let address = format!("unix://{}", socket.display());
    let consul = ConsulClient::new(&ConsulSettings {
        address: consul_elector::consul::ConsulAddress::parse(&address, false).unwrap(),
        ..settings(&emu)
    })
    .unwrap();
    consul.kv_put("over/unix", b"v", 0).await.unwrap();
    assert_eq!(emu.kv_entry("over/unix").unwrap().value, b"v");
    assert_eq!(consul.address().to_string(), address);
    std::fs::remove_dir_all(&dir).unwrap();
}

mod tls {
    //! TLS against a small in-process TLS server (the emulator speaks plain HTTP): custom CA,
    //! client certificate, server-name override and disabled verification.

    use std::path::PathBuf;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use consul_elector::consul::{
        ConsulAddress, ConsulClient, ConsulSettings, QueryOptions, RetryPolicy, TlsSettings,
    };
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    use rustls::server::WebPkiClientVerifier;
    use tokio::net::TcpListener;

    fn fixture(name: &str) -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/tls")
            .join(name)
    }

    /// A TLS server for `consul.test` that requires a client certificate from the test CA and
    /// answers every request with an empty session list.
    async fn server() -> std::net::SocketAddr {
        consul_elector::install_crypto_provider();
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(CertificateDer::from_pem_file(fixture("ca.pem")).unwrap())
            .unwrap();
        let verifier = WebPkiClientVerifier::builder(Arc::new(roots))
            .build()
            .unwrap();
        let chain = vec![CertificateDer::from_pem_file(fixture("server.pem")).unwrap()];
        let key = PrivateKeyDer::from_pem_file(fixture("server.key")).unwrap();
        let config = rustls::ServerConfig::builder()
            .with_client_cert_verifier(verifier)
            .with_single_cert(chain, key)
            .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        crate::pki::serve_empty_session_lists(
            listener,
            crate::pki::Connections::OneRequestEach,
            move || acceptor.clone(),
        );
        addr
    }

    /// A TLS server for `consul.test` that speaks only HTTP/2 (ALPN `h2`, no client
    /// certificate required), answers every request with an empty session list, and counts
    /// the connections it accepted.
    async fn http2_server() -> (std::net::SocketAddr, Arc<AtomicUsize>) {
        consul_elector::install_crypto_provider();
        let chain = vec![CertificateDer::from_pem_file(fixture("server.pem")).unwrap()];
        let key = PrivateKeyDer::from_pem_file(fixture("server.key")).unwrap();
        let mut config = rustls::ServerConfig::builder()
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .unwrap();
        config.alpn_protocols = vec![b"h2".to_vec()];
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let connections = Arc::new(AtomicUsize::new(0));
        let accepted = connections.clone();
        crate::pki::serve_empty_session_lists(
            listener,
            crate::pki::Connections::KeptOpen,
            move || {
                accepted.fetch_add(1, Ordering::SeqCst);
                acceptor.clone()
            },
        );
        (addr, connections)
    }

    fn settings(addr: std::net::SocketAddr, tls: TlsSettings) -> ConsulSettings {
        ConsulSettings {
            address: ConsulAddress::parse(&format!("https://{addr}"), false).unwrap(),
            tls,
            retry: RetryPolicy::no_retries(),
            ..ConsulSettings::default()
        }
    }

    fn mutual(server_name: Option<&str>) -> TlsSettings {
        TlsSettings {
            ca_cert: Some(fixture("ca.pem")),
            client_cert: Some(fixture("client.pem")),
            client_key: Some(fixture("client.key")),
            server_name: server_name.map(str::to_owned),
            ..TlsSettings::default()
        }
    }

    #[tokio::test]
    async fn custom_ca_client_certificate_and_server_name() {
        let addr = server().await;
        let consul = ConsulClient::new(&settings(addr, mutual(Some("consul.test")))).unwrap();
        let sessions = consul.list_sessions(QueryOptions::default()).await.unwrap();
        assert!(sessions.value.is_empty());
        assert_eq!(sessions.meta.index, 5);
    }

    /// Over TLS, ALPN picks HTTP/2 when the server offers it (this server speaks nothing
    /// else), and once a connection exists, concurrent requests all share it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn http2_when_the_server_offers_it_on_one_connection() {
        let (addr, connections) = http2_server().await;
        let tls = TlsSettings {
            ca_cert: Some(fixture("ca.pem")),
            server_name: Some("consul.test".to_owned()),
            ..TlsSettings::default()
        };
        let consul = ConsulClient::new(&settings(addr, tls)).unwrap();
        consul.list_sessions(QueryOptions::default()).await.unwrap();
        let reads = (0..50).map(|_| consul.list_sessions(QueryOptions::default()));
        for read in futures::future::join_all(reads).await {
            assert_eq!(read.unwrap().meta.index, 5);
        }
        assert_eq!(connections.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn the_certificate_must_match_the_name() {
        let addr = server().await;
        let consul = ConsulClient::new(&settings(addr, mutual(None))).unwrap();
        let error = consul
            .list_sessions(QueryOptions::default())
            .await
            .unwrap_err();
        assert_eq!(error.category(), "transport", "{error}");
        assert!(error.to_string().contains("TLS handshake"), "{error}");
    }

    #[tokio::test]
    async fn verification_can_be_disabled() {
        let addr = server().await;
        let tls = TlsSettings {
            verify: false,
            ..mutual(None)
        };
        let consul = ConsulClient::new(&settings(addr, tls)).unwrap();
        consul.list_sessions(QueryOptions::default()).await.unwrap();
    }

    #[tokio::test]
    async fn the_server_requires_a_client_certificate() {
        let addr = server().await;
        let tls = TlsSettings {
            client_cert: None,
            client_key: None,
            ..mutual(Some("consul.test"))
        };
        let consul = ConsulClient::new(&settings(addr, tls)).unwrap();
        let error = consul
            .list_sessions(QueryOptions::default())
            .await
            .unwrap_err();
        assert_eq!(error.category(), "transport", "{error}");
    }

    #[tokio::test]
    async fn unreadable_tls_files_fail_at_construction() {
        let addr = server().await;
        let tls = TlsSettings {
            ca_cert: Some(fixture("missing.pem")),
            ..TlsSettings::default()
        };
        let error = ConsulClient::new(&settings(addr, tls)).unwrap_err();
        assert_eq!(error.category(), "configuration");
        assert!(error.to_string().contains("missing.pem"));
    }
}

/// Where the operator's own token may go: only to its own address. Handles for an allowed
/// other address carry their own token or none; any other address is refused before a
/// connection is opened; a pool no handle uses any more is freed and its connections closed.
#[tokio::test]
async fn the_operators_token_stays_at_the_operators_address() {
    let own = emulator().await;
    let allowed = emulator().await;
    let refused = emulator().await;
    let address = |emu: &testkit::consul::Emulator| {
        consul_elector::consul::ConsulAddress::parse(&emu.url(), false).unwrap()
    };
    let consul = ConsulClient::new(&ConsulSettings {
        token: ConsulToken::new("operator-token"),
        allowed_addresses: vec![address(&allowed)],
        ..settings(&own)
    })
    .unwrap();
    assert!(consul.allows(&address(&own)) && consul.allows(&address(&allowed)));
    assert!(!consul.allows(&address(&refused)));

    // Not allowed: refused, and nothing reaches it.
    let error = consul
        .with_overrides(Overrides {
            address: Some(address(&refused)),
            token: ConsulToken::new("tenant-token"),
            ..Overrides::default()
        })
        .unwrap_err();
    assert_eq!(error.category(), "configuration", "{error}");
    assert_eq!(refused.stats().connections_total, 0);

    // The own address, explicitly named: the operator's token.
    let same = consul
        .with_overrides(Overrides {
            address: Some(address(&own)),
            ..Overrides::default()
        })
        .unwrap();
    same.kv_put("k", b"v", 0).await.unwrap();
    assert_eq!(own.stats().requests_with_token("operator-token"), 1);

    // An allowed address: no token unless the override brings one.
    let anonymous = consul
        .with_overrides(Overrides {
            address: Some(address(&allowed)),
            ..Overrides::default()
        })
        .unwrap();
    assert!(anonymous.token().is_none());
    anonymous.kv_put("k", b"v", 0).await.unwrap();
    let tenant = consul
        .with_overrides(Overrides {
            address: Some(address(&allowed)),
            token: ConsulToken::new("tenant-token"),
            ..Overrides::default()
        })
        .unwrap();
    tenant.kv_put("k", b"w", 0).await.unwrap();
    // A handle derived from the tenant's handle for the operator's address does not carry
    // the tenant's token there either.
    let back = tenant
        .with_overrides(Overrides {
            address: Some(address(&own)),
            ..Overrides::default()
        })
        .unwrap();
    assert!(back.token().is_none());
    let seen = allowed.stats();
    assert_eq!(
        (
            seen.requests_with_token(""),
            seen.requests_with_token("tenant-token"),
            seen.requests_with_token("operator-token"),
        ),
        (1, 1, 0),
        "{seen:?}"
    );

    // Two pools in use; dropping every handle of the allowed address frees its pool and
    // closes its connection.
    assert_eq!(consul.live_pools(), 2);
    assert_eq!(allowed.stats().connections_open, 1);
    drop((anonymous, tenant, back));
    assert_eq!(consul.live_pools(), 1);
    let closed = async {
        while allowed.stats().connections_open > 0 {
            tokio::task::yield_now().await;
        }
    };
    tokio::time::timeout(Duration::from_secs(5), closed)
        .await
        .expect("the freed pool's connection is closed");
}
