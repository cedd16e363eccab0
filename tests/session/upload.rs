//! `create_dataframe` against the embedded server: small and large data
//! read back exactly, cuts before, during and after the last message of an
//! upload (each artifact stored exactly once, the bytes sent recorded), a
//! resumed upload skipping what the server holds, a CRC mismatch as a
//! clear error, and temporary views over the data read back with SQL.

use crate::support::arrow_data;
use spark_connect_retry::retrying::PySparkRetrying;

use std::sync::Arc;

use arrow_array::{Array, Int64Array, RecordBatch};
use arrow_data::schema;
use arrow_schema::{DataType, Field, Schema};
use spark_connect_retry::proto::relation::RelType;
use spark_connect_retry::retrying::Retrying;
use spark_connect_retry::session::{DataFrame, SparkError, SparkSession, UploadError};
use spark_connect_testkit::{Fault, Rpc, TestServer};
use tonic_retry::retrying::RecordingSleeper;

/// Small limits, so a few hundred KiB make several chunks and groups:
/// 64 KiB chunks, at most 3 per `AddArtifacts` stream (min with 200 KiB).
const CONF: [(&str, &str); 3] = [
    ("spark.sql.session.localRelationCacheThreshold", "100000"),
    ("spark.sql.session.localRelationChunkSizeBytes", "65536"),
    (
        "spark.sql.session.localRelationBatchOfChunksSizeBytes",
        "204800",
    ),
];

/// `id, id * 2` for `0..n` in batches of 10 000 rows.
fn rows(n: i64) -> impl Iterator<Item = RecordBatch> {
    arrow_data::rows(n, 10_000)
}

async fn session(server: &TestServer, sleeper: &RecordingSleeper) -> SparkSession {
    let spark = SparkSession::builder()
        .remote(server.remote())
        .retrying(
            Retrying::pyspark()
                .with_sleeper(sleeper.clone())
                .with_seed(3),
        )
        .build()
        .unwrap();
    spark.config_set(&CONF).await.unwrap();
    spark
}

/// Every row of `df`, `0..n`, exactly once, in order, with `x = 2 * id`.
async fn assert_read_back(df: &DataFrame, n: i64) {
    assert_rows(&df.collect().await.unwrap(), n);
}

/// `SELECT * FROM view` gives every row of `0..n` exactly once, in order.
async fn assert_view(spark: &SparkSession, view: &str, n: i64) {
    let rows = spark.sql(&format!("SELECT * FROM {view}")).await.unwrap();
    assert_rows(&rows.collect().await.unwrap(), n);
}

/// Every row of `0..n` exactly once, in order, with `x = 2 * id`.
fn assert_rows(batches: &[RecordBatch], n: i64) {
    let mut next = 0;
    for b in batches {
        let col = |i: usize| {
            b.column(i)
                .as_any()
                .downcast_ref::<Int64Array>()
                .unwrap()
                .clone()
        };
        let (ids, xs) = (col(0), col(1));
        assert_eq!(ids.null_count() + xs.null_count(), 0);
        for (id, x) in ids.values().iter().zip(xs.values()) {
            assert_eq!((*id, *x), (next, 2 * next), "row {next}");
            next += 1;
        }
    }
    assert_eq!(next, n, "row count");
}

/// The data hashes of a cached relation.
fn hashes(df: &DataFrame) -> Vec<String> {
    match &df.relation().rel_type {
        Some(RelType::ChunkedCachedLocalRelation(r)) => r.data_hashes.clone(),
        other => panic!("not cached: {other:?}"),
    }
}

/// Each artifact of `df` is on the server, written exactly once.
fn assert_stored_once(server: &TestServer, spark: &SparkSession, df: &DataFrame) {
    let held = server.artifacts(&spark.session_id());
    for h in hashes(df) {
        let name = format!("cache/{h}");
        assert!(held.contains_key(&name), "{name} missing");
        assert_eq!(
            server.artifact_writes(&spark.session_id(), &name),
            1,
            "{name}"
        );
    }
}

/// 600 KiB in memory: 10 chunks of ~64 KiB, in groups of 3.
const N: i64 = 38_400;

#[tokio::test]
async fn small_data_goes_inline_and_reads_back_exactly() {
    let server = TestServer::start().await.unwrap();
    let sleeper = RecordingSleeper::new();
    let spark = session(&server, &sleeper).await;
    let df = spark.create_dataframe(schema(), rows(5_000)).await.unwrap();
    assert!(!df.is_cached());
    assert_eq!(server.calls().add_artifacts, 0);
    assert_read_back(&df, 5_000).await;
    // No rows at all: inline too, with the schema.
    let empty = spark.create_dataframe(schema(), rows(0)).await.unwrap();
    assert!(!empty.is_cached());
    assert_read_back(&empty, 0).await;
    server.shutdown().await;
}

