//! The lock watcher against the Consul emulator, on tokio's paused clock: one blocking query
//! per (address, datacenter, token, namespace prefix) group within the long-poll budget,
//! exact change reports without pacing delays, Consul outages, unwatching, first views
//! without direct reads, and direct refreshes.

use crate::common;
use crate::support;

use std::collections::BTreeSet;
use std::time::Duration;

use consul_elector::consul::{
    ConsulClient, ConsulSettings, SessionBehavior, SessionRequest, WatchPacing,
};
use consul_elector::election::config::ElectionKey;
use consul_elector::election::confirmation_pace::answer_pause;
use consul_elector::election::observe::LockView;
use consul_elector::observers::locks::{LONG_POLLS_PER_ADDRESS, LockWatcher};
use testkit::consul::{Emulator, Endpoint, Fault, FaultAction};
use tokio::sync::mpsc::{self, UnboundedReceiver};

use support::{REPORT_GUARD, election, next_report, pending_reports, tokio_clock_emulator};

/// How long the watcher's blocking queries wait.
const WAIT: Duration = Duration::from_secs(60);
/// The elections' session TTL: long enough that the queries keep waiting [`WAIT`].
const TTL: Duration = Duration::from_secs(150);

/// The default key of an election.
fn default_key(election: &ElectionKey) -> String {
    format!("elector/{}/{}/leader", election.namespace, election.name)
}

struct Fixture {
    emu: Emulator,
    consul: ConsulClient,
    watcher: LockWatcher,
    reports: UnboundedReceiver<ElectionKey>,
}

impl Fixture {
    async fn new() -> Fixture {
        let emu = tokio_clock_emulator().await;
        let consul = common::client(&emu);
        let (tx, reports) = mpsc::unbounded_channel();
        Fixture {
            emu,
            consul,
            watcher: LockWatcher::new(tx, WAIT),
            reports,
        }
    }

    /// Watches the default key of every election and waits until the first read reported
    /// them all and `queries` blocking queries are parked.
    async fn watch_defaults(&mut self, elections: &[ElectionKey], queries: usize) {
        for election in elections {
            self.watcher
                .watch(election, &self.consul, &default_key(election), TTL);
        }
        self.parked_at_least(queries).await;
        let reported: BTreeSet<ElectionKey> =
            pending_reports(&mut self.reports).into_iter().collect();
        let expected: BTreeSet<ElectionKey> = elections.iter().cloned().collect();
        assert_eq!(reported, expected, "the first read reports every election");
    }

    /// The next report, which must be the only one pending.
    async fn only_report(&mut self) -> ElectionKey {
        let report = next_report(&mut self.reports).await;
        assert_eq!(pending_reports(&mut self.reports), vec![], "after {report}");
        report
    }

    /// The reports of one event that concerns all of `elections`, each reported once.
    async fn reports_of(&mut self, elections: &[ElectionKey]) -> BTreeSet<ElectionKey> {
        let mut reported = Vec::new();
        for _ in elections {
            reported.push(next_report(&mut self.reports).await);
        }
        reported.extend(pending_reports(&mut self.reports));
        assert_eq!(reported.len(), elections.len(), "{reported:?}");
        reported.into_iter().collect()
    }

    async fn session(&self, behavior: SessionBehavior) -> String {
        self.consul
            .create_session(
                &SessionRequest::new("holder")
                    .ttl(Duration::from_secs(30))
                    .lock_delay(Duration::ZERO)
                    .behavior(behavior),
            )
            .await
            .unwrap()
    }

    async fn parked(&self) -> usize {
        self.emu.blocked_queries().await
    }

    /// Waits until at least `queries` blocking queries are parked; fails after
    /// [`REPORT_GUARD`] of virtual time.
    async fn parked_at_least(&self, queries: usize) {
        tokio::time::timeout(REPORT_GUARD, self.emu.wait_for_blocked_queries(queries))
            .await
            .unwrap_or_else(|_| panic!("{queries} blocking queries never parked"));
    }

    /// Acquires `key` for a new session.
    async fn acquire(&self, key: &str) {
        let sid = self.session(SessionBehavior::Release).await;
        assert!(self.consul.kv_acquire(key, &sid, b"v", 0).await.unwrap());
    }
}

/// The election `<namespace>/<name>`.
fn in_namespace(namespace: &str, name: &str) -> ElectionKey {
    ElectionKey {
        namespace: namespace.to_owned(),
        name: name.to_owned(),
    }
}

