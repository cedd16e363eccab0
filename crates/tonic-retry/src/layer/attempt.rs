//! One attempt: send the request, and read the response until its gRPC
//! status is known or the response must be handed on as it is.
//!
//! A retry is only possible while the caller has seen nothing, so the layer
//! must learn an attempt's status before it returns the response; the
//! [module docs](super) list how, per kind of response. Every response
//! passes the [`sanitize`](crate::sanitize) guard here, so the policy sees
//! the status details and tonic never panics on them.

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Request, Response};
use http_body::Body as _;
use tonic::body::Body;
use tonic::{Code, Status};
use tower::{Service, ServiceExt};

use super::body::{Replay, RequestBody};
use super::decide::Outcome;
use super::method::ResponseKind;
use crate::boxed::BoxError;
use crate::framing::FrameCounter;
use crate::headers::{GRPC_PREVIOUS_RPC_ATTEMPTS, GRPC_STATUS, GRPC_TIMEOUT, grpc_code};
use crate::policy::Pushback;
use crate::sanitize::{sanitize_head, sanitize_status_headers, sanitized_body};

/// The inner services the layer drives, with their bounds named once: a
/// tonic HTTP service whose errors, and whose response body's errors,
/// convert into [`BoxError`]. (The public `Service` impl spells them out,
/// as a private trait cannot appear there; every such service is one.)
pub(crate) trait Inner:
    Service<Request<Body>, Response = Response<Self::ResBody>, Error: Into<BoxError>>
{
    /// The response body.
    type ResBody: http_body::Body<Data = Bytes, Error: Into<BoxError>> + Send + 'static;
}

impl<S, B> Inner for S
where
    S: Service<Request<Body>, Response = Response<B>>,
    S::Error: Into<BoxError>,
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    type ResBody = B;
}

/// What came back from one attempt.
pub(crate) enum Attempt {
    /// Committed: the caller's response, its status still to come.
    Done(Response<Body>),
    /// OK, read to its status: the caller's response.
    Succeeded {
        response: Response<Body>,
        /// Message bytes of the response.
        received: u64,
    },
    /// Failed; `response` is what the caller gets if the call stops here
    /// (`None`: the status itself, as an error).
    Failed {
        status: Status,
        pushback: Option<Pushback>,
        response: Option<Response<Body>>,
        /// Message bytes of the response read to find the status.
        received: u64,
    },
    /// The attempt's time limit passed.
    TimedOut,
}

impl Attempt {
    /// The attempt as [`decide`](super::decide::decide) sees it.
    pub(crate) fn outcome(&self) -> Outcome<'_> {
        match self {
            Attempt::Done(_) | Attempt::Succeeded { .. } => Outcome::Done,
            Attempt::Failed {
                status, pushback, ..
            } => Outcome::Failed {
                status,
                pushback: *pushback,
            },
            Attempt::TimedOut => Outcome::TimedOut,
        }
    }

    /// How the attempt ended, for metrics: its status code and the
    /// message bytes read; `None` for a committed response, whose status
    /// the caller has yet to read.
    pub(crate) fn ended(&self) -> Option<(Code, u64)> {
        match self {
            Attempt::Done(_) => None,
            Attempt::Succeeded { received, .. } => Some((Code::Ok, *received)),
            Attempt::Failed {
                status, received, ..
            } => Some((status.code(), *received)),
            Attempt::TimedOut => Some((Code::DeadlineExceeded, 0)),
        }
    }

    /// What the caller gets when the call ends with this attempt.
    pub(crate) fn into_result(self) -> Result<Response<Body>, BoxError> {
        match self {
            Attempt::Done(res)
            | Attempt::Succeeded { response: res, .. }
            | Attempt::Failed {
                response: Some(res),
                ..
            } => Ok(res),
            Attempt::Failed { status, .. } => Err(Box::new(status)),
            // `decide` fails a timed-out call with its own status.
            Attempt::TimedOut => Err(Box::new(Status::deadline_exceeded("attempt timed out"))),
        }
    }
}

/// The request of one attempt: the call's head, the retry and deadline
/// headers, and the buffered body.
pub(crate) fn request(
    mut head: http::request::Parts,
    previous: u32,
    limit: Option<Duration>,
    body: &RequestBody,
) -> Request<Body> {
    if previous > 0 {
        head.headers
            .insert(GRPC_PREVIOUS_RPC_ATTEMPTS, HeaderValue::from(previous));
    }
    if let Some(limit) = limit {
        head.headers
            .insert(GRPC_TIMEOUT, format_grpc_timeout(limit));
    }
    Request::from_parts(head, body.body())
}

