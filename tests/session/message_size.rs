//! A request over `grpc_max_message_size` fails with an error that says so
//! and names the limit, never as a bare "h2 protocol error"; a result larger
//! than the limit is asked for in chunks that fit.

use spark_connect_retry::session::{SparkError, SparkSession};
use spark_connect_testkit::TestServer;

fn limited(server: &TestServer, limit: usize) -> SparkSession {
    let remote = format!("{}/;grpc_max_message_size={limit}", server.remote());
    SparkSession::builder().remote(&remote).build().unwrap()
}

fn status(err: &SparkError) -> &tonic::Status {
    err.server_error().map(|e| e.status()).expect("a status")
}

#[tokio::test]
async fn a_request_over_the_limit_names_the_limit() {
    let server = TestServer::builder().start().await.unwrap();
    let err = limited(&server, 1)
        .sql("SELECT 1")
        .await
        .map(|_| ())
        .unwrap_err();
    let status = status(&err);
    assert_eq!(status.code(), tonic::Code::OutOfRange, "{err}");
    assert!(
        status
            .message()
            .contains("encoded message length too large"),
        "{err}"
    );
    assert!(status.message().contains("the limit is: 1 bytes"), "{err}");
    // Nothing reached the server: no query ran.
    assert_eq!(server.calls().execute, 0);
    server.shutdown().await;
}

/// Responses are asked for in chunks that fit the limit (result chunking),
/// so a small limit slows a large result down but does not fail it.
#[tokio::test]
async fn a_result_larger_than_the_limit_arrives_in_chunks_that_fit() {
    let server = TestServer::builder()
        .rows_per_batch(10_000)
        .start()
        .await
        .unwrap();
    let spark = limited(&server, 4096);
    let batches = spark
        .sql("SELECT * FROM range(100000)")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    assert_eq!(batches.iter().map(|b| b.num_rows()).sum::<usize>(), 100_000);
    server.shutdown().await;
}
