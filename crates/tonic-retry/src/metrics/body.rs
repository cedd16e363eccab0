//! The bodies the layer measures: a request body whose message bytes are
//! counted as they are sent, and the response handed to the caller, whose
//! attempt and call end when the caller has read it to its status.
//!
//! A streamed response ends long after the layer returns it, so the layer
//! cannot record its end itself; the body it hands on does, as it yields
//! the trailers (or an error, or is dropped unread: `CANCELLED`).

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

use bytes::Bytes;
use http::Response;
use http_body::{Frame, SizeHint};
use tokio::time::Instant;
use tonic::body::Body;
use tonic::{Code, Status};

use super::call::{Attempt, Call};
use crate::boxed::BoxError;
use crate::framing::FrameCounter;
use crate::headers::grpc_code;

/// A request body whose message bytes are added to `sent` as they go.
pub(crate) struct CountedRequest {
    inner: Body,
    counter: FrameCounter,
    sent: Arc<AtomicU64>,
}

impl CountedRequest {
    pub(crate) fn wrap(inner: Body, sent: Arc<AtomicU64>) -> Body {
        Body::new(CountedRequest {
            inner,
            counter: FrameCounter::default(),
            sent,
        })
    }
}

impl http_body::Body for CountedRequest {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        let this = &mut *self;
        let frame = std::task::ready!(Pin::new(&mut this.inner).poll_frame(cx));
        if let Some(Ok(f)) = &frame
            && let Some(data) = f.data_ref()
        {
            let before = this.counter.payload();
            this.counter.feed(data);
            this.sent
                .fetch_add(this.counter.payload() - before, Ordering::Relaxed);
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// The caller's response: ends its attempt (if still open) and the call
/// at its status.
struct Delivered {
    inner: Body,
    counter: FrameCounter,
    ends: Option<(Option<Attempt>, Call)>,
}

impl Delivered {
    fn end(&mut self, code: Code) {
        if let Some((attempt, call)) = self.ends.take() {
            let now = Instant::now();
            if let Some(a) = attempt {
                a.end(code, Some(self.counter.payload()), now);
            }
            call.end(code, now);
        }
    }
}

impl http_body::Body for Delivered {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        let this = &mut *self;
        let frame = std::task::ready!(Pin::new(&mut this.inner).poll_frame(cx));
        match &frame {
            Some(Ok(f)) => {
                if let Some(data) = f.data_ref() {
                    this.counter.feed(data);
                } else if let Some(trailers) = f.trailers_ref() {
                    this.end(grpc_code(trailers).unwrap_or(Code::Unknown));
                }
            }
            Some(Err(status)) => this.end(status.code()),
            // Ended without trailers: tonic fails the call for it.
            None => this.end(Code::Unknown),
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for Delivered {
    fn drop(&mut self) {
        self.end(Code::Cancelled);
    }
}

/// Hand `result` to the caller: a failure ends `attempt` (if still open)
/// and `call` now; a response whose status is in its headers too; any
/// other response ends them when the caller reads its status.
pub(crate) fn deliver(
    attempt: Option<Attempt>,
    call: Call,
    result: Result<Response<Body>, BoxError>,
) -> Result<Response<Body>, BoxError> {
    let res = match result {
        Ok(res) => res,
        Err(e) => {
            let code = e
                .downcast_ref::<Status>()
                .map_or(Code::Unknown, Status::code);
            let now = Instant::now();
            if let Some(a) = attempt {
                a.end(code, Some(0), now);
            }
            call.end(code, now);
            return Err(e);
        }
    };
    let (head, inner) = res.into_parts();
    let mut body = Delivered {
        inner,
        counter: FrameCounter::default(),
        ends: Some((attempt, call)),
    };
    if let Some(code) = grpc_code(&head.headers) {
        // Trailers-only: the status is already here.
        body.end(code);
        return Ok(Response::from_parts(head, body.inner_body()));
    }
    Ok(Response::from_parts(head, Body::new(body)))
}

impl Delivered {
    /// The inner body, once nothing is left to record.
    fn inner_body(mut self) -> Body {
        std::mem::replace(&mut self.inner, Body::empty())
    }
}
