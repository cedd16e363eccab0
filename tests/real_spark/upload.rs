//! `create_dataframe` against a real server: 1M rows inline as a
//! `LocalRelation`, 100 MiB through cached artifacts, and the same 100 MiB
//! through connection resets in the middle of the upload, each read back
//! exactly once.

use std::time::Instant;

use arrow_schema::DataType;
use spark_connect_retry::session::DataFrame;
use spark_connect_retry::testing::proxy::{CutSchedule, Direction, FaultProxy};

use super::arrow_data::{rows, schema};
use super::{Check, absorb, addr_of, assert_exact, remote, session};

/// 100 MiB of two `BIGINT` columns.
const HUNDRED_MIB_ROWS: i64 = 100 * 1024 * 1024 / 16;

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

#[tokio::test]
async fn one_million_rows_inline_are_read_back_exactly() {
    let Some(url) = remote("SPARK_CONNECT_TEST_REMOTE") else {
        return;
    };
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

#[tokio::test]
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

#[tokio::test]
async fn hundred_mib_through_cached_artifacts_are_read_back_exactly() {
    let Some(url) = remote("SPARK_CONNECT_TEST_REMOTE") else {
        return;
    };
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

#[tokio::test]
async fn hundred_mib_through_resets_mid_upload_are_read_back_exactly_once() {
    let Some(url) = remote("SPARK_CONNECT_TEST_REMOTE") else {
        return;
    };
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
    assert_eq!(proxy.stats().snapshot().cuts, 3);
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
