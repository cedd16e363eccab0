//! `spark-connect-guard` between real clients and the embedded server:
//! upstream faults, a cut between the client and the guard (the client's
//! own reattach through the guard), and malformed gRPC from a client.

use std::time::Duration;

use arrow_array::{Array, Int64Array};
use spark_connect_guard::Guard;
use spark_connect_retry::layer::ReattachLayer;
use spark_connect_retry::reattach::ReattachOptions;
use spark_connect_retry::session::SparkSession;
use spark_connect_stub::spark::connect::spark_connect_service_client::SparkConnectServiceClient;
use spark_connect_testkit::{Direction, Fault, FaultProxy, Rpc, TestServer};
use tonic_retry::retrying::RecordingSleeper;
use tower::Layer;

use crate::support::{assert_exact, drain, no_retries, patient, range_sql, retrying, sql_request};

const ROWS: i64 = 2_000_000;

async fn guard_for(server: &TestServer, sleeper: &RecordingSleeper) -> Guard {
    Guard::builder(server.remote())
        .layer(ReattachLayer::new().retrying(retrying(sleeper)))
        .start()
        .await
        .unwrap()
}

/// A server that ends each stream after 256 KiB with `faults` scripted, and
/// a guard in front of it whose waits return at once.
async fn faulty_upstream(faults: impl IntoIterator<Item = Fault>) -> (TestServer, Guard) {
    let s = TestServer::builder()
        .max_bytes_per_stream(256 * 1024)
        .start()
        .await
        .unwrap();
    for fault in faults {
        s.faults().push(fault);
    }
    let guard = guard_for(&s, &RecordingSleeper::new()).await;
    (s, guard)
}

/// Our own session: a client that reattaches by itself.
async fn session_rows(remote: &str, rows: i64) -> Vec<i64> {
    let spark = SparkSession::builder().remote(remote).build().unwrap();
    let stream = tokio::time::timeout(Duration::from_secs(60), spark.sql(&range_sql(rows)))
        .await
        .expect("sql hung")
        .unwrap();
    let batches = tokio::time::timeout(Duration::from_secs(120), stream.collect())
        .await
        .expect("collect hung")
        .unwrap();
    let mut ids = Vec::new();
    for b in batches {
        let col = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
        assert_eq!(col.null_count(), 0);
        ids.extend(col.values().iter().copied());
    }
    spark.close().await.unwrap();
    ids
}

#[tokio::test]
async fn a_stub_through_the_guard_is_exact_and_the_guard_releases_nothing() {
    let (s, guard) = faulty_upstream([
        Fault::reset_connection()
            .on(Rpc::ExecutePlan)
            .after_responses(5),
        Fault::lose_request().on(Rpc::ReattachExecute),
    ])
    .await;
    let channel = crate::support::channel_to(guard.local_addr());
    let mut client = SparkConnectServiceClient::new(channel).max_decoding_message_size(usize::MAX);
    let out = drain(&mut client, sql_request(&range_sql(ROWS))).await;
    assert_exact(&out, ROWS);
    assert!(s.calls().reattach > 10);
    // The stub sends no release, and neither does the guard: a client that
    // reattaches by itself may still ask for any response it did not release.
    assert_eq!(s.release_requests().len(), 0);
    guard.shutdown().await;
}

