//! Compressed results (Spark 4.1+, `spark.sql.execution.arrow.compression.codec`)
//! against the embedded server, which compresses batches as Spark does:
//! exact whether the codec comes from the server's defaults, the
//! connection string, the builder or a `Config` call; in chunks; through
//! connection cuts (reattached).

use std::time::Duration;

use arrow_array::{Array, Int64Array, RecordBatch};
use spark_connect_retry::policy::{PySparkPolicy, RetryPolicy};
use spark_connect_retry::retrying::{PySparkRetrying, Retrying};
use spark_connect_retry::session::{ResultCompression, SparkError, SparkSession};
use spark_connect_testkit::{CutSchedule, Direction, FaultProxy, TestServer};
use tonic_retry::retrying::RecordingSleeper;

const CODEC: &str = "spark.sql.execution.arrow.compression.codec";
const QUERY: &str = "SELECT id, id * 2 AS x FROM range(300000)";

fn retrying() -> Retrying {
    Retrying::pyspark_with(vec![
        RetryPolicy::pyspark_builder()
            .jitter_ms(0.0)
            .build()
            .unwrap(),
    ])
    .with_sleeper(RecordingSleeper::new())
    .with_seed(5)
}

/// Every row of `id` and `x`, checked exact: `id` is 0..n, `x` is 2·id.
fn assert_exact(batches: &[RecordBatch], n: i64) {
    let col = |b: &RecordBatch, name: &str| {
        let c = b.column_by_name(name).expect("column");
        let c = c.as_any().downcast_ref::<Int64Array>().unwrap();
        assert_eq!(c.null_count(), 0);
        c.values().to_vec()
    };
    let ids: Vec<i64> = batches.iter().flat_map(|b| col(b, "id")).collect();
    let xs: Vec<i64> = batches.iter().flat_map(|b| col(b, "x")).collect();
    assert!(ids.iter().copied().eq(0..n), "ids are 0..{n}");
    assert!(xs.iter().copied().eq((0..n).map(|v| v * 2)), "x = 2·id");
}

async fn run(spark: &SparkSession, query: &str) -> Result<Vec<RecordBatch>, SparkError> {
    spark.sql(query).await?.collect().await
}

/// Bytes the server sent through a proxy for `QUERY`, the server's codec
/// default being `codec` (none: no default).
async fn bytes_for(codec: Option<&str>) -> u64 {
    let mut b = TestServer::builder().rows_per_batch(50_000);
    if let Some(c) = codec {
        b = b.conf(CODEC, c);
    }
    let s = b.start().await.unwrap();
    let proxy = FaultProxy::builder(s.addr()).start().await.unwrap();
    let spark = SparkSession::builder()
        .remote(proxy.remote())
        .build()
        .unwrap();
    assert_exact(&run(&spark, QUERY).await.unwrap(), 300_000);
    spark.close().await.unwrap();
    let sent = proxy.stats().bytes_server_to_client;
    proxy.shutdown().await;
    sent
}

#[tokio::test]
async fn a_server_default_codec_decodes_exactly_and_sends_less() {
    let none = bytes_for(None).await;
    let zstd = bytes_for(Some("zstd")).await;
    let lz4 = bytes_for(Some("lz4")).await;
    // The same rows, really compressed on the wire.
    assert!(zstd * 2 < none, "zstd {zstd} vs none {none}");
    assert!(lz4 * 4 < none * 3, "lz4 {lz4} vs none {none}");
}

#[tokio::test]
async fn result_compression_sets_the_conf_when_the_session_starts() {
    let s = TestServer::builder()
        .rows_per_batch(50_000)
        .start()
        .await
        .unwrap();
    // From the connection string.
    let spark = SparkSession::connect(&format!("{}/;result_compression=LZ4", s.remote())).unwrap();
    assert_exact(&run(&spark, QUERY).await.unwrap(), 300_000);
    let conf = s.session_config(&spark.session_id()).unwrap();
    assert_eq!(conf.get(CODEC).map(String::as_str), Some("lz4"));
    // The builder's setter wins over the string and a `config` of the key.
    let spark = SparkSession::builder()
        .remote(format!("{}/;result_compression=lz4", s.remote()))
        .config(CODEC, "none")
        .result_compression(ResultCompression::Zstd)
        .build()
        .unwrap();
    assert_exact(&run(&spark, QUERY).await.unwrap(), 300_000);
    let conf = s.session_config(&spark.session_id()).unwrap();
    assert_eq!(conf.get(CODEC).map(String::as_str), Some("zstd"));
    // A bad value names itself, at build time.
    let err =
        SparkSession::connect(&format!("{}/;result_compression=brotli", s.remote())).unwrap_err();
    assert!(matches!(err, SparkError::ConnectionString(_)), "{err:?}");
    assert!(err.to_string().contains("\"brotli\""), "{err}");
}

#[tokio::test]
async fn a_codec_set_mid_session_applies_to_the_next_query() {
    let s = TestServer::start().await.unwrap();
    let spark = SparkSession::connect(&s.remote()).unwrap();
    assert_exact(&run(&spark, QUERY).await.unwrap(), 300_000);
    for codec in ["zstd", "lz4", "none"] {
        spark.config_set(&[(CODEC, codec)]).await.unwrap();
        assert_exact(&run(&spark, QUERY).await.unwrap(), 300_000);
    }
    // A value Spark refuses fails the query with Spark's error.
    spark.config_set(&[(CODEC, "snappy")]).await.unwrap();
    let err = run(&spark, QUERY).await.unwrap_err();
    assert_eq!(
        err.server_error().and_then(|e| e.error_class()),
        Some("INVALID_CONF_VALUE.OUT_OF_RANGE_OF_OPTIONS"),
        "{err}"
    );
}

