//! Guards on every response before tonic reads it: malformed
//! `grpc-status-details-bin` headers, and HTTP errors without a gRPC status.
//!
//! tonic 0.14 **panics** when a server sends a `grpc-status-details-bin`
//! header or trailer that is not valid base64 (upstream grpc/grpc-rust#2618),
//! inside the call future or inside `Streaming::message()`. A buggy or hostile
//! server could crash the caller. [`SanitizeLayer`] sits between the channel
//! and tonic's codec, checks that header in response headers and trailers, and
//! when it is not base64 replaces the status with a non-retryable `INTERNAL`
//! whose message names the problem and the original code. Valid headers pass
//! through untouched, padded or not.
//!
//! A load balancer that refuses a call itself (nginx `return 503`, HAProxy
//! with no server up, a 504 after its own timeout, a 429 from a rate
//! limiter) answers with an HTTP status, an HTML body and no `grpc-status`.
//! tonic decodes that body as gRPC frames and fails with a non-retryable
//! `INTERNAL`, so a retry policy never sees the status gRPC prescribes. The
//! guard gives such a response the `grpc-status` of gRPC's HTTP-to-gRPC
//! mapping (`doc/http-grpc-status-mapping.md`), so tonic and the retry layer
//! read it as a trailers-only status and never touch the body:
//!
//! | HTTP | gRPC |
//! |---|---|
//! | 400 | INTERNAL |
//! | 401 | UNAUTHENTICATED |
//! | 403 | PERMISSION_DENIED |
//! | 404 | UNIMPLEMENTED |
//! | 429, 502, 503, 504 | UNAVAILABLE |
//! | any other non-200 | UNKNOWN |
//!
//! A response that carries `grpc-status` (a gRPC server's own error, even
//! over an HTTP error status) is left as it is.
//!
//! Every channel this crate builds is wrapped in it, and the tower retry
//! layer applies it too.
//!
//! ```
//! use tower::ServiceBuilder;
//! use tonic_retry::sanitize::SanitizeLayer;
//!
//! # fn wrap(channel: tonic::transport::Channel) {
//! let svc = ServiceBuilder::new().layer(SanitizeLayer).service(channel);
//! // Any generated client takes it: `EchoClient::new(svc)`; here tonic's own.
//! let client = tonic::client::Grpc::new(svc);
//! # let _ = client;
//! # }
//! ```

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use base64::Engine;
use base64::engine::general_purpose::GeneralPurpose;
use base64::engine::{DecodePaddingMode, GeneralPurposeConfig};
use bytes::Bytes;
use http::{HeaderMap, HeaderValue, StatusCode};
use http_body::{Body, Frame};
use tonic::Code;
use tower::Layer;
use tower::Service;

use crate::boxed::BoxError;
use crate::headers::{GRPC_MESSAGE, GRPC_STATUS, GRPC_STATUS_DETAILS as DETAILS};

/// The base64 engine gRPC uses for binary metadata (`-bin` keys): standard
/// alphabet, padding optional.
pub const GRPC_BASE64: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    GeneralPurposeConfig::new()
        .with_encode_padding(false)
        .with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// Replaces an undecodable `grpc-status-details-bin` with a non-retryable
/// INTERNAL status. Returns `true` if it changed anything.
pub(crate) fn sanitize_status_headers(headers: &mut HeaderMap) -> bool {
    let Some(value) = headers.get(DETAILS) else {
        return false;
    };
    if GRPC_BASE64.decode(value.as_bytes()).is_ok() {
        return false;
    }
    let original = headers
        .get(GRPC_STATUS)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("none")
        .to_owned();
    headers.remove(DETAILS);
    headers.insert(GRPC_STATUS, HeaderValue::from_static("13"));
    let message = format!(
        "malformed grpc-status-details-bin from server (not base64); original grpc-status {}",
        original.escape_default()
    );
    match HeaderValue::from_str(&message) {
        Ok(v) => headers.insert(GRPC_MESSAGE, v),
        Err(_) => headers.insert(
            GRPC_MESSAGE,
            HeaderValue::from_static("malformed grpc-status-details-bin from server (not base64)"),
        ),
    };
    tracing::warn!(original_status = %original, "server sent a grpc-status-details-bin that is not base64");
    true
}

/// gRPC's code for an HTTP status that came without `grpc-status`.
fn code_for_http(status: StatusCode) -> Code {
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

/// Gives a non-200 response without `grpc-status` the status of gRPC's
/// HTTP-to-gRPC mapping, as a trailers-only response. Returns `true` if it
/// changed anything.
fn map_http_error(status: StatusCode, headers: &mut HeaderMap) -> bool {
    if status == StatusCode::OK || headers.contains_key(GRPC_STATUS) {
        return false;
    }
    let code = code_for_http(status);
    headers.insert(GRPC_STATUS, HeaderValue::from(code as i32));
    let message = format!(
        "HTTP {} without grpc-status (answered by a proxy or load balancer)",
        status.as_u16()
    );
    if let Ok(v) = HeaderValue::from_str(&message) {
        headers.insert(GRPC_MESSAGE, v);
    }
    true
}

/// Both guards on a response head: the status an HTTP error maps to, and a
/// malformed `grpc-status-details-bin` replaced.
pub(crate) fn sanitize_head(head: &mut http::response::Parts) {
    map_http_error(head.status, &mut head.headers);
    sanitize_status_headers(&mut head.headers);
}

/// Layer producing [`Sanitize`].
#[derive(Debug, Clone, Copy, Default)]
pub struct SanitizeLayer;

impl<S> Layer<S> for SanitizeLayer {
    type Service = Sanitize<S>;
    fn layer(&self, inner: S) -> Self::Service {
        Sanitize { inner }
    }
}

/// Checks `grpc-status-details-bin` in response headers and trailers, and
/// maps an HTTP error without `grpc-status` (see the [module docs](self)).
#[derive(Debug, Clone)]
pub struct Sanitize<S> {
    inner: S,
}

impl<S> Sanitize<S> {
    /// Wrap `inner`.
    pub fn new(inner: S) -> Self {
        Sanitize { inner }
    }
    /// The wrapped service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }
}

impl<S, ReqBody, ResBody> Service<http::Request<ReqBody>> for Sanitize<S>
where
    S: Service<http::Request<ReqBody>, Response = http::Response<ResBody>>,
    ResBody: Body<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<BoxError>,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = S::Error;
    type Future = SanitizeFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<ReqBody>) -> Self::Future {
        SanitizeFuture {
            inner: self.inner.call(req),
        }
    }
}

