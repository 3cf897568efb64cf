//! The `LeaderElection` controller: observe -> decide (`election::planner`) -> act, in the
//! order of docs/design.md rule 1.
//!
//! One kube-runtime `Controller` over LeaderElections. Pod events are mapped to the elections
//! of the pod's namespace that select the pod or labelled it, so a pod change wakes only the
//! affected elections. Consul-side changes (a session lost or unconfirmed, the key changed)
//! arrive from [`SessionManager`] and [`LockWatcher`] as election keys and trigger those
//! elections too.
//!
//! # One writer
//! Every replica runs this controller, but only the one holding the Lease
//! ([`crate::leadership`]) writes. The reflectors (pods, elections) and the controller's queue
//! run in every replica, so a standby's caches are warm when it takes over; the gate is at the
//! top of `reconcile`, which returns at once, writing nothing, until this replica *may
//! write*. That happens once the Lease is held, the caches are complete, and every session of
//! this cluster was adopted ([`takeover`]); then a `reconcile_all_on` trigger reconciles every
//! election. Nothing else writes: the session manager renews only sessions that a reconcile
//! created or adopted, the lock watcher only reads, and events are published by reconciles.
//! Losing the Lease stops the whole controller at once ([`run`] returns an error; the binary
//! exits), so there is no way back from "may write" to a standby that still writes.
//!
//! On shutdown (SIGTERM) the controller finishes the reconciles in flight, then releases the
//! Lease so that a standby takes over at once. Consul sessions and locks are kept: the next
//! active replica adopts them, and no leader changes.
//!
//! A reconcile runs the planner in a loop: execute the plan's actions in order, stop at the
//! first failure, re-observe (patched pods, the session manager, a fresh read of the key) and
//! plan again, until a plan has no actions. The status is then written from the last plan.

mod act;
mod applied;
mod cleanup;
mod consul_access;
mod context;
mod invariants;
mod migrate;
mod sharing;
mod status;
mod switchover;
mod takeover;

use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::k8s::Pod;
use futures::{StreamExt, TryStreamExt, future};
use jiff::Timestamp;
use kube::runtime::controller::{Action, Config as ControllerConfig};
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::utils::PredicateConfig;
use kube::runtime::{Controller, WatchStreamExt, finalizer, reflector, watcher};
use kube::{Api, Client, ResourceExt};
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::UnboundedReceiverStream;

use crate::Error;
use crate::cache::caches::Caches;
use crate::cache::keys::election_key;
use crate::cache::scoped_stream::{self, scoped_apis};
use crate::consul::{ConsulClient, TokenBucket, WatchPacing};
use crate::crd::{FINALIZER, LeaderElection, Phase};
use crate::election::admission::{Access, Admission, Input, Observed, admit};
use crate::election::config::ElectionKey;
use crate::election::owner_selectors::check_label_key;
use crate::election::plan::{ConditionState, EventReason};
use crate::http::Health;
use crate::leadership::{Leadership, LeadershipError};
use crate::locks::LockWatcher;
use crate::metrics::{self, Metrics};
use crate::sessions::SessionManager;
use crate::write_gate::{self, WriteGate};
use context::Context;
pub use context::Settings;

