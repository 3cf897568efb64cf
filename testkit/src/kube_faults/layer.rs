//! The tower layer and service that apply a [`KubeFaults`] table to a client stack.

use std::{
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
};

use bytes::Bytes;
use http::{Request, Response, header};
use tower::{BoxError, Layer, Service, ServiceExt};

use super::{
    body::{FaultBody, WatchEnd, status_json},
    request::RequestInfo,
    rule::FaultAction,
    table::KubeFaults,
};

/// Wraps a service stack so that requests go through a [`KubeFaults`] table.
#[derive(Clone)]
pub struct KubeFaultLayer {
    faults: KubeFaults,
}

impl KubeFaultLayer {
    pub(super) fn new(faults: KubeFaults) -> Self {
        KubeFaultLayer { faults }
    }
}

impl<S> Layer<S> for KubeFaultLayer {
    type Service = KubeFaultService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        KubeFaultService {
            inner: Arc::new(tokio::sync::Mutex::new(inner)),
            faults: self.faults.clone(),
        }
    }
}

impl KubeFaults {
    /// A tower layer that applies this table to a service stack, e.g.
    /// `ClientBuilder::try_from(config)?.with_layer(&faults.layer()).build()`.
    pub fn layer(&self) -> KubeFaultLayer {
        KubeFaultLayer::new(self.clone())
    }

    /// kube's default client stack for `config` (with rustls' ring provider installed),
    /// wrapped in this table's layer.
    ///
    /// # Panics
    /// When kube cannot build a client from `config` (an invalid TLS configuration).
    pub async fn client(&self, config: kube::Config) -> kube::Client {
        crate::cluster::install_crypto_provider();
        let url = config.cluster_url.clone();
        match kube::client::ClientBuilder::try_from(config) {
            Ok(builder) => builder.with_layer(&self.layer()).build(),
            Err(err) => panic!("testkit: cannot build a faulty client for {url}: {err}"),
        }
    }
}

/// The service built by [`KubeFaultLayer`].
///
/// The inner service is shared behind an async mutex and driven to readiness only when a
/// request is actually forwarded (after any injected latency), so stacks that are not
/// `Clone` (kube's boxed default stack) work, and a faulted request never reserves
/// capacity of the inner service.
pub struct KubeFaultService<S> {
    inner: Arc<tokio::sync::Mutex<S>>,
    faults: KubeFaults,
}

impl<S> Clone for KubeFaultService<S> {
    fn clone(&self) -> Self {
        KubeFaultService {
            inner: Arc::clone(&self.inner),
            faults: self.faults.clone(),
        }
    }
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = Result<T, BoxError>> + Send>>;

impl<S, ReqBody, B> Service<Request<ReqBody>> for KubeFaultService<S>
where
    S: Service<Request<ReqBody>, Response = Response<B>> + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    ReqBody: Send + 'static,
    B: Send + 'static,
{
    type Response = Response<FaultBody<B>>;
    type Error = BoxError;
    type Future = BoxFuture<Self::Response>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        let uri = request.uri();
        let metadata_only = request
            .headers()
            .get(http::header::ACCEPT)
            .and_then(|accept| accept.to_str().ok())
            .is_some_and(|accept| accept.contains("as=PartialObjectMetadata"));
        let (info, seen, action) =
            self.faults
                .decide(request.method(), uri.path(), uri.query(), metadata_only);
        let inner = Arc::clone(&self.inner);
        let faults = self.faults.clone();
        Box::pin(async move {
            let forward = |request| {
                faults.note_forwarded(seen);
                forward(inner, request)
            };
            match action {
                None => Ok(forward(request).await?.map(FaultBody::passthrough)),
                Some(FaultAction::Status {
                    code,
                    reason,
                    message,
                    retry_after,
                }) => status_response(code, &reason, &message, retry_after, &info),
                Some(FaultAction::Latency(delay)) => {
                    tokio::time::sleep(delay).await;
                    Ok(forward(request).await?.map(FaultBody::passthrough))
                }
                Some(FaultAction::CutWatch { after_events }) => Ok(faulted_watch(
                    forward(request).await?,
                    after_events,
                    WatchEnd::Cut,
                )),
                Some(FaultAction::ExpireWatch { after_events }) => Ok(faulted_watch(
                    forward(request).await?,
                    after_events,
                    WatchEnd::Expire,
                )),
                Some(FaultAction::HoldWatch(hold)) => Ok(forward(request)
                    .await?
                    .map(|body| FaultBody::held(body, hold))),
            }
        })
    }
}

async fn forward<S, ReqBody, B>(
    inner: Arc<tokio::sync::Mutex<S>>,
    request: Request<ReqBody>,
) -> Result<Response<B>, BoxError>
where
    S: Service<Request<ReqBody>, Response = Response<B>>,
    S::Error: Into<BoxError>,
{
    let response = {
        let mut service = inner.lock().await;
        service.ready().await.map_err(Into::into)?.call(request)
    };
    response.await.map_err(Into::into)
}

fn faulted_watch<B>(
    response: Response<B>,
    after_events: u32,
    end: WatchEnd,
) -> Response<FaultBody<B>> {
    if response.status().is_success() {
        response.map(|body| FaultBody::watch(body, after_events, end))
    } else {
        response.map(FaultBody::passthrough)
    }
}

fn status_response<B>(
    code: u16,
    reason: &str,
    message: &str,
    retry_after: Option<u64>,
    request: &RequestInfo,
) -> Result<Response<FaultBody<B>>, BoxError> {
    let mut response = Response::builder()
        .status(code)
        .header(header::CONTENT_TYPE, "application/json");
    if let Some(seconds) = retry_after {
        response = response.header(header::RETRY_AFTER, seconds);
    }
    let body: Bytes = status_json(code, reason, message, retry_after, request);
    Ok(response.body(FaultBody::full(body))?)
}
