//! The session manager against the Consul emulator, on tokio's paused clock: creation,
//! renewal cadence, transient failures, loss, adoption after a restart, destroy and forget,
//! and 1,000 sessions within the connection cap.

use crate::common;
use crate::support;

use std::time::Duration;

use consul_elector::consul::{ConsulClient, ConsulSettings, RetryPolicy, SessionRequest};
use consul_elector::election::config::{Behavior, ElectionKey, Owner, SessionConfig};
use consul_elector::election::observe::{SessionHealth, SessionView};
use consul_elector::election::session_names::session_name;
use consul_elector::observers::sessions::SessionManager;
use consul_elector::write_gate::WriteGate;
use testkit::consul::{Emulator, Endpoint, Fault, FaultAction, SessionBehavior};
use tokio::sync::mpsc::{self, UnboundedReceiver};
use tokio::time::Instant;

use support::{election, next_report, pending_reports, tokio_clock_emulator};

const TTL: Duration = Duration::from_secs(10);
/// The cluster the sessions are created in.
/// The operator these sessions are named for.
fn owner() -> Owner {
    Owner::new("east", "ops.consul-elector")
}

fn config() -> SessionConfig {
    SessionConfig {
        ttl: TTL,
        lock_delay: Duration::from_secs(3),
        behavior: Behavior::Delete,
    }
}

struct Fixture {
    emu: Emulator,
    /// The tokio instant of the emulator's time zero.
    origin: Instant,
    consul: ConsulClient,
    manager: SessionManager,
    reports: UnboundedReceiver<ElectionKey>,
}

impl Fixture {
    /// An emulator on tokio's clock, a client that does not retry on its own (so every
    /// renewal attempt is exactly one request) and a manager, all on the same paused clock.
    async fn new() -> Fixture {
        let emu = tokio_clock_emulator().await;
        let consul = ConsulClient::new(&ConsulSettings {
            retry: RetryPolicy::no_retries(),
            ..common::settings(&emu)
        })
        .unwrap();
        let (manager, reports) = Self::manager();
        Fixture {
            origin: Instant::now() - emu.now(),
            emu,
            consul,
            manager,
            reports,
        }
    }

    /// Another manager (as in another operator process) with its own report channel.
    fn manager() -> (SessionManager, UnboundedReceiver<ElectionKey>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (SessionManager::new(tx), rx)
    }

    async fn create(&self, election: &ElectionKey, pod: &str) -> String {
        self.manager
            .create(
                election,
                &self.consul,
                &owner(),
                pod,
                &format!("uid-{pod}"),
                &config(),
            )
            .await
            .unwrap()
    }

    /// Creates the session of pod `web-0` for the election `shop/web`: the election, the
    /// session's ID and the emulator time of the creation.
    async fn create_web(&self) -> (ElectionKey, String, Duration) {
        let web = election("web");
        let id = self.create(&web, "web-0").await;
        (web, id, self.emu.now())
    }

    /// Sleeps (virtually) until the emulator's clock reads `at`.
    async fn sleep_until(&self, at: Duration) {
        tokio::time::sleep(at.saturating_sub(self.emu.now())).await;
    }

    fn renewals(&self) -> u64 {
        self.emu.stats().requests_to("session.renew")
    }

    /// The tokio instant of emulator time `at`.
    fn at(&self, at: Duration) -> Instant {
        self.origin + at
    }

    /// The health of a session last renewed at emulator time `at`.
    fn alive(&self, at: Duration) -> SessionHealth {
        SessionHealth::Alive {
            renewed_at: self.at(at),
        }
    }

    fn health(&self, election: &ElectionKey) -> SessionHealth {
        self.manager.view(election).unwrap().health
    }
}

