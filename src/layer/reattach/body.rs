//! The response body the caller reads: the driver's responses as gRPC
//! messages, then trailers with the end's status.
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
use super::raw::{Item, RawDriver, next};

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
        let mut trailers = HeaderMap::new();
        if let Err(e) = status.add_header(&mut trailers) {
            trailers.clear();
            let _ = Status::internal(format!("reattach layer: {}", e.message()))
                .add_header(&mut trailers);
        }
        Poll::Ready(Some(Ok(Frame::trailers(trailers))))
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
