//! Retry policies, with PySpark 4.3's `DefaultPolicy` as constructors.
//!
//! A Rust client and a Python one should load a Spark Connect server
//! alike: the same waits after the same failures, the same give-up after
//! the same time. The policy machinery is [`tonic_retry::policy`]'s, with
//! gRPC's defaults (5 attempts within about 1.5 s); its types are the ones
//! re-exported here. Spark's numbers are constructors on them, through the
//! extension trait [`PySparkPolicy`] (as [`SparkConnectLayer`] puts
//! Spark's method table on the layer): [`RetryPolicy::pyspark()`](PySparkPolicy::pyspark) is
//! PySpark 4.3.0's `DefaultPolicy` to the millisecond, and
//! [`PySparkClassifier`] is its `can_retry`, which adds Spark's
//! `INVALID_CURSOR.DISCONNECTED` rule to the gRPC one.
//!
//! | parameter | PySpark's `DefaultPolicy` |
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
//! [`SparkConnectLayer`]: crate::layer::SparkConnectLayer
//!
//! ```
//! use std::time::Duration;
//! use spark_connect_retry::policy::{PySparkPolicy, RetryPolicy};
//!
//! let p = RetryPolicy::pyspark();
//! assert_eq!((p.name(), p.max_retries()), ("DefaultPolicy", Some(15)));
//! assert_eq!(p.initial_backoff(), Duration::from_millis(50));
//! let fewer = RetryPolicy::pyspark_builder().max_retries(Some(3)).build().unwrap();
//! assert_eq!((fewer.name(), fewer.max_backoff()), ("custom", Some(Duration::from_secs(60))));
//! ```

use tonic::Code;

pub use tonic_retry::policy::{
    Backoff, Classifier, DefaultClassifier, Failure, FailureKind, FnClassifier, GiveUpReason,
    InvalidPolicy, RetryDecision, RetryPolicy, RetryPolicyBuilder, RetryReason, RetryState,
};

/// The name of PySpark's default policy, and of [`RetryPolicy::pyspark`](PySparkPolicy::pyspark).
pub(crate) const DEFAULT_POLICY_NAME: &str = "DefaultPolicy";

/// The marker of a stream preempted by a newer attach of the same operation.
const INVALID_CURSOR_DISCONNECTED: &str = "INVALID_CURSOR.DISCONNECTED";

/// PySpark 4.3.0 `DefaultPolicy.can_retry`, extended to tonic's transport
/// errors: the gRPC rules of [`DefaultClassifier`] (transport failures,
/// UNAVAILABLE, any status with a `RetryInfo`), and `INTERNAL` whose
/// message contains `INVALID_CURSOR.DISCONNECTED` (another RPC preempted
/// this one).
#[derive(Debug, Clone, Copy, Default)]
pub struct PySparkClassifier;

impl Classifier for PySparkClassifier {
    fn can_retry(&self, failure: &Failure<'_>) -> bool {
        let preempted = matches!(failure.kind(), FailureKind::Server | FailureKind::Local)
            && failure.code() == Code::Internal
            && failure
                .status()
                .message()
                .contains(INVALID_CURSOR_DISCONNECTED);
        preempted || DefaultClassifier::accepts(failure)
    }
}

/// PySpark 4.3.0's `DefaultPolicy`.
fn pyspark_default() -> RetryPolicy {
    RetryPolicy::builder()
        .name(DEFAULT_POLICY_NAME)
        .classifier(PySparkClassifier)
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
fn pyspark_base() -> RetryPolicy {
    RetryPolicy::builder()
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

/// PySpark's policies as constructors of [`RetryPolicy`]; bring the trait
/// into scope with `use spark_connect_retry::policy::PySparkPolicy`.
pub trait PySparkPolicy {
    /// PySpark 4.3.0's `DefaultPolicy` (the [module docs](self)' table),
    /// with [`PySparkClassifier`].
    fn pyspark() -> RetryPolicy;
    /// A builder that starts from [`pyspark`](Self::pyspark). A policy
    /// built without a name keeps the name `DefaultPolicy` only if nothing
    /// was changed; a changed classifier or number makes it `custom`.
    fn pyspark_builder() -> RetryPolicyBuilder;
    /// A builder that starts from PySpark's *base* `RetryPolicy` defaults:
    /// unlimited retries, 1 s initial backoff, no maximum (so the wait
    /// never grows), multiplier 1, no jitter, no server delay, and a
    /// classifier that retries nothing. Named `RetryPolicy` when unchanged.
    fn pyspark_base_builder() -> RetryPolicyBuilder;
}

impl PySparkPolicy for RetryPolicy {
    fn pyspark() -> RetryPolicy {
        pyspark_default()
    }
    fn pyspark_builder() -> RetryPolicyBuilder {
        RetryPolicyBuilder::starting_from(pyspark_default)
    }
    fn pyspark_base_builder() -> RetryPolicyBuilder {
        RetryPolicyBuilder::starting_from(pyspark_base)
    }
}

#[cfg(test)]
mod tests {
    use super::Classifier;
    use super::{DefaultClassifier, Failure, PySparkClassifier, PySparkPolicy, RetryPolicy};
    use tonic::Status;

    #[test]
    fn pyspark_policies_build_and_keep_their_names() {
        assert_eq!(RetryPolicy::pyspark().name(), "DefaultPolicy");
        assert_eq!(
            RetryPolicy::pyspark_builder().build().unwrap().name(),
            "DefaultPolicy"
        );
        assert_eq!(
            RetryPolicy::pyspark_base_builder().build().unwrap().name(),
            "RetryPolicy"
        );
        let changed = RetryPolicy::pyspark_base_builder()
            .max_retries(Some(1))
            .build();
        assert_eq!(changed.unwrap().name(), "custom");
    }

    #[test]
    fn pyspark_classifier_adds_the_disconnected_cursor() {
        let can = |c: &dyn Classifier, s: &Status| c.can_retry(&Failure::new(s));
        let preempted =
            Status::internal("[INVALID_CURSOR.DISCONNECTED] The cursor has been disconnected");
        assert!(can(&PySparkClassifier, &preempted));
        assert!(!can(&DefaultClassifier, &preempted));
        assert!(can(&PySparkClassifier, &Status::unavailable("down")));
        assert!(!can(&PySparkClassifier, &Status::internal("Fatal")));
    }
}