/// How many plan/act rounds one reconcile may run (a move takes three; raising a re-created
/// key's LockIndex takes one per step).
const MAX_ROUNDS: usize = 16;
/// Requeue after a failed reconcile.
const ERROR_REQUEUE: Duration = Duration::from_secs(2);
/// Requeue of an election whose spec cannot be acted on (it is re-read on every change).
const INVALID_REQUEUE: Duration = Duration::from_secs(300);
/// Requeue of an election whose token Secret is missing or unreadable: Secrets are not
/// watched (the operator may only `get` the one it needs), so look again soon, but calmly.
const SECRET_REQUEUE: Duration = Duration::from_secs(30);
/// The longest an election using a token Secret goes without a look at that Secret: the
/// operator stops using a token within this long of its Secret withdrawing the opt-in.
const SECRET_RECHECK: Duration = Duration::from_secs(60);
/// Requeue of an election waiting for a younger conflicting one to take its leader label off.
const YIELD_WAIT: Duration = Duration::from_secs(1);
/// Periodic re-check of a healthy election (Consul and pod changes trigger it anyway).
const RESYNC: Duration = Duration::from_secs(600);
/// How long after a LeaderElection's deletion (its `metadata.deletionTimestamp`) the operator
/// keeps retrying to release its key and destroy its session in Consul before it gives up,
/// removes the finalizer anyway and says in a Warning event what was left behind: a
/// namespace must never stay Terminating because Consul is unreachable.
pub const CONSUL_CLEANUP_BOUND: Duration = Duration::from_secs(300);

/// The operator's event rate limit: a burst of 100 events, then one every 50 ms (20 per
/// second). A cold start of 10,000 elections would otherwise write 20,000 events (one on the
/// election and one on the pod per `LeaderElected`) beside 50,000 writes that matter; events
/// beyond the limit are dropped and counted (`consul_elector_events_suppressed_total`).
const EVENT_RATE: WatchPacing = WatchPacing {
    burst: 100,
    refill_interval: Duration::from_millis(50),
};

/// What of an election the operator acts on: everything but its status (which only the
/// operator writes) and the bookkeeping fields that change with every write.
fn acted_on(le: &LeaderElection) -> Option<u64> {
    let meta = &le.metadata;
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    (
        &meta.uid,
        meta.generation,
        meta.deletion_timestamp
            .as_ref()
            .map(|t| t.0.as_nanosecond()),
        &meta.finalizers,
        &meta.annotations,
        &meta.labels,
    )
        .hash(&mut hasher);
    Some(hasher.finish())
}

/// The operator's Kubernetes clients.
#[derive(Clone)]
pub struct KubeClients {
    /// Everything but the Lease: its writes pass [`Self::gate`].
    pub client: Client,
    /// The Lease's own client: no gate, and no retry layer (its loop has its own timeouts).
    pub lease: Client,
    /// The gate `client` was built with (see [`write_gate::gated_client`]).
    pub gate: WriteGate,
}

impl KubeClients {
    /// Both clients for `config`, with a new (closed) gate.
    pub fn from_config(config: kube::Config) -> Result<Self, kube::Error> {
        let gate = WriteGate::closed();
        let config = write_gate::without_retries(config);
        let client = write_gate::gated_client(
            kube::client::ClientBuilder::try_from(config.clone())?,
            &gate,
        );
        let lease = Client::try_from(config)?;
        Ok(KubeClients {
            client,
            lease,
            gate,
        })
    }
}

