//! Retry policies with PySpark 4.3's `DefaultPolicy` as the default.
//!
//! A Rust client and a Python one should load a Spark Connect server
//! alike: the same waits after the same failures, the same give-up after
//! the same time. [`tonic_retry::policy`] holds the policy machinery, with
//! gRPC's defaults (5 attempts within about 1.5 s); this module is the same
//! machinery with Spark's: [`RetryPolicy::default()`] is PySpark 4.3.0's
//! `DefaultPolicy` to the millisecond, and [`DefaultClassifier`] is its
//! `can_retry`, which adds Spark's `INVALID_CURSOR.DISCONNECTED` rule to
//! the gRPC one.
//!
//! | parameter | default |
//! |---|---|
//! | `max_retries` | 15 |
//! | `initial_backoff` | 50 ms |
//! | `max_backoff` | 60 s |
//! | `backoff_multiplier` | 4.0 |
//! | `jitter` | 500 ms, added only when the wait is ≥ `min_jitter_threshold` |
//! | `min_jitter_threshold` | 2 s |
//! | `recognize_server_retry_delay` | true (`google.rpc.RetryInfo` is a floor) |
//! | `max_server_retry_delay` | 10 min |
//!
//! With jitter 0 the waits are 50, 200, 800, 3 200, 12 800, 51 200 ms and then
//! 60 000 ms nine times: 608 250 ms in total, over 16 attempts.
//!
//! [`RetryPolicy`] here is a thin wrapper of [`tonic_retry::policy::RetryPolicy`]
//! (it dereferences to it and converts into it), so that its `default()`
//! and `builder()` can be PySpark's while every other item of this module
//! is `tonic_retry`'s own.
//!
//! ```
//! use std::time::Duration;
//! use spark_connect_retry::policy::RetryPolicy;
//!
//! let p = RetryPolicy::default();
//! assert_eq!((p.name(), p.max_retries()), ("DefaultPolicy", Some(15)));
//! assert_eq!(p.initial_backoff(), Duration::from_millis(50));
//! let fewer = RetryPolicy::builder().max_retries(Some(3)).build().unwrap();
//! assert_eq!((fewer.name(), fewer.max_backoff()), ("custom", Some(Duration::from_secs(60))));
//! ```

use std::ops::Deref;
use std::sync::Arc;
use std::time::Duration;

use tonic::{Code, Status};
use tonic_retry::policy as generic;

pub use tonic_retry::policy::{
    CUSTOM_POLICY_NAME, Classifier, CodeClassifier, DEFAULT_MAX_SERVER_RETRY_DELAY, Failure,
    FailureKind, FnClassifier, GiveUpReason, InvalidPolicy, MAX_POLICY_DURATION, PolicyState,
    Pushback, RetryDecision, RetryReason, RetryState, classify_failure,
};

/// The name of PySpark's default policy, and of [`RetryPolicy::default`].
pub const DEFAULT_POLICY_NAME: &str = "DefaultPolicy";

/// The marker of a stream preempted by a newer attach of the same operation.
const INVALID_CURSOR_DISCONNECTED: &str = "INVALID_CURSOR.DISCONNECTED";

/// PySpark 4.3.0 `DefaultPolicy.can_retry`, extended to tonic's transport
/// errors: the gRPC rules of [`tonic_retry::policy::DefaultClassifier`]
/// (transport failures, UNAVAILABLE, any status with a `RetryInfo`), and
/// `INTERNAL` whose message contains `INVALID_CURSOR.DISCONNECTED` (another
/// RPC preempted this one).
#[derive(Debug, Clone, Copy, Default)]
pub struct DefaultClassifier;

impl DefaultClassifier {
    fn accepts(failure: &Failure<'_>) -> bool {
        let preempted = matches!(failure.kind(), FailureKind::Server | FailureKind::Local)
            && failure.code() == Code::Internal
            && failure
                .status()
                .message()
                .contains(INVALID_CURSOR_DISCONNECTED);
        preempted || generic::DefaultClassifier::accepts(failure)
    }
}

impl Classifier for DefaultClassifier {
    fn can_retry(&self, status: &Status) -> bool {
        Self::accepts(&Failure::new(status))
    }

    fn can_retry_failure(&self, failure: &Failure<'_>) -> bool {
        Self::accepts(failure)
    }
}

/// PySpark 4.3.0's `DefaultPolicy`.
fn pyspark_default() -> generic::RetryPolicy {
    generic::RetryPolicy::builder()
        .name(DEFAULT_POLICY_NAME)
        .classifier(DefaultClassifier)
        .max_retries(Some(15))
        .initial_backoff_ms(50.0)
        .max_backoff_ms(Some(60_000.0))
        .backoff_multiplier(4.0)
        .proportional_jitter(0.0)
        .jitter_ms(500.0)
        .min_jitter_threshold_ms(2_000.0)
        .recognize_server_retry_delay(true)
        .max_server_retry_delay_ms(Some(600_000.0))
        .build()
        // Constants, checked by a unit test.
        .expect("PySpark's DefaultPolicy is a valid policy")
}

/// PySpark 4.3.0's base `RetryPolicy`: unlimited retries, 1 s, no growth.
fn pyspark_base() -> generic::RetryPolicy {
    generic::RetryPolicy::builder()
        .name("RetryPolicy")
        .classifier(FnClassifier::new("never", |_| false))
        .max_retries(None)
        .initial_backoff_ms(1_000.0)
        .max_backoff_ms(None)
        .backoff_multiplier(1.0)
        .proportional_jitter(0.0)
        .jitter_ms(0.0)
        .min_jitter_threshold_ms(0.0)
        .recognize_server_retry_delay(false)
        .max_server_retry_delay_ms(None)
        .build()
        .expect("PySpark's base RetryPolicy is a valid policy")
}

