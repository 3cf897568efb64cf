//! A catalog check's health, [`CheckStatus`], and every node's default check.

/// Consul's `structs.SerfCheckID`, every node's default health check.
pub(crate) const SERF_HEALTH: &str = "serfHealth";

/// Health of a catalog check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckStatus {
    /// `passing`.
    Passing,
    /// `warning` (does not invalidate sessions).
    Warning,
    /// `critical`: sessions bound to the check are invalidated, new ones refused.
    Critical,
}
