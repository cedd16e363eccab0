//! The retry settings the embedded-server tests share: PySpark's
//! `TestPolicy` shape (3 retries, 10 ms apart, no jitter), sleeps recorded
//! and never slept, so a test reads the exact waits.
#![allow(dead_code)] // each test binary uses part of this module

use spark_connect_retry::policy::PySparkPolicy;
use spark_connect_retry::policy::RetryPolicy;
use spark_connect_retry::retrying::PySparkRetrying;
use spark_connect_retry::retrying::Retrying;
use tonic_retry::retrying::RecordingSleeper;

/// 3 retries, each wait 10 ms, no jitter.
pub fn test_policy() -> RetryPolicy {
    RetryPolicy::pyspark_builder()
        .max_retries(Some(3))
        .initial_backoff_ms(10.0)
        .max_backoff_ms(Some(10.0))
        .jitter_ms(0.0)
        .build()
        .expect("a valid policy")
}

/// [`test_policy`] in a loop whose sleeps `sleeper` records, seeded.
pub fn recorded(sleeper: &RecordingSleeper, seed: u64) -> Retrying {
    Retrying::pyspark_with(vec![test_policy()])
        .with_sleeper(sleeper.clone())
        .with_seed(seed)
}
