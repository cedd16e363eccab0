//! Every give-up carries its history: a query, a reattach and an upload
//! against a closed port (a loopback listener bound, then dropped) each
//! fail with `[RETRIES_EXCEEDED] <RPC> to <host:port> gave up after N
//! attempts and T of waiting; last error: ...`, with the history and the
//! last status reachable.

use std::error::Error as _;
use std::task::{Context, Poll};

use spark_connect_retry::session::{ResultBatchRows, ServerError, SparkError, SparkSession};
use spark_connect_retry::transport::grpc_channel;
use spark_connect_testkit::TestServer;
use tonic::transport::{Channel, Endpoint};
use tonic_retry::retrying::RecordingSleeper;
use tower::BoxError;

use crate::support::{
    arrow_data, policies::recorded, proxied::proxied_server, streams::until_error,
};

/// A loopback port nobody listens on: bound, then dropped.
async fn closed_port() -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    addr
}

/// `err` is a give-up of `rpc` to `target` after `attempts` attempts and
/// 10 ms per retry of waiting (the test policy), its last status
/// UNAVAILABLE and reachable both from the history and as a source.
fn assert_gave_up(err: &SparkError, rpc: &str, target: &str, attempts: u32) -> String {
    let text = err.to_string();
    let server: &ServerError = err.server_error().unwrap_or_else(|| panic!("{err:?}"));
    let history = server
        .gave_up()
        .unwrap_or_else(|| panic!("no history: {err:?}"));
    assert!(history.attempts() >= attempts, "{text}");
    let waited = format!("{} ms of waiting", history.waited().as_millis());
    let head = format!(
        "[RETRIES_EXCEEDED] {rpc} to {target} gave up after {} attempts and {waited}; last error: UNAVAILABLE: ",
        history.attempts()
    );
    assert!(text.starts_with(&head), "{text}\n  expected: {head}");
    eprintln!("{text}");
    assert_eq!(history.last_status().code(), tonic::Code::Unavailable);
    assert_eq!(server.rpc(), Some(rpc));
    let mut next = err.source();
    let status = loop {
        let e = next.expect("the status is reachable through source()");
        if let Some(s) = e.downcast_ref::<tonic::Status>() {
            break s;
        }
        next = e.source();
    };
    assert_eq!(status.code(), tonic::Code::Unavailable);
    text
}

#[tokio::test]
async fn a_query_against_a_closed_port_says_what_it_tried() {
    let addr = closed_port().await;
    let sleeper = RecordingSleeper::new();
    let spark = SparkSession::builder()
        .remote(format!("sc://{addr}"))
        .retrying(recorded(&sleeper, 1))
        .build()
        .unwrap();
    let err = spark.sql("SELECT 1").await.unwrap_err();
    let text = assert_gave_up(&err, "ExecutePlan", &addr.to_string(), 4);
    assert!(
        text.contains("after 4 attempts and 30 ms of waiting"),
        "{text}"
    );
    assert!(
        text.contains("Connection refused"),
        "the transport's cause: {text}"
    );
    assert_eq!(sleeper.sleeps_ms(), [10, 10, 10]);
}

#[tokio::test]
async fn a_reattach_against_a_closed_port_says_what_it_tried() {
    let (server, proxy) = proxied_server().await;
    let target = proxy.remote().trim_start_matches("sc://").to_owned();
    let sleeper = RecordingSleeper::new();
    let spark = SparkSession::builder()
        .remote(proxy.remote())
        .retrying(recorded(&sleeper, 1))
        .build()
        .unwrap();
    let mut stream = spark.sql("SELECT id FROM range(100000000)").await.unwrap();
    stream.next_batch().await.unwrap().unwrap();
    proxy.shutdown().await; // its port is closed for good
    let err = until_error(&mut stream).await;
    assert_gave_up(&err, "ReattachExecute", &target, 4);
    assert_eq!(server.calls().execute, 1);
}

/// Routes Config and ArtifactStatus to the live server and every other RPC
/// to `rest` (the closed port): `create_dataframe` reads the server's
/// limits and asks what it holds, then its AddArtifacts meets the closed
/// port.
#[derive(Clone)]
struct UploadsElsewhere {
    config: Channel,
    rest: Channel,
}

impl tower::Service<http::Request<tonic::body::Body>> for UploadsElsewhere {
    type Response = http::Response<tonic::body::Body>;
    type Error = BoxError;
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<Self::Response, BoxError>> + Send>,
    >;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<tonic::body::Body>) -> Self::Future {
        let path = req.uri().path();
        let mut ch = if path.ends_with("/Config") || path.ends_with("/ArtifactStatus") {
            self.config.clone()
        } else {
            self.rest.clone()
        };
        Box::pin(async move {
            use tower::ServiceExt;
            let resp = ch.ready().await?.call(req).await?;
            Ok(resp.map(tonic::body::Body::new))
        })
    }
}

#[tokio::test]
async fn an_upload_against_a_closed_port_says_what_it_tried() {
    let server = TestServer::start().await.unwrap();
    let addr = closed_port().await;
    let lazy = |a: String| Endpoint::from_shared(a).unwrap().connect_lazy();
    let channel = grpc_channel(UploadsElsewhere {
        config: lazy(format!("http://{}", server.addr())),
        rest: lazy(format!("http://{addr}")),
    });
    let sleeper = RecordingSleeper::new();
    let spark = SparkSession::builder()
        .remote(format!("sc://{addr}"))
        // Not about batch sizes: no Config call of the client's own.
        .result_batch_rows(ResultBatchRows::ServerDefault)
        .channel(channel)
        .retrying(recorded(&sleeper, 1))
        .build()
        .unwrap();
    // 2 M rows of two longs: 32 MB, far over the 1 MiB cache threshold.
    let batches = arrow_data::rows(2_000_000, 100_000);
    let err = match spark.create_dataframe(arrow_data::schema(), batches).await {
        Ok(_) => panic!("uploaded to a closed port"),
        Err(e) => e,
    };
    // Each attempt asks ArtifactStatus (answered), then AddArtifacts.
    assert_gave_up(&err, "AddArtifacts", &addr.to_string(), 4);
    assert_eq!(sleeper.sleeps_ms(), [10, 10, 10]);
    assert_eq!(server.calls().config, 1);
    assert_eq!(server.upload_calls().len(), 0, "nothing reached the server");
}
