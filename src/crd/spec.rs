//! The `LeaderElection` resource and its spec. Doc comments on the fields become the field
//! descriptions of the CRD (`kubectl explain leaderelection.spec`), so they are written for
//! users.

use std::collections::BTreeMap;

use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use super::names::DEFAULT_ROLE_LABEL;
use super::rules::{self, *};
use super::status::LeaderElectionStatus;
use crate::election::config;

/// Elects one leader among the pods a selector matches, through a Consul session and KV lock.
/// The leader gets the label `<labels.key>=<labels.leader>` (other pods
/// `<labels.key>=<labels.follower>`) and the annotations `elector.dev/fencing-token`,
/// `fencing-token.<labels.key>` (the same token, beside the label) and
/// `elector.dev/leader-since`.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[allow(
    clippy::duplicated_attributes,
    reason = "every printcolumn(...) has a type_; clippy takes them for duplicates"
)]
#[kube(
    group = "elector.dev",
    version = "v1alpha1",
    kind = "LeaderElection",
    namespaced,
    status = "LeaderElectionStatus",
    derive = "PartialEq",
    shortname = "le",
    shortname = "elect",
    category = "elector",
    doc = "A LeaderElection elects one leader among the pods its selector matches, through a Consul session and KV lock, and labels the pods with their role.",
    printcolumn(
        name = "LEADER",
        type_ = "string",
        json_path = ".status.leader.pod",
        description = "The pod that leads"
    ),
    printcolumn(
        name = "TOKEN",
        type_ = "integer",
        json_path = ".status.fencingToken",
        description = "Fencing token of the current leadership (Consul LockIndex)"
    ),
    printcolumn(
        name = "TRANSITIONS",
        type_ = "integer",
        json_path = ".status.transitions",
        description = "How often leadership changed"
    ),
    printcolumn(
        name = "PHASE",
        type_ = "string",
        json_path = ".status.phase",
        description = "Where the election stands"
    ),
    printcolumn(
        name = "AGE",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[x_kube(validation = rules::LABEL_KEY_NOT_SELECTED)]
#[serde(rename_all = "camelCase")]
pub struct LeaderElectionSpec {
    /// The candidates: pods in this namespace that match. Required and not empty. Must not use
    /// `labels.key`, the label the operator writes.
    pub selector: PodSelector,

    /// `Managed` (default): the operator holds the Consul lock for the pod it elects.
    /// `Observe`: the applications elect themselves through Consul; the operator only mirrors
    /// the holder into labels and status and never writes to Consul, except that switching a
    /// running election to `Observe` releases the operator's key and destroys its session.
    #[serde(default)]
    pub mode: Mode,

    /// Observe mode: how the key's value names the holding pod.
    #[serde(default, skip_serializing_if = "ObserveSpec::is_default")]
    pub observe: ObserveSpec,

    /// The Consul KV key of the lock. Default: `elector/<namespace>/<name>/leader`. Segments of
    /// letters, digits, `-`, `_`, `.` and `,` separated by single `/`; no leading or trailing
    /// `/`, no `..`, no segment that is just `.`. Changing it on a running election releases
    /// the old key (and destroys the session) before the new one is acquired.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = CONSUL_KEY_MAX_LENGTH), pattern(CONSUL_KEY_PATTERN))]
    #[x_kube(
        validation = rules::KEY_NOT_EMPTY,
        validation = rules::KEY_NO_LEADING_SLASH,
        validation = rules::KEY_NO_TRAILING_SLASH,
        validation = rules::KEY_NO_EMPTY_SEGMENT,
        validation = rules::KEY_NO_DOT_DOT,
        validation = rules::KEY_NO_DOT_SEGMENT,
        validation = rules::KEY_NO_SPACE,
        validation = rules::KEY_CHARACTERS
    )]
    pub key: Option<String>,

    /// Per-election overrides of the operator's Consul settings. Absent: the operator's
    /// defaults (its `CONSUL_HTTP_ADDR`, `CONSUL_DATACENTER`, `CONSUL_HTTP_TOKEN`). Changing
    /// them on a running election releases the key and destroys the session through the old
    /// settings first, then elects again through the new ones.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consul: Option<ConsulSpec>,

    /// The Consul session held for the leader.
    #[serde(default)]
    pub session: SessionSpec,

    /// The label the operator writes on every selected pod. On a running election, a new
    /// `leader` or `follower` value is rewritten in place; a new `key` moves the election (the
    /// old labels removed and the lock released before anything is written under the new key).
    #[serde(default)]
    pub labels: LabelsSpec,

    /// Which selected pods may lead.
    #[serde(default)]
    pub candidates: CandidatesSpec,

    /// When a leader that stopped being Ready is replaced.
    #[serde(default)]
    pub failover: FailoverSpec,

    /// Deliberate moves, requested by annotating the election
    /// `elector.dev/switchover-to: <pod>` (or `"*"` for the best other eligible pod).
    #[serde(default)]
    pub switchover: SwitchoverSpec,

    /// Moving leadership back to a pod of higher `elector.dev/priority` once it is eligible.
    #[serde(default)]
    pub failback: FailbackSpec,

    /// Freezes a Managed election: the leader keeps leading (its session renews) whether it
    /// is Ready or not, nobody is elected when it goes, and switchover requests wait. The
    /// safety rules still apply: a leader label whose lock cannot be confirmed is removed.
    /// Setting it back to `false` resumes the election. No effect in Observe mode, where the
    /// applications elect themselves.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub paused: bool,

    /// What happens to the leader label when Consul cannot confirm the lock. `Fence`
    /// (default): the label is removed once the lock went a whole TTL unconfirmed, so no pod
    /// believes it leads without the lock. `KeepLeader`: the label stays until Consul answers.
    #[serde(default)]
    pub on_consul_unavailable: UnavailablePolicy,
}

