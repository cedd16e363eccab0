//! The loop's decision, one failure at a time: the driver API.
//!
//! Why public: some drivers cannot hand the loop a closure. A resumable
//! stream sees its failures as events of a state machine, and the tower
//! layer sees them as responses; each still needs the loop's one decision
//! (which policy, how long, when to give up), the loop's events, and the
//! status the loop would return. Three calls make that API:
//! [`Retrying::new_state`] starts a loop, [`Retrying::decide`] judges one
//! failed attempt (and logs it), [`Retrying::give_up_status`] is what to
//! return after a give-up. [`Retrying::run`] is these three in a loop.

use std::time::Duration;

use tonic::Status;

use super::Retrying;
use super::attempt_error::AttemptError;
use super::gave_up::GaveUp;
use crate::policy::{Failure, GiveUpReason, RetryDecision, RetryReason, RetryState};

/// Whole milliseconds, saturating, for log fields.
fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl Retrying {
    /// A fresh decision state (fresh budgets and a fresh immediate-retry
    /// clock): one loop of a driver that decides attempt by attempt.
    pub fn new_state(&self) -> RetryState {
        RetryState::new(self.policies.clone(), self.retry_now_bound)
    }

    /// Decide after `error` in `state`, and log it. A status is classified
    /// once ([`Failure::new`]) and decided by the rule every driver shares.
    ///
    /// A retry logs a `retrying` debug event, a give-up one warning
    /// ([`with_give_up_message`](Self::with_give_up_message)), with the
    /// fields the retry layer's `grpc attempt` events use: `attempt` (the
    /// failed one, from 1), `rpc.grpc.status_code`,
    /// `rpc.grpc.status_message`, `wait_ms`, `policy` (its name) and
    /// `reason` (`policy`, `retry_info`, `retry_now`; `exhausted` or
    /// `retry_now_elapsed` on give-up, with `waited_ms`). The RPC,
    /// operation and session are on the caller's span.
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
    pub(crate) fn decide_failure(
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
}
