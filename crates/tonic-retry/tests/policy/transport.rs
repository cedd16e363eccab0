//! Transport failures classified with real sockets: a port that refuses, a
//! TCP reset mid-stream and before the response, a client timeout, and a
//! malformed `grpc-status-details-bin` from a real server.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tonic::metadata::MetadataMap;
use tonic::{Code, Status};
use tonic_retry::policy::{Classifier, DefaultClassifier, Failure, FailureKind};
use tonic_retry::retrying::{RecordingSleeper, Retrying};
use tonic_retry::transport::{GrpcChannel, grpc_channel};
use tonic_retry_echo::EchoClient;

use crate::support::proxy::proxy_after;
use crate::support::recorded::{Recorded, ready};
use crate::support::{hello, reply, say};

/// A guard against a hang (a failing test), not a timed assertion.
const HANG: Duration = Duration::from_secs(10);

/// A lazy channel to `addr`, after the binary's global tracing subscriber
/// (every test of a binary that captures events installs it first).
fn channel(addr: SocketAddr) -> tonic::transport::Channel {
    crate::support::capture::init();
    tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect_lazy()
}

/// The echo client over `grpc_channel` (the response guard, boxed).
fn guarded(addr: SocketAddr) -> EchoClient<GrpcChannel> {
    EchoClient::new(grpc_channel(channel(addr)))
}

async fn closed_port() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    l.local_addr().unwrap()
}

/// A TCP proxy to `upstream` that resets (SO_LINGER 0 + close) the
/// client's side of its first connection once it has forwarded `limit`
/// bytes of the server's answer, and forwards later connections whole.
async fn proxy_resetting_after(upstream: SocketAddr, limit: usize) -> SocketAddr {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    proxy_after(upstream, 1, move |mut down| async move {
        let Ok(mut up) = TcpStream::connect(upstream).await else {
            return;
        };
        {
            let (mut dr, mut dw) = down.split();
            let (mut ur, mut uw) = up.split();
            let (mut to_up, mut to_down) = (vec![0u8; 4096], vec![0u8; 1024]);
            let mut sent = 0;
            while sent < limit {
                tokio::select! {
                    n = dr.read(&mut to_up) => match n {
                        Ok(n) if n > 0 && uw.write_all(&to_up[..n]).await.is_ok() => {}
                        _ => return,
                    },
                    n = ur.read(&mut to_down) => match n {
                        Ok(n) if n > 0 && dw.write_all(&to_down[..n]).await.is_ok() => {
                            sent += n;
                        }
                        _ => return,
                    },
                }
            }
        }
        let _ = down.set_zero_linger();
    })
    .await
}

/// A raw HTTP/2 peer that resets (SO_LINGER 0 + close) its first
/// connection as soon as a request has arrived on it, and forwards later
/// connections to `upstream` whole.
async fn peer_resetting_on_request(upstream: SocketAddr) -> SocketAddr {
    proxy_after(upstream, 1, async |down| {
        let _ = down.set_zero_linger();
        let Ok(mut conn) = h2::server::handshake(down).await else {
            return;
        };
        // The request has arrived: drop the connection unanswered.
        let _ = conn.accept().await;
    })
    .await
}

