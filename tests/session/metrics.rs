//! The session's metrics (feature `otel`) against the embedded server,
//! read back from the SDK's in-memory exporter after scripted faults:
//! gRPC's (gRFC A66, A96) for unary calls and releases, recorded by the
//! same loop code as any `tonic-retry` user's, and the session's own
//! `spark_connect.client.*` instruments, equal to what the streams counted.
#![cfg(feature = "otel")]

use std::time::Duration;

use spark_connect_retry::policy::PySparkPolicy;
use spark_connect_retry::policy::RetryPolicy;
use spark_connect_retry::retrying::PySparkRetrying;
use spark_connect_retry::retrying::Retrying;
use spark_connect_retry::session::{
    ArrowStream, ResultBatchRows, SparkSession, SparkSessionBuilder,
};
use spark_connect_testkit::held_clock::HeldClock;
use spark_connect_testkit::{Fault, Rpc, TestServer};
use tonic_retry::retrying::RecordingSleeper;
use tonic_retry_echo::metrics::{Pipeline, Recorded};

use crate::support::arrow_data::{self, schema};

const ANALYZE: (&str, &str) = (
    "grpc.method",
    "spark.connect.SparkConnectService/AnalyzePlan",
);
const RELEASE: (&str, &str) = (
    "grpc.method",
    "spark.connect.SparkConnectService/ReleaseExecute",
);
const REATTACHES: &str = "spark_connect.client.result.reattaches";

fn builder(s: &TestServer, pipeline: &Pipeline, sleeper: &RecordingSleeper) -> SparkSessionBuilder {
    let policy = RetryPolicy::pyspark_builder()
        .jitter_ms(0.0)
        .build()
        .unwrap();
    SparkSession::builder()
        .remote(s.remote())
        // Not about batch sizes: no Config call of the client's own.
        .result_batch_rows(ResultBatchRows::ServerDefault)
        .retrying(
            Retrying::pyspark_with(vec![policy])
                .with_sleeper(sleeper.clone())
                .with_seed(3),
        )
        .meter(pipeline.meter())
}

/// Read the stream to its end; the rows.
async fn drain(stream: &mut ArrowStream) -> u64 {
    let mut rows = 0;
    while let Some(b) = stream.next_batch().await {
        rows += b.unwrap().num_rows() as u64;
    }
    rows
}

/// The reattaches recorded for `cause`, 0 if none.
fn reattaches(m: &Recorded, cause: &str) -> u64 {
    m.of(REATTACHES)
        .iter()
        .filter(|p| p.labels.get("cause").map(String::as_str) == Some(cause))
        .map(|p| p.sum as u64)
        .sum()
}

fn counter(m: &Recorded, name: &str) -> u64 {
    m.of(name).iter().map(|p| p.sum as u64).sum()
}