/// A guard that gives up on a broken upstream stream (here at once: no
/// retries) ends the client's stream UNAVAILABLE, not with tonic's UNKNOWN
/// for a broken body, which a client takes for the server's verdict: a
/// plain stub sees the code, and a client with a reattach layer of its own
/// reattaches through the guard and gets every row once.
#[tokio::test]
async fn a_guard_that_gives_up_on_its_upstream_answers_unavailable() {
    const ROWS: i64 = 200_000;
    let s = TestServer::builder()
        .rows_per_batch(2_000)
        .start()
        .await
        .unwrap();
    let guard = Guard::builder(s.remote())
        .layer(ReattachLayer::new().retrying(no_retries()))
        .start()
        .await
        .unwrap();
    let channel = crate::support::channel_to(guard.local_addr());
    let reset = || {
        Fault::reset_connection()
            .on(Rpc::ExecutePlan)
            .after_responses(5)
    };

    s.faults().push(reset());
    let mut stub =
        SparkConnectServiceClient::new(channel.clone()).max_decoding_message_size(usize::MAX);
    let out = drain(&mut stub, sql_request(&range_sql(ROWS))).await;
    let status = out.error.expect("the guard gave up on the reset");
    assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
    let got = i64::try_from(out.ids.len()).unwrap();
    assert!(got > 0 && got < ROWS, "{got} rows before the give-up");
    assert!(out.ids.iter().copied().eq(0..got), "rows out of order");

    s.faults().push(reset());
    let service = ReattachLayer::new().retrying(patient()).layer(channel);
    let mut client = SparkConnectServiceClient::new(service).max_decoding_message_size(usize::MAX);
    assert_exact(
        &drain(&mut client, sql_request(&range_sql(ROWS))).await,
        ROWS,
    );
    assert_eq!(s.faults().pending(), 0);

    let stats = guard.stats();
    let ended = |method: &str, code: &str| {
        stats
            .ended
            .iter()
            .filter(|(m, c, _)| *m == method && *c == code)
            .map(|(_, _, n)| n)
            .sum::<u64>()
    };
    assert_eq!(ended("ExecutePlan", "UNAVAILABLE"), 2, "{stats:?}");
    assert_eq!(ended("ReattachExecute", "OK"), 1, "{stats:?}");
    assert_eq!(ended("ExecutePlan", "UNKNOWN"), 0, "{stats:?}");
    guard.shutdown().await;
}

/// A forwarded call (here AnalyzePlan) whose upstream connection breaks
/// before its answer reaches the client UNAVAILABLE, which PySpark and the
/// JVM client retry, not as tonic's UNKNOWN (`transport error`), which they
/// take for the server's verdict: a PySpark client through a guard whose
/// upstream was cut failed so, seen in the chaos table's many-clients row.
#[tokio::test]
async fn a_forwarded_call_cut_upstream_answers_unavailable() {
    use spark_connect_stub::spark::connect as stub;
    let (s, guard) = faulty_upstream([]).await;
    let mut stub = SparkConnectServiceClient::new(crate::support::channel_to(guard.local_addr()));
    let version = || stub::AnalyzePlanRequest {
        session_id: crate::support::SESSION.into(),
        user_context: Some(stub::UserContext {
            user_id: "u".into(),
            ..Default::default()
        }),
        analyze: Some(stub::analyze_plan_request::Analyze::SparkVersion(
            stub::analyze_plan_request::SparkVersion {},
        )),
        ..Default::default()
    };
    for fault in [Fault::reset_connection(), Fault::lose_request()] {
        s.faults().push(fault.on(Rpc::AnalyzePlan));
        let status = stub.analyze_plan(version()).await.unwrap_err();
        assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
        // The client's retry finds the upstream again.
        stub.analyze_plan(version()).await.unwrap();
    }
    assert_eq!(s.faults().pending(), 0);
    let stats = guard.stats();
    let ended = |code: &str| {
        stats
            .ended
            .iter()
            .filter(|(m, c, _)| *m == "AnalyzePlan" && *c == code)
            .map(|(_, _, n)| n)
            .sum::<u64>()
    };
    assert_eq!(ended("UNAVAILABLE"), 2, "{stats:?}");
    assert_eq!(ended("OK"), 2, "{stats:?}");
    guard.shutdown().await;
}

/// The same when the upstream connection breaks under a forwarded call's
/// body (its headers and message came, its trailers did not): the guard
/// ends the client's call with trailers saying UNAVAILABLE, not with a
/// reset stream (which grpc-java reported as `INTERNAL: RST_STREAM closed
/// stream`, a JVM client through the guard, in the many-clients row).
#[tokio::test]
async fn a_forwarded_call_cut_under_its_body_answers_unavailable() {
    use http_body::Frame;
    use tokio_stream::StreamExt as _;
    // A server that answers any call with one empty message and then holds
    // the stream open: the trailers never come.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let server_addr = listener.local_addr().unwrap();
    let answered = std::sync::Arc::new(tokio::sync::Notify::new());
    let notify = answered.clone();
    let svc = tower::service_fn(move |_req: http::Request<tonic::body::Body>| {
        let notify = notify.clone();
        async move {
            let message: Result<Frame<bytes::Bytes>, std::convert::Infallible> =
                Ok(Frame::data(crate::support::raw::frame(b"")));
            let frames = tokio_stream::iter([message]).chain(tokio_stream::pending());
            let mut resp = http::Response::new(tonic::body::Body::new(
                http_body_util::StreamBody::new(frames),
            ));
            resp.headers_mut().insert(
                "content-type",
                http::HeaderValue::from_static("application/grpc"),
            );
            notify.notify_one();
            Ok::<_, std::convert::Infallible>(resp)
        }
    });
    tokio::spawn(tonic::transport::Server::builder().serve_with_incoming(
        svc,
        tokio_stream::wrappers::TcpListenerStream::new(listener),
    ));
    let proxy = FaultProxy::builder(server_addr).start().await.unwrap();
    let guard = Guard::builder(proxy.remote()).start().await.unwrap();
    let mut stub = SparkConnectServiceClient::new(crate::support::channel_to(guard.local_addr()));
    let call = tokio::spawn(async move {
        stub.analyze_plan(spark_connect_stub::spark::connect::AnalyzePlanRequest::default())
            .await
    });
    answered.notified().await;
    // Let the message reach the guard, then break its upstream connection.
    tokio::time::sleep(Duration::from_millis(200)).await;
    proxy.cut_all();
    let status = tokio::time::timeout(Duration::from_secs(10), call)
        .await
        .expect("the call hung")
        .unwrap()
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
    guard.shutdown().await;
}

