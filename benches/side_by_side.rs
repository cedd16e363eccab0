//! One case of the side-by-side benchmark against a real Spark Connect
//! server: this crate's client, run once, one JSON line on stdout.
//!
//! ```text
//! cargo bench --bench side_by_side -- \
//!     --remote sc://127.0.0.1:15010 --case arrow10m|cuts10m|first_batch [--proxy-cuts N]
//! ```
//!
//! `scripts/side-by-side.sh` runs it alternately with
//! `scripts/side_by_side_pyspark.py` (PySpark 4.3.0's own client, the same
//! cases) against one server, so drift and noise hit both clients alike.
//! One case per process keeps the two clients symmetric: each starts cold
//! (no warm connection pool or allocator from an earlier case), builds its
//! session and makes one warm-up `spark_version()` call *before* the timer,
//! so the timer covers only the query: from just before `sql()` to the last
//! batch (`arrow10m`, `cuts10m`) or to the first batch (`first_batch`).
//!
//! Results are kept (like PySpark's `toArrow()` keeps a `pyarrow.Table`) and
//! verified after the timer stops (row count, `x = 2 * id`, exact sum of
//! `x`), so verification costs neither client anything.
//!
//! `cuts10m` is `arrow10m` through a cutting proxy (`examples/fault_proxy.rs`,
//! started by the driver; `--remote` then points at the proxy). The proxy
//! counts the cuts it made; `--proxy-cuts N` is only echoed in the JSON line
//! (with the crate's own reattach count) so a run can be checked against it.
//!
//! `--remote` is the session's own connection string, so a run behind a TLS
//! load balancer passes `sc://host:port/;use_ssl=true;tls_ca_file=ca.pem`.
//! It defaults to `SPARK_REMOTE`, `--case` to `SBS_CASE`.

mod support;

use std::process::ExitCode;
use std::time::{Duration, Instant};

use spark_connect_retry::session::{SparkError, SparkSession};

const ROWS: i64 = 10_000_000;
const QUERY: &str = "SELECT id, id*2 AS x FROM range(10000000)";

/// [`QUERY`] plus `SBS_QUERY_SUFFIX` (`" ORDER BY id"` against Sail, which
/// returns `range`'s partitions in any order).
fn query() -> String {
    format!(
        "{QUERY}{}",
        std::env::var("SBS_QUERY_SUFFIX").unwrap_or_default()
    )
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Case {
    Arrow10m,
    Cuts10m,
    FirstBatch,
}

impl Case {
    fn name(self) -> &'static str {
        match self {
            Case::Arrow10m => "arrow10m",
            Case::Cuts10m => "cuts10m",
            Case::FirstBatch => "first_batch",
        }
    }
}

struct Args {
    remote: String,
    case: Case,
    proxy_cuts: u64,
}

const USAGE: &str =
    "usage: side_by_side --remote URL --case arrow10m|cuts10m|first_batch [--proxy-cuts N]";

fn parse_case(s: &str) -> Result<Case, String> {
    match s {
        "arrow10m" => Ok(Case::Arrow10m),
        "cuts10m" => Ok(Case::Cuts10m),
        "first_batch" => Ok(Case::FirstBatch),
        other => Err(format!("unknown case {other:?}\n{USAGE}")),
    }
}

fn parse_args() -> Result<Args, String> {
    let mut remote = std::env::var("SPARK_REMOTE").ok();
    let mut case = std::env::var("SBS_CASE").ok();
    let mut proxy_cuts = 0;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--remote" => remote = Some(args.next().ok_or("--remote needs a URL")?),
            "--case" => case = Some(args.next().ok_or("--case needs a name")?),
            "--proxy-cuts" => {
                proxy_cuts = args
                    .next()
                    .and_then(|n| n.parse().ok())
                    .ok_or("--proxy-cuts needs a number")?
            }
            // `cargo bench` passes `--bench` to harness = false binaries.
            "--bench" => {}
            "-h" | "--help" => return Err(USAGE.to_owned()),
            other => return Err(format!("unknown argument {other:?}\n{USAGE}")),
        }
    }
    Ok(Args {
        remote: remote.ok_or_else(|| format!("no --remote and no SPARK_REMOTE\n{USAGE}"))?,
        case: parse_case(&case.ok_or_else(|| USAGE.to_owned())?)?,
        proxy_cuts,
    })
}

/// CPU time (user + system, all threads) of this process, from
/// `/proc/self/stat`, to tell "slower because busier" from "slower because
/// waiting". Clock ticks are 100 Hz on Linux; `None` elsewhere.
fn cpu_time() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the parenthesised command name; utime and stime are
    // fields 14 and 15 of the whole line, i.e. 11 and 12 after `) `.
    let rest = &stat[stat.rfind(')')? + 2..];
    let mut fields = rest.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(Duration::from_millis((utime + stime) * 10))
}

async fn run(args: &Args) -> Result<String, SparkError> {
    let spark = SparkSession::builder()
        .remote(args.remote.clone())
        .build()?;
    // Warm-up outside the timer: connects the channel and makes one round
    // trip, as the Python side does with `spark.version`.
    let version = spark.spark_version().await?;

    let cpu0 = cpu_time();
    let t0 = Instant::now();
    let mut stream = spark.sql(&query()).await?;
    let mut batches = Vec::new();
    while let Some(b) = stream.next_batch().await {
        batches.push(b?);
        if args.case == Case::FirstBatch {
            break;
        }
    }
    let wall = t0.elapsed();
    let cpu = cpu0.zip(cpu_time()).map(|(a, b)| b.saturating_sub(a));
    let stats = stream.stats();

    if args.case == Case::FirstBatch {
        // Stop the rest of the 10M-row query on the server so it does not
        // compete with the next run (the Python side does the same).
        let _ = spark.interrupt_all().await;
    }
    drop(stream);
    spark.close().await.expect("close");
    // ReleaseExecute calls the server answered, during the stream and after.
    let releases = spark.releases().sent();

    let (rows, sum_x) = support::verify_id_x(&batches).map_err(SparkError::Protocol)?;
    let expected_rows = if args.case == Case::FirstBatch {
        rows.max(1)
    } else {
        ROWS
    };
    // sum of 2*id for id in 0..rows
    let expected_sum = i128::from(rows) * i128::from(rows - 1);
    if rows != expected_rows || sum_x != expected_sum || rows == 0 {
        return Err(SparkError::Protocol(format!(
            "wrong result: {rows} rows (want {expected_rows}), sum_x {sum_x} (want {expected_sum})"
        )));
    }
    Ok(format!(
        concat!(
            "{{\"client\":\"rust\",\"case\":\"{}\",\"wall_ms\":{:.1},\"cpu_ms\":{},",
            "\"rows\":{},\"sum_x\":{},\"batches\":{},\"reattaches\":{},\"retries\":{},",
            "\"transparent_retries\":{},\"releases\":{},\"proxy_cuts\":{},\"server\":\"{}\"}}"
        ),
        args.case.name(),
        wall.as_secs_f64() * 1e3,
        cpu.map_or("null".to_owned(), |c| c.as_millis().to_string()),
        rows,
        sum_x,
        batches.len(),
        stats.reattaches,
        stats.policy_retries + stats.immediate_retries,
        stats.transparent_retries,
        releases,
        args.proxy_cuts,
        version,
    ))
}

fn main() -> ExitCode {
    support::main_with(
        parse_args(),
        |a| format!("side_by_side {}", a.case.name()),
        |rt, a| rt.block_on(run(a)).map_err(|e| e.to_string()),
    )
}
