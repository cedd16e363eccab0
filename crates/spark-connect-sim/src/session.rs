//! The session as a client: a `SparkSession` built from an `sc://` string
//! whose every connection is dialled on simulated TCP by a
//! [`Connector`](spark_connect_retry::connector::Connector), with PySpark's
//! policy seeded from the schedule. It runs several SQL queries at once on
//! the one session (SPARK-59481: concurrent commands got each other's
//! responses), each over rows of its own (`range(k * 1e6, k * 1e6 + n)`),
//! then closes the session.
//!
//! Under a token fault the session is given a token provider that asks an
//! identity service for a new token (`CurrentToken`), and the remote
//! is `sc://localhost` (a token goes over plaintext to localhost only):
//! the connector dials the simulated host whatever the URI says.
//!
//! The session draws its session and operation ids (UUIDv4) from the OS
//! RNG, which the simulation cannot seed: the trace replaces every UUID by
//! its order of first appearance, as it does the server's.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use arrow_array::{Array, Int64Array};
use spark_connect_retry::reattach::StreamStats;
use spark_connect_retry::retrying::{PySparkRetrying, Retrying};
use spark_connect_retry::session::{SparkError, SparkSession};
use spark_connect_retry::token::{AccessToken, Token, provider_fn};
use tonic_retry_echo::metrics::Pipeline;

use crate::client::{QueryResult, Timeline};
use crate::net::{PORT, RequestLog};
use crate::trace::Trace;

/// Where query `k`'s rows start: far apart, so that rows of one query
/// delivered to another cannot pass for its own.
pub fn query_start(k: usize) -> i64 {
    k as i64 * 1_000_000
}

/// What the session did.
#[derive(Debug, Clone, Default)]
pub struct SessionResult {
    /// Each query's outcome, in the order started.
    pub queries: Vec<QueryResult>,
    /// Each query's stream counters at its end (`None`: `sql()` failed, no
    /// stream).
    pub stats: Vec<Option<StreamStats>>,
    /// `close()` succeeded.
    pub closed: bool,
    /// Connections dialled.
    pub dials: u64,
    /// What the session's meter received, read at the end.
    pub metrics: SessionMetrics,
}

/// The session's own instruments, summed over their labels, as its meter
/// provider received them (`docs/metrics.md`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SessionMetrics {
    /// `spark_connect.client.result.reattaches`, every cause.
    pub reattaches: u64,
    /// `spark_connect.client.result.re_executes`.
    pub re_executes: u64,
    /// `spark_connect.client.result.rows`.
    pub rows: u64,
}

impl SessionMetrics {
    fn read(pipeline: &Pipeline) -> SessionMetrics {
        let recorded = pipeline.read();
        let sum = |name: &str| {
            recorded
                .of(&format!("spark_connect.client.{name}"))
                .iter()
                .map(|p| p.sum as u64)
                .sum()
        };
        SessionMetrics {
            reattaches: sum("result.reattaches"),
            re_executes: sum("result.re_executes"),
            rows: sum("result.rows"),
        }
    }
}

fn error_of(e: &SparkError) -> (tonic::Code, String) {
    let code = e
        .server_error()
        .map_or(tonic::Code::Unknown, |s| s.status().code());
    (code, e.to_string())
}

/// Runs query `k` (of `rows` rows) on `spark`, its times in `times`.
async fn query(
    spark: &SparkSession,
    k: usize,
    rows: i64,
    trace: &Trace,
    times: &Timeline,
) -> (QueryResult, Option<StreamStats>) {
    let start = query_start(k);
    let mut out = QueryResult {
        offsets_ok: true,
        start,
        expected: rows,
        ..Default::default()
    };
    let sql = format!("SELECT id FROM range({start}, {})", start + rows);
    let mut stream = match spark.sql(&sql).await {
        Ok(s) => s,
        Err(e) => {
            trace.now(format!("client: query {k} sql() failed: {e}"));
            out.error = Some(error_of(&e));
            times.ended(k);
            return (out, None);
        }
    };
    times.opened(k);
    trace.now(format!(
        "client: query {k} operation {}",
        stream.operation_id()
    ));
    loop {
        match stream.next_batch().await {
            Some(Ok(batch)) => {
                times.response(k);
                let Some(ids) = batch
                    .column_by_name("id")
                    .and_then(|c| c.as_any().downcast_ref::<Int64Array>())
                else {
                    trace.now(format!("client: query {k} batch without an id column"));
                    out.offsets_ok = false;
                    continue;
                };
                debug_assert_eq!(ids.null_count(), 0);
                trace.now(format!(
                    "client: query {k} batch of {} from {:?}",
                    ids.len(),
                    ids.values().first()
                ));
                out.rows.extend(ids.values().iter().copied());
            }
            Some(Err(e)) => {
                trace.now(format!("client: query {k} failed: {e}"));
                out.error = Some(error_of(&e));
                break;
            }
            None => {
                trace.now(format!("client: query {k} ended"));
                out.complete = true;
                break;
            }
        }
    }
    times.ended(k);
    let stats = stream.stats();
    trace.now(format!("client: query {k} stats {stats:?}"));
    (out, Some(stats))
}

/// A new token from the identity service: what the session's provider
/// hands out under a token fault.
pub(crate) type CurrentToken = Arc<dyn Fn() -> String + Send + Sync>;

/// Builds the session against `target` (with a token provider over
/// `token`, if given), runs `queries` at once (their times in `times`),
/// closes it.
pub(crate) async fn run_session(
    seed: u64,
    target: &'static str,
    queries: &[i64],
    token: Option<CurrentToken>,
    log: RequestLog,
    trace: &Trace,
    times: &Timeline,
) -> SessionResult {
    let dials = Arc::new(AtomicU64::new(0));
    let pipeline = Pipeline::new();
    let mut builder = SparkSession::builder()
        .meter(pipeline.meter())
        .remote(format!("sc://localhost:{PORT}"))
        .connector(crate::net::connector(target, log, dials.clone()))
        .retrying(Retrying::pyspark().with_seed(seed));
    if let Some(current) = token {
        builder = builder.token_provider(provider_fn("identity-service", move || {
            let token = Token::new(current());
            async move { Ok(AccessToken::new(token?)) }
        }));
    }
    let built = builder.build();
    let spark = match built {
        Ok(s) => s,
        Err(e) => {
            trace.now(format!("client: session build failed: {e}"));
            times.ended(0);
            let err = QueryResult {
                error: Some(error_of(&e)),
                ..Default::default()
            };
            return SessionResult {
                queries: vec![err],
                ..Default::default()
            };
        }
    };
    trace.now(format!("client: session {}", spark.session_id()));
    let runs = queries
        .iter()
        .enumerate()
        .map(|(k, rows)| query(&spark, k, *rows, trace, times));
    let (results, stats): (Vec<_>, Vec<_>) = futures_util::future::join_all(runs)
        .await
        .into_iter()
        .unzip();
    // No bound of its own: a close that never returns is a hang.
    let closed = match spark.close().await {
        Ok(()) => {
            trace.now("client: closed");
            true
        }
        Err(e) => {
            trace.now(format!("client: close failed: {e}"));
            false
        }
    };
    SessionResult {
        queries: results,
        stats,
        closed,
        dials: dials.load(std::sync::atomic::Ordering::Relaxed),
        metrics: SessionMetrics::read(&pipeline),
    }
}