/// `per_namespace` elections in each of the namespaces `ns-0`..`ns-<namespaces - 1>`.
fn spread(namespaces: usize, per_namespace: usize) -> Vec<ElectionKey> {
    (0..namespaces)
        .flat_map(|ns| {
            (0..per_namespace).map(move |i| in_namespace(&format!("ns-{ns}"), &format!("app-{i}")))
        })
        .collect()
}

/// Lets every answer in flight be processed: paused time only moves on once the runtime
/// has nothing left to do.
async fn settle() {
    tokio::time::sleep(Duration::from_secs(1)).await;
}

fn elections(count: usize) -> Vec<ElectionKey> {
    (0..count).map(|i| election(&format!("app-{i}"))).collect()
}

#[tokio::test(start_paused = true)]
async fn a_hundred_default_keys_share_one_blocking_query() {
    let mut f = Fixture::new().await;
    let all = elections(100);
    f.watch_defaults(&all, 1).await;
    assert_eq!(f.parked().await, 1);
    assert_eq!(
        f.emu.stats().requests_to("kv.get"),
        2,
        "one read, one long poll"
    );
    assert!(all.iter().all(|e| f.watcher.lock(e) == LockView::Absent));

    // Acquire, release, re-acquire, session destroyed, key deleted: each reports exactly
    // the election of that key.
    let target = &all[42];
    let key = default_key(target);
    let sid = f.session(SessionBehavior::Release).await;
    let value = br#"{"pod":"web-0"}"#;
    assert!(f.consul.kv_acquire(&key, &sid, value, 0).await.unwrap());
    assert_eq!(f.only_report().await, *target);
    assert_eq!(
        f.watcher.lock(target),
        LockView::Held {
            session: sid.clone(),
            lock_index: 1,
            value: Some(value.to_vec()),
        }
    );

    assert!(f.consul.kv_release(&key, &sid, value, 0).await.unwrap());
    assert_eq!(f.only_report().await, *target);
    assert_eq!(f.watcher.lock(target), LockView::Free { lock_index: 1 });

    assert!(f.consul.kv_acquire(&key, &sid, value, 0).await.unwrap());
    assert_eq!(f.only_report().await, *target);
    f.consul.destroy_session(&sid).await.unwrap();
    assert_eq!(f.only_report().await, *target);
    assert_eq!(f.watcher.lock(target), LockView::Free { lock_index: 2 });

    assert!(f.consul.kv_delete(&key, None).await.unwrap());
    assert_eq!(f.only_report().await, *target);
    assert_eq!(f.watcher.lock(target), LockView::Absent);

    // A key under the prefix that no election uses wakes the query but reports nothing.
    f.consul.kv_put("elector/unrelated", b"x", 0).await.unwrap();
    settle().await;
    assert_eq!(pending_reports(&mut f.reports), vec![]);
    f.consul
        .kv_put(&default_key(&all[7]), b"y", 0)
        .await
        .unwrap();
    assert_eq!(f.only_report().await, all[7]);
    f.emu.wait_for_blocked_queries(1).await;
    assert_eq!(f.parked().await, 1, "still one query");
}

#[tokio::test(start_paused = true)]
async fn a_session_with_delete_behavior_removes_the_key_and_reports_it() {
    let mut f = Fixture::new().await;
    let all = elections(3);
    f.watch_defaults(&all, 1).await;
    let key = default_key(&all[1]);
    let sid = f.session(SessionBehavior::Delete).await;
    assert!(f.consul.kv_acquire(&key, &sid, b"", 0).await.unwrap());
    assert_eq!(f.only_report().await, all[1]);
    assert!(matches!(
        f.watcher.lock(&all[1]),
        LockView::Held { value: None, .. }
    ));
    assert!(f.emu.invalidate_session(&sid));
    assert_eq!(f.only_report().await, all[1]);
    assert_eq!(f.watcher.lock(&all[1]), LockView::Absent);
}