/// A label selector for the candidate pods (the usual Kubernetes form). Every requirement must
/// hold; at least one must be given.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[x_kube(validation = rules::SELECTOR_NOT_EMPTY)]
#[schemars(extend("minProperties" = 1))]
#[serde(rename_all = "camelCase")]
pub struct PodSelector {
    /// Labels a pod must carry with exactly these values.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend(
        "minProperties" = 1,
        "maxProperties" = MATCH_LABELS_MAX,
        "additionalProperties" = {
            "type": "string",
            "maxLength": LABEL_VALUE_MAX_LENGTH,
            "pattern": SELECTOR_VALUE_PATTERN,
        },
    ))]
    pub match_labels: BTreeMap<String, String>,

    /// Requirements on a pod's labels.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(min = 1, max = MATCH_EXPRESSIONS_MAX))]
    pub match_expressions: Vec<SelectorRequirement>,
}

/// One requirement of a label selector.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[x_kube(validation = rules::REQUIREMENT_VALUES)]
#[serde(rename_all = "camelCase")]
pub struct SelectorRequirement {
    /// The label key.
    #[schemars(length(max = LABEL_KEY_MAX_LENGTH), pattern(LABEL_KEY_PATTERN))]
    #[x_kube(validation = rules::LABEL_KEY)]
    pub key: String,

    /// How the label relates to `values`.
    pub operator: SelectorOperator,

    /// The values for `In` and `NotIn` (at least one); empty for `Exists` and `DoesNotExist`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        length(max = REQUIREMENT_VALUES_MAX),
        inner(length(max = LABEL_VALUE_MAX_LENGTH), pattern(SELECTOR_VALUE_PATTERN))
    )]
    pub values: Vec<String>,
}

/// A label selector operator.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum SelectorOperator {
    /// The label is present with one of the values.
    In,
    /// The label is absent or has none of the values.
    NotIn,
    /// The label is present (any value).
    Exists,
    /// The label is absent.
    DoesNotExist,
}

/// Who runs the Consul lock.
#[derive(
    schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq,
)]
pub enum Mode {
    /// The operator holds a session and the lock on behalf of the pod it elects.
    #[default]
    Managed,
    /// The applications elect themselves; the operator mirrors the lock holder into labels and
    /// status and never writes to Consul (but to let go of its own session when a running
    /// election is switched to `Observe`).
    Observe,
}

/// What Consul does with the key when the session is invalidated.
#[derive(
    schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq,
)]
pub enum Behavior {
    /// The key is kept and unlocked.
    #[default]
    Release,
    /// The key is deleted.
    Delete,
}

/// What happens to the leader label while Consul cannot confirm the lock.
#[derive(
    schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq,
)]
pub enum UnavailablePolicy {
    /// Remove the leader label once the lock went a whole TTL without confirmation.
    #[default]
    Fence,
    /// Keep the leader label until Consul answers again.
    KeepLeader,
}