/// Runs the controller until `shutdown` resolves. Readiness and liveness are reported
/// through `health`; the function returns when the controller has stopped (after releasing
/// the Lease if this replica held it), or with an error as soon as the Lease cannot be set up
/// or was lost (then nothing more is written).
pub async fn run(
    kube: KubeClients,
    consul: ConsulClient,
    settings: Settings,
    metrics: Metrics,
    health: Health,
    shutdown: impl future::Future<Output = ()> + Send + Sync + 'static,
) -> Result<(), LeadershipError> {
    let KubeClients {
        client,
        lease: lease_client,
        gate,
    } = kube;
    let mut leadership = Leadership::new(lease_client, settings.lease.clone())?;
    consul.gate_writes(gate.clone());
    let lease_held = gate.opened();
    let (may_write_tx, may_write) = watch::channel(false);
    let (all_tx, all_rx) = mpsc::unbounded_channel::<()>();
    let (changes_tx, changes_rx) = mpsc::unbounded_channel::<ElectionKey>();
    let sessions = SessionManager::new(changes_tx.clone());
    let wake = changes_tx.clone();
    let locks = LockWatcher::new(changes_tx.clone(), settings.lock_watch_wait);

    health.set_ready("leaderelections-cache", false);
    health.set_ready("pods-cache", false);

    let indexes = Arc::new(crate::cache::index::Indexes::default());
    // Pods: one watcher per watched namespace, slimmed before caching, indexed, and merged
    // into one store (a relist of one namespace must not wipe the others').
    let (pod_store, pod_writer) = reflector::store::<Pod>();
    let pod_streams = scoped_apis::<Pod>(&client, &settings.watch_namespaces)
        .into_iter()
        .map(|(scope, api)| {
            let indexes = indexes.clone();
            let stream = watcher(api, watcher::Config::default())
                .default_backoff()
                .modify(Pod::slim)
                .inspect_ok({
                    let scope = scope.clone();
                    move |event| indexes.pod_event(scope.as_deref(), event)
                })
                .boxed();
            (scope, stream)
        })
        .collect();
    let pod_events = reflector(
        pod_writer,
        scoped_stream::merge(pod_streams, pod_store.clone()),
    )
    .touched_objects();

    let election_streams = scoped_apis::<LeaderElection>(&client, &settings.watch_namespaces)
        .into_iter()
        .map(|(scope, api)| {
            let indexes = indexes.clone();
            let stream = watcher(api, watcher::Config::default())
                .default_backoff()
                // Every status write adds to them; nothing reads them.
                .modify(|le| le.metadata.managed_fields = None)
                .inspect_ok({
                    let scope = scope.clone();
                    move |event| indexes.election_event(scope.as_deref(), event)
                })
                .boxed();
            (scope, stream)
        })
        .collect();
    let (election_store, election_writer) = reflector::store::<LeaderElection>();
    // The operator's own status writes change nothing it acts on: only the other changes of
    // an election wake it (through the store, a reconcile still reads the newest version).
    let election_events = reflector(
        election_writer,
        scoped_stream::merge(election_streams, election_store.clone()),
    )
    .applied_objects()
    .predicate_filter(acted_on, PredicateConfig::default());

    let controller = Controller::for_stream(election_events, election_store.clone());
    let mapper_store = election_store.clone();
    let mapper_indexes = indexes.clone();
    let written = Arc::new(crate::cache::written::Memory::new(Timestamp::now()));
    let mapper_written = written.clone();
    let controller = controller
        .watches_stream(pod_events, move |pod: Pod| {
            // The election whose own patch this version is planned on it already: the event
            // would only repeat that reconcile's last plan (at a cold start, one more
            // reconcile per election and patched pod).
            let writer = mapper_written.written_by(&pod);
            crate::cache::views::elections_of_pod(&mapper_indexes, &mapper_store, &pod)
                .into_iter()
                .filter(|(_, name)| writer.as_ref() != Some(name))
                .map(|(ns, name)| ObjectRef::new(&name).within(&ns))
                .collect::<Vec<_>>()
        })
        .reconcile_on(
            UnboundedReceiverStream::new(changes_rx)
                .map(|k| ObjectRef::new(&k.name).within(&k.namespace)),
        )
        .reconcile_all_on(UnboundedReceiverStream::new(all_rx))
        .with_config(ControllerConfig::default().concurrency(settings.concurrency))
        .graceful_shutdown_on(shutdown);

    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: settings.field_manager.clone(),
            instance: Some(settings.instance.clone()),
        },
    );
    let (caches_tx, caches_ready) = watch::channel(false);
    let (elections_tx, mut elections_ready) = watch::channel(false);
    let ctx = Arc::new(Context {
        client,
        consul,
        sessions,
        locks,
        caches: Caches {
            pods: pod_store.clone(),
            elections: election_store.clone(),
            index: indexes,
            validated: crate::cache::validated::Validated::default(),
            owner_selectors: crate::cache::owner_selectors::OwnerSelectors::default(),
            written,
        },
        recorder,
        metrics,
        health: health.clone(),
        settings,
        wake,
        caches_ready,
        changes: changes_tx,
        may_write,
        event_budget: Mutex::new(TokenBucket::new(EVENT_RATE, tokio::time::Instant::now())),
    });

    let readiness = {
        let health = health.clone();
        async move {
            let elections = async {
                let ready = election_store.wait_until_ready().await.is_ok();
                health.set_ready("leaderelections-cache", ready);
                elections_tx.send_replace(ready);
                ready
            };
            let pods = async {
                let ready = pod_store.wait_until_ready().await.is_ok();
                health.set_ready("pods-cache", ready);
                ready
            };
            if future::join(elections, pods).await == (true, true) {
                caches_tx.send_replace(true);
            }
            // Keep the senders: reconciles wait on them until the controller stops.
            let _keep = elections_tx;
            future::pending::<()>().await;
        }
    };
    {
        // Weak: dropping the context must stop every renewal (see the end of this function).
        let weak = Arc::downgrade(&ctx);
        health.watch_loop(
            "the session renewer",
            Arc::new(move |now| {
                let ctx = weak.upgrade()?;
                ctx.sessions.most_overdue(now).map(|(_, late)| late)
            }),
        );
        let weak = Arc::downgrade(&ctx);
        health.watch_loop(
            "the lock watcher",
            Arc::new(move |now| weak.upgrade()?.locks.most_overdue(now)),
        );
    }
    let housekeeping = {
        let ctx = ctx.clone();
        async move {
            let mut tick = tokio::time::interval(Duration::from_secs(5));
            loop {
                tick.tick().await;
                report_gauges(&ctx);
                ctx.caches
                    .written
                    .prune(&ctx.caches.pods, &ctx.caches.elections);
                let known = |key: &ElectionKey| {
                    let reference = ObjectRef::new(&key.name).within(&key.namespace);
                    ctx.caches.elections.get(&reference).is_some()
                };
                ctx.caches.validated.retain(known);
                ctx.caches
                    .owner_selectors
                    .prune(tokio::time::Instant::now());
            }
        }
    };
    let checker = invariants::run(ctx.clone());
    let takeover = {
        let ctx = ctx.clone();
        let mut lease_held = lease_held.clone();
        async move {
            let mut caches = ctx.caches_ready.clone();
            // The sessions are adopted as soon as the elections are known (adoption reads
            // the pod's UID from the status, and writes nothing in Kubernetes): with 30,000
            // pods, waiting for the pod cache too would leave every session unrenewed for
            // the seconds that list takes.
            if lease_held.wait_for(|held| *held).await.is_ok() {
                takeover::keep_alive(&ctx).await;
            }
            if lease_held.wait_for(|held| *held).await.is_ok()
                && elections_ready.wait_for(|ready| *ready).await.is_ok()
            {
                takeover::warn_short_ttls(&ctx);
                takeover::adopt_all(&ctx).await;
            }
            if lease_held.wait_for(|held| *held).await.is_ok()
                && caches.wait_for(|ready| *ready).await.is_ok()
            {
                // Decide nothing on caches older than this moment (rule 8).
                let caught_up = crate::cache::fresh::catch_up(
                    &ctx.client,
                    &ctx.settings.watch_namespaces,
                    &ctx.caches,
                )
                .await;
                tracing::info!(?caught_up, "caches as new as a fresh list: writing");
                ctx.caches.written.start(Timestamp::now());
                may_write_tx.send_replace(true);
                ctx.metrics.set_active(true);
                // The receiver lives as long as the controller.
                let _ = all_tx.send(());
            }
            // Keep the sender: reconciles read it until the controller stops.
            future::pending::<()>().await;
        }
    };
    let run = controller
        .run(reconcile, error_policy, ctx.clone())
        .for_each(|result| {
            if let Err(error) = result {
                tracing::debug!(%error, "controller queue");
            }
            future::ready(())
        });
    let lost = tokio::select! {
        () = run => None,
        error = leadership.hold(&gate) => Some(error),
        () = async { readiness.await; future::pending::<()>().await } => None,
        () = housekeeping => None,
        () = checker => None,
        () = takeover => None,
    };
    ctx.metrics.set_active(false);
    // The last handle on the context: dropping it stops every session renewal (and lock
    // watch) before the Lease is released, so nothing of this replica's runs on next to the
    // replica that takes over. The sessions themselves stay in Consul for it to adopt.
    drop(ctx);
    if let Some(error) = lost {
        health.mark_stopped("lost the Lease");
        return Err(error);
    }
    if *lease_held.borrow() {
        leadership.release().await;
    }
    gate.close();
    health.mark_stopped("controller stopped");
    Ok(())
}