#[tokio::test]
async fn unary_retries_graceful_ends_a_fault_rows_and_releases() {
    let s = TestServer::builder()
        .rows_per_batch(100)
        .max_responses_per_stream(4)
        .start()
        .await
        .unwrap();
    let (pipeline, sleeper) = (Pipeline::new(), RecordingSleeper::new());
    let spark = builder(&s, &pipeline, &sleeper).build().unwrap();
    s.faults()
        .push(Fault::unavailable().on(Rpc::AnalyzePlan).times(2));
    spark.spark_version().await.unwrap();
    let unary_sleeps: f64 = sleeper.sleeps().iter().map(Duration::as_secs_f64).sum();
    s.faults().push(
        Fault::reset_connection()
            .on(Rpc::ExecutePlan)
            .after_responses(2),
    );
    let mut stream = spark.sql("SELECT id FROM range(1000)").await.unwrap();
    assert_eq!(drain(&mut stream).await, 1000);
    assert!(spark.releases().wait_idle(Duration::from_secs(10)).await);
    let m = pipeline.read();

    // gRPC's instruments for the unary call, under its method and target.
    let target = ("grpc.target", &*s.addr().to_string());
    assert_eq!(
        m.value("grpc.client.attempt.started", &[ANALYZE, target]).1,
        3.0
    );
    let failed = ("grpc.status", "UNAVAILABLE");
    assert_eq!(
        m.value("grpc.client.attempt.duration", &[ANALYZE, failed])
            .0,
        2
    );
    let ok = ("grpc.status", "OK");
    assert_eq!(m.value("grpc.client.call.duration", &[ANALYZE, ok]).0, 1);
    assert_eq!(m.value("grpc.client.call.retries", &[ANALYZE]), (1, 2.0));
    let (n, delay) = m.value("grpc.client.call.retry_delay", &[ANALYZE]);
    assert_eq!(n, 1);
    assert!(
        (delay - unary_sleeps).abs() < 1e-9,
        "{delay} vs {unary_sleeps}"
    );
    assert!(unary_sleeps > 0.0);

    // The stream's own: each reattach by its cause, as the stream counted.
    let stats = stream.stats();
    assert!(stats.graceful_ends >= 2, "{stats:?}");
    assert_eq!(reattaches(&m, "graceful_end"), stats.graceful_ends);
    assert_eq!(reattaches(&m, "fault"), 1, "the reset: {stats:?}");
    assert_eq!(reattaches(&m, "stall"), 0);
    assert_eq!(
        counter(&m, REATTACHES),
        stats.reattaches,
        "every reattach has one cause"
    );
    assert_eq!(s.calls().reattach, stats.reattaches);
    assert_eq!(counter(&m, "spark_connect.client.result.rows"), 1000);
    // 1000 Int64 values and their IPC framing.
    assert!(counter(&m, "spark_connect.client.result.bytes") > 8000);

    // Background releases: their outcome, and gRPC's instruments per call.
    let released = spark.releases().sent();
    assert!(released > 0);
    let ok_releases = m.one("spark_connect.client.releases", &[("outcome", "ok")]);
    assert_eq!(ok_releases.sum as u64, released);
    assert_eq!(
        m.value("grpc.client.call.duration", &[RELEASE, ok]).0,
        released
    );
    assert!(m.absent("spark_connect.client.result.resumptions"));
    assert!(m.absent("spark_connect.client.session.renewals"));
    // Labels never name an operation or a session.
    for p in &m.points {
        for (k, v) in &p.labels {
            assert!(!v.contains(&spark.session_id()), "{k}={v}");
            assert!(!v.contains(stream.operation_id()), "{k}={v}");
        }
    }
}

/// A stall on a clock that moves only once the client has read the 3
/// responses before it (exactly one stall, one reattach for it), then a
/// lost ExecutePlan, still on that clock: no idle timeout can fire
/// while its bytes are on their way.
#[tokio::test(start_paused = true)]
async fn a_stall_and_a_lost_execution() {
    let clock = HeldClock::hold();
    let s = TestServer::builder()
        .rows_per_batch(500)
        .start()
        .await
        .unwrap();
    let (pipeline, sleeper) = (Pipeline::new(), RecordingSleeper::new());
    let idle = Duration::from_millis(300);
    let spark = builder(&s, &pipeline, &sleeper)
        .idle_timeout(Some(idle))
        .build()
        .unwrap();
    s.faults().push(
        Fault::stall_forever()
            .on(Rpc::ExecutePlan)
            .after_responses(3),
    );
    let mut stalled = spark.sql("SELECT id FROM range(5000)").await.unwrap();
    let stats = stalled.stats_handle();
    let (rows, advances) = tokio::join!(
        drain(&mut stalled),
        clock.fire(
            idle,
            || stats.snapshot().responses == 3,
            || stats.snapshot().stalls > 0
        )
    );
    assert_eq!(advances, 1, "the client waited when the clock moved");
    assert_eq!(rows, 5000);
    let m = pipeline.read();
    assert_eq!(reattaches(&m, "stall"), 1, "{:?}", stalled.stats());
    assert_eq!(counter(&m, REATTACHES), 1, "{:?}", stalled.stats());
    assert_eq!(s.calls().reattach, 1);
    assert_eq!(stalled.stats().stalls, 1);

    // An ExecutePlan the server never ran: re-executed after NOT_FOUND.
    s.faults().push(Fault::lose_request().on(Rpc::ExecutePlan));
    let mut lost = spark.sql("SELECT id FROM range(2000)").await.unwrap();
    assert_eq!(drain(&mut lost).await, 2000);
    clock.release().await;
    let m = pipeline.read();
    let re_executes = counter(&m, "spark_connect.client.result.re_executes");
    assert_eq!(re_executes, lost.stats().re_executes);
    assert_eq!(re_executes, 1);
    assert_eq!(lost.stats().stalls, 0, "{:?}", lost.stats());
    assert_eq!(counter(&m, "spark_connect.client.result.rows"), 7000);
}