#[tokio::test]
async fn a_session_through_the_guard_is_exact_through_upstream_faults() {
    let (s, guard) = faulty_upstream([
        Fault::reset_connection()
            .on(Rpc::ReattachExecute)
            .after_responses(2),
        Fault::unavailable().on(Rpc::ReattachExecute),
    ])
    .await;
    let ids = session_rows(&guard.remote(), ROWS).await;
    assert!(ids.iter().copied().eq(0..ROWS), "{} rows", ids.len());
    assert_eq!(s.faults().pending(), 0);
    guard.shutdown().await;
}

#[tokio::test]
async fn a_cut_between_client_and_guard_is_resumed_by_the_clients_own_reattach() {
    let s = TestServer::builder()
        .max_bytes_per_stream(1024 * 1024)
        .start()
        .await
        .unwrap();
    let sleeper = RecordingSleeper::new();
    let guard = Guard::builder(s.remote())
        .layer(
            ReattachLayer::new()
                .retrying(retrying(&sleeper))
                .options(ReattachOptions::default()),
        )
        .start()
        .await
        .unwrap();
    // Cut the client's connection to the guard mid-stream, three times.
    let proxy = FaultProxy::builder(guard.local_addr())
        .cut_after_bytes(Direction::ServerToClient, 3 * 1024 * 1024)
        .max_cuts(3)
        .start()
        .await
        .unwrap();
    let ids = session_rows(&proxy.remote(), ROWS).await;
    assert!(ids.iter().copied().eq(0..ROWS), "{} rows", ids.len());
    assert_eq!(proxy.stats().cuts, 3, "{:?}", proxy.stats());
    // The client reattached through the guard by itself, from its own position.
    assert!(
        s.reattach_requests()
            .iter()
            .any(|r| r.last_response_id.is_some())
    );
    proxy.shutdown().await;
    guard.shutdown().await;
}

/// What a raw HTTP/2 client got for one gRPC call: the headers or trailers
/// that held its status, and whether they came alone in the response's
/// headers (trailers-only).
struct RawAnswer {
    end: http::HeaderMap,
    trailers_only: bool,
}

impl RawAnswer {
    fn status(&self) -> &str {
        self.end["grpc-status"].to_str().unwrap()
    }
}

/// One gRPC call to `addr` over a fresh HTTP/2 connection with `body` sent
/// as it is (framing included), read to its end.
async fn raw_call(addr: std::net::SocketAddr, rpc: &str, body: bytes::Bytes) -> RawAnswer {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (h2, conn) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(conn);
    let mut h2 = h2.ready().await.unwrap();
    let req = http::Request::post(format!(
        "http://{addr}/spark.connect.SparkConnectService/{rpc}"
    ))
    .header("content-type", "application/grpc")
    .header("te", "trailers")
    .body(())
    .unwrap();
    let (resp, mut send) = h2.send_request(req, false).unwrap();
    send.send_data(body.clone(), true).unwrap();
    let resp = tokio::time::timeout(Duration::from_secs(10), resp)
        .await
        .expect("no answer")
        .unwrap();
    let (parts, mut recv) = resp.into_parts();
    // Before any body is read: did the HEADERS frame end the stream?
    let trailers_only = recv.is_end_stream();
    while let Some(d) = recv.data().await {
        d.unwrap();
    }
    let end = if parts.headers.contains_key("grpc-status") {
        parts.headers
    } else {
        recv.trailers().await.unwrap().unwrap_or_default()
    };
    assert!(
        end.contains_key("grpc-status"),
        "{rpc} {body:?}: no grpc-status"
    );
    RawAnswer { end, trailers_only }
}

