//! Every read the operator sends the API server outside a watch is bounded. kube's read
//! timeout stays off so that watches live, so a GET on a dead pooled connection would
//! otherwise hang its reconcile for good, and with it that election's Fence.

use std::future::Future;
use std::time::Duration;

/// How long a GET or LIST outside a watch may take.
pub const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// `request`, failing as a transport error (`kube::Error::Service`) once it took longer than
/// [`READ_TIMEOUT`].
pub async fn bounded<T>(
    request: impl Future<Output = Result<T, kube::Error>>,
) -> Result<T, kube::Error> {
    match tokio::time::timeout(READ_TIMEOUT, request).await {
        Ok(answer) => answer,
        Err(elapsed) => Err(kube::Error::Service(Box::new(elapsed))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_read_that_does_not_answer_fails_after_the_timeout() {
        let never = std::future::pending::<Result<(), kube::Error>>();
        let started = tokio::time::Instant::now();
        let answer = bounded(never).await;
        assert!(matches!(answer, Err(kube::Error::Service(_))), "{answer:?}");
        assert_eq!(started.elapsed(), READ_TIMEOUT);
        assert!(matches!(
            bounded(async { Ok::<_, kube::Error>(7) }).await,
            Ok(7)
        ));
    }
}
