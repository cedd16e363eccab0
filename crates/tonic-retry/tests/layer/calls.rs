//! The layer against the scripted echo server: retries (unary and server
//! streams), hedging, throttling and server pushback, each through a plain
//! generated tonic client. Waits go through a recording sleeper, so
//! nothing here sleeps in real time and every wait is checked exactly.

use tonic::metadata::{MetadataMap, MetadataValue};
use tonic::{Code, Status};
use tonic_retry::layer::{MethodConfig, RetryLayer};
use tonic_retry::retrying::{ManualClock, RecordingSleeper};
use tonic_retry_echo::Scripted;

use crate::support::{RETRY_ECHO as RETRY_SAY, base, client, config, hello};

#[tokio::test]
async fn unary_retried_until_it_succeeds() {
    let server = Scripted::failing_first(2, Status::unavailable("restarting"));
    let addr = server.clone().spawn().await.unwrap();
    let sleeper = RecordingSleeper::new();
    let layer = RetryLayer::from_service_config(&config(RETRY_SAY), base(&sleeper));
    let stats = layer.stats_handle();
    let reply = client(addr, layer).say(hello(0)).await.unwrap();
    assert_eq!(reply.into_inner().message, "hello");
    assert_eq!(server.calls(), 3);
    assert_eq!(stats.snapshot().retries, 2);
    // A6: 100 ms then 200 ms, each times a jitter sample of [0.8, 1.2).
    let waits = sleeper.sleeps_ms();
    assert_eq!(waits.len(), 2);
    assert!(
        (80..120).contains(&waits[0]) && (160..240).contains(&waits[1]),
        "{waits:?}"
    );
}

#[tokio::test]
async fn a_code_the_config_does_not_list_is_not_retried() {
    let server = Scripted::failing_first(1, Status::internal("bug"));
    let addr = server.clone().spawn().await.unwrap();
    let sleeper = RecordingSleeper::new();
    let layer = RetryLayer::from_service_config(&config(RETRY_SAY), base(&sleeper));
    let err = client(addr, layer).say(hello(0)).await.unwrap_err();
    assert_eq!((err.code(), err.message()), (Code::Internal, "bug"));
    assert_eq!(server.calls(), 1);
    assert!(sleeper.sleeps().is_empty());
}

#[tokio::test]
async fn server_stream_retried_before_its_first_message() {
    let server = Scripted::failing_first(1, Status::unavailable("restarting"));
    let addr = server.clone().spawn().await.unwrap();
    let sleeper = RecordingSleeper::new();
    let layer = RetryLayer::from_service_config(&config(RETRY_SAY), base(&sleeper));
    let mut stream = client(addr, layer)
        .repeat(hello(3))
        .await
        .unwrap()
        .into_inner();
    let mut got = Vec::new();
    while let Some(reply) = stream.message().await.unwrap() {
        got.push(reply.message);
    }
    assert_eq!(got, ["hello"; 3]);
    assert_eq!(server.calls(), 2);
}

#[tokio::test]
async fn a_hedge_answers_when_the_first_attempt_hangs() {
    // Call 0 never answers; call 1 (the hedge) does.
    let server = Scripted::new(|n| async move {
        if n == 0 {
            std::future::pending::<()>().await;
        }
        Ok(())
    });
    let addr = server.clone().spawn().await.unwrap();
    let sleeper = RecordingSleeper::new();
    let hedged = config(
        r#"{"methodConfig": [{"name": [{"service": "echo.Echo", "method": "Say"}],
            "hedgingPolicy": {"maxAttempts": 2, "hedgingDelay": "0.05s"}}]}"#,
    );
    // A clock that stands still: the hedge timer is exactly the delay.
    let retrying = base(&sleeper).with_clock(ManualClock::new());
    let layer = RetryLayer::from_service_config(&hedged, retrying);
    let stats = layer.stats_handle();
    let reply = client(addr, layer).say(hello(0)).await.unwrap();
    assert_eq!(reply.into_inner().message, "hello");
    assert_eq!(server.calls(), 2);
    assert_eq!(
        (stats.snapshot().hedges_sent, stats.snapshot().hedges_won),
        (1, 1)
    );
    assert_eq!(sleeper.sleeps_ms(), [50], "one hedging delay");
}

#[tokio::test]
async fn throttling_stops_retries_while_the_server_keeps_failing() {
    let server = Scripted::failing_first(u32::MAX, Status::unavailable("overloaded"));
    let addr = server.clone().spawn().await.unwrap();
    let sleeper = RecordingSleeper::new();
    let throttled = config(
        r#"{"methodConfig": [{"name": [{"service": "echo.Echo"}],
            "retryPolicy": {"maxAttempts": 5, "initialBackoff": "0.1s", "maxBackoff": "1s",
                            "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}}],
           "retryThrottling": {"maxTokens": 4, "tokenRatio": 0.1}}"#,
    );
    let layer = RetryLayer::from_service_config(&throttled, base(&sleeper));
    let stats = layer.stats_handle();
    let mut client = client(addr, layer);
    // 4 tokens: the first failure leaves 3 (> 4 / 2, retried), the second
    // 2 (not above half: throttled), although 5 attempts were allowed.
    let err = client.say(hello(0)).await.unwrap_err();
    assert_eq!(err.code(), Code::Unavailable);
    assert_eq!((server.calls(), stats.snapshot().throttled), (2, 1));
    // The bucket is shared: the next call is not retried at all.
    client.say(hello(0)).await.unwrap_err();
    assert_eq!((server.calls(), stats.snapshot().throttled), (3, 2));
}

