//! Error classification: which `tonic::Status` values are worth retrying.
//!
//! # Transport failures
//!
//! grpc-core and grpc-java report a refused connection, a reset or closed
//! connection, a broken pipe and a refused stream as `UNAVAILABLE`, and
//! their clients retry them. tonic 0.14 reports the same events under other
//! codes, mostly `Unknown`, and only [`tonic::Status::source`] tells them
//! apart from a status the server sent (server statuses never carry a
//! source). `classify_failure` walks the source chain and stops at the
//! first match:
//!
//! | first match in `source()` chain | [`FailureKind`] | grpc-core sees | retried by [`DefaultClassifier`] |
//! |---|---|---|---|
//! | no source, `Unknown` "protocol error: missing grpc-status trailer…" | `Ambiguous` (truncated stream) | — | no |
//! | no source, `Internal` "Unexpected EOF decoding stream." | `Ambiguous` (ended inside a message) | — | no |
//! | no source | `Server` | the code | the code's rule |
//! | `tonic::TimeoutExpired` | `Deadline` | DEADLINE_EXCEEDED | no |
//! | `tonic::ConnectError` | `Unprocessed` | UNAVAILABLE | yes |
//! | `hyper::Error::is_timeout()` (keepalive) | `MaybeProcessed` | UNAVAILABLE | yes |
//! | `hyper::Error::is_canceled()` (request dropped unsent) | `Unprocessed` | UNAVAILABLE | yes |
//! | `h2::Error` with an I/O cause | `MaybeProcessed` | UNAVAILABLE | yes |
//! | `h2::Error`, remote GOAWAY, reason NO_ERROR | `Unprocessed` | UNAVAILABLE | yes |
//! | `h2::Error`, remote GOAWAY, other reason | `MaybeProcessed` | UNAVAILABLE | yes |
//! | `h2::Error`, RST_STREAM(REFUSED_STREAM) | `Unprocessed` | UNAVAILABLE | yes |
//! | `h2::Error`, other RST_STREAM reasons, ENHANCE_YOUR_CALM | `Ambiguous` | CANCELLED / INTERNAL / RESOURCE_EXHAUSTED | no |
//! | `std::io::Error` (any kind) | `MaybeProcessed` | UNAVAILABLE | yes |
//! | anything else | `Local` | the code | the code's rule |
//!
//! `Unprocessed` failures provably never reached the server (Armeria's
//! "unprocessed request" rule), so even a non-idempotent call may be replayed.
//! `MaybeProcessed` failures are retried like UNAVAILABLE by the default
//! policy; whether replaying them is safe depends on the method, which the
//! tower layer checks (its idempotency rules).

use std::collections::HashSet;
use std::fmt;

use tonic::Code;

use super::Failure;
use super::failure::FailureKind;

