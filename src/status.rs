//! Spark's error details read from a [`tonic::Status`], defensively.
//!
//! Spark Connect servers put a `google.rpc.Status` in the
//! `grpc-status-details-bin` trailer: an `ErrorInfo` with Spark's error class
//! and SQLSTATE, and (for retryable errors) a `RetryInfo`. A program needs
//! the class to react to an error (a missing table is not a syntax error),
//! and the client needs it to recognise a lost operation. Everything here
//! treats malformed details as absent and never panics; the one panic tonic
//! itself raises on such input (non-base64 header bytes) is stopped earlier,
//! by [`crate::sanitize`].

use std::collections::HashMap;
use std::error::Error as StdError;

use prost::Message;
use tonic::Status;
use tonic_types::pb;

/// The delay a `google.rpc.RetryInfo` in `status`'s details asks for, if
/// any (malformed details count as none): `Failure::retry_info`, for a
/// program that reads Spark's details here.
///
/// ```
/// use spark_connect_retry::status::retry_info;
///
/// let garbage = tonic::Status::with_details(tonic::Code::Unavailable, "x", vec![0xff; 7].into());
/// assert_eq!(retry_info(&garbage), None);
/// ```
pub fn retry_info(status: &Status) -> Option<std::time::Duration> {
    tonic_retry::policy::Failure::new(status).retry_info()
}

const ERROR_INFO_URL: &str = "type.googleapis.com/google.rpc.ErrorInfo";

fn details(status: &Status) -> Option<pb::Status> {
    if status.details().is_empty() {
        return None;
    }
    pb::Status::decode(status.details()).ok()
}

/// The first `google.rpc.ErrorInfo` detail, as Spark fills it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SparkErrorInfo {
    /// The exception class on the server (ErrorInfo `reason`).
    pub reason: String,
    /// ErrorInfo `domain`, `org.apache.spark` for Spark.
    pub domain: String,
    /// ErrorInfo `metadata`: `errorClass`, `sqlState`, `messageParameters`, `errorId`, …
    pub metadata: HashMap<String, String>,
}

impl SparkErrorInfo {
    /// `metadata["errorClass"]`.
    pub fn error_class(&self) -> Option<&str> {
        self.metadata.get("errorClass").map(String::as_str)
    }
    /// `metadata["sqlState"]`.
    pub fn sql_state(&self) -> Option<&str> {
        self.metadata.get("sqlState").map(String::as_str)
    }
    /// `metadata["errorId"]`, the key for FetchErrorDetails.
    pub fn error_id(&self) -> Option<&str> {
        self.metadata.get("errorId").map(String::as_str)
    }
}

/// The first `ErrorInfo` detail of `status`, if the details decode.
pub fn error_info(status: &Status) -> Option<SparkErrorInfo> {
    let rich = details(status)?;
    let any = rich.details.iter().find(|a| a.type_url == ERROR_INFO_URL)?;
    let info = pb::ErrorInfo::decode(any.value.as_slice()).ok()?;
    Some(SparkErrorInfo {
        reason: info.reason,
        domain: info.domain,
        metadata: info.metadata.into_iter().collect(),
    })
}

/// Whether the status names `marker` (e.g. `INVALID_HANDLE.OPERATION_NOT_FOUND`)
/// in its message, in the rich status message, or as its ErrorInfo error class.
pub(crate) fn mentions(status: &Status, marker: &str) -> bool {
    if status.message().contains(marker) {
        return true;
    }
    if let Some(rich) = details(status)
        && rich.message.contains(marker)
    {
        return true;
    }
    error_info(status).is_some_and(|i| i.error_class() == Some(marker))
}

/// The Spark error class of `status`: ErrorInfo's `errorClass`, or else the
/// `[CLASS]` prefix Spark puts in messages (for when metadata was dropped
/// because it exceeded the server's size limit).
pub(crate) fn spark_error_class(status: &Status) -> Option<String> {
    if let Some(class) = error_info(status).and_then(|i| i.error_class().map(str::to_owned)) {
        return Some(class);
    }
    bracketed_class(status.message())
}

/// The first `T` in `status`'s source chain, nested statuses walked
/// through ([`tonic_retry::policy::sources`], the one walk).
pub(crate) fn find_source<T: StdError + 'static>(status: &Status) -> Option<&T> {
    tonic_retry::policy::sources(status).find_map(|err| err.downcast_ref::<T>())
}

/// Parses a leading `[ERROR.CLASS]` from a Spark message.
pub(crate) fn bracketed_class(message: &str) -> Option<String> {
    let rest = message.trim_start().strip_prefix('[')?;
    let end = rest.find(']')?;
    let class = &rest[..end];
    let valid = !class.is_empty()
        && class
            .chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_' || c == '.');
    valid.then(|| class.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::Code;
    use tonic_types::{ErrorDetails, StatusExt};

    #[test]
    fn find_source_looks_inside_nested_statuses() {
        let io = std::io::Error::other("refused");
        let mut inner = Status::unavailable("inner");
        inner.set_source(std::sync::Arc::new(io));
        let mut outer = Status::unknown("outer");
        outer.set_source(std::sync::Arc::new(inner));
        assert_eq!(
            find_source::<std::io::Error>(&outer).unwrap().to_string(),
            "refused"
        );
        assert!(find_source::<std::io::Error>(&Status::internal("x")).is_none());
    }

    #[test]
    fn error_class_from_info_or_message() {
        let mut md = HashMap::new();
        md.insert("errorClass".to_owned(), "PARSE_SYNTAX_ERROR".to_owned());
        md.insert("sqlState".to_owned(), "42601".to_owned());
        let s = Status::with_error_details(
            Code::Internal,
            "[PARSE_SYNTAX_ERROR] Syntax error",
            ErrorDetails::with_error_info(
                "org.apache.spark.sql.catalyst.parser.ParseException",
                "org.apache.spark",
                md,
            ),
        );
        assert_eq!(spark_error_class(&s).as_deref(), Some("PARSE_SYNTAX_ERROR"));
        assert_eq!(error_info(&s).unwrap().sql_state(), Some("42601"));
        let s = Status::internal("[INVALID_HANDLE.OPERATION_NOT_FOUND] The handle x is invalid.");
        assert_eq!(
            spark_error_class(&s).as_deref(),
            Some("INVALID_HANDLE.OPERATION_NOT_FOUND")
        );
        assert!(mentions(&s, "INVALID_HANDLE.OPERATION_NOT_FOUND"));
        assert_eq!(bracketed_class("[not a class] x"), None);
        assert_eq!(bracketed_class("no bracket"), None);
    }
}