/// Renewals go out on a grid of 250 ms ticks shared by every session of the manager, each at
/// the first tick at or after TTL/2 since its last success: sessions created at scattered
/// instants renew together in a few batches (one wake-up of the renewing thread each instead
/// of one per session), never earlier than TTL/2 and less than a tick later.
#[tokio::test(start_paused = true)]
async fn renewals_of_sessions_created_apart_go_out_together_on_a_grid() {
    const TICK: Duration = Duration::from_millis(250);
    let f = Fixture::new().await;
    let origin = f.emu.now();
    let mut created = Vec::new();
    for i in 0..12 {
        let election = election(&format!("app-{i}"));
        f.create(&election, "pod-0").await;
        created.push((election, f.emu.now()));
        tokio::time::sleep(Duration::from_millis(37)).await;
    }
    let on_grid = |due: Duration| {
        origin + TICK * u32::try_from((due - origin).as_nanos().div_ceil(TICK.as_nanos())).unwrap()
    };
    let first = created[0].1;
    f.sleep_until(first + TTL / 2 + TTL / 4).await;
    let mut ticks = std::collections::BTreeSet::new();
    for (election, at) in &created {
        let renewed = on_grid(*at + TTL / 2);
        assert!(renewed >= *at + TTL / 2 && renewed < *at + TTL / 2 + TICK);
        assert_eq!(f.health(election), f.alive(renewed), "{election}");
        ticks.insert(renewed);
    }
    assert_eq!(f.renewals(), 12);
    assert!(
        ticks.len() <= 3,
        "twelve renewals in {} batches",
        ticks.len()
    );
    // The next renewal is again the first tick at or after TTL/2 since the last one.
    f.sleep_until(first + TTL + TTL / 4).await;
    for (election, at) in &created {
        let renewed = on_grid(on_grid(*at + TTL / 2) + TTL / 2);
        assert_eq!(f.health(election), f.alive(renewed), "{election}");
    }
    assert_eq!(f.renewals(), 24);
}

#[tokio::test(start_paused = true)]
async fn create_registers_a_ttl_session_and_renews_it_every_half_ttl() {
    let mut f = Fixture::new().await;
    let (web, id, created) = f.create_web().await;

    let stored = f.emu.session(&id).unwrap();
    assert_eq!(
        stored.name,
        "consul-elector/east/ops.consul-elector/shop/web/web-0"
    );
    assert_eq!(stored.name, session_name(&owner(), &web, "web-0"));
    assert_eq!(stored.ttl, "10s");
    assert_eq!(stored.lock_delay, Duration::from_secs(3));
    assert_eq!(stored.behavior, SessionBehavior::Delete);
    assert!(stored.checks.is_empty(), "no node checks: {stored:?}");
    assert_eq!(
        f.manager.view(&web),
        Some(SessionView {
            id: id.clone(),
            pod: "web-0".to_owned(),
            pod_uid: "uid-web-0".to_owned(),
            health: f.alive(created),
            ttl: TTL,
        })
    );
    assert_eq!(f.manager.len(), 1);

    // Twelve periods of TTL/2 (six TTLs, three times Consul's 2×TTL expiry): one renewal
    // per period, checked in the middle of each period.
    f.emu.reset_stats();
    for period in 1..=12u32 {
        f.sleep_until(created + TTL / 2 * period + TTL / 4).await;
        assert_eq!(f.renewals(), u64::from(period), "period {period}");
        assert_eq!(f.health(&web), f.alive(created + TTL / 2 * period));
    }
    assert_eq!(f.emu.stats().total_requests(), 12, "nothing but renewals");
    assert!(f.emu.session(&id).is_some(), "alive after six TTLs");
    assert_eq!(pending_reports(&mut f.reports), vec![], "no health change");
}

#[tokio::test(start_paused = true)]
async fn failures_shorter_than_a_ttl_keep_the_session_alive() {
    let mut f = Fixture::new().await;
    let (web, id, created) = f.create_web().await;
    let fault = f.emu.add_fault(Fault::always(
        Endpoint::SessionRenew,
        FaultAction::Respond {
            status: 502,
            body: "bad gateway".to_owned(),
            retry_after: None,
        },
    ));
    // Renewals fail at 5, 6, 7 and 8 s (one retry per second); the one at 9 s succeeds.
    f.sleep_until(created + Duration::from_millis(8500)).await;
    assert_eq!(f.renewals(), 4);
    assert_eq!(f.health(&web), f.alive(created));
    f.emu.remove_fault(fault);
    f.sleep_until(created + Duration::from_millis(9500)).await;
    assert_eq!(f.health(&web), f.alive(created + Duration::from_secs(9)));
    // Back to the TTL/2 cadence.
    f.sleep_until(created + Duration::from_millis(14500)).await;
    assert_eq!(f.renewals(), 6);
    assert!(f.emu.session(&id).is_some());
    assert_eq!(pending_reports(&mut f.reports), vec![]);
}

