//! [`ResultError`]: what turning responses into verified record batches can
//! fail with, before the session names it.
//!
//! Errors are leaves: the decoder, the schema conversion, the row digest
//! and the resumption check live below the session and cannot name its
//! [`SparkError`](crate::session::SparkError). Each case here becomes the
//! one `SparkError` variant of the same name (an integrity rule's break
//! becomes [`SparkError::Execution`](crate::session::SparkError::Execution)),
//! by the session's `From<ResultError> for SparkError`, so users see the
//! same error, with the same text, whichever part of a result failed. Its
//! own `Display` says only what went wrong, for the crate's tests and logs.

use arrow_schema::ArrowError;

use super::change::ResultChange;
use super::decode_error::ResultDecodeError;
use crate::reattach::integrity::IntegrityError;

/// A result that cannot be delivered as it is: bad Arrow data, a broken
/// framing rule, an answer this client cannot use, or a resumed query whose
/// rows changed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ResultError {
    /// Arrow data could not be decoded (or the decoder panicked on it).
    #[error(transparent)]
    Arrow(ArrowError),
    /// A result batch could not be decoded, and the client can say which.
    #[error(transparent)]
    ResultDecode(ResultDecodeError),
    /// An Arrow batch did not start where the previous one ended.
    #[error("Arrow batch starts at row {got}, expected {expected}")]
    BatchOffset {
        /// The row offset expected.
        expected: i64,
        /// The row offset received.
        got: i64,
    },
    /// Another stream-integrity rule broke (a torn, repeated or miscounted
    /// batch).
    #[error(transparent)]
    Integrity(IntegrityError),
    /// The server answered something this client cannot use.
    #[error("{0}")]
    Protocol(String),
    /// A re-executed query's first rows are not the rows delivered, or it
    /// has fewer.
    #[error("result changed on resume (operation {operation_id}): {change}")]
    ResultChanged {
        /// Rows delivered before the execution was lost.
        delivered: u64,
        /// The operation id of the re-execution.
        operation_id: String,
        /// How the result changed.
        change: ResultChange,
    },
}
