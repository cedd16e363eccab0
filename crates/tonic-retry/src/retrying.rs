//! The async retry loop.
//!
//! A policy says whether to retry and how long to wait; something still has to
//! run the attempts, sleep between them, keep one budget per policy, let an
//! attempt ask for an immediate retry, and return the right error when it
//! gives up. Written inline at every call site, that loop drifts in small
//! ways (which policy decides, which error is returned, how many warnings
//! are logged), and a loop that sleeps on the real clock cannot be tested
//! without waiting minutes.
//!
//! [`Retrying`] is that loop, written once: it runs an async operation until
//! it succeeds, an error is not retryable, or the budget runs out:
//!
//! * the first attempt is free, with no sleep before it;
//! * after a failure, the **first** policy (in list order) whose classifier
//!   accepts the error decides; there is no fallback to later policies, and
//!   every policy keeps its own budget within one loop;
//! * an attempt may instead ask for an immediate retry
//!   ([`AttemptError::RetryNow`]): no sleep, no policy, no budget, but
//!   bounded by elapsed time (1 h by default) from the first such request
//!   in the loop; on give-up its cause is returned;
//! * on give-up the last error is returned, after one warning
//!   ([`DEFAULT_GIVE_UP_MESSAGE`] unless [`Retrying::with_give_up_message`]
//!   says otherwise); a status that ran out of retries carries the loop's
//!   history ([`GaveUp`]: attempts, time waited) in its source chain.
//!
//! # Events
//!
//! One event per failed attempt: a `retrying` debug event when a retry
//! follows, the give-up warning when the budget is spent. `attempt` is the
//! attempt that failed, counted from 1 (the tower layer counts the same
//! way), and `wait_ms` the wait actually slept before the next one.
//!
//! Sleeping, the clock and the jitter RNG are injectable, so tests are exact
//! and never wait in real time.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! use std::sync::atomic::{AtomicU32, Ordering};
//! use tonic_retry::retrying::{Retrying, RecordingSleeper};
//!
//! let sleeper = RecordingSleeper::new();
//! let retrying = Retrying::default().with_sleeper(sleeper.clone()).with_seed(7);
//! let calls = AtomicU32::new(0);
//! let answer = retrying
//!     .call(|| async {
//!         if calls.fetch_add(1, Ordering::SeqCst) < 2 {
//!             Err(tonic::Status::unavailable("restarting"))
//!         } else {
//!             Ok(42)
//!         }
//!     })
//!     .await;
//! assert_eq!(answer.unwrap(), 42);
//! // The default policy: 100 ms, then 200 ms, each times U(0.8, 1.2).
//! let waits = sleeper.sleeps_ms();
//! assert!((80..120).contains(&waits[0]) && (160..240).contains(&waits[1]), "{waits:?}");
//! # }
//! ```

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tonic::Status;

use crate::policy::{Failure, GiveUpReason, RetryDecision, RetryPolicy, RetryReason, RetryState};
use crate::recorder::{CallRecorder, Meters};

mod gave_up;
pub use gave_up::{GaveUp, gave_up};

/// The status code of an attempt's result, for metrics.
fn code_of<T, E>(result: &Result<T, AttemptError<E>>) -> tonic::Code {
    match result {
        Ok(_) => tonic::Code::Ok,
        Err(e) => error_code(e),
    }
}

/// The status code of an error, for metrics (UNKNOWN for a non-status).
fn error_code<E>(e: &AttemptError<E>) -> tonic::Code {
    match e {
        AttemptError::Status(s) | AttemptError::RetryNow(Some(s)) => s.code(),
        AttemptError::RetryNow(None) | AttemptError::Other(_) => tonic::Code::Unknown,
    }
}

/// Whole milliseconds, saturating, for log fields.
fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The default bound on immediate retries: one hour.
pub const DEFAULT_RETRY_NOW_BOUND: Duration = Duration::from_secs(3600);

/// The warning logged once per give-up, unless
/// [`Retrying::with_give_up_message`] replaces it.
pub const DEFAULT_GIVE_UP_MESSAGE: &str = "retries exhausted";

/// A boxed, sendable future.
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// How the loop waits between attempts.
pub trait Sleeper: Send + Sync + fmt::Debug {
    /// A future that completes after `d`.
    fn sleep(&self, d: Duration) -> BoxFuture<()>;
}

