//! gRFC A66 and A96 metrics (feature `otel`), read back from the SDK's
//! in-memory exporter after scripted faults on loopback servers: every
//! instrument holds exactly the expected values. Waits go through a
//! recording sleeper, so the retry delay is the sum of the policy's waits.
#![cfg(feature = "otel")]

#[allow(unused_imports)] // `support::capture` is for the other binaries
mod support;

use std::net::SocketAddr;
use std::time::Duration;

use tonic::Status;
use tonic_retry::layer::{MethodConfig, RetryLayer};
use tonic_retry::metrics::GrpcMetrics;
use tonic_retry::retrying::{ManualClock, RecordingSleeper};
use tonic_retry_echo::Scripted;
use tonic_retry_echo::metrics::Pipeline;

use support::{RETRY_ECHO, base, client, config, hello};

const STARTED: &str = "grpc.client.attempt.started";
const ATTEMPT: &str = "grpc.client.attempt.duration";
const SENT: &str = "grpc.client.attempt.sent_total_compressed_message_size";
const RCVD: &str = "grpc.client.attempt.rcvd_total_compressed_message_size";
const CALL: &str = "grpc.client.call.duration";
const RETRIES: &str = "grpc.client.call.retries";
const TRANSPARENT: &str = "grpc.client.call.transparent_retries";
const HEDGES: &str = "grpc.client.call.hedges";
const DELAY: &str = "grpc.client.call.retry_delay";

const SAY: (&str, &str) = ("grpc.method", "echo.Echo/Say");
const TARGET: (&str, &str) = ("grpc.target", "dns:///echo:50051");

/// `hello(0)` and its echo: field 1, 5 bytes ("hello").
const HELLO_BYTES: f64 = 7.0;

fn metrics(pipeline: &Pipeline) -> GrpcMetrics {
    GrpcMetrics::new(&pipeline.meter()).with_target(TARGET.1)
}

fn status(code: &str) -> (&'static str, &str) {
    ("grpc.status", code)
}

#[tokio::test]
async fn a_unary_call_retried_twice() {
    let server = Scripted::failing_first(2, Status::unavailable("restarting"));
    let addr = server.clone().spawn().await.unwrap();
    let (pipeline, sleeper) = (Pipeline::new(), RecordingSleeper::new());
    let layer = RetryLayer::from_service_config(&config(RETRY_ECHO), base(&sleeper))
        .metrics(metrics(&pipeline));
    client(addr, layer).say(hello(0)).await.unwrap();
    let m = pipeline.read();

    let started = m.one(STARTED, &[SAY, TARGET]);
    assert_eq!((started.sum, started.unit.as_str()), (3.0, "{attempt}"));
    assert_eq!(m.value(ATTEMPT, &[SAY, status("UNAVAILABLE")]).0, 2);
    assert_eq!(m.value(ATTEMPT, &[SAY, status("OK")]).0, 1);
    // Message bytes without gRPC's 5-byte prefix, each attempt.
    assert_eq!(
        m.value(SENT, &[status("UNAVAILABLE")]),
        (2, 2.0 * HELLO_BYTES)
    );
    assert_eq!(m.value(SENT, &[status("OK")]), (1, HELLO_BYTES));
    assert_eq!(m.value(RCVD, &[status("UNAVAILABLE")]), (2, 0.0));
    assert_eq!(m.value(RCVD, &[status("OK")]), (1, HELLO_BYTES));
    assert_eq!(m.of(CALL).len(), 1);
    assert_eq!(m.value(CALL, &[SAY, TARGET, status("OK")]).0, 1);
    assert_eq!(m.value(RETRIES, &[SAY, TARGET]), (1, 2.0));
    assert!(m.absent(TRANSPARENT) && m.absent(HEDGES));
    let slept: f64 = sleeper.sleeps().iter().map(Duration::as_secs_f64).sum();
    let (n, delay) = m.value(DELAY, &[SAY, TARGET]);
    assert_eq!(n, 1);
    assert!((delay - slept).abs() < 1e-9, "{delay} vs {slept}");
    assert!(slept > 0.2, "two backoffs: {slept}");

    // A66's buckets, as advice the SDK applied.
    let latency = &m.one(CALL, &[]).bounds;
    assert_eq!(
        (latency.len(), latency[1], latency[40]),
        (41, 0.00001, 100.0)
    );
    let size = &m.one(SENT, &[status("OK")]).bounds;
    assert_eq!((size.len(), size[1], size[13]), (14, 1024.0, 4294967296.0));
    assert_eq!(m.one(RETRIES, &[]).bounds, [1.0, 2.0, 3.0, 4.0, 5.0]);
    assert_eq!(m.one(DELAY, &[]).unit, "s");
}

