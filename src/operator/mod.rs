//! The operator process around the reconcile ([`crate::controller`]): the watchers that fill
//! the caches and indexes, the kube-runtime `Controller` that queues reconciles, the Lease,
//! the takeover of this cluster's sessions, the standing invariant checker and the gauges.
//!
//! Pod events are mapped to the elections of the pod's namespace that select the pod or
//! labelled it, so a pod change wakes only the affected elections. Consul-side changes (a
//! session lost or unconfirmed, the key changed) arrive from [`SessionManager`] and
//! [`LockWatcher`] as election keys and trigger those elections too.
//!
//! # One writer
//! Every replica runs the controller, but only the one holding the Lease
//! ([`crate::leadership`]) writes. The reflectors (pods, elections) and the controller's queue
//! run in every replica, so a standby's caches are warm when it takes over; the gate is at the
//! top of the reconcile, which returns at once, writing nothing, until this replica *may
//! write*. That happens once the Lease is held, the caches are complete, and every session of
//! this cluster was adopted (`takeover`); then a `reconcile_all_on` trigger reconciles every
//! election. Nothing else writes: the session manager renews only sessions that a reconcile
//! created or adopted, the lock watcher only reads, and events are published by reconciles.
//! Losing the Lease stops the whole controller at once ([`run`] returns an error; the binary
//! exits), so there is no way back from "may write" to a standby that still writes.
//!
//! On shutdown (SIGTERM) the controller finishes the reconciles in flight, then releases the
//! Lease so that a standby takes over at once. Consul sessions and locks are kept: the next
//! active replica adopts them, and no leader changes.

mod audit;
mod gauges;
mod takeover;

use std::hash::{Hash, Hasher};
use std::pin::pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{StreamExt, TryStreamExt, future};
use kube::Client;
use kube::runtime::controller::Config as ControllerConfig;
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::utils::PredicateConfig;
use kube::runtime::{Controller, WatchStreamExt, reflector, watcher};
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::UnboundedReceiverStream;

use crate::cache::caches::Caches;
use crate::cache::scoped_stream::{self, scoped_apis};
use crate::consul::{ConsulClient, TokenBucket, WatchPacing};
use crate::context::{Context, Settings};
use crate::controller::{error_policy, reconcile};
use crate::crd::{LeaderElection, ReadElection, election_event};
use crate::election::config::ElectionKey;
use crate::event_queue::EventQueue;
use crate::http::Health;
use crate::k8s::Pod;
use crate::kube_client;
use crate::leadership::{Leadership, LeadershipError};
use crate::metrics::Metrics;
use crate::observers::locks::LockWatcher;
use crate::observers::sessions::SessionManager;
use crate::write_gate::WriteGate;

/// The operator's event rate limit: a burst of 100 events, then one every 50 ms (20 per
/// second). A cold start of 10,000 elections would otherwise write 20,000 events (one on the
/// election and one on the pod per `LeaderElected`) beside 50,000 writes that matter; events
/// beyond the limit are dropped and counted (`consul_elector_events_suppressed_total`).
pub(crate) const EVENT_RATE: WatchPacing = WatchPacing {
    burst: 100,
    refill_interval: Duration::from_millis(50),
};

/// How long a replica that stops (and still holds the Lease) keeps writing the events its
/// last reconciles queued before it releases the Lease; what is left then is dropped.
const EVENT_DRAIN: Duration = Duration::from_secs(2);

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
    /// The gate `client` was built with (see [`kube_client::gated_client`]).
    pub gate: WriteGate,
}

impl KubeClients {
    /// Both clients for `config`, with a new (closed) gate.
    pub fn from_config(config: kube::Config) -> Result<Self, kube::Error> {
        let gate = WriteGate::closed();
        let config = kube_client::without_retries(config);
        let client = kube_client::gated_client(&gate, |tasks| {
            kube::client::ClientBuilder::try_from((config.clone(), tasks))
        })?;
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
    let started = settings.lease.wall_clock.now();
    let mut leadership = Leadership::new(lease_client, settings.lease.clone())?;
    let release_requested = leadership.release_requests();
    consul.gate_writes(gate.clone());
    let lease_held = gate.opened();
    let (may_write_tx, may_write) = watch::channel(false);
    let (all_tx, all_rx) = mpsc::unbounded_channel::<()>();
    let (changes_tx, changes_rx) = mpsc::unbounded_channel::<ElectionKey>();
    let sessions = SessionManager::new(changes_tx.clone());
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

    let election_streams = scoped_apis::<ReadElection>(&client, &settings.watch_namespaces)
        .into_iter()
        .map(|(scope, api)| {
            let indexes = indexes.clone();
            let stream = watcher(api, watcher::Config::default())
                .default_backoff()
                // Read without their managed fields: every status write adds to them.
                .map_ok(election_event)
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
    let written = Arc::new(crate::cache::written::Memory::new(
        tokio::time::Instant::now(),
    ));
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

    let (events, event_writer) = EventQueue::new(Recorder::new(
        client.clone(),
        Reporter {
            controller: settings.field_manager.clone(),
            instance: Some(settings.instance.clone()),
        },
    ));
    let mut event_writer = pin!(event_writer);
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
        events,
        metrics,
        health: health.clone(),
        settings,
        caches_ready,
        changes: changes_tx,
        may_write,
        release_requested: release_requested.clone(),
        started,
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
                gauges::report(&ctx);
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
    let checker = audit::run(ctx.clone());
    // The uninstall's release request reconciles every election: each withdraws and keeps
    // its object.
    let release = {
        let ctx = ctx.clone();
        let all_tx = all_tx.clone();
        let mut requests = release_requested;
        async move {
            let mut released = None;
            while requests.changed().await.is_ok() {
                let now = ctx.releasing();
                if now.is_some() && now != released {
                    tracing::info!(requested = ?now, "the uninstall asks to release every election and keep the objects");
                    let _ = all_tx.send(());
                }
                released = now;
            }
            future::pending::<()>().await;
        }
    };
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
                ctx.caches.written.start(tokio::time::Instant::now());
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
        () = release => None,
        // Ends only once the context (which holds the queue) is gone.
        () = &mut event_writer => None,
    };
    ctx.metrics.set_active(false);
    // The last handle on the context: dropping it stops every session renewal (and lock
    // watch) before the Lease is released, so nothing of this replica's runs on next to the
    // replica that takes over. The sessions themselves stay in Consul for it to adopt.
    // It also closes the event queue.
    drop(ctx);
    if let Some(error) = lost {
        health.mark_stopped("lost the Lease");
        return Err(error);
    }
    if *lease_held.borrow() {
        // The events the last reconciles queued, while this replica may still write.
        let _ = tokio::time::timeout(EVENT_DRAIN, event_writer).await;
        // No write of this replica may follow the release (the successor may start at
        // once): the gate closes first. The Lease's own client is not gated.
        gate.close();
        leadership.release().await;
    }
    gate.close();
    health.mark_stopped("controller stopped");
    Ok(())
}