/// Sleeps with `tokio::time::sleep` (so `tokio::time::pause` applies).
#[derive(Debug, Clone, Copy, Default)]
pub struct TokioSleeper;

impl Sleeper for TokioSleeper {
    fn sleep(&self, d: Duration) -> BoxFuture<()> {
        Box::pin(tokio::time::sleep(d))
    }
}

/// Records every requested sleep and returns at once. For tests.
#[derive(Debug, Clone, Default)]
pub struct RecordingSleeper {
    sleeps: Arc<Mutex<Vec<Duration>>>,
}

impl RecordingSleeper {
    /// An empty recorder.
    pub fn new() -> Self {
        Self::default()
    }
    /// Every sleep requested so far.
    pub fn sleeps(&self) -> Vec<Duration> {
        self.sleeps
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
    /// Every sleep requested so far, in whole milliseconds.
    pub fn sleeps_ms(&self) -> Vec<u64> {
        self.sleeps().iter().map(|d| d.as_millis() as u64).collect()
    }
}

impl Sleeper for RecordingSleeper {
    fn sleep(&self, d: Duration) -> BoxFuture<()> {
        self.sleeps
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(d);
        Box::pin(std::future::ready(()))
    }
}

/// A monotonic clock, as a duration since an arbitrary origin.
pub trait Clock: Send + Sync + fmt::Debug {
    /// The current time.
    fn now(&self) -> Duration;
}

/// `tokio::time::Instant` since the first use (so `tokio::time::pause` applies).
#[derive(Debug, Clone, Copy, Default)]
pub struct TokioClock;

impl Clock for TokioClock {
    fn now(&self) -> Duration {
        static ORIGIN: OnceLock<tokio::time::Instant> = OnceLock::new();
        let origin = *ORIGIN.get_or_init(tokio::time::Instant::now);
        tokio::time::Instant::now().saturating_duration_since(origin)
    }
}

/// A clock moved by hand. For tests.
#[derive(Debug, Clone, Default)]
pub struct ManualClock {
    now: Arc<Mutex<Duration>>,
}

impl ManualClock {
    /// A clock at zero.
    pub fn new() -> Self {
        Self::default()
    }
    /// Move the clock forward.
    pub fn advance(&self, d: Duration) {
        *self.now.lock().unwrap_or_else(|e| e.into_inner()) += d;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Duration {
        *self.now.lock().unwrap_or_else(|e| e.into_inner())
    }
}

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

/// Counters of what a loop did, for observability.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LoopStats {
    /// Attempts made, including the first.
    pub attempts: u32,
    /// Policy-governed retries (each after a sleep).
    pub policy_retries: u32,
    /// Immediate retries.
    pub immediate_retries: u32,
    /// Transparent re-sends of requests that never reached the server
    /// (gRFC A6; no wait, no budget spent).
    pub transparent_retries: u32,
    /// Total time asked of the sleeper (saturating at `Duration::MAX`).
    pub slept: Duration,
}

/// A shared, seedable source of jitter.
#[derive(Clone)]
pub struct Jitter {
    rng: Arc<Mutex<StdRng>>,
}

impl fmt::Debug for Jitter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Jitter")
    }
}

impl Jitter {
    /// Seeded from the OS.
    pub fn from_entropy() -> Self {
        Jitter {
            rng: Arc::new(Mutex::new(StdRng::from_os_rng())),
        }
    }
    /// Deterministic.
    pub fn seeded(seed: u64) -> Self {
        Jitter {
            rng: Arc::new(Mutex::new(StdRng::seed_from_u64(seed))),
        }
    }
    /// A uniform sample in `[0, 1)`.
    pub fn sample(&self) -> f64 {
        self.rng
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .random::<f64>()
    }
}

/// A reusable retry configuration; each [`run`](Self::run) is one fresh loop.
///
/// Cheap to clone. `Retrying::default()` holds one [`RetryPolicy::default`].
#[derive(Debug, Clone)]
pub struct Retrying {
    policies: Arc<[RetryPolicy]>,
    sleeper: Arc<dyn Sleeper>,
    clock: Arc<dyn Clock>,
    jitter: Jitter,
    retry_now_bound: Duration,
    give_up_message: &'static str,
    /// Where [`call_method`](Self::call_method) records its calls.
    meters: Meters,
}

