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

use std::error::Error as StdError;
use std::time::Duration;

use http::HeaderMap;
use tonic::{Code, Status};

use crate::headers::GRPC_RETRY_PUSHBACK_MS;

/// `grpc-retry-pushback-ms`, parsed per gRFC A6.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pushback {
    /// Retry after exactly this long (capped by the policy's
    /// [`max_server_retry_delay`](super::RetryPolicy::max_server_retry_delay)).
    After(Duration),
    /// Negative or unparseable: do not retry.
    Stop,
}

impl Pushback {
    /// The pushback in `headers`, if there is one.
    pub(crate) fn from_headers(headers: &HeaderMap) -> Option<Pushback> {
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
    unsent: bool,
    retry_info: Option<Duration>,
    pushback: Option<Pushback>,
}

impl<'a> Failure<'a> {
    /// Classify `status`: its [`FailureKind`] and its `RetryInfo`, once.
    pub fn new(status: &'a Status) -> Self {
        Failure {
            status,
            kind: classify_failure(status),
            unsent: never_reached_a_server(status),
            retry_info: crate::status::retry_info(status),
            pushback: None,
        }
    }

    /// The server's `grpc-retry-pushback-ms`, read from the attempt's response.
    pub(crate) fn with_pushback(mut self, pushback: Option<Pushback>) -> Self {
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
    /// The request provably never reached the server over a connection
    /// that was up: dropped unsent by a closing connection
    /// (`hyper::Error::is_canceled`), above a GOAWAY's last stream id
    /// (remote GOAWAY, NO_ERROR) or refused (`REFUSED_STREAM`). gRFC A6
    /// re-sends these transparently, without spending the retry budget
    /// ([`RetryState::on_failure`](super::RetryState::on_failure)). A
    /// connect failure is not one of them: the server may be down, and
    /// re-sending at once would spin.
    pub(crate) fn is_unsent(&self) -> bool {
        self.unsent
    }
    /// The `google.rpc.RetryInfo` delay in the status details, if any.
    pub fn retry_info(&self) -> Option<Duration> {
        self.retry_info
    }
    /// The pushback, if the response carried one.
    pub(crate) fn pushback(&self) -> Option<Pushback> {
        self.pushback
    }
    /// A deadline: DEADLINE_EXCEEDED from the server, or the client's own
    /// deadline (tonic's timeout, [`FailureKind::Deadline`]).
    pub fn is_deadline(&self) -> bool {
        self.code() == Code::DeadlineExceeded || self.kind == FailureKind::Deadline
    }
}

/// Where a failed call's [`Status`] came from, as far as the client can tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FailureKind {
    /// Sent by the server (or inferred by tonic from the HTTP response).
    Server,
    /// A transport failure before the request reached the server: safe to
    /// replay even a non-idempotent call.
    Unprocessed,
    /// A transport failure after the request may have been processed.
    MaybeProcessed,
    /// The client's own deadline expired (tonic reports it as `Cancelled`
    /// "Timeout expired"); its gRPC meaning is DEADLINE_EXCEEDED.
    Deadline,
    /// A truncated stream or a stream reset by the peer with a reason that
    /// does not say whether the work happened. Not retried by default.
    Ambiguous,
    /// A local error that is not a recognised transport failure.
    Local,
}

impl FailureKind {
    /// A transport failure that grpc-core would report as UNAVAILABLE.
    pub fn is_transport(self) -> bool {
        matches!(self, FailureKind::Unprocessed | FailureKind::MaybeProcessed)
    }
}

const MISSING_TRAILER_PREFIX: &str = "protocol error: missing grpc-status trailer";
/// tonic's status when the body ends inside a message (a proxy cut the
/// stream with END_STREAM mid-message): a truncated stream, like a missing
/// trailer.
const TRUNCATED_MESSAGE: &str = "Unexpected EOF decoding stream.";

/// Classify `status` by its source chain; see the module docs for the table.
pub(crate) fn classify_failure(status: &Status) -> FailureKind {
    if status.source().is_none() {
        return classify_sourceless(status);
    }
    sources(status)
        .find_map(classify_link)
        .unwrap_or(FailureKind::Local)
}

/// A status with no source: the server's, unless tonic made it from a
/// stream that ended early.
fn classify_sourceless(status: &Status) -> FailureKind {
    if status.code() == Code::Unknown && status.message().starts_with(MISSING_TRAILER_PREFIX) {
        return FailureKind::Ambiguous;
    }
    if status.code() == Code::Internal && status.message() == TRUNCATED_MESSAGE {
        return FailureKind::Ambiguous;
    }
    FailureKind::Server
}

/// The errors in `status`'s source chain, outermost first: the one walk of
/// a status's causes in this crate and in its users. A [`Status`] nested
/// in the chain (a give-up keeps its last attempt's behind the history) is
/// yielded and then walked through by its own `source()`, so what it
/// carries is found too.
///
/// ```
/// use std::error::Error as _;
/// use tonic_retry::policy::sources;
///
/// let io = std::io::Error::other("connection reset");
/// let inner = tonic::Status::from_error(Box::new(io));
/// let outer = tonic::Status::from_error(Box::new(inner));
/// let found = sources(&outer).find_map(|e| e.downcast_ref::<std::io::Error>());
/// assert_eq!(found.unwrap().to_string(), "connection reset");
/// assert_eq!(sources(&tonic::Status::internal("x")).count(), 0);
/// ```
pub fn sources(status: &Status) -> impl Iterator<Item = &(dyn StdError + 'static)> {
    std::iter::successors(status.source(), |&err: &&(dyn StdError + 'static)| {
        err.source()
    })
}

/// See [`Failure::is_unsent`].
fn never_reached_a_server(status: &Status) -> bool {
    sources(status).find_map(unsent_link).unwrap_or(false)
}

/// What one link of the chain says about whether the request was sent:
/// `None` to look further (a nested [`Status`] is walked through).
fn unsent_link(err: &(dyn StdError + 'static)) -> Option<bool> {
    if err.is::<tonic::TimeoutExpired>() || err.is::<tonic::ConnectError>() {
        return Some(false);
    }
    if let Some(h) = err.downcast_ref::<hyper::Error>() {
        if h.is_canceled() {
            return Some(true);
        }
        if h.is_timeout() {
            return Some(false);
        }
    }
    if let Some(h2) = err.downcast_ref::<h2::Error>() {
        let reason = h2.reason();
        return Some(
            h2.is_remote()
                && !h2.is_io()
                && ((h2.is_go_away() && reason == Some(h2::Reason::NO_ERROR))
                    || reason == Some(h2::Reason::REFUSED_STREAM)),
        );
    }
    if err.is::<std::io::Error>() {
        return Some(false);
    }
    None
}

fn classify_link(err: &(dyn StdError + 'static)) -> Option<FailureKind> {
    if err.is::<tonic::TimeoutExpired>() {
        return Some(FailureKind::Deadline);
    }
    if err.is::<tonic::ConnectError>() {
        return Some(FailureKind::Unprocessed);
    }
    if let Some(status) = err.downcast_ref::<Status>() {
        // A status nested in a status: judged by its own message when it
        // has no source; otherwise the walk goes on into its causes.
        return status
            .source()
            .is_none()
            .then(|| classify_sourceless(status));
    }
    if let Some(h) = err.downcast_ref::<hyper::Error>() {
        if h.is_timeout() {
            return Some(FailureKind::MaybeProcessed);
        }
        if h.is_canceled() {
            return Some(FailureKind::Unprocessed);
        }
        return None;
    }
    if let Some(h2) = err.downcast_ref::<h2::Error>() {
        if h2.is_io() {
            return Some(FailureKind::MaybeProcessed);
        }
        let reason = h2.reason();
        if h2.is_go_away() && h2.is_remote() {
            return Some(if reason == Some(h2::Reason::NO_ERROR) {
                FailureKind::Unprocessed
            } else {
                FailureKind::MaybeProcessed
            });
        }
        if reason == Some(h2::Reason::REFUSED_STREAM) && h2.is_remote() {
            return Some(FailureKind::Unprocessed);
        }
        if h2.is_reset() || reason == Some(h2::Reason::ENHANCE_YOUR_CALM) {
            return Some(FailureKind::Ambiguous);
        }
        // A locally detected protocol error: a bug, not a network fault.
        return Some(FailureKind::Local);
    }
    if err.is::<std::io::Error>() {
        return Some(FailureKind::MaybeProcessed);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_walk_goes_through_nested_statuses() {
        let io = std::io::Error::other("refused");
        let mut inner = Status::unavailable("inner");
        inner.set_source(std::sync::Arc::new(io));
        let mut outer = Status::unknown("outer");
        outer.set_source(std::sync::Arc::new(inner));
        let texts: Vec<String> = sources(&outer).map(ToString::to_string).collect();
        assert_eq!(texts.len(), 2, "{texts:?}");
        assert_eq!(texts[1], "refused");
        // Judged by the nested status's cause: an I/O error on the link.
        assert_eq!(classify_failure(&outer), FailureKind::MaybeProcessed);
        // A nested status without a source is judged by its message.
        let mut cut = Status::unknown("outer");
        cut.set_source(std::sync::Arc::new(Status::internal(TRUNCATED_MESSAGE)));
        assert_eq!(classify_failure(&cut), FailureKind::Ambiguous);
    }

    #[test]
    fn a_stream_ended_inside_a_message_is_ambiguous() {
        // tonic's own status when END_STREAM arrives mid-message.
        let cut = Status::internal("Unexpected EOF decoding stream.");
        assert_eq!(classify_failure(&cut), FailureKind::Ambiguous);
        // The same code with another message is the server's.
        let server = Status::internal("Unexpected EOF decoding stream. (from the server)");
        assert_eq!(classify_failure(&server), FailureKind::Server);
    }

    /// One gRPC-shaped request over a real tonic channel to `addr`, as the status
    /// a driver sees.
    async fn call(addr: std::net::SocketAddr) -> Status {
        use tower::ServiceExt;
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
            .unwrap()
            .connect_lazy();
        let request = http::Request::builder()
            .method("POST")
            .uri(format!("http://{addr}/echo.Echo/Unary"))
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(tonic::body::Body::empty())
            .unwrap();
        let err = channel.oneshot(request).await.expect_err("refused");
        Status::from_error(err.into())
    }

    #[tokio::test]
    async fn a_refused_stream_is_unsent_and_retried_transparently_within_a_bound() {
        use crate::policy::state::MAX_TRANSPARENT_RETRIES;
        use crate::policy::{RetryDecision, RetryPolicy, RetryReason};
        // A raw HTTP/2 peer that refuses every stream (RST_STREAM(REFUSED_STREAM)).
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
            .await
            .unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let (tcp, _) = listener.accept().await.unwrap();
            let mut conn = h2::server::handshake(tcp).await.unwrap();
            while let Some(Ok((_, mut respond))) = conn.accept().await {
                respond.send_reset(h2::Reason::REFUSED_STREAM);
            }
        });
        let status = call(addr).await;
        let failure = Failure::new(&status);
        assert!(failure.is_unsent(), "{status:?}");
        assert_eq!(failure.kind(), FailureKind::Unprocessed);
        // No budget at all: the transparent re-sends still happen, then the policy decides.
        let policy = RetryPolicy::builder().max_retries(Some(0)).build().unwrap();
        let mut state = crate::policy::RetryState::new(
            std::sync::Arc::from(vec![policy]),
            std::time::Duration::from_secs(60),
        );
        for _ in 0..MAX_TRANSPARENT_RETRIES {
            let matched = state.matching(&failure);
            let d = state.on_failure(&failure, matched, &mut || 0.5);
            assert_eq!(
                d,
                RetryDecision::Retry {
                    delay: std::time::Duration::ZERO,
                    reason: RetryReason::Transparent
                }
            );
        }
        let matched = state.matching(&failure);
        assert!(matches!(
            state.on_failure(&failure, matched, &mut || 0.5),
            RetryDecision::GiveUp(_)
        ));
        assert_eq!(state.transparent_retries(), MAX_TRANSPARENT_RETRIES);
    }

    #[tokio::test]
    async fn a_refused_connection_is_not_unsent() {
        // The server may be down: backed off by the policy, never re-sent at once.
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
            .await
            .unwrap();
        let addr = listener.local_addr().unwrap();
        drop(listener);
        let status = call(addr).await;
        let failure = Failure::new(&status);
        assert_eq!(failure.kind(), FailureKind::Unprocessed);
        assert!(!failure.is_unsent(), "{status:?}");
        assert!(!Failure::new(&Status::unavailable("server says")).is_unsent());
    }
}
