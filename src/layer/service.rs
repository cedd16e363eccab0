//! [`RetryService`]: the per-call retry loop.

use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode};
use http_body_util::BodyExt;
use tonic::body::Body;
use tonic::{Code, Status};
use tower::ServiceExt;
use tower_service::Service;
use tracing::Instrument;

use super::body::{Buffered, BufferedBody, Chunks, buffer_request, more_than_one_message};
use super::future::{BoxError, ResponseFuture};
use super::layer::{MethodConfig, ResponseKind, Shared};
use super::stats::{Counter, RetryStats};
use crate::policy::{
    FailureKind, GiveUpReason, RetryDecision, RetryReason, RetryState, classify_failure,
};
use crate::retrying::AttemptError;
use crate::sanitize::{sanitize_response, sanitize_status_headers, sanitized_body};

use crate::headers::{
    GRPC_PREVIOUS_RPC_ATTEMPTS as PREVIOUS_ATTEMPTS, GRPC_RETRY_PUSHBACK_MS as PUSHBACK,
    GRPC_TIMEOUT, grpc_status_is_ok,
};

/// Retries gRPC calls on an inner HTTP service (a tonic `Channel`).
///
/// Built by [`RetryLayer`](super::RetryLayer). Clones share the layer's
/// configuration, token bucket and counters.
#[derive(Debug, Clone)]
pub struct RetryService<S> {
    inner: S,
    shared: Arc<Shared>,
}

impl<S> RetryService<S> {
    pub(crate) fn new(inner: S, shared: Arc<Shared>) -> Self {
        RetryService { inner, shared }
    }
    /// The wrapped service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }
    /// The counters shared with the layer.
    pub fn stats(&self) -> RetryStats {
        self.shared.stats.clone()
    }
}

impl<S, B> Service<Request<Body>> for RetryService<S>
where
    S: Service<Request<Body>, Response = Response<B>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Into<BoxError>,
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    type Response = Response<Body>;
    type Error = BoxError;
    type Future = ResponseFuture;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: Request<Body>) -> Self::Future {
        // The service that was polled ready takes this call (tower's
        // contract); a fresh clone stays behind for the next one.
        let clone = self.inner.clone();
        let ready = std::mem::replace(&mut self.inner, clone);
        let span = tracing::debug_span!("grpc_retry", method = %req.uri().path());
        ResponseFuture::new(Box::pin(
            run(ready, self.shared.clone(), req).instrument(span),
        ))
    }
}

/// `grpc-retry-pushback-ms`, parsed per gRFC A6.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pushback {
    /// Retry after exactly this long.
    After(Duration),
    /// Negative or unparseable: do not retry.
    Stop,
}

fn pushback(headers: &HeaderMap) -> Option<Pushback> {
    let v = headers.get(PUSHBACK)?;
    let ms = v.to_str().ok().and_then(|s| s.trim().parse::<i64>().ok());
    Some(match ms {
        Some(ms) if ms >= 0 => Pushback::After(Duration::from_millis(ms as u64)),
        _ => Pushback::Stop,
    })
}

/// What to hand the caller if the loop stops after this attempt.
enum Deliver {
    /// The server's response, replayed from the buffer (tonic reads its status).
    Response(Response<Body>),
    /// A status for tonic to return as is (transport failures, deadlines).
    Error(Status),
}

impl Deliver {
    fn into_result(self) -> Result<Response<Body>, BoxError> {
        match self {
            Deliver::Response(r) => Ok(r),
            Deliver::Error(s) => Err(Box::new(s)),
        }
    }
}

enum Outcome {
    /// Success, or a committed response: delivered as is.
    Done(Response<Body>),
    /// A failed attempt.
    Failed {
        status: Status,
        pushback: Option<Pushback>,
        deliver: Deliver,
    },
    /// The layer's own timer fired.
    TimedOut,
}

async fn call_once<S, B>(svc: &mut S, req: Request<Body>) -> Result<Response<Body>, BoxError>
where
    S: Service<Request<Body>, Response = Response<B>>,
    S::Error: Into<BoxError>,
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    let svc = svc.ready().await.map_err(Into::into)?;
    let res = svc.call(req).await.map_err(Into::into)?;
    Ok(sanitize_response(res))
}

