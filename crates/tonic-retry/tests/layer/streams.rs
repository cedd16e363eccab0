//! Server streams through the layer: the first message reaches the caller
//! as soon as it is sent (the layer never waits for a second one), however
//! the layer was built, and a stream that fails before its first message
//! is retried.

use std::time::Duration;

use tokio::sync::mpsc;
use tonic::{Code, Status};
use tonic_retry::layer::{MethodConfig, RetryLayer};
use tonic_retry::retrying::RecordingSleeper;

use crate::support::{Gated, Plan, RETRY_ECHO, base, client, config, hello, reply};

/// A guard against a hang (a held first message would wait forever for
/// the second, which the server sends only once the first has arrived):
/// it turns the hang into a failure, and is never what a test asserts.
const HANG: Duration = Duration::from_secs(20);

/// The layers a user builds: from a service config, and by hand with the
/// default kind (no method declared as streaming).
fn layers(sleeper: &RecordingSleeper) -> Vec<(&'static str, RetryLayer)> {
    vec![
        (
            "service config",
            RetryLayer::from_service_config(&config(RETRY_ECHO), base(sleeper)),
        ),
        (
            "by hand",
            RetryLayer::new(base(sleeper)).default_method(MethodConfig::idempotent()),
        ),
    ]
}

/// The server sends message 2 only after the client has received message
/// 1, so the stream completes only if message 1 was handed on alone.
#[tokio::test]
async fn the_first_message_arrives_before_the_server_sends_the_second() {
    let sleeper = RecordingSleeper::new();
    for (how, layer) in layers(&sleeper) {
        let server = Gated::default();
        let (tx, rx) = mpsc::channel(1);
        server.plan(Plan::Feed(rx));
        let addr = server.spawn().await;
        let mut client = client(addr, layer);
        tx.send(Ok(reply("one"))).await.unwrap();
        let run = async {
            let mut stream = client.repeat(hello(0)).await.unwrap().into_inner();
            let first = stream.message().await.unwrap().unwrap();
            // Only now does the server send the second message.
            tx.send(Ok(reply("two"))).await.unwrap();
            let second = stream.message().await.unwrap().unwrap();
            drop(tx);
            let end = stream.message().await.unwrap();
            (first.message, second.message, end)
        };
        let got = tokio::time::timeout(HANG, run).await;
        let got = got.unwrap_or_else(|_| panic!("{how}: the first message was held"));
        assert_eq!(got, ("one".into(), "two".into(), None), "{how}");
        assert_eq!(server.calls(), 1, "{how}");
    }
    assert!(sleeper.sleeps().is_empty());
}

/// Headers, then UNAVAILABLE before any message: nothing reached the
/// caller, so the layer retries (gRFC A6 would have committed at the
/// headers), and the second attempt's stream is delivered whole.
#[tokio::test]
async fn a_stream_failing_before_its_first_message_is_retried() {
    let sleeper = RecordingSleeper::new();
    for (how, layer) in layers(&sleeper) {
        let server = Gated::default();
        server.plan(Plan::FailFirst(Status::unavailable("warming up")));
        let (tx, rx) = mpsc::channel(4);
        server.plan(Plan::Feed(rx));
        for m in ["a", "b", "c"] {
            tx.send(Ok(reply(m))).await.unwrap();
        }
        drop(tx);
        let addr = server.spawn().await;
        let stats = layer.stats_handle();
        let run = async {
            let mut stream = client(addr, layer)
                .repeat(hello(0))
                .await
                .unwrap()
                .into_inner();
            let mut got = Vec::new();
            while let Some(r) = stream.message().await.unwrap() {
                got.push(r.message);
            }
            got
        };
        let got = tokio::time::timeout(HANG, run).await.expect(how);
        assert_eq!(got, ["a", "b", "c"], "{how}");
        assert_eq!((server.calls(), stats.snapshot().retries), (2, 1), "{how}");
    }
    assert_eq!(sleeper.sleeps().len(), 2, "one wait per layer");
}

/// A stream that fails after its first message is committed: the caller
/// gets the message, then the status, and the layer does not replay it.
#[tokio::test]
async fn a_stream_failing_after_its_first_message_is_not_retried() {
    let sleeper = RecordingSleeper::new();
    let server = Gated::default();
    let (tx, rx) = mpsc::channel(1);
    server.plan(Plan::Feed(rx));
    let addr = server.spawn().await;
    let layer = RetryLayer::from_service_config(&config(RETRY_ECHO), base(&sleeper));
    let mut client = client(addr, layer);
    tx.send(Ok(reply("one"))).await.unwrap();
    let run = async {
        let mut stream = client.repeat(hello(0)).await.unwrap().into_inner();
        let first = stream.message().await.unwrap().unwrap();
        tx.send(Err(Status::unavailable("lost"))).await.unwrap();
        (first.message, stream.message().await.unwrap_err())
    };
    let (first, err) = tokio::time::timeout(HANG, run).await.unwrap();
    assert_eq!(first, "one");
    assert_eq!((err.code(), err.message()), (Code::Unavailable, "lost"));
    assert_eq!(server.calls(), 1);
    assert!(sleeper.sleeps().is_empty());
}
