//! What the retry loop logs when it gives up: one warning per call that
//! gives up, worded "retries exhausted" unless the loop names its
//! own (as the Spark crate does with PySpark's wording).

use std::sync::atomic::{AtomicU32, Ordering};

use tonic::Status;
use tonic_retry::retrying::{RecordingSleeper, Retrying};

use crate::support::capture::capture;

/// Runs `retrying` against a call that is always UNAVAILABLE; returns the
/// attempts, the sleeps and the WARN messages of the crate.
async fn give_up_forever(retrying: Retrying) -> (u32, usize, Vec<String>) {
    let sleeper = RecordingSleeper::new();
    let retrying = retrying.with_sleeper(sleeper.clone()).with_seed(1);
    let attempts = AtomicU32::new(0);
    let (result, events) = capture(retrying.call(|| {
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

/// The gRPC default: 5 attempts, 4 waits, then one warning.
#[tokio::test]
async fn give_up_warns_once() {
    let (attempts, sleeps, warnings) = give_up_forever(Retrying::default()).await;
    assert_eq!((attempts, sleeps), (5, 4));
    assert_eq!(warnings, ["retries exhausted"]);
}

/// The same loop run twice warns twice: one warning per call that gives up,
/// not one per process (the capture does not lose the second).
#[tokio::test]
async fn each_call_that_gives_up_warns_once() {
    for _ in 0..2 {
        let (_, _, warnings) = give_up_forever(Retrying::default()).await;
        assert_eq!(warnings, ["retries exhausted"]);
    }
}

/// A loop with its own wording warns with it, and only with it.
#[tokio::test]
async fn the_give_up_message_is_the_loops_own() {
    let retrying = Retrying::default().with_give_up_message("[GAVE_UP] no more tries");
    let (_, _, warnings) = give_up_forever(retrying).await;
    assert_eq!(warnings, ["[GAVE_UP] no more tries"]);
}
