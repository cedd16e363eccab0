//! The session's PySpark behaviours against the embedded server: eager
//! `sql()`, schemas, tags and interrupts, cancellation, chunked results,
//! the session lifecycle, and the same errors from every read path.

use std::time::Duration;

use arrow_array::{Array, Int64Array};
use arrow_schema::DataType;
use spark_connect_retry::policy::PySparkPolicy;
use spark_connect_retry::policy::RetryPolicy;
use spark_connect_retry::proto::execute_plan_request::request_option::RequestOption;
use spark_connect_retry::proto::{self, Relation};
use spark_connect_retry::retrying::PySparkRetrying;
use spark_connect_retry::retrying::Retrying;
use spark_connect_retry::session::{SparkError, SparkSession, SparkSessionBuilder};
use spark_connect_testkit::TestServer;
use tokio_stream::StreamExt;
use tonic_retry::retrying::RecordingSleeper;

fn builder(server: &TestServer) -> SparkSessionBuilder {
    let retrying = Retrying::pyspark_with(vec![
        RetryPolicy::pyspark_builder()
            .jitter_ms(0.0)
            .build()
            .unwrap(),
    ])
    .with_sleeper(RecordingSleeper::new())
    .with_seed(3);
    SparkSession::builder()
        .remote(server.remote())
        .retrying(retrying)
}

/// A server whose executions run until interrupted (10 rows every 20 ms).
async fn slow_server() -> TestServer {
    TestServer::builder()
        .rows_per_batch(10)
        .batch_delay(Duration::from_millis(20))
        .start()
        .await
        .unwrap()
}

use crate::support::eventually;

#[tokio::test]
async fn sql_is_eager_and_bad_sql_fails_there() {
    let s = TestServer::start().await.unwrap();
    let spark = builder(&s).build().unwrap();
    // Dropped unread: the ExecutePlan was still sent, and answered.
    drop(spark.sql("SELECT id FROM range(10)").await.unwrap());
    assert_eq!(s.calls().execute, 1);
    // relation() stays lazy.
    let lazy = spark.range(0, 10, 1).unwrap();
    assert_eq!(s.calls().execute, 1);
    drop(lazy);
    let err = spark.sql("SELEC oops").await.expect_err("fails at sql()");
    assert_eq!(err.error_class(), Some("PARSE_SYNTAX_ERROR"));
    assert_eq!(err.sql_state(), Some("42601"));
    let server = err.server_error().unwrap();
    assert!(server.operation_id().is_some());
    assert_eq!(server.message_parameters()["error"], "'selec'");
}

/// A real server may send `ExecutionProgress` before the schema (a job is
/// already running when the first report is due). `sql()` must read past it
/// and keep it for the consumer, not read its own held responses back
/// forever (which spun a core in CI). The query runs on a thread of its own,
/// so a spin fails the bound here instead of hanging the test.
#[test]
fn sql_reads_past_leading_progress() {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let ids = rt.block_on(async {
            let s = TestServer::builder()
                .schema_response(false)
                .execution_progress(true)
                .rows_per_batch(100)
                .start()
                .await
                .unwrap();
            let spark = builder(&s).build().unwrap();
            let mut stream = spark.sql("SELECT id FROM range(1000)").await?;
            let mut ids = vec![];
            while let Some(batch) = stream.next_batch().await {
                let batch = batch?;
                let col = batch
                    .column(0)
                    .as_any()
                    .downcast_ref::<Int64Array>()
                    .unwrap();
                ids.extend(col.values().iter().copied());
            }
            Ok::<_, SparkError>(ids)
        });
        let _ = tx.send(ids);
    });
    let ids = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("sql() never returned: it re-read its own held progress response")
        .unwrap();
    assert_eq!(ids, (0..1000).collect::<Vec<i64>>());
}

