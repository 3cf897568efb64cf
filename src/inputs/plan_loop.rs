//! What the plan loop observes: the pods, status and session it starts from, and the world
//! each plan decides from, with the election's pods as this reconcile patched them.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::ResourceExt;
use tokio::time::Instant;

use crate::cache::views;
use crate::context::Context;
use crate::crd::applied::recorded_session;
use crate::crd::{LeaderElection, LeaderElectionStatus, SWITCHOVER_ANNOTATION};
use crate::election::annotation_owner::{Owner as AnnotationOwner, shared_view};
use crate::election::config::{ElectionConfig, ElectionKey, LabelConfig};
use crate::election::first_look::Adopting;
use crate::election::key_value::Holding;
use crate::election::machine::{Election, Input};
use crate::election::observe::{LockView, PodView};
use crate::election::plan_loop::World;
use crate::k8s::{self, Pod};

/// The pods an election works on, by name, each with whether its selector matches it
/// ([`views::pods_of`]).
pub type Pods = BTreeMap<String, (Arc<Pod>, bool)>;

/// What the plan loop of an election starts from, as this process knows it.
pub struct Start {
    /// The election's status.
    pub status: LeaderElectionStatus,
    /// Its pods.
    pub pods: Pods,
    /// What its first look may adopt.
    pub adopting: Adopting,
    /// Its switchover request, if any.
    pub switchover: Option<String>,
}

/// Reads what the plan loop of `le` (its key `key`, validated as `config`) starts from.
pub fn start(
    le: &LeaderElection,
    key: &ElectionKey,
    ctx: &Context,
    config: &ElectionConfig,
) -> Start {
    let status = ctx.caches.current_status(le);
    let adopting = Adopting {
        election: key.clone(),
        mode: config.mode,
        holds_session: ctx.sessions.view(key).is_some(),
        recorded_settings: recorded_session(status.applied.as_ref()),
        spec_settings: config.session,
        owner: ctx.settings.owner.clone(),
    };
    let switchover = le.annotations().get(SWITCHOVER_ANNOTATION).cloned();
    Start {
        status,
        pods: views::pods_of(&ctx.caches, le),
        adopting,
        switchover,
    }
}

/// Observes the world of election `key` (validated as `config`) with its `pods` as patched
/// and its Consul key as last read (`lock`), and lets `election` plan from it.
pub fn plan(
    election: &mut Election,
    key: &ElectionKey,
    ctx: &Context,
    config: &ElectionConfig,
    pods: &Pods,
    lock: &LockView,
) {
    let (now, wall) = (Instant::now(), ctx.wall_now());
    let mut views = views::views(pods, config, |not_ready| {
        election.not_ready_since(not_ready, now, wall)
    });
    shared_views(&mut views, election, ctx, &key.name, &config.labels, pods);
    let session = ctx.sessions.view(key);
    let world = World {
        config,
        pods: &views,
        lock,
        session: session.as_ref(),
        lock_confirmed_at: ctx.lock_confirmed_at(key),
        now,
        wall,
        owner: &ctx.settings.owner,
    };
    election.handle(Input::World(world), now);
}

/// The planner reads the operator's annotations of a pod as this election's; on a pod shared
/// with elections of other label keys, it sees what this election wrote or would write
/// ([`shared_view`]).
fn shared_views(
    views: &mut [PodView],
    election: &Election,
    ctx: &Context,
    me: &str,
    labels: &LabelConfig,
    pods: &Pods,
) {
    for view in views {
        let Some((pod, _)) = pods.get(&view.name) else {
            continue;
        };
        // One read of the caches serves both: the annotations' owner exists when it leads or
        // not, and another election's leader label is asked only without such an owner.
        let shared = super::shared::shared_pod(ctx, me, &labels.key, pod);
        let owner = AnnotationOwner::of(k8s::labelled_by(pod), me, || {
            shared.foreign_owner_leads.is_some()
        });
        let leadership = election.leadership_of(&view.uid);
        shared_view(view, owner, || shared.led_by_another, labels, leadership);
        view.shared = shared;
    }
}

/// The UID of the one pod of `pods` that carries the leader label of `labels`; `None` when no
/// pod, or more than one, does.
pub fn labelled_leader(pods: &Pods, labels: &LabelConfig) -> Option<String> {
    let mut labelled = pods
        .values()
        .filter(|(pod, _)| pod.labels().get(&labels.key) == Some(&labels.leader))
        .filter_map(|(pod, _)| pod.metadata.uid.clone());
    match (labelled.next(), labelled.next()) {
        (Some(uid), None) => Some(uid),
        _ => None,
    }
}

/// What the key's value says of `pod` when it holds the lock
/// ([`crate::election::key_value::value_for`]).
pub fn holding<'p>(pods: &'p Pods, pod: &'p str) -> Holding<'p> {
    let found = pods.get(pod).map(|(p, _)| p.as_ref());
    Holding {
        pod,
        uid: found.and_then(|p| p.metadata.uid.as_deref()),
        pod_ip: found.and_then(|p| p.status.as_ref()?.pod_ip.as_deref()),
        node: found.and_then(|p| p.spec.as_ref()?.node_name.as_deref()),
    }
}

/// A reference to pod `name` of `pods`, for the events that name it.
pub fn pod_reference(pods: &Pods, name: &str) -> Option<ObjectReference> {
    let (pod, _) = pods.get(name)?;
    Some(ObjectReference {
        api_version: Some("v1".to_owned()),
        kind: Some("Pod".to_owned()),
        name: pod.metadata.name.clone(),
        namespace: pod.metadata.namespace.clone(),
        uid: pod.metadata.uid.clone(),
        ..ObjectReference::default()
    })
}