#[tokio::test]
async fn a_call_that_gives_up_ends_with_its_status_and_one_without_retries_records_none() {
    let server = Scripted::failing_first(9, Status::unavailable("down"));
    let addr = server.clone().spawn().await.unwrap();
    let (pipeline, sleeper) = (Pipeline::new(), RecordingSleeper::new());
    let layer = RetryLayer::from_service_config(&config(RETRY_ECHO), base(&sleeper))
        .metrics(metrics(&pipeline));
    let err = client(addr, layer).say(hello(0)).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unavailable);
    let m = pipeline.read();
    assert_eq!(m.value(STARTED, &[SAY]).1, 5.0);
    assert_eq!(m.value(ATTEMPT, &[status("UNAVAILABLE")]).0, 5);
    assert_eq!(m.value(CALL, &[status("UNAVAILABLE")]).0, 1);
    assert_eq!(m.value(RETRIES, &[SAY]), (1, 4.0));

    // A call that succeeds at once: no retries recorded, a zero delay.
    let server = Scripted::failing_first(0, Status::unavailable("never"));
    let addr = server.clone().spawn().await.unwrap();
    let pipeline = Pipeline::new();
    let layer = RetryLayer::from_service_config(&config(RETRY_ECHO), base(&sleeper))
        .metrics(metrics(&pipeline));
    client(addr, layer).say(hello(0)).await.unwrap();
    let m = pipeline.read();
    assert!(m.absent(RETRIES) && m.absent(TRANSPARENT) && m.absent(HEDGES));
    assert_eq!(m.value(DELAY, &[SAY]), (1, 0.0));
    assert_eq!(m.value(STARTED, &[SAY]).1, 1.0);
}

#[tokio::test]
async fn a_call_sent_once_counts_its_bytes_as_they_go() {
    let server = Scripted::failing_first(1, Status::unavailable("restarting"));
    let addr = server.clone().spawn().await.unwrap();
    let (pipeline, sleeper) = (Pipeline::new(), RecordingSleeper::new());
    let layer = RetryLayer::from_service_config(&config(RETRY_ECHO), base(&sleeper))
        .metrics(metrics(&pipeline));
    let mut client = client(addr, layer);
    // Unbuffered, unretried: its request body is counted as it streams.
    let once = || {
        let mut request = tonic::Request::new(hello(0));
        request
            .extensions_mut()
            .insert(tonic_retry::layer::CallOptions::new().no_retries());
        request
    };
    let err = client.say(once()).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unavailable);
    client.say(once()).await.unwrap();
    let m = pipeline.read();
    assert_eq!(m.value(STARTED, &[SAY]).1, 2.0);
    assert_eq!(m.value(SENT, &[status("UNAVAILABLE")]), (1, HELLO_BYTES));
    assert_eq!(m.value(SENT, &[status("OK")]), (1, HELLO_BYTES));
    assert_eq!(m.value(RCVD, &[status("OK")]), (1, HELLO_BYTES));
    assert_eq!(m.value(CALL, &[status("UNAVAILABLE")]).0, 1);
    assert_eq!(m.value(CALL, &[status("OK")]).0, 1);
    assert!(m.absent(RETRIES));
}

#[tokio::test]
async fn methods_the_layer_does_not_know_are_other() {
    let server = Scripted::failing_first(0, Status::unavailable("never"));
    let addr = server.clone().spawn().await.unwrap();
    let sleeper = RecordingSleeper::new();
    // No settings for echo.Echo: its methods are not registered.
    let pipeline = Pipeline::new();
    let layer = RetryLayer::new(base(&sleeper)).metrics(GrpcMetrics::new(&pipeline.meter()));
    let mut unknown = client(addr, layer);
    unknown.say(hello(0)).await.unwrap();
    unknown.repeat(hello(1)).await.unwrap();
    let m = pipeline.read();
    let other = [("grpc.method", "other"), ("grpc.target", "other")];
    assert_eq!(m.value(STARTED, &other).1, 2.0, "{:#?}", m.points);
    assert_eq!(m.of(STARTED).len(), 1);

    // Registered after `metrics()`, by the layer's own settings or the
    // metrics' list; the layer's target labels the calls.
    let pipeline = Pipeline::new();
    let listed = GrpcMetrics::new(&pipeline.meter()).with_methods(["/echo.Echo/Repeat"]);
    let layer = RetryLayer::new(base(&sleeper))
        .metrics(listed)
        .method("/echo.Echo/Say", MethodConfig::idempotent())
        .target("echo:50051");
    let mut known = client(addr, layer);
    known.say(hello(0)).await.unwrap();
    let mut stream = known.repeat(hello(1)).await.unwrap().into_inner();
    while stream.message().await.unwrap().is_some() {}
    let m = pipeline.read();
    let target = ("grpc.target", "echo:50051");
    assert_eq!(m.value(STARTED, &[SAY, target]).1, 1.0);
    let repeat = ("grpc.method", "echo.Echo/Repeat");
    assert_eq!(m.value(STARTED, &[repeat, target]).1, 1.0);
    assert_eq!(m.of(STARTED).len(), 2);
}