#[tokio::test]
async fn schema_is_known_at_sql_and_kept_for_empty_results() {
    let s = TestServer::start().await.unwrap();
    let spark = builder(&s).build().unwrap();
    let stream = spark
        .sql("SELECT id, id * 2 AS x FROM range(5, 5)")
        .await
        .unwrap();
    let schema = stream.schema().expect("schema at sql()");
    let fields: Vec<(&str, &DataType)> = schema
        .fields()
        .iter()
        .map(|f| (f.name().as_str(), f.data_type()))
        .collect();
    assert_eq!(fields, [("id", &DataType::Int64), ("x", &DataType::Int64)]);
    let batches = stream.collect().await.unwrap();
    assert_eq!(batches.len(), 1);
    assert_eq!(batches[0].num_rows(), 0);
    assert_eq!(batches[0].schema().field(1).name(), "x");
}

#[tokio::test]
async fn tags_go_with_every_execution_and_interrupt_tag_hits_only_them() {
    let s = slow_server().await;
    let spark = builder(&s).build().unwrap();
    spark.add_tag("etl").unwrap();
    spark.add_tag("etl").unwrap();
    spark.add_tag("nightly").unwrap();
    let mut tagged = spark.sql("SELECT id FROM range(1000000)").await.unwrap();
    assert_eq!(s.last_execute_request().unwrap().tags, ["etl", "nightly"]);
    spark.remove_tag("etl").unwrap();
    spark.clear_tags();
    let mut other = spark.sql("SELECT id FROM range(1000000)").await.unwrap();
    assert!(s.last_execute_request().unwrap().tags.is_empty());
    assert!(matches!(
        spark.add_tag("a,b"),
        Err(SparkError::InvalidTag { .. })
    ));

    let ids = spark.interrupt_tag("nightly").await.unwrap();
    assert_eq!(ids, [tagged.operation_id().to_owned()]);
    let err = loop {
        match tagged.next_batch().await {
            Some(Ok(_)) => continue,
            Some(Err(e)) => break e,
            None => panic!("ended without the interrupt"),
        }
    };
    assert_eq!(err.error_class(), Some("OPERATION_CANCELED"), "{err}");
    // The untagged query still runs.
    other.next_batch().await.unwrap().unwrap();
    let op = other.operation_id().to_owned();
    assert_eq!(other.cancel().await.unwrap(), [op]);
}

#[tokio::test]
async fn cancel_interrupts_then_releases() {
    let s = slow_server().await;
    let spark = builder(&s).build().unwrap();
    let mut stream = spark.sql("SELECT id FROM range(1000000)").await.unwrap();
    stream.next_batch().await.unwrap().unwrap();
    let op = stream.operation_id().to_owned();
    assert_eq!(stream.cancel().await.unwrap(), std::slice::from_ref(&op));
    assert_eq!(s.calls().interrupt, 1);
    eventually("the execution is released", || {
        s.live_executions().is_empty()
    })
    .await;
    assert!(
        s.release_requests().iter().all(|r| r.operation_id == op),
        "only this execution was released"
    );
}

#[tokio::test]
async fn dropping_an_unfinished_stream_can_interrupt_it() {
    let s = slow_server().await;
    let spark = builder(&s).interrupt_on_drop(true).build().unwrap();
    let mut stream = spark.sql("SELECT id FROM range(1000000)").await.unwrap();
    stream.next_batch().await.unwrap().unwrap();
    drop(stream);
    eventually("interrupted", || s.calls().interrupt == 1).await;
    eventually("released", || s.live_executions().is_empty()).await;

    // By default a drop only releases.
    let plain = builder(&s).build().unwrap();
    let mut stream = plain.sql("SELECT id FROM range(1000000)").await.unwrap();
    stream.next_batch().await.unwrap().unwrap();
    drop(stream);
    eventually("released", || s.live_executions().is_empty()).await;
    assert_eq!(s.calls().interrupt, 1);
    // A finished stream is neither interrupted nor released again.
    let done = spark.sql("SELECT id FROM range(30)").await.unwrap();
    assert_eq!(done.collect().await.unwrap().len(), 3);
    assert_eq!(s.calls().interrupt, 1);
}

