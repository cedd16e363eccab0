//! A type-erased gRPC channel, so code that drives calls (a retry loop, a
//! resumable stream) and users' own stacks (a plain tonic `Channel`, the
//! retry layer, interceptors) all meet in one non-generic client type.

use bytes::Bytes;
use http_body::Body;
use tower::Service;
use tower::util::BoxCloneSyncService;
use tower::{Layer, ServiceBuilder, ServiceExt};

use crate::request_error::RequestErrorLayer;
use crate::sanitize::SanitizeLayer;

pub use crate::boxed::BoxError;

/// Any HTTP/2 service that can carry gRPC, boxed. Transport errors are
/// already `tonic::Status` values (made by `Status::from_error`, which keeps
/// the error as the status' source, so `crate::policy::classify_failure`
/// still sees the chain).
pub type GrpcChannel = BoxCloneSyncService<
    http::Request<tonic::body::Body>,
    http::Response<tonic::body::Body>,
    tonic::Status,
>;

/// Box `service` (for example a tonic `Channel`) into a [`GrpcChannel`],
/// guarded by [`SanitizeLayer`] against tonic's panic on malformed status
/// details and against HTTP errors without a gRPC status (mapped as gRPC
/// prescribes), and by `RequestErrorLayer` so that a request tonic cannot
/// encode fails with its own status.
pub fn grpc_channel<S, B>(service: S) -> GrpcChannel
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
    let svc = ServiceBuilder::new()
        .layer(SanitizeLayer)
        .service(service)
        .map_err(|e: S::Error| tonic::Status::from_error(e.into()));
    BoxCloneSyncService::new(RequestErrorLayer.layer(svc))
}
