//! Retries of unary calls: attempt headers, events, replayed bodies,
//! budget, RetryInfo and pushback, against the recording echo server.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tonic::metadata::{MetadataMap, MetadataValue};
use tonic::{Code, Request, Status};
use tonic_retry::layer::{MethodConfig, RetryLayer};
use tonic_retry::policy::RetryPolicy;
use tonic_retry::retrying::{RecordingSleeper, Retrying};
use tonic_retry_echo::{CollectorClient, EchoClient};
use tonic_types::{ErrorDetails, StatusExt};
use tower::ServiceBuilder;

use crate::support::capture::capture;
use crate::support::recorded::{Recorded, ready, unavailable_n};
use crate::support::{client, exact, say};

const SAY: &str = "/echo.Echo/Say";

/// A layer with `Say` idempotent over `retrying`.
fn layer(retrying: Retrying) -> RetryLayer {
    RetryLayer::new(retrying).method(SAY, MethodConfig::idempotent())
}

fn with_pushback(code: Code, value: &'static str) -> Status {
    let mut md = MetadataMap::new();
    md.insert("grpc-retry-pushback-ms", MetadataValue::from_static(value));
    Status::with_metadata(code, "pushback", md)
}

#[tokio::test]
async fn unavailable_n_times_then_ok_with_attempt_headers() {
    let server = Recorded::new(unavailable_n(3));
    let addr = server.spawn().await;
    let sleeper = RecordingSleeper::new();
    let layer = layer(exact(&sleeper));
    let stats = layer.stats_handle();
    let mut c = client(addr, layer);
    let res = c.say(say("s1")).await.unwrap().into_inner();
    assert_eq!(res.message, "s1");
    assert_eq!(server.say_calls(), 4);
    assert_eq!(sleeper.sleeps_ms(), vec![100, 200, 400]);
    assert_eq!(
        *server.previous_attempts.lock().unwrap(),
        vec![None, Some("1".into()), Some("2".into()), Some("3".into())]
    );
    let s = stats.snapshot();
    assert_eq!((s.calls, s.attempts, s.retries, s.exhausted), (1, 4, 3, 0));
}

/// A call that succeeds at once logs one event: attempt 1, code 0, done,
/// no wait. (Retried calls: `events::one_event_per_attempt_with_the_wait_slept`.)
#[tokio::test]
async fn a_first_attempt_success_is_one_done_event() {
    let server = Recorded::new(unavailable_n(0));
    let addr = server.spawn().await;
    let sleeper = RecordingSleeper::new();
    let mut c = client(addr, layer(exact(&sleeper)));
    let (result, events) = capture(c.say(say("s"))).await;
    result.unwrap();
    let events: Vec<String> = events
        .into_iter()
        .filter(|e| e.target.starts_with("tonic_retry::layer"))
        .map(|e| e.fields.join(" "))
        .collect();
    assert_eq!(
        events,
        ["rpc.service=echo.Echo rpc.method=Say attempt=1 rpc.grpc.status_code=0 reason=done"]
    );
}

/// A client-streaming request whose body is not ready when the layer is
/// called (its second message is sent by another task) takes the general
/// path: read to the end, then replayed whole on the retry.
#[tokio::test]
async fn request_body_not_ready_at_call_is_buffered_and_replayed() {
    let server = Recorded::new(unavailable_n(0));
    let addr = server.spawn().await;
    let sleeper = RecordingSleeper::new();
    let layer = RetryLayer::new(exact(&sleeper))
        .method("/echo.Collector/Collect", MethodConfig::idempotent());
    let stats = layer.stats_handle();
    crate::support::capture::init();
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect_lazy();
    let mut c = CollectorClient::new(ServiceBuilder::new().layer(layer).service(channel));
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tx.send(say("a")).await.unwrap();
    // Runs only once this (current-thread) test task waits on the call, so
    // the second message is not there when the layer first polls the body.
    tokio::spawn(async move {
        tx.send(say("b")).await.unwrap();
    });
    let res = c
        .collect(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(res.message, "a,b");
    assert_eq!(
        *server.collected.lock().unwrap(),
        vec![vec!["a".to_owned(), "b".to_owned()]; 2]
    );
    assert_eq!(sleeper.sleeps_ms(), vec![100]);
    let s = stats.snapshot();
    assert_eq!((s.calls, s.attempts, s.retries), (1, 2, 1));
}

/// Every attempt carries the request's metadata and extensions, as a layer
/// between the retry layer and the channel sees them: tonic's `GrpcMethod`
/// alone, or with another extension.
#[tokio::test]
async fn retries_carry_headers_and_extensions() {
    #[derive(Debug, Clone, PartialEq)]
    struct Tag(u32);
    type Seen = (Option<(String, String)>, Option<Tag>, Option<String>);
    for tagged in [false, true] {
        let server = Recorded::new(unavailable_n(2));
        let addr = server.spawn().await;
        let sleeper = RecordingSleeper::new();
        let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let record = seen.clone();
        crate::support::capture::init();
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
            .unwrap()
            .connect_lazy();
        let svc = ServiceBuilder::new()
            .map_request(move |mut req: http::Request<tonic::body::Body>| {
                if tagged {
                    req.extensions_mut().insert(Tag(7));
                }
                req
            })
            .layer(layer(exact(&sleeper)))
            .map_request(move |req: http::Request<tonic::body::Body>| {
                let m = req
                    .extensions()
                    .get::<tonic::GrpcMethod<'static>>()
                    .map(|m| (m.service().to_owned(), m.method().to_owned()));
                let tag = req.extensions().get::<Tag>().cloned();
                let k = req
                    .headers()
                    .get("x-k")
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned);
                record.lock().unwrap().push((m, tag, k));
                req
            })
            .service(channel);
        let mut c = EchoClient::new(svc);
        let mut req = Request::new(say("s"));
        req.metadata_mut()
            .insert("x-k", MetadataValue::from_static("v"));
        c.say(req).await.unwrap();
        let want = (
            Some(("echo.Echo".to_owned(), "Say".to_owned())),
            tagged.then_some(Tag(7)),
            Some("v".to_owned()),
        );
        assert_eq!(*seen.lock().unwrap(), vec![want; 3], "tagged: {tagged}");
        assert_eq!(server.say_calls(), 3);
    }
}

