//! Through real load balancers over TLS with a throwaway CA
//! (`scripts/proxies.sh`, started by `.ci/run` in front of the token
//! server): nginx and HAProxy reloads, a GOAWAY after every request, read
//! and idle timeouts, a backend marked down, and HTTP errors the proxy
//! answers itself. Each query is exact; each command runs once.
//!
//! `SPARK_CONNECT_TEST_PROXIES` is the base port (nginx on +0..+2, haproxy
//! on +3, see the script), `SPARK_CONNECT_TEST_PROXY_CA` the CA file,
//! `SPARK_CONNECT_TEST_TOKEN` the token of the Spark server behind them.
//! The proxies are shared, and a reload touches every port of one of them,
//! so these tests take turns.

use std::process::Command;
use std::sync::Arc;

use spark_connect_retry::policy::PySparkPolicy;
use spark_connect_retry::policy::RetryPolicy;
use spark_connect_retry::reattach::StreamStats;
use spark_connect_retry::retrying::PySparkRetrying;
use tokio::sync::Mutex;

use crate::{
    Check, Duration, Int64Array, RecordingSleeper, Retrying, SparkError, SparkSession, absorb,
    assert_exact, query_rows, query_rows_as, remote,
};

/// One test at a time through the shared proxies.
static TURN: Mutex<()> = Mutex::const_new(());

const THREE_M: i64 = 3_000_000;
const BOUND: Duration = Duration::from_secs(240);

/// nginx, TLS, forwarding (and `refuse`).
const NGINX: u16 = 0;
/// nginx with `keepalive_requests 1`.
const NGINX_ONE_REQUEST: u16 = 1;
/// nginx with `grpc_read_timeout 1s`, `keepalive_timeout 2s`.
const NGINX_SHORT_TIMEOUTS: u16 = 2;
/// haproxy, HTTP/2 end to end, `timeout server/client 1s`.
const HAPROXY: u16 = 3;

struct Lb {
    base: u16,
    ca: String,
    token: String,
}

fn lb() -> Option<Lb> {
    let base = remote("SPARK_CONNECT_TEST_PROXIES")?;
    Some(Lb {
        base: base.parse().expect("SPARK_CONNECT_TEST_PROXIES is a port"),
        ca: std::env::var("SPARK_CONNECT_TEST_PROXY_CA").expect("SPARK_CONNECT_TEST_PROXY_CA"),
        token: std::env::var("SPARK_CONNECT_TEST_TOKEN").expect("SPARK_CONNECT_TEST_TOKEN"),
    })
}

impl Lb {
    /// The proxy at `offset`, TLS with the CA from the connection string,
    /// the token passing through.
    fn url(&self, offset: u16) -> String {
        format!(
            "sc://localhost:{}/;token={};tls_ca_file={}",
            self.base + offset,
            self.token,
            self.ca
        )
    }

    fn session(&self, offset: u16, sleeper: &RecordingSleeper) -> SparkSession {
        SparkSession::builder()
            .remote(self.url(offset))
            .retrying(
                Retrying::pyspark()
                    .with_seed(5)
                    .with_sleeper(sleeper.clone()),
            )
            .build()
            .unwrap()
    }