/// One attempt: send `req`, then judge the response.
///
/// This function and [`read_response`] return `async move` blocks instead of
/// being `async fn`s: an `async fn` copies each argument into a second slot
/// of its future, and these futures are allocated and moved on every call.
// Not an `async fn` on purpose (see the doc comment).
#[allow(clippy::manual_async_fn)]
fn attempt_once<S, B>(
    svc: &mut S,
    req: Request<Body>,
    kind: ResponseKind,
    cap: usize,
) -> impl Future<Output = Outcome> + '_
where
    S: Service<Request<Body>, Response = Response<B>>,
    S::Error: Into<BoxError>,
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    async move {
        let ready = match svc.ready().await {
            Ok(ready) => ready,
            Err(e) => return transport_failure(e.into()),
        };
        let res = match ready.call(req).await {
            Ok(res) => res,
            Err(e) => return transport_failure(e.into()),
        };
        read_response(res, kind, cap).await
    }
}

/// A failure before any response: the same conversion tonic's client
/// applies, so the source chain (ConnectError, hyper, h2, io) survives for
/// classify_failure.
fn transport_failure(e: BoxError) -> Outcome {
    let status = Status::from_error(e);
    Outcome::Failed {
        status: status.clone(),
        pushback: None,
        deliver: Deliver::Error(status),
    }
}

/// The gRPC mapping of HTTP status codes, for responses without `grpc-status`
/// (e.g. a proxy's 503), so the policy sees what tonic would report.
fn code_from_http(status: StatusCode) -> Code {
    match status {
        StatusCode::BAD_REQUEST => Code::Internal,
        StatusCode::UNAUTHORIZED => Code::Unauthenticated,
        StatusCode::FORBIDDEN => Code::PermissionDenied,
        StatusCode::NOT_FOUND => Code::Unimplemented,
        StatusCode::TOO_MANY_REQUESTS
        | StatusCode::BAD_GATEWAY
        | StatusCode::SERVICE_UNAVAILABLE
        | StatusCode::GATEWAY_TIMEOUT => Code::Unavailable,
        _ => Code::Unknown,
    }
}

fn rebuild(
    parts: http::response::Parts,
    data: Chunks,
    rest: Option<Body>,
    trailers: Option<HeaderMap>,
) -> Response<Body> {
    Response::from_parts(
        parts,
        BufferedBody::new(data, rest, trailers, None).into_tonic(),
    )
}

