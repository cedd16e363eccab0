//! The response bodies the caller reads: an execution's (the driver's
//! responses as gRPC messages, then trailers with the end's status), and a
//! forwarded call's (the server's frames, a broken hop ended UNAVAILABLE).
//!
//! *Why a body of our own:* the next response is fetched only when the
//! caller polls for it, so a slow reader holds back the server (through
//! HTTP/2 flow control) instead of filling memory.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::HeaderMap;
use http_body::Frame;
use tonic::Status;

use super::frame::framed;
use super::raw::{Item, RawDriver, next, transport_failure};

type Next = Pin<Box<dyn Future<Output = (Box<RawDriver>, Item)> + Send>>;

/// The caller's view of one execution.
pub(crate) struct ExecBody {
    driver: Option<Box<RawDriver>>,
    first: Option<Item>,
    pending: Option<Next>,
    done: bool,
}

impl ExecBody {
    /// The body after `first`, which the driver already produced.
    pub(crate) fn new(driver: Box<RawDriver>, first: Item) -> Self {
        ExecBody {
            driver: Some(driver),
            first: Some(first),
            pending: None,
            done: false,
        }
    }

    fn end(&mut self, status: &Status) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        self.done = true;
        self.driver = None;
        Poll::Ready(Some(Ok(Frame::trailers(trailers_of(status)))))
    }
}

/// gRPC trailers saying `status`.
fn trailers_of(status: &Status) -> HeaderMap {
    let mut trailers = HeaderMap::new();
    if let Err(e) = status.add_header(&mut trailers) {
        trailers.clear();
        let _ =
            Status::internal(format!("reattach layer: {}", e.message())).add_header(&mut trailers);
    }
    trailers
}

/// The body of a call the layer forwards (every call but an execution it
/// carries): the server's frames as they come, except a transport failure
/// of the layer's hop under it (the connection broke before the server's
/// trailers). That one ends the body with trailers saying UNAVAILABLE, as
/// grpc-core reports a broken connection; a broken body would reach the
/// caller as a reset stream (grpc-java: INTERNAL) or tonic's UNKNOWN, which
/// clients do not retry. The caller's retry of the call is its own. (A
/// break inside a message leaves the caller a partial message before the
/// trailers, which its gRPC library reports as an error of its own.)
pub(crate) struct ForwardedBody {
    inner: tonic::body::Body,
    done: bool,
}

impl ForwardedBody {
    pub(crate) fn new(inner: tonic::body::Body) -> Self {
        ForwardedBody { inner, done: false }
    }
}

impl http_body::Body for ForwardedBody {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        if self.done {
            return Poll::Ready(None);
        }
        match std::task::ready!(Pin::new(&mut self.inner).poll_frame(cx)) {
            Some(Err(status)) => match transport_failure(&status) {
                Some(unavailable) => {
                    self.done = true;
                    Poll::Ready(Some(Ok(Frame::trailers(trailers_of(&unavailable)))))
                }
                None => Poll::Ready(Some(Err(status))),
            },
            other => Poll::Ready(other),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        if self.done {
            http_body::SizeHint::with_exact(0)
        } else {
            // Not the inner's exact size: trailers may replace its end.
            http_body::SizeHint::new()
        }
    }
}

impl http_body::Body for ExecBody {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        if self.done {
            return Poll::Ready(None);
        }
        let item = match self.first.take() {
            Some(item) => item,
            None => {
                if self.pending.is_none() {
                    let Some(mut driver) = self.driver.take() else {
                        return Poll::Ready(None);
                    };
                    self.pending = Some(Box::pin(async move {
                        let item = next(&mut driver).await;
                        (driver, item)
                    }));
                }
                let Some(fut) = self.pending.as_mut() else {
                    return Poll::Ready(None);
                };
                let (driver, item) = std::task::ready!(fut.as_mut().poll(cx));
                self.pending = None;
                self.driver = Some(driver);
                item
            }
        };
        match item {
            Item::Message(msg) => Poll::Ready(Some(Ok(Frame::data(framed(&msg))))),
            Item::End => self.end(&Status::ok("")),
            Item::Error(status) => self.end(&status),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done
    }
}
