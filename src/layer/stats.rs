//! Cheap, cloneable counters for the retry layer.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Debug, Default)]
struct Counters {
    calls: AtomicU64,
    /// Attempts after the first (a call's first attempt is counted by `calls`).
    reattempts: AtomicU64,
    retries: AtomicU64,
    throttled: AtomicU64,
    exhausted: AtomicU64,
    passthrough_too_large: AtomicU64,
}

/// A handle on the counters of one [`RetryLayer`](super::RetryLayer) and
/// every service it built. Cloning shares the counters.
#[derive(Debug, Clone, Default)]
pub struct RetryStats {
    inner: Arc<Counters>,
}

/// A point-in-time copy of [`RetryStats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RetryStatsSnapshot {
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
}

macro_rules! counter {
    ($($name:ident),*) => {
        impl RetryStats {
            $(
                #[doc = concat!("The `", stringify!($name), "` counter; see [`RetryStatsSnapshot`].")]
                pub fn $name(&self) -> u64 {
                    self.inner.$name.load(Ordering::Relaxed)
                }
            )*
            /// All counters at once (each read separately, so not atomic as a whole).
            pub fn snapshot(&self) -> RetryStatsSnapshot {
                RetryStatsSnapshot { $($name: self.$name(),)* attempts: self.attempts() }
            }
        }
    };
}
counter!(calls, retries, throttled, exhausted, passthrough_too_large);

impl RetryStats {
    /// The `attempts` counter; see [`RetryStatsSnapshot`].
    pub fn attempts(&self) -> u64 {
        // Every call makes one first attempt, so only the later ones are
        // counted apart: one atomic add per call instead of two.
        self.calls() + self.inner.reattempts.load(Ordering::Relaxed)
    }
}

#[derive(Debug, Clone, Copy)]
pub(crate) enum Counter {
    Calls,
    Reattempts,
    Retries,
    Throttled,
    Exhausted,
    PassthroughTooLarge,
}

impl RetryStats {
    pub(crate) fn incr(&self, c: Counter) {
        let a = match c {
            Counter::Calls => &self.inner.calls,
            Counter::Reattempts => &self.inner.reattempts,
            Counter::Retries => &self.inner.retries,
            Counter::Throttled => &self.inner.throttled,
            Counter::Exhausted => &self.inner.exhausted,
            Counter::PassthroughTooLarge => &self.inner.passthrough_too_large,
        };
        a.fetch_add(1, Ordering::Relaxed);
    }
}
