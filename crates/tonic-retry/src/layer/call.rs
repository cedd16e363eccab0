//! Per-call overrides: one call's own attempts cap and deadline, and what
//! its attempts did, through the request's extensions.
//!
//! A layer's settings are per method, but one call sometimes needs its
//! own: a health probe that must not retry, a write the caller will retry
//! itself, a bulk read allowed longer than the method's deadline. gRPC's
//! other clients take these per call (grpc-java's `CallOptions`, gax's
//! per-request options); tonic carries a request's extensions down to the
//! layer, so a [`CallOptions`] put there is read by the layer for that
//! call only:
//!
//! ```
//! use std::time::Duration;
//! use tonic_retry::layer::{CallOptions, CallStatsHandle};
//!
//! let stats = CallStatsHandle::default();
//! let mut request = tonic::Request::new(());
//! request.extensions_mut().insert(
//!     CallOptions::new()
//!         .max_attempts(2)
//!         .deadline(Duration::from_secs(60))
//!         .stats(stats.clone()),
//! );
//! // client.get(request).await, then:
//! assert_eq!(stats.snapshot().attempts, 0, "no call made here");
//! ```

use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One call's overrides of the layer's settings, put in the request's
/// extensions (`request.extensions_mut().insert(options)`).
///
/// Chained configuration, so its setters are bare names (the crate's
/// builder convention).
#[derive(Debug, Clone, Default)]
pub struct CallOptions {
    pub(crate) max_attempts: Option<u32>,
    pub(crate) deadline: Option<Duration>,
    pub(crate) stats: Option<CallStatsHandle>,
}

impl CallOptions {
    /// No overrides: the layer's settings apply.
    pub fn new() -> Self {
        Self::default()
    }
    /// Send the call once: no retries, no hedges, and the request is not
    /// buffered (the same as [`max_attempts(1)`](Self::max_attempts)).
    pub fn no_retries(self) -> Self {
        self.max_attempts(1)
    }
    /// At most `n` attempts in all (the first included; 0 is read as 1),
    /// or fewer if the method's policy allows fewer. A call that reaches the
    /// cap gives up as if the policy's budget were spent.
    pub fn max_attempts(mut self, n: u32) -> Self {
        self.max_attempts = Some(n.max(1));
        self
    }
    /// This call's deadline across all its attempts, in place of the
    /// method's (a service config's `timeout`, or the layer's
    /// [`default_deadline`](super::RetryLayer::default_deadline)). The
    /// request's own `grpc-timeout` (`tonic::Request::set_timeout`) still
    /// wins when it is shorter.
    pub fn deadline(mut self, d: Duration) -> Self {
        self.deadline = Some(d);
        self
    }
    /// Record the call's attempts in `handle`, readable once the call is
    /// over (whether it succeeded or failed).
    pub fn stats(mut self, handle: CallStatsHandle) -> Self {
        self.stats = Some(handle);
        self
    }
}

/// What one call's attempts did ([`CallStatsHandle::snapshot`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CallStats {
    /// Attempts sent, the first (and hedges) included.
    pub attempts: u32,
    /// Retries scheduled (each after a wait).
    pub retries: u32,
    /// The time waited between attempts, whether the wait came from the
    /// policy's backoff, a pushback or a `RetryInfo`.
    pub waited: Duration,
}

/// A live handle on one call's [`CallStats`], given to
/// [`CallOptions::stats`]; clones share the counts.
#[derive(Debug, Clone, Default)]
pub struct CallStatsHandle {
    inner: Arc<Mutex<CallStats>>,
}

impl CallStatsHandle {
    /// The counts so far.
    pub fn snapshot(&self) -> CallStats {
        *self.lock()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, CallStats> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn attempt(&self) {
        let mut s = self.lock();
        s.attempts = s.attempts.saturating_add(1);
    }

    pub(crate) fn retry(&self, wait: Duration) {
        let mut s = self.lock();
        s.retries = s.retries.saturating_add(1);
        s.waited = s.waited.saturating_add(wait);
    }
}