/// Every phase, so that phases with no election report 0 rather than a stale count.
const PHASES: [Phase; 8] = [
    Phase::Pending,
    Phase::Electing,
    Phase::Elected,
    Phase::Fenced,
    Phase::Observing,
    Phase::Conflict,
    Phase::Invalid,
    Phase::Paused,
];

/// The phase as a metric label (lower case, like every label value).
fn phase_name(phase: Phase) -> &'static str {
    match phase {
        Phase::Pending => "pending",
        Phase::Electing => "electing",
        Phase::Elected => "elected",
        Phase::Fenced => "fenced",
        Phase::Observing => "observing",
        Phase::Conflict => "conflict",
        Phase::Invalid => "invalid",
        Phase::Paused => "paused",
    }
}

/// Why `le` has no leader ([`metrics::without_leader_reason`]), or `None` when it has one or
/// when its own phase says why nobody leads (Invalid, Conflict).
fn without_leader(le: &LeaderElection) -> Option<&'static str> {
    let status = le.status.as_ref();
    if matches!(
        status.and_then(|s| s.phase),
        Some(Phase::Invalid | Phase::Conflict)
    ) {
        return None;
    }
    let elected = status.and_then(|s| {
        s.conditions
            .iter()
            .find(|c| c.type_ == crate::crd::conditions::LEADER_ELECTED)
    });
    match elected {
        Some(c) if c.status == "True" => None,
        Some(c) => Some(metrics::without_leader_reason(Some(&c.reason))),
        None => Some(metrics::without_leader_reason(None)),
    }
}

