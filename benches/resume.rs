//! The cost of verified resumption on the hot path: the same 10M-row query
//! drained with `resume_queries` off and on, interleaved in one run.
//!
//! ```text
//! cargo bench --bench resume [-- --rounds 7] [--remote sc://HOST:PORT]
//! ```
//!
//! Off, the stream does no per-row work; on, every delivered batch feeds
//! the running digest (XXH3-128 over each column's values, arrow-row for
//! non-fixed-width columns). The query is `SELECT id, id*2 AS x FROM
//! range(10000000)` (two Int64 columns, 160 MB of values), against the
//! embedded server (default; 10 000 rows per batch, as Spark's
//! `maxRecordsPerBatch`) or a real one. Each round drains the result once
//! per arm, in alternating order, and checks every row; the medians and
//! their ratio are printed, one line per arm and one for the ratio.

mod support;

use std::process::ExitCode;
use std::time::Instant;

use spark_connect_retry::session::SparkSession;
use spark_connect_testkit::TestServer;

const QUERY: &str = "SELECT id, id*2 AS x FROM range(10000000)";
const ROWS: i64 = 10_000_000;

struct Args {
    rounds: usize,
    remote: Option<String>,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        rounds: 7,
        remote: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--rounds" => {
                a.rounds = args
                    .next()
                    .and_then(|v| v.parse().ok())
                    .filter(|n| *n > 0)
                    .ok_or("--rounds takes a positive number")?
            }
            "--remote" => a.remote = Some(args.next().ok_or("--remote takes a URL")?),
            "--bench" => {}
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(a)
}

/// Drain the query once; seconds from the request to the last row.
async fn drain(remote: &str, resume: bool) -> Result<f64, String> {
    let spark = SparkSession::builder()
        .remote(remote)
        .renew_stale_session(true)
        .resume_queries(resume)
        .build()
        .map_err(|e| e.to_string())?;
    spark.spark_version().await.map_err(|e| e.to_string())?; // warm-up round trip
    let start = Instant::now();
    let batches = spark
        .sql(QUERY)
        .await
        .map_err(|e| e.to_string())?
        .collect()
        .await
        .map_err(|e| e.to_string())?;
    let secs = start.elapsed().as_secs_f64();
    let (rows, _) = support::verify_id_x(&batches)?;
    if rows != ROWS {
        return Err(format!("{rows} rows, expected {ROWS}"));
    }
    drop(batches);
    spark.close().await.map_err(|e| e.to_string())?;
    Ok(secs)
}

fn main() -> ExitCode {
    support::main_with(
        parse_args(),
        |a| {
            format!(
                "resume bench ({})",
                a.remote.as_deref().unwrap_or("embedded")
            )
        },
        |rt, a| {
            rt.block_on(async {
                let server = match &a.remote {
                    Some(_) => None,
                    None => Some(
                        TestServer::builder()
                            .rows_per_batch(10_000)
                            .start()
                            .await
                            .map_err(|e| e.to_string())?,
                    ),
                };
                let remote = a
                    .remote
                    .clone()
                    .unwrap_or_else(|| server.as_ref().expect("embedded").remote());
                drain(&remote, false).await?; // warm-up
                let (mut off, mut on) = (Vec::new(), Vec::new());
                for round in 0..a.rounds {
                    for resume in if round % 2 == 0 { [false, true] } else { [true, false] } {
                        let secs = drain(&remote, resume).await?;
                        eprintln!("round {round}: resume {resume}: {secs:.3} s");
                        if resume { on.push(secs) } else { off.push(secs) }
                    }
                }
                let (off, on) = (support::median(off), support::median(on));
                Ok(format!(
                    "resume off: {off:.3} s ({:.1} M rows/s)\nresume on:  {on:.3} s ({:.1} M rows/s)\non/off: {:.3} (median of {} rounds, 10M rows)",
                    ROWS as f64 / off / 1e6,
                    ROWS as f64 / on / 1e6,
                    on / off,
                    a.rounds
                ))
            })
        },
    )
}
