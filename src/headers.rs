//! gRPC header names as pre-parsed [`HeaderName`]s.
//!
//! Looking a header up by `&str` parses and validates the name on every call;
//! on the layer's per-call path that was measurable (instruction counts in
//! `benches/layer.rs`), so the names are built once, at compile time.

use http::{HeaderMap, HeaderName};

pub(crate) const GRPC_STATUS: HeaderName = HeaderName::from_static("grpc-status");
pub(crate) const GRPC_MESSAGE: HeaderName = HeaderName::from_static("grpc-message");
pub(crate) const GRPC_STATUS_DETAILS: HeaderName =
    HeaderName::from_static("grpc-status-details-bin");
pub(crate) const GRPC_TIMEOUT: HeaderName = HeaderName::from_static("grpc-timeout");
pub(crate) const GRPC_PREVIOUS_RPC_ATTEMPTS: HeaderName =
    HeaderName::from_static("grpc-previous-rpc-attempts");
pub(crate) const GRPC_RETRY_PUSHBACK_MS: HeaderName =
    HeaderName::from_static("grpc-retry-pushback-ms");

/// Whether `headers` carry `grpc-status: 0`, without building a
/// [`tonic::Status`] (which copies the whole map into its metadata).
/// `None` when there is no `grpc-status` at all.
pub(crate) fn grpc_status_is_ok(headers: &HeaderMap) -> Option<bool> {
    headers.get(GRPC_STATUS).map(|v| v.as_bytes() == b"0")
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    #[test]
    fn ok_status_check_agrees_with_tonic() {
        for (v, ok) in [
            ("0", true),
            (" 0 ", false),
            ("14", false),
            ("00x", false),
            ("", false),
        ] {
            let mut h = HeaderMap::new();
            h.insert(GRPC_STATUS, HeaderValue::from_static(v));
            assert_eq!(grpc_status_is_ok(&h), Some(ok), "{v:?}");
            let tonic_ok = tonic::Status::from_header_map(&h).map(|s| s.code() == tonic::Code::Ok);
            if ok {
                assert_eq!(tonic_ok, Some(true), "{v:?}");
            } else {
                assert_ne!(tonic_ok, Some(true), "{v:?}");
            }
        }
        assert_eq!(grpc_status_is_ok(&HeaderMap::new()), None);
    }
}
