//! The session's PySpark behaviours against a real server: eager `sql()`,
//! schemas of empty results, cancellation, tags, and rows larger than a
//! gRPC message.

use std::sync::Arc;
use std::time::Duration;

use arrow_array::{Array, StringArray};
use arrow_schema::DataType;
use spark_connect_retry::session::{ArrowStream, SparkError, SparkSession};
use tokio::sync::Notify;

use crate::{remote, session};

/// A query that runs until interrupted (minutes), on one partition: one
/// task slot of the server's two.
const LONG_QUERY: &str =
    "SELECT count(*) AS c FROM range(0, 100000000000, 1, 1) a WHERE a.id % 7 = 3";

/// Held by tests that run [`LONG_QUERY`]s, so that at most two run at once
/// and the other tests still find a free slot soon.
static LONG_QUERIES: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A table name no other run uses.
fn unique_table(spark: &SparkSession) -> String {
    format!("t_{}", &spark.session_id().replace('-', "")[..12])
}

real_test!(
    ddl_runs_even_if_the_stream_is_dropped_unread,
    needs = [SPARK]
);
async fn ddl_runs_even_if_the_stream_is_dropped_unread() {
    let Some(url) = remote("SPARK_CONNECT_TEST_REMOTE") else {
        return;
    };
    let spark = session(&url);
    let table = unique_table(&spark);
    drop(
        spark
            .sql(&format!("CREATE TABLE {table} (id BIGINT) USING parquet"))
            .await
            .unwrap(),
    );
    let batches = spark
        .sql(&format!("SELECT count(*) AS n FROM {table}"))
        .await
        .expect("the table exists")
        .collect()
        .await
        .unwrap();
    assert_eq!(batches.iter().map(|b| b.num_rows()).sum::<usize>(), 1);
    spark
        .sql(&format!("DROP TABLE {table}"))
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    spark.close().await.unwrap();
}

real_test!(empty_result_keeps_its_schema, needs = [SPARK]);
async fn empty_result_keeps_its_schema() {
    let Some(url) = remote("SPARK_CONNECT_TEST_REMOTE") else {
        return;
    };
    let spark = session(&url);
    let stream = spark
        .sql("SELECT id, CAST(id AS STRING) AS s, id * 1.5D AS d FROM range(10) WHERE id < 0")
        .await
        .unwrap();
    let schema = stream.schema().expect("schema known when sql() returns");
    let types: Vec<(&str, &DataType)> = schema
        .fields()
        .iter()
        .map(|f| (f.name().as_str(), f.data_type()))
        .collect();
    assert_eq!(
        types,
        [
            ("id", &DataType::Int64),
            ("s", &DataType::Utf8),
            ("d", &DataType::Float64)
        ]
    );
    let batches = stream.collect().await.unwrap();
    assert_eq!(batches.iter().map(|b| b.num_rows()).sum::<usize>(), 0);
    assert!(!batches.is_empty(), "collect() keeps the schema");
    assert_eq!(batches[0].schema().fields().len(), 3);
    assert_eq!(batches[0].schema().field(1).name(), "s");
    spark.close().await.unwrap();
}

/// Start [`LONG_QUERY`] and return once its job runs (the server reports
/// tasks in an ExecutionProgress). Interrupting earlier tests a different
/// path: the execution ends before its job starts.
async fn running_long_query(spark: &SparkSession) -> ArrowStream {
    let seen = Arc::new(Notify::new());
    let notify = seen.clone();
    let mut stream = spark.sql(LONG_QUERY).await.unwrap().on_progress(move |p| {
        if p.num_inflight_tasks > 0 {
            notify.notify_one();
        }
    });
    let running = async {
        tokio::select! {
            _ = seen.notified() => {}
            item = stream.next_batch() => panic!("the query ended before it ran: {item:?}"),
        }
    };
    tokio::time::timeout(Duration::from_secs(120), running)
        .await
        .expect("the query's tasks start");
    stream
}