#[tokio::test]
async fn budget_exhausted_returns_last_status() {
    let server = Recorded::new(unavailable_n(u32::MAX));
    let addr = server.spawn().await;
    let sleeper = RecordingSleeper::new();
    let policy = RetryPolicy::builder().max_retries(Some(2)).build().unwrap();
    let layer = layer(Retrying::new(vec![policy]).with_sleeper(sleeper.clone()));
    let stats = layer.stats_handle();
    let err = client(addr, layer).say(say("s")).await.unwrap_err();
    assert_eq!(err.code(), Code::Unavailable);
    assert_eq!(err.message(), "restarting");
    assert_eq!(server.say_calls(), 3);
    assert_eq!(stats.snapshot().exhausted, 1);
}

#[tokio::test]
async fn retry_info_is_a_floor() {
    let server = Recorded::new(|i| {
        ready(match i {
            0 => Err(Status::with_error_details(
                Code::Unavailable,
                "busy",
                ErrorDetails::with_retry_info(Some(Duration::from_millis(700))),
            )),
            // RetryInfo makes even ABORTED retryable, with its delay as the floor.
            1 => Err(Status::with_error_details(
                Code::Aborted,
                "busy",
                ErrorDetails::with_retry_info(Some(Duration::from_millis(30))),
            )),
            _ => Ok(()),
        })
    });
    let addr = server.spawn().await;
    let sleeper = RecordingSleeper::new();
    let mut c = client(addr, layer(exact(&sleeper)));
    c.say(say("s")).await.unwrap();
    // 700 (floor over 100), then the policy's 200 (floor 30 is lower).
    assert_eq!(sleeper.sleeps_ms(), vec![700, 200]);
    assert_eq!(server.say_calls(), 3);
}

#[tokio::test]
async fn pushback_positive_waits_exactly_and_restarts_backoff() {
    let server = Recorded::new(|i| {
        ready(match i {
            0 => Err(Status::unavailable("a")),
            1 => Err(with_pushback(Code::Unavailable, "1234")),
            2 => Err(Status::unavailable("b")),
            _ => Ok(()),
        })
    });
    let addr = server.spawn().await;
    let sleeper = RecordingSleeper::new();
    let mut c = client(addr, layer(exact(&sleeper)));
    c.say(say("s")).await.unwrap();
    // 100 (policy), 1234 (pushback, exact), then the backoff restarts at 100.
    assert_eq!(sleeper.sleeps_ms(), vec![100, 1234, 100]);
}

#[tokio::test]
async fn pushback_negative_or_garbled_stops() {
    for value in ["-1", "soon"] {
        let server = Recorded::new(move |_| ready(Err(with_pushback(Code::Unavailable, value))));
        let addr = server.spawn().await;
        let sleeper = RecordingSleeper::new();
        let mut c = client(addr, layer(exact(&sleeper)));
        let err = c.say(say("s")).await.unwrap_err();
        assert_eq!(err.code(), Code::Unavailable, "{value}");
        assert_eq!(server.say_calls(), 1, "{value}");
        assert!(sleeper.sleeps().is_empty(), "{value}");
    }
}