#[tokio::test(start_paused = true)]
async fn failures_for_a_whole_ttl_make_the_session_unconfirmed_until_a_renewal_succeeds() {
    let mut f = Fixture::new().await;
    let (web, id, created) = f.create_web().await;
    let fault = f.emu.add_fault(Fault::always(
        Endpoint::SessionRenew,
        FaultAction::NoLeaderError,
    ));

    assert_eq!(next_report(&mut f.reports).await, web);
    assert_eq!(f.emu.now(), created + TTL, "reported exactly one TTL after");
    assert_eq!(
        f.health(&web),
        SessionHealth::Unconfirmed {
            renewed_at: f.at(created)
        }
    );
    // Retries continue once per second: at 5..=10 s so far.
    f.sleep_until(created + Duration::from_millis(10500)).await;
    assert_eq!(f.renewals(), 6);

    f.sleep_until(created + Duration::from_millis(14500)).await;
    assert_eq!(f.renewals(), 10);
    assert_eq!(pending_reports(&mut f.reports), vec![], "reported once");
    f.emu.remove_fault(fault);
    assert_eq!(next_report(&mut f.reports).await, web);
    assert_eq!(f.emu.now(), created + Duration::from_secs(15));
    assert_eq!(f.health(&web), f.alive(created + Duration::from_secs(15)));
    assert!(f.emu.session(&id).is_some());
}

#[tokio::test(start_paused = true)]
async fn a_consul_without_leader_makes_sessions_unconfirmed_and_a_new_leader_alive_again() {
    let mut f = Fixture::new().await;
    let (web, id, created) = f.create_web().await;
    f.emu.set_leader(false);

    assert_eq!(next_report(&mut f.reports).await, web);
    assert!(matches!(f.health(&web), SessionHealth::Unconfirmed { .. }));
    // Without a leader no TTL fires: the session outlives 2×TTL and the retries go on.
    f.sleep_until(created + TTL * 5).await;
    assert!(f.emu.session(&id).is_some());
    assert_eq!(pending_reports(&mut f.reports), vec![]);

    f.emu.set_leader(true);
    assert_eq!(next_report(&mut f.reports).await, web);
    assert!(f.emu.now() <= created + TTL * 5 + Duration::from_secs(1));
    assert!(matches!(f.health(&web), SessionHealth::Alive { .. }));
}

#[tokio::test(start_paused = true)]
async fn a_renewal_answered_404_loses_the_session_and_stops_renewing() {
    let mut f = Fixture::new().await;
    let (web, id, created) = f.create_web().await;
    assert!(f.emu.invalidate_session(&id));

    assert_eq!(next_report(&mut f.reports).await, web);
    assert_eq!(f.emu.now(), created + TTL / 2, "found at the next renewal");
    assert_eq!(f.health(&web), SessionHealth::Lost);
    f.emu.reset_stats();
    f.sleep_until(created + TTL * 10).await;
    assert_eq!(f.renewals(), 0, "renewal stopped");
    assert_eq!(f.health(&web), SessionHealth::Lost, "kept until forgotten");
    assert_eq!(pending_reports(&mut f.reports), vec![]);
}

#[tokio::test(start_paused = true)]
async fn a_new_operator_process_adopts_the_sessions_of_the_previous_one() {
    let mut f = Fixture::new().await;
    let (web, id, _) = f.create_web().await;
    // The operator dies: its renewals stop with it. Its successor starts empty.
    let (successor, mut reports) = Fixture::manager();
    drop(std::mem::replace(&mut f.manager, successor.clone()));
    f.emu.reset_stats();
    tokio::time::sleep(TTL * 3 / 2).await;
    assert_eq!(f.renewals(), 0);

    let adopted = successor
        .adopt(&web, &f.consul, &id, "web-0", "uid-web-0")
        .await
        .unwrap();
    assert!(adopted);
    let adopted_at = f.emu.now();
    assert_eq!(f.renewals(), 1, "renewed at once");
    assert_eq!(
        successor.view(&web),
        Some(SessionView {
            id: id.clone(),
            pod: "web-0".to_owned(),
            pod_uid: "uid-web-0".to_owned(),
            health: f.alive(adopted_at),
            ttl: TTL,
        })
    );
    f.sleep_until(adopted_at + TTL * 5 + TTL / 4).await;
    assert_eq!(f.renewals(), 11);
    assert!(f.emu.session(&id).is_some());
    assert_eq!(pending_reports(&mut reports), vec![]);
}

