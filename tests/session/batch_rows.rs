//! Rows per result batch (`spark.sql.execution.arrow.maxRecordsPerBatch`):
//! the client's default, the connection string, the builder, a user's own
//! conf, the off switch, and a server that refuses the conf. The embedded
//! server cuts batches at the session's conf (under its own cap), as Spark.

use arrow_array::{Array, Int64Array, RecordBatch};
use spark_connect_retry::session::{ResultBatchRows, SparkError, SparkSession};
use spark_connect_testkit::TestServer;

use crate::support;

const CONF: &str = "spark.sql.execution.arrow.maxRecordsPerBatch";
const QUERY: &str = "SELECT id, id * 2 AS x FROM range(300000)";

/// A server whose own cap is far above every size asked for here.
async fn server() -> TestServer {
    TestServer::builder()
        .rows_per_batch(1_000_000)
        .start()
        .await
        .unwrap()
}

/// The batches of `QUERY`, checked exact (`id` 0..n, `x` = 2·id).
async fn batches(spark: &SparkSession) -> Result<Vec<RecordBatch>, SparkError> {
    let mut stream = spark.sql(QUERY).await?;
    let mut out = Vec::new();
    while let Some(b) = stream.next_batch().await {
        out.push(b?);
    }
    let col = |b: &RecordBatch, i: usize| {
        let c = b.column(i).as_any().downcast_ref::<Int64Array>().unwrap();
        c.values().to_vec()
    };
    let ids: Vec<i64> = out.iter().flat_map(|b| col(b, 0)).collect();
    let xs: Vec<i64> = out.iter().flat_map(|b| col(b, 1)).collect();
    assert!(ids.iter().copied().eq(0..300_000), "ids are 0..300000");
    assert!(xs.iter().copied().eq((0..300_000).map(|v| v * 2)));
    Ok(out)
}

fn sizes(batches: &[RecordBatch]) -> Vec<usize> {
    batches.iter().map(RecordBatch::num_rows).collect()
}

fn conf(s: &TestServer, spark: &SparkSession) -> Option<String> {
    s.session_config(&spark.session_id())?.get(CONF).cloned()
}

#[tokio::test]
async fn a_session_asks_for_100k_rows_per_batch_by_default() {
    let s = server().await;
    let spark = SparkSession::connect(&s.remote()).unwrap();
    let got = batches(&spark).await.unwrap();
    assert_eq!(sizes(&got), [100_000; 3]);
    assert_eq!(conf(&s, &spark).as_deref(), Some("100000"));
    assert_eq!(ResultBatchRows::DEFAULT, ResultBatchRows::Rows(100_000));
    // Set once per session, not per query.
    batches(&spark).await.unwrap();
    assert_eq!(s.calls().config, 1);
}

#[tokio::test]
async fn the_connection_string_and_the_builder_choose_the_size() {
    let s = server().await;
    let spark = SparkSession::connect(&format!("{}/;result_batch_rows=25000", s.remote())).unwrap();
    assert_eq!(sizes(&batches(&spark).await.unwrap()), [25_000; 12]);
    // The builder's setter wins over the string and a `config` of the key.
    let spark = SparkSession::builder()
        .remote(format!("{}/;result_batch_rows=25000", s.remote()))
        .config(CONF, "7")
        .result_batch_rows(ResultBatchRows::Rows(60_000))
        .build()
        .unwrap();
    assert_eq!(sizes(&batches(&spark).await.unwrap()), [60_000; 5]);
    assert_eq!(conf(&s, &spark).as_deref(), Some("60000"));
    // A bad value names itself, at build time.
    for bad in ["-1", "lots", "2147483648"] {
        let err =
            SparkSession::connect(&format!("{}/;result_batch_rows={bad}", s.remote())).unwrap_err();
        assert!(matches!(err, SparkError::ConnectionString(_)), "{err:?}");
        assert!(err.to_string().contains(&format!("{bad:?}")), "{err}");
    }
}

#[tokio::test]
async fn a_users_own_conf_is_kept() {
    let s = server().await;
    let spark = SparkSession::builder()
        .remote(s.remote())
        .config(CONF, "50000")
        .build()
        .unwrap();
    assert_eq!(sizes(&batches(&spark).await.unwrap()), [50_000; 6]);
    assert_eq!(conf(&s, &spark).as_deref(), Some("50000"));
    assert_eq!(s.calls().config, 1, "the user's configs alone");
}

#[tokio::test]
async fn server_turns_it_off() {
    let s = server().await;
    for spark in [
        SparkSession::connect(&format!("{}/;result_batch_rows=SERVER", s.remote())).unwrap(),
        SparkSession::builder()
            .remote(s.remote())
            .result_batch_rows(ResultBatchRows::ServerDefault)
            .build()
            .unwrap(),
    ] {
        // The server's own batches; no Config call at all.
        assert_eq!(sizes(&batches(&spark).await.unwrap()), [300_000]);
        assert_eq!(conf(&s, &spark), None);
    }
    assert_eq!(s.calls().config, 0);
}

#[tokio::test]
async fn a_server_that_refuses_the_default_works_and_says_so_once() {
    support::init();
    let s = TestServer::builder()
        .rows_per_batch(40_000)
        .refuse_conf(CONF)
        .start()
        .await
        .unwrap();
    let spark = SparkSession::builder()
        .remote(s.remote())
        .config("spark.sql.session.timeZone", "UTC")
        .build()
        .unwrap();
    let (got, events) = support::capture(async {
        let first = batches(&spark).await.unwrap();
        batches(&spark).await.unwrap();
        first
    })
    .await;
    // The server's batches; the user's config still set.
    assert_eq!(
        sizes(&got),
        [
            40_000, 40_000, 40_000, 40_000, 40_000, 40_000, 40_000, 20_000
        ]
    );
    let conf_of = s.session_config(&spark.session_id()).unwrap();
    assert_eq!(
        conf_of
            .get("spark.sql.session.timeZone")
            .map(String::as_str),
        Some("UTC")
    );
    let warned: Vec<_> = events
        .iter()
        .filter(|e| e.level == tracing::Level::WARN && e.message.contains("refused"))
        .collect();
    assert_eq!(warned.len(), 1, "{events:#?}");
    // Asked for explicitly, a refusal is the user's error.
    let spark = SparkSession::builder()
        .remote(s.remote())
        .result_batch_rows(ResultBatchRows::Rows(1000))
        .build()
        .unwrap();
    let err = batches(&spark).await.unwrap_err();
    assert_eq!(err.error_class(), Some("CANNOT_MODIFY_CONFIG"), "{err}");
}

/// Queries that start at once on a fresh session share one Config call for
/// the default: the first sends it, the others wait for its answer.
#[tokio::test]
async fn queries_starting_at_once_send_the_default_once() {
    let s = server().await;
    let spark = SparkSession::builder().remote(s.remote()).build().unwrap();
    let (a, b, c) = tokio::join!(batches(&spark), batches(&spark), batches(&spark));
    for out in [a, b, c] {
        assert_eq!(sizes(&out.unwrap()), vec![100_000; 3]);
    }
    assert_eq!(s.calls().config, 1, "{:?}", s.calls());
    assert_eq!(conf(&s, &spark).as_deref(), Some("100000"));
}