#[tokio::test(start_paused = true)]
async fn queries_are_one_per_prefix_slashless_key_and_token() {
    let mut f = Fixture::new().await;
    let (a, b, c, d, e) = (
        election("a"),
        election("b"),
        election("c"),
        election("d"),
        election("e"),
    );
    let other_token = common::with_token(&f.consul, "another-token");
    f.watcher.watch(&a, &f.consul, "elector/shop/a/leader", TTL);
    f.watcher.watch(&b, &f.consul, "custom/shop/b/leader", TTL);
    f.watcher.watch(&c, &f.consul, "custom/c", TTL);
    f.watcher.watch(&d, &f.consul, "plain-key", TTL);
    f.watcher
        .watch(&e, &other_token, "elector/shop/e/leader", TTL);
    f.emu.wait_for_blocked_queries(4).await;
    assert_eq!(f.parked().await, 4);
    let first: BTreeSet<ElectionKey> = pending_reports(&mut f.reports).into_iter().collect();
    assert_eq!(first.len(), 5);

    f.consul.kv_put("custom/c", b"1", 0).await.unwrap();
    assert_eq!(f.only_report().await, c);
    f.consul.kv_put("plain-key", b"1", 0).await.unwrap();
    assert_eq!(f.only_report().await, d);
    // Both tokens' queries see the write; only e watches this key.
    f.consul
        .kv_put("elector/shop/e/leader", b"1", 0)
        .await
        .unwrap();
    assert_eq!(next_report(&mut f.reports).await, e);
    settle().await;
    assert_eq!(pending_reports(&mut f.reports), vec![]);
    assert_eq!(f.parked().await, 4);
}

#[tokio::test(start_paused = true)]
async fn an_unavailable_consul_makes_the_group_unknown_once_and_recovery_reports_again() {
    let mut f = Fixture::new().await;
    let all = elections(3);
    f.watch_defaults(&all, 1).await;
    let fault = f.emu.add_fault(Fault {
        endpoint: Endpoint::KvPrefix("elector/".to_owned()),
        method: Some(http::Method::GET),
        action: FaultAction::NoLeaderError,
        times: None,
    });

    // The parked query answers at its wait; the next read fails.
    let expected: BTreeSet<ElectionKey> = all.iter().cloned().collect();
    assert_eq!(f.reports_of(&all).await, expected);
    assert!(all.iter().all(|e| f.watcher.lock(e) == LockView::Unknown));
    // Retries back off and do not report again. Without backoff the client's quick
    // retries would send thousands of reads in these five minutes; with it (1 s doubling
    // to 30 s, full jitter, 3 client attempts each) about 80 go out.
    tokio::time::sleep(WAIT * 5).await;
    assert_eq!(pending_reports(&mut f.reports), vec![]);
    let reads = f.emu.stats().requests_to("kv.get");
    assert!(reads < 150, "{reads} reads");

    f.emu.remove_fault(fault);
    assert_eq!(f.reports_of(&all).await, expected);
    assert!(all.iter().all(|e| f.watcher.lock(e) == LockView::Absent));
    f.emu.wait_for_blocked_queries(1).await;
}

#[tokio::test(start_paused = true)]
async fn an_answer_without_a_cluster_leader_is_unknown() {
    let mut f = Fixture::new().await;
    let all = elections(2);
    f.watch_defaults(&all, 1).await;
    f.emu.set_leader(false);
    let expected: BTreeSet<ElectionKey> = all.iter().cloned().collect();
    assert_eq!(f.reports_of(&all).await, expected);
    assert!(all.iter().all(|e| f.watcher.lock(e) == LockView::Unknown));

    f.emu.set_leader(true);
    assert_eq!(f.reports_of(&all).await, expected);
    assert!(all.iter().all(|e| f.watcher.lock(e) == LockView::Absent));
}

#[tokio::test(start_paused = true)]
async fn unwatching_the_last_election_stops_the_query() {
    let mut f = Fixture::new().await;
    let all = elections(2);
    f.watch_defaults(&all, 1).await;

    f.watcher.unwatch(&all[0]);
    assert_eq!(f.watcher.lock(&all[0]), LockView::Unknown, "not watched");
    f.consul
        .kv_put(&default_key(&all[0]), b"1", 0)
        .await
        .unwrap();
    f.consul
        .kv_put(&default_key(&all[1]), b"1", 0)
        .await
        .unwrap();
    assert_eq!(f.only_report().await, all[1], "the group goes on");

    f.watcher.unwatch(&all[1]);
    f.emu.reset_stats();
    tokio::time::sleep(WAIT * 10).await;
    assert_eq!(f.parked().await, 0);
    assert_eq!(f.emu.stats().requests_to("kv.get"), 0, "no query any more");
    f.consul
        .kv_put(&default_key(&all[1]), b"2", 0)
        .await
        .unwrap();
    assert_eq!(pending_reports(&mut f.reports), vec![]);
}

