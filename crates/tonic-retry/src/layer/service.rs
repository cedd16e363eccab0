//! [`RetryService`]: the driver of one call's attempts.
//!
//! `call` buffers nothing itself: it moves the service that was polled
//! ready into one boxed future, which reads the request body into memory,
//! then sends attempts and does what [`decide`] says after each, or, for a
//! hedged method, runs attempts side by side as [`Hedge`] says.

use std::collections::HashMap;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use tonic::body::Body;
use tower::{Service, ServiceExt};
use tracing::Instrument;

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use tonic::Status;

use super::attempt::{Attempt, Inner, attempt, parse_grpc_timeout, request};
use super::body::{Buffered, buffer};
use super::call::{CallOptions, CallStatsHandle};
use super::decide::{CallState, Next, Rules, decide, split_path};
use super::hedging_machine::{Commit, Hedge, Step};
use super::hedging_policy::HedgingPolicy;
use super::method::MethodConfig;
use super::stats::RetryStatsHandle;
use super::throttle::RetryThrottle;
use crate::boxed::{BoxError, BoxFuture};
use crate::recorder::{CallRecorder, Meters};
use crate::retrying::Retrying;
use crate::sanitize::{sanitize_response, sanitized_body};

/// Everything a [`RetryService`] shares with its clones.
#[derive(Debug, Clone)]
pub(crate) struct Shared {
    pub(crate) retrying: Retrying,
    /// By full path, then by service name (gRFC A6's service-wide entries).
    pub(crate) methods: HashMap<String, MethodConfig>,
    pub(crate) services: HashMap<String, MethodConfig>,
    pub(crate) default_method: MethodConfig,
    pub(crate) max_request_buffer: usize,
    pub(crate) max_response_buffer: usize,
    pub(crate) default_deadline: Option<Duration>,
    pub(crate) per_attempt_timeout: Option<Duration>,
    pub(crate) throttle: Option<Arc<RetryThrottle>>,
    pub(crate) stats: RetryStatsHandle,
    /// The server the give-up event names when a request has no authority.
    pub(crate) target: Option<String>,
    /// The metrics calls are recorded into, if any.
    pub(crate) meters: Meters,
}

impl Shared {
    /// The settings for `path`: the method's, else its service's, else the default.
    pub(crate) fn method(&self, path: &str) -> &MethodConfig {
        if let Some(m) = self.methods.get(path) {
            return m;
        }
        if !self.services.is_empty() {
            let (service, _) = split_path(path);
            if let Some(m) = self.services.get(service) {
                return m;
            }
        }
        &self.default_method
    }
}

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
    type Future = BoxFuture<Result<Response<Body>, BoxError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: Request<Body>) -> Self::Future {
        // The service polled ready takes the call; a clone stays for the next.
        let clone = self.inner.clone();
        let svc = std::mem::replace(&mut self.inner, clone);
        let (service, method) = split_path(req.uri().path());
        let span = tracing::debug_span!(
            "grpc_retry",
            rpc.system = "grpc",
            rpc.service = service,
            rpc.method = method,
            rpc.grpc.status_code = tracing::field::Empty,
        );
        Box::pin(run(svc, self.shared.clone(), req).instrument(span))
    }
}

/// One call, from its request to the response handed to the caller.
async fn run<S: Inner + Clone>(
    mut svc: S,
    shared: Arc<Shared>,
    req: Request<Body>,
) -> Result<Response<Body>, BoxError> {
    let stats = &shared.stats;
    stats.call();
    let mut rec = shared.meters.call(req.uri().path());
    let method = shared.method(req.uri().path());
    let options = req
        .extensions()
        .get::<CallOptions>()
        .cloned()
        .unwrap_or_default();
    let call_stats = options.stats.clone();
    if !method.is_retried() || options.max_attempts == Some(1) {
        if let Some(s) = &call_stats {
            s.attempt();
        }
        return once(svc, req, &shared, rec).await;
    }
    let (head, body) = req.into_parts();
    let body = match buffer(body, shared.max_request_buffer).await {
        Buffered::Whole(body) => body,
        Buffered::TooLarge(body) => {
            stats.too_large();
            tracing::debug!(
                cap = shared.max_request_buffer,
                "request body over the replay cap: sent once, without retries"
            );
            return once(svc, Request::from_parts(head, body), &shared, rec).await;
        }
        Buffered::Failed(body) => {
            return once(svc, Request::from_parts(head, body), &shared, rec).await;
        }
    };
    rec.request_size(body.chunks());
    let target = head
        .uri
        .authority()
        .map(|a| a.to_string())
        .or_else(|| shared.target.clone());
    let retrying = method.retrying().unwrap_or(&shared.retrying);
    let rules = Rules {
        retrying,
        throttle: shared.throttle.as_deref(),
    };
    let clock = retrying.clock();
    let path = head
        .uri
        .path_and_query()
        .cloned()
        .unwrap_or_else(|| http::uri::PathAndQuery::from_static("/"));
    let mut call = CallState::new(path, method.is_idempotent())
        .with_attempt_timeout(shared.per_attempt_timeout)
        .with_target(target)
        .with_max_attempts(options.max_attempts);
    // The smaller of the caller's deadline and the configured one (gRPC);
    // a call's own deadline replaces the configured one.
    let configured = options
        .deadline
        .or(method.timeout())
        .or(shared.default_deadline);
    let timeout = match (parse_grpc_timeout(&head.headers), configured) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    if let Some(timeout) = timeout {
        call = call.with_deadline(clock.now(), timeout);
    }
    if let Some(policy) = method.hedging() {
        let policy = match options.max_attempts {
            Some(n) => policy.capped(n),
            None => policy.clone(),
        };
        let ctx = Ctx {
            head,
            body,
            kind: method.kind(),
            stats: call_stats,
        };
        return hedged(svc, &shared, &policy, call, ctx, retrying, rec).await;
    }
    loop {
        let limit = call.begin_attempt(clock.now());
        stats.attempt();
        if let Some(s) = &call_stats {
            s.attempt();
        }
        let meter = rec.attempt();
        let req = request(head.clone(), call.attempts() - 1, limit, &body);
        let result = attempt(
            &mut svc,
            req,
            method.kind(),
            shared.max_response_buffer,
            limit,
        )
        .await;
        let transparent = call.transparent_retries();
        let decision = decide(&mut call, result.outcome(), clock.now(), rules);
        stats.decided(decision.reason);
        match decision.next {
            Next::Deliver => {
                let ended = result.ended();
                return rec.deliver(Some(meter), ended, result.into_result());
            }
            Next::Fail(status) => {
                meter.ended(result.ended());
                rec.end(status.code());
                return Err(Box::new(status));
            }
            Next::Retry(wait) => {
                meter.ended(result.ended());
                rec.retried(wait, call.transparent_retries() > transparent);
                if let Some(s) = &call_stats {
                    s.retry(wait);
                }
                retrying.sleeper().sleep(wait).await
            }
        }
    }
}

