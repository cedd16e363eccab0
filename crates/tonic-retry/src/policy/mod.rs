//! Retry policies: which errors to retry, how many times, and how long to wait.
//!
//! A gRPC client meets transient failures all the time: a restarting server
//! answers UNAVAILABLE, a busy server asks for a pause with a
//! `google.rpc.RetryInfo`, and tonic reports a reset connection as
//! `Unknown`. Giving up on the first one loses work to a blip; retrying
//! every error at once hammers a server that is trying to recover and
//! repeats failures that will never succeed (a bad argument, a missing
//! row). The client must tell the two apart, wait longer after each
//! failure, honour the server's requested delay, and stop after a bounded
//! time.
//!
//! A [`RetryPolicy`] is that decision made into a value: a classifier that
//! decides whether an error is retryable, a retry budget, and an
//! exponential backoff with jitter and a server-delay floor.
//!
//! # The default
//!
//! [`RetryPolicy::default()`] is the policy the gRPC guidance writes down:
//! the numbers of the retry example in gRFC A6 and gRPC's retry guide, with
//! A6's 2024 jitter, and the codes Google's AIP-194 calls safe to retry
//! ([`DefaultClassifier`]: UNAVAILABLE and transport failures, plus any
//! status whose server asked for the retry with a `RetryInfo`).
//!
//! | parameter | default | source |
//! |---|---|---|
//! | `max_retries` | 4 (5 attempts) | A6's cap on `maxAttempts` |
//! | `initial_backoff` | 100 ms | A6 / gRPC retry guide example |
//! | `max_backoff` | 1 s | A6 / gRPC retry guide example |
//! | `backoff_multiplier` | 2 | A6 / gRPC retry guide example |
//! | jitter | proportional, ×U(0.8, 1.2) | A6, 2024 revision |
//! | `recognize_server_retry_delay` | true (`google.rpc.RetryInfo` is a floor) | AIP-194 |
//! | `max_server_retry_delay` | 10 min | a bound on what a server may ask |
//!
//! Without jitter the waits are 100, 200, 400 and 800 ms: 1.5 s over 5
//! attempts, so a dead server is reported within seconds. Set your own
//! numbers with [`RetryPolicy::builder`]; a service config
//! ([`ServiceConfig`](crate::layer::ServiceConfig)) sets them per method.
//!
//! The three concerns are kept apart, as in google-cloud-rust's gax:
//! [`Classifier`] decides *whether* an error may be retried, [`RetryPolicy`]
//! holds the budget and the backoff arithmetic, and throttling (a shared token
//! bucket) lives in the tower layer. The loop that drives them is
//! [`crate::retrying`]; its pure decision core, [`RetryState`], is shared by
//! the retry loop, the reattachable stream and the tower layer.
//!
//! ```
//! use std::time::Duration;
//! use tonic_retry::policy::{FnClassifier, RetryPolicy};
//!
//! // A policy that only retries ABORTED, 3 times, 10 ms apart.
//! let policy = RetryPolicy::builder()
//!     .name("aborted")
//!     .classifier(FnClassifier::new("aborted", |f| f.code() == tonic::Code::Aborted))
//!     .max_retries(Some(3))
//!     .initial_backoff(Duration::from_millis(10))
//!     .max_backoff(None)
//!     .build()
//!     .unwrap();
//! assert_eq!(policy.max_retries(), Some(3));
//! ```

mod backoff;
mod builder;
mod classify;
mod failure;
mod state;

pub(crate) use failure::Pushback;
pub use failure::{Failure, FailureKind, sources};

/// The 365-day maximum of a policy duration, in milliseconds.
const MAX_POLICY_MS: f64 = 365.0 * 24.0 * 60.0 * 60.0 * 1000.0;

fn ms_to_duration(ms: f64) -> Duration {
    // Checked on entry to be in 0..=MAX_POLICY_MS; clamped again so that no
    // value can make `from_secs_f64` panic.
    Duration::from_secs_f64(ms.clamp(0.0, MAX_POLICY_MS) / 1000.0)
}
#[cfg(test)]
pub(crate) use builder::MAX_POLICY_DURATION;
pub use builder::{InvalidPolicy, RetryPolicyBuilder};

pub use backoff::Backoff;
pub(crate) use classify::CodeClassifier;
pub use classify::{Classifier, DefaultClassifier, FnClassifier};
pub use state::{GiveUpReason, RetryDecision, RetryReason, RetryState};

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// The default cap on the delay a server may ask for (`google.rpc.RetryInfo`
/// or `grpc-retry-pushback-ms`): 10 minutes, the default
/// [`max_server_retry_delay`](RetryPolicy::max_server_retry_delay).
pub(crate) const DEFAULT_MAX_SERVER_RETRY_DELAY: Duration = Duration::from_secs(600);

/// A retry policy: a classifier, a retry budget and a backoff schedule.
///
/// Build one with [`RetryPolicy::builder`]; [`RetryPolicy::default`] is
/// the gRPC default of the [module docs](self). Cloning is cheap. A policy holds no
/// mutable state: each retry loop keeps its own state ([`RetryState`],
/// [`Backoff`]), so budgets never carry over between calls.
#[derive(Clone)]
pub struct RetryPolicy {
    name: Arc<str>,
    max_retries: Option<u32>,
    initial_backoff_ms: f64,
    max_backoff_ms: Option<f64>,
    backoff_multiplier: f64,
    jitter_ms: f64,
    min_jitter_threshold_ms: f64,
    recognize_server_retry_delay: bool,
    max_server_retry_delay_ms: Option<f64>,
    jitter_factor: f64,
    classifier: Arc<dyn Classifier>,
}

