//! Per-attempt timeouts, the overall deadline, throttling, and bodies over
//! the replay cap, against the recording echo server.

use std::time::Duration;

use futures_util::future::BoxFuture;
use tonic::{Code, Request, Status};
use tonic_retry::layer::{MethodConfig, RetryLayer, RetryThrottle};
use tonic_retry::policy::RetryPolicy;
use tonic_retry::retrying::{RecordingSleeper, Retrying};
use tonic_types::{ErrorDetails, StatusExt};

use crate::support::recorded::{Recorded, ready, unavailable_n};
use crate::support::{client, exact, say};

/// A layer with `Say` idempotent over `retrying`.
fn layer(retrying: Retrying) -> RetryLayer {
    RetryLayer::new(retrying).method("/echo.Echo/Say", MethodConfig::idempotent())
}

fn slow(first_n: u32, d: Duration) -> impl Fn(u32) -> BoxFuture<'static, Result<(), Status>> {
    move |i| {
        Box::pin(async move {
            if i < first_n {
                tokio::time::sleep(d).await;
            }
            Ok(())
        })
    }
}

#[tokio::test]
async fn per_attempt_timeout_retries_slow_attempt() {
    let server = Recorded::new(slow(1, Duration::from_secs(5)));
    let addr = server.spawn().await;
    let sleeper = RecordingSleeper::new();
    let layer = layer(exact(&sleeper))
        .per_attempt_timeout(Duration::from_millis(100))
        .default_deadline(Duration::from_secs(10));
    let mut c = client(addr, layer);
    c.say(say("s")).await.unwrap();
    // A second attempt: the first (answered only after 5 s) was timed out.
    assert_eq!(server.say_calls(), 2);
    // Each attempt's grpc-timeout is min(per-attempt, remaining) = 100 ms.
    for t in server.timeouts.lock().unwrap().iter() {
        let t = t.as_deref().unwrap();
        let us: u64 = t.trim_end_matches('u').parse().unwrap();
        assert!(us <= 100_000 && us > 50_000, "{t}");
    }
}

/// On paused tokio time (after one answered call has opened the
/// connection): attempts at 0, 100 and 200 ms (100 ms each) and at 300 ms
/// (the 50 ms left), then the 350 ms deadline. Exactly four, every run.
#[tokio::test]
async fn overall_deadline_stops_the_loop() {
    // The first call is answered at once (it opens the connection); every
    // later one would take 5 s.
    let server = Recorded::new(|i| -> BoxFuture<'static, Result<(), Status>> {
        Box::pin(async move {
            if i > 0 {
                tokio::time::sleep(Duration::from_secs(5)).await;
            }
            Ok(())
        })
    });
    let addr = server.spawn().await;
    // Waits of 1 ms, so the deadline (not the wait check) ends the loop.
    // A budget the deadline ends first.
    let policy = RetryPolicy::builder()
        .max_retries(Some(15))
        .initial_backoff(Duration::from_millis(1))
        .backoff_multiplier(1.0)
        .build()
        .unwrap();
    let sleeper = RecordingSleeper::new();
    let layer = layer(Retrying::new(vec![policy]).with_sleeper(sleeper.clone()))
        .per_attempt_timeout(Duration::from_millis(100))
        .default_deadline(Duration::from_millis(350));
    let stats = layer.stats_handle();
    let mut c = client(addr, layer);
    c.say(say("open the connection")).await.unwrap();
    tokio::time::pause();
    let started = tokio::time::Instant::now();
    let err = c.say(say("s")).await.unwrap_err();
    assert_eq!(err.code(), Code::DeadlineExceeded, "{err:?}");
    assert!(err.message().contains("deadline of 350 ms"), "{err:?}");
    assert!(started.elapsed() >= Duration::from_millis(350));
    assert_eq!(stats.snapshot().attempts, 1 + 4);
    assert_eq!(server.say_calls(), 1 + 4);
    assert_eq!(sleeper.sleeps().len(), 3, "a 1 ms wait before each retry");
}