#[tokio::test]
async fn refused_connection_is_unprocessed_and_retried() {
    let addr = closed_port().await;
    let mut client = EchoClient::new(channel(addr));
    let status = client.say(say("s")).await.unwrap_err();
    assert_eq!(status.code(), Code::Unavailable);
    assert_eq!(kind_of(&status), FailureKind::Unprocessed);
    assert!(DefaultClassifier.can_retry(&Failure::new(&status)));
    // Through the boxed channel the source chain survives.
    let boxed = guarded(addr);
    let status = boxed.clone().say(say("s")).await.unwrap_err();
    assert_eq!(kind_of(&status), FailureKind::Unprocessed);
    // The default policy retries it 4 times (5 attempts), then returns it unchanged.
    let sleeper = RecordingSleeper::new();
    let retrying = Retrying::default()
        .with_sleeper(sleeper.clone())
        .with_seed(1);
    let status = retrying
        .call(|| {
            let mut c = boxed.clone();
            async move { c.say(say("s")).await }
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::Unavailable);
    assert_eq!(sleeper.sleeps().len(), 4);
}

#[tokio::test]
async fn reset_mid_stream_arrives_as_unknown_with_a_source_and_is_retryable() {
    let server = Recorded::new(|_| ready(Ok(())))
        .with_repeat(|_| (0..100_000).map(|_| Ok(reply(&"x".repeat(100)))).collect());
    let upstream = server.spawn().await;
    let proxy = proxy_resetting_after(upstream, 16 * 1024).await;
    let mut client = guarded(proxy);
    let mut stream = client.repeat(hello(1)).await.unwrap().into_inner();
    let mut received = 0;
    let status = loop {
        match tokio::time::timeout(HANG, stream.message()).await.unwrap() {
            Ok(Some(_)) => received += 1,
            Ok(None) => panic!("stream ended cleanly after {received}"),
            Err(status) => break status,
        }
    };
    assert!(received >= 3, "{received}");
    // tonic reports it as Unknown; only the source tells it from a server status.
    assert_eq!(status.code(), Code::Unknown, "{status:?}");
    assert!(std::error::Error::source(&status).is_some());
    assert_eq!(kind_of(&status), FailureKind::MaybeProcessed);
    assert!(DefaultClassifier.can_retry(&Failure::new(&status)));
    // A server-sent Unknown is not retried.
    assert!(!DefaultClassifier.can_retry(&Failure::new(&Status::unknown(
        "h2 protocol error: error reading a body from connection"
    ))));
}

#[tokio::test]
async fn reset_before_the_response_is_maybe_processed() {
    let server = Recorded::new(|_| ready(Ok(())));
    let upstream = server.spawn().await;
    let peer = peer_resetting_on_request(upstream).await;
    let mut client = guarded(peer);
    let status = client.say(say("s")).await.unwrap_err();
    assert!(
        status.code() == Code::Unknown || status.code() == Code::Unavailable,
        "{status:?}"
    );
    assert_eq!(kind_of(&status), FailureKind::MaybeProcessed, "{status:?}");
    // The same channel reconnects for the next call.
    assert!(client.say(say("s")).await.is_ok());
}

#[tokio::test]
async fn client_timeout_is_a_deadline() {
    let server = Recorded::new(|_| Box::pin(std::future::pending()));
    let addr = server.spawn().await;
    let mut client = guarded(addr);
    let mut req = tonic::Request::new(say("s"));
    req.set_timeout(Duration::from_millis(200));
    let status = client.say(req).await.unwrap_err();
    assert_eq!(status.code(), Code::Cancelled, "{status:?}");
    assert_eq!(kind_of(&status), FailureKind::Deadline);
    assert!(!DefaultClassifier.can_retry(&Failure::new(&status)));
}

/// UNAVAILABLE with a `grpc-status-details-bin` that is not base64 (`!` is
/// not in its alphabet); tonic copies such metadata verbatim.
fn bad_details() -> Status {
    let mut headers = http::HeaderMap::new();
    headers.insert(
        "grpc-status-details-bin",
        http::HeaderValue::from_static("!!!not-base64!!!"),
    );
    Status::with_metadata(
        Code::Unavailable,
        "bad grpc-status-details-bin",
        MetadataMap::from_headers(headers),
    )
}

#[tokio::test]
async fn non_base64_details_from_a_real_server_do_not_panic() {
    let server = Recorded::new(|_| ready(Err(bad_details())));
    let addr = server.spawn().await;
    let mut client = guarded(addr);
    let status = client.say(say("s")).await.unwrap_err();
    assert_eq!(status.code(), Code::Internal);
    assert!(
        status.message().contains("not base64"),
        "{}",
        status.message()
    );
    assert!(
        status.message().contains("14"),
        "names the original status: {}",
        status.message()
    );
    assert!(
        !DefaultClassifier.can_retry(&Failure::new(&status)),
        "a hostile server is not retried"
    );
}

/// The failure kind of `status`.
fn kind_of(status: &tonic::Status) -> FailureKind {
    Failure::new(status).kind()
}
