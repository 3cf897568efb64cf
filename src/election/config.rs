//! The validated, defaulted form of a `LeaderElection` spec: what the planner works with.
//! Producing it from the CRD (and rejecting what cannot be elected) is `crd::validate`.

use std::time::Duration;

/// Who runs the Consul lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// The operator holds a session and the lock on behalf of the chosen pod.
    #[default]
    Managed,
    /// Applications elect themselves; the operator only mirrors the holder into labels and
    /// status and never writes to Consul, but to release and destroy its own session left
    /// from `Managed` mode.
    Observe,
}

/// What Consul does with the key when the session is invalidated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Behavior {
    /// The key is kept and unlocked.
    #[default]
    Release,
    /// The key is deleted.
    Delete,
}

/// What happens to the leader label while the lock cannot be confirmed because Consul does
/// not answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum UnavailablePolicy {
    /// Drop the leader label once the lock has gone a whole TTL without confirmation.
    #[default]
    Fence,
    /// Keep the leader label until Consul answers again.
    KeepLeader,
}

/// The Consul session of an election.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionConfig {
    /// Session TTL (Consul: 10 s to 24 h).
    pub ttl: Duration,
    /// Lock-delay applied by Consul when the session is invalidated (0 to 60 s).
    pub lock_delay: Duration,
    /// Release or delete the key on invalidation.
    pub behavior: Behavior,
}

/// The label the operator puts on every selected pod.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelConfig {
    /// The label key, for example `elector.dev/role`.
    pub key: String,
    /// The value on the leader.
    pub leader: String,
    /// The value on every other selected pod.
    pub follower: String,
}

/// How an Observe-mode election reads the holding pod's name from the key's value.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum ValueFormat {
    /// A JSON object naming the pod in `field` (the operator's own format uses `pod`, with
    /// `uid` beside it).
    Json {
        /// The member holding the pod's name.
        field: String,
    },
    /// The whole value is the pod's name, as Patroni writes its leader key.
    Plain,
    /// The operator's own format: JSON with `pod` (and `uid`, `cluster`, `install`).
    #[default]
    Operator,
}

/// A validated election spec with every default applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ElectionConfig {
    /// Managed or Observe.
    pub mode: Mode,
    /// The Consul KV key of the lock.
    pub key: String,
    /// Session settings.
    pub session: SessionConfig,
    /// Labels written on pods.
    pub labels: LabelConfig,
    /// Only Ready pods may lead.
    pub require_ready: bool,
    /// How long a leader may stay NotReady before it is replaced.
    pub failover_delay: Duration,
    /// Leader label policy while Consul does not answer.
    pub on_consul_unavailable: UnavailablePolicy,
    /// How long a planned move (switchover, failback) waits for the leader to hand over.
    pub drain: Duration,
    /// Failback: `Some(least time since the leader's election)` when enabled.
    pub failback: Option<Duration>,
    /// Paused (`spec.paused`): a Managed election's leadership does not move. The leader
    /// keeps leading (its session renews) whatever its readiness, no successor is elected,
    /// switchover requests wait; the safety rules still apply (no leader label without a
    /// confirmed lock).
    pub paused: bool,
    /// Observe mode: how the key's value names the holding pod.
    pub value_format: ValueFormat,
}

/// Who the operator is: the Kubernetes cluster it runs in, and its install (one release of
/// the chart, named after its Lease: `<namespace>.<name>`) there. Carried by every session
/// name and key value it writes, so that neither another cluster nor another install in the
/// same cluster is ever mistaken for it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Owner {
    /// The cluster name.
    pub cluster: String,
    /// The install's name.
    pub install: String,
    /// The `(cluster, install)` identities this install had before a rename (a new cluster
    /// name, a new Lease name or namespace): sessions, key values and claims carrying them
    /// are this install's, so a rename changes no leader.
    pub former: Vec<(String, String)>,
}

impl Owner {
    /// The owner named `cluster` and `install`.
    pub fn new(cluster: impl Into<String>, install: impl Into<String>) -> Self {
        Owner {
            cluster: cluster.into(),
            install: install.into(),
            former: Vec::new(),
        }
    }

    /// This owner, which had the identities `former` before a rename.
    pub fn with_former(mut self, former: Vec<(String, String)>) -> Self {
        self.former = former;
        self
    }

    /// Its identities, `(cluster, install)`, the current one first.
    pub fn identities(&self) -> impl Iterator<Item = (&str, &str)> {
        std::iter::once((self.cluster.as_str(), self.install.as_str()))
            .chain(self.former.iter().map(|(c, i)| (c.as_str(), i.as_str())))
    }

    /// Whether `cluster` and `install` name this install, now or before a rename.
    pub fn is(&self, cluster: &str, install: &str) -> bool {
        self.identities().any(|(c, i)| c == cluster && i == install)
    }

    /// Whether `id` (`<cluster>/<install>`, as [`Owner::id`] writes it) names this install,
    /// now or before a rename.
    pub fn is_id(&self, id: &str) -> bool {
        id.split_once('/').is_some_and(|(c, i)| self.is(c, i))
    }

    /// `<cluster>/<install>`: how sessions' holders and `status.servedBy` name an install.
    pub fn id(&self) -> String {
        format!("{}/{}", self.cluster, self.install)
    }

    /// The install named after its Lease, `<lease namespace>.<lease name>` (a namespace has
    /// no `.`, so no two Leases give the same name, and it is one segment of a session name).
    pub fn install_of_lease(namespace: &str, name: &str) -> String {
        format!("{namespace}.{name}")
    }
}

/// Identifies one `LeaderElection` object.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ElectionKey {
    /// Namespace of the election (its candidates live there too).
    pub namespace: String,
    /// Name of the election.
    pub name: String,
}

impl std::fmt::Display for ElectionKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}
