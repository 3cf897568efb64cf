//! The status of a `LeaderElection`, written by the operator only.

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::KubeSchema;
use serde::{Deserialize, Serialize};

/// What the operator observed and did, as of `observedGeneration`.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct LeaderElectionStatus {
    /// Where the election stands.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,

    /// The pod that leads now: it carries the leader label (and, in Managed mode, holds the
    /// lock). Empty while no pod leads (a move or a fence in progress).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leader: Option<LeaderStatus>,

    /// While no pod leads: the pod that led last (the preferred successor when it is eligible
    /// again, and whose session a restarted operator adopts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_leader: Option<LeaderStatus>,

    /// Consul's `LockIndex` of the current leadership: it only grows, so an application can
    /// reject writes carrying an older token. Also on the leader pod as the annotation
    /// `elector.dev/fencing-token`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("format" = "int64"))]
    pub fencing_token: Option<u64>,

    /// How often leadership moved from one pod to another (the first election does not count,
    /// nor a pod elected again after a fence).
    #[serde(default)]
    #[schemars(extend("format" = "int64"))]
    pub transitions: u64,

    /// Every selected pod: whether it may lead and, if not, why.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_as_empty"
    )]
    #[schemars(extend("nullable" = true))]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["pod".into()]))]
    pub candidates: Vec<CandidateStatus>,

    /// The last leaderships, oldest first: which pod led, from when until when, with which
    /// fencing token, and why it stopped. Kept in the status, so it outlives the events; the
    /// oldest entries go beyond a fixed number.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_as_empty"
    )]
    #[schemars(extend("nullable" = true))]
    pub history: Vec<LeadershipRecord>,

    /// The last switchover requested with the `elector.dev/switchover-to` annotation: what was
    /// asked, when, and how it ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_switchover: Option<SwitchoverStatus>,

    /// The `metadata.generation` of the spec this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// The labels and the Consul key and access the operator acts with, recorded before it
    /// first acts with them. When the spec changes one of them, the operator first undoes
    /// what it did with these (leader label off, key released, session destroyed, labels
    /// removed), then records the new ones and elects again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied: Option<AppliedSpec>,

    /// How many times the operator wrote this status. Every write raises it and is sent only
    /// if the status still has the revision (and fencing token) the write was based on, so a
    /// late write based on an older status is refused instead of replacing a newer one
    /// (docs/design.md rule 8).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("format" = "int64"))]
    pub revision: Option<u64>,

    /// The install of the operator that serves this election (`<cluster>/<install>`): every
    /// other install stands back from it, writing nothing to it, its pods or its key, until
    /// that install's session no longer holds the key (docs/design.md rule 8).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub served_by: Option<String>,

    /// `Ready`, `LeaderElected`, `ConsulAvailable`, `SpecValid`, `Exclusive`, `StatusWritten`,
    /// `LeaseTimingSafe`, each `True` when all is well; `lastTransitionTime` is when the
    /// condition's status last changed.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_as_empty"
    )]
    #[schemars(extend("nullable" = true))]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,
}

impl LeaderElectionStatus {
    /// The pod that leads now or, while none does, the one that led last.
    pub fn leader_or_last(&self) -> Option<&LeaderStatus> {
        self.leader.as_ref().or(self.last_leader.as_ref())
    }
}

/// A list the status omits when empty. Server-side apply on Kubernetes before 1.21 turns an
/// omitted list the applier owned into `null` rather than removing it, so `null` is an empty
/// list here (and the schema allows it).
fn null_as_empty<'de, D, T>(deserializer: D) -> Result<Vec<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Ok(Option::<Vec<T>>::deserialize(deserializer)?.unwrap_or_default())
}

/// Where an election stands.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    /// No pod leads and none is being elected: no eligible candidate, the key held by
    /// another cluster or tool, or another install serving the election (also the phase
    /// before the operator first looked).
    Pending,
    /// A leader is being chosen or moved.
    Electing,
    /// A pod leads and holds the lock.
    Elected,
    /// No pod carries the leader label because the lock cannot be confirmed.
    Fenced,
    /// Observe mode: the operator mirrors the lock holder chosen by the applications.
    Observing,
    /// An older election selects the same pods with the same label key; this one writes
    /// nothing. See the `Exclusive` condition.
    Conflict,
    /// The spec cannot be used; see the `SpecValid` condition.
    Invalid,
    /// `spec.paused`: nothing moves; the leader, if any, keeps leading.
    Paused,
}