/// Where and as whom the operator talks to Consul for this election.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ConsulSpec {
    /// Consul HTTP address: `host:port`, `http://host:port` or `https://host:port`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 1, max = CONSUL_ADDRESS_MAX_LENGTH),
        pattern(CONSUL_ADDRESS_PATTERN)
    )]
    pub address: Option<String>,

    /// Consul datacenter (`?dc=`). With the operator's own token (no `tokenSecretRef`), only
    /// the operator's datacenter or one its admin allowed (`--consul-allowed-datacenters`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = DATACENTER_MAX_LENGTH), pattern(DATACENTER_PATTERN))]
    pub datacenter: Option<String>,

    /// Consul Enterprise namespace (`?ns=`; default: the operator's `CONSUL_NAMESPACE`, else
    /// the token's). With the operator's own token, only the operator's. Consul CE refuses it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = TENANCY_MAX_LENGTH), pattern(TENANCY_PATTERN))]
    pub namespace: Option<String>,

    /// Consul Enterprise admin partition (`?partition=`; default: the operator's
    /// `CONSUL_PARTITION`, else the token's). With the operator's own token, only the
    /// operator's. Consul CE refuses it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = TENANCY_MAX_LENGTH), pattern(TENANCY_PATTERN))]
    pub partition: Option<String>,

    /// A key of a Secret in this namespace holding the Consul ACL token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_secret_ref: Option<SecretKeyRef>,
}

/// A key of a Secret in the election's namespace.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct SecretKeyRef {
    /// The Secret's name.
    #[schemars(length(min = 1, max = SECRET_NAME_MAX_LENGTH), pattern(SECRET_NAME_PATTERN))]
    pub name: String,

    /// The key in the Secret's data.
    #[schemars(length(min = 1, max = SECRET_KEY_MAX_LENGTH), pattern(SECRET_KEY_PATTERN))]
    pub key: String,
}

/// The Consul session held for the leader.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct SessionSpec {
    /// Session TTL, 10s to 24h (Consul's limits). The operator renews the session every
    /// TTL/2; Consul invalidates it 2×TTL after the last renewal, for example when the
    /// operator is gone.
    #[serde(default = "default_ttl")]
    #[schemars(length(max = DURATION_MAX_LENGTH), pattern(DURATION_PATTERN))]
    #[x_kube(validation = rules::DURATION_SYNTAX, validation = rules::TTL_RANGE)]
    pub ttl: String,

    /// Lock-delay, 0s to 60s: after Consul invalidates the session, nobody can take the lock
    /// for this long (a move the operator decides releases the lock without this delay).
    #[serde(default = "default_lock_delay")]
    #[schemars(length(max = DURATION_MAX_LENGTH), pattern(DURATION_PATTERN))]
    #[x_kube(validation = rules::DURATION_SYNTAX, validation = rules::LOCK_DELAY_RANGE)]
    pub lock_delay: String,

    /// `Release` (default) keeps the key, unlocked, when the session is invalidated; `Delete`
    /// deletes it.
    #[serde(default)]
    pub behavior: Behavior,
}

impl Default for SessionSpec {
    fn default() -> Self {
        Self {
            ttl: default_ttl(),
            lock_delay: default_lock_delay(),
            behavior: Behavior::default(),
        }
    }
}

fn default_ttl() -> String {
    "15s".to_owned()
}

fn default_lock_delay() -> String {
    "15s".to_owned()
}

/// The label the operator writes on every selected pod.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[x_kube(validation = rules::LEADER_FOLLOWER_DIFFER)]
pub struct LabelsSpec {
    /// The label key (default `elector.dev/role`). A Service selecting
    /// `<key>=<leader>` reaches the leader only.
    #[serde(default = "default_label_key")]
    #[schemars(length(max = LABEL_KEY_MAX_LENGTH), pattern(LABEL_KEY_PATTERN))]
    #[x_kube(validation = rules::LABEL_KEY)]
    pub key: String,

    /// The value on the leader (default `leader`).
    #[serde(default = "default_leader_value")]
    #[schemars(length(min = 1, max = LABEL_VALUE_MAX_LENGTH), pattern(LABEL_VALUE_PATTERN))]
    #[x_kube(validation = rules::LABEL_VALUE)]
    pub leader: String,

    /// The value on every other selected pod (default `follower`).
    #[serde(default = "default_follower_value")]
    #[schemars(length(min = 1, max = LABEL_VALUE_MAX_LENGTH), pattern(LABEL_VALUE_PATTERN))]
    #[x_kube(validation = rules::LABEL_VALUE)]
    pub follower: String,
}

impl Default for LabelsSpec {
    fn default() -> Self {
        Self {
            key: default_label_key(),
            leader: default_leader_value(),
            follower: default_follower_value(),
        }
    }
}

fn default_label_key() -> String {
    DEFAULT_ROLE_LABEL.to_owned()
}

fn default_leader_value() -> String {
    "leader".to_owned()
}

fn default_follower_value() -> String {
    "follower".to_owned()
}

/// Which selected pods may lead.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct CandidatesSpec {
    /// Only pods whose Ready condition is True may become leader (default `true`).
    #[serde(default = "default_require_ready")]
    pub require_ready: bool,
}

impl Default for CandidatesSpec {
    fn default() -> Self {
        Self {
            require_ready: default_require_ready(),
        }
    }
}