    /// `scripts/proxies.sh ARGS... BASE`.
    fn script(&self, args: &[&str]) {
        let out = Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/proxies.sh"))
            .args(args)
            .arg(self.base.to_string())
            .output()
            .expect("scripts/proxies.sh runs");
        assert!(
            out.status.success(),
            "proxies.sh {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// The 3M-row query, read slowly after `after_rows` so that the stream is
/// still open when `fault` (run once at that point) takes effect.
async fn slow_query_with(
    spark: &SparkSession,
    after_rows: i64,
    fault: impl FnOnce(),
) -> Result<(Check, StreamStats), SparkError> {
    let mut stream = spark
        .sql(&format!("SELECT id, id*2 AS x FROM range({THREE_M})"))
        .await?;
    let mut check = Check {
        in_order: true,
        ..Default::default()
    };
    let mut fault = Some(fault);
    while let Some(b) = stream.next_batch().await {
        let b = b?;
        let b_rows = b.num_rows();
        absorb(&mut check, &b);
        if check.rows >= after_rows {
            if let Some(f) = fault.take() {
                f();
            }
            // 1.5 µs per row (15 ms per 10,000-row batch): the same pace
            // whatever the batch size, so 3M rows outlast the fault's
            // effects (nginx's old worker closes 2 s after a reload).
            let rows = u64::try_from(b_rows).unwrap_or(0);
            tokio::time::sleep(Duration::from_nanos(1_500 * rows)).await;
        }
    }
    Ok((check, stream.stats()))
}

/// Runs `query` within [`BOUND`], checks its `n` rows exactly, and reports
/// what the stream went through.
async fn exact(
    what: &str,
    n: i64,
    sleeper: &RecordingSleeper,
    query: impl std::future::Future<Output = Result<(Check, StreamStats), SparkError>>,
) -> StreamStats {
    let (check, stats) = tokio::time::timeout(BOUND, query)
        .await
        .expect("hung")
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_exact(&check, n);
    report(what, &stats, sleeper);
    stats
}

/// The cut was resumed by a reattach, never by running the query again.
fn assert_resumed(stats: &StreamStats, why: &str) {
    assert!(stats.reattaches >= 1, "{why}: {stats:?}");
    assert_eq!(stats.re_executes, 0, "{why}: {stats:?}");
}

/// `SELECT count(*)` of `table`.
async fn count_rows(spark: &SparkSession, table: &str) -> i64 {
    let batches = spark
        .sql(&format!("SELECT count(*) FROM {table}"))
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    batches[0]
        .column(0)
        .as_any()
        .downcast_ref::<Int64Array>()
        .unwrap()
        .value(0)
}

fn report(what: &str, stats: &StreamStats, sleeper: &RecordingSleeper) {
    eprintln!(
        "{what}: reattaches {}, re-executes {}, policy retries {}, immediate retries {}, \
         transparent re-sends {}, graceful ends {}, stalls {}, retry waits {:?}",
        stats.reattaches,
        stats.re_executes,
        stats.policy_retries,
        stats.immediate_retries,
        stats.transparent_retries,
        stats.graceful_ends,
        stats.stalls,
        sleeper.sleeps_ms()
    );
}

real_test!(
    nginx_reload_mid_query_3m_rows_exact,
    needs = [PROXIES, PROXY_CA, TOKEN_VALUE]
);
async fn nginx_reload_mid_query_3m_rows_exact() {
    let Some(lb) = lb() else { return };
    let _turn = TURN.lock().await;
    let sleeper = RecordingSleeper::new();
    let spark = lb.session(NGINX, &sleeper);
    let reload = || lb.script(&["reload", "nginx"]);
    let stats = exact(
        "nginx reload",
        THREE_M,
        &sleeper,
        slow_query_with(&spark, 200_000, reload),
    )
    .await;
    assert_resumed(
        &stats,
        "the old worker closes the connection 2 s after the reload",
    );
    spark.close().await.expect("close");
}

real_test!(
    nginx_keepalive_requests_1_goaway_after_every_request,
    needs = [PROXIES, PROXY_CA, TOKEN_VALUE]
);
async fn nginx_keepalive_requests_1_goaway_after_every_request() {
    let Some(lb) = lb() else { return };
    let _turn = TURN.lock().await;
    let sleeper = RecordingSleeper::new();
    let spark = lb.session(NGINX_ONE_REQUEST, &sleeper);
    exact(
        "nginx keepalive_requests 1",
        THREE_M,
        &sleeper,
        query_rows(&spark, THREE_M),
    )
    .await;
    // Every call on a connection nginx is closing after one request: the
    // calls after the GOAWAY go to a new connection.
    let mut transparent = 0;
    for i in 0..20 {
        let (check, stats) = tokio::time::timeout(BOUND, query_rows(&spark, 10))
            .await
            .expect("hung")
            .unwrap_or_else(|e| panic!("call {i}: {e}"));
        assert_exact(&check, 10);
        transparent += stats.transparent_retries;
    }
    eprintln!(
        "nginx keepalive_requests 1: 21 queries, {transparent} transparent re-sends of their \
         ExecutePlan, retry waits spent {:?}",
        sleeper.sleeps_ms()
    );
    // A call nginx never saw (dropped by the closing connection, or above
    // the GOAWAY's last stream id) is re-sent transparently: no wait, no
    // budget (gRFC A6). Without it, these 21 queries spent 74 retry waits.
    assert!(sleeper.sleeps().is_empty(), "{:?}", sleeper.sleeps_ms());
    spark.close().await.expect("close");
}

/// A query whose stream is silent for `silent_ms` after half its rows.
fn silent_midway(n: i64, silent_ms: u64) -> String {
    format!(
        "SELECT id, id*2 AS x FROM range({n}) \
         WHERE id <> {} OR length(coalesce(reflect('java.lang.Thread', 'sleep', CAST({silent_ms} AS BIGINT)), '')) >= 0",
        n / 2
    )
}

real_test!(
    nginx_read_timeout_cuts_a_silent_stream_and_it_resumes,
    needs = [PROXIES, PROXY_CA, TOKEN_VALUE]
);
async fn nginx_read_timeout_cuts_a_silent_stream_and_it_resumes() {
    let Some(lb) = lb() else { return };
    let _turn = TURN.lock().await;
    let sleeper = RecordingSleeper::new();
    let spark = lb.session(NGINX_SHORT_TIMEOUTS, &sleeper);
    let silent = silent_midway(THREE_M, 3_500);
    let stats = exact(
        "nginx grpc_read_timeout 1s",
        THREE_M,
        &sleeper,
        query_rows_as(&spark, &silent),
    )
    .await;
    assert_resumed(
        &stats,
        "Spark reports progress every 2 s: the silence is cut",
    );
    // Idle for longer than keepalive_timeout: nginx closed the connection.
    tokio::time::sleep(Duration::from_secs(3)).await;
    exact(
        "after the idle close",
        1000,
        &sleeper,
        query_rows(&spark, 1000),
    )
    .await;
    spark.close().await.expect("close");
}

real_test!(
    haproxy_reload_mid_query_3m_rows_exact,
    needs = [PROXIES, PROXY_CA, TOKEN_VALUE]
);
async fn haproxy_reload_mid_query_3m_rows_exact() {
    let Some(lb) = lb() else { return };
    let _turn = TURN.lock().await;
    let sleeper = RecordingSleeper::new();
    let spark = lb.session(HAPROXY, &sleeper);
    let reload = || lb.script(&["reload", "haproxy"]);
    let stats = exact(
        "haproxy reload",
        THREE_M,
        &sleeper,
        slow_query_with(&spark, 200_000, reload),
    )
    .await;
    assert_resumed(&stats, "hard-stop-after 2s cuts the old process");
    spark.close().await.expect("close");
}

real_test!(
    haproxy_timeout_server_cuts_a_silent_stream_and_it_resumes,
    needs = [PROXIES, PROXY_CA, TOKEN_VALUE]
);
async fn haproxy_timeout_server_cuts_a_silent_stream_and_it_resumes() {
    let Some(lb) = lb() else { return };
    let _turn = TURN.lock().await;
    let sleeper = RecordingSleeper::new();
    let spark = lb.session(HAPROXY, &sleeper);
    let silent = silent_midway(THREE_M, 3_500);
    let stats = exact(
        "haproxy timeout server 1s",
        THREE_M,
        &sleeper,
        query_rows_as(&spark, &silent),
    )
    .await;
    assert_resumed(&stats, "timeout server 1s cuts the silence");
    spark.close().await.expect("close");
}

real_test!(
    haproxy_backend_down_then_up_mid_query_3m_rows_exact,
    needs = [PROXIES, PROXY_CA, TOKEN_VALUE]
);
async fn haproxy_backend_down_then_up_mid_query_3m_rows_exact() {
    let Some(lb) = lb() else { return };
    let _turn = TURN.lock().await;
    let sleeper = RecordingSleeper::new();
    // Real waits: the backend comes back while the policy backs off.
    let spark = SparkSession::builder()
        .remote(lb.url(HAPROXY))
        .retrying(Retrying::pyspark().with_seed(5))
        .build()
        .unwrap();
    let lb = Arc::new(lb);
    let up = lb.clone();
    let down_then_up = move || {
        up.script(&["backend", "down"]);
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(1500));
            up.script(&["backend", "up"]);
        });
    };
    let query = slow_query_with(&spark, 200_000, down_then_up);
    let stats = exact("haproxy backend down and up", THREE_M, &sleeper, query).await;
    assert_eq!(stats.re_executes, 0, "{stats:?}");
    spark.close().await.expect("close");
}