#[tokio::test]
async fn compressed_batches_in_chunks_are_joined_then_decoded() {
    let s = TestServer::builder()
        .rows_per_batch(20_000)
        .conf(CODEC, "zstd")
        .start()
        .await
        .unwrap();
    let spark = SparkSession::builder()
        .remote(s.remote())
        .preferred_arrow_chunk_size(1024)
        .build()
        .unwrap();
    let mut stream = spark.sql(QUERY).await.unwrap();
    let mut batches = Vec::new();
    while let Some(b) = stream.next_batch().await {
        batches.push(b.unwrap());
    }
    assert_exact(&batches, 300_000);
    assert_eq!(batches.len(), 15, "15 batches of 20 000 rows");
}

#[tokio::test]
async fn compressed_results_survive_connection_cuts() {
    let s = TestServer::builder()
        .rows_per_batch(10_000)
        .conf(CODEC, "zstd")
        .start()
        .await
        .unwrap();
    let proxy = FaultProxy::builder(s.addr())
        .cut_schedule(
            Direction::ServerToClient,
            CutSchedule::new([40_000, 90_000]),
        )
        .start()
        .await
        .unwrap();
    let spark = SparkSession::builder()
        .remote(proxy.remote())
        .retrying(retrying())
        .build()
        .unwrap();
    let mut stream = spark.sql(QUERY).await.unwrap();
    let mut batches = Vec::new();
    tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(b) = stream.next_batch().await {
            batches.push(b.unwrap());
        }
    })
    .await
    .expect("the stream ends");
    assert_exact(&batches, 300_000);
    assert_eq!(proxy.stats().cuts, 2);
    assert!(stream.stats().reattaches >= 1, "{:?}", stream.stats());
    proxy.shutdown().await;
}

const THRESHOLD: &str = "spark.connect.session.planCompression.threshold";
const ALGORITHM: &str = "spark.connect.session.planCompression.defaultAlgorithm";

/// `QUERY` padded to about 4 KiB of SQL text: a plan worth compressing.
fn large_query() -> String {
    format!("{QUERY}{}", " ".repeat(4000))
}

fn sent_compressed(req: &spark_connect_retry::proto::ExecutePlanRequest) -> bool {
    use spark_connect_retry::proto::plan::OpType;
    matches!(
        req.plan.as_ref().and_then(|p| p.op_type.as_ref()),
        Some(OpType::CompressedOperation(_))
    )
}

#[tokio::test]
async fn plans_over_the_servers_threshold_go_compressed() {
    let s = TestServer::builder()
        .conf(THRESHOLD, "1000")
        .conf(ALGORITHM, "ZSTD")
        .start()
        .await
        .unwrap();
    // No Config call of the client's own (rows per batch): the count is the plan confs'.
    let spark =
        SparkSession::connect(&format!("{}/;result_batch_rows=server", s.remote())).unwrap();
    // Small: plain, and the confs are not even read.
    assert_exact(&run(&spark, QUERY).await.unwrap(), 300_000);
    assert!(!sent_compressed(&s.last_execute_request().unwrap()));
    assert_eq!(s.calls().config, 0);
    // Large: compressed, the confs read once for the session.
    for _ in 0..2 {
        assert_exact(&run(&spark, &large_query()).await.unwrap(), 300_000);
        assert!(sent_compressed(&s.last_execute_request().unwrap()));
    }
    assert_eq!(s.calls().config, 1);
    assert_eq!(spark.plans_compressed(), 2);
}

#[tokio::test]
async fn a_server_without_the_confs_gets_plain_plans() {
    for confs in [vec![], vec![(THRESHOLD, "1000"), (ALGORITHM, "NONE")]] {
        let mut b = TestServer::builder();
        for (k, v) in confs {
            b = b.conf(k, v);
        }
        let s = b.start().await.unwrap();
        // No Config call of the client's own (rows per batch): the count is the plan confs'.
        let spark =
            SparkSession::connect(&format!("{}/;result_batch_rows=server", s.remote())).unwrap();
        for _ in 0..2 {
            assert_exact(&run(&spark, &large_query()).await.unwrap(), 300_000);
            assert!(!sent_compressed(&s.last_execute_request().unwrap()));
        }
        assert_eq!((s.calls().config, spark.plans_compressed()), (1, 0));
    }
}

#[tokio::test]
async fn a_server_that_cannot_read_them_gets_plain_plans_for_the_session() {
    let s = TestServer::builder()
        .conf(THRESHOLD, "0")
        .conf(ALGORITHM, "ZSTD")
        .compressed_plans(false)
        .start()
        .await
        .unwrap();
    let spark = SparkSession::connect(&s.remote()).unwrap();
    // Refused compressed, sent again plain: the query succeeds.
    assert_exact(&run(&spark, &large_query()).await.unwrap(), 300_000);
    let sent: Vec<bool> = s.execute_requests().iter().map(sent_compressed).collect();
    assert_eq!(sent, [true, false]);
    // Plain from then on.
    assert_exact(&run(&spark, &large_query()).await.unwrap(), 300_000);
    let sent: Vec<bool> = s.execute_requests().iter().map(sent_compressed).collect();
    assert_eq!(sent, [true, false, false]);
    assert_eq!(spark.plans_compressed(), 1);
}