fn default_require_ready() -> bool {
    true
}

/// When a leader that stopped being Ready is replaced.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct FailoverSpec {
    /// How long a leader may stay NotReady before another pod takes over, 0s to 24h (default
    /// `0s`: at once). A leader that is deleted, terminating or no longer selected is always
    /// replaced at once.
    #[serde(default = "default_failover_delay")]
    #[schemars(length(max = DURATION_MAX_LENGTH), pattern(DURATION_PATTERN))]
    #[x_kube(validation = rules::DURATION_SYNTAX, validation = rules::FAILOVER_DELAY_RANGE)]
    pub delay: String,
}

impl Default for FailoverSpec {
    fn default() -> Self {
        Self {
            delay: default_failover_delay(),
        }
    }
}

fn default_failover_delay() -> String {
    "0s".to_owned()
}

/// Deliberate moves (a switchover requested with the `elector.dev/switchover-to` annotation,
/// or a failback).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct SwitchoverSpec {
    /// Before a planned move unlabels the leader, it is annotated
    /// `elector.dev/handover=<deadline>` (RFC 3339) and the move waits until that deadline, at
    /// most this many seconds (0 to 300, default 0: no wait). The application may end the wait
    /// early by setting the annotation's value to `done`. A leader that becomes ineligible
    /// meanwhile is replaced at once.
    #[serde(default)]
    #[schemars(range(max = SWITCHOVER_DRAIN_MAX_SECONDS), extend("format" = "int32"))]
    pub drain_seconds: u32,
}

/// How an Observe-mode election reads the holder from the key's value.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ObserveSpec {
    /// `Operator` (default): JSON as the operator writes it, `{"pod": ..., "uid": ...}`.
    /// `Json`: a JSON object whose member `podField` is the pod's name. `Plain`: the whole
    /// value is the pod's name, as Patroni writes its leader key (a pod whose name is the
    /// member name).
    #[serde(default)]
    pub value_format: ValueFormatSpec,

    /// With `valueFormat: Json`, the member holding the pod's name (default `pod`).
    #[serde(default = "default_pod_field")]
    #[schemars(length(min = 1, max = 63), pattern(r"^[A-Za-z0-9_.-]+$"))]
    pub pod_field: String,
}

impl ObserveSpec {
    fn is_default(&self) -> bool {
        *self == Self::default()
    }
}

impl Default for ObserveSpec {
    fn default() -> Self {
        Self {
            value_format: ValueFormatSpec::default(),
            pod_field: default_pod_field(),
        }
    }
}

fn default_pod_field() -> String {
    "pod".to_owned()
}

/// How the key's value names the holding pod.
#[derive(
    schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq,
)]
pub enum ValueFormatSpec {
    /// The operator's JSON.
    #[default]
    Operator,
    /// A JSON object with the pod's name in `podField`.
    Json,
    /// The value is the pod's name.
    Plain,
}

/// Failback: moving leadership to a pod of higher `elector.dev/priority` than the leader's.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct FailbackSpec {
    /// `true`: once an eligible pod has a higher priority than the leader, leadership moves to
    /// it as a planned move. `false` (default): the leader keeps leading while it is eligible.
    #[serde(default)]
    pub enabled: bool,

    /// The least time between the leader's election and a failback away from it, 0s to 24h
    /// (default `60s`), so a pod whose readiness flaps does not drag leadership along.
    #[serde(default = "default_failback_interval")]
    #[schemars(length(max = DURATION_MAX_LENGTH), pattern(DURATION_PATTERN))]
    #[x_kube(validation = rules::DURATION_SYNTAX, validation = rules::FAILOVER_DELAY_RANGE)]
    pub min_interval: String,
}

impl Default for FailbackSpec {
    fn default() -> Self {
        Self {
            enabled: false,
            min_interval: default_failback_interval(),
        }
    }
}

fn default_failback_interval() -> String {
    "60s".to_owned()
}

impl From<Mode> for config::Mode {
    fn from(mode: Mode) -> Self {
        match mode {
            Mode::Managed => Self::Managed,
            Mode::Observe => Self::Observe,
        }
    }
}

impl From<Behavior> for config::Behavior {
    fn from(behavior: Behavior) -> Self {
        match behavior {
            Behavior::Release => Self::Release,
            Behavior::Delete => Self::Delete,
        }
    }
}

impl From<UnavailablePolicy> for config::UnavailablePolicy {
    fn from(policy: UnavailablePolicy) -> Self {
        match policy {
            UnavailablePolicy::Fence => Self::Fence,
            UnavailablePolicy::KeepLeader => Self::KeepLeader,
        }
    }
}
