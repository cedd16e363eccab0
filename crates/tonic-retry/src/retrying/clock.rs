//! The clock the loop reads for its elapsed-time bound.
//!
//! Why a trait: immediate retries are bounded by elapsed time, and a bound
//! of an hour cannot be tested on the wall clock. `TokioClock` is the
//! default (paused tokio time moves it); `ManualClock` (feature
//! `test-util`) is moved by hand.

use std::fmt;
use std::sync::OnceLock;
use std::time::Duration;

/// A monotonic clock, as a duration since an arbitrary origin.
pub trait Clock: Send + Sync + fmt::Debug {
    /// The current time.
    fn now(&self) -> Duration;
}

/// `tokio::time::Instant` since the first use (so `tokio::time::pause` applies).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct TokioClock;

impl Clock for TokioClock {
    fn now(&self) -> Duration {
        static ORIGIN: OnceLock<tokio::time::Instant> = OnceLock::new();
        let origin = *ORIGIN.get_or_init(tokio::time::Instant::now);
        tokio::time::Instant::now().saturating_duration_since(origin)
    }
}

/// A clock moved by hand. A test double.
#[cfg(any(test, feature = "test-util"))]
#[cfg_attr(docsrs, doc(cfg(feature = "test-util")))]
#[derive(Debug, Clone, Default)]
pub struct ManualClock {
    now: std::sync::Arc<std::sync::Mutex<Duration>>,
}

#[cfg(any(test, feature = "test-util"))]
impl ManualClock {
    /// A clock at zero.
    pub fn new() -> Self {
        Self::default()
    }
    /// Move the clock forward.
    pub fn advance(&self, d: Duration) {
        *self.now.lock().unwrap_or_else(|e| e.into_inner()) += d;
    }
}

#[cfg(any(test, feature = "test-util"))]
impl Clock for ManualClock {
    fn now(&self) -> Duration {
        *self.now.lock().unwrap_or_else(|e| e.into_inner())
    }
}