/// A retry policy whose default is PySpark's `DefaultPolicy`; everything
/// else is [`tonic_retry::policy::RetryPolicy`]'s, through `Deref`.
#[derive(Debug, Clone)]
pub struct RetryPolicy(generic::RetryPolicy);

impl Default for RetryPolicy {
    /// PySpark 4.3.0's `DefaultPolicy` (the [module docs](self)' table).
    fn default() -> Self {
        RetryPolicy(pyspark_default())
    }
}

impl RetryPolicy {
    /// A builder that starts from [`RetryPolicy::default`] (PySpark's
    /// `DefaultPolicy`). A policy built without a name keeps the name
    /// `DefaultPolicy` only if nothing was changed; a changed classifier or
    /// number makes it [`CUSTOM_POLICY_NAME`].
    pub fn builder() -> RetryPolicyBuilder {
        RetryPolicyBuilder(generic::RetryPolicyBuilder::starting_from(pyspark_default))
    }

    /// A builder that starts from PySpark's *base* `RetryPolicy` defaults:
    /// unlimited retries, 1 s initial backoff, no maximum (so the wait never
    /// grows), multiplier 1, no jitter, no server delay, and a classifier that
    /// retries nothing. Named `RetryPolicy` when unchanged.
    pub fn base_builder() -> RetryPolicyBuilder {
        RetryPolicyBuilder(generic::RetryPolicyBuilder::starting_from(pyspark_base))
    }

    /// The policy as `tonic_retry` takes it.
    pub fn into_inner(self) -> generic::RetryPolicy {
        self.0
    }
}

impl Deref for RetryPolicy {
    type Target = generic::RetryPolicy;
    fn deref(&self) -> &generic::RetryPolicy {
        &self.0
    }
}

impl From<RetryPolicy> for generic::RetryPolicy {
    fn from(p: RetryPolicy) -> Self {
        p.0
    }
}

impl From<generic::RetryPolicy> for RetryPolicy {
    fn from(p: generic::RetryPolicy) -> Self {
        RetryPolicy(p)
    }
}

/// Builds a [`RetryPolicy`]: [`tonic_retry::policy::RetryPolicyBuilder`]
/// started from PySpark's policies; each setter is that builder's.
#[derive(Debug, Clone)]
#[must_use]
pub struct RetryPolicyBuilder(generic::RetryPolicyBuilder);

macro_rules! forward {
    ($($(#[$doc:meta])* $name:ident($arg:ident: $ty:ty);)*) => {
        $(
            $(#[$doc])*
            pub fn $name(self, $arg: $ty) -> Self {
                RetryPolicyBuilder(self.0.$name($arg))
            }
        )*
    };
}

impl RetryPolicyBuilder {
    forward! {
        /// The policy's name, for logs.
        name(name: impl Into<String>);
        /// The classifier deciding which errors are retried.
        classifier(classifier: impl Classifier + 'static);
        /// The classifier, shared.
        classifier_arc(classifier: Arc<dyn Classifier>);
        /// Maximum number of retries; `None` is unlimited.
        max_retries(max_retries: Option<u32>);
        /// The first wait.
        initial_backoff(d: Duration);
        /// The first wait, in milliseconds.
        initial_backoff_ms(ms: f64);
        /// Cap on the computed backoff; `None`: the wait never grows.
        max_backoff(d: Option<Duration>);
        /// Cap on the computed backoff, in milliseconds.
        max_backoff_ms(ms: Option<f64>);
        /// Growth factor between waits.
        backoff_multiplier(m: f64);
        /// Upper bound of the additive jitter.
        jitter(d: Duration);
        /// Upper bound of the additive jitter, in milliseconds.
        jitter_ms(ms: f64);
        /// Waits below this get no additive jitter.
        min_jitter_threshold(d: Duration);
        /// Waits below this many milliseconds get no additive jitter.
        min_jitter_threshold_ms(ms: f64);
        /// Use `google.rpc.RetryInfo.retry_delay` as a minimum wait.
        recognize_server_retry_delay(yes: bool);
        /// Cap on the delay a server may ask for (`None`: uncapped).
        max_server_retry_delay(d: Option<Duration>);
        /// Cap on the delay a server may ask for, in milliseconds.
        max_server_retry_delay_ms(ms: Option<f64>);
        /// Proportional jitter (gRFC A6: 0.2) in place of the additive one.
        proportional_jitter(factor: f64);
    }

    /// Validate and build (see [`tonic_retry::policy::RetryPolicyBuilder::build`]).
    pub fn build(self) -> Result<RetryPolicy, InvalidPolicy> {
        self.0.build().map(RetryPolicy)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pyspark_policies_build_and_keep_their_names() {
        assert_eq!(RetryPolicy::default().name(), "DefaultPolicy");
        assert_eq!(
            RetryPolicy::builder().build().unwrap().name(),
            "DefaultPolicy"
        );
        assert_eq!(
            RetryPolicy::base_builder().build().unwrap().name(),
            "RetryPolicy"
        );
        let changed = RetryPolicy::base_builder().max_retries(Some(1)).build();
        assert_eq!(changed.unwrap().name(), "custom");
    }

    #[test]
    fn pyspark_classifier_adds_the_disconnected_cursor() {
        let c = DefaultClassifier;
        let preempted =
            Status::internal("[INVALID_CURSOR.DISCONNECTED] The cursor has been disconnected");
        assert!(c.can_retry(&preempted));
        assert!(!generic::DefaultClassifier.can_retry(&preempted));
        assert!(c.can_retry(&Status::unavailable("down")));
        assert!(!c.can_retry(&Status::internal("Fatal")));
    }
}
