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
        assert!(
            refusal.message.contains("lacks key:write on it"),
            "{}",
            refusal.message
        );
    }
}