/// The leading pod.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct LeaderStatus {
    /// Pod name.
    pub pod: String,

    /// Pod UID.
    pub uid: String,

    /// Pod IP when it was elected.
    #[serde(default, rename = "podIP", skip_serializing_if = "Option::is_none")]
    pub pod_ip: Option<String>,

    /// When it became leader (RFC 3339).
    #[schemars(with = "Time")]
    pub since: Timestamp,

    /// The Consul session holding the lock for it.
    #[serde(default, rename = "sessionID", skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
}

/// One leadership of [`LeaderElectionStatus::history`].
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct LeadershipRecord {
    /// Pod name.
    pub pod: String,

    /// Pod UID.
    pub uid: String,

    /// When it became leader (RFC 3339).
    #[schemars(with = "Time")]
    pub since: Timestamp,

    /// When it stopped leading (absent while it leads).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<Time>")]
    pub until: Option<Timestamp>,

    /// Its fencing token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("format" = "int64"))]
    pub fencing_token: Option<u64>,

    /// Why it stopped leading: `Switchover`, `Failback`, the reason the pod could no longer
    /// lead (`NotReady`, `Terminating`, ...), `PodGone` (no longer selected, or deleted),
    /// `Fenced` (the lock could not be confirmed), `LockLost` (the lock went elsewhere),
    /// `Reacquired` (the same pod leads on with a new token) or `Released` (the operator was
    /// uninstalled).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended: Option<String>,
}

/// A selected pod.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct CandidateStatus {
    /// Pod name.
    pub pod: String,

    /// Whether the pod may lead now.
    pub eligible: bool,

    /// Why the pod may not lead (for example `NotReady`, `Terminating`, `NeverLeader`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,

    /// The pod's `elector.dev/priority` (0 when it has none): the eligible pod with the
    /// highest priority is preferred as a successor; a negative one never leads.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub priority: i32,
}

fn is_zero(priority: &i32) -> bool {
    *priority == 0
}

/// A switchover: requested with the annotation `elector.dev/switchover-to`, which the operator
/// removes once the request is decided.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct SwitchoverStatus {
    /// The pod asked for, or `*` for the best other eligible pod.
    pub to: String,

    /// The pod that led when the request was first seen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,

    /// The pod that leads once the move completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leader: Option<String>,

    /// When the operator first saw the request.
    #[schemars(with = "Time")]
    pub requested_at: Timestamp,

    /// When the request was completed or refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<Time>")]
    pub completed_at: Option<Timestamp>,

    /// `InProgress`, `Completed` or `Refused`.
    pub result: SwitchoverResult,

    /// Why it was refused, or what was done.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

/// How a switchover ended.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum SwitchoverResult {
    /// The move is under way.
    InProgress,
    /// The pod asked for (or the best other one) leads.
    Completed,
    /// Nothing moved: the pod is unknown or not eligible, or no other pod is.
    Refused,
}

/// What the operator acts with: the spec's labels, Consul key and Consul access as they were
/// when it last started acting on them.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct AppliedSpec {
    /// `spec.labels.key`.
    pub label_key: String,
    /// `spec.labels.leader`.
    pub leader: String,
    /// `spec.labels.follower`.
    pub follower: String,
    /// The Consul key (`spec.key`, or its default).
    pub key: String,
    /// `spec.consul.address`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consul_address: Option<String>,
    /// `spec.consul.datacenter`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub datacenter: Option<String>,
    /// `spec.consul.namespace`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consul_namespace: Option<String>,
    /// `spec.consul.partition`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consul_partition: Option<String>,
    /// `spec.consul.tokenSecretRef.name`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_secret_name: Option<String>,
    /// `spec.consul.tokenSecretRef.key`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_secret_key: Option<String>,
    /// The settings of the operator's session (Managed mode; absent when recorded by an
    /// earlier version, or in Observe mode).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<AppliedSession>,
}

/// The settings a session is created with, as Go durations in canonical form: Consul keeps
/// them for the session's life, so a change needs a new session.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct AppliedSession {
    /// `spec.session.ttl`.
    pub ttl: String,
    /// `spec.session.lockDelay`.
    pub lock_delay: String,
    /// `spec.session.behavior`.
    pub behavior: String,
}