/// Updates the gauges that describe the whole operator: elections per phase and without a
/// leader by reason, sessions held.
fn report_gauges(ctx: &Context) {
    let elections = ctx.caches.elections.state();
    let gauge = |count: usize| i64::try_from(count).unwrap_or(i64::MAX);
    for phase in PHASES {
        let count = elections
            .iter()
            .filter(|le| le.status.as_ref().and_then(|s| s.phase) == Some(phase))
            .count();
        ctx.metrics.set_phase_count(phase_name(phase), gauge(count));
    }
    let reasons: Vec<&'static str> = elections
        .iter()
        .filter_map(|le| without_leader(le.as_ref()))
        .collect();
    for reason in metrics::WITHOUT_LEADER_REASONS.into_iter().chain(["other"]) {
        let count = reasons.iter().filter(|r| **r == reason).count();
        ctx.metrics.set_without_leader(reason, gauge(count));
    }
    ctx.metrics
        .set_sessions(i64::try_from(ctx.sessions.len()).unwrap_or(i64::MAX));
}

/// Reconciles one election (finalizer first: cleanup on deletion).
async fn reconcile(le: Arc<LeaderElection>, ctx: Arc<Context>) -> Result<Action, Error> {
    if !*ctx.may_write.borrow() {
        // A standby (or a replica still adopting): the takeover reconciles every election.
        return Ok(Action::await_change());
    }
    // Decide nothing on partial caches: right after a (re)start the controller already
    // reconciles the first elections while the pod list is still loading, and a leader
    // missing from the cache would be "moved" (rule 3), a conflicting older election
    // missing from it would be ignored, and a cleanup would skip pods it labelled. This
    // waits only at startup. (Not `Store::wait_until_ready`: its one-shot channel keeps a
    // single waker, so a reconcile waiting next to the readiness probe is never woken.)
    let mut caches = ctx.caches_ready.clone();
    if caches.wait_for(|ready| *ready).await.is_err() {
        // The readiness task is gone: the controller is shutting down.
        return Ok(Action::await_change());
    }
    let _in_flight = ctx.health.reconcile_started();
    let timer = ctx.metrics.count_and_measure();
    let api: Api<LeaderElection> = Api::namespaced(
        ctx.client.clone(),
        &le.namespace().ok_or(Error::MissingMetadata("namespace"))?,
    );
    let result = finalizer(&api, FINALIZER, le, |event| async {
        match event {
            finalizer::Event::Apply(le) => apply(&le, &ctx).await,
            finalizer::Event::Cleanup(le) => cleanup::cleanup(&le, &ctx).await,
        }
    })
    .await
    .map_err(|e| Error::Finalizer(Box::new(e)));
    timer.finish(result.as_ref().map(|_| ()).map_err(Error::category));
    result
}