#[tokio::test(start_paused = true)]
async fn moving_an_election_to_another_key_re_registers_it() {
    let mut f = Fixture::new().await;
    let web = election("web");
    f.watch_defaults(std::slice::from_ref(&web), 1).await;
    f.watcher.watch(&web, &f.consul, &default_key(&web), TTL);
    assert_eq!(pending_reports(&mut f.reports), vec![], "idempotent");

    f.consul.kv_put("custom/web", b"1", 0).await.unwrap();
    f.watcher.watch(&web, &f.consul, "custom/web", TTL);
    // The new group's first read reports the election; the old query has stopped.
    assert_eq!(f.only_report().await, web);
    assert!(matches!(f.watcher.lock(&web), LockView::Free { .. }));
    f.emu.wait_for_blocked_queries(1).await;
    tokio::time::sleep(WAIT * 2).await;
    assert_eq!(f.parked().await, 1);
    f.consul.kv_put(&default_key(&web), b"1", 0).await.unwrap();
    f.consul.kv_put("custom/other", b"1", 0).await.unwrap();
    settle().await;
    assert_eq!(pending_reports(&mut f.reports), vec![]);

    // Another key under the same prefix keeps the same query.
    f.watcher.watch(&web, &f.consul, "custom/other", TTL);
    assert!(matches!(f.watcher.lock(&web), LockView::Free { .. }));
    f.consul.kv_put("custom/other", b"2", 0).await.unwrap();
    assert_eq!(f.only_report().await, web);
    f.emu.wait_for_blocked_queries(1).await;
    assert_eq!(f.parked().await, 1);
}

#[tokio::test(start_paused = true)]
async fn refresh_reads_directly_and_updates_the_cache() {
    let mut f = Fixture::new().await;
    let web = election("web");
    let key = default_key(&web);
    f.watch_defaults(std::slice::from_ref(&web), 1).await;
    let sid = f.session(SessionBehavior::Release).await;
    assert!(f.consul.kv_acquire(&key, &sid, b"v", 0).await.unwrap());
    let held = LockView::Held {
        session: sid.clone(),
        lock_index: 1,
        value: Some(b"v".to_vec()),
    };
    assert_eq!(
        f.watcher.refresh(&web, &f.consul, &key).await.unwrap(),
        held
    );
    assert_eq!(f.watcher.lock(&web), held);
    // Whether or not the watch reported it too, the cache stays at the newest state.
    f.emu.wait_for_blocked_queries(1).await;
    assert_eq!(f.watcher.lock(&web), held);

    // An election that is not watched gets the answer but no cache.
    let other = election("other");
    assert_eq!(
        f.watcher.refresh(&other, &f.consul, &key).await.unwrap(),
        held
    );
    assert_eq!(f.watcher.lock(&other), LockView::Unknown);
}

#[tokio::test(start_paused = true)]
async fn each_namespace_has_its_own_query_and_a_change_wakes_only_its_own() {
    let mut f = Fixture::new().await;
    let all = spread(2, 3);
    let (a, b) = all.split_at(3);
    f.watch_defaults(&all, 2).await;
    assert_eq!(f.watcher.queries(), 2);
    // A prefix without keys answers with the whole KV index, which every write anywhere
    // moves (Consul's rule): give both namespaces a key first.
    for election in [&a[0], &b[0]] {
        f.acquire(&default_key(election)).await;
        assert_eq!(f.only_report().await, *election);
    }
    f.parked_at_least(2).await;
    settle().await;
    f.emu.reset_stats();
    // Namespace ns-0's query must not go out again: if it did, it would fail and its
    // elections would turn Unknown and be reported.
    let untouchable = f.emu.add_fault(Fault {
        endpoint: Endpoint::KvPrefix("elector/ns-0/".to_owned()),
        method: Some(http::Method::GET),
        action: FaultAction::NoLeaderError,
        times: None,
    });
    f.acquire(&default_key(&b[1])).await;
    assert_eq!(f.only_report().await, b[1]);
    f.parked_at_least(2).await;
    settle().await;
    assert_eq!(pending_reports(&mut f.reports), vec![]);
    assert!(matches!(f.watcher.lock(&a[0]), LockView::Held { .. }));
    assert!(a[1..].iter().all(|e| f.watcher.lock(e) == LockView::Absent));
    assert!(matches!(f.watcher.lock(&b[1]), LockView::Held { .. }));
    assert_eq!(
        f.emu.stats().requests_to("kv.get"),
        1,
        "only ns-1's query answered and went out again"
    );
    f.emu.remove_fault(untouchable);
}

