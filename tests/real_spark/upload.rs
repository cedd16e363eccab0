//! `create_dataframe` against a real server: 1M rows inline as a
//! `LocalRelation`, 100 MiB through cached artifacts, and the same 100 MiB
//! through connection resets in the middle of the upload, each read back
//! exactly once; uploaded data as a temporary view queried with SQL.

use std::time::Instant;

use arrow_array::{Array, Int64Array, RecordBatch};
use arrow_schema::DataType;
use spark_connect_retry::session::{DataFrame, SparkSession};
use spark_connect_testkit::{CutSchedule, Direction, FaultProxy};

use crate::arrow_data::{rows, schema};
use crate::{Check, absorb, addr_of, assert_exact, remote, session};

/// 100 MiB of two `BIGINT` columns.
const HUNDRED_MIB_ROWS: i64 = 100 * 1024 * 1024 / 16;

/// A server holds an uploaded relation several times over while it plans
/// it: run side by side on one 1 GiB server, these tests ran it out of heap
/// ("Java heap space"). The tests that upload a million rows or more take
/// turns; the other real-server tests still run beside them.
static BIG_UPLOAD: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn read_back(df: &DataFrame, n: i64) {
    let mut stream = df.stream().unwrap();
    let mut check = Check {
        in_order: true,
        ..Default::default()
    };
    while let Some(b) = stream.next_batch().await {
        absorb(&mut check, &b.unwrap());
    }
    assert_exact(&check, n);
}

real_test!(
    one_million_rows_inline_are_read_back_exactly,
    needs = [SPARK]
);
async fn one_million_rows_inline_are_read_back_exactly() {
    let Some(url) = remote("SPARK_CONNECT_TEST_REMOTE") else {
        return;
    };
    let _turn = BIG_UPLOAD.lock().await;
    let spark = session(&url);
    // 16 MB in memory: above the 1 MiB default, so raise it for this session.
    spark
        .config_set(&[("spark.sql.session.localRelationCacheThreshold", "67108864")])
        .await
        .unwrap();
    let n = 1_000_000;
    let started = Instant::now();
    let df = spark
        .create_dataframe(schema(), rows(n, 65_536))
        .await
        .unwrap();
    assert!(!df.is_cached(), "{:?}", df.upload_stats());
    assert_eq!(df.upload_stats().bytes_sent, 0);
    read_back(&df, n).await;
    eprintln!("1M rows inline: exact in {:.2?}", started.elapsed());
    spark.close().await.unwrap();
}

real_test!(empty_data_keeps_its_schema, needs = [SPARK]);
async fn empty_data_keeps_its_schema() {
    let Some(url) = remote("SPARK_CONNECT_TEST_REMOTE") else {
        return;
    };
    let spark = session(&url);
    let df = spark.create_dataframe(schema(), rows(0, 1)).await.unwrap();
    assert!(!df.is_cached());
    let batches = df.collect().await.unwrap();
    assert_eq!(batches.iter().map(|b| b.num_rows()).sum::<usize>(), 0);
    let schema = batches[0].schema();
    assert_eq!(schema.field(0).name(), "id");
    assert_eq!(schema.field(1).data_type(), &DataType::Int64);
    spark.close().await.unwrap();
}

real_test!(
    hundred_mib_through_cached_artifacts_are_read_back_exactly,
    needs = [SPARK]
);
async fn hundred_mib_through_cached_artifacts_are_read_back_exactly() {
    let Some(url) = remote("SPARK_CONNECT_TEST_REMOTE") else {
        return;
    };
    let _turn = BIG_UPLOAD.lock().await;
    let spark = session(&url);
    let n = HUNDRED_MIB_ROWS;
    let started = Instant::now();
    let df = spark
        .create_dataframe(schema(), rows(n, 100_000))
        .await
        .unwrap();
    let up = started.elapsed();
    let stats = df.upload_stats();
    assert!(df.is_cached());
    // 16 MiB chunks: 7 artifacts, each sent once, none retried.
    assert_eq!(stats.artifacts, 7, "{stats:?}");
    assert_eq!(stats.artifacts_sent, 7, "{stats:?}");
    assert_eq!(stats.retries, 0, "{stats:?}");
    assert!(stats.bytes_sent >= (n * 16) as u64, "{stats:?}");
    read_back(&df, n).await;
    // Uploading the same data again sends nothing: the server holds it.
    let again = spark
        .create_dataframe(schema(), rows(n, 100_000))
        .await
        .unwrap();
    let s2 = again.upload_stats();
    assert_eq!(
        (s2.artifacts_sent, s2.artifacts_skipped, s2.bytes_sent),
        (0, 7, 0)
    );
    assert_eq!(again.relation(), df.relation());
    eprintln!(
        "100 MiB cached: uploaded in {up:.2?} ({:.0} MiB/s), exact in {:.2?}",
        stats.bytes_sent as f64 / (1 << 20) as f64 / up.as_secs_f64(),
        started.elapsed()
    );
    spark.close().await.unwrap();
}