/// Send `req` on `svc` within `limit`, and read the response far enough to
/// judge it.
pub(crate) async fn attempt<S: Inner>(
    svc: &mut S,
    req: Request<Body>,
    kind: ResponseKind,
    cap: usize,
    limit: Option<Duration>,
) -> Attempt {
    let send = async {
        let ready = match svc.ready().await {
            Ok(ready) => ready,
            Err(e) => return failed(Status::from_error(e.into())),
        };
        let res = match ready.call(req).await {
            Ok(res) => res,
            Err(e) => return failed(Status::from_error(e.into())),
        };
        read(res, kind, cap).await
    };
    match limit {
        Some(limit) => tokio::time::timeout(limit, send)
            .await
            .unwrap_or(Attempt::TimedOut),
        None => send.await,
    }
}

/// A failure before any response: the caller gets the status itself.
fn failed(status: Status) -> Attempt {
    Attempt::Failed {
        status,
        pushback: None,
        response: None,
        received: 0,
    }
}

/// Read a response until its status is known (see the module docs).
async fn read<B>(res: Response<B>, kind: ResponseKind, cap: usize) -> Attempt
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    let (mut head, body) = res.into_parts();
    // An HTTP error without grpc-status gets the mapped one here.
    sanitize_head(&mut head);
    if head.headers.contains_key(GRPC_STATUS) {
        // Trailers-only: the status is in the headers.
        let status = failed_status(&head.headers);
        let pushback = Pushback::from_headers(&head.headers);
        let res = Response::from_parts(head, sanitized_body(body));
        return judged(res, status, pushback, 0);
    }
    // Free for a tonic body (a `Channel`'s); another is boxed once.
    let mut body = Body::new(body);
    let mut data = VecDeque::new();
    let mut len = 0usize;
    let mut framing = FrameCounter::default();
    // `Auto`, once the first message is whole: take what is already
    // there, never wait for more (the commit rule, in `ResponseKind::Auto`).
    let mut peek = false;
    loop {
        let next = if peek {
            std::future::poll_fn(|cx| Poll::Ready(Pin::new(&mut body).poll_frame(cx))).await
        } else {
            Poll::Ready(std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await)
        };
        let Poll::Ready(next) = next else {
            // Nothing behind the first message yet: commit it, so that a
            // stream's first message reaches the caller now.
            let rest = Some(sanitized_body(body));
            return Attempt::Done(replayed(head, data, rest, None));
        };
        let frame = match next {
            Some(Ok(frame)) => frame,
            // Nothing was delivered yet, so the failure is the attempt's.
            Some(Err(e)) => return failed(e),
            // No trailers: tonic reports the missing status itself.
            None => return Attempt::Done(replayed(head, data, None, None)),
        };
        match frame.into_data() {
            Ok(d) => {
                len = len.saturating_add(d.len());
                framing.feed(&d);
                data.push_back(d);
                let commit = match kind {
                    ResponseKind::ServerStreaming => true,
                    ResponseKind::Unary => len > cap,
                    ResponseKind::Auto => len > cap || framing.more_than_one_message(),
                };
                if commit {
                    let rest = Some(sanitized_body(body));
                    return Attempt::Done(replayed(head, data, rest, None));
                }
                peek = kind == ResponseKind::Auto && framing.first_message_whole();
            }
            Err(frame) => {
                let Ok(mut trailers) = frame.into_trailers() else {
                    continue;
                };
                sanitize_status_headers(&mut trailers);
                let status = failed_status(&trailers);
                let pushback = Pushback::from_headers(&trailers)
                    .or_else(|| Pushback::from_headers(&head.headers));
                let received = framing.payload();
                let res = replayed(head, data, None, Some(trailers));
                return judged(res, status, pushback, received);
            }
        }
    }
}

/// The status in a header block, unless it is OK. An OK code is
/// recognised without building a `Status` (which copies the whole block).
fn failed_status(headers: &HeaderMap) -> Option<Status> {
    if grpc_code(headers) == Some(Code::Ok) {
        return None;
    }
    Status::from_header_map(headers).filter(|s| s.code() != Code::Ok)
}

fn judged(
    res: Response<Body>,
    status: Option<Status>,
    pushback: Option<Pushback>,
    received: u64,
) -> Attempt {
    match status {
        None => Attempt::Succeeded {
            response: res,
            received,
        },
        Some(status) => Attempt::Failed {
            status,
            pushback,
            response: Some(res),
            received,
        },
    }
}

fn replayed(
    head: http::response::Parts,
    data: VecDeque<Bytes>,
    rest: Option<Body>,
    trailers: Option<HeaderMap>,
) -> Response<Body> {
    let body = Replay {
        data,
        rest,
        trailers,
        error: None,
    };
    Response::from_parts(head, body.into_body())
}

