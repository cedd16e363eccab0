//! What the retry loop logs: PySpark logs one `[RETRIES_EXCEEDED]` warning
//! when it gives up, and so do we.
//!
//! The events are captured through one global subscriber that every test here
//! installs before it runs the loop (`support`'s docs say why a scoped
//! subscriber per test would be flaky).

mod support;

use std::sync::atomic::{AtomicU32, Ordering};

use spark_connect_retry::retrying::{RETRIES_EXCEEDED, RecordingSleeper, Retrying};
use tonic::Status;

/// Runs the default loop against a server that is always UNAVAILABLE; returns
/// the attempts, the sleeps and the WARN messages of the crate.
async fn give_up_forever(retrying: Retrying) -> (u32, usize, Vec<String>) {
    support::init();
    let sleeper = RecordingSleeper::new();
    let retrying = retrying.with_sleeper(sleeper.clone()).with_seed(1);
    let attempts = AtomicU32::new(0);
    let (result, events) = support::capture(retrying.call(|| {
        attempts.fetch_add(1, Ordering::SeqCst);
        async { Err::<(), _>(Status::unavailable("down")) }
    }))
    .await;
    assert_eq!(result.unwrap_err().message(), "down");
    let warnings = events
        .into_iter()
        .filter(|e| e.level == tracing::Level::WARN)
        .map(|e| e.message)
        .collect();
    (
        attempts.load(Ordering::SeqCst),
        sleeper.sleeps_ms().len(),
        warnings,
    )
}

#[tokio::test]
async fn give_up_warns_once() {
    let (attempts, sleeps, warnings) = give_up_forever(Retrying::default()).await;
    assert_eq!((attempts, sleeps), (16, 15));
    assert_eq!(warnings, vec![RETRIES_EXCEEDED.to_owned()]);
}

/// The same loop run twice warns twice: one warning per call that gives up,
/// not one per process (the capture does not lose the second).
#[tokio::test]
async fn each_call_that_gives_up_warns_once() {
    for _ in 0..2 {
        let (_, _, warnings) = give_up_forever(Retrying::default()).await;
        assert_eq!(warnings, vec![RETRIES_EXCEEDED.to_owned()]);
    }
}
