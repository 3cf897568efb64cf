//! Response bodies handed back by the fault layer: the server's body untouched, an
//! injected `Status`, or a watch stream that is cut or expired after N events.

use std::{
    io,
    pin::Pin,
    task::{Context, Poll, ready},
};

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};
use serde::Deserialize;
use tower::BoxError;

use super::hold::WatchHold;
use super::request::RequestInfo;

/// The line the API server sends, after HTTP 200, when a watch starts from a
/// resourceVersion that is too old (reference §2.4), newline included.
const EXPIRED_EVENT: &str = concat!(
    r#"{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"#,
    r#""status":"Failure","message":"The resourceVersion for the provided watch is too old.","#,
    r#""reason":"Expired","code":410}}"#,
    "\n"
);

/// The `Status` JSON the API server sends with an error response.
pub(crate) fn status_json(
    code: u16,
    reason: &str,
    message: &str,
    retry_after: Option<u64>,
    request: &RequestInfo,
) -> Bytes {
    let mut details = serde_json::Map::new();
    if let Some(name) = &request.name {
        details.insert("name".into(), name.as_str().into());
    }
    if let Some(resource) = &request.resource {
        // The API server names the resource (without subresource) as the details kind.
        let kind = resource.split('/').next().unwrap_or(resource);
        details.insert("kind".into(), kind.into());
    }
    if let Some(seconds) = retry_after {
        details.insert("retryAfterSeconds".into(), seconds.into());
    }
    let mut status = serde_json::json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    });
    if !details.is_empty() {
        status["details"] = serde_json::Value::Object(details);
    }
    Bytes::from(status.to_string())
}

/// How a faulted watch stream ends once its event budget is spent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WatchEnd {
    /// The connection drops: the body fails with `UnexpectedEof`, as hyper reports a
    /// chunked body that stops without its terminating chunk.
    Cut,
    /// One in-stream `ERROR` 410 `Expired` event, then a clean end.
    Expire,
}

/// The response body of a request that went through the fault layer.
pub struct FaultBody<B> {
    kind: Kind<B>,
}

enum Kind<B> {
    Passthrough(B),
    Full(Option<Bytes>),
    Watch(WatchBody<B>),
    Held(B, WatchHold),
}

impl<B> FaultBody<B> {
    pub(crate) fn passthrough(body: B) -> Self {
        FaultBody {
            kind: Kind::Passthrough(body),
        }
    }

    pub(crate) fn full(bytes: Bytes) -> Self {
        FaultBody {
            kind: Kind::Full(Some(bytes)),
        }
    }

    /// Forwards `body` while `hold` lets it.
    pub(crate) fn held(body: B, hold: WatchHold) -> Self {
        FaultBody {
            kind: Kind::Held(body, hold),
        }
    }

    /// Forwards `body` until `after_events` object events went through, then ends it
    /// the way `end` says.
    pub(crate) fn watch(body: B, after_events: u32, end: WatchEnd) -> Self {
        let phase = if after_events == 0 {
            Phase::Ending
        } else {
            Phase::Forwarding(body)
        };
        FaultBody {
            kind: Kind::Watch(WatchBody {
                phase,
                counter: EventCounter::new(after_events),
                end,
            }),
        }
    }
}

impl<B> Body for FaultBody<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match &mut self.get_mut().kind {
            Kind::Passthrough(body) => Pin::new(body).poll_frame(cx).map_err(Into::into),
            Kind::Full(bytes) => Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b)))),
            Kind::Watch(watch) => watch.poll_frame(cx),
            Kind::Held(body, hold) => {
                ready!(hold.poll_open(cx));
                Pin::new(body).poll_frame(cx).map_err(Into::into)
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Passthrough(body) | Kind::Held(body, _) => body.is_end_stream(),
            Kind::Full(bytes) => bytes.is_none(),
            Kind::Watch(watch) => matches!(watch.phase, Phase::Done),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Passthrough(body) | Kind::Held(body, _) => body.size_hint(),
            Kind::Full(bytes) => SizeHint::with_exact(bytes.as_ref().map_or(0, |b| b.len() as u64)),
            Kind::Watch(_) => SizeHint::default(),
        }
    }
}

