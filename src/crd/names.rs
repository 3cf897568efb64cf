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
/// Pod annotation with the leader's fencing token (Consul `LockIndex`). Elections with other
/// label keys leading the same pod share it; [`label_token_annotation`] is each one's own.
pub const FENCING_TOKEN_ANNOTATION: &str = "elector.dev/fencing-token";
/// What [`label_token_annotation`] puts before a label key's prefix.
const LABEL_TOKEN_PREFIX: &str = "fencing-token";

/// The pod annotation with the fencing token of the leadership the label `label_key` says:
/// `fencing-token.<prefix>/<name>` for `<prefix>/<name>` (`fencing-token/<name>` without a
/// prefix). A pod leading several elections (sharded locks, each writing its own label key)
/// carries each one's token beside its label, and since a pod has one value per label key,
/// whoever writes the label writes this annotation with it. An annotation's prefix takes at
/// most 253 characters: of a longer one, the tail that fits is kept.
pub fn label_token_annotation(label_key: &str) -> String {
    const PREFIX_MAX: usize = 253 - LABEL_TOKEN_PREFIX.len() - 1;
    match label_key.split_once('/') {
        None => format!("{LABEL_TOKEN_PREFIX}/{label_key}"),
        Some((prefix, name)) => {
            // A DNS subdomain's tail that starts at a letter or digit is one too.
            let cut = prefix.len().saturating_sub(PREFIX_MAX);
            let tail = prefix
                .get(cut..)
                .map(|tail| tail.trim_start_matches(['.', '-']))
                .unwrap_or(prefix);
            format!("{LABEL_TOKEN_PREFIX}.{tail}/{name}")
        }
    }
}
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::syntax::{is_dns_subdomain, is_label_key};

    #[test]
    fn a_label_keys_token_annotation_is_a_valid_key_beside_the_label() {
        assert_eq!(
            label_token_annotation(DEFAULT_ROLE_LABEL),
            "fencing-token.elector.dev/role"
        );
        assert_eq!(
            label_token_annotation("shards.example.com/shard-0"),
            "fencing-token.shards.example.com/shard-0"
        );
        // Without a prefix it cannot meet a prefixed key's.
        assert_eq!(label_token_annotation("role"), "fencing-token/role");
        // The longest prefix keeps the tail that fits, from a letter or digit.
        let long = format!("{}.{}", "a".repeat(200), "b-c".repeat(17));
        let key = label_token_annotation(&format!("{long}/role"));
        let (prefix, name) = key.split_once('/').unwrap_or_default();
        assert_eq!(name, "role");
        assert!(prefix.len() <= 253, "{}", prefix.len());
        assert!(prefix.starts_with("fencing-token.") && long.ends_with(&prefix[14..]));
        assert!(is_dns_subdomain(prefix), "{prefix}");
        assert!(is_label_key(&key), "{key}");
        for cut_at_a_dot in [
            format!("{}.{}", "a".repeat(13), "b".repeat(239)),
            "c".repeat(253),
        ] {
            let key = label_token_annotation(&format!("{cut_at_a_dot}/x"));
            assert!(is_label_key(&key), "{key}");
        }
    }
}
