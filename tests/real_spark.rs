//! Against a real Spark Connect 4.3.0 server (from PyPI's `pyspark`).
//!
//! `.ci/run` installs and starts the servers and sets:
//!
//! | variable | server |
//! |---|---|
//! | `SPARK_CONNECT_TEST_REMOTE` | default confs + `observerRetryBufferSize=128m` |
//! | `SPARK_CONNECT_TEST_REMOTE_GRACEFUL` | `senderMaxStreamDuration=1s`, `senderMaxStreamSize=1m` |
//! | `SPARK_CONNECT_TEST_REMOTE_SMALLBUF` | default 10 MiB retry buffer |
//! | `SPARK_CONNECT_TEST_REMOTE_TOKEN` + `SPARK_CONNECT_TEST_TOKEN` | token auth |
//! | `SPARK_CONNECT_TEST_VICTIM` | a server this test may kill (`scripts/spark-server.sh kill NAME`) |
//! | `SPARK_CONNECT_TEST_REMOTE_RESTART` + `SPARK_CONNECT_TEST_RESTART` | a server this test kills and starts again (its name) |
//! | `SPARK_CONNECT_TEST_REMOTE_SAIL` | Sail 0.7.2 (pysail), a second Spark Connect server |
//!
//! The tests that make sense for any Spark Connect server run against both
//! Spark and Sail, named `spark_…` and `sail_…` ([`on_both!`]); where Sail
//! differs (docs/servers.md), the Sail test asserts Sail's answer.
//!
//! This binary has its own harness (`harness = false`, libtest-mimic): each
//! test names the variables it needs ([`real_test!`]), and a test whose
//! server is not configured is reported as *ignored*, never as passed. With
//! `SPARK_CONNECT_REQUIRE_REAL=1` (set in CI) a missing server fails instead.
//! It takes cargo test's whole command line: several filters, `--exact`,
//! `--skip`, `--list`, `--ignored` (`real_spark/cli.rs`).

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::time::{Duration, Instant};

use arrow_array::{Array, Int64Array, RecordBatch};
use spark_connect_retry::retrying::PySparkRetrying;
use spark_connect_retry::retrying::Retrying;
use spark_connect_retry::session::{SparkError, SparkSession};
use spark_connect_testkit::{CutMode, CutSchedule, Direction, FaultProxy};
use tonic_retry::retrying::RecordingSleeper;

mod support;
use support::{arrow_data, streams};

const TEN_M: i64 = 10_000_000;

/// Which real server a shared test runs against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Srv {
    /// Spark Connect 4.3.0 (`SPARK_CONNECT_TEST_REMOTE`).
    Spark,
    /// Sail 0.7.2 (`SPARK_CONNECT_TEST_REMOTE_SAIL`).
    Sail,
}

impl Srv {
    fn remote(self) -> Option<String> {
        remote(match self {
            Srv::Spark => "SPARK_CONNECT_TEST_REMOTE",
            Srv::Sail => "SPARK_CONNECT_TEST_REMOTE_SAIL",
        })
    }
}

/// The variables that name the real servers (`.ci/run` sets them all).
mod needs {
    pub const SPARK: &str = "SPARK_CONNECT_TEST_REMOTE";
    pub const SAIL: &str = "SPARK_CONNECT_TEST_REMOTE_SAIL";
    pub const GRACEFUL: &str = "SPARK_CONNECT_TEST_REMOTE_GRACEFUL";
    pub const SMALLBUF: &str = "SPARK_CONNECT_TEST_REMOTE_SMALLBUF";
    pub const TOKEN: &str = "SPARK_CONNECT_TEST_REMOTE_TOKEN";
    pub const TOKEN_VALUE: &str = "SPARK_CONNECT_TEST_TOKEN";
    pub const VICTIM: &str = "SPARK_CONNECT_TEST_REMOTE_VICTIM";
    pub const VICTIM_NAME: &str = "SPARK_CONNECT_TEST_VICTIM";
    pub const RESTART: &str = "SPARK_CONNECT_TEST_REMOTE_RESTART";
    pub const RESTART_NAME: &str = "SPARK_CONNECT_TEST_RESTART";
    /// The base port of `scripts/proxies.sh` (nginx, haproxy over TLS).
    pub const PROXIES: &str = "SPARK_CONNECT_TEST_PROXIES";
    /// The proxies' throwaway CA file.
    pub const PROXY_CA: &str = "SPARK_CONNECT_TEST_PROXY_CA";
    /// The egress proxy's URL with its credentials (`scripts/egress-proxy.sh`).
    pub const EGRESS: &str = "SPARK_CONNECT_TEST_EGRESS_PROXY";
}

/// One test of this binary: its name, the variables it needs, its body.
struct RealTest {
    /// `module::test`, as libtest names a test.
    path: &'static str,
    needs: &'static [&'static str],
    /// Why it is ignored even with its servers (run it with `--ignored`).
    ignore: Option<&'static str>,
    body: fn() -> Pin<Box<dyn Future<Output = ()>>>,
}

inventory::collect!(RealTest);