/// Decides whether a policy may retry an error.
///
/// Implement it for custom policies; closures work through [`FnClassifier`].
pub trait Classifier: Send + Sync + fmt::Debug {
    /// `true` if the failure is retryable under this classifier. The
    /// failure is classified once, by the driver: read its
    /// [`kind`](Failure::kind), [`retry_info`](Failure::retry_info) and
    /// [`status`](Failure::status) rather than computing them again.
    fn can_retry(&self, failure: &Failure<'_>) -> bool;
}

/// The default classification, from Google's AIP-194 and gRFC A6,
/// extended to tonic's transport errors.
///
/// In order:
/// 1. transport failures (see the module table) are retried like UNAVAILABLE;
///    a client deadline and ambiguous resets are not;
/// 2. `UNAVAILABLE`, whatever the message (AIP-194: the one code that is
///    safe to retry for any method);
/// 3. any code whose `grpc-status-details-bin` carries a
///    `google.rpc.RetryInfo`: the server asked for the retry (malformed
///    details count as none);
/// 4. nothing else: `DEADLINE_EXCEEDED`, `ABORTED`, `INTERNAL`, `UNKNOWN`, …
///
/// Build a classifier of your own from it with [`FnClassifier`] (add a
/// rule, then ask [`DefaultClassifier::accepts`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct DefaultClassifier;

impl DefaultClassifier {
    /// Whether the default rules retry `failure` (what
    /// [`Classifier::can_retry`] answers), for a classifier that extends
    /// them.
    pub fn accepts(failure: &Failure<'_>) -> bool {
        match failure.kind() {
            FailureKind::Unprocessed | FailureKind::MaybeProcessed => true,
            FailureKind::Deadline | FailureKind::Ambiguous => false,
            FailureKind::Server | FailureKind::Local => {
                failure.code() == Code::Unavailable || failure.retry_info().is_some()
            }
        }
    }
}

impl Classifier for DefaultClassifier {
    fn can_retry(&self, failure: &Failure<'_>) -> bool {
        Self::accepts(failure)
    }
}

/// Retries a fixed set of codes (server-sent or not): a service config's
/// `retryableStatusCodes`, read as grpc-core reads them. A config written
/// for any gRPC client says `UNAVAILABLE` for a refused, reset or closed
/// connection, which tonic reports under other codes (mostly `Unknown`):
/// a transport failure ([`FailureKind::is_transport`]) counts as
/// `UNAVAILABLE`.
#[derive(Debug, Clone)]
pub(crate) struct CodeClassifier {
    codes: HashSet<i32>,
}

impl CodeClassifier {
    /// Retry exactly these codes (a transport failure as `UNAVAILABLE`).
    pub(crate) fn new(codes: impl IntoIterator<Item = Code>) -> Self {
        CodeClassifier {
            codes: codes.into_iter().map(|c| c as i32).collect(),
        }
    }
}

impl Classifier for CodeClassifier {
    fn can_retry(&self, failure: &Failure<'_>) -> bool {
        let code = if failure.kind().is_transport() {
            Code::Unavailable
        } else {
            failure.code()
        };
        self.codes.contains(&(code as i32))
    }
}

/// A classifier from a closure.
pub struct FnClassifier<F> {
    name: &'static str,
    f: F,
}

impl<F> FnClassifier<F>
where
    F: Fn(&Failure<'_>) -> bool + Send + Sync,
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
    F: Fn(&Failure<'_>) -> bool + Send + Sync,
{
    fn can_retry(&self, failure: &Failure<'_>) -> bool {
        (self.f)(failure)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::failure::classify_failure;
    use std::time::Duration;
    use tonic::Status;
    use tonic_types::{ErrorDetails, StatusExt};

    fn can(c: &dyn Classifier, s: &Status) -> bool {
        c.can_retry(&Failure::new(s))
    }

    fn with_retry_info(code: Code, d: Duration) -> Status {
        Status::with_error_details(code, "x", ErrorDetails::with_retry_info(Some(d)))
    }

    #[test]
    fn default_rules_on_server_statuses() {
        let c = DefaultClassifier;
        assert!(can(&c, &Status::unavailable("anything")));
        assert!(!can(&c, &Status::internal("Fatal")));
        for code in [
            Code::DeadlineExceeded,
            Code::Aborted,
            Code::Unauthenticated,
            Code::PermissionDenied,
            Code::ResourceExhausted,
            Code::Unknown,
            Code::Cancelled,
        ] {
            assert!(!can(&c, &Status::new(code, "no")), "{code:?}");
        }
        // RetryInfo makes any code retryable, even with a zero delay.
        assert!(can(
            &c,
            &with_retry_info(Code::Unimplemented, Duration::ZERO)
        ));
        assert!(can(
            &c,
            &with_retry_info(Code::InvalidArgument, Duration::from_millis(5))
        ));
    }

    #[test]
    fn malformed_details_are_no_retry_info() {
        let s = Status::with_details(
            Code::ResourceExhausted,
            "x",
            bytes::Bytes::from_static(b"\xff\xff\xff garbage"),
        );
        assert_eq!(crate::status::retry_info(&s), None);
        assert!(!can(&DefaultClassifier, &s));
    }

    #[test]
    fn truncated_stream_is_ambiguous() {
        let s = Status::unknown(
            "protocol error: missing grpc-status trailer, stream was terminated without a final status",
        );
        assert_eq!(classify_failure(&s), FailureKind::Ambiguous);
        assert!(!can(&DefaultClassifier, &s));
    }

    #[test]
    fn code_classifier() {
        let c = CodeClassifier::new([Code::Aborted]);
        assert!(can(&c, &Status::aborted("a")));
        assert!(!can(&c, &Status::unavailable("u")));
    }

    /// A connection reset under a call: tonic's `Unknown` with an I/O
    /// cause, grpc-core's `UNAVAILABLE`.
    fn reset() -> Status {
        let mut s = Status::unknown("transport error");
        s.set_source(std::sync::Arc::new(std::io::Error::from(
            std::io::ErrorKind::ConnectionReset,
        )));
        s
    }

    #[test]
    fn a_configs_unavailable_covers_transport_failures() {
        assert!(can(&CodeClassifier::new([Code::Unavailable]), &reset()));
        assert!(!can(&CodeClassifier::new([Code::Unknown]), &reset()));
        // The server's own UNKNOWN is still UNKNOWN.
        let c = CodeClassifier::new([Code::Unavailable]);
        assert!(!can(&c, &Status::unknown("transport error")));
    }
}