impl Default for Retrying {
    fn default() -> Self {
        Retrying::new(vec![RetryPolicy::default()])
    }
}

impl Retrying {
    /// A loop over `policies`, in order. An empty list retries nothing but
    /// immediate-retry requests.
    pub fn new(policies: impl Into<Vec<RetryPolicy>>) -> Self {
        Retrying {
            policies: Arc::from(policies.into()),
            sleeper: Arc::new(TokioSleeper),
            clock: Arc::new(TokioClock),
            jitter: Jitter::from_entropy(),
            retry_now_bound: DEFAULT_RETRY_NOW_BOUND,
            give_up_message: DEFAULT_GIVE_UP_MESSAGE,
            meters: Meters::default(),
        }
    }
    /// Replace the policies, keeping the sleeper, clock, jitter and bound.
    pub fn with_policies(mut self, policies: impl Into<Vec<RetryPolicy>>) -> Self {
        self.policies = Arc::from(policies.into());
        self
    }
    /// Replace the sleeper.
    pub fn with_sleeper(mut self, sleeper: impl Sleeper + 'static) -> Self {
        self.sleeper = Arc::new(sleeper);
        self
    }
    /// Replace the clock used for the immediate-retry bound.
    pub fn with_clock(mut self, clock: impl Clock + 'static) -> Self {
        self.clock = Arc::new(clock);
        self
    }
    /// Use a deterministic jitter sequence.
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.jitter = Jitter::seeded(seed);
        self
    }
    /// Share a jitter source.
    pub fn with_jitter(mut self, jitter: Jitter) -> Self {
        self.jitter = jitter;
        self
    }
    /// Bound immediate retries to `bound` of elapsed time (default 1 h).
    pub fn with_retry_now_bound(mut self, bound: Duration) -> Self {
        self.retry_now_bound = bound;
        self
    }
    /// The message of the give-up warning (default
    /// [`DEFAULT_GIVE_UP_MESSAGE`]), for a program whose logs must read as
    /// another client's.
    pub fn with_give_up_message(mut self, message: &'static str) -> Self {
        self.give_up_message = message;
        self
    }
    /// Record the calls of [`call_method`](Self::call_method) and
    /// [`run_method`](Self::run_method) in `metrics` (gRFC A66 and A96, see
    /// [`crate::metrics`]): each run of the operation is an attempt, each
    /// sleep a retry delay; the loop sees no message bytes, so no sizes.
    #[cfg(feature = "otel")]
    #[cfg_attr(docsrs, doc(cfg(feature = "otel")))]
    pub fn with_metrics(mut self, metrics: crate::metrics::GrpcMetrics) -> Self {
        self.meters = Meters::new(metrics);
        self
    }
    /// The message of the give-up warning.
    pub fn give_up_message(&self) -> &'static str {
        self.give_up_message
    }
    /// The policies, in order.
    pub fn policies(&self) -> &[RetryPolicy] {
        &self.policies
    }
    /// The sleeper.
    pub fn sleeper(&self) -> &Arc<dyn Sleeper> {
        &self.sleeper
    }
    /// The clock.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }
    /// The jitter source.
    pub fn jitter(&self) -> &Jitter {
        &self.jitter
    }
    /// The immediate-retry bound.
    pub fn retry_now_bound(&self) -> Duration {
        self.retry_now_bound
    }

    /// A fresh decision state (fresh budgets and a fresh immediate-retry clock).
    pub fn new_state(&self) -> RetryState {
        RetryState::new(self.policies.clone(), self.retry_now_bound)
    }

    /// Decide after `error` in `state`, and log it. A status is classified
    /// once ([`Failure::new`]) and decided by
    /// [`decide_failure`](Self::decide_failure), the one decision every
    /// driver shares.
    ///
    /// A retry logs a `retrying` debug event, a give-up one
    /// `[RETRIES_EXCEEDED]` warning, with the fields the retry layer's
    /// `grpc attempt` events use: `attempt` (the failed one, from 1),
    /// `rpc.grpc.status_code`, `rpc.grpc.status_message`, `wait_ms`,
    /// `policy` (its name) and `reason` (`policy`, `retry_info`,
    /// `retry_now`; `exhausted` or `retry_now_elapsed` on give-up, with
    /// `waited_ms`). The RPC, operation and session are on the caller's span.
    pub fn decide<E>(&self, state: &mut RetryState, error: &AttemptError<E>) -> RetryDecision {
        match error {
            AttemptError::Status(s) => {
                let failure = Failure::new(s);
                let matched = state.matching(&failure);
                self.decide_failure(state, &failure, matched)
            }
            AttemptError::RetryNow(cause) => {
                let attempt = state.retries() + 1;
                let decision = state.on_retry_now(self.clock.now());
                state.note(&decision);
                self.log(state, attempt, cause.as_ref(), &decision);
                decision
            }
            AttemptError::Other(_) => RetryDecision::GiveUp(GiveUpReason::NotRetryable),
        }
    }

    /// Decide after `failure`, which policy `matched` accepted
    /// ([`RetryState::matching`]; a driver that needs the match before the
    /// decision, as the tower layer's throttle does, passes it on rather
    /// than classifying twice). Logs the decision as
    /// [`decide`](Self::decide) does.
    pub fn decide_failure(
        &self,
        state: &mut RetryState,
        failure: &Failure<'_>,
        matched: Option<usize>,
    ) -> RetryDecision {
        let attempt = state.retries() + 1;
        let decision = self.judge_failure(state, failure, matched);
        self.log(state, attempt, Some(failure.status()), &decision);
        decision
    }

    /// [`decide_failure`](Self::decide_failure) without its event, for a
    /// driver that logs each attempt itself (the tower layer).
    pub(crate) fn judge_failure(
        &self,
        state: &mut RetryState,
        failure: &Failure<'_>,
        matched: Option<usize>,
    ) -> RetryDecision {
        let decision = state.on_failure(failure, matched, &mut || self.jitter.sample());
        state.note(&decision);
        decision
    }

    fn log(
        &self,
        state: &RetryState,
        attempt: u32,
        status: Option<&Status>,
        decision: &RetryDecision,
    ) {
        if !tracing::enabled!(tracing::Level::WARN) {
            return;
        }
        let code = status.map(|s| s.code() as i32);
        let message = status.map(Status::message);
        match decision {
            RetryDecision::GiveUp(GiveUpReason::NotRetryable) => {}
            RetryDecision::GiveUp(reason) => {
                let (policy, reason) = match reason {
                    GiveUpReason::Exhausted { index } => {
                        (self.policies[*index].name(), "exhausted")
                    }
                    _ => ("immediate", "retry_now_elapsed"),
                };
                tracing::warn!(
                    attempts = attempt,
                    waited_ms = millis(state.waited()),
                    rpc.grpc.status_code = code,
                    rpc.grpc.status_message = message,
                    policy,
                    reason,
                    "{}",
                    self.give_up_message
                );
            }
            RetryDecision::Retry { delay, reason } => {
                let (policy, reason) = match reason {
                    RetryReason::Policy {
                        index,
                        server_delay,
                    } => (
                        self.policies[*index].name(),
                        if server_delay.is_some() {
                            "retry_info"
                        } else {
                            "policy"
                        },
                    ),
                    RetryReason::RetryNow => ("immediate", "retry_now"),
                    RetryReason::Transparent => ("transparent", "unsent"),
                };
                tracing::debug!(
                    attempt,
                    rpc.grpc.status_code = code,
                    rpc.grpc.status_message = message,
                    wait_ms = millis(*delay),
                    policy,
                    reason,
                    "retrying"
                );
            }
        }
    }

    /// The status a driver returns after [`decide`](Self::decide) gave up
    /// on `error`: [`AttemptError::into_status`], with the loop's history
    /// ([`GaveUp`]) in its source chain when a retryable failure ran out of
    /// retries.
    pub fn give_up_status(&self, state: &RetryState, error: AttemptError) -> Status {
        GaveUp::attach(state, error.into_status())
    }

    /// Run `op` until it succeeds or the loop gives up.
    ///
    /// On give-up the last error is returned; an exhausted immediate retry
    /// returns its cause as [`AttemptError::Status`] (or itself when it has
    /// none). A status that ran out of retries carries a [`GaveUp`].
    pub async fn run<T, E, F, Fut>(&self, op: F) -> Result<T, AttemptError<E>>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, AttemptError<E>>>,
    {
        self.run_with_stats(op).await.0
    }

    /// [`run`](Self::run), also returning what the loop did.
    pub async fn run_with_stats<T, E, F, Fut>(
        &self,
        op: F,
    ) -> (Result<T, AttemptError<E>>, LoopStats)
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, AttemptError<E>>>,
    {
        self.run_recorded(op, None).await
    }

    /// [`run`](Self::run) for one call of the gRPC method at `path`
    /// (`/package.Service/Method`): with [`with_metrics`](Self::with_metrics)
    /// (feature `otel`), its attempts, retries and waits are recorded under
    /// that method; otherwise the same as [`run`](Self::run).
    pub async fn run_method<T, E, F, Fut>(&self, path: &str, op: F) -> Result<T, AttemptError<E>>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, AttemptError<E>>>,
    {
        self.run_recorded(op, Some(path)).await.0
    }

    /// The loop, recording the call when it names its method.
    async fn run_recorded<T, E, F, Fut>(
        &self,
        mut op: F,
        path: Option<&str>,
    ) -> (Result<T, AttemptError<E>>, LoopStats)
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, AttemptError<E>>>,
    {
        let mut rec = path.map(|p| self.meters.call(p));
        let mut state = self.new_state();
        let mut stats = LoopStats::default();
        loop {
            stats.attempts += 1;
            let meter = rec.as_mut().map(CallRecorder::attempt);
            let result = op().await;
            if let Some(m) = meter {
                m.end(code_of(&result), None);
            }
            let error = match result {
                Ok(v) => {
                    if let Some(r) = rec {
                        r.end(tonic::Code::Ok);
                    }
                    return (Ok(v), stats);
                }
                Err(e) => e,
            };
            let (wait, transparent) = match self.decide(&mut state, &error) {
                RetryDecision::Retry {
                    delay,
                    reason: RetryReason::Policy { .. },
                } => {
                    stats.policy_retries += 1;
                    stats.slept = stats.slept.saturating_add(delay);
                    if let Some(r) = &mut rec {
                        r.retried(delay, false);
                    }
                    self.sleeper.sleep(delay).await;
                    continue;
                }
                RetryDecision::Retry {
                    reason: RetryReason::RetryNow,
                    ..
                } => {
                    stats.immediate_retries += 1;
                    (Duration::ZERO, false)
                }
                RetryDecision::Retry {
                    reason: RetryReason::Transparent,
                    ..
                } => {
                    stats.transparent_retries += 1;
                    (Duration::ZERO, true)
                }
                RetryDecision::GiveUp(reason) => {
                    let error = match (reason, error) {
                        (GiveUpReason::RetryNowElapsed, AttemptError::RetryNow(Some(cause))) => {
                            AttemptError::Status(GaveUp::attach(&state, cause))
                        }
                        (GiveUpReason::RetryNowElapsed, other) => other,
                        (_, AttemptError::Status(s)) => {
                            AttemptError::Status(GaveUp::attach(&state, s))
                        }
                        (_, other) => other,
                    };
                    if let Some(r) = rec {
                        r.end(error_code(&error));
                    }
                    return (Err(error), stats);
                }
            };
            if let Some(r) = &mut rec {
                r.retried(wait, transparent);
            }
        }
    }

    /// Run an RPC whose errors are plain statuses, as [`call`](Self::call),
    /// naming its method (`/package.Service/Method`) for metrics, as
    /// [`run_method`](Self::run_method).
    pub async fn call_method<T, F, Fut>(&self, path: &str, mut op: F) -> Result<T, Status>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, Status>>,
    {
        let result = self
            .run_method::<T, std::convert::Infallible, _, _>(path, || {
                let fut = op();
                async move { fut.await.map_err(AttemptError::Status) }
            })
            .await;
        result.map_err(AttemptError::into_status)
    }

    /// Run an operation whose errors are plain statuses.
    pub async fn call<T, F, Fut>(&self, mut op: F) -> Result<T, Status>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, Status>>,
    {
        let result = self
            .run::<T, std::convert::Infallible, _, _>(|| {
                let fut = op();
                async move { fut.await.map_err(AttemptError::Status) }
            })
            .await;
        result.map_err(AttemptError::into_status)
    }
}

#[cfg(test)]
mod tests;