/// Parse a `grpc-timeout` header (`1*8DIGIT unit`); garbage is ignored.
pub(crate) fn parse_grpc_timeout(headers: &HeaderMap) -> Option<Duration> {
    let s = headers.get(GRPC_TIMEOUT)?.to_str().ok()?;
    if s.len() < 2 || s.len() > 9 {
        return None;
    }
    let (digits, unit) = s.split_at(s.len() - 1);
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    // At most 8 digits: no unit below overflows.
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n * 3600),
        "M" => Duration::from_secs(n * 60),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

/// Format a `grpc-timeout` header: the finest unit that fits in 8 digits.
pub(crate) fn format_grpc_timeout(d: Duration) -> HeaderValue {
    const MAX: u128 = 99_999_999;
    let s = if d.as_micros() <= MAX {
        format!("{}u", d.as_micros())
    } else if d.as_millis() <= MAX {
        format!("{}m", d.as_millis())
    } else if u128::from(d.as_secs()) <= MAX {
        format!("{}S", d.as_secs())
    } else {
        format!("{}H", (d.as_secs() / 3600).min(99_999_999))
    };
    HeaderValue::try_from(s).unwrap_or(HeaderValue::from_static("99999999H"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::FutureExt;
    use std::task::Context;

    /// One gRPC message frame: flag, length, bytes.
    fn frame(msg: &[u8]) -> Bytes {
        let mut f = vec![0];
        f.extend((msg.len() as u32).to_be_bytes());
        f.extend(msg);
        Bytes::from(f)
    }

    /// A body that has nothing more yet (a stream's second message not sent).
    struct Later;

    impl http_body::Body for Later {
        type Data = Bytes;
        type Error = Status;
        fn poll_frame(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<http_body::Frame<Bytes>, Status>>> {
            Poll::Pending
        }
    }

    fn response(trailers: Option<HeaderMap>, later: bool) -> Response<Body> {
        let body = Replay {
            data: [frame(b"one")].into(),
            rest: later.then(|| Body::new(Later)),
            trailers,
            error: None,
        };
        Response::new(body.into_body())
    }

    fn unavailable() -> HeaderMap {
        let mut t = HeaderMap::new();
        t.insert(GRPC_STATUS, HeaderValue::from_static("14"));
        t
    }

    /// The commit rule: a message with its trailers already there is a
    /// unary call, judged by its status; a message with nothing behind it
    /// is committed at once under `Auto`, and waited on under `Unary`.
    #[test]
    fn auto_judges_what_is_there_and_never_waits() {
        let cap = 1 << 20;
        for kind in [ResponseKind::Auto, ResponseKind::Unary] {
            let judged = read(response(Some(unavailable()), false), kind, cap).now_or_never();
            match judged {
                Some(Attempt::Failed { status, .. }) => {
                    assert_eq!(status.code(), Code::Unavailable, "{kind:?}")
                }
                _ => panic!("{kind:?}: not judged by its trailers"),
            }
        }
        let auto = read(response(None, true), ResponseKind::Auto, cap).now_or_never();
        assert!(
            matches!(auto, Some(Attempt::Done(_))),
            "Auto commits at once"
        );
        let unary = read(response(None, true), ResponseKind::Unary, cap).now_or_never();
        assert!(unary.is_none(), "Unary waits for the trailers");
        let stream = read(response(None, true), ResponseKind::ServerStreaming, cap);
        assert!(matches!(stream.now_or_never(), Some(Attempt::Done(_))));
    }

    #[test]
    fn timeout_header_roundtrip_and_garbage() {
        for d in [
            Duration::from_micros(1),
            Duration::from_millis(1500),
            Duration::from_secs(1000),
            Duration::from_secs(10_000_000),
            Duration::MAX,
        ] {
            let mut h = HeaderMap::new();
            h.insert(GRPC_TIMEOUT, format_grpc_timeout(d));
            let back = parse_grpc_timeout(&h).unwrap();
            assert!(back <= d, "{d:?} {back:?}");
            if d < Duration::from_secs(100_000_000) {
                assert!(d - back < Duration::from_secs(1), "{d:?} {back:?}");
            }
        }
        for bad in ["", "m", "12x", "-1m", "123456789m", "1.5S", "ümm"] {
            let mut h = HeaderMap::new();
            if let Ok(v) = HeaderValue::from_str(bad) {
                h.insert(GRPC_TIMEOUT, v);
            }
            assert_eq!(parse_grpc_timeout(&h), None, "{bad}");
        }
    }

    #[test]
    fn pushback_parsing() {
        let mut h = HeaderMap::new();
        assert_eq!(Pushback::from_headers(&h), None);
        for (v, want) in [
            ("250", Some(Pushback::After(Duration::from_millis(250)))),
            ("-1", Some(Pushback::Stop)),
            ("soon", Some(Pushback::Stop)),
        ] {
            h.insert("grpc-retry-pushback-ms", HeaderValue::from_static(v));
            assert_eq!(Pushback::from_headers(&h), want, "{v}");
        }
    }
}
