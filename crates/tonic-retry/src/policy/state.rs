//! The pure decision core shared by every driver: the retry loop
//! ([`crate::retrying::Retrying`]), the reattachable stream and the tower
//! layer. No I/O, no clock reads, no sleeping: callers pass the time and a
//! jitter source in and get a [`RetryDecision`] out.

use std::sync::Arc;
use std::time::Duration;

use super::backoff::PolicyState;
use super::{Failure, RetryPolicy};

/// Why a retry was granted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RetryReason {
    /// The policy at this index (in list order) matched and granted a wait.
    Policy {
        /// Index of the policy in the list.
        index: usize,
        /// The server's `RetryInfo` delay, when it raised the wait.
        server_delay: Option<Duration>,
    },
    /// The immediate-retry marker (`AttemptError::RetryNow`).
    RetryNow,
    /// gRFC A6's transparent retry: the request provably never reached the
    /// server (dropped unsent by a closing connection, above a GOAWAY's last
    /// stream id, or refused with `REFUSED_STREAM`; not a connect failure),
    /// re-sent at once without spending the policy's budget, at most 5 times
    /// per call.
    Transparent,
}

/// Transparent retries ([`RetryReason::Transparent`]) one call may make;
/// after them an unsent request is judged by the policies like any failure.
pub(crate) const MAX_TRANSPARENT_RETRIES: u32 = 5;

/// Why a loop gave up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum GiveUpReason {
    /// No policy's classifier accepted the error.
    NotRetryable,
    /// The first matching policy has no retries left (no fallback to later ones).
    Exhausted {
        /// Index of that policy.
        index: usize,
    },
    /// Immediate retries went on for longer than the elapsed-time bound.
    RetryNowElapsed,
}

/// What to do after a failed attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RetryDecision {
    /// Sleep for `delay` (zero for [`RetryReason::RetryNow`]), then try again.
    Retry {
        /// How long to wait first.
        delay: Duration,
        /// Which rule granted it.
        reason: RetryReason,
    },
    /// Stop and surface the error.
    GiveUp(GiveUpReason),
}

/// The state of one retry loop over an ordered list of policies: what a
/// driver that decides attempt by attempt keeps between
/// [`Retrying::new_state`](crate::retrying::Retrying::new_state) and
/// [`Retrying::decide`](crate::retrying::Retrying::decide).
///
/// The first policy whose classifier matches decides,
/// with no fallback; every policy keeps its own budget; the immediate-retry
/// marker is bounded by elapsed time measured from its first occurrence.
#[derive(Debug, Clone)]
pub struct RetryState {
    policies: Arc<[RetryPolicy]>,
    states: Vec<PolicyState>,
    retry_now_started: Option<Duration>,
    retry_now_bound: Duration,
    retries: u32,
    /// Transparent retries granted so far (counted in `retries` too).
    transparent: u32,
    /// The waits granted so far, and why the loop gave up (if it did):
    /// kept for logs and give-up errors ([`crate::retrying::GaveUp`]).
    waited: Duration,
    gave_up: Option<GiveUpReason>,
}

impl RetryState {
    /// A fresh loop state; `retry_now_bound` limits immediate retries (1 h by default).
    pub(crate) fn new(policies: Arc<[RetryPolicy]>, retry_now_bound: Duration) -> Self {
        let states = policies.iter().map(RetryPolicy::new_state).collect();
        RetryState {
            policies,
            states,
            retry_now_started: None,
            retry_now_bound,
            retries: 0,
            transparent: 0,
            waited: Duration::ZERO,
            gave_up: None,
        }
    }

    /// Retries granted so far (policy retries and immediate retries).
    pub(crate) fn retries(&self) -> u32 {
        self.retries
    }

    /// Transparent retries granted so far ([`RetryReason::Transparent`]).
    pub(crate) fn transparent_retries(&self) -> u32 {
        self.transparent
    }

