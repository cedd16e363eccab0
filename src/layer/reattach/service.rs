//! [`ReattachLayer`] and its [`ReattachService`]: which calls become
//! reattachable executions, and how a caller's request is turned into a
//! driver (see the module docs of [`super`]).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::header::{CONTENT_TYPE, HeaderValue};
use http_body::Body;
use tonic::Status;
use tonic::metadata::MetadataMap;
use tower::{Layer, Service, ServiceExt};

use super::body::{ExecBody, ForwardedBody};
use super::frame::{self, RequestBody};
use super::raw::{self, Item, Parts, to_status, transport_failure};
use super::released::CallerReleases;
use super::wire;
use super::{EXECUTE_PLAN, REATTACH_EXECUTE, RELEASE_EXECUTE, Releases};
use crate::connect::conn_string::DEFAULT_MAX_MESSAGE_SIZE;
use crate::reattach::ReattachOptions;
use crate::retrying::{PySparkRetrying, Retrying};
use crate::transport::{BoxError, GrpcChannel, grpc_channel};

/// A tower layer that makes every `ExecutePlan` through it a reattachable
/// execution (see [`crate::layer`]).
///
/// Each such response carries a
/// [`StreamStatsHandle`](crate::reattach::StreamStatsHandle) in its
/// extensions (`tonic::Response::extensions`): what the execution went
/// through so far (reattaches, graceful ends, stalls, retries), live while
/// its body is read, for a program that reports it (the guard's metrics).
#[derive(Debug, Clone)]
#[must_use]
pub struct ReattachLayer {
    retrying: Retrying,
    options: ReattachOptions,
    releases: Releases,
    max_message_size: usize,
}

impl Default for ReattachLayer {
    fn default() -> Self {
        ReattachLayer {
            retrying: Retrying::pyspark(),
            options: ReattachOptions::default(),
            releases: Releases::Own,
            max_message_size: DEFAULT_MAX_MESSAGE_SIZE,
        }
    }
}

impl ReattachLayer {
    /// PySpark's retry policy, deadlines and stall detection; the layer
    /// sends its own releases.
    pub fn new() -> Self {
        Self::default()
    }

    /// The retry policy of every execution (default: PySpark's).
    pub fn retrying(mut self, retrying: Retrying) -> Self {
        self.retrying = retrying;
        self
    }

    /// Segment deadlines and stall detection (default:
    /// [`ReattachOptions::default`]). Checked by [`layer`](Layer::layer)'s
    /// service on each call: an unusable value fails the call.
    pub fn options(mut self, options: ReattachOptions) -> Self {
        self.options = options;
        self
    }

    /// Who releases the server's buffered responses (default [`Releases::Own`]).
    pub fn releases(mut self, releases: Releases) -> Self {
        self.releases = releases;
        self
    }

    /// The largest request or response message read (default
    /// 128 MiB, as a session's); a larger one fails the call.
    pub fn max_message_size(mut self, bytes: usize) -> Self {
        self.max_message_size = bytes;
        self
    }
}

impl<S, B> Layer<S> for ReattachLayer
where
    S: Service<http::Request<tonic::body::Body>, Response = http::Response<B>>
        + Clone
        + Send
        + Sync
        + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    type Service = ReattachService;

    fn layer(&self, inner: S) -> ReattachService {
        ReattachService {
            inner: grpc_channel(inner),
            config: self.clone(),
            caller_releases: CallerReleases::default(),
        }
    }
}

/// The service [`ReattachLayer`] makes: `ExecutePlan` and `ReattachExecute`
/// are carried as reattachable executions, every other call is forwarded.
#[derive(Clone)]
pub struct ReattachService {
    inner: GrpcChannel,
    config: ReattachLayer,
    caller_releases: CallerReleases,
}

impl std::fmt::Debug for ReattachService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReattachService")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

type Response = http::Response<tonic::body::Body>;

#[derive(Clone, Copy)]
enum Kind {
    Execute,
    Reattach,
}

impl Service<http::Request<tonic::body::Body>> for ReattachService {
    type Response = Response;
    type Error = Status;
    type Future = Pin<Box<dyn Future<Output = Result<Response, Status>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Status>> {
        // Each call waits for the inner service's readiness itself.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<tonic::body::Body>) -> Self::Future {
        let kind = match req.uri().path() {
            EXECUTE_PLAN => Kind::Execute,
            REATTACH_EXECUTE => Kind::Reattach,
            RELEASE_EXECUTE => {
                let this = self.clone();
                return Box::pin(async move {
                    Ok(this
                        .release(req)
                        .await
                        .unwrap_or_else(|status| status.into_http()))
                });
            }
            _ => return Box::pin(forward(self.inner.clone(), req)),
        };
        let this = self.clone();
        Box::pin(async move {
            Ok(this
                .execute(kind, req)
                .await
                .unwrap_or_else(|status| status.into_http()))
        })
    }
}