#[tokio::test]
async fn malformed_grpc_from_a_client_gets_a_status() {
    let s = TestServer::start().await.unwrap();
    let sleeper = RecordingSleeper::new();
    let guard = guard_for(&s, &sleeper).await;
    let cases: [(&str, &'static [u8]); 4] = [
        ("ExecutePlan", &[0, 0, 0, 0, 10, 1]),
        ("ExecutePlan", &[0, 0, 0, 0, 2, 0xff, 0xff]),
        ("ReattachExecute", &[0, 0, 0]),
        ("ReattachExecute", &[0, 0, 0, 0, 1, 0x08, 0, 0, 0, 0, 0]),
    ];
    for (rpc, body) in cases {
        let answer = raw_call(guard.local_addr(), rpc, bytes::Bytes::from_static(body)).await;
        assert_ne!(answer.status(), "0", "{rpc} {body:?}");
    }
    // The guard still serves.
    let ids = session_rows(&guard.remote(), 10_000).await;
    assert_eq!(ids.len(), 10_000);
    guard.shutdown().await;
}

/// A status the guard knows before any response (here: a reattach to an
/// execution the server does not have) goes out trailers-only, as one
/// HEADERS frame that ends the stream. Headers followed by an empty DATA
/// frame that ends it are a protocol error to grpc-java: the JVM client
/// failed with INTERNAL ("unexpected EOS on empty DATA frame") instead of
/// the server's INVALID_HANDLE.
#[tokio::test]
async fn a_status_before_any_response_is_sent_trailers_only() {
    use prost::Message;
    use spark_connect_stub::spark::connect as stub;
    let s = TestServer::start().await.unwrap();
    let guard = guard_for(&s, &RecordingSleeper::new()).await;
    let reattach = stub::ReattachExecuteRequest {
        session_id: crate::support::SESSION.into(),
        user_context: Some(stub::UserContext {
            user_id: "u".into(),
            ..Default::default()
        }),
        operation_id: "00000000-0000-4000-8000-000000000001".into(),
        ..Default::default()
    };
    let msg = reattach.encode_to_vec();
    let mut body = vec![0];
    body.extend_from_slice(&u32::try_from(msg.len()).unwrap().to_be_bytes());
    body.extend_from_slice(&msg);
    let answer = raw_call(guard.local_addr(), "ReattachExecute", body.into()).await;
    // The server's own answer (the session is unknown to it), as it came.
    assert_ne!(answer.status(), "0");
    let message = answer.end["grpc-message"].to_str().unwrap();
    assert!(message.contains("INVALID_HANDLE"), "{message}");
    assert!(answer.trailers_only, "the status came after the headers");
    guard.shutdown().await;
}

#[tokio::test]
async fn the_upstream_token_is_sent_and_never_logged() {
    const TOKEN: &str = "s3cret-guard-token";
    let s = TestServer::builder()
        .max_bytes_per_stream(256 * 1024)
        .required_token(TOKEN)
        .start()
        .await
        .unwrap();
    s.faults()
        .push(Fault::unavailable().on(Rpc::ReattachExecute).times(2));
    let sleeper = RecordingSleeper::new();
    // A token goes over plaintext to localhost only.
    let upstream = format!(
        "{}/;token={TOKEN}",
        s.remote().replace("127.0.0.1", "localhost")
    );
    let (out, events) = tonic_retry_echo::capture::capture(async {
        let guard = Guard::builder(upstream)
            .layer(ReattachLayer::new().retrying(retrying(&sleeper)))
            .start()
            .await
            .unwrap();
        let channel = crate::support::channel_to(guard.local_addr());
        let mut client =
            SparkConnectServiceClient::new(channel).max_decoding_message_size(usize::MAX);
        let out = drain(&mut client, sql_request(&range_sql(300_000))).await;
        guard.shutdown().await;
        out
    })
    .await;
    assert_exact(&out, 300_000);
    assert!(!events.is_empty(), "the layer's events were captured");
    let logged = format!("{events:?}");
    assert!(!logged.contains(TOKEN), "the token was logged");
    assert_eq!(s.faults().pending(), 0);
}
