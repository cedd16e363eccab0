//! The body of every response the guard sends a client: counted, and cut
//! with UNAVAILABLE when a drain runs out of time.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::HeaderMap;
use http_body::{Body, Frame, SizeHint};
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};
use tonic::Status;

use spark_connect_retry::reattach::StreamStatsHandle;

use crate::stats::{Counters, code_of};

/// The status a drained stream ends with: clients reattach on UNAVAILABLE.
pub(crate) fn drained() -> Status {
    Status::unavailable("spark-connect-guard is shutting down: reattach to continue")
}

/// Where the body is in the gRPC framing (5-byte header, then the message):
/// a stream is only ended between two messages.
#[derive(Default)]
struct Framing {
    header: [u8; 5],
    header_len: usize,
    remaining: u64,
}

impl Framing {
    fn at_boundary(&self) -> bool {
        self.header_len == 0 && self.remaining == 0
    }

    fn advance(&mut self, mut data: &[u8]) {
        while !data.is_empty() {
            if self.remaining > 0 {
                let n = data
                    .len()
                    .min(usize::try_from(self.remaining).unwrap_or(usize::MAX));
                self.remaining -= n as u64;
                data = &data[n..];
                continue;
            }
            let n = data.len().min(5 - self.header_len);
            self.header[self.header_len..self.header_len + n].copy_from_slice(&data[..n]);
            self.header_len += n;
            data = &data[n..];
            if self.header_len == 5 {
                let len = [
                    self.header[1],
                    self.header[2],
                    self.header[3],
                    self.header[4],
                ];
                self.remaining = u64::from(u32::from_be_bytes(len));
                self.header_len = 0;
            }
        }
    }
}

/// One call, counted open until its body ends or is dropped.
pub(crate) struct CallOpen {
    counters: Arc<Counters>,
    method: usize,
    /// The end was counted (status known).
    ended: bool,
    /// The reattach layer's statistics of this call's execution, if it
    /// carried one: added to the guard's counts when the call ends.
    stream: Option<StreamStatsHandle>,
}

impl CallOpen {
    pub(crate) fn new(counters: Arc<Counters>, method: usize) -> Self {
        counters.calls_started.fetch_add(1, Ordering::Relaxed);
        CallOpen {
            counters,
            method,
            ended: false,
            stream: None,
        }
    }

    /// Count what `stream` went through when this call ends.
    pub(crate) fn with_stream(mut self, stream: Option<StreamStatsHandle>) -> Self {
        self.stream = stream;
        self
    }

    pub(crate) fn end(&mut self, code: usize) {
        if !self.ended {
            self.ended = true;
            self.counters.end(self.method, code);
        }
    }
}

impl Drop for CallOpen {
    fn drop(&mut self) {
        // Dropped before its end: the client went away (or was cut).
        self.end(1);
        if let Some(stream) = &self.stream {
            self.counters.stream_ended(&stream.snapshot());
        }
        self.counters.calls_finished.fetch_add(1, Ordering::Relaxed);
    }
}

/// A response body: counts bytes and the end's status, and ends the stream
/// with UNAVAILABLE at the next message boundary once `cut` fires.
pub(crate) struct GuardBody {
    inner: tonic::body::Body,
    cut: Pin<Box<WaitForCancellationFutureOwned>>,
    /// `None` for health calls, which are not counted.
    call: Option<CallOpen>,
    framing: Framing,
    done: bool,
}

impl GuardBody {
    pub(crate) fn new(
        inner: tonic::body::Body,
        cut: &CancellationToken,
        call: Option<CallOpen>,
    ) -> Self {
        GuardBody {
            inner,
            cut: Box::pin(cut.clone().cancelled_owned()),
            call,
            framing: Framing::default(),
            done: false,
        }
    }

    fn cut_counted(&mut self) {
        if let Some(call) = self.call.as_mut() {
            call.counters.cut_by_drain.fetch_add(1, Ordering::Relaxed);
            call.end(14);
        }
    }

    fn end(&mut self, code: usize) {
        self.done = true;
        if let Some(call) = self.call.as_mut() {
            call.end(code);
        }
    }

    fn cut_now(&mut self) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        self.done = true;
        self.cut_counted();
        let mut trailers = HeaderMap::new();
        let _ = drained().add_header(&mut trailers);
        Poll::Ready(Some(Ok(Frame::trailers(trailers))))
    }
}

impl Body for GuardBody {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        let this = self.get_mut();
        if this.done {
            return Poll::Ready(None);
        }
        let cut = this.cut.as_mut().poll(cx).is_ready();
        if cut && this.framing.at_boundary() {
            return this.cut_now();
        }
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    this.framing.advance(data);
                    if let Some(call) = this.call.as_ref() {
                        call.counters
                            .bytes_to_clients
                            .fetch_add(data.len() as u64, Ordering::Relaxed);
                    }
                } else if let Some(trailers) = frame.trailers_ref() {
                    this.end(code_of(trailers.get("grpc-status")));
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => {
                this.end(2);
                Poll::Ready(Some(Err(e)))
            }
            Poll::Ready(None) => {
                // A gRPC response without trailers.
                this.end(2);
                Poll::Ready(None)
            }
            Poll::Pending if cut => {
                // Cut in the middle of a message that does not come: reset
                // the stream (the client reattaches on the reset too).
                this.done = true;
                this.cut_counted();
                Poll::Ready(Some(Err(drained())))
            }
            Poll::Pending => Poll::Pending,
        }
    }

    /// Ends with the inner body: a trailers-only answer (the status in its
    /// headers, no body) must go out as one HEADERS frame that ends the
    /// stream. grpc-java fails a stream whose headers are followed by an
    /// empty DATA frame ending it ("unexpected EOS on empty DATA frame").
    fn is_end_stream(&self) -> bool {
        self.done || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}

#[cfg(test)]
mod tests {
    use super::Framing;

    #[test]
    fn framing_finds_message_boundaries_across_frames() {
        let mut f = Framing::default();
        assert!(f.at_boundary());
        f.advance(&[0, 0, 0]);
        assert!(!f.at_boundary());
        f.advance(&[0, 3, 1]);
        assert!(!f.at_boundary());
        f.advance(&[2, 3, 0, 0, 0, 0, 0]);
        // The second message is empty: a boundary again.
        assert!(f.at_boundary());
        f.advance(&[0, 0, 0, 0, 1]);
        assert!(!f.at_boundary());
        f.advance(&[9]);
        assert!(f.at_boundary());
    }
}
