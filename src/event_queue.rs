//! Events written in the background, in the order they were queued, so that no reconcile
//! ever waits for one. An event reports a step; it is not one: a move emits `LeaderLost`
//! between demoting the old leader and releasing its lock, and an events API that answers
//! slowly (the API server's priority and fairness queues event writes with other low-priority
//! work) must not hold the successor's label back by as much as a whole write.
//!
//! One task ([`EventQueue::new`]'s writer) writes the events one at a time through kube's
//! [`Recorder`], which folds repetitions into a series. The queue holds at most
//! [`CAPACITY`] events; [`EventQueue::push`] refuses more, and the caller counts them as
//! suppressed, like the events over the operator's rate.

use std::future::Future;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, Recorder};
use tokio::sync::mpsc;

/// The most events waiting to be written: 100 s of the operator's sustained event rate
/// (20 per second after a burst of 100), a few hundred kilobytes.
pub const CAPACITY: usize = 2000;

/// One event waiting to be written, with what it is about.
type Queued = (Event, ObjectReference);

/// The sending side of the queue; clones share it.
#[derive(Clone)]
pub struct EventQueue {
    tx: mpsc::Sender<Queued>,
}

impl EventQueue {
    /// A queue, and its writer: a future that writes every queued event through `recorder`
    /// until every [`EventQueue`] is dropped. A failed write is logged and not retried.
    pub fn new(recorder: Recorder) -> (EventQueue, impl Future<Output = ()> + Send + 'static) {
        let (tx, mut rx) = mpsc::channel::<Queued>(CAPACITY);
        let writer = async move {
            while let Some((event, target)) = rx.recv().await {
                if let Err(error) = recorder.publish(&event, &target).await {
                    tracing::warn!(%error, reason = event.reason, "publishing an event failed");
                }
            }
        };
        (EventQueue { tx }, writer)
    }

    /// Queues `event` about `target`; `false` when the queue is full or its writer is gone
    /// (the event is then dropped).
    pub fn push(&self, event: &Event, target: &ObjectReference) -> bool {
        let copy = Event {
            type_: event.type_,
            reason: event.reason.clone(),
            note: event.note.clone(),
            action: event.action.clone(),
            secondary: event.secondary.clone(),
        };
        self.tx.try_send((copy, target.clone())).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use std::pin::Pin;
    use std::sync::{Arc, Mutex, PoisonError};
    use std::task::{Context, Poll};
    use std::time::Duration;

    use bytes::Bytes;
    use http_body_util::{BodyExt, Full};
    use kube::runtime::events::{EventType, Reporter};
    use tokio::sync::Semaphore;

    use super::*;

    /// An API server stand-in that answers each request only once the test hands it a
    /// permit, and records the `reason` of every event written.
    #[derive(Clone)]
    struct SlowServer {
        permits: Arc<Semaphore>,
        reasons: Arc<Mutex<Vec<String>>>,
    }

    impl tower::Service<http::Request<kube::client::Body>> for SlowServer {
        type Response = http::Response<Full<Bytes>>;
        type Error = std::convert::Infallible;
        type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, request: http::Request<kube::client::Body>) -> Self::Future {
            let server = self.clone();
            Box::pin(async move {
                let body = match request.into_body().collect().await {
                    Ok(body) => body.to_bytes(),
                    Err(_) => Bytes::new(),
                };
                if let Ok(permit) = server.permits.acquire().await {
                    permit.forget();
                }
                let event: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
                let reason = event["reason"].as_str().unwrap_or_default().to_owned();
                server
                    .reasons
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(reason);
                // The written event back, as the API server answers a create.
                Ok(http::Response::builder()
                    .status(201)
                    .body(Full::new(body))
                    .unwrap_or_default())
            })
        }
    }

    fn queue() -> (EventQueue, impl Future<Output = ()>, SlowServer) {
        let server = SlowServer {
            permits: Arc::new(Semaphore::new(0)),
            reasons: Arc::default(),
        };
        let client = kube::Client::new(server.clone(), "default");
        let reporter = Reporter {
            controller: "consul-elector".into(),
            instance: None,
        };
        let (queue, writer) = EventQueue::new(Recorder::new(client, reporter));
        (queue, writer, server)
    }

    fn event(reason: &str) -> Event {
        Event {
            type_: EventType::Normal,
            reason: reason.to_owned(),
            note: Some(format!("{reason} happened")),
            action: "Elect".to_owned(),
            secondary: None,
        }
    }

    fn election() -> ObjectReference {
        ObjectReference {
            api_version: Some("elector.dev/v1alpha1".into()),
            kind: Some("LeaderElection".into()),
            name: Some("web".into()),
            namespace: Some("shop".into()),
            ..ObjectReference::default()
        }
    }

    fn written(server: &SlowServer) -> Vec<String> {
        server
            .reasons
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    #[tokio::test]
    async fn events_queue_at_once_while_the_api_stalls_and_are_written_in_order() {
        let (queue, writer, server) = queue();
        let writer = tokio::spawn(writer);
        for reason in ["LeaderLost", "LeaderElected", "SessionLost"] {
            assert!(queue.push(&event(reason), &election()), "{reason} queued");
        }
        // The server answers only now: queueing never waited for it.
        server.permits.add_permits(3);
        drop(queue);
        tokio::time::timeout(Duration::from_secs(10), writer)
            .await
            .expect("the writer ends once the queue is gone")
            .expect("the writer does not panic");
        assert_eq!(
            written(&server),
            ["LeaderLost", "LeaderElected", "SessionLost"]
        );
    }

    #[tokio::test]
    async fn a_full_queue_refuses_more_events() {
        // The writer never runs: nothing leaves the queue.
        let (queue, _writer, _server) = queue();
        for _ in 0..CAPACITY {
            assert!(queue.push(&event("LeaderElected"), &election()));
        }
        assert!(!queue.push(&event("LeaderLost"), &election()), "full");
    }

    #[tokio::test]
    async fn a_queue_whose_writer_is_gone_refuses_events() {
        let (queue, writer, _server) = queue();
        drop(writer);
        assert!(!queue.push(&event("LeaderElected"), &election()));
    }
}