#[tokio::test(start_paused = true)]
async fn a_new_election_under_an_answered_group_reads_nothing() {
    let mut f = Fixture::new().await;
    let all = spread(1, 3);
    f.watch_defaults(&all[..2], 1).await;
    f.acquire(&default_key(&all[2])).await;
    settle().await;
    f.emu.reset_stats();

    f.watcher
        .watch(&all[2], &f.consul, &default_key(&all[2]), TTL);
    let view = f
        .watcher
        .current(&all[2], &f.consul, &default_key(&all[2]))
        .await
        .unwrap();
    assert!(matches!(view, LockView::Held { .. }), "{view:?}");
    assert_eq!(f.emu.stats().requests_to("kv.get"), 0);
}

/// Starts `elections` the way the controller does on a cold start: each is watched, then
/// all reconciles ask for their first view at once.
async fn cold_start(f: &Fixture, elections: &[ElectionKey]) -> Vec<LockView> {
    for election in elections {
        f.watcher
            .watch(election, &f.consul, &default_key(election), TTL);
    }
    let views = elections.iter().map(|election| async {
        f.watcher
            .current(election, &f.consul, &default_key(election))
            .await
            .unwrap()
    });
    futures::future::join_all(views).await
}

#[tokio::test(start_paused = true)]
async fn a_cold_start_reads_each_group_once_not_each_key() {
    let mut f = Fixture::new().await;
    let all = spread(10, 100);
    let views = cold_start(&f, &all).await;
    assert!(views.iter().all(|view| *view == LockView::Absent));
    f.parked_at_least(10).await;
    // Per namespace: one read, one long poll; no read per election.
    assert_eq!(f.emu.stats().requests_to("kv.get"), 20);
    assert_eq!(pending_reports(&mut f.reports).len(), all.len());
}

#[tokio::test(start_paused = true)]
async fn long_polls_stay_within_the_budget_with_many_namespaces() {
    let mut f = Fixture::new().await;
    let all = spread(100, 2);
    let views = cold_start(&f, &all).await;
    assert!(views.iter().all(|view| *view == LockView::Absent));
    let queries = f.watcher.queries();
    assert!(queries <= LONG_POLLS_PER_ADDRESS, "{queries} queries");
    assert!(queries > LONG_POLLS_PER_ADDRESS / 2, "{queries} queries");
    f.parked_at_least(queries).await;
    settle().await;
    assert_eq!(f.parked().await, queries);
    let reads = f.emu.stats().requests_to("kv.get");
    assert!(reads < 200, "{reads} reads for {} elections", all.len());
    let reported: BTreeSet<ElectionKey> = pending_reports(&mut f.reports).into_iter().collect();
    assert_eq!(reported.len(), all.len());

    // A change in a merged group reports its election only.
    let target = &all[115];
    f.acquire(&default_key(target)).await;
    assert_eq!(f.only_report().await, *target);
    assert!(matches!(f.watcher.lock(target), LockView::Held { .. }));
    f.parked_at_least(queries).await;
    settle().await;
    assert_eq!(f.parked().await, queries);
    assert_eq!(f.watcher.queries(), queries);
}

#[tokio::test(start_paused = true)]
async fn a_merge_keeps_every_view_and_reports_only_the_newcomer() {
    let mut f = Fixture::new().await;
    let all = spread(LONG_POLLS_PER_ADDRESS, 1);
    f.watch_defaults(&all, LONG_POLLS_PER_ADDRESS).await;
    f.acquire(&default_key(&all[7])).await;
    assert_eq!(f.only_report().await, all[7]);

    // One namespace more than the budget: two neighbours merge.
    let newcomer = in_namespace("ns-100", "app-0");
    f.watcher
        .watch(&newcomer, &f.consul, &default_key(&newcomer), TTL);
    assert_eq!(f.watcher.queries(), LONG_POLLS_PER_ADDRESS);
    for election in &all {
        assert_ne!(f.watcher.lock(election), LockView::Unknown, "{election}");
    }
    assert!(matches!(f.watcher.lock(&all[7]), LockView::Held { .. }));
    assert_eq!(f.only_report().await, newcomer);
    assert_eq!(f.watcher.lock(&newcomer), LockView::Absent);
    f.parked_at_least(LONG_POLLS_PER_ADDRESS).await;
    settle().await;
    assert_eq!(pending_reports(&mut f.reports), vec![]);
    assert_eq!(f.parked().await, LONG_POLLS_PER_ADDRESS);
}

