//! How the loop waits between attempts.
//!
//! Why a trait: a loop that sleeps on the real clock cannot be tested
//! without waiting for real, and a program may want its waits elsewhere (a
//! runtime of its own, a test that records them). `TokioSleeper` is the
//! default; `RecordingSleeper` (feature `test-util`) records each wait
//! and returns at once.

use std::fmt;
use std::time::Duration;

use crate::boxed::BoxFuture;

/// How the loop waits between attempts.
pub trait Sleeper: Send + Sync + fmt::Debug {
    /// A future that completes after `d` (a
    /// `futures_util::future::BoxFuture<'static, ()>`).
    fn sleep(&self, d: Duration) -> BoxFuture<()>;
}

/// Sleeps with `tokio::time::sleep` (so `tokio::time::pause` applies).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct TokioSleeper;

impl Sleeper for TokioSleeper {
    fn sleep(&self, d: Duration) -> BoxFuture<()> {
        Box::pin(tokio::time::sleep(d))
    }
}

/// Records every requested sleep and returns at once. A test double.
#[cfg(any(test, feature = "test-util"))]
#[cfg_attr(docsrs, doc(cfg(feature = "test-util")))]
#[derive(Debug, Clone, Default)]
pub struct RecordingSleeper {
    sleeps: std::sync::Arc<std::sync::Mutex<Vec<Duration>>>,
}

#[cfg(any(test, feature = "test-util"))]
impl RecordingSleeper {
    /// An empty recorder.
    pub fn new() -> Self {
        Self::default()
    }
    /// Every sleep requested so far.
    pub fn sleeps(&self) -> Vec<Duration> {
        self.sleeps
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
    /// Every sleep requested so far, in whole milliseconds.
    pub fn sleeps_ms(&self) -> Vec<u64> {
        self.sleeps().iter().map(|d| d.as_millis() as u64).collect()
    }
}

#[cfg(any(test, feature = "test-util"))]
impl Sleeper for RecordingSleeper {
    fn sleep(&self, d: Duration) -> BoxFuture<()> {
        self.sleeps
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(d);
        Box::pin(std::future::ready(()))
    }
}
