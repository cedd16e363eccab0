//! The async retry loop of [`tonic_retry::retrying`], with PySpark's
//! defaults and wording.
//!
//! [`Retrying`] here wraps [`tonic_retry::retrying::Retrying`] (it
//! dereferences to it and converts into it, so it goes wherever that one
//! does) for two things only: its default is one PySpark `DefaultPolicy`
//! ([`crate::policy::RetryPolicy::default`]), and it gives up with PySpark's
//! warning, [`RETRIES_EXCEEDED`]. The loop's rules are `tonic_retry`'s.

use std::ops::Deref;
use std::time::Duration;

use tonic_retry::retrying as generic;

use crate::policy::RetryPolicy;

pub use tonic_retry::retrying::{
    AttemptError, BoxFuture, Clock, DEFAULT_RETRY_NOW_BOUND, GaveUp, Jitter, LoopStats,
    ManualClock, RecordingSleeper, Sleeper, TokioClock, TokioSleeper, gave_up,
};

/// The warning logged once per give-up, PySpark's exact text.
pub const RETRIES_EXCEEDED: &str =
    "[RETRIES_EXCEEDED] The maximum number of retries has been exceeded.";

/// A reusable retry configuration: [`tonic_retry::retrying::Retrying`] with
/// PySpark's default policy and give-up warning.
#[derive(Debug, Clone)]
pub struct Retrying(generic::Retrying);

impl Default for Retrying {
    /// One PySpark `DefaultPolicy`.
    fn default() -> Self {
        Retrying::new(vec![RetryPolicy::default()])
    }
}

fn inner(policies: impl Into<Vec<RetryPolicy>>) -> Vec<tonic_retry::policy::RetryPolicy> {
    policies.into().into_iter().map(Into::into).collect()
}

impl Retrying {
    /// A loop over `policies`, in order, that gives up with
    /// [`RETRIES_EXCEEDED`].
    pub fn new(policies: impl Into<Vec<RetryPolicy>>) -> Self {
        Retrying(generic::Retrying::new(inner(policies)).with_give_up_message(RETRIES_EXCEEDED))
    }
    /// Replace the policies, keeping the rest.
    pub fn with_policies(self, policies: impl Into<Vec<RetryPolicy>>) -> Self {
        Retrying(self.0.with_policies(inner(policies)))
    }
    /// Replace the sleeper.
    pub fn with_sleeper(self, sleeper: impl Sleeper + 'static) -> Self {
        Retrying(self.0.with_sleeper(sleeper))
    }
    /// Replace the clock.
    pub fn with_clock(self, clock: impl Clock + 'static) -> Self {
        Retrying(self.0.with_clock(clock))
    }
    /// Use a deterministic jitter sequence.
    pub fn with_seed(self, seed: u64) -> Self {
        Retrying(self.0.with_seed(seed))
    }
    /// Share a jitter source.
    pub fn with_jitter(self, jitter: Jitter) -> Self {
        Retrying(self.0.with_jitter(jitter))
    }
    /// Bound immediate retries to `bound` of elapsed time (default 1 h).
    pub fn with_retry_now_bound(self, bound: Duration) -> Self {
        Retrying(self.0.with_retry_now_bound(bound))
    }
    /// Record the calls this loop runs by method
    /// ([`call_method`](tonic_retry::retrying::Retrying::call_method)) in
    /// `metrics`: gRFC A66 and A96 (see `docs/metrics.md`).
    #[cfg(feature = "otel")]
    #[cfg_attr(docsrs, doc(cfg(feature = "otel")))]
    pub fn with_metrics(self, metrics: tonic_retry::metrics::GrpcMetrics) -> Self {
        Retrying(self.0.with_metrics(metrics))
    }
    /// The loop as `tonic_retry` takes it.
    pub fn into_inner(self) -> generic::Retrying {
        self.0
    }
}

impl Deref for Retrying {
    type Target = generic::Retrying;
    fn deref(&self) -> &generic::Retrying {
        &self.0
    }
}

impl From<Retrying> for generic::Retrying {
    fn from(r: Retrying) -> Self {
        r.0
    }
}
