//! An HTTP error answered by a proxy, read as gRPC's HTTP-to-gRPC mapping
//! says.
//!
//! A load balancer that refuses a call itself (nginx `return 503`, HAProxy
//! with no server up, a 504 after its own timeout, a 429 from a rate
//! limiter) answers with an HTTP status, an HTML body and no `grpc-status`.
//! tonic 0.14 decodes that body as gRPC frames first and fails with a
//! non-retryable `INTERNAL` ("invalid compression flag: 60 ... status: 503
//! Service Unavailable"), so the retry policy never sees the UNAVAILABLE
//! that gRPC's `doc/http-grpc-status-mapping.md` prescribes. The session's
//! channel answers such a response with the mapped status before tonic
//! reads the body:
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
//! with an HTTP error status) is left to tonic. The status has no source:
//! it is the peer's answer, so the policy judges it by its code (PySpark
//! retries UNAVAILABLE), and a command refused this way was never run.

use http::StatusCode;
use tonic::{Code, Status};

/// The gRPC code for an HTTP status without `grpc-status`.
pub(crate) fn code_for(http: StatusCode) -> Code {
    match http.as_u16() {
        400 => Code::Internal,
        401 => Code::Unauthenticated,
        403 => Code::PermissionDenied,
        404 => Code::Unimplemented,
        429 | 502 | 503 | 504 => Code::Unavailable,
        _ => Code::Unknown,
    }
}

/// `Err(status)` for a non-200 response without `grpc-status`, else the
/// response unchanged.
pub(crate) fn check<B>(resp: http::Response<B>) -> Result<http::Response<B>, Status> {
    let http = resp.status();
    if http == StatusCode::OK || resp.headers().contains_key("grpc-status") {
        return Ok(resp);
    }
    Err(Status::new(
        code_for(http),
        format!("HTTP {http} without grpc-status (answered by a proxy or load balancer)"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn response(status: u16, grpc_status: Option<&str>) -> http::Response<()> {
        let mut b = http::Response::builder().status(status);
        if let Some(s) = grpc_status {
            b = b.header("grpc-status", s);
        }
        b.body(()).unwrap()
    }

    #[test]
    fn the_grpc_mapping() {
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
            let err = check(response(http, None)).unwrap_err();
            assert_eq!(err.code(), code, "HTTP {http}");
            assert!(
                err.message().contains(&http.to_string()),
                "{}",
                err.message()
            );
            assert!(std::error::Error::source(&err).is_none());
        }
    }

    #[test]
    fn grpc_answers_pass() {
        assert!(check(response(200, None)).is_ok());
        // A gRPC server's own error, even over an HTTP error status.
        assert!(check(response(503, Some("14"))).is_ok());
    }
}