#[tokio::test]
async fn batches_larger_than_a_message_arrive_in_chunks() {
    // 100 000 rows of two Int64 columns: ~1.6 MB per batch, against a
    // 256 KiB client message limit.
    let s = TestServer::builder()
        .rows_per_batch(100_000)
        .start()
        .await
        .unwrap();
    let remote = format!("{}/;grpc_max_message_size=262144", s.remote());
    let spark = SparkSession::builder()
        .remote(remote.clone())
        .build()
        .unwrap();
    let batches = spark
        .sql("SELECT id, id * 2 AS x FROM range(300000)")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    let ids: Vec<i64> = batches
        .iter()
        .flat_map(|b| {
            let c = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
            c.values().to_vec()
        })
        .collect();
    assert!(ids.iter().copied().eq(0..300_000));
    let options = s.last_execute_request().unwrap().request_options;
    let chunking = options
        .iter()
        .find_map(|o| match &o.request_option {
            Some(RequestOption::ResultChunkingOptions(c)) => Some(*c),
            _ => None,
        })
        .expect("chunking requested");
    assert!(chunking.allow_arrow_batch_chunking);
    assert_eq!(
        chunking.preferred_arrow_chunk_size,
        Some(256 * 1024 - 64 * 1024)
    );

    let unchunked = SparkSession::builder()
        .remote(remote)
        .arrow_chunking(false)
        .build()
        .unwrap();
    let err = match unchunked.sql("SELECT id FROM range(300000)").await {
        Ok(s) => s.collect().await.unwrap_err(),
        Err(e) => e,
    };
    assert_eq!(
        err.server_error().map(|e| e.code()),
        Some(tonic::Code::OutOfRange),
        "{err}"
    );
}

#[tokio::test]
async fn close_releases_the_server_session_once() {
    let s = TestServer::start().await.unwrap();
    let spark = builder(&s).build().unwrap();
    spark.spark_version().await.unwrap();
    spark.close().await.unwrap();
    spark.close().await.unwrap();
    spark.release_session().await.unwrap();
    assert_eq!(s.calls().release_session, 1);
    let err = spark.sql("SELECT 1").await.unwrap_err();
    assert!(matches!(err, SparkError::SessionClosed));
    assert!(err.to_string().contains("no active session"), "{err}");
    assert!(matches!(
        spark.config_get(&["a"]).await,
        Err(SparkError::SessionClosed)
    ));
}

fn bad_sql() -> Relation {
    Relation {
        common: None,
        rel_type: Some(proto::relation::RelType::Sql(proto::Sql {
            query: "SELEC nothing".into(),
            ..Default::default()
        })),
    }
}

#[tokio::test]
async fn stream_and_next_batch_give_the_same_enriched_errors() {
    let s = TestServer::start().await.unwrap();
    let spark = builder(&s).build().unwrap();
    let mut by_next_batch = spark.relation(bad_sql()).unwrap();
    let a = by_next_batch.next_batch().await.unwrap().unwrap_err();
    let mut by_stream = spark.relation(bad_sql()).unwrap();
    let b = by_stream.next().await.unwrap().unwrap_err();
    assert!(by_stream.next().await.is_none(), "an error ends the stream");
    for (err, stream) in [(&a, &by_next_batch), (&b, &by_stream)] {
        let server = err.server_error().unwrap();
        assert_eq!(server.error_class(), Some("PARSE_SYNTAX_ERROR"));
        assert_eq!(server.sql_state(), Some("42601"));
        assert_eq!(server.operation_id(), Some(stream.operation_id()));
        assert!(server.details().is_some(), "enriched: {server:?}");
    }
    assert_eq!(s.calls().fetch_error_details, 2);
}