/// A call the layer does not carry, sent on as it came: the server's
/// answer as it came, except that a transport failure of the layer's hop
/// (the connection broke, was refused or reset, before the server's
/// status) reaches the caller as UNAVAILABLE ([`ForwardedBody`] for a
/// break under the body), as grpc-core reports it, not as tonic's UNKNOWN.
async fn forward(
    inner: GrpcChannel,
    req: http::Request<tonic::body::Body>,
) -> Result<Response, Status> {
    match inner.oneshot(req).await {
        Ok(response) => Ok(response.map(|b| tonic::body::Body::new(ForwardedBody::new(b)))),
        Err(status) => Err(transport_failure(&status).unwrap_or(status)),
    }
}

/// Request headers not copied onto the layer's own requests: the ones
/// tonic sets per call, the caller's deadline for the whole stream (each
/// segment has its own), and compression (the layer reads plain bytes).
const NOT_COPIED: [&str; 8] = [
    "te",
    "content-type",
    "content-length",
    "connection",
    "host",
    "grpc-timeout",
    "grpc-encoding",
    "grpc-accept-encoding",
];

impl ReattachService {
    /// The caller's own `ReleaseExecute`: noted for the drivers of its
    /// operation ([`super::released`]), then forwarded as it came. One the
    /// layer cannot read (compressed, malformed) is forwarded unnoted, for
    /// the server to answer.
    async fn release(self, req: http::Request<tonic::body::Body>) -> Result<Response, Status> {
        let (parts, body) = req.into_parts();
        let raw = match frame::read_request(body, self.config.max_message_size).await? {
            RequestBody::Message(msg) => {
                if let Ok((session_id, operation_id)) = wire::release_ids(&msg) {
                    self.caller_releases.release(&session_id, &operation_id);
                }
                frame::framed(&msg)
            }
            RequestBody::Compressed(raw) => raw,
        };
        let body = tonic::body::Body::new(http_body_util::Full::new(raw));
        forward(self.inner, http::Request::from_parts(parts, body)).await
    }

    async fn execute(
        self,
        kind: Kind,
        req: http::Request<tonic::body::Body>,
    ) -> Result<Response, Status> {
        let (parts, body) = req.into_parts();
        let msg = match frame::read_request(body, self.config.max_message_size).await? {
            RequestBody::Message(msg) => msg,
            RequestBody::Compressed(raw) => {
                // Not readable here: forwarded as it came.
                let body = tonic::body::Body::new(http_body_util::Full::new(raw));
                let req = http::Request::from_parts(parts, body);
                return forward(self.inner.clone(), req).await;
            }
        };
        let head = match kind {
            Kind::Execute => wire::execute_head(&msg),
            Kind::Reattach => wire::reattach_head(&msg),
        }
        .map_err(|e| Status::invalid_argument(e.to_string()))?;
        if matches!(kind, Kind::Execute) && head.reattachable == Some(false) {
            // The caller asked for a plain execution.
            let body = tonic::body::Body::new(http_body_util::Full::new(frame::framed(&msg)));
            let req = http::Request::from_parts(parts, body);
            return forward(self.inner.clone(), req).await;
        }
        self.config.options.check().map_err(to_status)?;
        let mut headers = parts.headers;
        for name in NOT_COPIED {
            headers.remove(name);
        }
        let driver_parts = Parts {
            grpc: tonic::client::Grpc::new(self.inner.clone())
                .max_decoding_message_size(self.config.max_message_size)
                .max_encoding_message_size(self.config.max_message_size),
            metadata: MetadataMap::from_headers(headers),
            retrying: self.config.retrying.clone(),
            options: self.config.options.clone(),
            releases: self.config.releases,
            caller_releases: self.caller_releases.clone(),
        };
        let driver = match kind {
            Kind::Execute => raw::execute(&msg, head, driver_parts),
            Kind::Reattach => raw::resume(msg, head, driver_parts),
        }
        .map_err(to_status)?;
        let mut driver = Box::new(driver);
        let first = raw::next(&mut driver).await;
        if let Item::Error(status) = first {
            return Err(status);
        }
        let headers = response_headers(driver.transport_mut().take_first_headers());
        let stats = driver.stats().clone();
        let mut response =
            http::Response::new(tonic::body::Body::new(ExecBody::new(driver, first)));
        *response.headers_mut() = headers;
        response.extensions_mut().insert(stats);
        Ok(response)
    }
}

/// The caller's response headers: the first segment's, as gRPC expects them.
fn response_headers(first: Option<MetadataMap>) -> http::HeaderMap {
    let mut headers = first.map(MetadataMap::into_headers).unwrap_or_default();
    for name in [
        "content-type",
        "content-length",
        "grpc-status",
        "grpc-message",
        "grpc-status-details-bin",
    ] {
        headers.remove(name);
    }
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    headers
}