#[tokio::test(start_paused = true)]
async fn changes_are_reported_as_they_arrive_not_paced() {
    let emu = tokio_clock_emulator().await;
    let consul = ConsulClient::new(&ConsulSettings {
        watch_pacing: WatchPacing::default(),
        ..common::settings(&emu)
    })
    .unwrap();
    let (tx, reports) = mpsc::unbounded_channel();
    let mut f = Fixture {
        emu,
        consul,
        watcher: LockWatcher::new(tx, WAIT),
        reports,
    };
    let all = spread(1, 2);
    f.watch_defaults(&all, 1).await;
    let key = default_key(&all[0]);
    let sid = f.session(SessionBehavior::Release).await;
    // Twenty changes in a row, each written once the previous one was reported.
    let started = tokio::time::Instant::now();
    for _ in 0..10 {
        assert!(f.consul.kv_acquire(&key, &sid, b"v", 0).await.unwrap());
        assert_eq!(f.only_report().await, all[0]);
        assert!(f.consul.kv_release(&key, &sid, b"v", 0).await.unwrap());
        assert_eq!(f.only_report().await, all[0]);
    }
    let elapsed = started.elapsed();
    // The default pacing lets 4 queries go back to back, then one per 50 ms.
    assert!(
        elapsed <= WatchPacing::default().refill_interval * 20,
        "{elapsed:?} for twenty changes"
    );
}

#[tokio::test(start_paused = true)]
async fn a_first_view_survives_a_merge_of_its_group_without_a_direct_read() {
    let mut f = Fixture::new().await;
    let all = spread(LONG_POLLS_PER_ADDRESS, 1);
    f.watch_defaults(&all, LONG_POLLS_PER_ADDRESS).await;
    let (x, y) = (in_namespace("zz-0", "x"), in_namespace("zz-1", "y"));
    // x's group answers late; a direct read of x's key would fail.
    let faults = [
        f.emu.add_fault(Fault::always(
            Endpoint::KvPrefix("elector/zz-0/".to_owned()),
            FaultAction::Latency(Duration::from_secs(1)),
        )),
        f.emu.add_fault(Fault::always(
            Endpoint::KvPrefix(default_key(&x)),
            FaultAction::NoLeaderError,
        )),
    ];
    f.watcher.watch(&x, &f.consul, &default_key(&x), TTL);
    let first_view = {
        let watcher = f.watcher.clone();
        let consul = f.consul.clone();
        let x = x.clone();
        tokio::spawn(async move { watcher.current(&x, &consul, &default_key(&x)).await })
    };
    tokio::task::yield_now().await;
    // x's arrival merged ns-3, ns-30 and ns-31: fill the budget again.
    let filler = in_namespace("aa-0", "a");
    f.watcher
        .watch(&filler, &f.consul, &default_key(&filler), TTL);
    assert_eq!(f.watcher.queries(), LONG_POLLS_PER_ADDRESS);
    // y's namespace is x's closest neighbour: their groups merge while x waits.
    f.watcher.watch(&y, &f.consul, &default_key(&y), TTL);
    assert_eq!(f.watcher.queries(), LONG_POLLS_PER_ADDRESS);
    let view = first_view.await.unwrap();
    assert_eq!(view.unwrap(), LockView::Absent);
    for fault in faults {
        f.emu.remove_fault(fault);
    }
}

