//! The kube client the controller writes with (docs/design.md rule 8). Reads and writes travel on separate
//! connections: a write reaches its socket not in the task that asked for it but in the task
//! that drives its connection, so the connections of writes are driven only while the gate
//! is open ([`ConnectionTasks`]), and the gate is read immediately before the write goes out.
//! Reads keep connections of their own that the gate never stops: a standby keeps its caches
//! warm.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use http::{Method, Request, Response};
use kube::client::{Body, ClientBuilder};
use tower::{BoxError, Service};

use crate::write_gate::WriteGate;

/// Requests that may wait for one client's stack at once (the buffer that lets the retry
/// layer clone it).
const BUFFERED_REQUESTS: usize = 1024;

/// Spawns the tasks of a kube client's connections (the `executor` of
/// [`ClientBuilder::try_from`]). With a gate, each task is polled only while the gate is open
/// and ends, closing its connection, at the first poll that finds it closed: a process paused
/// after a write was handed to its connection finds the gate closed when it resumes, and the
/// write never reaches the socket.
#[derive(Clone, Default)]
pub struct ConnectionTasks {
    gate: Option<WriteGate>,
}

impl ConnectionTasks {
    fn gated(gate: &WriteGate) -> Self {
        ConnectionTasks {
            gate: Some(gate.clone()),
        }
    }
}

impl<F> hyper::rt::Executor<F> for ConnectionTasks
where
    F: Future<Output = ()> + Send + 'static,
{
    fn execute(&self, task: F) {
        let Some(gate) = self.gate.clone() else {
            tokio::spawn(task);
            return;
        };
        let mut task = Box::pin(task);
        tokio::spawn(std::future::poll_fn(move |cx| {
            if gate.remaining().is_err() {
                return Poll::Ready(());
            }
            task.as_mut().poll(cx)
        }));
    }
}

/// The kube client the controller writes with: GETs (reads, lists, watches) go to a client
/// built by `builder` with ungated connections; every other request goes to one whose
/// connections are [`ConnectionTasks`] of `gate` and whose requests pass the gate's layer
/// ([`WriteGate::layer`]). Each has kube's server-aware retries outside the gate, so every
/// attempt is checked and bounded; `builder` builds kube's stack for a config whose
/// `default_retry` is off ([`without_retries`]). Must be called within a tokio runtime (the
/// buffers run as tasks).
pub fn gated_client<S, B, E>(
    gate: &WriteGate,
    builder: impl Fn(ConnectionTasks) -> Result<ClientBuilder<S>, E>,
) -> Result<kube::Client, E>
where
    S: Service<Request<Body>, Response = Response<B>, Error = BoxError> + Send + 'static,
    S::Future: Send + 'static,
    B: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    let reads = builder(ConnectionTasks::default())?;
    let writes = builder(ConnectionTasks::gated(gate))?.with_layer(&gate.layer());
    let reads = with_retries(reads);
    let namespace = reads.default_namespace().to_owned();
    let by_method = ByMethod {
        reads,
        writes: with_retries(writes),
    };
    Ok(kube::Client::new(by_method, namespace))
}

/// `config` without kube's built-in retry layer: [`gated_client`] adds it outside the gate,
/// and the Lease's own client retries in its loop, within its own timeouts.
pub fn without_retries(mut config: kube::Config) -> kube::Config {
    config.default_retry = false;
    config
}

/// `builder`'s stack behind a buffer and kube's server-aware retries.
fn with_retries<S, B>(builder: ClientBuilder<S>) -> kube::Client
where
    S: Service<Request<Body>, Response = Response<B>, Error = BoxError> + Send + 'static,
    S::Future: Send + 'static,
    B: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    builder
        .with_layer(&tower::buffer::BufferLayer::new(BUFFERED_REQUESTS))
        .with_layer(&tower::retry::RetryLayer::new(
            kube::client::retry::RetryPolicy::server_retry(),
        ))
        .build()
}

/// Sends GETs with one client and everything else with the other.
#[derive(Clone)]
struct ByMethod {
    reads: kube::Client,
    writes: kube::Client,
}

