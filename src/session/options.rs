//! The options a session runs with, checked once by the builder, and the
//! lock helper every part of the session shares.
//!
//! Plain data with no behaviour of its own, so that the builder, the
//! session and its parts can all read it without importing each other.

use std::sync::Mutex;
use std::time::Duration;

use crate::deadlines::RpcDeadlines;
use crate::meters::SessionMeters;
use crate::retrying::Retrying;
use crate::token::cache::Credentials;

/// The checked options [`SparkSessionBuilder::build`] hands to the session.
pub(crate) struct Options {
    pub(crate) retrying: Retrying,
    pub(crate) deadlines: RpcDeadlines,
    pub(crate) idle_timeout: Option<Duration>,
    pub(crate) release_wait: Duration,
    /// The preferred Arrow chunk size; `None` turns chunking off.
    pub(crate) arrow_chunk_size: Option<usize>,
    pub(crate) interrupt_on_drop: bool,
    /// Spark configs set on every server-side session before its first call.
    pub(crate) configs: BuilderConfigs,
    /// The client's own defaults, set after `configs` on every server-side
    /// session; a server that refuses them is logged once and ignored.
    pub(crate) default_configs: BuilderConfigs,
    /// A refusal of `default_configs` was logged.
    pub(crate) default_configs_refused: std::sync::atomic::AtomicBool,
    /// Move a stale session to a fresh server-side session for new calls.
    pub(crate) renew_stale_session: bool,
    /// Resume queries whose execution the server lost (verified).
    // Read by the Arrow stream only (resumption compares decoded rows).
    #[cfg_attr(not(feature = "arrow"), allow(dead_code))]
    pub(crate) resume_queries: bool,
    /// The token provider and its cached token (`None`: no token at all).
    pub(crate) credentials: Option<Credentials>,
    /// The session's own metrics (nothing without the `otel` feature).
    pub(crate) meters: SessionMeters,
}

/// The builder's configs, in the order set. Debug shows the keys only: a
/// value may be a secret (`spark.hadoop.fs.s3a.secret.key`).
#[derive(Clone, Default, PartialEq, Eq)]
pub(crate) struct BuilderConfigs(pub(crate) Vec<(String, String)>);

impl BuilderConfigs {
    /// Sets `key`; the last value of a key wins.
    pub(crate) fn set(&mut self, key: String, value: String) {
        self.0.retain(|(k, _)| *k != key);
        self.0.push((key, value));
    }
}

impl std::fmt::Debug for BuilderConfigs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map()
            .entries(self.0.iter().map(|(k, _)| (k, "<redacted>")))
            .finish()
    }
}

/// Locks `m`, even if a panicking thread poisoned it: the session's state stays usable.
pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
