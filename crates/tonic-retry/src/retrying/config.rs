//! [`Retrying`]: the loop's configuration, built once and shared.
//!
//! Why apart from the loop: a program builds one configuration (policies,
//! sleeper, clock, jitter, bounds, metrics) and runs many loops with it;
//! what the loop is made of reads best without the loop's control flow
//! beside it.

use std::sync::Arc;
use std::time::Duration;

use super::clock::{Clock, TokioClock};
use super::jitter::Jitter;
use super::sleeper::{Sleeper, TokioSleeper};
use crate::policy::RetryPolicy;
use crate::recorder::Meters;

/// The default bound on immediate retries: one hour.
pub(crate) const DEFAULT_RETRY_NOW_BOUND: Duration = Duration::from_secs(3600);

/// The warning logged once per give-up, unless
/// [`Retrying::with_give_up_message`] replaces it.
pub(crate) const DEFAULT_GIVE_UP_MESSAGE: &str = "retries exhausted";

/// A reusable retry configuration; each [`run`](Self::run) or
/// [`call`](Self::call) is one fresh loop.
///
/// Cheap to clone. `Retrying::default()` holds one [`RetryPolicy::default`].
#[derive(Debug, Clone)]
pub struct Retrying {
    pub(super) policies: Arc<[RetryPolicy]>,
    pub(super) sleeper: Arc<dyn Sleeper>,
    pub(super) clock: Arc<dyn Clock>,
    pub(super) jitter: Jitter,
    pub(super) retry_now_bound: Duration,
    pub(super) give_up_message: &'static str,
    /// Where the loops record their calls (feature `otel`).
    pub(super) meters: Meters,
    /// The gRPC method the loops' calls are recorded under.
    pub(super) method: Option<Arc<str>>,
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
            method: None,
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
    /// Bound immediate retries to `bound` of elapsed time (default 1 h).
    pub fn with_retry_now_bound(mut self, bound: Duration) -> Self {
        self.retry_now_bound = bound;
        self
    }
    /// The message of the give-up warning (default
    /// `"retries exhausted"`), for a program whose logs must read as
    /// another client's.
    pub fn with_give_up_message(mut self, message: &'static str) -> Self {
        self.give_up_message = message;
        self
    }
    /// Record the loops' calls in `metrics` (gRFC A66 and A96, see
    /// [`crate::metrics`]) under the method named by
    /// [`with_method`](Self::with_method): each run of the operation is an
    /// attempt, each sleep a retry delay; the loop sees no message bytes,
    /// so no sizes. A loop without a method is not recorded.
    #[cfg(feature = "otel")]
    #[cfg_attr(docsrs, doc(cfg(feature = "otel")))]
    pub fn with_metrics(mut self, metrics: crate::metrics::GrpcMetrics) -> Self {
        self.meters = Meters::new(metrics);
        self
    }
    /// The gRPC method (`/package.Service/Method`) the loops run: their
    /// calls are recorded under it when [`with_metrics`](Self::with_metrics)
    /// (feature `otel`) is set; otherwise only a name.
    pub fn with_method(mut self, path: impl Into<Arc<str>>) -> Self {
        self.method = Some(path.into());
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
    /// A uniform sample in `[0, 1)` from the loop's jitter source (seeded
    /// by [`with_seed`](Self::with_seed)), for a driver that computes waits
    /// itself ([`Backoff::next`](crate::policy::Backoff::next)).
    pub fn jitter_sample(&self) -> f64 {
        self.jitter.sample()
    }
    /// The immediate-retry bound.
    pub fn retry_now_bound(&self) -> Duration {
        self.retry_now_bound
    }
}