/// A group whose answers are long (every answer repeats every key under its prefix) waits
/// [`answer_pause`] after an answer before its next query, so a burst of writes under the
/// prefix costs a bounded number of long answers instead of one per write; a change after a
/// quiet spell is still reported at once.
#[tokio::test(start_paused = true)]
async fn a_large_group_paces_its_queries_by_the_size_of_its_answers() {
    let mut f = Fixture::new().await;
    const OTHER_KEYS: usize = 2_000;
    for i in 0..OTHER_KEYS {
        f.consul
            .kv_put(&format!("elector/ns-0/other-{i}/leader"), b"x", 0)
            .await
            .unwrap();
    }
    let all = spread(1, 2);
    f.watch_defaults(&all, 1).await;
    let pause = answer_pause(OTHER_KEYS, WAIT);
    assert!(pause >= Duration::from_millis(100), "{pause:?}");
    let key = default_key(&all[0]);
    let sid = f.session(SessionBehavior::Release).await;
    // After a quiet spell the query is parked: the change is reported without a pause.
    tokio::time::sleep(pause * 2).await;
    let started = tokio::time::Instant::now();
    assert!(f.consul.kv_acquire(&key, &sid, b"v", 0).await.unwrap());
    assert_eq!(f.only_report().await, all[0]);
    assert!(started.elapsed() < pause, "{:?}", started.elapsed());
    // Ten changes in a row, each written once the previous one was reported: one answer
    // per pause at most.
    let started = tokio::time::Instant::now();
    for _ in 0..5 {
        assert!(f.consul.kv_release(&key, &sid, b"v", 0).await.unwrap());
        assert_eq!(f.only_report().await, all[0]);
        assert!(f.consul.kv_acquire(&key, &sid, b"v", 0).await.unwrap());
        assert_eq!(f.only_report().await, all[0]);
    }
    let elapsed = started.elapsed();
    assert!(
        elapsed >= pause * 9 && elapsed <= pause * 10 + Duration::from_secs(1),
        "{elapsed:?} for ten changes, pause {pause:?}"
    );
    // The pause never stretches an answer's confirmation: at most wait/8.
    assert_eq!(answer_pause(1_000_000, WAIT), WAIT / 8);
    assert_eq!(answer_pause(0, WAIT), Duration::ZERO);
}

/// A group's queries wait at most 2/5 of its shortest TTL, so a quiet key is confirmed by an
/// answer well within every TTL; an election with a shorter TTL shortens the query under way.
#[tokio::test(start_paused = true)]
async fn the_shortest_ttl_bounds_the_wait_of_a_groups_queries() {
    let mut f = Fixture::new().await;
    let all = elections(2);
    f.watch_defaults(&all[..1], 1).await;
    f.emu.reset_stats();
    // TTL 150 s: the configured 60 s wait; nothing answers for the next 50 s.
    tokio::time::sleep(Duration::from_secs(50)).await;
    assert_eq!(f.emu.stats().requests_to("kv.get"), 0);
    // A 10 s TTL joins: the query under way is replaced by one waiting 4 s.
    f.watcher.watch(
        &all[1],
        &f.consul,
        &default_key(&all[1]),
        Duration::from_secs(10),
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        f.emu.stats().requests_to("kv.get"),
        1,
        "one new query at once"
    );
    tokio::time::sleep(Duration::from_secs(20)).await;
    let queries = f.emu.stats().requests_to("kv.get");
    assert!(
        (5..=7).contains(&queries),
        "one answer every 4 s over 21 s, got {queries}"
    );
    assert_eq!(
        pending_reports(&mut f.reports),
        vec![],
        "quiet answers report nothing"
    );
}

/// A query that stalls (the server never answers) leaves the cached views in place, but its
/// elections are reported once a TTL has passed since the last answer, before the client's
/// own timeout would fail the read, so the planner can fence them.
#[tokio::test(start_paused = true)]
async fn an_answer_a_ttl_late_reports_the_group() {
    let mut f = Fixture::new().await;
    let web = election("web");
    let ttl = Duration::from_secs(10);
    f.watcher.watch(&web, &f.consul, &default_key(&web), ttl);
    f.parked_at_least(1).await;
    assert_eq!(f.only_report().await, web);
    f.acquire(&default_key(&web)).await;
    assert_eq!(f.only_report().await, web);
    f.parked_at_least(1).await;
    // The next query hangs in the network for longer than any timeout.
    f.emu.add_fault(Fault {
        method: Some(http::Method::GET),
        ..Fault::always(
            Endpoint::Kv,
            FaultAction::Latency(Duration::from_secs(3600)),
        )
    });
    // The parked query answers at the end of its 4 s wait: the last answer.
    let parked_since = tokio::time::Instant::now();
    assert_eq!(next_report(&mut f.reports).await, web);
    let late = parked_since.elapsed();
    assert!(
        late + Duration::from_secs(1) >= ttl
            && late <= Duration::from_secs(4) + ttl + Duration::from_secs(1),
        "reported {late:?} after the last query parked"
    );
    assert!(
        matches!(f.watcher.lock(&web), LockView::Held { .. }),
        "the view is kept; the planner decides"
    );
}
