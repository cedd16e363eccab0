//! `SparkSession` against the embedded Spark Connect server.

use std::time::Duration;

use arrow_array::{Array, Int64Array, RecordBatch};
use spark_connect_retry::policy::PySparkPolicy;
use spark_connect_retry::policy::RetryPolicy;
use spark_connect_retry::retrying::PySparkRetrying;
use spark_connect_retry::retrying::Retrying;
use spark_connect_retry::session::{ResultBatchRows, SparkError, SparkSession};
use spark_connect_testkit::held_clock::HeldClock;
use spark_connect_testkit::{CutMode, CutSchedule, Direction, FaultProxy};
use spark_connect_testkit::{Fault, Rpc, TestServer};
use tokio_stream::StreamExt;
use tonic_retry::retrying::RecordingSleeper;

fn fast_retrying(sleeper: &RecordingSleeper) -> Retrying {
    Retrying::pyspark_with(vec![
        RetryPolicy::pyspark_builder()
            .jitter_ms(0.0)
            .build()
            .unwrap(),
    ])
    .with_sleeper(sleeper.clone())
    .with_seed(9)
}

fn session(server: &TestServer, sleeper: &RecordingSleeper) -> SparkSession {
    SparkSession::builder()
        .remote(server.remote())
        .retrying(fast_retrying(sleeper))
        .build()
        .unwrap()
}

fn column(batches: &[RecordBatch], name: &str) -> Vec<i64> {
    batches
        .iter()
        .flat_map(|b| {
            let col = b.column_by_name(name).expect("column");
            let col = col.as_any().downcast_ref::<Int64Array>().unwrap();
            assert_eq!(col.null_count(), 0);
            col.values().to_vec()
        })
        .collect()
}

#[tokio::test]
async fn sql_through_every_kind_of_fault_is_exact() {
    let s = TestServer::builder()
        .rows_per_batch(1000)
        .max_responses_per_stream(7)
        .start()
        .await
        .unwrap();
    s.faults()
        .push(Fault::unavailable().on(Rpc::ExecutePlan).after_responses(3))
        .push(
            Fault::reset_connection()
                .on(Rpc::ReattachExecute)
                .after_responses(2),
        )
        .push(
            Fault::status(tonic::Code::ResourceExhausted, "slow down")
                .retry_info(Duration::from_millis(700))
                .on(Rpc::ReattachExecute),
        )
        .push(
            Fault::spark(spark_connect_testkit::SparkException::cursor_disconnected())
                .on(Rpc::ReattachExecute)
                .after_responses(1),
        );
    let sleeper = RecordingSleeper::new();
    let spark = session(&s, &sleeper);
    let batches = spark
        .sql("SELECT id, id*2 AS x FROM range(100000)")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    let ids = column(&batches, "id");
    let xs = column(&batches, "x");
    assert!(ids.iter().copied().eq(0..100_000));
    assert!(xs.iter().copied().eq((0..100_000).map(|i| i * 2)));
    // The RetryInfo floor was honoured.
    assert!(
        sleeper.sleeps_ms().contains(&700),
        "{:?}",
        sleeper.sleeps_ms()
    );
    spark.close().await.unwrap();
    assert_eq!(spark.releases().outstanding(), 0);
    assert_eq!(s.calls().release_all, 1);
    assert_eq!(
        s.calls().release_session,
        1,
        "close releases the server session"
    );
}

#[tokio::test]
async fn range_as_a_stream() {
    let s = TestServer::builder()
        .rows_per_batch(333)
        .start()
        .await
        .unwrap();
    let spark = session(&s, &RecordingSleeper::new());
    let mut stream = spark.range(10, 2010, 2).unwrap();
    let mut got = vec![];
    while let Some(b) = stream.next().await {
        got.extend(column(&[b.unwrap()], "id"));
    }
    assert!(got.iter().copied().eq((10..2010).step_by(2)));
}

#[tokio::test]
async fn config_round_trip_and_version() {
    let s = TestServer::start().await.unwrap();
    let spark = session(&s, &RecordingSleeper::new());
    spark
        .config_set(&[("spark.sql.shuffle.partitions", "7"), ("my.key", "v")])
        .await
        .unwrap();
    assert_eq!(
        spark
            .config_get(&["spark.sql.shuffle.partitions", "my.key", "missing.key"])
            .await
            .unwrap(),
        vec![Some("7".into()), Some("v".into()), None]
    );
    spark.config_unset(&["my.key"]).await.unwrap();
    assert_eq!(spark.config_get(&["my.key"]).await.unwrap(), vec![None]);
    assert_eq!(spark.spark_version().await.unwrap(), "4.3.0");
    assert_eq!(
        spark.server_side_session_id(),
        Some(s.server_side_session_id())
    );
}