#[tokio::test]
async fn large_data_is_uploaded_in_groups_and_reads_back_exactly() {
    let server = TestServer::start().await.unwrap();
    let sleeper = RecordingSleeper::new();
    let spark = session(&server, &sleeper).await;
    let df = spark.create_dataframe(schema(), rows(N)).await.unwrap();
    let stats = df.upload_stats();
    assert!(df.is_cached());
    assert_eq!(stats.artifacts, hashes(&df).len() as u64);
    assert!(stats.artifacts >= 9, "{stats:?}");
    assert_eq!(stats.artifacts_sent, stats.artifacts, "{stats:?}");
    assert_eq!(stats.streams, stats.artifacts.div_ceil(3), "{stats:?}");
    assert_eq!((stats.retries, stats.artifacts_skipped), (0, 0));
    let calls = server.upload_calls();
    assert_eq!(calls.len() as u64, stats.streams);
    assert_eq!(calls.iter().map(|c| c.bytes).sum::<u64>(), stats.bytes_sent);
    assert_stored_once(&server, &spark, &df);
    assert_read_back(&df, N).await;
    assert!(sleeper.sleeps().is_empty());
    server.shutdown().await;
}

/// A reset of the first upload stream after `k` messages, or (`None`)
/// after the server stored the whole stream, before its answer.
async fn through_one_reset(k: Option<u32>) -> (TestServer, SparkSession, DataFrame) {
    let server = TestServer::start().await.unwrap();
    let sleeper = RecordingSleeper::new();
    let spark = session(&server, &sleeper).await;
    let fault = Fault::reset_connection().on(Rpc::AddArtifacts);
    server.faults().push(match k {
        Some(k) => fault.after_requests(k),
        None => fault,
    });
    let df = spark.create_dataframe(schema(), rows(N)).await.unwrap();
    let stats = df.upload_stats();
    assert_eq!(stats.retries, 1, "{stats:?}");
    assert_eq!(sleeper.sleeps_ms(), vec![50], "one policy wait");
    assert_stored_once(&server, &spark, &df);
    assert_read_back(&df, N).await;
    (server, spark, df)
}

#[tokio::test]
async fn a_reset_before_the_first_message_resends_the_group_once() {
    let (server, _spark, df) = through_one_reset(Some(0)).await;
    let stats = df.upload_stats();
    let calls = server.upload_calls();
    // The cut call read nothing and stored nothing; the group was sent again.
    assert!(
        calls[0].stored.is_empty() && calls[0].bytes == 0,
        "{:?}",
        calls[0]
    );
    assert_eq!(stats.artifacts_sent, stats.artifacts + 3, "{stats:?}");
    assert_eq!(stats.artifacts_skipped, 0);
    server.shutdown().await;
}

#[tokio::test]
async fn a_reset_mid_stream_resends_the_group_and_stores_each_artifact_once() {
    let (server, _spark, df) = through_one_reset(Some(3)).await;
    let stats = df.upload_stats();
    let calls = server.upload_calls();
    let cut = &calls[0];
    assert!(cut.stored.is_empty(), "a cut stream stores nothing");
    assert_eq!(cut.messages, 3);
    assert!(cut.bytes > 0);
    // The first group went twice (cut, then whole); the others once.
    assert_eq!(stats.artifacts_sent, stats.artifacts + 3, "{stats:?}");
    assert_eq!(stats.artifacts_skipped, 0);
    server.shutdown().await;
}

#[tokio::test]
async fn a_reset_after_the_last_message_skips_what_the_server_stored() {
    let (server, _spark, df) = through_one_reset(None).await;
    let stats = df.upload_stats();
    let calls = server.upload_calls();
    // The first stream was stored whole, then its answer was lost: the retry
    // asked ArtifactStatus and sent none of it again.
    assert_eq!(calls[0].stored.len(), 3);
    assert_eq!(stats.artifacts_skipped, 3, "{stats:?}");
    assert_eq!(stats.artifacts_sent, stats.artifacts, "{stats:?}");
    assert_eq!(calls.iter().map(|c| c.bytes).sum::<u64>(), stats.bytes_sent);
    server.shutdown().await;
}

#[tokio::test]
async fn the_same_data_again_sends_nothing() {
    let server = TestServer::start().await.unwrap();
    let sleeper = RecordingSleeper::new();
    let spark = session(&server, &sleeper).await;
    let first = spark.create_dataframe(schema(), rows(N)).await.unwrap();
    let calls = server.calls().add_artifacts;
    let again = spark.create_dataframe(schema(), rows(N)).await.unwrap();
    let stats = again.upload_stats();
    assert_eq!(
        (stats.artifacts_sent, stats.bytes_sent, stats.streams),
        (0, 0, 0)
    );
    assert_eq!(stats.artifacts_skipped, first.upload_stats().artifacts);
    assert_eq!(
        server.calls().add_artifacts,
        calls,
        "no AddArtifacts at all"
    );
    assert_eq!(again.relation(), first.relation());
    server.shutdown().await;
}

