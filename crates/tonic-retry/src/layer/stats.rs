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
    /// The counters now (each read separately, so not atomic as a whole):
    /// the one way to read them.
    pub fn snapshot(&self) -> RetryStats {
        let c = &*self.inner;
        RetryStats {
            calls: load(&c.calls),
            attempts: load(&c.attempts),
            retries: load(&c.retries),
            throttled: load(&c.throttled),
            exhausted: load(&c.exhausted),
            passthrough_too_large: load(&c.passthrough_too_large),
            hedges_sent: load(&c.hedges_sent),
            hedges_won: load(&c.hedges_won),
            hedges_cancelled: load(&c.hedges_cancelled),
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