impl fmt::Debug for RetryPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryPolicy")
            .field("name", &self.name)
            .field("max_retries", &self.max_retries)
            .field("initial_backoff_ms", &self.initial_backoff_ms)
            .field("max_backoff_ms", &self.max_backoff_ms)
            .field("backoff_multiplier", &self.backoff_multiplier)
            .field("jitter_ms", &self.jitter_ms)
            .field("min_jitter_threshold_ms", &self.min_jitter_threshold_ms)
            .field(
                "recognize_server_retry_delay",
                &self.recognize_server_retry_delay,
            )
            .field("max_server_retry_delay_ms", &self.max_server_retry_delay_ms)
            .field("jitter_factor", &self.jitter_factor)
            .field("classifier", &self.classifier)
            .finish()
    }
}

impl Default for RetryPolicy {
    /// The gRPC default (see the [module docs](self)), named `default`.
    fn default() -> Self {
        RetryPolicy {
            name: Arc::from(DEFAULT_POLICY_NAME),
            max_retries: Some(4),
            initial_backoff_ms: 100.0,
            max_backoff_ms: Some(1_000.0),
            backoff_multiplier: 2.0,
            jitter_ms: 0.0,
            min_jitter_threshold_ms: 0.0,
            recognize_server_retry_delay: true,
            max_server_retry_delay_ms: Some(600_000.0),
            jitter_factor: 0.2,
            classifier: Arc::new(DefaultClassifier),
        }
    }
}

/// The name of [`RetryPolicy::default`] in logs.
const DEFAULT_POLICY_NAME: &str = "default";

impl RetryPolicy {
    /// Whether the numbers (everything but the name and the classifier)
    /// are those of `other`.
    fn same_numbers(&self, other: &RetryPolicy) -> bool {
        self.max_retries == other.max_retries
            && self.initial_backoff_ms == other.initial_backoff_ms
            && self.max_backoff_ms == other.max_backoff_ms
            && self.backoff_multiplier == other.backoff_multiplier
            && self.jitter_ms == other.jitter_ms
            && self.min_jitter_threshold_ms == other.min_jitter_threshold_ms
            && self.recognize_server_retry_delay == other.recognize_server_retry_delay
            && self.max_server_retry_delay_ms == other.max_server_retry_delay_ms
            && self.jitter_factor == other.jitter_factor
    }

    /// The policy's name (used in logs only): the builder's
    /// [`name`](RetryPolicyBuilder::name), `DefaultPolicy` for
    /// [`RetryPolicy::default`], or `"custom"` for a policy
    /// changed from its builder's start without a name.
    pub fn name(&self) -> &str {
        &self.name
    }
    /// Maximum number of waits; `None` means unlimited. Attempts = 1 + max_retries.
    pub fn max_retries(&self) -> Option<u32> {
        self.max_retries
    }
    /// The first wait.
    pub fn initial_backoff(&self) -> Duration {
        ms_to_duration(self.initial_backoff_ms)
    }
    /// Cap on the computed backoff. `None` means the wait never grows.
    pub fn max_backoff(&self) -> Option<Duration> {
        self.max_backoff_ms.map(ms_to_duration)
    }
    /// Growth factor between waits.
    pub fn backoff_multiplier(&self) -> f64 {
        self.backoff_multiplier
    }
    /// Upper bound of the uniform jitter added to waits at or above the threshold.
    pub fn jitter(&self) -> Duration {
        ms_to_duration(self.jitter_ms)
    }
    /// Waits below this value get no jitter.
    pub fn min_jitter_threshold(&self) -> Duration {
        ms_to_duration(self.min_jitter_threshold_ms)
    }
    /// Whether `google.rpc.RetryInfo.retry_delay` is used as a minimum wait.
    pub fn recognize_server_retry_delay(&self) -> bool {
        self.recognize_server_retry_delay
    }
    /// Cap on the delay a server may ask for, by `google.rpc.RetryInfo` or
    /// by `grpc-retry-pushback-ms` (the tower layer); `None`: uncapped.
    pub fn max_server_retry_delay(&self) -> Option<Duration> {
        self.max_server_retry_delay_ms.map(ms_to_duration)
    }
    /// The proportional jitter factor `f` (gRFC A6: 0.2): each wait is the
    /// backoff times a uniform sample of `[1 - f, 1 + f)`; 0 when the
    /// additive [`jitter`](Self::jitter) applies instead.
    pub fn jitter_factor(&self) -> f64 {
        self.jitter_factor
    }
    /// The classifier deciding which errors this policy retries.
    pub fn classifier(&self) -> &Arc<dyn Classifier> {
        &self.classifier
    }

    /// Whether this policy's classifier accepts `failure`.
    pub fn can_retry(&self, failure: &Failure<'_>) -> bool {
        self.classifier.can_retry(failure)
    }
}