/// The response future, public only as [`Sanitize`]'s `Service::Future`
/// (a private module keeps it out of the crate's paths).
mod future {
    pin_project_lite::pin_project! {
        /// Response future of [`Sanitize`](super::Sanitize).
        pub struct SanitizeFuture<F> {
            #[pin]
            pub(super) inner: F,
        }
    }
}
use future::SanitizeFuture;

impl<F, B, E> Future for SanitizeFuture<F>
where
    F: Future<Output = Result<http::Response<B>, E>>,
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    type Output = Result<http::Response<tonic::body::Body>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let res = std::task::ready!(self.project().inner.poll(cx))?;
        Poll::Ready(Ok(sanitize_response(res, sanitized_body)))
    }
}

/// Sanitize one response: its headers now, its trailers as they arrive in
/// the body `wrap` builds (one that sanitizes them, [`sanitized_body`]).
pub(crate) fn sanitize_response<B, T>(
    res: http::Response<B>,
    wrap: impl FnOnce(B) -> T,
) -> http::Response<T> {
    let (mut parts, body) = res.into_parts();
    sanitize_head(&mut parts);
    http::Response::from_parts(parts, wrap(body))
}

/// A body whose trailers will be sanitized as they arrive, as a tonic body.
pub(crate) fn sanitized_body<B>(body: B) -> tonic::body::Body
where
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    tonic::body::Body::new(SanitizedBody { inner: body })
}

pin_project_lite::pin_project! {
    /// A body whose trailers are checked by `sanitize_status_headers`.
    struct SanitizedBody<B> {
        #[pin]
        inner: B,
    }
}

impl<B> Body for SanitizedBody<B>
where
    B: Body<Data = Bytes>,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        match std::task::ready!(self.project().inner.poll_frame(cx)) {
            Some(Ok(mut frame)) => {
                if let Some(trailers) = frame.trailers_mut() {
                    sanitize_status_headers(trailers);
                }
                Poll::Ready(Some(Ok(frame)))
            }
            other => Poll::Ready(other),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_http_error_without_grpc_status_gets_the_mapped_status() {
        for (http, code) in [
            (400, Code::Internal),
            (401, Code::Unauthenticated),
            (403, Code::PermissionDenied),
            (404, Code::Unimplemented),
            (429, Code::Unavailable),
            (502, Code::Unavailable),
            (503, Code::Unavailable),
            (504, Code::Unavailable),
            (500, Code::Unknown),
            (302, Code::Unknown),
        ] {
            let http = StatusCode::from_u16(http).unwrap();
            let mut h = HeaderMap::new();
            h.insert("content-type", HeaderValue::from_static("text/html"));
            assert!(map_http_error(http, &mut h), "HTTP {http}");
            let status = tonic::Status::from_header_map(&h).expect("a status");
            assert_eq!(status.code(), code, "HTTP {http}");
            assert!(status.message().contains(&http.as_u16().to_string()));
        }
    }

    #[test]
    fn a_grpc_answer_keeps_its_own_status() {
        let mut h = HeaderMap::new();
        assert!(!map_http_error(StatusCode::OK, &mut h));
        assert!(h.is_empty());
        // A gRPC server's own error, even over an HTTP error status.
        h.insert("grpc-status", HeaderValue::from_static("8"));
        assert!(!map_http_error(StatusCode::SERVICE_UNAVAILABLE, &mut h));
        assert_eq!(h.get("grpc-status").unwrap(), "8");
    }

    #[test]
    fn valid_details_untouched_invalid_replaced() {
        let mut h = HeaderMap::new();
        h.insert("grpc-status", HeaderValue::from_static("14"));
        h.insert(DETAILS, HeaderValue::from_static("CAMSBWhlbGxv"));
        assert!(!sanitize_status_headers(&mut h));
        h.insert(DETAILS, HeaderValue::from_static("CA")); // unpadded is fine
        assert!(!sanitize_status_headers(&mut h));
        h.insert(DETAILS, HeaderValue::from_static("!!!not-base64!!!"));
        assert!(sanitize_status_headers(&mut h));
        assert_eq!(h.get("grpc-status").unwrap(), "13");
        assert!(h.get(DETAILS).is_none());
        let msg = h.get("grpc-message").unwrap().to_str().unwrap();
        assert!(msg.contains("not base64") && msg.contains("14"), "{msg}");
    }
}