real_test!(
    hundred_mib_through_resets_mid_upload_are_read_back_exactly_once,
    needs = [SPARK]
);
async fn hundred_mib_through_resets_mid_upload_are_read_back_exactly_once() {
    let Some(url) = remote("SPARK_CONNECT_TEST_REMOTE") else {
        return;
    };
    let _turn = BIG_UPLOAD.lock().await;
    // Connection 1 is reset 20 MiB into the first group, connection 2 after
    // the first group (64 MiB) and 6 MiB into the second, connection 3
    // 3 MiB into the resent second group; connection 4 is clean.
    const MIB: u64 = 1 << 20;
    let proxy = FaultProxy::builder(addr_of(&url))
        .cut_schedule(
            Direction::ClientToServer,
            CutSchedule::new([20 * MIB, 70 * MIB, 3 * MIB]),
        )
        .start()
        .await
        .unwrap();
    let spark = session(&proxy.remote());
    let n = HUNDRED_MIB_ROWS;
    let started = Instant::now();
    let df = spark
        .create_dataframe(schema(), rows(n, 100_000))
        .await
        .unwrap();
    let stats = df.upload_stats();
    assert_eq!(proxy.stats().cuts, 3);
    assert!(stats.retries >= 3, "{stats:?}");
    assert_eq!(stats.artifacts, 7, "{stats:?}");
    // Never more than the data plus what was in flight at each cut (one
    // group, 64 MiB, at most).
    let total = (n * 16) as u64;
    assert!(stats.bytes_sent <= total + 3 * 64 * MIB + MIB, "{stats:?}");
    read_back(&df, n).await;
    eprintln!(
        "100 MiB cached through 3 resets: exact in {:.2?}, {stats:?}",
        started.elapsed()
    );
    spark.close().await.unwrap();
    proxy.shutdown().await;
}

/// The one row of `query`, every column a `BIGINT`.
async fn one_row(spark: &SparkSession, query: &str) -> Vec<i64> {
    let batches: Vec<RecordBatch> = spark.sql(query).await.unwrap().collect().await.unwrap();
    let batch = batches.iter().find(|b| b.num_rows() > 0).expect("a row");
    assert_eq!(batches.iter().map(|b| b.num_rows()).sum::<usize>(), 1);
    batch
        .columns()
        .iter()
        .map(|c| {
            c.as_any()
                .downcast_ref::<Int64Array>()
                .expect("BIGINT")
                .value(0)
        })
        .collect()
}

real_test!(
    uploaded_data_as_a_temp_view_is_queried_exactly_with_sql,
    needs = [SPARK]
);
async fn uploaded_data_as_a_temp_view_is_queried_exactly_with_sql() {
    let Some(url) = remote("SPARK_CONNECT_TEST_REMOTE") else {
        return;
    };
    let _turn = BIG_UPLOAD.lock().await;
    let spark = session(&url);
    // 16 MB: over the 1 MiB default, so uploaded as cached artifacts.
    let n = 1_000_000;
    let df = spark
        .create_dataframe(schema(), rows(n, 65_536))
        .await
        .unwrap();
    assert!(df.is_cached());
    df.create_or_replace_temp_view("uploaded").await.unwrap();
    let sums = one_row(&spark, "SELECT count(*), sum(id), sum(x) FROM uploaded").await;
    assert_eq!(sums, [n, n * (n - 1) / 2, n * (n - 1)]);
    // Joined with a range on the server: every third id.
    let joined = one_row(
        &spark,
        &format!(
            "SELECT count(*), sum(u.x) FROM uploaded u JOIN range(0, {n}, 3) r ON u.id = r.id"
        ),
    )
    .await;
    let thirds = (0..n).step_by(3);
    assert_eq!(
        joined,
        [thirds.clone().count() as i64, thirds.map(|i| 2 * i).sum()]
    );

    // The name is taken: createTempView fails with Spark's error and leaves
    // the view; createOrReplaceTempView replaces it (inline data here).
    let small = spark
        .create_dataframe(schema(), rows(10, 10))
        .await
        .unwrap();
    assert!(!small.is_cached());
    let err = small.create_temp_view("uploaded").await.expect_err("taken");
    assert_eq!(err.error_class(), Some("TEMP_TABLE_OR_VIEW_ALREADY_EXISTS"));
    assert_eq!(err.sql_state(), Some("42P07"));
    assert_eq!(one_row(&spark, "SELECT count(*) FROM uploaded").await, [n]);
    small.create_or_replace_temp_view("uploaded").await.unwrap();
    assert_eq!(
        one_row(&spark, "SELECT count(*), sum(x) FROM uploaded").await,
        [10, 90]
    );
    let err = spark
        .sql("SELECT * FROM not_uploaded")
        .await
        .expect_err("unknown");
    assert_eq!(err.error_class(), Some("TABLE_OR_VIEW_NOT_FOUND"));
    spark.close().await.unwrap();
}
