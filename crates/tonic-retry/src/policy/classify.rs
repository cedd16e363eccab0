//! Error classification: which `tonic::Status` values are worth retrying.
//!
//! # Transport failures
//!
//! grpc-core (and therefore PySpark) reports a refused connection, a reset or
//! closed connection, a broken pipe and a refused stream as `UNAVAILABLE`, and
//! PySpark retries them. tonic 0.14 reports the same events under other codes,
//! mostly `Unknown`, and only [`tonic::Status::source`] tells them apart from
//! a status the server sent (server statuses never carry a source).
//! [`classify_failure`] walks the source chain and stops at the first match:
//!
//! | first match in `source()` chain | [`FailureKind`] | PySpark sees | retried by [`DefaultClassifier`] |
//! |---|---|---|---|
//! | no source, `Unknown` "protocol error: missing grpc-status trailer…" | `Ambiguous` (truncated stream) | — | no |
//! | no source, `Internal` "Unexpected EOF decoding stream." | `Ambiguous` (ended inside a message) | — | no |
//! | no source | `Server` | the code | PySpark's rules |
//! | `tonic::TimeoutExpired` | `Deadline` | DEADLINE_EXCEEDED | no (the reattachable stream reattaches at once) |
//! | `tonic::ConnectError` | `Unprocessed` | UNAVAILABLE | yes |
//! | `hyper::Error::is_timeout()` (keepalive) | `MaybeProcessed` | UNAVAILABLE | yes |
//! | `hyper::Error::is_canceled()` (request dropped unsent) | `Unprocessed` | UNAVAILABLE | yes |
//! | `h2::Error` with an I/O cause | `MaybeProcessed` | UNAVAILABLE | yes |
//! | `h2::Error`, remote GOAWAY, reason NO_ERROR | `Unprocessed` | UNAVAILABLE | yes |
//! | `h2::Error`, remote GOAWAY, other reason | `MaybeProcessed` | UNAVAILABLE | yes |
//! | `h2::Error`, RST_STREAM(REFUSED_STREAM) | `Unprocessed` | UNAVAILABLE | yes |
//! | `h2::Error`, other RST_STREAM reasons, ENHANCE_YOUR_CALM | `Ambiguous` | CANCELLED / INTERNAL / RESOURCE_EXHAUSTED | no |
//! | `std::io::Error` (any kind) | `MaybeProcessed` | UNAVAILABLE | yes |
//! | anything else | `Local` | the code | PySpark's rules on the code |
//!
//! `Unprocessed` failures provably never reached the server (Armeria's
//! "unprocessed request" rule), so even a non-idempotent call may be replayed.
//! `MaybeProcessed` failures are retried like UNAVAILABLE by the default
//! policy; replaying them is safe for Spark Connect (reattach by operation id)
//! but not for arbitrary non-idempotent RPCs, which the tower layer checks.

use std::collections::HashSet;
use std::fmt;

use tonic::{Code, Status};

use super::Failure;
use super::failure::{FailureKind, classify_failure};

/// Decides whether a policy may retry an error.
///
/// Implement it for custom policies; closures work through [`FnClassifier`].
pub trait Classifier: Send + Sync + fmt::Debug {
    /// `true` if the error is retryable under this classifier.
    fn can_retry(&self, status: &Status) -> bool;

    /// `true` if the failure is retryable: the drivers ask this, with the
    /// failure classified once. The default asks [`can_retry`](Self::can_retry);
    /// classifiers that read the [`FailureKind`] or the `RetryInfo` take
    /// them from `failure` instead of computing them again.
    fn can_retry_failure(&self, failure: &Failure<'_>) -> bool {
        self.can_retry(failure.status())
    }
}

/// PySpark 4.3.0 `DefaultPolicy.can_retry`, extended to tonic's transport errors.
///
/// In order:
/// 1. transport failures (see the module table) are retried like UNAVAILABLE;
///    a client deadline and ambiguous resets are not;
/// 2. `INTERNAL` whose message contains `INVALID_CURSOR.DISCONNECTED` (another
///    RPC preempted this one);
/// 3. `UNAVAILABLE`, whatever the message;
/// 4. any code whose `grpc-status-details-bin` carries a
///    `google.rpc.RetryInfo` (malformed details count as none);
/// 5. nothing else: `DEADLINE_EXCEEDED`, `ABORTED`, `UNAUTHENTICATED`, …
#[derive(Debug, Clone, Copy, Default)]
pub struct DefaultClassifier;

/// The marker of a stream preempted by a newer attach of the same operation.
pub(crate) const INVALID_CURSOR_DISCONNECTED: &str = "INVALID_CURSOR.DISCONNECTED";

impl Classifier for DefaultClassifier {
    fn can_retry(&self, status: &Status) -> bool {
        self.can_retry_failure(&Failure::new(status))
    }

