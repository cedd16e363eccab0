//! Reattachable executions: an `ExecutePlan` result stream that survives
//! transient faults (PySpark 4.3.0 semantics).
//!
//! A query's results arrive on one long server stream, and long streams break:
//! load balancers cut connections, servers end stream segments on purpose
//! (`senderMaxStreamDuration`, `senderMaxStreamSize`), a newer attach preempts
//! a cursor, a connection resets. Retrying the whole `ExecutePlan` would run
//! the query again from the start and deliver rows the caller already has.
//! Spark Connect lets a client instead *reattach* to the running execution and
//! resume after the last response it received, while the server keeps recent
//! responses in a buffer the client frees with `ReleaseExecute` as it goes.
//!
//! [`ReattachableExecution`] is the client side of that protocol, with
//! PySpark's rules:
//!
//! * **Operation id**: generated (UUIDv4) or validated; the reattach option is
//!   appended; the same request is re-sent byte-identical on re-execute.
//! * **Resume point**: `last_response_id` is the last response *yielded* to the
//!   consumer; the `ResultComplete` response is yielded too.
//! * **Clean end without ResultComplete**: ReattachExecute at once (no sleep,
//!   no budget): the server ends stream segments on purpose.
//! * **Retry budget**: fresh for every delivered response. Policy-retryable
//!   errors (see [`crate::policy`]) back off, then reattach.
//! * **OPERATION_NOT_FOUND / SESSION_NOT_FOUND**: before any yielded response
//!   the ExecutePlan never reached the server, so it is re-sent at once; after
//!   one, [`ReattachError::ResponseAlreadyReceived`].
//! * **Deadlines and stalls**: DEADLINE_EXCEEDED, tonic's client timeout
//!   (`Cancelled` with a `TimeoutExpired` source), the client-enforced
//!   segment deadline ([`RpcDeadlines`]) and
//!   the optional idle timeout all reattach at once, bounded by the
//!   immediate-retry elapsed-time bound.
//! * **Session**: the server-side session id must not change within the
//!   stream; `client_observed_server_side_session_id` is sent on reattach.
//! * **Releases**: `release_until` after progress (coalesced, newest id wins),
//!   `release_all` on completion, terminal error and drop; background, best effort.
//!
//! The decision logic is [`core::ReattachCore`], a pure state machine; the
//! driver [`ReattachableExecution`] only performs its actions.

pub mod core;
pub(crate) mod ids;
mod release;
mod stream;

use std::fmt;
use std::time::Duration;

pub use release::ReleaseTracker;
pub use stream::{ExecutionStats, ReattachableExecution};

use crate::deadlines::RpcDeadlines;

/// Options of a reattachable execution.
#[derive(Debug, Clone, Default)]
pub struct ReattachOptions {
    /// Segment deadlines (`reattachable_execute_plan`, `reattach_execute`).
    pub deadlines: RpcDeadlines,
    /// Treat a stream silent for this long as dead and reattach (off by default).
    pub idle_timeout: Option<Duration>,
}

/// Why a reattachable execution failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum ReattachError {
    /// A terminal gRPC error (not retryable, or retries exhausted).
    Status(tonic::Status),
    /// The server lost the operation or session after responses were already
    /// received from it, so the result cannot be completed.
    ResponseAlreadyReceived {
        /// `INVALID_HANDLE.OPERATION_NOT_FOUND` or `INVALID_HANDLE.SESSION_NOT_FOUND`.
        marker: &'static str,
        /// The server's status.
        status: tonic::Status,
    },
    /// The server-side session id changed within the stream (a server restart).
    ServerSideSessionChanged {
        /// The id seen first.
        expected: String,
        /// The id received.
        got: String,
    },
    /// A response carried another session id than the request.
    SessionMismatch {
        /// The request's session id.
        expected: String,
        /// The response's session id.
        got: String,
    },
    /// The caller's operation id is not a UUID.
    InvalidOperationId(String),
}

impl fmt::Display for ReattachError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReattachError::Status(s) => write!(f, "{}: {}", s.code(), s.message()),
            ReattachError::ResponseAlreadyReceived { marker, .. } => write!(
                f,
                "[RESPONSE_ALREADY_RECEIVED] {marker} on the server but responses were already received from it"
            ),
            ReattachError::ServerSideSessionChanged { expected, got } => write!(
                f,
                "server-side session id changed from {expected} to {got} (server restarted?); create a new session"
            ),
            ReattachError::SessionMismatch { expected, got } => {
                write!(f, "received session id {got}, expected {expected}")
            }
            ReattachError::InvalidOperationId(id) => {
                write!(f, "operation id {id:?} is not a UUID")
            }
        }
    }
}

impl std::error::Error for ReattachError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ReattachError::Status(s) | ReattachError::ResponseAlreadyReceived { status: s, .. } => {
                Some(s)
            }
            _ => None,
        }
    }
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
