//! The Spark Connect client over a type-erased channel, so the reattachable
//! stream, the session and users' own stacks (a plain tonic `Channel`, the
//! retry layer, interceptors) all meet in one non-generic client type.

use bytes::Bytes;
use http_body::Body;
use tower::Service;

use crate::proto::spark_connect_service_client::SparkConnectServiceClient;

pub(crate) use tonic_retry::transport::BoxError;
pub use tonic_retry::transport::{GrpcChannel, grpc_channel};

/// The generated Spark Connect client over a [`GrpcChannel`].
pub type SparkClient = SparkConnectServiceClient<GrpcChannel>;

/// A Spark Connect client over `service`, via [`grpc_channel`].
pub fn spark_client<S, B>(service: S) -> SparkClient
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
    SparkConnectServiceClient::new(grpc_channel(service))
}