#[tokio::test]
async fn request_grpc_timeout_is_the_overall_deadline() {
    let server = Recorded::new(slow(u32::MAX, Duration::from_secs(5)));
    let addr = server.spawn().await;
    let sleeper = RecordingSleeper::new();
    let mut c = client(addr, layer(exact(&sleeper)));
    let mut req = Request::new(say("s"));
    req.set_timeout(Duration::from_millis(150));
    let err = c.say(req).await.unwrap_err();
    // The server answers OK after 5 s: only the 150 ms deadline gives this.
    assert_eq!(err.code(), Code::DeadlineExceeded, "{err:?}");
    assert_eq!(server.say_calls(), 1);
}

#[tokio::test]
async fn no_attempt_scheduled_past_the_deadline() {
    let server = Recorded::new(|_| {
        ready(Err(Status::with_error_details(
            Code::Unavailable,
            "come back later",
            ErrorDetails::with_retry_info(Some(Duration::from_secs(10))),
        )))
    });
    let addr = server.spawn().await;
    let sleeper = RecordingSleeper::new();
    let layer = layer(exact(&sleeper)).default_deadline(Duration::from_secs(1));
    let err = client(addr, layer).say(say("s")).await.unwrap_err();
    assert_eq!(err.code(), Code::Unavailable);
    assert_eq!(err.message(), "come back later");
    assert_eq!(server.say_calls(), 1);
    assert!(sleeper.sleeps().is_empty());
}

#[tokio::test]
async fn throttling_under_a_burst() {
    async fn burst(throttle: bool) -> (u32, u64) {
        let server = Recorded::new(unavailable_n(u32::MAX));
        let addr = server.spawn().await;
        let policy = RetryPolicy::builder().max_retries(Some(3)).build().unwrap();
        let mut layer = layer(Retrying::new(vec![policy]).with_sleeper(RecordingSleeper::new()));
        if throttle {
            layer = layer.throttle(RetryThrottle::new(10, 0.1).unwrap());
        }
        let stats = layer.stats_handle();
        let c = client(addr, layer);
        let calls: Vec<_> = (0..40)
            .map(|i| {
                let mut c = c.clone();
                tokio::spawn(async move { c.say(say(&i.to_string())).await })
            })
            .collect();
        for h in calls {
            assert_eq!(h.await.unwrap().unwrap_err().code(), Code::Unavailable);
        }
        (server.say_calls(), stats.snapshot().throttled)
    }
    let (unthrottled_calls, none) = burst(false).await;
    assert_eq!((unthrottled_calls, none), (160, 0));
    let (calls, throttled) = burst(true).await;
    assert!(throttled > 0);
    assert!(calls < 60, "{calls}");
}

#[tokio::test]
async fn body_over_the_cap_passes_through() {
    let server = Recorded::new(unavailable_n(1));
    let addr = server.spawn().await;
    let sleeper = RecordingSleeper::new();
    let layer = layer(exact(&sleeper)).max_request_buffer(1024);
    let stats = layer.stats_handle();
    let mut c = client(addr, layer);
    let big: String = (0..200_000)
        .map(|i| char::from(b'a' + (i % 26) as u8))
        .collect();
    // Over the cap: sent once, its UNAVAILABLE not retried.
    let err = c.say(say(&big)).await.unwrap_err();
    assert_eq!(err.code(), Code::Unavailable);
    assert_eq!(server.say_calls(), 1);
    // The next one succeeds, byte for byte.
    let res = c.say(say(&big)).await.unwrap().into_inner();
    assert_eq!(res.message, big);
    assert_eq!(stats.snapshot().passthrough_too_large, 2);
    assert_eq!(stats.snapshot().retries, 0);
    // A small one is still retried.
    c.say(say("small")).await.unwrap();
}
