//! The loop itself: run an operation until it succeeds or the loop gives up.
//!
//! Why one copy: written inline at every call site, a retry loop drifts in
//! small ways (which policy decides, which error is returned, how many
//! warnings are logged). Two ways in: [`Retrying::call`] for an operation
//! whose errors are plain statuses, [`Retrying::run`] for one that may also
//! ask for an immediate retry or fail with an error of its own, and that
//! wants to know what the loop did ([`LoopStats`]).

use std::future::Future;
use std::time::Duration;

use tonic::Status;

use super::Retrying;
use super::attempt_error::AttemptError;
use super::gave_up::GaveUp;
use super::stats::LoopStats;
use crate::policy::{GiveUpReason, RetryDecision, RetryReason};
use crate::recorder::CallRecorder;

impl Retrying {
    /// Run `op` until it succeeds or the loop gives up; also returns what
    /// the loop did.
    ///
    /// On give-up the last error is returned; an exhausted immediate retry
    /// returns its cause as [`AttemptError::Status`] (or itself when it has
    /// none). A status that ran out of retries carries a [`GaveUp`]. With
    /// [`with_method`](Self::with_method) and metrics (feature `otel`), the
    /// call is recorded under that method.
    pub async fn run<T, E, F, Fut>(&self, mut op: F) -> (Result<T, AttemptError<E>>, LoopStats)
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, AttemptError<E>>>,
    {
        let mut rec = self.method.as_deref().map(|p| self.meters.call(p));
        let mut state = self.new_state();
        let mut stats = LoopStats::default();
        loop {
            stats.attempts += 1;
            let meter = rec.as_mut().map(CallRecorder::attempt);
            let result = op().await;
            if let Some(m) = meter {
                let code = result
                    .as_ref()
                    .map_or_else(AttemptError::code, |_| tonic::Code::Ok);
                m.end(code, None);
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
                        r.end(error.code());
                    }
                    return (Err(error), stats);
                }
            };
            if let Some(r) = &mut rec {
                r.retried(wait, transparent);
            }
        }
    }

    /// Run an operation whose errors are plain statuses until it succeeds
    /// or the loop gives up, as [`run`](Self::run) does.
    pub async fn call<T, F, Fut>(&self, mut op: F) -> Result<T, Status>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, Status>>,
    {
        let (result, _) = self
            .run::<T, std::convert::Infallible, _, _>(|| {
                let fut = op();
                async move { fut.await.map_err(AttemptError::Status) }
            })
            .await;
        result.map_err(AttemptError::into_status)
    }
}
