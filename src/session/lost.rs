//! Lost executions: whether an execution's error means the server lost it
//! (a restart, the operation or the session gone) rather than that the
//! query failed.
//!
//! A query whose execution was lost may be run again and resumed, verified
//! by a digest of the rows delivered ([`results::resume`](crate::results::resume));
//! a query that failed must not be. The rule reads the session's
//! [`SparkError`], so it lives with the session, apart from the digest and
//! its checks, which have no session in them.

use super::error::SparkError;
use crate::error_classes::{
    OPERATION_NOT_FOUND, SESSION_CHANGED, SESSION_CLOSED, SESSION_NOT_FOUND,
};
use crate::reattach::ReattachError;

/// Whether an execution's error means the server lost it (restart, or the
/// operation or session gone) rather than that the query failed.
pub(super) fn execution_lost(err: &SparkError) -> bool {
    match err {
        SparkError::ResponseAlreadyReceived(_)
        | SparkError::Execution(ReattachError::ServerSideSessionChanged { .. }) => true,
        SparkError::Server(_) => matches!(
            err.error_class(),
            Some(OPERATION_NOT_FOUND | SESSION_NOT_FOUND | SESSION_CHANGED | SESSION_CLOSED)
        ),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::error::ServerError;

    fn server(message: &str) -> Box<ServerError> {
        Box::new(ServerError::from_status(tonic::Status::internal(
            message.to_owned(),
        )))
    }

    #[test]
    fn only_a_lost_execution_is_resumed() {
        let lost = [
            SparkError::ResponseAlreadyReceived(server(
                "[INVALID_HANDLE.OPERATION_NOT_FOUND] gone",
            )),
            SparkError::Server(server("[INVALID_HANDLE.OPERATION_NOT_FOUND] gone")),
            SparkError::Server(server("[INVALID_HANDLE.SESSION_NOT_FOUND] gone")),
            SparkError::Server(server("[INVALID_HANDLE.SESSION_CLOSED] closed")),
            SparkError::Server(server("[INVALID_HANDLE.SESSION_CHANGED] changed")),
            SparkError::Execution(ReattachError::ServerSideSessionChanged {
                expected: "a".into(),
                got: "b".into(),
            }),
        ];
        for e in &lost {
            assert!(execution_lost(e), "{e}");
        }
        let failed = [
            SparkError::Protocol("x".into()),
            SparkError::Server(server("[DIVIDE_BY_ZERO] boom")),
            SparkError::SessionClosed,
        ];
        for e in &failed {
            assert!(!execution_lost(e), "{e}");
        }
    }
}
