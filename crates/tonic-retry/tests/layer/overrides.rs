//! Per-call overrides in the request's extensions: no retries, fewer
//! attempts, a call's own deadline, and the call's attempts read back.

use std::time::Duration;

use tonic::{Code, Status};
use tonic_retry::layer::{CallOptions, CallStats, CallStatsHandle, MethodConfig, RetryLayer};
use tonic_retry::retrying::RecordingSleeper;
use tonic_retry_echo::{EchoRequest, Scripted};

use crate::support::{Gated, RETRY_ECHO, base, client, config, hello};

fn with(options: CallOptions) -> tonic::Request<EchoRequest> {
    let mut request = tonic::Request::new(hello(0));
    request.extensions_mut().insert(options);
    request
}

#[tokio::test]
async fn no_retries_sends_the_call_once() {
    let server = Scripted::failing_first(1, Status::unavailable("restarting"));
    let addr = server.clone().spawn().await.unwrap();
    let sleeper = RecordingSleeper::new();
    let layer = RetryLayer::from_service_config(&config(RETRY_ECHO), base(&sleeper));
    let mut client = client(addr, layer);
    let stats = CallStatsHandle::default();
    let err = client
        .say(with(CallOptions::new().no_retries().stats(stats.clone())))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unavailable);
    assert_eq!(server.calls(), 1);
    assert_eq!(stats.snapshot().attempts, 1);
    // The next call, without options, is retried as the config says.
    client.say(hello(0)).await.unwrap();
    assert_eq!(server.calls(), 2, "call 1 succeeds");
    assert!(sleeper.sleeps().is_empty());
}

#[tokio::test]
async fn max_attempts_caps_the_call_below_the_policy() {
    let server = Scripted::failing_first(u32::MAX, Status::unavailable("down"));
    let addr = server.clone().spawn().await.unwrap();
    let sleeper = RecordingSleeper::new();
    let layer = RetryLayer::from_service_config(&config(RETRY_ECHO), base(&sleeper));
    let totals = layer.stats_handle();
    let stats = CallStatsHandle::default();
    let options = CallOptions::new().max_attempts(2).stats(stats.clone());
    let err = client(addr, layer).say(with(options)).await.unwrap_err();
    assert_eq!(err.code(), Code::Unavailable);
    assert_eq!(server.calls(), 2, "not the config's 5");
    let waited = sleeper.sleeps()[0];
    let mut want = CallStats::default();
    want.attempts = 2;
    want.retries = 1;
    want.waited = waited;
    assert_eq!(stats.snapshot(), want);
    assert_eq!(totals.snapshot().exhausted, 1, "counted as a spent budget");
}

#[tokio::test]
async fn call_stats_count_every_attempt_and_the_waits() {
    let server = Scripted::failing_first(2, Status::unavailable("restarting"));
    let addr = server.clone().spawn().await.unwrap();
    let sleeper = RecordingSleeper::new();
    let layer = RetryLayer::from_service_config(&config(RETRY_ECHO), base(&sleeper));
    let stats = CallStatsHandle::default();
    let reply = client(addr, layer)
        .say(with(CallOptions::new().stats(stats.clone())))
        .await
        .unwrap();
    assert_eq!(reply.into_inner().message, "hello");
    let s = stats.snapshot();
    assert_eq!((s.attempts, s.retries), (3, 2));
    assert_eq!(s.waited, sleeper.sleeps().iter().sum::<Duration>());
}

/// Parses a `grpc-timeout` header (`1*8DIGIT unit`).
fn timeout(header: &str) -> Duration {
    let (n, unit) = header.split_at(header.len() - 1);
    let n: u64 = n.parse().unwrap();
    match unit {
        "u" => Duration::from_micros(n),
        "m" => Duration::from_millis(n),
        "S" => Duration::from_secs(n),
        "M" => Duration::from_secs(n * 60),
        "H" => Duration::from_secs(n * 3600),
        other => panic!("unit {other}"),
    }
}

/// The call's own deadline replaces the layer's for that call, longer or
/// shorter: each attempt's `grpc-timeout` is the time left of it.
#[tokio::test]
async fn a_calls_own_deadline_replaces_the_layers() {
    let server = Gated::default();
    let addr = server.spawn().await;
    let layer = RetryLayer::new(base(&RecordingSleeper::new()))
        .default_method(MethodConfig::idempotent())
        .default_deadline(Duration::from_secs(10));
    let mut client = client(addr, layer);
    client.say(hello(0)).await.unwrap();
    client
        .say(with(CallOptions::new().deadline(Duration::from_secs(3600))))
        .await
        .unwrap();
    client
        .say(with(CallOptions::new().deadline(Duration::from_secs(2))))
        .await
        .unwrap();
    let sent: Vec<Duration> = server
        .timeouts()
        .iter()
        .map(|t| timeout(t.as_deref().expect("a grpc-timeout")))
        .collect();
    let s = Duration::from_secs;
    assert!(sent[0] > s(9) && sent[0] <= s(10), "{sent:?}");
    assert!(sent[1] > s(3599) && sent[1] <= s(3600), "{sent:?}");
    assert!(sent[2] > s(1) && sent[2] <= s(2), "{sent:?}");
}