/// Find the attempt's status without delivering anything to the caller:
/// trailers-only headers, or the trailers after a buffered unary message.
/// A response that cannot be judged before data must flow is committed.
///
/// The response is sanitized ([`sanitize_status_headers`]) here: its headers
/// at once, its trailers when read; a body handed on unread is wrapped in
/// the sanitizing body. Same result as `sanitize_response` first, without
/// boxing a buffered unary response twice.
///
/// Not an `async fn`, like [`attempt_once`]: the response is split before
/// the block captures it, so it is not held twice.
fn read_response<B>(
    res: Response<B>,
    kind: ResponseKind,
    cap: usize,
) -> impl Future<Output = Outcome>
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    let (mut parts, body) = res.into_parts();
    async move {
        sanitize_status_headers(&mut parts.headers);
        // Pinned on the heap once (tonic's body box did this before), so a
        // committed stream can be handed on without another copy.
        let mut body = Box::pin(body);
        // Trailers-only response. An OK one is passed on without building a
        // Status (which copies every header into its metadata).
        if let Some(ok) = grpc_status_is_ok(&parts.headers) {
            let status = (!ok)
                .then(|| Status::from_header_map(&parts.headers))
                .flatten();
            let res = Response::from_parts(parts, sanitized_body(body));
            let Some(status) = status.filter(|s| s.code() != Code::Ok) else {
                return Outcome::Done(res);
            };
            let pushback = pushback(res.headers());
            return Outcome::Failed {
                status,
                pushback,
                deliver: Deliver::Response(res),
            };
        }
        if parts.status != StatusCode::OK {
            let status = Status::new(
                code_from_http(parts.status),
                format!(
                    "grpc-status header missing, mapped from HTTP status code {}",
                    parts.status.as_u16()
                ),
            );
            return Outcome::Failed {
                status,
                pushback: None,
                deliver: Deliver::Response(Response::from_parts(parts, sanitized_body(body))),
            };
        }
        let mut data = Chunks::default();
        let mut len = 0usize;
        loop {
            match body.frame().await {
                // No trailers: tonic reports the missing status itself (Ambiguous).
                None => return Outcome::Done(rebuild(parts, data, None, None)),
                // Nothing was delivered yet, so the failure is the attempt's.
                // (The conversion tonic's body applies to a body error.)
                Some(Err(e)) => {
                    let e = Status::from_error(e.into());
                    return Outcome::Failed {
                        status: e.clone(),
                        pushback: None,
                        deliver: Deliver::Error(e),
                    };
                }
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(d) => {
                        len = len.saturating_add(d.len());
                        data.push(d);
                        let commit = match kind {
                            ResponseKind::ServerStreaming => true,
                            ResponseKind::Unary => len > cap,
                            ResponseKind::Auto => len > cap || more_than_one_message(&data),
                        };
                        if commit {
                            return Outcome::Done(rebuild(
                                parts,
                                data,
                                Some(sanitized_body(body)),
                                None,
                            ));
                        }
                    }
                    Err(frame) => {
                        if let Ok(mut trailers) = frame.into_trailers() {
                            sanitize_status_headers(&mut trailers);
                            // The common case, OK, needs no Status at all.
                            let status = match grpc_status_is_ok(&trailers) {
                                Some(false) => Status::from_header_map(&trailers)
                                    .filter(|s| s.code() != Code::Ok),
                                _ => None,
                            };
                            let Some(status) = status else {
                                return Outcome::Done(rebuild(parts, data, None, Some(trailers)));
                            };
                            let pb = pushback(&trailers).or_else(|| pushback(&parts.headers));
                            return Outcome::Failed {
                                status,
                                pushback: pb,
                                deliver: Deliver::Response(rebuild(
                                    parts,
                                    data,
                                    None,
                                    Some(trailers),
                                )),
                            };
                        }
                    }
                },
            }
        }
    }
}

/// Parse a `grpc-timeout` header (`1*8DIGIT unit`); garbage is ignored.
pub(crate) fn parse_grpc_timeout(headers: &HeaderMap) -> Option<Duration> {
    let s = headers.get(GRPC_TIMEOUT)?.to_str().ok()?;
    if s.len() < 2 || s.len() > 9 {
        return None;
    }
    let (digits, unit) = s.split_at(s.len() - 1);
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n * 3600),
        "M" => Duration::from_secs(n * 60),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

/// Format a `grpc-timeout` header: the finest unit that fits in 8 digits.
pub(crate) fn format_grpc_timeout(d: Duration) -> HeaderValue {
    const MAX: u128 = 99_999_999;
    let s = if d.as_micros() <= MAX {
        format!("{}u", d.as_micros())
    } else if d.as_millis() <= MAX {
        format!("{}m", d.as_millis())
    } else if u128::from(d.as_secs()) <= MAX {
        format!("{}S", d.as_secs())
    } else {
        format!("{}H", (d.as_secs() / 3600).min(99_999_999))
    };
    HeaderValue::try_from(s).unwrap_or(HeaderValue::from_static("99999999H"))
}

/// A server status that says the work never started, so even a
/// non-idempotent call may be replayed: an explicit non-negative pushback
/// (the server asks for this very retry), or RESOURCE_EXHAUSTED carrying
/// RetryInfo (admission control rejects before work).
fn rejected_before_work(status: &Status, kind: FailureKind, pushback: Option<Pushback>) -> bool {
    kind == FailureKind::Server
        && (matches!(pushback, Some(Pushback::After(_)))
            || (status.code() == Code::ResourceExhausted
                && crate::status::retry_info(status).is_some()))
}

