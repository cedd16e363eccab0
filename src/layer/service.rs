//! [`RetryService`]: the per-call retry loop.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Request, Response};
use tonic::Code;
use tonic::Status;
use tonic::body::Body;
use tower::Service;
use tower::ServiceExt;

use super::attempt::{Deliver, Outcome, Pushback, ReadResponse, transport_failure};
use super::body::{Buffered, Buffering, ReplayBody, RetryBody};
use super::future::{BoxError, ResponseFuture, Retry};
use super::head::RetainedHead;
use super::layer::{MethodConfig, Shared};
use super::stats::{Counter, RetryStats};
use crate::policy::{
    FailureKind, GiveUpReason, RetryDecision, RetryReason, RetryState, classify_failure,
};
use crate::retrying::AttemptError;
use crate::sanitize::sanitize_response;

use crate::headers::{GRPC_PREVIOUS_RPC_ATTEMPTS as PREVIOUS_ATTEMPTS, GRPC_TIMEOUT};

/// Retries gRPC calls on an inner HTTP service (a tonic `Channel`).
///
/// Built by [`RetryLayer`](super::RetryLayer). Clones share the layer's
/// configuration, token bucket and counters.
#[derive(Debug, Clone)]
pub struct RetryService<S> {
    inner: S,
    /// Kept by every call in case it retries: one reference count per call.
    context: Arc<ServiceContext<S>>,
}

/// What a call keeps of its service for retries.
#[derive(Debug)]
pub(crate) struct ServiceContext<S> {
    pub(crate) shared: Arc<Shared>,
    /// A clone of the inner service made once, cloned again only for a
    /// retry: the first attempt goes out on the service polled ready.
    pub(crate) spare: Mutex<S>,
}

impl<S: Clone> RetryService<S> {
    pub(crate) fn new(inner: S, shared: Arc<Shared>) -> Self {
        let context = Arc::new(ServiceContext {
            shared,
            spare: Mutex::new(inner.clone()),
        });
        RetryService { inner, context }
    }
}

/// The services the layer drives, with the bounds its private parts need
/// named once: an HTTP service over tonic bodies whose errors convert into
/// [`BoxError`], and whose response body yields `Bytes` and errors that
/// convert too. The public impls spell the same bounds out (a private trait
/// cannot appear in them); every such service is one of these.
pub(crate) trait InnerService:
    Service<Request<Body>, Response = Response<Self::ResBody>, Error: Into<BoxError>, Future: Send>
    + Send
    + 'static
{
    /// The response body.
    type ResBody: http_body::Body<Data = Bytes, Error: Into<BoxError>> + Send + 'static;
}

impl<S, B> InnerService for S
where
    S: Service<Request<Body>, Response = Response<B>> + Send + 'static,
    S::Future: Send,
    S::Error: Into<BoxError>,
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    type ResBody = B;
}

impl<S> RetryService<S> {
    /// The wrapped service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }
    /// The counters shared with the layer.
    pub fn stats(&self) -> RetryStats {
        self.context.shared.stats.clone()
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
    type Response = Response<RetryBody>;
    type Error = BoxError;
    type Future = ResponseFuture<S, S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: Request<Body>) -> Self::Future {
        let shared = &self.context.shared;
        shared.stats.incr(Counter::Calls);
        let span = tracing::debug_span!("grpc_retry", method = %req.uri().path());
        let method = shared.method(req.uri().path());
        if !method.is_retried() {
            return self.passthrough(req, span);
        }
        let (parts, body) = req.into_parts();
        // A tonic unary request body (one encoded message) is ready at once.
        let mut buffering = Buffering::new(body, shared.max_request_buffer);
        let Some(buffered) = buffering.now() else {
            return self.looping(parts, method, RequestBody::Pending(buffering), span);
        };
        let body = match buffered {
            Buffered::Replay(body) => body,
            other => return self.unreplayable(parts, method, other, span),
        };
        let timed = shared.per_attempt_timeout.is_some()
            || shared.default_deadline.is_some()
            || crate::headers::contains(&parts.headers, &GRPC_TIMEOUT);
        if timed {
            return self.looping(parts, method, RequestBody::Buffered(body), span);
        }
        // The common case: the first attempt leaves now, on the service that
        // was polled ready; nothing is boxed unless it fails.
        // The first attempt takes the original head; a retry rebuilds it.
        let call = Replayable {
            head: RetainedHead::of(&parts),
            body,
            method,
            start: Duration::ZERO,
            deadline: None,
        };
        let first = self.inner.call(attempt_request(parts, 0, None, &call.body));
        let retry = Retry {
            context: self.context.clone(),
            call,
        };
        ResponseFuture::first(first, retry, span)
    }
}