#[tokio::test]
async fn a_crc_mismatch_is_a_clear_error_and_not_retried() {
    let server = TestServer::start().await.unwrap();
    let sleeper = RecordingSleeper::new();
    let spark = session(&server, &sleeper).await;
    server.faults().push(Fault::corrupt_chunk());
    let err = spark
        .create_dataframe(schema(), rows(N))
        .await
        .expect_err("corrupted in flight");
    match &err {
        SparkError::Upload(UploadError::CrcMismatch { name }) => {
            assert!(name.starts_with("cache/"), "{name}");
            assert!(err.to_string().contains("CRC mismatch"), "{err}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(server.calls().add_artifacts, 1, "never retried");
    assert!(sleeper.sleeps().is_empty());
    server.shutdown().await;
}

#[tokio::test]
async fn a_batch_with_another_schema_is_named() {
    let server = TestServer::start().await.unwrap();
    let sleeper = RecordingSleeper::new();
    let spark = session(&server, &sleeper).await;
    let other = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)]));
    let bad = RecordBatch::try_new(other, vec![Arc::new(Int64Array::from(vec![1]))]).unwrap();
    let batches = rows(20_000).chain([bad]);
    match spark.create_dataframe(schema(), batches).await {
        Err(SparkError::Upload(UploadError::SchemaMismatch { index, .. })) => {
            assert_eq!(index, 2)
        }
        other => panic!("{other:?}"),
    }
    server.shutdown().await;
}

#[tokio::test]
async fn unavailable_on_either_rpc_is_retried_by_the_policy() {
    let server = TestServer::start().await.unwrap();
    let sleeper = RecordingSleeper::new();
    let spark = session(&server, &sleeper).await;
    server
        .faults()
        .push(Fault::unavailable().on(Rpc::ArtifactStatus))
        .push(Fault::unavailable().on(Rpc::AddArtifacts).after_requests(2))
        .push(Fault::unavailable().on(Rpc::ArtifactStatus).times(2));
    let df = spark.create_dataframe(schema(), rows(N)).await.unwrap();
    let stats = df.upload_stats();
    assert_eq!(stats.retries, 4, "{stats:?}");
    // All four hit the first upload group, one retry loop: PySpark's
    // backoff (x4 from 50 ms), jittered from 2 s on (seeded: 3200 + 47).
    assert_eq!(sleeper.sleeps_ms(), [50, 200, 800, 3247]);
    assert_stored_once(&server, &spark, &df);
    assert_read_back(&df, N).await;
    server.shutdown().await;
}

#[tokio::test]
async fn a_server_error_is_spark_s_error_and_not_retried() {
    let server = TestServer::start().await.unwrap();
    let sleeper = RecordingSleeper::new();
    let spark = session(&server, &sleeper).await;
    server.faults().push(
        Fault::status(tonic::Code::PermissionDenied, "uploads are off").on(Rpc::AddArtifacts),
    );
    let err = spark
        .create_dataframe(schema(), rows(N))
        .await
        .expect_err("refused");
    let server_error = err.server_error().expect("a server error");
    assert_eq!(server_error.code(), tonic::Code::PermissionDenied);
    assert!(sleeper.sleeps().is_empty());
    assert_eq!(server.calls().add_artifacts, 1);
    server.shutdown().await;
}

