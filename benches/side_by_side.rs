//! One case of the side-by-side benchmark against a real Spark Connect
//! server: this crate's client, run once, one JSON line on stdout.
//!
//! ```text
//! cargo bench --bench side_by_side -- \
//!     --remote sc://127.0.0.1:15010 --case arrow10m|cuts10m|first_batch|wide2m|wide200k \
//!     [--proxy-cuts N]
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
//! `wide2m` and `wide200k` read rows that compress the way real tables do
//! ([`WIDE`]: an id, a seeded random int, a date and a 64-character hex
//! string; about 84 bytes a row uncompressed, 170 MB for 2M rows), for the
//! compressed-result arms (`;result_compression=zstd` in `--remote`). They
//! are checked after the timer: ids 0.., every hash 64 characters, no
//! nulls; the sum of the random column is printed (`sum_r`) so the driver
//! can check that every client read the same values.
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

use arrow_array::cast::AsArray;
use arrow_array::types::{Date32Type, Int32Type, Int64Type};
use arrow_array::{Array, RecordBatch};
use spark_connect_retry::session::{SparkError, SparkSession};

const QUERY: &str = "SELECT id, id*2 AS x FROM range(10000000)";
/// The wide cases' query, `{n}` the row count (the same text as in
/// `scripts/side_by_side_pyspark.py`).
const WIDE: &str = "SELECT id, CAST(rand(7) * 2147483647 AS INT) AS r, \
    date_add(DATE'2000-01-01', CAST(id % 10000 AS INT)) AS d, \
    sha2(CAST(id AS STRING), 256) AS h FROM range({n})";

#[derive(Clone, Copy, PartialEq, Eq)]
enum Case {
    Arrow10m,
    Cuts10m,
    FirstBatch,
    Wide2m,
    Wide200k,
}

impl Case {
    /// The rows the full result has.
    fn rows(self) -> i64 {
        match self {
            Case::Wide2m => 2_000_000,
            Case::Wide200k => 200_000,
            _ => 10_000_000,
        }
    }

    fn wide(self) -> bool {
        matches!(self, Case::Wide2m | Case::Wide200k)
    }

    /// The query plus `SBS_QUERY_SUFFIX` (`" ORDER BY id"` against Sail,
    /// which returns `range`'s partitions in any order).
    fn query(self) -> String {
        let q = if self.wide() {
            WIDE.replace("{n}", &self.rows().to_string())
        } else {
            QUERY.to_owned()
        };
        format!(
            "{q}{}",
            std::env::var("SBS_QUERY_SUFFIX").unwrap_or_default()
        )
    }

    fn name(self) -> &'static str {
        match self {
            Case::Arrow10m => "arrow10m",
            Case::Cuts10m => "cuts10m",
            Case::FirstBatch => "first_batch",
            Case::Wide2m => "wide2m",
            Case::Wide200k => "wide200k",
        }
    }
}

struct Args {
    remote: String,
    case: Case,
    proxy_cuts: u64,
}

const USAGE: &str = "usage: side_by_side --remote URL \
    --case arrow10m|cuts10m|first_batch|wide2m|wide200k [--proxy-cuts N]";

fn parse_case(s: &str) -> Result<Case, String> {
    match s {
        "arrow10m" => Ok(Case::Arrow10m),
        "cuts10m" => Ok(Case::Cuts10m),
        "first_batch" => Ok(Case::FirstBatch),
        "wide2m" => Ok(Case::Wide2m),
        "wide200k" => Ok(Case::Wide200k),
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

/// Peak resident memory of this process (`VmHWM`, KiB; Linux), `None`
/// elsewhere: the client's whole footprint, results kept included.
fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find_map(|l| l.strip_prefix("VmHWM:"))?;
    line.trim().trim_end_matches("kB").trim().parse().ok()
}

/// The rows of a [`WIDE`] result and the sum of its random column, checking
/// that ids run 0, 1, 2, ..., that no value is null and that every hash has
/// 64 characters.
fn verify_wide(batches: &[RecordBatch]) -> Result<(i64, i64), String> {
    let mut next_id = 0i64;
    let mut sum_r = 0i64;
    for b in batches {
        if b.num_columns() != 4 || (0..4).any(|i| b.column(i).null_count() > 0) {
            return Err(format!("want 4 non-null columns: {:?}", b.schema()));
        }
        let ids = b.column(0).as_primitive_opt::<Int64Type>().ok_or("id")?;
        let rs = b.column(1).as_primitive_opt::<Int32Type>().ok_or("r")?;
        b.column(2).as_primitive_opt::<Date32Type>().ok_or("d")?;
        let hs = b.column(3).as_string_opt::<i32>().ok_or("h")?;
        for ((id, r), h) in ids.values().iter().zip(rs.values()).zip(hs.iter()) {
            if *id != next_id || h.map_or(0, str::len) != 64 {
                return Err(format!("row {next_id}: id={id} h={h:?}"));
            }
            next_id += 1;
            sum_r += i64::from(*r);
        }
    }
    Ok((next_id, sum_r))
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
    let mut stream = spark.sql(&args.case.query()).await?;
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

    // The narrow cases: x = 2 * id, so the sum of x is rows * (rows - 1).
    // The wide ones: ids and hashes checked row by row, the sum of r kept.
    let (rows, sum_x, sum_r) = if args.case.wide() {
        let (rows, sum_r) = verify_wide(&batches).map_err(SparkError::Protocol)?;
        (rows, None, Some(sum_r))
    } else {
        let (rows, sum_x) = support::verify_id_x(&batches).map_err(SparkError::Protocol)?;
        let want = i128::from(rows) * i128::from(rows - 1);
        if sum_x != want {
            return Err(SparkError::Protocol(format!(
                "wrong result: sum_x {sum_x} (want {want})"
            )));
        }
        (rows, Some(sum_x), None)
    };
    let expected_rows = if args.case == Case::FirstBatch {
        rows.max(1)
    } else {
        args.case.rows()
    };
    if rows != expected_rows || rows == 0 {
        return Err(SparkError::Protocol(format!(
            "wrong result: {rows} rows (want {expected_rows})"
        )));
    }
    let json_or_null = |v: Option<String>| v.unwrap_or_else(|| "null".to_owned());
    Ok(format!(
        concat!(
            "{{\"client\":\"rust\",\"case\":\"{}\",\"wall_ms\":{:.1},\"cpu_ms\":{},",
            "\"cpu_ns_per_row\":{},\"peak_rss_kib\":{},",
            "\"rows\":{},\"sum_x\":{},\"batches\":{},\"reattaches\":{},\"retries\":{},",
            "\"transparent_retries\":{},\"releases\":{},\"proxy_cuts\":{},\"sum_r\":{},",
            "\"server\":\"{}\"}}"
        ),
        args.case.name(),
        wall.as_secs_f64() * 1e3,
        json_or_null(cpu.map(|c| c.as_millis().to_string())),
        json_or_null(cpu.map(|c| format!("{:.1}", c.as_nanos() as f64 / rows as f64))),
        json_or_null(peak_rss_kib().map(|k| k.to_string())),
        rows,
        json_or_null(sum_x.map(|x| x.to_string())),
        batches.len(),
        stats.reattaches,
        stats.policy_retries + stats.immediate_retries,
        stats.transparent_retries,
        releases,
        args.proxy_cuts,
        json_or_null(sum_r.map(|r| r.to_string())),
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