impl Service<Request<Body>> for ByMethod {
    type Response = Response<Body>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, BoxError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        // Each client has a buffer of its own, which waits for its stack.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        let client = if request.method() == Method::GET {
            self.reads.clone()
        } else {
            self.writes.clone()
        };
        Box::pin(async move { client.send(request).await.map_err(BoxError::from) })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    use tokio::io::AsyncWriteExt;
    use tokio::net::TcpListener;
    use tokio::time::Instant;
    use tower::Layer;

    use super::*;
    use crate::write_gate::NotActive;
    use crate::write_gate::one_connection::{self, read_request};

    /// Closes the gate right after a request, once armed, was handed to its connection: the
    /// process stopped there (SIGSTOP) and resumed past its deadline.
    #[derive(Clone)]
    struct StopsAfterTheHandOver {
        gate: WriteGate,
        armed: Arc<AtomicBool>,
    }

    impl<S> Layer<S> for StopsAfterTheHandOver {
        type Service = StopsAfterTheHandOverService<S>;

        fn layer(&self, inner: S) -> Self::Service {
            StopsAfterTheHandOverService {
                inner,
                stop: self.clone(),
            }
        }
    }

    #[derive(Clone)]
    struct StopsAfterTheHandOverService<S> {
        inner: S,
        stop: StopsAfterTheHandOver,
    }

    impl<S> Service<Request<Body>> for StopsAfterTheHandOverService<S>
    where
        S: Service<Request<Body>>,
        S::Future: Send + 'static,
    {
        type Response = S::Response;
        type Error = S::Error;
        type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

        fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
            self.inner.poll_ready(cx)
        }

        fn call(&mut self, request: Request<Body>) -> Self::Future {
            let mut response = Box::pin(self.inner.call(request));
            let stop = self.stop.clone();
            Box::pin(std::future::poll_fn(move |cx| {
                let polled = response.as_mut().poll(cx);
                if stop.armed.swap(false, Ordering::SeqCst) {
                    stop.gate.close();
                }
                polled
            }))
        }
    }

    #[tokio::test]
    async fn a_write_handed_to_its_connection_before_a_pause_is_not_sent_after_it() {
        let (address, server) = one_connection::serve().await;

        let gate = WriteGate::closed();
        gate.open_until(Instant::now() + Duration::from_secs(60));
        let stop = StopsAfterTheHandOver {
            gate: gate.clone(),
            armed: Arc::default(),
        };
        let config = without_retries(kube::Config::new(
            format!("http://{address}").parse().expect("a URL"),
        ));
        let client = gated_client(&gate, |tasks| {
            ClientBuilder::try_from((config.clone(), tasks)).map(|b| b.with_layer(&stop))
        })
        .expect("a client");
        let write = || {
            Request::post("/api/v1/namespaces/default/configmaps")
                .body(Body::from(b"{}".to_vec()))
                .expect("a request")
        };
        let first = client.send(write()).await.expect("the first write");
        assert_eq!(first.status(), 201);

        // The second one goes to the same (pooled) connection; the process stops right after
        // handing it over and resumes past its deadline.
        stop.armed.store(true, Ordering::SeqCst);
        let second = client.send(write()).await;
        let arrived = server.await.expect("the server");
        assert_eq!(
            arrived, "",
            "the write reached the socket after the gate closed"
        );
        let error = second.expect_err("the second write fails");
        assert!(
            matches!(
                &error,
                kube::Error::Service(inner)
                    if inner.downcast_ref::<NotActive>() == Some(&NotActive::Cancelled)
            ),
            "{error:?}"
        );
    }

    #[tokio::test]
    async fn reads_go_out_while_the_gate_is_closed_and_writes_do_not() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("listen");
        let address = listener.local_addr().expect("address");
        let (seen_tx, mut seen) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let seen_tx = seen_tx.clone();
                tokio::spawn(async move {
                    let request = read_request(&mut socket).await;
                    let line = String::from_utf8_lossy(&request);
                    let _ = seen_tx.send(line.lines().next().unwrap_or_default().to_owned());
                    let _ = socket
                        .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}")
                        .await;
                });
            }
        });
        let gate = WriteGate::closed();
        let config = without_retries(kube::Config::new(
            format!("http://{address}").parse().expect("a URL"),
        ));
        let client = gated_client(&gate, |tasks| {
            ClientBuilder::try_from((config.clone(), tasks))
        })
        .expect("a client");
        let request = |method: Method| {
            Request::builder()
                .method(method)
                .uri("/api/v1/namespaces/default/configmaps")
                .body(Body::from(b"{}".to_vec()))
                .expect("a request")
        };
        let refused = client
            .send(request(Method::POST))
            .await
            .expect_err("a write while closed");
        assert!(
            matches!(
                &refused,
                kube::Error::Service(inner)
                    if inner.downcast_ref::<NotActive>() == Some(&NotActive::Refused)
            ),
            "{refused:?}"
        );
        let read = client.send(request(Method::GET)).await.expect("a read");
        assert_eq!(read.status(), 200);
        // The server answered the read after recording it: the write would be there first.
        assert_eq!(
            seen.try_recv().ok().as_deref(),
            Some("GET /api/v1/namespaces/default/configmaps HTTP/1.1")
        );
        assert!(
            seen.try_recv().is_err(),
            "the refused write reached the server"
        );
    }
}
