//! Counters for the retry layer.
//!
//! Logs say what happened to one call; an operator also wants to know how
//! often the layer retried, gave up or was throttled across all calls. One
//! [`RetryStats`] is shared by a [`RetryLayer`](super::RetryLayer) and every
//! service it builds.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::decide::Reason;

#[derive(Debug, Default)]
struct Counters {
    calls: AtomicU64,
    attempts: AtomicU64,
    retries: AtomicU64,
    throttled: AtomicU64,
    exhausted: AtomicU64,
    passthrough_too_large: AtomicU64,
    hedges_sent: AtomicU64,
    hedges_won: AtomicU64,
    hedges_cancelled: AtomicU64,
}

/// A live handle on the counters of one [`RetryLayer`](super::RetryLayer)
/// and every service it built. Cloning shares the counters.
#[derive(Debug, Clone, Default)]
pub struct RetryStatsHandle {
    inner: Arc<Counters>,
}

/// The counters of a [`RetryStatsHandle`] at one point in time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RetryStats {
    /// Calls that entered the layer.
    pub calls: u64,
    /// Attempts sent to the inner service, first attempts included.
    pub attempts: u64,
    /// Retries scheduled (each after a wait).
    pub retries: u64,
    /// Retries refused by the token bucket.
    pub throttled: u64,
    /// Calls that gave up because the policy's budget was used up.
    pub exhausted: u64,
    /// Calls sent once, unretried, because the request body exceeded the buffer cap.
    pub passthrough_too_large: u64,
    /// Hedges sent (attempts of a hedged call after its first).
    pub hedges_sent: u64,
    /// Hedged calls won by a hedge rather than by the first attempt.
    pub hedges_won: u64,
    /// Attempts of hedged calls cancelled because another one won.
    pub hedges_cancelled: u64,
}

fn load(c: &AtomicU64) -> u64 {
    c.load(Ordering::Relaxed)
}

fn add(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

impl RetryStatsHandle {
    /// Calls that entered the layer.
    pub fn calls(&self) -> u64 {
        load(&self.inner.calls)
    }
    /// Attempts sent, first attempts included.
    pub fn attempts(&self) -> u64 {
        load(&self.inner.attempts)
    }
    /// Retries scheduled.
    pub fn retries(&self) -> u64 {
        load(&self.inner.retries)
    }
    /// Retries refused by the token bucket.
    pub fn throttled(&self) -> u64 {
        load(&self.inner.throttled)
    }
    /// Calls whose policy budget ran out.
    pub fn exhausted(&self) -> u64 {
        load(&self.inner.exhausted)
    }
    /// Calls sent once because their request body was over the cap.
    pub fn passthrough_too_large(&self) -> u64 {
        load(&self.inner.passthrough_too_large)
    }
    /// Hedges sent (attempts of a hedged call after its first).
    pub fn hedges_sent(&self) -> u64 {
        load(&self.inner.hedges_sent)
    }
    /// Hedged calls won by a hedge rather than by the first attempt.
    pub fn hedges_won(&self) -> u64 {
        load(&self.inner.hedges_won)
    }
    /// Attempts of hedged calls cancelled because another one won.
    pub fn hedges_cancelled(&self) -> u64 {
        load(&self.inner.hedges_cancelled)
    }
    /// All counters at once (each read separately, so not atomic as a whole).
    pub fn snapshot(&self) -> RetryStats {
        RetryStats {
            calls: self.calls(),
            attempts: self.attempts(),
            retries: self.retries(),
            throttled: self.throttled(),
            exhausted: self.exhausted(),
            passthrough_too_large: self.passthrough_too_large(),
            hedges_sent: self.hedges_sent(),
            hedges_won: self.hedges_won(),
            hedges_cancelled: self.hedges_cancelled(),
        }
    }

    pub(crate) fn call(&self) {
        add(&self.inner.calls);
    }
    pub(crate) fn attempt(&self) {
        add(&self.inner.attempts);
    }
    pub(crate) fn too_large(&self) {
        add(&self.inner.passthrough_too_large);
    }
    pub(crate) fn hedge_sent(&self) {
        add(&self.inner.hedges_sent);
    }
    /// A hedged call committed to `attempt`, cancelling `losers` others.
    pub(crate) fn hedge_committed(&self, attempt: u32, losers: u32) {
        if attempt > 0 {
            add(&self.inner.hedges_won);
        }
        self.inner
            .hedges_cancelled
            .fetch_add(u64::from(losers), Ordering::Relaxed);
    }
    /// Count what a decision did.
    pub(crate) fn decided(&self, reason: Reason) {
        match reason {
            Reason::Policy | Reason::RetryInfo | Reason::Pushback => add(&self.inner.retries),
            Reason::Throttled => add(&self.inner.throttled),
            Reason::Exhausted => add(&self.inner.exhausted),
            _ => {}
        }
    }
}
