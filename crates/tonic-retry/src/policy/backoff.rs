//! One policy's waits, one after another, outside a retry loop.
//!
//! Why: a driver with a loop of its own (a stream reopened after empty
//! segments, a test that checks the arithmetic against another client's)
//! still wants the policy's budget and backoff, not a second copy of them.
//! [`Backoff`] is a policy with its own per-loop state: each
//! [`next`](Backoff::next) is the wait before the next retry.

use std::time::Duration;

use super::RetryPolicy;

/// Per-loop state of one policy: its retries so far and its next wait.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PolicyState {
    pub(crate) attempt: u32,
    pub(crate) next_wait_ms: f64,
}

impl PolicyState {
    pub(crate) fn new(initial_backoff_ms: f64) -> Self {
        PolicyState {
            attempt: 0,
            next_wait_ms: initial_backoff_ms,
        }
    }
}

/// A policy's waits, one by one; from [`RetryPolicy::backoff`].
#[derive(Debug, Clone)]
pub struct Backoff {
    policy: RetryPolicy,
    state: PolicyState,
}

impl RetryPolicy {
    /// A fresh per-loop state for this policy.
    pub(crate) fn new_state(&self) -> PolicyState {
        PolicyState::new(self.initial_backoff_ms)
    }

    /// The next wait, or `None` when the budget is used up: the arithmetic
    /// of [`Backoff::next`], which documents it.
    pub(crate) fn next_attempt(
        &self,
        state: &mut PolicyState,
        server_delay: Option<Duration>,
        jitter_sample: &mut dyn FnMut() -> f64,
    ) -> Option<Duration> {
        if let Some(max) = self.max_retries
            && state.attempt >= max
        {
            return None;
        }
        state.attempt += 1;
        let mut wait = state.next_wait_ms;
        if let Some(max_backoff) = self.max_backoff_ms {
            state.next_wait_ms = max_backoff.min(wait * self.backoff_multiplier);
        }
        if self.jitter_factor > 0.0 {
            let sample = jitter_sample().clamp(0.0, 1.0);
            wait *= 1.0 - self.jitter_factor + 2.0 * self.jitter_factor * sample;
        }
        if self.recognize_server_retry_delay
            && let Some(delay) = server_delay
        {
            // Whole milliseconds: seconds*1000 + nanos/1e6, truncated toward zero.
            let mut d = delay.as_secs() as f64 * 1000.0 + f64::from(delay.subsec_millis());
            if let Some(cap) = self.max_server_retry_delay_ms {
                d = d.min(cap);
            }
            wait = wait.max(d);
        }
        if self.jitter_factor == 0.0 && wait >= self.min_jitter_threshold_ms && self.jitter_ms > 0.0
        {
            let sample = jitter_sample().clamp(0.0, 1.0);
            wait += self.jitter_ms * sample;
        }
        Some(Duration::from_millis(wait.trunc().max(0.0) as u64))
    }

    /// The waits of this policy, from its first retry on.
    pub fn backoff(&self) -> Backoff {
        Backoff {
            state: self.new_state(),
            policy: self.clone(),
        }
    }
}

impl Backoff {
    /// The next wait, or `None` when the budget is used up.
    ///
    /// `server_delay` is the `RetryInfo.retry_delay` of the error, if any;
    /// `jitter_sample` must return a value uniformly distributed in `[0, 1)`
    /// and is only called when jitter applies. The order of operations (that
    /// of a widely used client's loop, kept so that a program ported from it
    /// waits exactly as before):
    ///
    /// 1. stop if `attempt >= max_retries`;
    /// 2. `wait = next_wait`;
    /// 3. only if `max_backoff` is set: `next_wait = min(max_backoff, wait * multiplier)`,
    ///    from the un-floored wait, so a server delay never bends the sequence;
    /// 4. if server delays are recognized: `wait = max(wait, min(delay, max_server_retry_delay))`;
    /// 5. if `wait >= min_jitter_threshold`: `wait += jitter * sample`;
    /// 6. truncate to whole milliseconds.
    ///
    /// With a [`proportional_jitter`](super::RetryPolicyBuilder::proportional_jitter)
    /// factor `f` (gRFC A6, 2024 revision: `f = 0.2`), step 5 is instead
    /// `wait *= 1 - f + 2 f sample`, applied before the server-delay floor of
    /// step 4.
    ///
    /// ```
    /// use tonic_retry::policy::RetryPolicy;
    ///
    /// let mut waits = RetryPolicy::default().backoff();
    /// let ms: Vec<u128> = std::iter::from_fn(|| waits.next(None, &mut || 0.5))
    ///     .map(|d| d.as_millis())
    ///     .collect();
    /// assert_eq!(ms, [100, 200, 400, 800]); // the middle of the jitter
    /// ```
    pub fn next(
        &mut self,
        server_delay: Option<Duration>,
        jitter_sample: &mut dyn FnMut() -> f64,
    ) -> Option<Duration> {
        self.policy
            .next_attempt(&mut self.state, server_delay, jitter_sample)
    }
}
