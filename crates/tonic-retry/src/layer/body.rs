//! The bodies a retry needs: the request kept in memory to send it again,
//! and a response read ahead to find its status, handed on unchanged.
//!
//! An HTTP body can be read once. To send a request twice the layer reads
//! it into memory first; to judge a response before the caller sees it the
//! layer reads its start (or all of it). Both are then replayed from memory
//! by one body type, [`Replay`], followed by whatever was not read, so no
//! byte is lost or repeated.

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::HeaderMap;
use http_body::{Body as _, Frame};
use tonic::Status;
use tonic::body::Body;

/// Buffered data frames, then the unread rest of the original body, then
/// buffered trailers or an error.
#[derive(Debug, Default)]
pub(crate) struct Replay {
    pub(crate) data: VecDeque<Bytes>,
    pub(crate) rest: Option<Body>,
    pub(crate) trailers: Option<HeaderMap>,
    pub(crate) error: Option<Status>,
}

impl Replay {
    pub(crate) fn into_body(self) -> Body {
        Body::new(self)
    }
}

impl http_body::Body for Replay {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        let this = &mut *self;
        if let Some(d) = this.data.pop_front() {
            return Poll::Ready(Some(Ok(Frame::data(d))));
        }
        if let Some(rest) = this.rest.as_mut() {
            match std::task::ready!(Pin::new(rest).poll_frame(cx)) {
                None => this.rest = None,
                other => return Poll::Ready(other),
            }
        }
        if let Some(e) = this.error.take() {
            return Poll::Ready(Some(Err(e)));
        }
        Poll::Ready(this.trailers.take().map(|t| Ok(Frame::trailers(t))))
    }

    fn is_end_stream(&self) -> bool {
        self.data.is_empty()
            && self.rest.as_ref().is_none_or(|r| r.is_end_stream())
            && self.trailers.is_none()
            && self.error.is_none()
    }
}

/// A request body held in memory, so that every attempt can send it.
#[derive(Debug, Clone)]
pub(crate) struct RequestBody {
    data: Vec<Bytes>,
    trailers: Option<HeaderMap>,
}

impl RequestBody {
    /// The buffered data, as it was read.
    pub(crate) fn chunks(&self) -> &[Bytes] {
        &self.data
    }
    /// A fresh body for one attempt (cloning `Bytes` only counts references).
    pub(crate) fn body(&self) -> Body {
        Replay {
            data: self.data.iter().cloned().collect(),
            trailers: self.trailers.clone(),
            ..Replay::default()
        }
        .into_body()
    }
}

/// A request body read for replay.
pub(crate) enum Buffered {
    /// All of it, in memory.
    Whole(RequestBody),
    /// Over the cap: what was read, then the unread rest, for one attempt.
    TooLarge(Body),
    /// The body failed: what was read, then its error, for one attempt.
    Failed(Body),
}

/// Read `body` into memory, up to `cap` bytes of data.
pub(crate) async fn buffer(mut body: Body, cap: usize) -> Buffered {
    let mut data = Vec::new();
    let mut len = 0usize;
    loop {
        match std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await {
            None => {
                let trailers = None;
                return Buffered::Whole(RequestBody { data, trailers });
            }
            Some(Err(e)) => {
                let error = Some(e);
                let data = data.into();
                return Buffered::Failed(
                    Replay {
                        data,
                        error,
                        ..Replay::default()
                    }
                    .into_body(),
                );
            }
            Some(Ok(frame)) => match frame.into_data() {
                Ok(d) => {
                    len = len.saturating_add(d.len());
                    data.push(d);
                    if len > cap {
                        let (data, rest) = (data.into(), Some(body));
                        return Buffered::TooLarge(
                            Replay {
                                data,
                                rest,
                                ..Replay::default()
                            }
                            .into_body(),
                        );
                    }
                }
                Err(frame) => {
                    // Trailers end an HTTP body; nothing can follow them.
                    if let Ok(t) = frame.into_trailers() {
                        let trailers = Some(t);
                        return Buffered::Whole(RequestBody { data, trailers });
                    }
                }
            },
        }
    }
}