/// What every attempt of a call is made from.
struct Ctx {
    head: http::request::Parts,
    body: super::body::RequestBody,
    kind: super::method::ResponseKind,
    stats: Option<CallStatsHandle>,
}

/// A hedged call: attempts side by side, each on its own clone of the
/// service, plus one timer for the next hedge. The call ends when
/// [`Hedge`] commits one attempt; dropping the others resets their HTTP/2
/// streams (`RST_STREAM` CANCEL), which the server sees as a cancellation.
async fn hedged<S: Inner + Clone>(
    svc: S,
    shared: &Shared,
    policy: &HedgingPolicy,
    call: CallState,
    ctx: Ctx,
    retrying: &crate::retrying::Retrying,
    mut rec: CallRecorder,
) -> Result<Response<Body>, BoxError> {
    let (stats, clock) = (&shared.stats, retrying.clock());
    let throttle = shared.throttle.as_deref();
    let mut hedge = Hedge::new(policy.clone(), call, clock.now());
    let mut running = FuturesUnordered::new();
    let mut last = None;
    // A timer that fired means its time has come, whatever the clock says
    // (an injected sleeper may return at once).
    let mut fired = Duration::ZERO;
    loop {
        let now = clock.now().max(fired);
        let until = match hedge.next(now, throttle) {
            Step::Start { attempt: k, limit } => {
                stats.attempt();
                if let Some(s) = &ctx.stats {
                    s.attempt();
                }
                if k > 0 {
                    stats.hedge_sent();
                    rec.hedged();
                }
                let meter = rec.attempt();
                let req = request(ctx.head.clone(), k, limit, &ctx.body);
                let (mut svc, kind) = (svc.clone(), ctx.kind);
                let cap = shared.max_response_buffer;
                running.push(
                    async move { (k, attempt(&mut svc, req, kind, cap, limit).await, meter) },
                );
                continue;
            }
            Step::Wait(until) => until,
            Step::Finish(reason) => {
                stats.decided(reason);
                // The first attempt always starts, so there is a last one.
                let status = || Status::deadline_exceeded("no hedged attempt ended");
                let ended = last.as_ref().and_then(Attempt::ended);
                let last =
                    last.map_or_else(|| Err(Box::new(status()).into()), Attempt::into_result);
                return rec.deliver(None, ended, last);
            }
        };
        // Waiting with nothing in flight counts toward the call's retry delay.
        let idle = running.is_empty();
        let timer = match until {
            Some(t) => retrying.sleeper().sleep(t.saturating_sub(now)),
            None => Box::pin(std::future::pending()),
        };
        tokio::select! {
            Some((k, result, meter)) = running.next() => {
                let outcome = result.outcome();
                let Some(Commit { attempt, next, reason }) =
                    hedge.on_outcome(k, outcome, clock.now().max(fired), throttle)
                else {
                    meter.ended(result.ended());
                    last = Some(result);
                    continue;
                };
                stats.decided(reason);
                stats.hedge_committed(attempt, hedge.in_flight());
                // The losers are dropped here, which cancels them.
                drop(running);
                return match next {
                    Next::Fail(status) => {
                        meter.ended(result.ended());
                        rec.end(status.code());
                        Err(Box::new(status))
                    }
                    _ => {
                        let ended = result.ended();
                        rec.deliver(Some(meter), ended, result.into_result())
                    }
                };
            }
            () = timer => {
                let at = until.unwrap_or_default();
                if idle {
                    rec.idle(at.saturating_sub(now));
                }
                fired = at;
            }
        }
    }
}

/// A call sent once, unretried: its response is only sanitized.
async fn once<S: Inner>(
    mut svc: S,
    req: Request<Body>,
    shared: &Shared,
    mut rec: CallRecorder,
) -> Result<Response<Body>, BoxError> {
    shared.stats.attempt();
    let req = rec.count_request(req);
    let meter = rec.attempt();
    let res = async {
        let res = svc.ready().await.map_err(Into::into)?.call(req).await;
        Ok(sanitize_response(res.map_err(Into::into)?, sanitized_body))
    };
    rec.deliver(Some(meter), None, res.await)
}