#[tokio::test]
async fn a_stream_ends_its_attempt_and_call_when_its_status_is_read() {
    let server = Scripted::failing_first(1, Status::unavailable("restarting"));
    let addr = server.clone().spawn().await.unwrap();
    let (pipeline, sleeper) = (Pipeline::new(), RecordingSleeper::new());
    let layer = RetryLayer::from_service_config(&config(RETRY_ECHO), base(&sleeper))
        .metrics(metrics(&pipeline));
    let mut stream = client(addr, layer)
        .repeat(hello(3))
        .await
        .unwrap()
        .into_inner();
    let repeat = ("grpc.method", "echo.Echo/Repeat");
    let m = pipeline.read();
    assert_eq!(m.value(STARTED, &[repeat]).1, 2.0);
    assert_eq!(m.value(ATTEMPT, &[status("UNAVAILABLE")]).0, 1);
    assert!(m.absent(CALL), "the call is still open: {:#?}", m.of(CALL));
    let mut n = 0;
    while stream.message().await.unwrap().is_some() {
        n += 1;
    }
    assert_eq!(n, 3);
    let m = pipeline.read();
    assert_eq!(m.value(ATTEMPT, &[repeat, status("OK")]).0, 1);
    assert_eq!(m.value(RCVD, &[status("OK")]), (1, 3.0 * HELLO_BYTES));
    // `hello(3)`: the message, then field 2 (count = 3).
    assert_eq!(m.value(SENT, &[status("OK")]), (1, HELLO_BYTES + 2.0));
    assert_eq!(m.value(CALL, &[repeat, status("OK")]).0, 1);
    assert_eq!(m.value(RETRIES, &[repeat]), (1, 1.0));

    // A stream dropped unread: its attempt and call are CANCELLED.
    let pipeline = Pipeline::new();
    let layer = RetryLayer::from_service_config(&config(RETRY_ECHO), base(&sleeper))
        .metrics(metrics(&pipeline));
    let stream = client(addr, layer).repeat(hello(3)).await.unwrap();
    drop(stream);
    let m = pipeline.read();
    assert_eq!(m.value(ATTEMPT, &[status("CANCELLED")]).0, 1);
    assert_eq!(m.value(CALL, &[status("CANCELLED")]).0, 1);
}

#[tokio::test]
async fn a_hedge_that_wins_counts_one_hedge_and_a_cancelled_attempt() {
    // Call 0 never answers; call 1 (the hedge) does.
    let server = Scripted::new(|n| async move {
        if n == 0 {
            std::future::pending::<()>().await;
        }
        Ok(())
    });
    let addr = server.clone().spawn().await.unwrap();
    let (pipeline, sleeper) = (Pipeline::new(), RecordingSleeper::new());
    let hedged = config(
        r#"{"methodConfig": [{"name": [{"service": "echo.Echo", "method": "Say"}],
            "hedgingPolicy": {"maxAttempts": 2, "hedgingDelay": "0.05s"}}]}"#,
    );
    let retrying = base(&sleeper).with_clock(ManualClock::new());
    let layer = RetryLayer::from_service_config(&hedged, retrying).metrics(metrics(&pipeline));
    client(addr, layer).say(hello(0)).await.unwrap();
    let m = pipeline.read();
    assert_eq!(m.value(STARTED, &[SAY]).1, 2.0);
    assert_eq!(m.value(HEDGES, &[SAY, TARGET]), (1, 1.0));
    assert_eq!(m.value(ATTEMPT, &[status("OK")]).0, 1);
    assert_eq!(m.value(ATTEMPT, &[status("CANCELLED")]).0, 1);
    assert_eq!(m.value(CALL, &[status("OK")]).0, 1);
    assert!(m.absent(RETRIES) && m.absent(TRANSPARENT));
    // An attempt was in flight throughout: no delay.
    assert_eq!(m.value(DELAY, &[SAY]), (1, 0.0));
}