// Only private methods here, so the private bound leaks nothing.
#[allow(private_bounds)]
impl<S: InnerService + Clone> RetryService<S> {
    /// A method not retried: the inner call, its response sanitized.
    #[inline(never)]
    fn passthrough(
        &mut self,
        req: Request<Body>,
        span: tracing::Span,
    ) -> ResponseFuture<S, S::Future> {
        ResponseFuture::passthrough(self.inner.call(req), span)
    }

    /// A request body that cannot be replayed (over the cap, or failed).
    #[cold]
    #[inline(never)]
    fn unreplayable(
        &mut self,
        parts: http::request::Parts,
        method: MethodConfig,
        buffered: Buffered,
        span: tracing::Span,
    ) -> ResponseFuture<S, S::Future> {
        match replayable(&self.context.shared, parts, buffered) {
            Prepared::Replay(parts, body) => {
                self.looping(parts, method, RequestBody::Buffered(body), span)
            }
            Prepared::Once(once) => self.passthrough(once, span),
        }
    }

    /// The general path: the whole call in the boxed loop, on the service
    /// that was polled ready (a fresh clone stays for the next call).
    #[inline(never)]
    fn looping(
        &mut self,
        parts: http::request::Parts,
        method: MethodConfig,
        body: RequestBody,
        span: tracing::Span,
    ) -> ResponseFuture<S, S::Future> {
        let clone = self.inner.clone();
        let ready = std::mem::replace(&mut self.inner, clone);
        let fut = run(ready, self.context.shared.clone(), parts, method, body);
        ResponseFuture::looping(Box::pin(fut), span)
    }
}

/// A request body on its way into the general loop.
enum RequestBody {
    /// Read to the end already.
    Buffered(ReplayBody),
    /// Still being read.
    Pending(Buffering),
}

/// A buffered body ready for replay (with the parts given back), or the
/// request to send once, unretried: over the cap (counted), or with a body
/// error the inner service sees exactly as without the layer.
fn replayable(shared: &Shared, parts: http::request::Parts, buffered: Buffered) -> Prepared {
    match buffered {
        Buffered::Replay(body) => Prepared::Replay(parts, body),
        Buffered::TooLarge(body) => {
            shared.stats.incr(Counter::PassthroughTooLarge);
            tracing::debug!(
                method = parts.uri.path(),
                cap = shared.max_request_buffer,
                "request body over the replay cap: sent once, without retries"
            );
            Prepared::Once(Request::from_parts(parts, body))
        }
        Buffered::Failed(body) => Prepared::Once(Request::from_parts(parts, body)),
    }
}

/// See [`replayable`].
enum Prepared {
    Replay(http::request::Parts, ReplayBody),
    Once(Request<Body>),
}

/// What a replayed call keeps between attempts.
pub(crate) struct Replayable {
    pub(crate) head: RetainedHead,
    pub(crate) body: ReplayBody,
    pub(crate) method: MethodConfig,
    /// When the call started, for the deadline message.
    pub(crate) start: Duration,
    /// The overall deadline, on the retrying clock.
    pub(crate) deadline: Option<Duration>,
}

async fn call_once<S: InnerService>(
    mut svc: S,
    req: Request<Body>,
) -> Result<Response<RetryBody>, BoxError> {
    let svc = svc.ready().await.map_err(Into::into)?;
    let res = svc.call(req).await.map_err(Into::into)?;
    Ok(sanitize_response(res, RetryBody::passed))
}

