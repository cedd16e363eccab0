//! What a person reads when a session call fails: Spark's errors as Spark
//! shows them, and a call the retry policy gave up on with its history (the
//! RPC, the server's address, the attempts, the time waited, the last
//! status), never a token, and never raw status-detail bytes.

use std::error::Error as _;

use spark_connect_retry::policy::PySparkPolicy;
use spark_connect_retry::policy::RetryPolicy;
use spark_connect_retry::retrying::PySparkRetrying;
use spark_connect_retry::retrying::Retrying;
use spark_connect_retry::session::{SparkError, SparkSession};
use spark_connect_testkit::TestServer;
use tonic_retry::retrying::RecordingSleeper;

/// A port nobody listens on.
fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

#[tokio::test]
async fn a_spark_error_displays_as_spark_shows_it() {
    let server = TestServer::start().await.unwrap();
    let spark = SparkSession::connect(&format!("sc://{}", server.addr())).unwrap();
    let err = spark.sql("SELEC oops").await.expect_err("bad SQL");
    assert_eq!(
        err.to_string(),
        "[PARSE_SYNTAX_ERROR] Syntax error at or near 'selec'. (SQLSTATE: 42601)"
    );
    // Class, SQLSTATE, parameters and the operation stay on the error.
    let server_error = err.server_error().unwrap();
    assert_eq!(server_error.error_class(), Some("PARSE_SYNTAX_ERROR"));
    assert_eq!(server_error.sql_state(), Some("42601"));
    assert_eq!(server_error.message_parameters()["error"], "'selec'");
    assert!(server_error.operation_id().is_some());
    assert_eq!(server_error.code(), tonic::Code::Internal);
    assert!(server_error.gave_up().is_none());
}

#[tokio::test]
async fn debug_of_a_server_error_has_no_raw_detail_bytes() {
    let server = TestServer::start().await.unwrap();
    let spark = SparkSession::connect(&format!("sc://{}", server.addr())).unwrap();
    let err = spark.sql("SELEC oops").await.expect_err("bad SQL");
    let server_error = err.server_error().unwrap();
    assert!(
        !server_error.status().details().is_empty(),
        "the status has details"
    );
    for debug in [format!("{server_error:?}"), format!("{err:?}")] {
        assert!(!debug.contains("type.googleapis.com"), "{debug}");
        assert!(!debug.contains("details: b\""), "{debug}");
        assert!(
            debug.contains("PARSE_SYNTAX_ERROR") && debug.contains("42601"),
            "{debug}"
        );
        assert!(debug.len() < 1000, "{} bytes: {debug}", debug.len());
    }
}

#[tokio::test]
async fn giving_up_on_a_closed_port_names_the_address_attempts_and_time() {
    let port = closed_port();
    let policy = RetryPolicy::pyspark_builder()
        .max_retries(Some(3))
        .jitter_ms(0.0)
        .build()
        .unwrap();
    let sleeper = RecordingSleeper::new();
    let spark = SparkSession::builder()
        .remote(format!("sc://localhost:{port}/;token=s3cr3t-t0ken"))
        .retrying(Retrying::pyspark_with(vec![policy]).with_sleeper(sleeper.clone()))
        .build()
        .unwrap();
    let err = spark.spark_version().await.expect_err("nobody listens");
    assert_eq!(sleeper.sleeps_ms(), [50, 200, 800]);
    let text = err.to_string();
    assert!(
        text.starts_with(&format!(
            "[RETRIES_EXCEEDED] AnalyzePlan to localhost:{port} gave up after 4 attempts \
             and 1050 ms of waiting; last error: UNAVAILABLE: "
        )),
        "{text}"
    );
    assert!(text.contains("onnect"), "the transport's cause: {text}");
    let debug = format!("{err:?}");
    for shown in [&text, &debug] {
        assert!(!shown.contains("s3cr3t"), "the token leaked: {shown}");
    }
    // The history and the original status stay reachable.
    let server_error = err.server_error().unwrap();
    assert_eq!(
        server_error.target(),
        Some(format!("localhost:{port}").as_str())
    );
    assert_eq!(server_error.rpc(), Some("AnalyzePlan"));
    let history = server_error.gave_up().unwrap();
    assert_eq!(history.attempts(), 4);
    assert_eq!(history.waited().as_millis(), 1050);
    assert_eq!(history.last_status().code(), tonic::Code::Unavailable);
    assert_eq!(server_error.code(), tonic::Code::Unavailable);
    let status = err.source().and_then(|e| e.source()).unwrap();
    let status = status.downcast_ref::<tonic::Status>().unwrap();
    assert_eq!(status.code(), tonic::Code::Unavailable);
    assert!(matches!(err, SparkError::Server(_)));
    eprintln!("{text}");
}
