//! One failed attempt, classified once.
//!
//! After a failure, several rules want to know the same things: where the
//! status came from ([`FailureKind`], a walk of its source chain), the
//! server's `google.rpc.RetryInfo` (a scan of its details), its pushback,
//! and whether it is a deadline. Asked separately by the throttle, the
//! classifier, the replay rule and the backoff, each fact was computed two
//! or three times per attempt, and the copies could drift. A [`Failure`] is
//! built once per failed attempt with every fact, and every driver (the
//! retry loop, the reattachable stream, the tower layer) decides from it.

use std::time::Duration;

use http::HeaderMap;
use tonic::{Code, Status};

use super::classify::{FailureKind, classify_failure};
use crate::headers::GRPC_RETRY_PUSHBACK_MS;

/// `grpc-retry-pushback-ms`, parsed per gRFC A6.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pushback {
    /// Retry after exactly this long (capped by the policy's
    /// [`max_server_retry_delay`](super::RetryPolicy::max_server_retry_delay)).
    After(Duration),
    /// Negative or unparseable: do not retry.
    Stop,
}

impl Pushback {
    /// The pushback in `headers`, if there is one.
    pub fn from_headers(headers: &HeaderMap) -> Option<Pushback> {
        let v = headers.get(GRPC_RETRY_PUSHBACK_MS)?;
        let ms = v.to_str().ok().and_then(|s| s.trim().parse::<i64>().ok());
        Some(match ms {
            Some(ms) if ms >= 0 => Pushback::After(Duration::from_millis(ms.unsigned_abs())),
            _ => Pushback::Stop,
        })
    }
}

/// Everything the retry rules read from one failed attempt, computed once.
///
/// ```
/// use tonic_retry::policy::{Failure, FailureKind};
///
/// let status = tonic::Status::deadline_exceeded("late");
/// let failure = Failure::new(&status);
/// assert_eq!(failure.kind(), FailureKind::Server);
/// assert!(failure.is_deadline());
/// assert_eq!(failure.retry_info(), None);
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Failure<'a> {
    status: &'a Status,
    kind: FailureKind,
    retry_info: Option<Duration>,
    pushback: Option<Pushback>,
}

impl<'a> Failure<'a> {
    /// Classify `status`: its [`FailureKind`] and its `RetryInfo`, once.
    pub fn new(status: &'a Status) -> Self {
        Failure {
            status,
            kind: classify_failure(status),
            retry_info: crate::status::retry_info(status),
            pushback: None,
        }
    }

    /// The server's `grpc-retry-pushback-ms`, read from the attempt's response.
    pub fn with_pushback(mut self, pushback: Option<Pushback>) -> Self {
        self.pushback = pushback;
        self
    }

    /// The status.
    pub fn status(&self) -> &'a Status {
        self.status
    }
    /// The status code.
    pub fn code(&self) -> Code {
        self.status.code()
    }
    /// Where the status came from.
    pub fn kind(&self) -> FailureKind {
        self.kind
    }
    /// The `google.rpc.RetryInfo` delay in the status details, if any.
    pub fn retry_info(&self) -> Option<Duration> {
        self.retry_info
    }
    /// The pushback, if the response carried one.
    pub fn pushback(&self) -> Option<Pushback> {
        self.pushback
    }
    /// A deadline: DEADLINE_EXCEEDED from the server, or the client's own
    /// deadline (tonic's timeout, [`FailureKind::Deadline`]).
    pub fn is_deadline(&self) -> bool {
        self.code() == Code::DeadlineExceeded || self.kind == FailureKind::Deadline
    }
}
