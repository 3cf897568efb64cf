//! A token's ACL rules, [`AclRules`], and the operator's minimal ones.

/// A token's rules, in the current syntax (`key_prefix`, `session_prefix`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AclRules(pub String);

/// The operator's minimal rules with its default key prefix: write on the keys under
/// `elector/`, write on sessions of any node (the operator creates its sessions on the node of
/// the agent it talks to, and lists and renews them).
pub const OPERATOR_RULES: &str = r#"key_prefix "elector/" { policy = "write" }
session_prefix "" { policy = "write" }"#;

impl AclRules {
    /// The operator's minimal rules ([`OPERATOR_RULES`]).
    pub fn operator() -> Self {
        Self(OPERATOR_RULES.to_string())
    }

    /// The same rules for the legacy ACL system, whose `key` and `session` rules match by
    /// prefix as `key_prefix` and `session_prefix` do now.
    pub(super) fn legacy(&self) -> String {
        self.0
            .replace("key_prefix ", "key ")
            .replace("session_prefix ", "session ")
    }
}