/// A raw HTTP/2 peer: refuses the first `refuse` streams
/// (RST_STREAM(REFUSED_STREAM), which gRFC A6 re-sends transparently),
/// then answers each `Say` with "hello".
async fn refusing(refuse: u32) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.unwrap();
        let mut conn = h2::server::handshake(tcp).await.unwrap();
        let mut n = 0;
        while let Some(Ok((_, mut respond))) = conn.accept().await {
            n += 1;
            if n <= refuse {
                respond.send_reset(h2::Reason::REFUSED_STREAM);
                continue;
            }
            let head = http::Response::builder()
                .header("content-type", "application/grpc")
                .body(())
                .unwrap();
            let mut send = respond.send_response(head, false).unwrap();
            let message = b"\0\0\0\0\x07\x0a\x05hello";
            send.send_data(bytes::Bytes::from_static(message), false)
                .unwrap();
            let mut trailers = http::HeaderMap::new();
            trailers.insert("grpc-status", "0".parse().unwrap());
            send.send_trailers(trailers).unwrap();
        }
    });
    addr
}

#[tokio::test]
async fn refused_streams_are_transparent_retries() {
    let addr = refusing(2).await;
    let (pipeline, sleeper) = (Pipeline::new(), RecordingSleeper::new());
    let layer = RetryLayer::from_service_config(&config(RETRY_ECHO), base(&sleeper))
        .metrics(metrics(&pipeline));
    let reply = client(addr, layer).say(hello(0)).await.unwrap();
    assert_eq!(reply.into_inner().message, "hello");
    let m = pipeline.read();
    assert_eq!(m.value(STARTED, &[SAY]).1, 3.0);
    assert_eq!(m.value(TRANSPARENT, &[SAY, TARGET]), (1, 2.0));
    assert!(m.absent(RETRIES) && m.absent(HEDGES));
    assert_eq!(m.value(DELAY, &[SAY]), (1, 0.0));
    assert_eq!(m.value(ATTEMPT, &[status("UNAVAILABLE")]).0, 2);
    assert_eq!(m.value(RCVD, &[status("OK")]), (1, HELLO_BYTES));
    assert_eq!(
        m.one(TRANSPARENT, &[]).bounds,
        [1.0, 2.0, 3.0, 4.0, 5.0, 10.0]
    );
}

#[tokio::test]
async fn the_loop_records_a_named_call_without_sizes() {
    let (pipeline, sleeper) = (Pipeline::new(), RecordingSleeper::new());
    let retrying = base(&sleeper).with_metrics(metrics(&pipeline).with_methods(["/kv.Store/Get"]));
    let mut n = 0;
    let got = retrying
        .clone()
        .with_method("/kv.Store/Get")
        .call(|| {
            n += 1;
            let fail = n <= 2;
            async move {
                if fail {
                    Err(Status::unavailable("restarting"))
                } else {
                    Ok(n)
                }
            }
        })
        .await
        .unwrap();
    assert_eq!(got, 3);
    // Unnamed calls record nothing; an unregistered name is "other".
    retrying
        .call(|| async { Ok::<_, Status>(()) })
        .await
        .unwrap();
    let _ = retrying
        .with_method("/kv.Store/Put")
        .call(|| async { Err::<(), _>(Status::internal("no")) })
        .await;
    let m = pipeline.read();
    let get = ("grpc.method", "kv.Store/Get");
    assert_eq!(m.value(STARTED, &[get, TARGET]).1, 3.0);
    assert_eq!(m.value(ATTEMPT, &[get, status("UNAVAILABLE")]).0, 2);
    assert_eq!(m.value(CALL, &[get, status("OK")]).0, 1);
    assert_eq!(m.value(RETRIES, &[get]), (1, 2.0));
    let slept: f64 = sleeper.sleeps().iter().map(Duration::as_secs_f64).sum();
    assert!((m.value(DELAY, &[get]).1 - slept).abs() < 1e-9);
    let other = ("grpc.method", "other");
    assert_eq!(m.value(CALL, &[other, status("INTERNAL")]).0, 1);
    assert_eq!(m.of(STARTED).len(), 2);
    assert!(m.absent(SENT) && m.absent(RCVD));
}