    /// The total wait of the retries granted so far.
    pub(crate) fn waited(&self) -> Duration {
        self.waited
    }

    /// Why the loop gave up on a retryable failure (budget spent, or
    /// immediate retries out of time), once it has.
    pub(crate) fn gave_up(&self) -> Option<GiveUpReason> {
        self.gave_up
    }

    /// Record a decision taken by a driver, for [`waited`](Self::waited)
    /// and `gave_up`.
    pub(crate) fn note(&mut self, decision: &RetryDecision) {
        match decision {
            RetryDecision::Retry { delay, .. } => self.waited = self.waited.saturating_add(*delay),
            RetryDecision::GiveUp(GiveUpReason::NotRetryable) => {}
            RetryDecision::GiveUp(reason) => self.gave_up = Some(*reason),
        }
    }

    /// Index of the first policy whose classifier accepts `failure`: the
    /// one classification of a failure by the policies.
    pub(crate) fn matching(&self, failure: &Failure<'_>) -> Option<usize> {
        self.policies.iter().position(|p| p.can_retry(failure))
    }

    /// Decide after `failure`, which policy `matched` accepted (the
    /// [`matching`](Self::matching) of this state): give up if none did or
    /// its budget is spent, else its wait, with the failure's `RetryInfo`
    /// as its floor when the policy recognises it.
    pub(crate) fn on_failure(
        &mut self,
        failure: &Failure<'_>,
        matched: Option<usize>,
        jitter_sample: &mut dyn FnMut() -> f64,
    ) -> RetryDecision {
        // gRFC A6: a request the server never saw is re-sent at once, free,
        // whatever the policies say (a bounded number of times).
        if failure.is_unsent() && self.transparent < MAX_TRANSPARENT_RETRIES {
            self.transparent += 1;
            self.retries += 1;
            return RetryDecision::Retry {
                delay: Duration::ZERO,
                reason: RetryReason::Transparent,
            };
        }
        let Some(index) = matched.filter(|&i| i < self.policies.len()) else {
            return RetryDecision::GiveUp(GiveUpReason::NotRetryable);
        };
        let policy = &self.policies[index];
        let server_delay = failure
            .retry_info()
            .filter(|_| policy.recognize_server_retry_delay());
        match policy.next_attempt(&mut self.states[index], server_delay, jitter_sample) {
            Some(delay) => {
                self.retries += 1;
                RetryDecision::Retry {
                    delay,
                    reason: RetryReason::Policy {
                        index,
                        server_delay,
                    },
                }
            }
            None => RetryDecision::GiveUp(GiveUpReason::Exhausted { index }),
        }
    }

    /// Restart policy `index`'s backoff from its initial wait, keeping its
    /// budget: gRFC A6's rule after a server pushback.
    pub(crate) fn restart_backoff(&mut self, index: usize) {
        if let (Some(state), Some(policy)) = (self.states.get_mut(index), self.policies.get(index))
        {
            state.next_wait_ms = policy.initial_backoff_ms;
        }
    }

    /// Forget when the immediate retries started: the next one starts the
    /// elapsed-time bound afresh. Policy budgets are kept.
    pub fn restart_retry_now_clock(&mut self) {
        self.retry_now_started = None;
    }

    /// Decide after an attempt asked for an immediate retry, at monotonic time `now`.
    ///
    /// The first marker starts the clock and is always granted (unless the
    /// bound is zero); later ones are refused once `now - start >= bound`.
    pub(crate) fn on_retry_now(&mut self, now: Duration) -> RetryDecision {
        let start = *self.retry_now_started.get_or_insert(now);
        if now.saturating_sub(start) >= self.retry_now_bound {
            return RetryDecision::GiveUp(GiveUpReason::RetryNowElapsed);
        }
        self.retries += 1;
        RetryDecision::Retry {
            delay: Duration::ZERO,
            reason: RetryReason::RetryNow,
        }
    }
}
