//! A server killed mid-query that never comes back: how long the client
//! keeps trying with the default policy before it gives a clear error.
//!
//! PySpark's `DefaultPolicy` (ours, to the millisecond) promises "at least
//! 10 minutes" of tolerated failure. Against a port nobody listens on, every
//! attempt is refused at once, so the time from the kill to the error is the
//! sum of the policy's waits: 608.25 s without jitter, up to 6 s more with it.
//! Measured once against a real Spark 4.3.0 server (613.2 s, README); proved
//! here in paused time, exactly.

use std::time::Duration;

use crate::support::proxied::proxied_server;
use crate::support::streams;
use spark_connect_retry::policy::PySparkPolicy;
use spark_connect_retry::policy::RetryPolicy;
use spark_connect_retry::reattach::StreamStats;
use spark_connect_retry::retrying::PySparkRetrying;
use spark_connect_retry::retrying::Retrying;
use spark_connect_retry::session::{SparkError, SparkSession};
use streams::until_error;

/// Reads the first batch of a long query through a proxy, then closes the
/// proxy's port for good (the "kill"). Returns the (virtual) time from the
/// kill to the stream's error, the error, and the execution's counters.
async fn killed_mid_query(retrying: Retrying) -> (Duration, SparkError, StreamStats) {
    let (_server, proxy) = proxied_server().await;
    let spark = SparkSession::builder()
        .remote(proxy.remote())
        .retrying(retrying)
        .build()
        .unwrap();
    let mut stream = spark.sql("SELECT id FROM range(100000000)").await.unwrap();
    stream.next_batch().await.unwrap().unwrap();
    let killed = tokio::time::Instant::now();
    proxy.shutdown().await;
    let err = until_error(&mut stream).await;
    (killed.elapsed(), err, stream.stats())
}

/// Every attempt refused, 15 retries: the time from the kill to the error
/// is the waits, and tokio's paused timers fire on whole milliseconds (at
/// most 1 ms late per wait).
fn assert_fails_after(took: Duration, err: &SparkError, stats: &StreamStats) {
    assert_eq!(stats.policy_retries, 15, "{stats:?}");
    assert_eq!(stats.stalls, 0, "{stats:?}");
    assert_eq!(
        err.server_error().map(|e| e.code()),
        Some(tonic::Code::Unavailable),
        "{err}"
    );
    eprintln!("killed for good: a clear error {took:?} after the kill: {err}");
}

#[tokio::test(start_paused = true)]
async fn killed_for_good_fails_after_exactly_the_policys_waits() {
    // PySpark's DefaultPolicy without its jitter: 50 ms x4 up to 60 s, 15 waits.
    let policy = RetryPolicy::pyspark_builder()
        .jitter_ms(0.0)
        .build()
        .unwrap();
    let (took, err, stats) = killed_mid_query(Retrying::pyspark_with(vec![policy])).await;
    assert_fails_after(took, &err, &stats);
    let waits = Duration::from_millis(608_250);
    assert!(
        took >= waits && took <= waits + Duration::from_millis(15),
        "{took:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn killed_for_good_fails_after_the_default_policys_waits() {
    // With its jitter (up to 500 ms on each of the 12 waits from 2 s up).
    let (took, err, stats) = killed_mid_query(Retrying::pyspark().with_seed(7)).await;
    assert_fails_after(took, &err, &stats);
    let (least, most) = (
        Duration::from_millis(608_250),
        Duration::from_millis(614_265),
    );
    assert!(took >= least && took <= most, "{took:?}");
}