fn event(path: &str, attempt: u32, code: Code, wait: Option<Duration>, why: &'static str) {
    tracing::debug!(
        method = path,
        attempt,
        code = ?code,
        wait_ms = wait.map(|w| w.as_millis() as u64),
        why,
        "grpc attempt"
    );
}

/// What the loop does after an attempt.
enum Next {
    /// Stop and hand this to the caller.
    Return(Result<Response<Body>, BoxError>),
    /// Sleep this long, then try again.
    Wait(Duration),
}

/// The per-call state the decisions need, kept apart from the async loop so
/// that the decisions stay synchronous and the loop's future small (it is
/// allocated and moved on every call).
struct Call<'a> {
    shared: &'a Shared,
    path: &'a str,
    method: MethodConfig,
    /// When the call started, for the deadline message.
    start: Duration,
    /// The overall deadline, on `shared.retrying`'s clock.
    deadline: Option<Duration>,
    /// The policies' budgets, made on the first failure (most calls never fail).
    state: Option<RetryState>,
}

/// The time limits of one attempt.
#[derive(Clone, Copy)]
struct AttemptBudget {
    /// The attempt's timeout: the overall time left, or the per-attempt
    /// timeout, whichever is shorter.
    limit: Option<Duration>,
    /// Whether a timeout would be this attempt's own (retryable) rather
    /// than the whole call's.
    attempt_bound: bool,
}

