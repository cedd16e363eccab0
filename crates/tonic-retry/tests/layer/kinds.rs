//! Declared response kinds, non-retryable codes, the A6 service config and
//! huge deadlines, against the recording echo server. (A stream under the
//! default kind: `streams.rs`.)

use std::time::Duration;

use tonic::{Code, Request, Status};
use tonic_retry::layer::{MethodConfig, ResponseKind, RetryLayer, ServiceConfig};
use tonic_retry::retrying::RecordingSleeper;

use crate::support::recorded::{Recorded, ready, unavailable_n};
use crate::support::{client, exact, hello, reply, say};

const SAY: &str = "/echo.Echo/Say";
const REPEAT: &str = "/echo.Echo/Repeat";

/// A stream declared `ServerStreaming` (the kind a user may still name):
/// retried before its first message, not after.
#[tokio::test]
async fn server_stream_retried_before_first_message_only() {
    let server = Recorded::new(unavailable_n(0)).with_repeat(|i| match i {
        0 => vec![Err(Status::unavailable("not yet"))],
        _ => vec![
            Ok(reply("r1")),
            Ok(reply("r2")),
            Err(Status::unavailable("mid-stream")),
        ],
    });
    let addr = server.spawn().await;
    let sleeper = RecordingSleeper::new();
    let layer = RetryLayer::new(exact(&sleeper)).method(
        REPEAT,
        MethodConfig::idempotent().with_kind(ResponseKind::ServerStreaming),
    );
    let mut stream = client(addr, layer)
        .repeat(hello(0))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(stream.message().await.unwrap().unwrap().message, "r1");
    assert_eq!(stream.message().await.unwrap().unwrap().message, "r2");
    let err = stream.message().await.unwrap_err();
    assert_eq!(err.code(), Code::Unavailable);
    assert_eq!(err.message(), "mid-stream");
    // Retried before the first message, not after.
    assert_eq!(server.repeat_calls(), 2);
    assert_eq!(sleeper.sleeps_ms(), vec![100]);
}

/// Under the default `Auto` kind a unary method declared idempotent is
/// retried; a method not declared is not replayed once the server saw it.
#[tokio::test]
async fn auto_kind_detects_unary_and_an_undeclared_method_is_not_replayed() {
    let server =
        Recorded::new(unavailable_n(2)).with_repeat(|_| vec![Err(Status::unavailable("x"))]);
    let addr = server.spawn().await;
    let sleeper = RecordingSleeper::new();
    let layer = RetryLayer::new(exact(&sleeper)).method(SAY, MethodConfig::idempotent());
    let mut c = client(addr, layer);
    c.say(say("s")).await.unwrap();
    assert_eq!(server.say_calls(), 3);
    let mut s = c.repeat(hello(1)).await.unwrap().into_inner();
    assert_eq!(s.message().await.unwrap_err().code(), Code::Unavailable);
    assert_eq!(server.repeat_calls(), 1);
}

#[tokio::test]
async fn unimplemented_is_not_retried_and_tracing_runs() {
    let server = Recorded::new(|i| {
        ready(match i {
            0 => Err(Status::unimplemented("no such method")),
            1 => Err(Status::unavailable("restarting")),
            _ => Ok(()),
        })
    });
    let addr = server.spawn().await;
    let sleeper = RecordingSleeper::new();
    let layer = RetryLayer::new(exact(&sleeper)).method(SAY, MethodConfig::idempotent());
    let stats = layer.stats_handle();
    let mut c = client(addr, layer);
    let err = c.say(say("s")).await.unwrap_err();
    assert_eq!(err.code(), Code::Unimplemented);
    c.say(say("s")).await.unwrap();
    assert_eq!(stats.snapshot().retries, 1);
    assert_eq!(sleeper.sleeps_ms(), vec![100]);
}

/// The generic constructor follows the service config (gRFC A6): only the
/// codes it names, at most `maxAttempts` attempts, A6's backoff (±20 %),
/// and nothing for the methods it does not name.
#[tokio::test]
async fn service_config_layer_follows_a6() {
    let config = ServiceConfig::from_json(
        r#"{"methodConfig": [{
            "name": [{"service": "echo.Echo", "method": "Say"}],
            "retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.1s", "maxBackoff": "1s",
                            "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}
        }]}"#,
    )
    .unwrap();
    // One Say call against `server`: its status, the server's calls, the waits.
    let run = |server: Recorded| {
        let config = &config;
        async move {
            let addr = server.spawn().await;
            let sleeper = RecordingSleeper::new();
            let layer = RetryLayer::from_service_config(config, crate::support::base(&sleeper));
            let err = client(addr, layer).say(say("s")).await.unwrap_err();
            (err.code(), server.say_calls(), sleeper.sleeps_ms())
        }
    };
    // Listed code: three attempts in all, then the status.
    let (code, calls, waits) = run(Recorded::new(unavailable_n(u32::MAX))).await;
    assert_eq!((code, calls, waits.len()), (Code::Unavailable, 3, 2));
    assert!(
        (80..120).contains(&waits[0]) && (160..240).contains(&waits[1]),
        "{waits:?}"
    );
    // A code the config does not list: one attempt.
    let aborted = Recorded::new(|_| ready(Err(Status::aborted("conflict"))));
    assert_eq!(run(aborted).await, (Code::Aborted, 1, vec![]));
    // A method the config does not name: not retried.
    let server = Recorded::new(unavailable_n(u32::MAX))
        .with_repeat(|_| vec![Err(Status::unavailable("restarting"))]);
    let addr = server.spawn().await;
    let sleeper = RecordingSleeper::new();
    let layer = RetryLayer::from_service_config(&config, crate::support::base(&sleeper));
    let mut s = client(addr, layer)
        .repeat(hello(1))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(s.message().await.unwrap_err().code(), Code::Unavailable);
    assert_eq!(server.repeat_calls(), 1);
    assert!(sleeper.sleeps().is_empty());
}

/// A deadline or attempt timeout too large for the clock means none: no
/// overflow, and the retries happen as without it.
#[tokio::test]
async fn huge_deadlines_do_not_overflow() {
    let server = Recorded::new(unavailable_n(2));
    let addr = server.spawn().await;
    let sleeper = RecordingSleeper::new();
    let layer = RetryLayer::new(exact(&sleeper))
        .method(SAY, MethodConfig::idempotent())
        .default_deadline(Duration::MAX)
        .per_attempt_timeout(Duration::MAX);
    let mut c = client(addr, layer);
    let mut req = Request::new(say("s"));
    req.set_timeout(Duration::from_secs(86_400));
    c.say(req).await.unwrap();
    assert_eq!(server.say_calls(), 3);
    assert_eq!(sleeper.sleeps_ms(), vec![100, 200]);
}