/// `INSERT` of one row, then the table's row count: 1 means the command
/// ran exactly once.
async fn insert_once(spark: &SparkSession, table: &str) -> i64 {
    drop(
        spark
            .sql(&format!("INSERT INTO {table} VALUES (1)"))
            .await
            .expect("the INSERT"),
    );
    count_rows(spark, table).await
}

real_test!(
    create_table_and_insert_under_nginx_reloads_run_exactly_once,
    needs = [PROXIES, PROXY_CA, TOKEN_VALUE]
);
async fn create_table_and_insert_under_nginx_reloads_run_exactly_once() {
    let Some(lb) = lb() else { return };
    let _turn = TURN.lock().await;
    let sleeper = RecordingSleeper::new();
    let spark = lb.session(NGINX, &sleeper);
    let table = format!("lb_reload_{}", std::process::id());
    drop(
        spark
            .sql(&format!("DROP TABLE IF EXISTS {table}"))
            .await
            .unwrap(),
    );
    // The reload races the CREATE TABLE: no IF NOT EXISTS, so a second run fails.
    let create_sql = format!("CREATE TABLE {table} (id INT) USING parquet");
    let create = spark.sql(&create_sql);
    let reload = async { lb.script(&["reload", "nginx"]) };
    let (created, ()) = tokio::join!(create, reload);
    drop(created.expect("CREATE TABLE ran once"));
    lb.script(&["reload", "nginx"]);
    let rows = tokio::time::timeout(BOUND, insert_once(&spark, &table))
        .await
        .expect("hung");
    assert_eq!(rows, 1, "the INSERT ran exactly once");
    drop(spark.sql(&format!("DROP TABLE {table}")).await.unwrap());
    spark.close().await.expect("close");
}