#[tokio::test]
async fn unary_rpcs_are_retried_under_the_policy() {
    let s = TestServer::start().await.unwrap();
    s.faults()
        .push(Fault::unavailable().on(Rpc::Config).times(2));
    s.faults()
        .push(Fault::reset_connection().on(Rpc::AnalyzePlan));
    let sleeper = RecordingSleeper::new();
    let spark = SparkSession::builder()
        .remote(s.remote())
        // Not about batch sizes: no Config call of the client's own.
        .result_batch_rows(ResultBatchRows::ServerDefault)
        .retrying(fast_retrying(&sleeper))
        .build()
        .unwrap();
    spark.config_set(&[("a", "b")]).await.unwrap();
    assert_eq!(spark.spark_version().await.unwrap(), "4.3.0");
    assert_eq!(sleeper.sleeps_ms(), vec![50, 200, 50]);
}

#[tokio::test]
async fn token_is_sent_and_never_shown() {
    let s = TestServer::builder()
        .required_token("s3cr3t-t0ken")
        .start()
        .await
        .unwrap();
    let url = format!(
        "{}/;token=s3cr3t-t0ken",
        s.remote().replace("127.0.0.1", "localhost")
    );
    let spark = SparkSession::builder()
        .remote(url)
        .retrying(fast_retrying(&RecordingSleeper::new()))
        .build()
        .unwrap();
    assert_eq!(spark.spark_version().await.unwrap(), "4.3.0");
    let md = s.last_metadata(Rpc::AnalyzePlan).unwrap();
    assert_eq!(md.get("authorization").unwrap(), "Bearer s3cr3t-t0ken");
    assert!(!format!("{spark:?}").contains("s3cr3t"));
    // A wrong token: UNAUTHENTICATED, not retried, and not echoed.
    let sleeper = RecordingSleeper::new();
    let url = format!(
        "{}/;token=wrong-token",
        s.remote().replace("127.0.0.1", "localhost")
    );
    let bad = SparkSession::builder()
        .remote(url)
        .retrying(fast_retrying(&sleeper))
        .build()
        .unwrap();
    let err = bad.spark_version().await.unwrap_err();
    assert_eq!(
        err.server_error().unwrap().code(),
        tonic::Code::Unauthenticated
    );
    assert!(
        !err.to_string().contains("wrong-token") && !format!("{err:?}").contains("wrong-token")
    );
    assert!(sleeper.sleeps().is_empty());
}

#[tokio::test]
async fn bad_sql_surfaces_class_sqlstate_and_details_once() {
    let s = TestServer::start().await.unwrap();
    let spark = session(&s, &RecordingSleeper::new());
    let err = spark.sql("SELEC oops").await.expect_err("fails at sql()");
    let server = err.server_error().expect("a server error");
    assert_eq!(server.error_class(), Some("PARSE_SYNTAX_ERROR"));
    assert_eq!(server.sql_state(), Some("42601"));
    assert!(server.operation_id().is_some());
    assert_eq!(s.calls().fetch_error_details, 1);
    assert!(
        server.details().is_some(),
        "FetchErrorDetails enriched the error"
    );
}

#[tokio::test]
async fn interrupt_all_cancels_a_running_query() {
    let s = TestServer::builder()
        .rows_per_batch(10)
        .batch_delay(Duration::from_millis(20))
        .start()
        .await
        .unwrap();
    let spark = session(&s, &RecordingSleeper::new());
    let mut stream = spark.range(0, 1_000_000, 1).unwrap();
    stream.next_batch().await.unwrap().unwrap();
    let ids = spark.interrupt_all().await.unwrap();
    assert_eq!(ids, vec![stream.operation_id().to_owned()]);
    let mut err = None;
    while let Some(b) = stream.next_batch().await {
        if let Err(e) = b {
            err = Some(e);
            break;
        }
    }
    assert_eq!(
        err.expect("cancelled").error_class(),
        Some("OPERATION_CANCELED")
    );
}

#[tokio::test]
async fn release_session_then_calls_fail_closed() {
    let s = TestServer::start().await.unwrap();
    let spark = session(&s, &RecordingSleeper::new());
    spark.spark_version().await.unwrap();
    spark.release_session().await.unwrap();
    spark.release_session().await.unwrap();
    assert_eq!(s.calls().release_session, 1);
    assert!(matches!(
        spark.config_get(&["a"]).await,
        Err(SparkError::SessionClosed)
    ));
}

#[tokio::test]
async fn invalid_connection_strings_are_typed_errors() {
    for bad in [
        "http://host",
        "sc://host/path",
        "sc://host:123/;token=",
        "sc://host:-4",
    ] {
        let e = SparkSession::builder().remote(bad).build().unwrap_err();
        assert!(matches!(e, SparkError::ConnectionString(_)), "{bad}: {e:?}");
    }
}

