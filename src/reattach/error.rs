//! [`ReattachError`]: why a reattachable execution failed. A leaf: the
//! core, the driver and the session's `session::SparkError`
//! conversion all name it.

use std::time::Duration;

use super::integrity::IntegrityError;
use super::progress::EmptySegment;

/// Why a reattachable execution failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReattachError {
    /// A terminal gRPC error (not retryable, or retries exhausted).
    #[error("{}: {}", .0.code(), .0.message())]
    Status(#[source] tonic::Status),
    /// The server lost the operation or session after responses were already
    /// received from it, so the result cannot be completed.
    #[error(
        "[RESPONSE_ALREADY_RECEIVED] {marker} on the server but responses were already received from it"
    )]
    ResponseAlreadyReceived {
        /// `INVALID_HANDLE.OPERATION_NOT_FOUND` or `INVALID_HANDLE.SESSION_NOT_FOUND`.
        marker: &'static str,
        /// The server's status.
        #[source]
        status: tonic::Status,
    },
    /// The server-side session id changed (a server restart).
    #[error(
        "[INVALID_HANDLE.SESSION_CHANGED] server-side session changed from {expected} to {got}; create a new session"
    )]
    ServerSideSessionChanged {
        /// The id seen first.
        expected: String,
        /// The id received.
        got: String,
    },
    /// A response named another session than the request: the server (or
    /// something between) mixed up sessions; nothing of it is used.
    #[error("protocol error: response for session {got}, expected {expected}")]
    SessionMismatch {
        /// The request's session id.
        expected: String,
        /// The response's session id.
        got: String,
    },
    /// The caller's operation id is not a UUID.
    #[error("operation id {0:?} is not a UUID")]
    InvalidOperationId(String),
    /// [`ReattachOptions::idle_timeout`](super::ReattachOptions::idle_timeout) is zero (use `None` to turn stall
    /// detection off).
    #[error("idle_timeout must be positive (None turns stall detection off)")]
    ZeroIdleTimeout,
    /// A deadline in [`ReattachOptions::deadlines`](super::ReattachOptions::deadlines) cannot be used (zero, or
    /// above 100 years; `None` means no deadline).
    #[error(transparent)]
    InvalidDeadline(crate::deadlines::InvalidDeadline),
    /// The stream broke a stream-integrity rule (see the module docs).
    #[error("[RESULT_INTEGRITY] {0}")]
    Integrity(#[from] IntegrityError),
    /// The server kept reopened streams empty until the progress rule's
    /// budget ran out (see the module docs).
    #[error(
        "[NO_PROGRESS] operation {operation_id}: the server {what}, {segments} times in a row without a response ({waited:?} of backoff); giving up"
    )]
    NoProgress {
        /// The execution's operation id.
        operation_id: String,
        /// Short empty segments in the run.
        segments: u32,
        /// The backoff waited between them.
        waited: Duration,
        /// What the server did last.
        what: EmptySegment,
    },
}

impl ReattachError {
    /// The gRPC status behind this error, if any.
    pub fn status(&self) -> Option<&tonic::Status> {
        match self {
            ReattachError::Status(s) | ReattachError::ResponseAlreadyReceived { status: s, .. } => {
                Some(s)
            }
            _ => None,
        }
    }
}