/// Sessions adopted together after a restart do not renew together: their first renewals
/// spread over (TTL/4, TTL/2] after the adoption, none later than the regular TTL/2.
#[tokio::test(start_paused = true)]
async fn sessions_adopted_together_spread_their_renewals() {
    const SESSIONS: u64 = 200;
    let f = Fixture::new().await;
    let elections: Vec<ElectionKey> = (0..SESSIONS)
        .map(|i| election(&format!("app-{i}")))
        .collect();
    let mut ids = Vec::new();
    for election in &elections {
        ids.push(f.create(election, "pod-0").await);
    }
    let (successor, _reports) = Fixture::manager();
    let start = f.emu.now();
    for (election, id) in elections.iter().zip(&ids) {
        f.manager.forget(election);
        assert!(
            successor
                .adopt(election, &f.consul, id, "pod-0", "uid-pod-0")
                .await
                .unwrap()
        );
    }
    let adopted = f.emu.now();
    f.emu.reset_stats();
    f.sleep_until(start + TTL / 4).await;
    assert_eq!(f.renewals(), 0, "none in the first quarter TTL");
    f.sleep_until(adopted + TTL * 3 / 8).await;
    let halfway = f.renewals();
    assert!(
        (SESSIONS / 5..=SESSIONS * 4 / 5).contains(&halfway),
        "spread: {halfway} of {SESSIONS} by 3/8 TTL"
    );
    f.sleep_until(adopted + TTL / 2 + Duration::from_millis(1))
        .await;
    assert_eq!(f.renewals(), SESSIONS, "every one by TTL/2");
}

#[tokio::test(start_paused = true)]
async fn adopting_a_session_that_is_gone_registers_nothing() {
    let f = Fixture::new().await;
    let web = election("web");
    let id = f
        .consul
        .create_session(&SessionRequest::new(session_name(&owner(), &web, "web-0")).ttl(TTL))
        .await
        .unwrap();
    f.consul.destroy_session(&id).await.unwrap();
    let adopted = f
        .manager
        .adopt(&web, &f.consul, &id, "web-0", "uid-web-0")
        .await
        .unwrap();
    assert!(!adopted);
    assert_eq!(f.manager.view(&web), None);
    assert!(f.manager.is_empty());
}

#[tokio::test(start_paused = true)]
async fn adoption_follows_the_ttl_consul_reports() {
    let f = Fixture::new().await;
    let web = election("web");
    let ttl = Duration::from_secs(30);
    let id = f
        .consul
        .create_session(&SessionRequest::new(session_name(&owner(), &web, "web-0")).ttl(ttl))
        .await
        .unwrap();
    assert!(
        f.manager
            .adopt(&web, &f.consul, &id, "web-0", "uid-web-0")
            .await
            .unwrap()
    );
    let adopted_at = f.emu.now();
    assert_eq!(f.manager.view(&web).unwrap().ttl, ttl);
    f.sleep_until(adopted_at + ttl * 2 + ttl / 4).await;
    assert_eq!(f.renewals(), 1 + 4);
}

#[tokio::test(start_paused = true)]
async fn create_replaces_the_previous_session_of_the_election() {
    let f = Fixture::new().await;
    let web = election("web");
    let first = f.create(&web, "web-0").await;
    let second = f.create(&web, "web-1").await;
    assert_ne!(first, second);
    assert!(f.emu.session(&first).is_none(), "destroyed");
    assert!(f.emu.session(&second).is_some());
    assert_eq!(f.manager.len(), 1);
    assert_eq!(f.manager.view(&web).unwrap().pod, "web-1");
    // Only the new session is renewed.
    let replaced = f.emu.now();
    f.emu.reset_stats();
    f.sleep_until(replaced + TTL * 2 + TTL / 4).await;
    assert_eq!(f.renewals(), 4);
}

#[tokio::test(start_paused = true)]
async fn destroy_is_idempotent() {
    let f = Fixture::new().await;
    let (web, id, _) = f.create_web().await;
    f.manager.destroy(&web, &f.consul).await.unwrap();
    assert!(f.emu.session(&id).is_none());
    assert_eq!(f.manager.view(&web), None);
    assert!(f.manager.is_empty());

    f.emu.reset_stats();
    f.manager.destroy(&web, &f.consul).await.unwrap();
    f.manager
        .destroy(&election("never-created"), &f.consul)
        .await
        .unwrap();
    tokio::time::sleep(TTL * 2).await;
    assert_eq!(f.emu.stats().total_requests(), 0, "nothing left to do");
}