real_test!(
    http_errors_from_the_proxy_map_to_unavailable_and_a_command_runs_once,
    needs = [PROXIES, PROXY_CA, TOKEN_VALUE]
);
async fn http_errors_from_the_proxy_map_to_unavailable_and_a_command_runs_once() {
    let Some(lb) = lb() else { return };
    let _turn = TURN.lock().await;
    // gRPC's HTTP-to-gRPC mapping: 429, 502, 503, 504 are UNAVAILABLE.
    let no_retry = Retrying::pyspark_with(vec![
        RetryPolicy::pyspark_builder()
            .max_retries(Some(0))
            .build()
            .unwrap(),
    ]);
    for code in ["429", "502", "503", "504"] {
        lb.script(&["refuse", code]);
        let spark = SparkSession::builder()
            .remote(lb.url(NGINX))
            .retrying(no_retry.clone())
            .build()
            .unwrap();
        let err = tokio::time::timeout(BOUND, async {
            spark.sql("SELECT 1").await?.collect().await
        })
        .await
        .expect("hung")
        .expect_err("the proxy refuses");
        lb.script(&["pass"]);
        let status = err.server_error().expect("a status").status().clone();
        assert_eq!(
            status.code(),
            tonic::Code::Unavailable,
            "HTTP {code}: {err}"
        );
        assert!(status.message().contains(code), "HTTP {code}: {err}");
    }
    // A command sent while nginx answers 503, let through 1.5 s later: retried, run once.
    let spark = SparkSession::builder()
        .remote(lb.url(NGINX))
        .retrying(Retrying::pyspark().with_seed(5))
        .build()
        .unwrap();
    let table = format!("lb_refused_{}", std::process::id());
    drop(
        spark
            .sql(&format!("DROP TABLE IF EXISTS {table}"))
            .await
            .unwrap(),
    );
    drop(
        spark
            .sql(&format!("CREATE TABLE {table} (id INT) USING parquet"))
            .await
            .unwrap(),
    );
    lb.script(&["refuse", "503"]);
    let lb = Arc::new(lb);
    let pass = lb.clone();
    let opener = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(1500));
        pass.script(&["pass"]);
    });
    let inserted =
        tokio::time::timeout(BOUND, spark.sql(&format!("INSERT INTO {table} VALUES (1)")))
            .await
            .expect("hung");
    opener.join().unwrap();
    drop(inserted.expect("the INSERT once the proxy passes"));
    assert_eq!(
        count_rows(&spark, &table).await,
        1,
        "the INSERT ran exactly once"
    );
    drop(spark.sql(&format!("DROP TABLE {table}")).await.unwrap());
    spark.close().await.expect("close");
}
