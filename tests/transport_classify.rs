//! Transport failures classified as PySpark sees them, with real sockets:
//! a port that refuses, a TCP reset mid-stream and before the response, and
//! a malformed `grpc-status-details-bin` from a real server.

use std::time::Duration;

use spark_connect_retry::policy::{Classifier, DefaultClassifier, FailureKind, classify_failure};
use spark_connect_retry::proto::spark_connect_service_client::SparkConnectServiceClient;
use spark_connect_retry::proto::{self, ExecutePlanRequest};
use spark_connect_retry::retrying::{RecordingSleeper, Retrying};
use spark_connect_retry::transport::spark_client;
use spark_connect_testkit::{Fault, Rpc, TestServer, plans};
use tonic::Code;

const SESSION: &str = "0d9b7a52-93c4-4bb4-9a6e-3f1f8f0c2a11";

fn range_request(end: i64) -> ExecutePlanRequest {
    plans::execute_request(SESSION, plans::range(Some(0), end, 1))
}

fn version_request() -> proto::AnalyzePlanRequest {
    proto::AnalyzePlanRequest {
        session_id: SESSION.into(),
        analyze: Some(proto::analyze_plan_request::Analyze::SparkVersion(
            proto::analyze_plan_request::SparkVersion {},
        )),
        ..Default::default()
    }
}

async fn closed_port() -> String {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    drop(l);
    format!("http://{addr}")
}

#[tokio::test]
async fn refused_connection_is_unprocessed_and_retried() {
    let url = closed_port().await;
    let channel = tonic::transport::Endpoint::from_shared(url)
        .unwrap()
        .connect_lazy();
    let mut client = SparkConnectServiceClient::new(channel.clone());
    let status = client.analyze_plan(version_request()).await.unwrap_err();
    assert_eq!(status.code(), Code::Unavailable);
    assert_eq!(classify_failure(&status), FailureKind::Unprocessed);
    assert!(DefaultClassifier.can_retry(&status));
    // Through the boxed channel the source chain survives.
    let mut boxed = spark_client(channel);
    let status = boxed.analyze_plan(version_request()).await.unwrap_err();
    assert_eq!(classify_failure(&status), FailureKind::Unprocessed);
    // The default policy retries it 15 times, then returns it unchanged.
    let sleeper = RecordingSleeper::new();
    let retrying = Retrying::default()
        .with_sleeper(sleeper.clone())
        .with_seed(1);
    let status = retrying
        .call(|| {
            let mut c = boxed.clone();
            async move { c.analyze_plan(version_request()).await }
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::Unavailable);
    assert_eq!(sleeper.sleeps().len(), 15);
}

#[tokio::test]
async fn reset_mid_stream_arrives_as_unknown_with_a_source_and_is_retryable() {
    let server = TestServer::builder()
        .rows_per_batch(100)
        .start()
        .await
        .unwrap();
    server.faults().push(
        Fault::reset_connection()
            .on(Rpc::ExecutePlan)
            .after_responses(3),
    );
    let channel = tonic::transport::Endpoint::from_shared(server.endpoint())
        .unwrap()
        .connect_lazy();
    let mut client = spark_client(channel);
    let mut stream = client
        .execute_plan(range_request(100_000))
        .await
        .unwrap()
        .into_inner();
    let mut received = 0;
    let status = loop {
        match tokio::time::timeout(Duration::from_secs(10), stream.message())
            .await
            .unwrap()
        {
            Ok(Some(_)) => received += 1,
            Ok(None) => panic!("stream ended cleanly after {received}"),
            Err(status) => break status,
        }
    };
    assert!(received >= 3);
    // tonic reports it as Unknown; only the source tells it from a server status.
    assert_eq!(status.code(), Code::Unknown, "{status:?}");
    assert!(std::error::Error::source(&status).is_some());
    assert_eq!(classify_failure(&status), FailureKind::MaybeProcessed);
    assert!(DefaultClassifier.can_retry(&status));
    // A server-sent Unknown is not retried.
    assert!(!DefaultClassifier.can_retry(&tonic::Status::unknown(
        "h2 protocol error: error reading a body from connection"
    )));
}

#[tokio::test]
async fn reset_before_the_response_is_maybe_processed() {
    let server = TestServer::start().await.unwrap();
    server
        .faults()
        .push(Fault::reset_connection().on(Rpc::AnalyzePlan));
    let channel = tonic::transport::Endpoint::from_shared(server.endpoint())
        .unwrap()
        .connect_lazy();
    let mut client = spark_client(channel);
    let status = client.analyze_plan(version_request()).await.unwrap_err();
    assert!(
        status.code() == Code::Unknown || status.code() == Code::Unavailable,
        "{status:?}"
    );
    assert_eq!(
        classify_failure(&status),
        FailureKind::MaybeProcessed,
        "{status:?}"
    );
    // The same channel reconnects for the next call.
    assert!(client.analyze_plan(version_request()).await.is_ok());
}

#[tokio::test]
async fn client_timeout_is_a_deadline() {
    let server = TestServer::start().await.unwrap();
    server
        .faults()
        .push(Fault::stall_forever().on(Rpc::AnalyzePlan));
    let channel = tonic::transport::Endpoint::from_shared(server.endpoint())
        .unwrap()
        .connect_lazy();
    let mut client = spark_client(channel);
    let mut req = tonic::Request::new(version_request());
    req.set_timeout(Duration::from_millis(200));
    let status = client.analyze_plan(req).await.unwrap_err();
    assert_eq!(status.code(), Code::Cancelled, "{status:?}");
    assert_eq!(classify_failure(&status), FailureKind::Deadline);
    assert!(!DefaultClassifier.can_retry(&status));
}

#[tokio::test]
async fn non_base64_details_from_a_real_server_do_not_panic() {
    let server = TestServer::start().await.unwrap();
    server
        .faults()
        .push(Fault::bad_status_details().on(Rpc::AnalyzePlan));
    let channel = tonic::transport::Endpoint::from_shared(server.endpoint())
        .unwrap()
        .connect_lazy();
    let mut client = spark_client(channel);
    let status = client.analyze_plan(version_request()).await.unwrap_err();
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
        !DefaultClassifier.can_retry(&status),
        "a hostile server is not retried"
    );
}