#[tokio::test]
async fn a_restart_renews_the_session_and_resumes_the_query() {
    let s = TestServer::builder()
        .rows_per_batch(1000)
        .start()
        .await
        .unwrap();
    let (pipeline, sleeper) = (Pipeline::new(), RecordingSleeper::new());
    let spark = builder(&s, &pipeline, &sleeper)
        .renew_stale_session(true)
        .resume_queries(true)
        .build()
        .unwrap();
    // The first execution stops after the schema and 3 batches; the
    // restart comes while the stream waits for more.
    s.faults().push(
        Fault::stall_forever()
            .on(Rpc::ExecutePlan)
            .after_responses(4),
    );
    let mut stream = spark.sql("SELECT id FROM range(20000)").await.unwrap();
    let mut rows = 0;
    while rows < 3000 {
        rows += stream.next_batch().await.unwrap().unwrap().num_rows();
    }
    s.simulate_restart();
    assert_eq!(drain(&mut stream).await + rows as u64, 20_000);
    let m = pipeline.read();
    assert_eq!(stream.stats().resumptions, 1);
    assert_eq!(counter(&m, "spark_connect.client.result.resumptions"), 1);
    assert_eq!(spark.session_renewals(), 1);
    assert_eq!(counter(&m, "spark_connect.client.session.renewals"), 1);
    let stats = stream.stats();
    assert_eq!(counter(&m, REATTACHES), stats.reattaches, "{stats:?}");
    // Rows received: every row once, the re-executed ones replayed and
    // verified before delivery counted as received too.
    assert!(counter(&m, "spark_connect.client.result.rows") >= 20_000);
}

#[tokio::test]
async fn upload_retries_by_outcome() {
    let s = TestServer::start().await.unwrap();
    let (pipeline, sleeper) = (Pipeline::new(), RecordingSleeper::new());
    let spark = builder(&s, &pipeline, &sleeper).build().unwrap();
    // Small limits: a few hundred KiB are uploaded as cached artifacts.
    spark
        .config_set(&[
            ("spark.sql.session.localRelationCacheThreshold", "100000"),
            ("spark.sql.session.localRelationChunkSizeBytes", "65536"),
        ])
        .await
        .unwrap();
    s.faults()
        .push(Fault::unavailable().on(Rpc::ArtifactStatus).times(2));
    let df = spark
        .create_dataframe(schema(), arrow_data::rows(38_400, 10_000))
        .await
        .unwrap();
    assert!(df.is_cached());
    assert_eq!(df.upload_stats().retries, 2);
    let m = pipeline.read();
    let retries = m.one("spark_connect.client.upload.retries", &[("outcome", "ok")]);
    assert_eq!(retries.sum, 2.0);
    // The unary Config calls (the set, the thresholds read) are metered too.
    let config = ("grpc.method", "spark.connect.SparkConnectService/Config");
    let started = m.value("grpc.client.attempt.started", &[config]).1;
    assert_eq!(started as u64, s.calls().config);
}