struct WatchBody<B> {
    phase: Phase<B>,
    counter: EventCounter,
    end: WatchEnd,
}

enum Phase<B> {
    /// Passing the server's stream through while counting events.
    Forwarding(B),
    /// The budget is spent and the server's stream dropped; the ending is next.
    Ending,
    Done,
}

impl<B> WatchBody<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    fn poll_frame(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let inner = match &mut self.phase {
            Phase::Forwarding(inner) => inner,
            Phase::Ending => {
                self.phase = Phase::Done;
                return Poll::Ready(Some(match self.end {
                    WatchEnd::Expire => {
                        Ok(Frame::data(Bytes::from_static(EXPIRED_EVENT.as_bytes())))
                    }
                    WatchEnd::Cut => Err(Box::new(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "watch connection cut by fault injection",
                    ))),
                }));
            }
            Phase::Done => return Poll::Ready(None),
        };
        let frame = match ready!(Pin::new(inner).poll_frame(cx)) {
            Some(Ok(frame)) => frame,
            Some(Err(err)) => return Poll::Ready(Some(Err(err.into()))),
            None => {
                self.phase = Phase::Done;
                return Poll::Ready(None);
            }
        };
        let data = match frame.into_data() {
            Ok(data) => data,
            Err(trailers) => return Poll::Ready(Some(Ok(trailers))),
        };
        let forward = match self.counter.feed(&data) {
            Some(cut) => {
                // Dropping the server's body closes that connection, as a real cut would.
                self.phase = Phase::Ending;
                data.slice(..cut)
            }
            None => data,
        };
        Poll::Ready(Some(Ok(Frame::data(forward))))
    }
}

/// Counts object events (`ADDED`, `MODIFIED`, `DELETED` lines; not `BOOKMARK` or
/// `ERROR`) of a newline-delimited watch stream, across chunk boundaries.
struct EventCounter {
    line: Vec<u8>,
    remaining: u32,
}

impl EventCounter {
    fn new(budget: u32) -> Self {
        EventCounter {
            line: Vec::new(),
            remaining: budget,
        }
    }

    /// Feeds the next chunk. Returns `Some(n)` when the budget is spent inside this
    /// chunk: its first `n` bytes end with the newline of the last allowed event.
    fn feed(&mut self, chunk: &[u8]) -> Option<usize> {
        let mut start = 0;
        while let Some(offset) = chunk[start..].iter().position(|b| *b == b'\n') {
            let end = start + offset;
            self.line.extend_from_slice(&chunk[start..end]);
            let counted = is_object_event(&self.line);
            self.line.clear();
            start = end + 1;
            if counted {
                self.remaining = self.remaining.saturating_sub(1);
                if self.remaining == 0 {
                    return Some(start);
                }
            }
        }
        self.line.extend_from_slice(&chunk[start..]);
        None
    }
}