#[tokio::test(start_paused = true)]
async fn a_failed_destroy_keeps_renewing_so_it_can_be_retried() {
    let f = Fixture::new().await;
    let (web, id, created) = f.create_web().await;
    let fault = f.emu.add_fault(Fault::always(
        Endpoint::SessionDestroy,
        FaultAction::NoLeaderError,
    ));
    let error = f.manager.destroy(&web, &f.consul).await.unwrap_err();
    assert_eq!(error.category(), "no_cluster_leader");
    assert_eq!(f.manager.view(&web).unwrap().id, id);
    f.emu.reset_stats();
    f.sleep_until(created + TTL + TTL / 4).await;
    assert_eq!(f.renewals(), 2, "still renewed");

    f.emu.remove_fault(fault);
    f.manager.destroy(&web, &f.consul).await.unwrap();
    assert!(f.emu.session(&id).is_none());
    assert!(f.manager.is_empty());
}

#[tokio::test(start_paused = true)]
async fn forget_stops_renewing_without_destroying() {
    let f = Fixture::new().await;
    let (web, id, created) = f.create_web().await;
    f.manager.forget(&web);
    assert_eq!(f.manager.view(&web), None);
    assert!(f.manager.is_empty());

    f.emu.reset_stats();
    f.sleep_until(created + TTL * 2 - Duration::from_millis(1))
        .await;
    assert!(f.emu.session(&id).is_some(), "not destroyed");
    f.sleep_until(created + TTL * 2).await;
    assert!(f.emu.session(&id).is_none(), "expired at 2×TTL");
    assert_eq!(f.emu.stats().total_requests(), 0, "no renewal, no destroy");
}

#[tokio::test(start_paused = true)]
async fn a_thousand_sessions_cost_one_renewal_each_per_half_ttl_within_the_connection_cap() {
    const SESSIONS: u64 = 1000;
    let mut f = Fixture::new().await;
    let cap = common::settings(&f.emu).max_connections;
    let elections: Vec<ElectionKey> = (0..SESSIONS)
        .map(|i| election(&format!("app-{i}")))
        .collect();
    let creations = elections.iter().map(|e| f.create(e, "pod-0"));
    let ids = futures::future::join_all(creations).await;
    let created = f.emu.now();
    assert_eq!(f.manager.len(), ids.len());
    assert!(f.emu.stats().connections_max <= cap);

    f.emu.reset_stats();
    for period in 1..=6u64 {
        f.sleep_until(created + TTL / 2 * u32::try_from(period).unwrap() + TTL / 4)
            .await;
        assert_eq!(f.renewals(), SESSIONS * period, "period {period}");
    }
    let stats = f.emu.stats();
    assert_eq!(stats.total_requests(), SESSIONS * 6, "nothing but renewals");
    assert!(stats.connections_max <= cap, "{stats:?}");
    assert!(stats.in_flight_total_max <= cap, "{stats:?}");
    for (election, id) in elections.iter().zip(&ids) {
        assert!(matches!(f.health(election), SessionHealth::Alive { .. }));
        assert!(f.emu.session(id).is_some());
    }
    assert_eq!(pending_reports(&mut f.reports), vec![]);
}

/// Liveness input: a renewal task that neither attempts nor finishes a renewal by its due
/// time (its next attempt plus one request's budget) is reported as behind schedule; tasks
/// on time, or merely failing and retrying, are not.
#[tokio::test(start_paused = true)]
async fn a_renewal_hanging_past_its_budget_is_reported_behind_schedule() {
    let f = Fixture::new().await;
    // A client that would wait an hour for an answer, and a Consul that never answers renewals.
    let patient = ConsulClient::new(&ConsulSettings {
        retry: RetryPolicy::no_retries(),
        request_timeout: Duration::from_secs(3600),
        ..common::settings(&f.emu)
    })
    .unwrap();
    let web = election("web");
    f.manager
        .create(&web, &patient, &owner(), "web-0", "uid-web-0", &config())
        .await
        .unwrap();
    let created = f.emu.now();
    f.emu.add_fault(Fault::always(
        Endpoint::SessionRenew,
        FaultAction::Latency(Duration::from_secs(7200)),
    ));
    // The first renewal starts at TTL/2 and hangs; its budget is 60 s.
    f.sleep_until(created + TTL / 2 + Duration::from_secs(59))
        .await;
    assert_eq!(f.manager.most_overdue(tokio::time::Instant::now()), None);
    f.sleep_until(created + TTL / 2 + Duration::from_secs(65))
        .await;
    let behind = f.manager.most_overdue(tokio::time::Instant::now());
    assert!(
        matches!(&behind, Some((e, late)) if *e == web && *late >= Duration::from_secs(4)),
        "{behind:?}"
    );
}

