//! The body of a write to Consul, read by its connection only while the write gate is open.
//!
//! A request reaches its socket in the task that drives its connection, not in the task that
//! asked for it. Over HTTP/1 that task buffers the request's head, reads its body and only
//! then sends both: a body that reads the gate first makes that the check immediately before
//! the write goes out, so a process paused after handing a write over finds the gate closed
//! when it resumes and the connection closes with nothing sent. An empty body is sent
//! chunked for that reason (a known empty one is never read). Over HTTP/2 the head may go
//! out before the body is read; docs/design.md (rule 8) states what remains there.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Frame, SizeHint};

use crate::write_gate::{NotActive, WriteGate};

/// A request body that yields its bytes only while `gate` is open.
pub(crate) struct GatedBody {
    gate: WriteGate,
    data: Option<Bytes>,
}

impl GatedBody {
    pub(crate) fn new(gate: WriteGate, data: Bytes) -> Self {
        GatedBody {
            gate,
            data: Some(data),
        }
    }
}

impl http_body::Body for GatedBody {
    type Data = Bytes;
    type Error = NotActive;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, NotActive>>> {
        if let Err(closed) = self.gate.remaining() {
            return Poll::Ready(Some(Err(closed)));
        }
        Poll::Ready(self.data.take().map(|data| Ok(Frame::data(data))))
    }

    fn is_end_stream(&self) -> bool {
        self.data.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        match &self.data {
            Some(data) if data.is_empty() => SizeHint::default(),
            Some(data) => SizeHint::with_exact(data.len() as u64),
            None => SizeHint::with_exact(0),
        }
    }
}