/// A failed reconcile is retried soon; its error was already counted by the reconcile timer.
fn error_policy(le: Arc<LeaderElection>, error: &Error, _ctx: Arc<Context>) -> Action {
    tracing::warn!(
        election = %format!("{}/{}", le.namespace().unwrap_or_default(), le.name_any()),
        category = error.category(),
        "reconcile failed: {error}"
    );
    Action::requeue(error.retry_after().unwrap_or(ERROR_REQUEUE))
}

/// Brings one election's pods, session and lock in line with its spec.
///
/// First whether it may act at all ([`admit`], the pure precedence): the inputs
/// are gathered one at a time, in the order the precedence asks for them, and none once a
/// step decided (the pods' controllers are read only for a valid spec, the Consul access is
/// built only when nothing earlier stood in the way).
async fn apply(le: &LeaderElection, ctx: &Context) -> Result<Action, Error> {
    let key = election_key(le)?;
    let mut observed = Observed::default();
    let validation = ctx.caches.validated.of(&key, le);
    observed.spec = Some(match &validation {
        Ok(_) => Ok(()),
        Err(problems) => Err(crate::election::report::spec_problems(problems)),
    });
    let config = match (admit(&observed), validation) {
        (Admission::Observe(Input::LabelKey), Ok(config)) => config,
        (decision, _) => return stand_back(le, &key, ctx, decision).await,
    };
    // A label key the pods' controller selects: writing it would make the controller disown
    // the pods and create others, without end.
    let mut selected = crate::cache::views::selected_pods(&ctx.caches, le, &key.namespace);
    selected.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    let owners = ctx
        .caches
        .owner_selectors
        .of_pods(&ctx.client, &selected)
        .await;
    let spec_valid = check_label_key(&config.labels.key, &owners);
    observed.label_key = Some(spec_valid.clone());
    if let Some(outcome) = decided(&observed, Input::Older, le, &key, ctx).await {
        return outcome;
    }
    observed.older = Some(crate::cache::views::conflicting_election(
        &ctx.caches,
        le,
        &config,
    ));
    if let Some(outcome) = decided(&observed, Input::YieldingLeader, le, &key, ctx).await {
        return outcome;
    }
    observed.yielding_leader = Some(crate::cache::views::yielding_leader(
        &ctx.caches,
        le,
        &config,
    ));
    if let Some(outcome) = decided(&observed, Input::Access, le, &key, ctx).await {
        return outcome;
    }
    let consul = match consul_access::client_for(le, &config.key, ctx).await {
        Ok(client) => {
            observed.access = Some(Access::Usable);
            Some(client)
        }
        Err(consul_access::AccessProblem::Invalid(problem)) => {
            observed.access = Some(Access::Invalid {
                spec_valid: crate::election::report::spec_problems(&[problem]),
                in_use: migrate::access_in_use(le, ctx, &config),
            });
            None
        }
        Err(consul_access::AccessProblem::Failed(error)) => return Err(error),
    };
    let consul = match (admit(&observed), consul) {
        (Admission::Observe(Input::Applied), Some(consul)) => consul,
        (decision, _) => return stand_back(le, &key, ctx, decision).await,
    };
    // Changed labels, key or Consul access: undo what was done with the old ones first (only
    // once the new access is known to be usable, so that a mistyped Secret name does not
    // take the leader away).
    let edit = migrate::edit(le, ctx, &config);
    observed.needs_withdrawal = Some(edit.as_ref().is_some_and(|e| e.needs_withdrawal));
    match admit(&observed) {
        Admission::Withdraw => migrate::withdraw(le, ctx).await?,
        Admission::Proceed => {}
        decision => return stand_back(le, &key, ctx, decision).await,
    }
    if let Some(edit) = &edit {
        migrate::record(le, ctx, edit).await?;
    }
    ctx.locks
        .watch(&key, &consul, &config.key, config.session.ttl);
    let mut round = act::Round::new(le, &key, &config, &consul, ctx, spec_valid.clone()).await;
    let outcome = round.run(MAX_ROUNDS).await;
    let labelled = round.labelled_leader_uid();
    // Standing back for another install (rule 8): the status is that install's to write.
    let standing_back = round
        .last_plan()
        .is_some_and(|plan| plan.managed_elsewhere.is_some());
    if !standing_back {
        let plan = round.last_plan();
        status::write(le, ctx, &config, labelled.as_deref(), plan, spec_valid).await?;
    }
    outcome?;
    if round.unfinished() {
        return Ok(Action::requeue(Duration::ZERO));
    }
    let mut requeue = round
        .last_plan()
        .and_then(|p| p.requeue_after)
        .map_or(RESYNC, |d| d.min(RESYNC));
    if le
        .spec
        .consul
        .as_ref()
        .is_some_and(|c| c.token_secret_ref.is_some())
    {
        // Secrets are not watched: a withdrawn opt-in is seen at the next look.
        requeue = requeue.min(SECRET_RECHECK);
    }
    Ok(Action::requeue(requeue))
}