/// One attempt: send `req`, then judge the response.
async fn attempt_once<S: InnerService>(
    svc: &mut S,
    req: Request<Body>,
    method: MethodConfig,
    cap: usize,
) -> Outcome {
    let ready = match svc.ready().await {
        Ok(ready) => ready,
        Err(e) => return transport_failure(e.into()),
    };
    let res = match ready.call(req).await {
        Ok(res) => res,
        Err(e) => return transport_failure(e.into()),
    };
    ReadResponse::new(res, method.kind(), cap).await
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

pub(crate) fn event(
    path: &str,
    attempt: u32,
    code: Code,
    wait: Option<Duration>,
    why: &'static str,
) {
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
// The response is the common variant; boxing it would add back the
// allocation an inline `RetryBody` saves.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Next {
    /// Stop and hand this to the caller.
    Return(Result<Response<RetryBody>, BoxError>),
    /// Sleep this long, then try again.
    Wait(Duration),
}

/// The per-call state the decisions need, kept apart from the async loop so
/// that the decisions stay synchronous: the first attempt, judged in the
/// response future, and the later ones, in the loop, go through the same
/// [`Call::after_attempt`].
pub(crate) struct Call<'a> {
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

/// The time limits of one attempt (none by default).
#[derive(Clone, Copy, Default)]
pub(crate) struct AttemptBudget {
    /// The attempt's timeout: the overall time left, or the per-attempt
    /// timeout, whichever is shorter.
    limit: Option<Duration>,
    /// Whether a timeout would be this attempt's own (retryable) rather
    /// than the whole call's.
    attempt_bound: bool,
}

impl<'a> Call<'a> {
    pub(crate) fn new(shared: &'a Shared, call: &'a Replayable, state: Option<RetryState>) -> Self {
        Call {
            shared,
            path: call.head.path(),
            method: call.method,
            start: call.start,
            deadline: call.deadline,
            state,
        }
    }

    /// The policies' budgets so far, to carry into the loop.
    pub(crate) fn into_state(self) -> Option<RetryState> {
        self.state
    }
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
    pub(crate) fn after_attempt(
        &mut self,
        outcome: Outcome,
        attempt: u32,
        budget: AttemptBudget,
    ) -> Next {
        let shared = self.shared;
        let stats = &shared.stats;
        let failed = match outcome {
            Outcome::Done(res) => {
                shared.record_done(|| self.path, attempt);
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

/// The request of attempt `attempt`: the call's head, the retry and
/// deadline headers, and the replayed body.
fn attempt_request(
    mut p: http::request::Parts,
    attempt: u32,
    limit: Option<Duration>,
    replay: &ReplayBody,
) -> Request<Body> {
    if attempt > 0 {
        p.headers
            .insert(PREVIOUS_ATTEMPTS, HeaderValue::from(attempt));
    }
    if let Some(b) = limit {
        p.headers.insert(GRPC_TIMEOUT, format_grpc_timeout(b));
    }
    Request::from_parts(p, replay.body())
}

/// The general path of a call: finish reading the request body, then the
/// retry loop from the first attempt.
async fn run<S: InnerService>(
    svc: S,
    shared: Arc<Shared>,
    parts: http::request::Parts,
    method: MethodConfig,
    body: RequestBody,
) -> Result<Response<RetryBody>, BoxError> {
    let (parts, body) = match body {
        RequestBody::Buffered(body) => (parts, body),
        RequestBody::Pending(buffering) => {
            match replayable(&shared, parts, buffering.finish().await) {
                Prepared::Replay(parts, body) => (parts, body),
                Prepared::Once(once) => return call_once(svc, once).await,
            }
        }
    };
    // The clock is read only when there is a deadline to keep.
    let (start, deadline) = match parse_grpc_timeout(&parts.headers).or(shared.default_deadline) {
        Some(d) => {
            let start = shared.retrying.clock().now();
            (start, Some(start + d))
        }
        None => (Duration::ZERO, None),
    };
    let call = Replayable {
        head: RetainedHead::of(&parts),
        body,
        method,
        start,
        deadline,
    };
    retry_loop(svc, shared, call, Some(parts), None, 0, None).await
}

/// The retry loop, from attempt `first` (after `wait`, if any): the whole
/// call on the general path, or the retries after a first attempt sent
/// from `call`. `original` is the request's own head, for the loop's
/// first attempt; later ones rebuild it from `call.head`.
pub(crate) async fn retry_loop<S: InnerService>(
    mut svc: S,
    shared: Arc<Shared>,
    call: Replayable,
    mut original: Option<http::request::Parts>,
    state: Option<RetryState>,
    first: u32,
    mut wait: Option<Duration>,
) -> Result<Response<RetryBody>, BoxError> {
    let mut decide = Call::new(&shared, &call, state);
    let cap = shared.max_response_buffer;
    let mut attempt = first;
    loop {
        if let Some(w) = wait.take() {
            shared.retrying.sleeper().sleep(w).await;
        }
        let budget = decide.budget();
        if attempt > 0 {
            shared.stats.incr(Counter::Reattempts);
        }
        let parts = original.take().unwrap_or_else(|| call.head.to_parts());
        let req = attempt_request(parts, attempt, budget.limit, &call.body);
        let outcome = match budget.limit {
            Some(b) => tokio::time::timeout(b, attempt_once(&mut svc, req, call.method, cap))
                .await
                .unwrap_or(Outcome::TimedOut),
            None => attempt_once(&mut svc, req, call.method, cap).await,
        };
        match decide.after_attempt(outcome, attempt, budget) {
            Next::Return(r) => return r,
            Next::Wait(w) => wait = Some(w),
        }
        attempt += 1;
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
}