impl Call<'_> {
    fn budget(&self) -> AttemptBudget {
        let clock = self.shared.retrying.clock();
        let remaining = self.deadline.map(|d| d.saturating_sub(clock.now()));
        let per_attempt = self.shared.per_attempt_timeout;
        AttemptBudget {
            limit: match (remaining, per_attempt) {
                (Some(r), Some(p)) => Some(r.min(p)),
                (r, p) => r.or(p),
            },
            attempt_bound: per_attempt.is_some_and(|p| remaining.is_none_or(|r| p < r)),
        }
    }

    /// A timeout: the whole call's (stop), or a per-attempt one with time
    /// left overall, which the policy sees as UNAVAILABLE (the attempt got
    /// no answer in time) and the caller — if the loop stops here — as
    /// DEADLINE_EXCEEDED.
    fn on_timeout(
        &self,
        attempt: u32,
        budget: AttemptBudget,
    ) -> Result<(Status, Option<Pushback>, Deliver), BoxError> {
        if !budget.attempt_bound {
            event(self.path, attempt, Code::DeadlineExceeded, None, "deadline");
            return Err(Box::new(Status::deadline_exceeded(format!(
                "deadline of {} ms exceeded after {} attempt(s)",
                self.deadline
                    .map_or(0, |d| d.saturating_sub(self.start).as_millis()),
                attempt + 1
            ))));
        }
        let msg = format!(
            "attempt timed out after {} ms",
            budget.limit.unwrap_or_default().as_millis()
        );
        Ok((
            Status::unavailable(msg.clone()),
            None,
            Deliver::Error(Status::deadline_exceeded(msg)),
        ))
    }

    /// Decide what follows an attempt.
    fn after_attempt(&mut self, outcome: Outcome, attempt: u32, budget: AttemptBudget) -> Next {
        let shared = self.shared;
        let stats = &shared.stats;
        let failed = match outcome {
            Outcome::Done(res) => {
                if let Some(t) = &shared.throttle {
                    t.on_success();
                }
                event(self.path, attempt, Code::Ok, None, "done");
                return Next::Return(Ok(res));
            }
            Outcome::TimedOut => self.on_timeout(attempt, budget),
            // The channel enforces the grpc-timeout we set, too; whichever
            // timer fires first, it is the same deadline.
            Outcome::Failed { status, .. }
                if budget.limit.is_some() && classify_failure(&status) == FailureKind::Deadline =>
            {
                self.on_timeout(attempt, budget)
            }
            Outcome::Failed {
                status,
                pushback,
                deliver,
            } => Ok((status, pushback, deliver)),
        };
        let (status, pushback, deliver) = match failed {
            Ok(f) => f,
            Err(e) => return Next::Return(Err(e)),
        };
        let path = self.path;
        let code = status.code();
        let kind = classify_failure(&status);
        let retrying = &shared.retrying;
        let state = self.state.get_or_insert_with(|| retrying.new_state());
        if let Some(t) = &shared.throttle {
            // A6: only failures the policy would retry, or with pushback, count.
            if pushback.is_some() || state.matching_policy(&status).is_some() {
                t.on_failure();
            }
        }
        if pushback == Some(Pushback::Stop) {
            event(path, attempt, code, None, "pushback_stop");
            return Next::Return(deliver.into_result());
        }
        if !(self.method.is_idempotent()
            || kind == FailureKind::Unprocessed
            || rejected_before_work(&status, kind, pushback))
        {
            event(path, attempt, code, None, "not_replayable");
            return Next::Return(deliver.into_result());
        }
        let decision = retrying.decide(state, &AttemptError::<Infallible>::Status(status));
        let (delay, index, server_delay) = match decision {
            RetryDecision::Retry {
                delay,
                reason:
                    RetryReason::Policy {
                        index,
                        server_delay,
                    },
            } => (delay, Some(index), server_delay),
            RetryDecision::Retry { delay, .. } => (delay, None, None),
            RetryDecision::GiveUp(reason) => {
                let why = if reason == GiveUpReason::NotRetryable {
                    "not_retryable"
                } else {
                    stats.incr(Counter::Exhausted);
                    "exhausted"
                };
                event(path, attempt, code, None, why);
                return Next::Return(deliver.into_result());
            }
        };
        if shared.throttle.as_ref().is_some_and(|t| !t.allows_retry()) {
            stats.incr(Counter::Throttled);
            event(path, attempt, code, None, "throttled");
            return Next::Return(deliver.into_result());
        }
        // Precedence: pushback (exact wait; backoff restarts, A6) > the
        // policy's wait, which already has RetryInfo as its floor.
        let (wait, why) = match pushback {
            Some(Pushback::After(d)) => {
                if let Some(i) = index {
                    state.restart_backoff(i);
                }
                (d, "pushback")
            }
            _ if server_delay.is_some() => (delay, "retry_info"),
            _ => (delay, "policy"),
        };
        // Never schedule an attempt that would start past the deadline (Armeria).
        if self
            .deadline
            .is_some_and(|d| retrying.clock().now() + wait >= d)
        {
            event(path, attempt, code, Some(wait), "deadline");
            return Next::Return(deliver.into_result());
        }
        stats.incr(Counter::Retries);
        event(path, attempt, code, Some(wait), why);
        Next::Wait(wait)
    }
}

/// The request of attempt `attempt`: the call's parts, the retry and
/// deadline headers, and the replayed body.
fn attempt_request(
    parts: &http::request::Parts,
    attempt: u32,
    limit: Option<Duration>,
    replay: &super::body::ReplayBody,
) -> Request<Body> {
    let mut p = parts.clone();
    if attempt > 0 {
        p.headers
            .insert(PREVIOUS_ATTEMPTS, HeaderValue::from(attempt));
    }
    if let Some(b) = limit {
        p.headers.insert(GRPC_TIMEOUT, format_grpc_timeout(b));
    }
    Request::from_parts(p, replay.body())
}

