//! The reference arm: tonic-xds's design (a `tower::retry::Retry` per
//! call, the body made cloneable by sharing it), written for this
//! comparison.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::BoxFuture;
use http::HeaderMap;
use http_body::Frame;
use tonic::Status;
use tonic::transport::Channel;
use tower::Service;
use tower::retry::{Policy, Retry};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A request body that can be cloned before it is read: every clone replays
/// the frames read so far from a shared buffer, then reads on.
#[derive(Clone)]
pub struct SharedBody {
    shared: Arc<Mutex<Shared>>,
    next: usize,
}

struct Shared {
    body: tonic::body::Body,
    frames: Vec<Stored>,
    end: bool,
}

#[derive(Clone)]
enum Stored {
    Data(Bytes),
    Trailers(HeaderMap),
    Error(Status),
}

impl SharedBody {
    fn new(body: tonic::body::Body) -> Self {
        SharedBody {
            shared: Arc::new(Mutex::new(Shared {
                body,
                frames: Vec::new(),
                end: false,
            })),
            next: 0,
        }
    }
}

impl http_body::Body for SharedBody {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        let shared = self.shared.clone();
        let mut s = shared.lock().expect("lock");
        if s.frames.len() == self.next {
            if s.end {
                return Poll::Ready(None);
            }
            let stored = match std::task::ready!(Pin::new(&mut s.body).poll_frame(cx)) {
                None => {
                    s.end = true;
                    return Poll::Ready(None);
                }
                Some(Err(e)) => Stored::Error(e),
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(d) => Stored::Data(d),
                    Err(frame) => match frame.into_trailers() {
                        Ok(t) => Stored::Trailers(t),
                        Err(_) => return Poll::Pending,
                    },
                },
            };
            s.frames.push(stored);
        }
        let frame = s.frames[self.next].clone();
        self.next += 1;
        Poll::Ready(Some(match frame {
            Stored::Data(d) => Ok(Frame::data(d)),
            Stored::Trailers(t) => Ok(Frame::trailers(t)),
            Stored::Error(e) => Err(e),
        }))
    }
}

/// tonic-xds's policy: retry connection errors that prove the request was
/// not sent, and trailers-only statuses in `codes`, up to `max_retries`
/// times, with a growing backoff; `grpc-previous-rpc-attempts` on retries.
#[derive(Clone)]
struct GrpcPolicy {
    codes: Arc<[tonic::Code]>,
    max_retries: u32,
    attempts: u32,
    backoff: Duration,
}

fn connection_error(err: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur = Some(err);
    while let Some(e) = cur {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            use std::io::ErrorKind::*;
            if matches!(
                io.kind(),
                ConnectionRefused | NotConnected | AddrInUse | AddrNotAvailable
            ) {
                return true;
            }
        }
        cur = e.source();
    }
    false
}

impl<B> Policy<http::Request<SharedBody>, http::Response<B>, BoxError> for GrpcPolicy {
    type Future = tokio::time::Sleep;

    fn retry(
        &mut self,
        req: &mut http::Request<SharedBody>,
        result: &mut Result<http::Response<B>, BoxError>,
    ) -> Option<Self::Future> {
        if self.attempts >= self.max_retries {
            return None;
        }
        let retryable = match result {
            Err(e) => connection_error(e.as_ref()),
            Ok(res) => tonic::Status::from_header_map(res.headers())
                .is_some_and(|s| s.code() != tonic::Code::Ok && self.codes.contains(&s.code())),
        };
        if !retryable {
            return None;
        }
        self.attempts += 1;
        let wait = self.backoff * 2u32.pow(self.attempts - 1);
        req.headers_mut().insert(
            "grpc-previous-rpc-attempts",
            http::HeaderValue::from(self.attempts),
        );
        Some(tokio::time::sleep(wait))
    }

    fn clone_request(
        &mut self,
        req: &http::Request<SharedBody>,
    ) -> Option<http::Request<SharedBody>> {
        Some(req.clone())
    }
}

/// One `tower::retry::Retry` per call, over the service polled ready.
#[derive(Clone)]
pub struct ReferenceRetry<S> {
    inner: S,
    policy: GrpcPolicy,
}

impl<S, B> Service<http::Request<tonic::body::Body>> for ReferenceRetry<S>
where
    S: Service<http::Request<SharedBody>, Response = http::Response<B>, Error = BoxError>
        + Clone
        + Send
        + 'static,
    S::Future: Send,
    B: Send + 'static,
{
    type Response = http::Response<B>;
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<http::Response<B>, BoxError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<tonic::body::Body>) -> Self::Future {
        let clone = self.inner.clone();
        let ready = std::mem::replace(&mut self.inner, clone);
        let mut retry = Retry::new(self.policy.clone(), ready);
        Box::pin(retry.call(req.map(SharedBody::new)))
    }
}

pub type ReferenceInner = tower::util::MapErr<
    tower::util::MapRequest<
        Channel,
        fn(http::Request<SharedBody>) -> http::Request<tonic::body::Body>,
    >,
    fn(tonic::transport::Error) -> BoxError,
>;

pub fn reference(channel: Channel) -> ReferenceRetry<ReferenceInner> {
    let to_tonic: fn(http::Request<SharedBody>) -> http::Request<tonic::body::Body> =
        |r| r.map(tonic::body::Body::new);
    let boxed: fn(tonic::transport::Error) -> BoxError = Into::into;
    ReferenceRetry {
        inner: tower::util::MapErr::new(tower::util::MapRequest::new(channel, to_tonic), boxed),
        policy: GrpcPolicy {
            codes: Arc::from([tonic::Code::Unavailable]),
            max_retries: 4,
            attempts: 0,
            backoff: Duration::from_millis(25),
        },
    }
}