/// `None` when the admission so far asks for `next` (gather it); otherwise executes the
/// decision and returns the reconcile's outcome.
async fn decided(
    observed: &Observed,
    next: Input,
    le: &LeaderElection,
    key: &ElectionKey,
    ctx: &Context,
) -> Option<Result<Action, Error>> {
    match admit(observed) {
        Admission::Observe(input) if input == next => None,
        decision => Some(stand_back(le, key, ctx, decision).await),
    }
}

/// Executes an admission that keeps the election from acting (refused, yielding, waiting,
/// unusable Consul access).
async fn stand_back(
    le: &LeaderElection,
    key: &ElectionKey,
    ctx: &Context,
    decision: Admission,
) -> Result<Action, Error> {
    match decision {
        Admission::Refuse { spec_valid, event } => refuse(le, key, ctx, spec_valid, event).await,
        Admission::Yield { older } => yield_to(le, key, ctx, older).await,
        Admission::WaitFor { younger, pod } => Ok(wait_for(key, ctx, younger, &pod)),
        Admission::AccessInvalid { spec_valid, in_use } => {
            status::invalid(le, ctx, spec_valid, EventReason::InvalidSpec).await?;
            let recheck = cleanup::fence_unusable(le, key, ctx, in_use).await?;
            Ok(Action::requeue(
                recheck.map_or(SECRET_REQUEUE, |d| d.min(SECRET_REQUEUE)),
            ))
        }
        Admission::Observe(_) | Admission::Withdraw | Admission::Proceed => {
            // The inputs were gathered out of the admission's order: a bug, not the
            // election's fault. Look again soon rather than act on half an observation.
            tracing::error!(election = %key, ?decision, "admission out of step with its inputs");
            Ok(Action::requeue(ERROR_REQUEUE))
        }
    }
}

