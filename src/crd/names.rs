//! The resource's names (group, version, CRD, finalizer) and the names of the annotations and
//! labels it defines on pods, Secrets and LeaderElections.

/// API group of the resource.
pub const GROUP: &str = "elector.dev";
/// API version of the resource.
pub const VERSION: &str = "v1alpha1";
/// `apiVersion` of a `LeaderElection`.
pub const API_VERSION: &str = "elector.dev/v1alpha1";
/// Name of the CustomResourceDefinition.
pub const CRD_NAME: &str = "leaderelections.elector.dev";
/// Finalizer that makes the operator clean up (release the key, destroy the session, remove
/// its labels and annotations) before a `LeaderElection` goes.
pub const FINALIZER: &str = "elector.dev/cleanup";
/// Pod annotation naming the election that labelled the pod (and owns the operator's
/// annotations on it), so that a pod which stops matching is cleaned by the election that
/// labelled it and by no other.
pub const ELECTION_ANNOTATION: &str = "elector.dev/election";
/// Pod annotation with the leader's fencing token (Consul `LockIndex`).
pub const FENCING_TOKEN_ANNOTATION: &str = "elector.dev/fencing-token";
/// Pod annotation with the time (RFC 3339) the leader became leader.
pub const LEADER_SINCE_ANNOTATION: &str = "elector.dev/leader-since";
/// Annotation on a LeaderElection requesting a switchover: a pod name, or `*` for the best
/// other eligible pod. The operator removes it once the request is decided.
pub const SWITCHOVER_ANNOTATION: &str = "elector.dev/switchover-to";
/// Pod annotation: the pod's priority as a successor, an integer (default 0); a negative
/// priority means the pod never leads.
pub const PRIORITY_ANNOTATION: &str = "elector.dev/priority";
/// Pod annotation the operator puts on a leader before a planned move (with
/// `spec.switchover.drainSeconds`): the RFC 3339 deadline of the move. The application may
/// set it to [`HANDOVER_DONE`] to let the move go on before the deadline.
pub const HANDOVER_ANNOTATION: &str = "elector.dev/handover";
/// The value of [`HANDOVER_ANNOTATION`] with which an application says it has handed over.
pub const HANDOVER_DONE: &str = "done";
/// Secret annotation through which a namespace owner lets elections use the Secret as their
/// Consul token (`spec.consul.tokenSecretRef`): a comma-separated list of election names of
/// the Secret's namespace, or `*` for every election there. The operator does not read the
/// data of a Secret without it.
pub const SECRET_ALLOWED_ELECTIONS_ANNOTATION: &str = "elector.dev/allowed-elections";
/// `LeaderElection` annotation: set to `"true"` by an administrator, a deletion stops
/// waiting for Consul at once (the key and the session are left there, and a Warning event
/// names them) instead of retrying for up to five minutes.
pub const SKIP_CONSUL_CLEANUP_ANNOTATION: &str = "elector.dev/skip-consul-cleanup";
/// Annotation on the install's Lease through which `helm uninstall` (the chart's pre-delete
/// hook, `consul-elector release-elections`) asks the running operator to release every
/// election it serves and keep the objects: its value is the time of the request (RFC 3339),
/// renewed while the hook waits. A replica started after that time (a later install) ignores
/// it.
pub const RELEASE_REQUESTED_ANNOTATION: &str = "elector.dev/release-requested";
/// Default label key written on the selected pods (`spec.labels.key`).
pub const DEFAULT_ROLE_LABEL: &str = "elector.dev/role";
