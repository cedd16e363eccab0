//! Reporting a request body's own error instead of the stream reset it causes.
//!
//! When tonic cannot encode a request (most often: the message is larger
//! than the client's `max_encoding_message_size`), the error happens inside
//! the request body. hyper answers a failing request body by resetting the
//! HTTP/2 stream, and the caller gets `Internal: h2 protocol error: http2
//! error`, which names neither the limit nor the message. The original
//! status is lost on the way.
//!
//! `RequestErrorLayer` keeps it: the request body is wrapped so that its
//! error, if any, is recorded, and when the call then fails (the response
//! future, or the response body for a stream), the recorded status is
//! returned instead of the reset. A call whose request body never fails is
//! untouched.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame};
use tower::{Layer, Service};

use crate::boxed::{BoxError, BoxFuture};

type Slot = Arc<Mutex<Option<tonic::Status>>>;

fn take(slot: &Slot) -> Option<tonic::Status> {
    slot.lock().unwrap_or_else(|e| e.into_inner()).take()
}

/// Wraps a gRPC channel so that a request body's error is reported as
/// itself (see the [module docs](self)).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct RequestErrorLayer;

impl<S> Layer<S> for RequestErrorLayer {
    type Service = RequestError<S>;
    fn layer(&self, inner: S) -> Self::Service {
        RequestError { inner }
    }
}

/// The service `RequestErrorLayer` builds.
#[derive(Debug, Clone)]
pub(crate) struct RequestError<S> {
    inner: S,
}

impl<S> Service<http::Request<tonic::body::Body>> for RequestError<S>
where
    S: Service<
            http::Request<tonic::body::Body>,
            Response = http::Response<tonic::body::Body>,
            Error = tonic::Status,
        >,
    S::Future: Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = tonic::Status;
    type Future = BoxFuture<Result<Self::Response, tonic::Status>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<tonic::body::Body>) -> Self::Future {
        let slot = Slot::default();
        let recording = slot.clone();
        let req = req.map(|body| {
            tonic::body::Body::new(Recording {
                inner: body,
                slot: recording,
            })
        });
        let fut = self.inner.call(req);
        Box::pin(async move {
            match fut.await {
                Ok(res) => {
                    Ok(res.map(|body| tonic::body::Body::new(Substituting { inner: body, slot })))
                }
                Err(e) => Err(take(&slot).unwrap_or(e)),
            }
        })
    }
}

/// A request body that records its error before handing it on.
struct Recording {
    inner: tonic::body::Body,
    slot: Slot,
}

impl Body for Recording {
    type Data = Bytes;
    type Error = tonic::Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(Some(Err(status))) = &polled {
            *self.slot.lock().unwrap_or_else(|e| e.into_inner()) = Some(status.clone());
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// A response body whose error becomes the request's recorded error, if any.
struct Substituting {
    inner: tonic::body::Body,
    slot: Slot,
}

impl Body for Substituting {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        match Pin::new(&mut self.inner).poll_frame(cx) {
            Poll::Ready(Some(Err(e))) => {
                let e = take(&self.slot).unwrap_or(e);
                Poll::Ready(Some(Err(e.into())))
            }
            other => other.map_err(Into::into),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}
