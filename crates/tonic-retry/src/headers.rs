//! The gRPC header names the crate reads and writes, spelled once, and the
//! one reading of `grpc-status` the layer's judge and its metrics share.

use http::{HeaderMap, HeaderName};
use tonic::Code;

pub(crate) const GRPC_STATUS: HeaderName = HeaderName::from_static("grpc-status");
pub(crate) const GRPC_MESSAGE: HeaderName = HeaderName::from_static("grpc-message");
pub(crate) const GRPC_STATUS_DETAILS: HeaderName =
    HeaderName::from_static("grpc-status-details-bin");
pub(crate) const GRPC_TIMEOUT: HeaderName = HeaderName::from_static("grpc-timeout");
pub(crate) const GRPC_PREVIOUS_RPC_ATTEMPTS: HeaderName =
    HeaderName::from_static("grpc-previous-rpc-attempts");
pub(crate) const GRPC_RETRY_PUSHBACK_MS: HeaderName =
    HeaderName::from_static("grpc-retry-pushback-ms");

/// The code of a header block's `grpc-status`, if it has one that reads as
/// a number (an unknown number is `Unknown`, as tonic reads it).
pub(crate) fn grpc_code(headers: &HeaderMap) -> Option<Code> {
    let value = headers.get(GRPC_STATUS)?.to_str().ok()?;
    Some(Code::from_i32(value.parse().ok()?))
}