/// Whether `op` is still running: interrupting everything would hit it.
/// (Interrupting is harmless here: each test has its own session.)
async fn still_running(spark: &SparkSession, op: &str) -> bool {
    for _ in 0..50 {
        if !spark
            .interrupt_all()
            .await
            .unwrap()
            .iter()
            .any(|id| id == op)
        {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    true
}

real_test!(cancel_stops_a_long_query, needs = [SPARK]);
async fn cancel_stops_a_long_query() {
    let Some(url) = remote("SPARK_CONNECT_TEST_REMOTE") else {
        return;
    };
    let _slots = LONG_QUERIES.lock().await;
    let spark = session(&url);
    let stream = running_long_query(&spark).await;
    let op = stream.operation_id().to_owned();
    let interrupted = stream.cancel().await.unwrap();
    assert_eq!(
        interrupted,
        std::slice::from_ref(&op),
        "the server interrupted it"
    );
    assert!(!still_running(&spark, &op).await);
    spark.close().await.unwrap();
}

async fn first_item(mut stream: ArrowStream) -> Option<Result<usize, SparkError>> {
    let item = tokio::time::timeout(Duration::from_secs(120), stream.next_batch())
        .await
        .expect("the stream ends or fails");
    item.map(|r| r.map(|b| b.num_rows()))
}

real_test!(interrupt_tag_stops_only_the_tagged_query, needs = [SPARK]);
async fn interrupt_tag_stops_only_the_tagged_query() {
    let Some(url) = remote("SPARK_CONNECT_TEST_REMOTE") else {
        return;
    };
    let _slots = LONG_QUERIES.lock().await;
    let spark = session(&url);
    spark.add_tag("victim").unwrap();
    let tagged = running_long_query(&spark).await;
    spark.remove_tag("victim").unwrap();
    spark.add_tag("bystander").unwrap();
    // Started (sql() returned), whether or not its tasks found a slot yet.
    let other = spark.sql(LONG_QUERY).await.unwrap();
    spark.clear_tags();
    assert!(spark.tags().is_empty());
    let (tagged_op, other_op) = (
        tagged.operation_id().to_owned(),
        other.operation_id().to_owned(),
    );

    let interrupted = spark.interrupt_tag("victim").await.unwrap();
    assert_eq!(interrupted, std::slice::from_ref(&tagged_op));
    let err = first_item(tagged)
        .await
        .expect("an item")
        .expect_err("interrupted");
    assert_eq!(err.error_class(), Some("OPERATION_CANCELED"), "{err}");
    assert_eq!(
        err.server_error().and_then(|e| e.operation_id()),
        Some(tagged_op.as_str())
    );
    // The other query was untouched: it is still running until cancelled.
    assert_eq!(other.cancel().await.unwrap(), [other_op]);
    spark.close().await.unwrap();
}

real_test!(
    a_row_larger_than_a_message_arrives_in_chunks,
    needs = [SPARK]
);
async fn a_row_larger_than_a_message_arrives_in_chunks() {
    let Some(url) = remote("SPARK_CONNECT_TEST_REMOTE") else {
        return;
    };
    const LEN: usize = 3_000_000;
    let small = format!(
        "{}/;grpc_max_message_size={}",
        url.trim_end_matches('/'),
        1024 * 1024
    );
    let query = format!("SELECT id, repeat('x', {LEN}) AS s FROM range(2)");
    let spark = session(&small);
    let batches = spark.sql(&query).await.unwrap().collect().await.unwrap();
    let mut rows = 0;
    for b in &batches {
        let s = b
            .column_by_name("s")
            .unwrap()
            .as_any()
            .downcast_ref::<StringArray>()
            .unwrap();
        for v in s.iter() {
            let v = v.expect("not null");
            assert_eq!(v.len(), LEN);
            assert!(v.bytes().all(|c| c == b'x'));
            rows += 1;
        }
    }
    assert_eq!(rows, 2);
    spark.close().await.unwrap();

    // Without chunking the same row cannot pass the 1 MiB limit.
    let unchunked = SparkSession::builder()
        .remote(small)
        .arrow_chunking(false)
        .build()
        .unwrap();
    let err = match unchunked.sql(&query).await {
        Ok(s) => s.collect().await.expect_err("too large"),
        Err(e) => e,
    };
    assert_eq!(
        err.server_error().map(|e| e.code()),
        Some(tonic::Code::OutOfRange),
        "{err}"
    );
    unchunked.close().await.unwrap();
}
