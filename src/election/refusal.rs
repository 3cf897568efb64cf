//! Consul refusing a write of the operator for lack of rights: which right the refused
//! operation needs, and how the election's `ConsulAvailable` condition says so.
//!
//! Consul answers 403 `Permission denied` without naming the right on older versions, so the
//! right is derived from the operation: the condition and the event then tell the admin what
//! to add to the token's policy instead of only that something was refused.

/// The right a Consul operation of the operator needs, in the words of Consul's ACL rules
/// (`<resource>:<access>`).
pub fn required_right(operation: &str) -> &'static str {
    match operation {
        "session create" | "session renew" | "session destroy" => "session:write",
        "session info" | "session list" => "session:read",
        "kv get" | "kv list" => "key:read",
        _ => "key:write",
    }
}

/// Consul refused one of the election's operations because of the ACL token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsulRefusal {
    /// The condition's and the event's reason (static).
    pub reason: &'static str,
    /// What was refused and what the token needs.
    pub message: String,
    /// The refused operation was a read (a read that succeeds again ends the refusal; a
    /// refused write ends with a write that succeeds).
    pub on_read: bool,
}

impl ConsulRefusal {
    /// The token lacks the right `operation` on `target` needs.
    pub fn permission_denied(operation: &str, target: &str) -> Self {
        let right = required_right(operation);
        Self {
            reason: "PermissionDenied",
            message: format!(
                "Consul refused {operation} {target:?}: the ACL token lacks {right} on it \
                 (Consul answered 403 Permission denied)"
            ),
            on_read: right.ends_with(":read"),
        }
    }

    /// Consul CE refused a request naming a Consul Enterprise namespace or admin partition
    /// (`detail`: Consul's message).
    pub fn enterprise_only(operation: &str, target: &str, detail: &str) -> Self {
        Self {
            reason: "EnterpriseOnly",
            message: format!(
                "Consul refused {operation} {target:?}: {detail}. This Consul is Consul CE: \
                 remove spec.consul.namespace and spec.consul.partition, and the operator's \
                 CONSUL_NAMESPACE and CONSUL_PARTITION"
            ),
            on_read: required_right(operation).ends_with(":read"),
        }
    }

    /// Consul does not know the token (deleted, expired, or from another cluster).
    pub fn token_not_found(operation: &str, target: &str) -> Self {
        Self {
            reason: "AclTokenNotFound",
            message: format!(
                "Consul refused {operation} {target:?}: it does not know the ACL token \
                 (deleted, expired or from another Consul cluster)"
            ),
            on_read: required_right(operation).ends_with(":read"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_operation_names_the_right_it_needs() {
        assert_eq!(required_right("session create"), "session:write");
        assert_eq!(required_right("session renew"), "session:write");
        assert_eq!(required_right("session list"), "session:read");
        assert_eq!(required_right("kv list"), "key:read");
        assert_eq!(required_right("kv acquire"), "key:write");
        assert_eq!(required_right("kv release"), "key:write");
        let refusal = ConsulRefusal::permission_denied("kv acquire", "elector/shop/web/leader");
        assert_eq!(refusal.reason, "PermissionDenied");
        assert!(!refusal.on_read);
        assert!(ConsulRefusal::token_not_found("kv get", "k").on_read);
        let ce = ConsulRefusal::enterprise_only("kv get", "k", "Namespaces are ...");
        assert_eq!((ce.reason, ce.on_read), ("EnterpriseOnly", true));
        assert!(
            refusal.message.contains("lacks key:write on it"),
            "{}",
            refusal.message
        );
    }
}