fn with_pushback(value: &'static str) -> Status {
    let mut md = MetadataMap::new();
    md.insert("grpc-retry-pushback-ms", MetadataValue::from_static(value));
    Status::with_metadata(Code::Unavailable, "busy", md)
}

/// One pushback then success, through the default policy; the wait taken.
async fn pushback_wait(value: &'static str) -> Vec<u64> {
    let pushback = with_pushback(value);
    let server = Scripted::new(move |n| {
        let result = if n == 0 {
            Err(pushback.clone())
        } else {
            Ok(())
        };
        std::future::ready(result)
    });
    let addr = server.clone().spawn().await.unwrap();
    let sleeper = RecordingSleeper::new();
    let layer =
        RetryLayer::new(base(&sleeper)).method("/echo.Echo/Say", MethodConfig::idempotent());
    client(addr, layer).say(hello(0)).await.unwrap();
    assert_eq!(server.calls(), 2);
    sleeper.sleeps_ms()
}

#[tokio::test]
async fn pushback_is_honoured_exactly_below_the_cap() {
    assert_eq!(pushback_wait("1234").await, [1234]);
    assert_eq!(pushback_wait("600000").await, [600_000]);
}

/// `grpc-retry-pushback-ms` is capped like RetryInfo, by the policy's
/// `max_server_retry_delay` (10 minutes by default): a server cannot park a
/// client for 292 million years.
#[tokio::test]
async fn pushback_past_the_cap_waits_the_cap() {
    assert_eq!(pushback_wait("600001").await, [600_000]);
    assert_eq!(pushback_wait("9223372036854775807").await, [600_000]);
}

#[tokio::test]
async fn a_negative_pushback_stops_retries() {
    let server = Scripted::failing_first(1, with_pushback("-1"));
    let addr = server.clone().spawn().await.unwrap();
    let sleeper = RecordingSleeper::new();
    let layer =
        RetryLayer::new(base(&sleeper)).method("/echo.Echo/Say", MethodConfig::idempotent());
    let err = client(addr, layer).say(hello(0)).await.unwrap_err();
    assert_eq!(err.code(), Code::Unavailable);
    assert_eq!(server.calls(), 1);
}

/// A raw HTTP/2 peer that answers every request as a load balancer with no
/// backend does: HTTP 503, an HTML body, no `grpc-status`. Counts requests.
async fn proxy_answering_503() -> (
    std::net::SocketAddr,
    std::sync::Arc<std::sync::atomic::AtomicU32>,
) {
    use std::sync::atomic::Ordering;
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let requests = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    let seen = requests.clone();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let seen = seen.clone();
            tokio::spawn(async move {
                let Ok(mut conn) = h2::server::handshake(tcp).await else {
                    return;
                };
                while let Some(Ok((_, mut respond))) = conn.accept().await {
                    seen.fetch_add(1, Ordering::SeqCst);
                    let head = http::Response::builder()
                        .status(503)
                        .header("content-type", "text/html")
                        .body(())
                        .unwrap();
                    if let Ok(mut body) = respond.send_response(head, false) {
                        let html = "<html><body>503 Service Temporarily Unavailable</body></html>";
                        let _ = body.send_data(bytes::Bytes::from_static(html.as_bytes()), true);
                    }
                }
            });
        }
    });
    (addr, requests)
}

#[tokio::test]
async fn an_http_503_without_grpc_status_is_unavailable_and_retried() {
    let (addr, requests) = proxy_answering_503().await;
    let sleeper = RecordingSleeper::new();
    let layer = RetryLayer::from_service_config(&config(RETRY_SAY), base(&sleeper));
    let err = client(addr, layer).say(hello(0)).await.unwrap_err();
    // gRPC's HTTP-to-gRPC mapping: 503 is UNAVAILABLE, which the config retries
    // (tonic alone reads the HTML as frames and reports INTERNAL).
    assert_eq!(err.code(), Code::Unavailable, "{err:?}");
    assert!(
        err.message().contains("HTTP 503 without grpc-status"),
        "{err:?}"
    );
    assert_eq!(requests.load(std::sync::atomic::Ordering::SeqCst), 5);
    assert_eq!(sleeper.sleeps_ms().len(), 4);
}

#[tokio::test]
async fn a_channel_from_grpc_channel_maps_an_http_error_too() {
    let (addr, _) = proxy_answering_503().await;
    crate::support::capture::init();
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect_lazy();
    let mut plain =
        tonic_retry_echo::EchoClient::new(tonic_retry::transport::grpc_channel(channel));
    let err = plain.say(hello(0)).await.unwrap_err();
    assert_eq!(err.code(), Code::Unavailable, "{err:?}");
}