/// The view command of the last ExecutePlan: its name, whether it replaces,
/// whether it is global, and whether its input is `df`'s relation.
fn last_view_command(server: &TestServer, df: &DataFrame) -> (String, bool, bool, bool) {
    use spark_connect_retry::proto::{command::CommandType, plan::OpType};
    let req = server.last_execute_request().expect("an ExecutePlan");
    match req.plan.and_then(|p| p.op_type) {
        Some(OpType::Command(c)) => match c.command_type {
            Some(CommandType::CreateDataframeView(v)) => (
                v.name,
                v.replace,
                v.is_global,
                v.input.as_ref() == Some(df.relation()),
            ),
            other => panic!("{other:?}"),
        },
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_view_over_inline_data_reads_back_exactly_with_sql() {
    let server = TestServer::start().await.unwrap();
    let sleeper = RecordingSleeper::new();
    let spark = session(&server, &sleeper).await;
    let df = spark.create_dataframe(schema(), rows(5_000)).await.unwrap();
    assert!(!df.is_cached());
    df.create_or_replace_temp_view("small").await.unwrap();
    assert_eq!(
        last_view_command(&server, &df),
        ("small".to_owned(), true, false, true)
    );
    // Names are case-insensitive, as in Spark.
    assert_view(&spark, "SMALL", 5_000).await;
    server.shutdown().await;
}

#[tokio::test]
async fn a_view_over_cached_data_reads_back_exactly_without_uploading_again() {
    let server = TestServer::start().await.unwrap();
    let sleeper = RecordingSleeper::new();
    let spark = session(&server, &sleeper).await;
    let df = spark.create_dataframe(schema(), rows(N)).await.unwrap();
    assert!(df.is_cached());
    let uploads = server.calls().add_artifacts;
    df.create_temp_view("big").await.unwrap();
    assert_eq!(
        last_view_command(&server, &df),
        ("big".to_owned(), false, false, true)
    );
    assert_view(&spark, "big", N).await;
    assert_view(&spark, "big", N).await;
    assert_eq!(server.calls().add_artifacts, uploads);
    assert!(sleeper.sleeps().is_empty());
    server.shutdown().await;
}

#[tokio::test]
async fn a_taken_name_fails_unless_replaced() {
    let server = TestServer::start().await.unwrap();
    let sleeper = RecordingSleeper::new();
    let spark = session(&server, &sleeper).await;
    let five = spark.create_dataframe(schema(), rows(5)).await.unwrap();
    let seven = spark.create_dataframe(schema(), rows(7)).await.unwrap();
    five.create_temp_view("t").await.unwrap();
    let err = seven.create_temp_view("T").await.expect_err("taken");
    assert_eq!(err.error_class(), Some("TEMP_TABLE_OR_VIEW_ALREADY_EXISTS"));
    assert_eq!(err.sql_state(), Some("42P07"));
    let params = err.server_error().unwrap().message_parameters();
    assert_eq!(params["relationName"], "`T`");
    assert_view(&spark, "t", 5).await;
    seven.create_or_replace_temp_view("T").await.unwrap();
    assert_view(&spark, "t", 7).await;
    assert!(
        sleeper.sleeps().is_empty(),
        "Spark's errors are not retried"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn unknown_tables_and_bad_view_names_are_named() {
    let server = TestServer::start().await.unwrap();
    let sleeper = RecordingSleeper::new();
    let spark = session(&server, &sleeper).await;
    // Eager: the missing table fails sql() itself.
    let err = spark.sql("SELECT * FROM nope").await.expect_err("no table");
    assert_eq!(err.error_class(), Some("TABLE_OR_VIEW_NOT_FOUND"));
    assert_eq!(err.sql_state(), Some("42P01"));
    let df = spark.create_dataframe(schema(), rows(3)).await.unwrap();
    let executes = server.calls().execute;
    match df.create_temp_view("").await {
        Err(SparkError::InvalidViewName { name, .. }) => assert_eq!(name, ""),
        other => panic!("{other:?}"),
    }
    assert_eq!(server.calls().execute, executes, "refused before sending");
    let err = df.create_temp_view("my view").await.expect_err("bad name");
    assert_eq!(err.error_class(), Some("_LEGACY_ERROR_TEMP_1321"));
    assert!(
        err.to_string().contains("Invalid view name: my view."),
        "{err}"
    );
    // Another session does not see this session's views.
    df.create_temp_view("mine").await.unwrap();
    let other = session(&server, &sleeper).await;
    let err = other
        .sql("SELECT * FROM mine")
        .await
        .expect_err("not shared");
    assert_eq!(err.error_class(), Some("TABLE_OR_VIEW_NOT_FOUND"));
    server.shutdown().await;
}

#[tokio::test]
async fn a_view_command_through_a_cut_connection_runs_once() {
    let server = TestServer::start().await.unwrap();
    let sleeper = RecordingSleeper::new();
    let spark = session(&server, &sleeper).await;
    let df = spark.create_dataframe(schema(), rows(N)).await.unwrap();
    // Cut after the server ran the command: the client reattaches and reads
    // its end; a second run would find the name taken.
    server
        .faults()
        .push(Fault::reset_connection().on(Rpc::ExecutePlan));
    df.create_temp_view("once").await.unwrap();
    assert_eq!(server.calls().execute, 1);
    assert!(server.calls().reattach >= 1, "{:?}", server.calls());
    // A lost request: never run, so it is sent again.
    server
        .faults()
        .push(Fault::lose_request().on(Rpc::ExecutePlan));
    df.create_temp_view("twice").await.unwrap();
    assert_eq!(server.calls().execute, 3);
    assert_view(&spark, "once", N).await;
    assert_view(&spark, "twice", N).await;
    server.shutdown().await;
}