#[tokio::test]
async fn close_waits_for_releases_but_bounded() {
    let s = TestServer::builder()
        .rows_per_batch(1000)
        .start()
        .await
        .unwrap();
    s.faults()
        .push(Fault::stall_forever().on(Rpc::ReleaseExecute).times(100));
    let spark = SparkSession::builder()
        .remote(s.remote())
        .retrying(fast_retrying(&RecordingSleeper::new()))
        .release_wait(Duration::from_millis(300))
        .build()
        .unwrap();
    let batches = spark.range(0, 10_000, 1).unwrap().collect().await.unwrap();
    assert_eq!(column(&batches, "id").len(), 10_000);
    let started = std::time::Instant::now();
    spark.close().await.unwrap();
    assert!(
        spark.releases().outstanding() > 0,
        "releases are stuck, close gives up on them"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(spark.is_closed());
}

/// A connection that goes silent both ways mid-stream (no FIN, no RST), with
/// HTTP/2 keepalive off: stall detection gives the segment up and reattaches
/// over a fresh connection, and the result is exact. The clock moves only
/// once the connection is silent, so there is exactly one stall.
#[tokio::test(start_paused = true)]
async fn black_hole_mid_stream_recovers_over_a_fresh_connection() {
    let clock = HeldClock::hold();
    let s = TestServer::builder()
        .rows_per_batch(1000)
        .start()
        .await
        .unwrap();
    let proxy = FaultProxy::builder(s.addr())
        .cut_schedule(Direction::ServerToClient, CutSchedule::new([60_000]))
        .cut_mode(CutMode::BlackHole)
        .start()
        .await
        .unwrap();
    // Under half the 1 s bound of a release attempt: even if the clock has
    // to move twice (bytes read after the cut), a release stuck in the black
    // hole keeps waiting, and no third connection is dialled before the
    // counts below.
    let idle = Duration::from_millis(400);
    let spark = SparkSession::builder()
        .remote(format!("{}/;grpc_keepalive_enabled=false", proxy.remote()))
        .retrying(fast_retrying(&RecordingSleeper::new()))
        .idle_timeout(Some(idle))
        .build()
        .unwrap();
    let mut stream = spark
        .sql("SELECT id, id*2 AS x FROM range(100000)")
        .await
        .unwrap();
    let stats = stream.stats_handle();
    let mut ids = vec![];
    let drain = tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(b) = stream.next_batch().await {
            ids.extend(column(&[b.unwrap()], "id"));
        }
    });
    let (drained, _advances) = tokio::join!(
        drain,
        clock.fire(
            idle,
            || proxy.stats().cuts == 1,
            || stats.snapshot().stalls > 0
        )
    );
    drained.expect("a black hole must not hang the stream");
    assert!(ids.iter().copied().eq(0..100_000));
    let stats = stream.stats();
    assert_eq!(stats.stalls, 1, "{stats:?}");
    assert_eq!(stats.re_executes, 0, "{stats:?}");
    let p = proxy.stats();
    assert_eq!(p.cuts, 1);
    assert_eq!(
        p.connections, 2,
        "the reattach must use a new connection: {p:?}"
    );
    // A release sent into the black hole gives up after its own bound (the
    // idle timeout, 1 s at least) and goes over a fresh connection: nothing
    // is left for close to wait for.
    tokio::time::advance(Duration::from_secs(1)).await;
    clock
        .wait_for("no release outstanding", || {
            spark.releases().outstanding() == 0
        })
        .await;
    clock.release().await;
    spark.close().await.expect("close");
    proxy.shutdown().await;
}

/// Zero and unrepresentably large idle timeouts are typed errors at build
/// time, naming the field (never a panic from `Instant::now() + d`).
#[tokio::test]
async fn zero_or_huge_idle_timeout_is_a_typed_error_at_build() {
    let s = TestServer::builder().start().await.unwrap();
    for bad in [Duration::ZERO, Duration::MAX] {
        let err = SparkSession::builder()
            .remote(s.remote())
            .idle_timeout(Some(bad))
            .build()
            .unwrap_err();
        assert!(
            matches!(&err, SparkError::InvalidOption { field, .. } if *field == "idle_timeout"),
            "{err:?}"
        );
    }
}

/// The execution lost on the server after responses arrived (a restart): a
/// clear RESPONSE_ALREADY_RECEIVED naming the operation, never a partial
/// result passed off as complete.
#[tokio::test]
async fn lost_execution_after_responses_names_the_operation() {
    let s = TestServer::builder()
        .rows_per_batch(100)
        .max_responses_per_stream(3)
        .start()
        .await
        .unwrap();
    s.faults()
        .push(Fault::operation_not_found().on(Rpc::ReattachExecute));
    let spark = session(&s, &RecordingSleeper::new());
    let mut stream = spark
        .sql("SELECT id, id*2 AS x FROM range(10000)")
        .await
        .unwrap();
    let operation_id = stream.operation_id().to_owned();
    let err = loop {
        match stream.next_batch().await {
            Some(Ok(_)) => continue,
            Some(Err(e)) => break e,
            None => panic!("a partial result ended as if complete"),
        }
    };
    assert!(
        matches!(err, SparkError::ResponseAlreadyReceived(_)),
        "{err:?}"
    );
    assert_eq!(
        err.server_error().and_then(|e| e.operation_id()),
        Some(operation_id.as_str())
    );
    let text = err.to_string();
    assert!(text.contains(&operation_id), "{text}");
    assert!(text.contains("OPERATION_NOT_FOUND"), "{text}");
}