/// The whole call. A plain function returning an `async move` block (see
/// [`attempt_once`]); the request is split before the block captures it.
fn run<S, B>(
    mut svc: S,
    shared: Arc<Shared>,
    req: Request<Body>,
) -> impl Future<Output = Result<Response<Body>, BoxError>>
where
    S: Service<Request<Body>, Response = Response<B>> + Send,
    S::Error: Into<BoxError>,
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    let (parts, body) = req.into_parts();
    // The single-attempt paths below box their futures: they are rare, and
    // inline they set the size of every call's future (2.4 KiB instead of
    // 1.4 KiB, `-Zprint-type-sizes`).
    async move {
        let stats = &shared.stats;
        stats.incr(Counter::Calls);
        let method = shared.method(parts.uri.path());
        if !method.is_retried() {
            stats.incr(Counter::Attempts);
            return Box::pin(call_once(&mut svc, Request::from_parts(parts, body))).await;
        }
        let replay = match buffer_request(body, shared.max_request_buffer).await {
            Buffered::Replay(r) => r,
            Buffered::TooLarge(body) => {
                stats.incr(Counter::PassthroughTooLarge);
                stats.incr(Counter::Attempts);
                tracing::debug!(
                    method = parts.uri.path(),
                    cap = shared.max_request_buffer,
                    "request body over the replay cap: sent once, without retries"
                );
                return Box::pin(call_once(&mut svc, Request::from_parts(parts, body))).await;
            }
            // Let the inner service see the body error exactly as without the layer.
            Buffered::Failed(body) => {
                stats.incr(Counter::Attempts);
                return Box::pin(call_once(&mut svc, Request::from_parts(parts, body))).await;
            }
        };
        // The clock is read only when there is a deadline to keep.
        let (start, deadline) = match parse_grpc_timeout(&parts.headers).or(shared.default_deadline)
        {
            Some(d) => {
                let start = shared.retrying.clock().now();
                (start, Some(start + d))
            }
            None => (Duration::ZERO, None),
        };
        let mut call = Call {
            shared: &shared,
            path: parts.uri.path(),
            method,
            start,
            deadline,
            state: None,
        };
        let (kind, cap) = (method.kind(), shared.max_response_buffer);
        let mut attempt: u32 = 0;
        loop {
            let budget = call.budget();
            stats.incr(Counter::Attempts);
            // The request is built inside each arm: a local would keep its
            // own slot in this future next to the awaited one.
            let outcome = match budget.limit {
                Some(b) => tokio::time::timeout(
                    b,
                    attempt_once(
                        &mut svc,
                        attempt_request(&parts, attempt, budget.limit, &replay),
                        kind,
                        cap,
                    ),
                )
                .await
                .unwrap_or(Outcome::TimedOut),
                None => {
                    attempt_once(
                        &mut svc,
                        attempt_request(&parts, attempt, budget.limit, &replay),
                        kind,
                        cap,
                    )
                    .await
                }
            };
            match call.after_attempt(outcome, attempt, budget) {
                Next::Return(r) => return r,
                Next::Wait(wait) => shared.retrying.sleeper().sleep(wait).await,
            }
            attempt += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeout_header_roundtrip_and_garbage() {
        for d in [
            Duration::from_micros(1),
            Duration::from_millis(1500),
            Duration::from_secs(1000),
            Duration::from_secs(10_000_000),
        ] {
            let mut h = HeaderMap::new();
            h.insert(GRPC_TIMEOUT, format_grpc_timeout(d));
            let back = parse_grpc_timeout(&h).unwrap();
            assert!(
                back <= d && d - back < Duration::from_secs(1),
                "{d:?} {back:?}"
            );
        }
        for bad in ["", "m", "12x", "-1m", "123456789m", "1.5S", "ümm"] {
            let mut h = HeaderMap::new();
            if let Ok(v) = HeaderValue::from_str(bad) {
                h.insert(GRPC_TIMEOUT, v);
            }
            assert_eq!(parse_grpc_timeout(&h), None, "{bad}");
        }
    }

    #[test]
    fn pushback_parsing() {
        let mut h = HeaderMap::new();
        assert_eq!(pushback(&h), None);
        h.insert(PUSHBACK, HeaderValue::from_static("250"));
        assert_eq!(
            pushback(&h),
            Some(Pushback::After(Duration::from_millis(250)))
        );
        h.insert(PUSHBACK, HeaderValue::from_static("-1"));
        assert_eq!(pushback(&h), Some(Pushback::Stop));
        h.insert(PUSHBACK, HeaderValue::from_static("soon"));
        assert_eq!(pushback(&h), Some(Pushback::Stop));
    }
}
