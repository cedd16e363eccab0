//! What one attempt can fail with, as the loop sees it.
//!
//! Why not a plain `Status`: an operation may fail in ways the policies
//! must not judge (an error of its own, never retried), and may know that
//! it must simply run again now (an immediate retry, bounded by time, not
//! by a budget). [`AttemptError`] names the three cases.

use tonic::Status;

/// The error of one attempt, as the loop sees it.
#[derive(Debug, thiserror::Error)]
pub enum AttemptError<E = std::convert::Infallible> {
    /// A gRPC status: the policies decide.
    #[error("{}: {}", .0.code(), .0.message())]
    Status(#[source] Status),
    /// Retry at once, without a policy or a sleep. The status, if any, is
    /// the cause returned when the elapsed-time bound is exceeded.
    #[error("{}", retry_now(.0.as_ref()))]
    RetryNow(#[source] Option<Status>),
    /// Any other error: never retried.
    #[error("{0}")]
    Other(#[source] E),
}

/// The message of an immediate-retry request.
fn retry_now(cause: Option<&Status>) -> String {
    match cause {
        Some(s) => format!(
            "immediate retry requested after {}: {}",
            s.code(),
            s.message()
        ),
        None => "immediate retry requested".to_owned(),
    }
}

impl<E> AttemptError<E> {
    /// The status code of this error, for metrics (UNKNOWN for a non-status).
    pub(crate) fn code(&self) -> tonic::Code {
        match self {
            AttemptError::Status(s) | AttemptError::RetryNow(Some(s)) => s.code(),
            AttemptError::RetryNow(None) | AttemptError::Other(_) => tonic::Code::Unknown,
        }
    }
}

impl AttemptError {
    /// The status a caller sees when the loop gives up on this error: the
    /// status itself, an immediate retry's cause, or (for a bare immediate
    /// retry) an INTERNAL saying so. Shared by every driver.
    pub fn into_status(self) -> Status {
        match self {
            AttemptError::Status(s) | AttemptError::RetryNow(Some(s)) => s,
            AttemptError::RetryNow(None) => {
                Status::internal("immediate retries exceeded their time bound without a cause")
            }
            AttemptError::Other(never) => match never {},
        }
    }
}

impl<E> From<Status> for AttemptError<E> {
    fn from(s: Status) -> Self {
        AttemptError::Status(s)
    }
}