    fn can_retry_failure(&self, failure: &Failure<'_>) -> bool {
        match failure.kind() {
            FailureKind::Unprocessed | FailureKind::MaybeProcessed => true,
            FailureKind::Deadline | FailureKind::Ambiguous => false,
            FailureKind::Server | FailureKind::Local => server_rules(failure),
        }
    }
}

fn server_rules(failure: &Failure<'_>) -> bool {
    let status = failure.status();
    match status.code() {
        Code::Internal if status.message().contains(INVALID_CURSOR_DISCONNECTED) => true,
        Code::Unavailable => true,
        _ => failure.retry_info().is_some(),
    }
}

/// Retries a fixed set of codes (server-sent or not), plus transport failures
/// when [`with_transport`](Self::with_transport) is set.
#[derive(Debug, Clone)]
pub struct CodeClassifier {
    codes: HashSet<i32>,
    transport: bool,
}

impl CodeClassifier {
    /// Retry exactly these codes, as the status reports them.
    pub fn new(codes: impl IntoIterator<Item = Code>) -> Self {
        CodeClassifier {
            codes: codes.into_iter().map(|c| c as i32).collect(),
            transport: false,
        }
    }
    /// Also retry transport failures ([`FailureKind::is_transport`]), whatever code tonic gave them.
    pub fn with_transport(mut self, yes: bool) -> Self {
        self.transport = yes;
        self
    }
}

impl Classifier for CodeClassifier {
    fn can_retry(&self, status: &Status) -> bool {
        self.codes.contains(&(status.code() as i32))
            || (self.transport && classify_failure(status).is_transport())
    }

    fn can_retry_failure(&self, failure: &Failure<'_>) -> bool {
        self.codes.contains(&(failure.code() as i32))
            || (self.transport && failure.kind().is_transport())
    }
}

/// A classifier from a closure.
pub struct FnClassifier<F> {
    name: &'static str,
    f: F,
}

impl<F> FnClassifier<F>
where
    F: Fn(&Status) -> bool + Send + Sync,
{
    /// Wrap `f`; `name` shows in `Debug`.
    pub fn new(name: &'static str, f: F) -> Self {
        FnClassifier { name, f }
    }
}

impl<F> fmt::Debug for FnClassifier<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("FnClassifier").field(&self.name).finish()
    }
}

impl<F> Classifier for FnClassifier<F>
where
    F: Fn(&Status) -> bool + Send + Sync,
{
    fn can_retry(&self, status: &Status) -> bool {
        (self.f)(status)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tonic_types::{ErrorDetails, StatusExt};

    fn with_retry_info(code: Code, d: Duration) -> Status {
        Status::with_error_details(code, "x", ErrorDetails::with_retry_info(Some(d)))
    }

    #[test]
    fn pyspark_default_rules_on_server_statuses() {
        let c = DefaultClassifier;
        assert!(c.can_retry(&Status::unavailable("anything")));
        assert!(c.can_retry(&Status::internal(
            "[INVALID_CURSOR.DISCONNECTED] The cursor has been disconnected"
        )));
        assert!(!c.can_retry(&Status::internal("Fatal")));
        for code in [
            Code::DeadlineExceeded,
            Code::Aborted,
            Code::Unauthenticated,
            Code::PermissionDenied,
            Code::ResourceExhausted,
            Code::Unknown,
            Code::Cancelled,
        ] {
            assert!(!c.can_retry(&Status::new(code, "no")), "{code:?}");
        }
        // RetryInfo makes any code retryable, even with a zero delay.
        assert!(c.can_retry(&with_retry_info(Code::Unimplemented, Duration::ZERO)));
        assert!(c.can_retry(&with_retry_info(
            Code::InvalidArgument,
            Duration::from_millis(5)
        )));
    }

    #[test]
    fn malformed_details_are_no_retry_info() {
        let s = Status::with_details(
            Code::ResourceExhausted,
            "x",
            bytes::Bytes::from_static(b"\xff\xff\xff garbage"),
        );
        assert_eq!(crate::status::retry_info(&s), None);
        assert!(!DefaultClassifier.can_retry(&s));
    }

    #[test]
    fn truncated_stream_is_ambiguous() {
        let s = Status::unknown(
            "protocol error: missing grpc-status trailer, stream was terminated without a final status",
        );
        assert_eq!(classify_failure(&s), FailureKind::Ambiguous);
        assert!(!DefaultClassifier.can_retry(&s));
    }

    #[test]
    fn code_classifier() {
        let c = CodeClassifier::new([Code::Aborted]);
        assert!(c.can_retry(&Status::aborted("a")));
        assert!(!c.can_retry(&Status::unavailable("u")));
    }
}
