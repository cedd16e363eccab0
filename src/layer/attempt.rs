//! One attempt's outcome, and reading a response far enough to judge it.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Response, StatusCode};
use http_body::Body as _;
use tonic::body::Body;
use tonic::{Code, Status};

use super::body::{BufferedBody, Chunks, RetryBody, more_than_one_message};
use super::future::{BoxError, polled_after_completion};
use super::layer::ResponseKind;
use crate::headers::{GRPC_RETRY_PUSHBACK_MS as PUSHBACK, scan_status};
use crate::sanitize::{sanitize_status_headers, sanitized_body};

/// `grpc-retry-pushback-ms`, parsed per gRFC A6.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pushback {
    /// Retry after exactly this long.
    After(Duration),
    /// Negative or unparseable: do not retry.
    Stop,
}

pub(crate) fn pushback(headers: &HeaderMap) -> Option<Pushback> {
    let v = headers.get(PUSHBACK)?;
    let ms = v.to_str().ok().and_then(|s| s.trim().parse::<i64>().ok());
    Some(match ms {
        Some(ms) if ms >= 0 => Pushback::After(Duration::from_millis(ms as u64)),
        _ => Pushback::Stop,
    })
}

/// What to hand the caller if the loop stops after this attempt.
// The response is the common variant; boxing it would add back the
// allocation an inline `RetryBody` saves.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Deliver {
    /// The server's response, replayed from the buffer (tonic reads its status).
    Response(Response<RetryBody>),
    /// A status for tonic to return as is (transport failures, deadlines).
    Error(Status),
}

impl Deliver {
    pub(crate) fn into_result(self) -> Result<Response<RetryBody>, BoxError> {
        match self {
            Deliver::Response(r) => Ok(r),
            Deliver::Error(s) => Err(Box::new(s)),
        }
    }
}

pub(crate) enum Outcome {
    /// Success, or a committed response: delivered as is.
    Done(Response<RetryBody>),
    /// A failed attempt.
    Failed {
        status: Status,
        pushback: Option<Pushback>,
        deliver: Deliver,
    },
    /// The layer's own timer fired.
    TimedOut,
}

/// A failure before any response: the same conversion tonic's client
/// applies, so the source chain (ConnectError, hyper, h2, io) survives for
/// classify_failure.
pub(crate) fn transport_failure(e: BoxError) -> Outcome {
    let status = Status::from_error(e);
    Outcome::Failed {
        status: status.clone(),
        pushback: None,
        deliver: Deliver::Error(status),
    }
}

/// The gRPC mapping of HTTP status codes, for responses without `grpc-status`
/// (e.g. a proxy's 503), so the policy sees what tonic would report.
fn code_from_http(status: StatusCode) -> Code {
    match status {
        StatusCode::BAD_REQUEST => Code::Internal,
        StatusCode::UNAUTHORIZED => Code::Unauthenticated,
        StatusCode::FORBIDDEN => Code::PermissionDenied,
        StatusCode::NOT_FOUND => Code::Unimplemented,
        StatusCode::TOO_MANY_REQUESTS
        | StatusCode::BAD_GATEWAY
        | StatusCode::SERVICE_UNAVAILABLE
        | StatusCode::GATEWAY_TIMEOUT => Code::Unavailable,
        _ => Code::Unknown,
    }
}

fn rebuild(
    parts: http::response::Parts,
    data: Chunks,
    rest: Option<Body>,
    trailers: Option<HeaderMap>,
) -> Response<RetryBody> {
    Response::from_parts(
        parts,
        RetryBody::buffered(BufferedBody::new(data, rest, trailers, None)),
    )
}

/// Sanitize a header block ([`sanitize_status_headers`]) and tell whether
/// its `grpc-status` is OK (`None`: no status), in one pass when the block
/// is small and carries no details.
fn status_ok(headers: &mut HeaderMap) -> Option<bool> {
    let scan = scan_status(headers);
    if scan.details && sanitize_status_headers(headers) {
        // Replaced by INTERNAL.
        return Some(false);
    }
    scan.ok
}

/// Finds an attempt's status without delivering anything to the caller:
/// from trailers-only headers, or from the trailers after a buffered unary
/// message. A response that cannot be judged before data must flow is
/// committed.
///
/// The response is sanitized ([`sanitize_status_headers`]) here: its
/// headers at once, its trailers when read; a body handed on unread is
/// wrapped in the sanitizing body. Same result as `sanitize_response`
/// first, without boxing a buffered unary response twice.
///
/// A hand-written future (no `async` block), so that the retry service's
/// response future can hold it inline for the first attempt.
// The large variant is the common one, held inline on purpose.
#[allow(clippy::large_enum_variant)]
pub(crate) enum ReadResponse {
    /// Judged from the headers alone (a trailers-only or non-200 response,
    /// which is rare); taken on the first poll. Boxed, so that the common
    /// state sets the size of every call's future.
    Judged(Option<Box<Outcome>>),
    /// Reading the body up to its trailers.
    Reading {
        parts: Option<http::response::Parts>,
        body: Body,
        data: Chunks,
        len: usize,
        kind: ResponseKind,
        cap: usize,
    },
}

impl ReadResponse {
    pub(crate) fn new<B>(res: Response<B>, kind: ResponseKind, cap: usize) -> Self
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<BoxError>,
    {
        let (mut parts, body) = res.into_parts();
        // Trailers-only response.
        if let Some(ok) = status_ok(&mut parts.headers) {
            return judged_from_headers(parts, body, ok);
        }
        if parts.status != StatusCode::OK {
            return not_grpc(parts, body);
        }
        ReadResponse::Reading {
            parts: Some(parts),
            // Free for a tonic `Body` (a `Channel`'s): tonic unwraps it
            // instead of boxing it again. Other bodies are boxed once, which
            // also makes them `Unpin`.
            body: Body::new(body),
            data: Chunks::default(),
            len: 0,
            kind,
            cap,
        }
    }
}

