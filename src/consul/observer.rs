//! A hook through which the client reports every request attempt (its operation, outcome and
//! duration), so the operator can count Consul requests and errors and measure their latency
//! without the client knowing about metrics.

use std::time::Duration;

/// Told about every request attempt a [`super::ConsulClient`] makes.
pub trait RequestObserver: Send + Sync {
    /// One attempt of `operation` (for example `kv acquire`, `session renew`) ended with
    /// `outcome`: `Ok(())`, or `Err` with [`super::ConsulError::category`]. `blocking` is
    /// true for blocking queries, whose duration is Consul's wait rather than its latency.
    fn observe(
        &self,
        operation: &'static str,
        outcome: Result<(), &'static str>,
        elapsed: Duration,
        blocking: bool,
    );

    /// A credential file (`credential`: `token`, `client_certificate` or `ca`) was re-read
    /// with `result`: `reloaded`, or the `snake_case` reason its new contents were refused
    /// (the credential in use was kept).
    fn credential_reload(&self, credential: &'static str, result: &'static str) {
        let _ = (credential, result);
    }
}