/// Registers `async fn $name()` as a test that needs the servers `needs`
/// (constants of [`needs`]); `ignore = "why"` as `#[ignore]` does.
macro_rules! real_test {
    ($name:ident, needs = [$($var:ident),*] $(, ignore = $why:literal)?) => {
        inventory::submit! {
            crate::RealTest {
                path: concat!(module_path!(), "::", stringify!($name)),
                needs: &[$(crate::needs::$var),*],
                ignore: crate::first(&[$($why)?]),
                body: || Box::pin($name()),
            }
        }
    };
}

const fn first(reasons: &[&'static str]) -> Option<&'static str> {
    match reasons {
        [why, ..] => Some(why),
        [] => None,
    }
}

/// Two tests, `$spark` against Spark and `$sail` against Sail, calling
/// `$body(Srv::Spark)` and `$body(Srv::Sail)`.
macro_rules! on_both {
    ($spark:ident, $sail:ident, $body:ident) => {
        real_test!($spark, needs = [SPARK]);
        async fn $spark() {
            $body(crate::Srv::Spark).await
        }
        real_test!($sail, needs = [SAIL]);
        async fn $sail() {
            $body(crate::Srv::Sail).await
        }
    };
}

/// Runs every registered test, each on its own current-thread runtime (as
/// `#[tokio::test]` does), ignoring those whose servers are not configured.
fn main() {
    let line = real_spark::cli::split(std::env::args());
    let args = libtest_mimic::Arguments::from_iter(line.rest);
    let require = std::env::var("SPARK_CONNECT_REQUIRE_REAL").as_deref() == Ok("1");
    let mut tests: Vec<&RealTest> = inventory::iter::<RealTest>().collect();
    tests.sort_by_key(|t| t.path);
    let trials = tests
        .into_iter()
        .map(|t| (t, t.path.split_once("::").map_or(t.path, |(_, rest)| rest)))
        .filter(|(_, name)| real_spark::cli::selected(name, &line.filters, args.exact))
        .map(|(t, name)| {
            let missing: Vec<&str> = t.needs.iter().copied().filter(|v| !is_set(v)).collect();
            let body = t.body;
            let trial = libtest_mimic::Trial::test(name, move || {
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("a tokio runtime")
                    .block_on(body());
                Ok(())
            });
            match (t.ignore, missing.is_empty() || require) {
                (Some(why), _) => trial.with_ignored_flag(true).with_kind(why),
                (None, true) => trial,
                (None, false) => trial.with_ignored_flag(true).with_kind(missing.join("+")),
            }
        })
        .collect();
    libtest_mimic::run(&args, trials).exit();
}

fn is_set(var: &str) -> bool {
    std::env::var(var).is_ok_and(|v| !v.is_empty())
}

// The tests, one file a topic: tests/real_spark/*.rs. They follow `on_both!`
// so that they can use it.
mod real_spark {
    pub(crate) mod cli;
    mod compression;
    mod cuts;
    mod egress;
    mod layer;
    mod params;
    mod proxies;
    mod restart;
    mod resume;
    mod rpcs;
    mod sail_gaps;
    mod session_api;
    mod silence;
    mod upload;
}

/// The value of `var`. The harness runs a test only when the variables it
/// declares are set (or CI requires them), so a missing one is a failure:
/// either the server is not configured in CI or the test's `needs` is short.
fn remote(var: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(v) if !v.is_empty() => Some(v),
        _ => panic!("{var} is not set: no real Spark Connect server for this test"),
    }
}

fn addr_of(remote: &str) -> SocketAddr {
    let hostport = remote
        .trim_start_matches("sc://")
        .split(['/', ';'])
        .next()
        .unwrap();
    hostport.replace("localhost", "127.0.0.1").parse().unwrap()
}

/// Exact check of `SELECT id, id*2 AS x FROM range(n)`: count, sums, order.
#[derive(Debug, Default)]
struct Check {
    rows: i64,
    sum_id: i128,
    sum_x: i128,
    in_order: bool,
    /// The longest wait between two batches (after the first): with one
    /// fault, the time from the fault to the recovery, within a batch.
    max_gap: Duration,
}

fn absorb(check: &mut Check, batch: &RecordBatch) {
    let ids = batch
        .column(0)
        .as_any()
        .downcast_ref::<Int64Array>()
        .unwrap();
    let xs = batch
        .column(1)
        .as_any()
        .downcast_ref::<Int64Array>()
        .unwrap();
    assert_eq!(ids.null_count() + xs.null_count(), 0);
    for (id, x) in ids.values().iter().zip(xs.values()) {
        check.in_order &= *id == check.rows;
        check.rows += 1;
        check.sum_id += *id as i128;
        check.sum_x += *x as i128;
    }
}

fn assert_exact(check: &Check, n: i64) {
    let s = (n as i128) * (n as i128 - 1) / 2;
    assert_eq!(check.rows, n, "row count");
    assert_eq!(check.sum_id, s, "sum(id)");
    assert_eq!(check.sum_x, 2 * s, "sum(x)");
    assert!(check.in_order, "rows out of order, duplicated or lost");
}

async fn query_rows(
    spark: &SparkSession,
    n: i64,
) -> Result<(Check, spark_connect_retry::reattach::StreamStats), SparkError> {
    query_rows_as(spark, &format!("SELECT id, id*2 AS x FROM range({n})")).await
}

/// [`query_rows`] on `srv`: Sail returns `range(n)`'s partitions in any
/// order, so it is asked for `ORDER BY id`, and the order checks that no row
/// was lost or repeated.
async fn query_rows_on(
    srv: Srv,
    spark: &SparkSession,
    n: i64,
) -> Result<(Check, spark_connect_retry::reattach::StreamStats), SparkError> {
    let order = if srv == Srv::Sail { " ORDER BY id" } else { "" };
    query_rows_as(
        spark,
        &format!("SELECT id, id*2 AS x FROM range({n}){order}"),
    )
    .await
}

async fn query_rows_as(
    spark: &SparkSession,
    query: &str,
) -> Result<(Check, spark_connect_retry::reattach::StreamStats), SparkError> {
    let mut stream = spark.sql(query).await?;
    let mut check = Check {
        in_order: true,
        ..Default::default()
    };
    let mut last: Option<Instant> = None;
    while let Some(b) = stream.next_batch().await {
        absorb(&mut check, &b?);
        let now = Instant::now();
        if let Some(prev) = last {
            check.max_gap = check.max_gap.max(now - prev);
        }
        last = Some(now);
    }
    Ok((check, stream.stats()))
}

/// The crate's debug events (segments, errors, waits), shown with a failure,
/// and captured per test thread for [`keep_stall_evidence`].
fn debug_events_on_failure() {
    support::init();
}

/// Stall detection recovers a silent stream (docs/hangs.md), which also hides
/// it. When a seed's stream stalled, its events go to
/// `target/tmp/silent-stream-evidence/` so a passing run still leaves
/// evidence; `.ci/run` prints that directory.
fn keep_stall_evidence(seed: u64, what: &str, events: &[support::Event], proxy: &str) {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("silent-stream-evidence");
    let mut text = format!("seed {seed}: {what}\nproxy: {proxy}\n");
    for e in events {
        text.push_str(&format!(
            "{} {}: {} {}\n",
            e.level,
            e.target,
            e.message,
            e.fields.join(" ")
        ));
    }
    let path = dir.join(format!("seed-{seed}.log"));
    let written = std::fs::create_dir_all(&dir).and_then(|()| std::fs::write(&path, text));
    eprintln!(
        "seed {seed}: the stream stalled; evidence in {} ({written:?})",
        path.display()
    );
}

/// Seeds 0..40, or `SPARK_CONNECT_TEST_SEEDS=a..b` to replay a range.
fn seeds() -> std::ops::Range<u64> {
    match std::env::var("SPARK_CONNECT_TEST_SEEDS") {
        Ok(v) => {
            let (a, b) = v.split_once("..").expect("SPARK_CONNECT_TEST_SEEDS=a..b");
            a.parse().unwrap()..b.parse().unwrap()
        }
        Err(_) => 0..40,
    }
}

/// Default settings (stall detection on, keepalive on), with jitter from a seed.
fn session(url: &str) -> SparkSession {
    SparkSession::builder()
        .remote(url)
        .retrying(Retrying::pyspark().with_seed(11))
        .build()
        .unwrap()
}

real_test!(graceful_stream_ends_10m_rows, needs = [GRACEFUL]);
async fn graceful_stream_ends_10m_rows() {
    let Some(url) = remote("SPARK_CONNECT_TEST_REMOTE_GRACEFUL") else {
        return;
    };
    let spark = session(&url);
    let started = Instant::now();
    let (check, stats) = tokio::time::timeout(Duration::from_secs(300), query_rows(&spark, TEN_M))
        .await
        .expect("hung")
        .unwrap();
    assert_exact(&check, TEN_M);
    eprintln!(
        "graceful: 10M rows in {:.2?}, {} reattaches ({} graceful ends), {} responses",
        started.elapsed(),
        stats.reattaches,
        stats.graceful_ends,
        stats.responses
    );
    assert!(
        stats.graceful_ends > 10,
        "the server's 1s/1m limits must end segments: {stats:?}"
    );
    assert_eq!(stats.policy_retries, 0);
    spark.close().await.expect("close");
}

/// A plain query, exact.
async fn plain_query(srv: Srv) {
    let Some(url) = srv.remote() else {
        return;
    };
    let spark = session(&url);
    let (check, stats) = tokio::time::timeout(
        Duration::from_secs(120),
        query_rows_on(srv, &spark, 1_000_000),
    )
    .await
    .expect("hung")
    .unwrap();
    assert_exact(&check, 1_000_000);
    assert_eq!(
        (stats.reattaches, stats.re_executes, stats.policy_retries),
        (0, 0, 0),
        "{stats:?}"
    );
    spark.close().await.expect("close");
}
on_both!(spark_plain_query, sail_plain_query, plain_query);