/// A trailers-only response: judged from its headers. An OK one is passed
/// on without building a Status (which copies every header into its
/// metadata).
#[cold]
#[inline(never)]
fn judged_from_headers<B>(parts: http::response::Parts, body: B, ok: bool) -> ReadResponse
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    let status = (!ok)
        .then(|| Status::from_header_map(&parts.headers))
        .flatten();
    let res = Response::from_parts(parts, RetryBody::passed(body));
    let Some(status) = status.filter(|s| s.code() != Code::Ok) else {
        return ReadResponse::Judged(Some(Box::new(Outcome::Done(res))));
    };
    let pushback = pushback(res.headers());
    ReadResponse::Judged(Some(Box::new(Outcome::Failed {
        status,
        pushback,
        deliver: Deliver::Response(res),
    })))
}

/// A non-200 response without `grpc-status` (a proxy's error page).
#[cold]
#[inline(never)]
fn not_grpc<B>(parts: http::response::Parts, body: B) -> ReadResponse
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    let status = Status::new(
        code_from_http(parts.status),
        format!(
            "grpc-status header missing, mapped from HTTP status code {}",
            parts.status.as_u16()
        ),
    );
    ReadResponse::Judged(Some(Box::new(Outcome::Failed {
        status,
        pushback: None,
        deliver: Deliver::Response(Response::from_parts(parts, RetryBody::passed(body))),
    })))
}

/// A body error before anything was delivered: the attempt's failure (the
/// conversion tonic's body applies to a body error).
#[cold]
#[inline(never)]
fn body_failed(e: BoxError) -> Outcome {
    let e = Status::from_error(e);
    Outcome::Failed {
        status: e.clone(),
        pushback: None,
        deliver: Deliver::Error(e),
    }
}

/// Trailers whose `grpc-status` is not OK: a failed attempt, unless tonic
/// would read them as OK after all.
#[cold]
#[inline(never)]
fn failed_trailers(parts: http::response::Parts, data: Chunks, trailers: HeaderMap) -> Outcome {
    let Some(status) = Status::from_header_map(&trailers).filter(|s| s.code() != Code::Ok) else {
        return Outcome::Done(rebuild(parts, data, None, Some(trailers)));
    };
    let pb = pushback(&trailers).or_else(|| pushback(&parts.headers));
    Outcome::Failed {
        status,
        pushback: pb,
        deliver: Deliver::Response(rebuild(parts, data, None, Some(trailers))),
    }
}

/// A response that cannot be judged before data must flow: committed, its
/// buffered start replayed before the unread rest.
#[inline(never)]
fn committed(parts: http::response::Parts, data: Chunks, body: Body) -> Outcome {
    Outcome::Done(rebuild(parts, data, Some(sanitized_body(body)), None))
}

impl Future for ReadResponse {
    type Output = Outcome;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Outcome> {
        let (parts, body, data, len, kind, cap) = match &mut *self {
            ReadResponse::Judged(outcome) => {
                let outcome = outcome.take().unwrap_or_else(|| polled_after_completion());
                return Poll::Ready(*outcome);
            }
            ReadResponse::Reading {
                parts,
                body,
                data,
                len,
                kind,
                cap,
            } => (parts, body, data, len, *kind, *cap),
        };
        loop {
            let frame = match std::task::ready!(Pin::new(&mut *body).poll_frame(cx)) {
                // No trailers: tonic reports the missing status itself (Ambiguous).
                None => {
                    let parts = parts.take().unwrap_or_else(|| polled_after_completion());
                    return Poll::Ready(Outcome::Done(rebuild(
                        parts,
                        std::mem::take(data),
                        None,
                        None,
                    )));
                }
                // Nothing was delivered yet, so the failure is the attempt's.
                Some(Err(e)) => return Poll::Ready(body_failed(e.into())),
                Some(Ok(frame)) => frame,
            };
            match frame.into_data() {
                Ok(d) => {
                    *len = len.saturating_add(d.len());
                    data.push(d);
                    let commit = match kind {
                        ResponseKind::ServerStreaming => true,
                        ResponseKind::Unary => *len > cap,
                        ResponseKind::Auto => *len > cap || more_than_one_message(data),
                    };
                    if commit {
                        let parts = parts.take().unwrap_or_else(|| polled_after_completion());
                        let (data, body) = (std::mem::take(data), std::mem::take(body));
                        return Poll::Ready(committed(parts, data, body));
                    }
                }
                Err(frame) => {
                    let Ok(mut trailers) = frame.into_trailers() else {
                        continue;
                    };
                    let parts = parts.take().unwrap_or_else(|| polled_after_completion());
                    let data = std::mem::take(data);
                    // The common case, OK, needs no Status at all.
                    if status_ok(&mut trailers) == Some(false) {
                        return Poll::Ready(failed_trailers(parts, data, trailers));
                    }
                    return Poll::Ready(Outcome::Done(rebuild(parts, data, None, Some(trailers))));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    #[test]
    fn pushback_parsing() {
        let mut h = HeaderMap::new();
        assert_eq!(pushback(&h), None);
        h.insert(PUSHBACK, HeaderValue::from_static("250"));
        assert_eq!(
            pushback(&h),
            Some(Pushback::After(Duration::from_millis(250)))
        );
        h.insert(PUSHBACK, HeaderValue::from_static("-1"));
        assert_eq!(pushback(&h), Some(Pushback::Stop));
        h.insert(PUSHBACK, HeaderValue::from_static("soon"));
        assert_eq!(pushback(&h), Some(Pushback::Stop));
    }
}