/// Yields to the `older` election that claims the same pods: whatever this election labelled
/// or held (it may have led before the older one came to select its pods) goes, in rule 7's
/// order.
async fn yield_to(
    le: &LeaderElection,
    key: &ElectionKey,
    ctx: &Context,
    older: String,
) -> Result<Action, Error> {
    ctx.locks.unwatch(key);
    status::conflict(le, ctx, &older).await?;
    let withdrawal = cleanup::withdraw(&cleanup::Footprint::of(le, ctx), ctx).await?;
    cleanup::settle_consul(le, key, ctx, withdrawal).await?;
    // The older election may be waiting for this withdrawal (it is not woken by the patches
    // of pods it does not select).
    ctx.reconcile_soon(&ElectionKey {
        namespace: key.namespace.clone(),
        name: older,
    });
    Ok(Action::requeue(INVALID_REQUEUE))
}

/// Waits for the `younger` election, which yields to this one, to take its leader label off
/// `pod`. Nothing else may wake it (this one writes nothing meanwhile): queue it. Its
/// withdrawal (a pod patch) wakes this one; the requeue is a fallback.
fn wait_for(key: &ElectionKey, ctx: &Context, younger: String, pod: &str) -> Action {
    tracing::debug!(election = %key, pod, younger, "waiting for a younger conflicting election to withdraw its leader label");
    let younger = ElectionKey {
        namespace: key.namespace.clone(),
        name: younger,
    };
    if ctx.wake.send(younger).is_err() {
        tracing::debug!(election = %key, "the controller is stopping");
    }
    Action::requeue(YIELD_WAIT)
}

/// Stands back from an election whose spec cannot be acted on: phase Invalid with the
/// `SpecValid` condition `spec_valid` and an `event` when that is news; the leader label it
/// left stays only as long as rule 2 allows ([`cleanup::fence_unusable`]).
async fn refuse(
    le: &LeaderElection,
    key: &ElectionKey,
    ctx: &Context,
    spec_valid: ConditionState,
    event: EventReason,
) -> Result<Action, Error> {
    status::invalid(le, ctx, spec_valid, event).await?;
    let recheck = cleanup::fence_unusable(le, key, ctx, false).await?;
    Ok(Action::requeue(
        recheck.map_or(INVALID_REQUEUE, |d| d.min(INVALID_REQUEUE)),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn election(status: serde_json::Value) -> LeaderElection {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "elector.dev/v1alpha1",
            "kind": "LeaderElection",
            "metadata": {"name": "web", "namespace": "shop"},
            "spec": {"selector": {"matchLabels": {"app": "web"}}},
            "status": status,
        }))
        .expect("a LeaderElection")
    }

    fn elected(status: &str, reason: &str, phase: &str) -> LeaderElection {
        election(serde_json::json!({
            "phase": phase,
            "conditions": [{
                "type": "LeaderElected", "status": status, "reason": reason, "message": "",
                "lastTransitionTime": "2026-01-01T00:00:00Z",
            }],
        }))
    }

    #[test]
    fn elections_without_a_leader_are_counted_by_the_condition_reason() {
        assert_eq!(without_leader(&elected("True", "Elected", "Elected")), None);
        assert_eq!(
            without_leader(&elected("False", "NoCandidates", "Pending")),
            Some("no_candidates")
        );
        assert_eq!(
            without_leader(&elected("False", "LockHeldElsewhere", "Pending")),
            Some("lock_held_elsewhere")
        );
        assert_eq!(
            without_leader(&elected("False", "Electing", "Electing")),
            Some("electing")
        );
        assert_eq!(
            without_leader(&election(serde_json::json!({}))),
            Some("not_reconciled")
        );
        // Their own phase (and alert) says why nobody leads.
        assert_eq!(
            without_leader(&elected("False", "InvalidSpec", "Invalid")),
            None
        );
        assert_eq!(
            without_leader(&elected("False", "Conflict", "Conflict")),
            None
        );
    }
}
