//! Token auth, SQL errors with and without an error class, and the session RPCs.

use crate::{
    Duration, RecordingSleeper, Retrying, SparkError, SparkSession, Srv, assert_exact, query_rows,
    remote, session,
};
use spark_connect_retry::retrying::PySparkRetrying;

real_test!(token_auth, needs = [TOKEN, TOKEN_VALUE]);
async fn token_auth() {
    let Some(url) = remote("SPARK_CONNECT_TEST_REMOTE_TOKEN") else {
        return;
    };
    let token = std::env::var("SPARK_CONNECT_TEST_TOKEN").unwrap();
    let base = url.replace("127.0.0.1", "localhost");
    let base = base.trim_end_matches('/');
    let sleeper = RecordingSleeper::new();
    let wrong = SparkSession::builder()
        .remote(format!("{base}/;token=not-the-token"))
        .retrying(Retrying::pyspark().with_sleeper(sleeper.clone()))
        .build()
        .unwrap();
    let err = wrong.spark_version().await.unwrap_err();
    assert_eq!(
        err.server_error().map(|s| s.code()),
        Some(tonic::Code::Unauthenticated),
        "{err}"
    );
    assert!(
        sleeper.sleeps().is_empty(),
        "UNAUTHENTICATED is not retried"
    );
    assert!(!format!("{err} {err:?}").contains("not-the-token"));
    let right = SparkSession::connect(&format!("{base}/;token={token}")).unwrap();
    assert!(right.spark_version().await.unwrap().starts_with("4.3"));
    let (check, _) = query_rows(&right, 1000).await.unwrap();
    assert_exact(&check, 1000);
}

real_test!(spark_bad_sql_has_class_and_sqlstate, needs = [SPARK]);
async fn spark_bad_sql_has_class_and_sqlstate() {
    let Some(url) = remote("SPARK_CONNECT_TEST_REMOTE") else {
        return;
    };
    let spark = session(&url);
    // Eager: the error comes from sql() itself, not from reading the stream.
    let err = spark.sql("SELEC 1 FROM").await.expect_err("fails at sql()");
    let server = err.server_error().expect("server error");
    assert_eq!(server.error_class(), Some("PARSE_SYNTAX_ERROR"), "{err}");
    assert_eq!(server.sql_state(), Some("42601"));
    assert!(server.operation_id().is_some(), "{server:?}");
    assert!(!server.message_parameters().is_empty(), "{server:?}");
    let err = spark
        .sql("SELECT * FROM no_such_table_here")
        .await
        .expect_err("fails at sql()");
    assert_eq!(err.error_class(), Some("TABLE_OR_VIEW_NOT_FOUND"), "{err}");
    assert_eq!(err.sql_state(), Some("42P01"));
    let params = err.server_error().unwrap().message_parameters();
    assert!(
        params
            .get("relationName")
            .is_some_and(|n| n.contains("no_such_table_here")),
        "{params:?}"
    );
}

real_test!(sail_bad_sql_has_no_class, needs = [SAIL]);
/// Sail's errors carry no Spark error class or SQLSTATE: an INTERNAL status
/// with the message and an ErrorInfo naming a Java exception (docs/servers.md).
async fn sail_bad_sql_has_no_class() {
    let Some(url) = Srv::Sail.remote() else {
        return;
    };
    let spark = session(&url);
    let err = spark.sql("SELEC 1 FROM").await.expect_err("fails at sql()");
    eprintln!("Sail syntax error: {err}");
    let server = err.server_error().expect("server error");
    assert_eq!(server.code(), tonic::Code::Internal, "{err}");
    assert_eq!(server.error_class(), None, "{err}");
    assert_eq!(server.sql_state(), None, "{err}");
    assert!(
        server.message().contains("invalid argument: found SELEC"),
        "{err}"
    );
    let err = spark
        .sql("SELECT * FROM no_such_table_here")
        .await
        .expect_err("fails at sql()");
    eprintln!("Sail missing table: {err}");
    let server = err.server_error().expect("server error");
    assert_eq!(server.code(), tonic::Code::Internal, "{err}");
    assert_eq!(server.sql_state(), None, "{err}");
    assert!(server.message().contains("no_such_table_here"), "{err}");
    spark.close().await.expect("close");
}

real_test!(session_rpcs, needs = [SPARK]);
async fn session_rpcs() {
    let Some(url) = remote("SPARK_CONNECT_TEST_REMOTE") else {
        return;
    };
    let spark = session(&url);
    assert!(spark.spark_version().await.unwrap().starts_with("4.3"));
    spark
        .config_set(&[("spark.sql.shuffle.partitions", "7")])
        .await
        .unwrap();
    assert_eq!(
        spark
            .config_get(&["spark.sql.shuffle.partitions"])
            .await
            .unwrap(),
        vec![Some("7".to_owned())]
    );
    spark
        .config_unset(&["spark.sql.shuffle.partitions"])
        .await
        .unwrap();

    // interrupt_all stops a running query.
    let mut stream = spark
        .sql("SELECT count(*) AS c FROM range(0, 100000000000) a WHERE a.id % 7 = 3")
        .await
        .unwrap();
    let op = stream.operation_id().to_owned();
    let reader = tokio::spawn(async move { stream.next_batch().await });
    let mut interrupted = vec![];
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        interrupted = spark.interrupt_all().await.unwrap();
        if !interrupted.is_empty() {
            break;
        }
    }
    assert!(
        interrupted.contains(&op),
        "{interrupted:?} should contain {op}"
    );
    let result = tokio::time::timeout(Duration::from_secs(60), reader)
        .await
        .unwrap()
        .unwrap();
    let err = result.expect("an item").expect_err("interrupted");
    assert_eq!(err.error_class(), Some("OPERATION_CANCELED"), "{err}");

    // release_session: locally closed, and the server says SESSION_CLOSED.
    let session_id = spark.session_id().to_owned();
    spark.release_session().await.unwrap();
    assert!(matches!(
        spark.spark_version().await,
        Err(SparkError::SessionClosed)
    ));
    let again = SparkSession::connect(&format!(
        "{}/;session_id={session_id}",
        url.trim_end_matches('/')
    ))
    .unwrap();
    let err = again.spark_version().await.unwrap_err();
    assert_eq!(
        err.error_class(),
        Some("INVALID_HANDLE.SESSION_CLOSED"),
        "{err}"
    );
}
