//! What the layer logs: exactly one event per attempt, numbered from 1 as
//! the retry loop numbers them, with the wait actually slept; the attempt
//! that spends the budget logs the give-up warning instead, naming the
//! method and the server itself (the call's span is at debug level).

use tonic::metadata::{MetadataMap, MetadataValue};
use tonic::{Code, Status};
use tonic_retry::layer::RetryLayer;
use tonic_retry::retrying::RecordingSleeper;
use tonic_retry_echo::Scripted;

use crate::support::capture::{Event, capture};
use crate::support::{RETRY_ECHO, base, client, config, hello};

/// `name=value` of each of `names` in `event`, to compare in one assertion.
fn fields(event: &Event, names: &[&str]) -> Vec<String> {
    names
        .iter()
        .map(|n| format!("{n}={}", event.get(n).unwrap_or("-")))
        .collect()
}

fn attempts(events: &[Event]) -> Vec<&Event> {
    events
        .iter()
        .filter(|e| e.message == "grpc attempt")
        .collect()
}

#[tokio::test]
async fn one_event_per_attempt_with_the_wait_slept() {
    let server = Scripted::failing_first(2, Status::unavailable("restarting"));
    let addr = server.clone().spawn().await.unwrap();
    let sleeper = RecordingSleeper::new();
    let layer = RetryLayer::from_service_config(&config(RETRY_ECHO), base(&sleeper));
    let (result, events) = capture(client(addr, layer).say(hello(0))).await;
    result.unwrap();
    let waits = sleeper.sleeps_ms();
    let got: Vec<Vec<String>> = attempts(&events)
        .iter()
        .map(|e| {
            fields(
                e,
                &[
                    "rpc.service",
                    "rpc.method",
                    "attempt",
                    "rpc.grpc.status_code",
                    "wait_ms",
                    "reason",
                ],
            )
        })
        .collect();
    let want = |attempt: u32, code: i32, wait: String, reason: &str| {
        vec![
            "rpc.service=echo.Echo".to_owned(),
            "rpc.method=Say".to_owned(),
            format!("attempt={attempt}"),
            format!("rpc.grpc.status_code={code}"),
            format!("wait_ms={wait}"),
            format!("reason={reason}"),
        ]
    };
    assert_eq!(
        got,
        vec![
            want(1, 14, waits[0].to_string(), "policy"),
            want(2, 14, waits[1].to_string(), "policy"),
            want(3, 0, "-".into(), "done"),
        ]
    );
    // The loop's own `retrying` event is not logged a second time.
    assert!(
        events.iter().all(|e| e.message != "retrying"),
        "{events:#?}"
    );
    assert_eq!(events.len(), 3, "{events:#?}");
}

#[tokio::test]
async fn a_pushback_is_the_wait_logged() {
    let mut md = MetadataMap::new();
    md.insert("grpc-retry-pushback-ms", MetadataValue::from_static("77"));
    let server = Scripted::failing_first(1, Status::with_metadata(Code::Unavailable, "busy", md));
    let addr = server.clone().spawn().await.unwrap();
    let sleeper = RecordingSleeper::new();
    let layer = RetryLayer::from_service_config(&config(RETRY_ECHO), base(&sleeper));
    let (result, events) = capture(client(addr, layer).say(hello(0))).await;
    result.unwrap();
    assert_eq!(sleeper.sleeps_ms(), [77]);
    let first = attempts(&events)[0];
    assert_eq!(
        fields(first, &["attempt", "wait_ms", "reason"]),
        ["attempt=1", "wait_ms=77", "reason=pushback"]
    );
}

#[tokio::test]
async fn the_give_up_warning_names_the_call_and_the_server() {
    let server = Scripted::failing_first(u32::MAX, Status::unavailable("down"));
    let addr = server.clone().spawn().await.unwrap();
    let sleeper = RecordingSleeper::new();
    let json = RETRY_ECHO.replace("\"maxAttempts\": 5", "\"maxAttempts\": 3");
    let layer = RetryLayer::from_service_config(&config(&json), base(&sleeper))
        .target(format!("echo.test:{}", addr.port()));
    let (result, events) = capture(client(addr, layer).say(hello(0))).await;
    assert_eq!(result.unwrap_err().code(), Code::Unavailable);
    assert_eq!(attempts(&events).len(), 2, "{events:#?}");
    let warnings: Vec<&Event> = events
        .iter()
        .filter(|e| e.level == tracing::Level::WARN)
        .collect();
    assert_eq!(warnings.len(), 1, "{events:#?}");
    let w = warnings[0];
    assert_eq!(w.message, "retries exhausted");
    let waited: u64 = sleeper.sleeps_ms().iter().sum();
    assert_eq!(
        fields(
            w,
            &[
                "rpc.service",
                "rpc.method",
                "server.address",
                "attempt",
                "attempts",
                "rpc.grpc.status_code",
                "waited_ms",
                "reason",
            ]
        ),
        [
            "rpc.service=echo.Echo".to_owned(),
            "rpc.method=Say".to_owned(),
            format!("server.address=echo.test:{}", addr.port()),
            "attempt=3".to_owned(),
            "attempts=3".to_owned(),
            "rpc.grpc.status_code=14".to_owned(),
            format!("waited_ms={waited}"),
            "reason=exhausted".to_owned(),
        ]
    );
}