fn is_object_event(line: &[u8]) -> bool {
    #[derive(Deserialize)]
    struct EventType {
        #[serde(rename = "type")]
        kind: String,
    }
    serde_json::from_slice::<EventType>(line)
        .is_ok_and(|event| matches!(event.kind.as_str(), "ADDED" | "MODIFIED" | "DELETED"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::{BodyExt, StreamBody};

    const ADDED: &str = "{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"a\\n\"}}}\n";
    const BOOKMARK: &str =
        "{\"type\":\"BOOKMARK\",\"object\":{\"metadata\":{\"resourceVersion\":\"7\"}}}\n";

    /// A server body delivering `chunks` as separate data frames.
    fn stream(chunks: &[&str]) -> impl Body<Data = Bytes, Error = io::Error> + Unpin + use<> {
        let frames: Vec<Result<_, io::Error>> = chunks
            .iter()
            .map(|c| Ok(Frame::data(Bytes::copy_from_slice(c.as_bytes()))))
            .collect();
        StreamBody::new(futures::stream::iter(frames))
    }

    /// Collects the data a client would read and whether the body ended in an error.
    async fn read_all<B>(mut body: FaultBody<B>) -> (String, Option<io::ErrorKind>)
    where
        B: Body<Data = Bytes> + Unpin,
        B::Error: Into<BoxError>,
    {
        let mut out = Vec::new();
        while let Some(frame) = body.frame().await {
            match frame {
                Ok(frame) => out.extend_from_slice(&frame.into_data().unwrap_or_default()),
                Err(err) => {
                    let kind = err.downcast_ref::<io::Error>().map(io::Error::kind);
                    return (String::from_utf8_lossy(&out).into_owned(), kind);
                }
            }
        }
        (String::from_utf8_lossy(&out).into_owned(), None)
    }

    #[test]
    fn counter_spans_chunk_boundaries_and_skips_bookmarks() {
        let all = format!("{ADDED}{BOOKMARK}{ADDED}{ADDED}");
        for split in 0..all.len() {
            let (first, second) = all.as_bytes().split_at(split);
            let mut counter = EventCounter::new(2);
            let cut = counter
                .feed(first)
                .or_else(|| counter.feed(second).map(|n| n + first.len()));
            assert_eq!(
                cut,
                Some(ADDED.len() * 2 + BOOKMARK.len()),
                "split at {split}"
            );
        }
    }

    #[test]
    fn status_json_is_a_kubernetes_status() {
        let request = RequestInfo {
            verb: None,
            resource: Some("pods/status".into()),
            namespace: Some("ns".into()),
            name: Some("a".into()),
        };
        let body = status_json(429, "TooManyRequests", "slow down", Some(3), &request);
        let status: kube::core::Status = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            (status.code, status.reason.as_str()),
            (429, "TooManyRequests")
        );
        assert_eq!(status.message, "slow down");
        let details = status.details.unwrap();
        assert_eq!(
            (details.name.as_str(), details.kind.as_str()),
            ("a", "pods")
        );
        assert_eq!(details.retry_after_seconds, 3);
    }

    #[tokio::test]
    async fn expire_forwards_n_events_then_one_error_410() {
        let body = FaultBody::watch(
            stream(&[ADDED, BOOKMARK, ADDED, ADDED]),
            1,
            WatchEnd::Expire,
        );
        let (text, err) = read_all(body).await;
        assert_eq!(text, format!("{ADDED}{EXPIRED_EVENT}"));
        assert_eq!(err, None);
        let last = text.lines().last().unwrap();
        let event: kube::core::WatchEvent<serde_json::Value> = serde_json::from_str(last).unwrap();
        assert!(
            matches!(event, kube::core::WatchEvent::Error(s) if s.code == 410 && s.reason == "Expired")
        );
    }

    #[tokio::test]
    async fn cut_ends_with_unexpected_eof_after_n_events() {
        let body = FaultBody::watch(
            stream(&[&format!("{ADDED}{ADDED}{ADDED}")]),
            2,
            WatchEnd::Cut,
        );
        assert_eq!(
            read_all(body).await,
            (
                format!("{ADDED}{ADDED}"),
                Some(io::ErrorKind::UnexpectedEof)
            )
        );

        let body = FaultBody::watch(stream(&[ADDED]), 0, WatchEnd::Cut);
        assert_eq!(
            read_all(body).await,
            (String::new(), Some(io::ErrorKind::UnexpectedEof))
        );
    }

    #[tokio::test]
    async fn a_stream_that_ends_first_ends_cleanly() {
        let body = FaultBody::watch(stream(&[ADDED, BOOKMARK]), 5, WatchEnd::Cut);
        assert_eq!(read_all(body).await, (format!("{ADDED}{BOOKMARK}"), None));
    }

    #[tokio::test]
    async fn a_held_watch_delivers_nothing_until_released_then_everything_in_order() {
        let hold = WatchHold::new();
        hold.hold();
        let mut body = FaultBody::held(stream(&[ADDED, BOOKMARK]), hold.clone());
        let waiting = tokio::time::timeout(std::time::Duration::from_millis(50), body.frame());
        assert!(waiting.await.is_err(), "a held watch delivered an event");
        let reader = tokio::spawn(read_all(body));
        hold.release();
        let read = tokio::time::timeout(std::time::Duration::from_secs(10), reader).await;
        assert_eq!(
            read.ok().and_then(Result::ok),
            Some((format!("{ADDED}{BOOKMARK}"), None))
        );
    }
}