/// The emulator's runtime and a client's session runtime (one worker thread each), and a
/// current-thread runtime for the caller, which a test may keep busy without yielding.
struct Runtimes {
    consul: tokio::runtime::Runtime,
    sessions: tokio::runtime::Runtime,
    caller: tokio::runtime::Runtime,
}

impl Runtimes {
    fn new() -> Self {
        let worker = |name: &str| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .thread_name(name)
                .enable_all()
                .build()
                .unwrap()
        };
        Runtimes {
            consul: worker("emulator"),
            sessions: worker("sessions"),
            caller: tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap(),
        }
    }
}

/// Renewals run on the client's session runtime: CPU-bound work that keeps the caller's
/// runtime busy past TTL/2 does not hold back the renewal due in that time.
#[test]
fn renewals_go_on_while_the_callers_runtime_is_busy() {
    let runtimes = Runtimes::new();
    let emu = runtimes.consul.block_on(common::emulator());
    let busy = &runtimes.caller;
    busy.block_on(async {
        let consul = ConsulClient::with_session_runtime(
            &common::settings(&emu),
            runtimes.sessions.handle().clone(),
        )
        .unwrap();
        let (tx, _reports) = mpsc::unbounded_channel();
        let manager = SessionManager::new(tx);
        let web = election("web");
        manager
            .create(&web, &consul, &owner(), "web-0", "uid-web-0", &config())
            .await
            .unwrap();
        // Busy without yielding until the first renewal arrives, or long after it was due.
        let deadline = std::time::Instant::now() + TTL / 2 + Duration::from_secs(3);
        while emu.stats().requests_to("session.renew") == 0 && std::time::Instant::now() < deadline
        {
            std::hint::spin_loop();
        }
        assert_eq!(emu.stats().requests_to("session.renew"), 1);
        assert!(matches!(
            manager.view(&web).unwrap().health,
            SessionHealth::Alive { .. }
        ));
    });
    drop(emu);
}

/// Rule 8 for session requests, which a reconcile hands to the session runtime: one that
/// waits there for a connection permit past this replica's deadline is not sent, even while
/// the reconcile's runtime is stalled and never looks at it again (a paused process resumes
/// its threads in any order).
#[test]
fn a_session_request_waiting_for_a_permit_past_the_deadline_is_not_sent() {
    let runtimes = Runtimes::new();
    let emu = runtimes.consul.block_on(common::emulator());
    // The only session permit is held by a create that takes a second to answer.
    emu.add_fault(Fault::always(
        Endpoint::SessionCreate,
        FaultAction::Latency(Duration::from_secs(1)),
    ));
    runtimes.caller.block_on(async {
        let consul = ConsulClient::with_session_runtime(
            &ConsulSettings {
                max_connections: 3,
                retry: RetryPolicy::no_retries(),
                ..common::settings(&emu)
            },
            runtimes.sessions.handle().clone(),
        )
        .unwrap();
        let gate = WriteGate::closed();
        consul.gate_writes(gate.clone());
        gate.open_until(tokio::time::Instant::now() + Duration::from_millis(300));
        let request = SessionRequest::new("holder");
        let mut create = std::pin::pin!(consul.create_session(&request));
        let mut renew = std::pin::pin!(consul.renew_session("waiting-for-a-permit"));
        assert!(futures::poll!(&mut create).is_pending());
        assert!(futures::poll!(&mut renew).is_pending());
        // This runtime stalls past the deadline and the create's answer; the session runtime
        // runs on.
        let until = std::time::Instant::now() + Duration::from_millis(1500);
        while std::time::Instant::now() < until {
            std::hint::spin_loop();
        }
        assert_eq!(
            emu.stats().requests_to("session.renew"),
            0,
            "a session request was sent after the deadline"
        );
    });
    drop(emu);
}
