//! The main demo: a large query survives injected faults, and every row
//! arrives exactly once.
//!
//! ```text
//! cargo run --example demo                 # embedded fault-injecting server
//! cargo run --example demo -- --remote sc://127.0.0.1:15002   # a real server
//! ```

use std::time::{Duration, Instant};

use arrow_array::Int64Array;
use spark_connect_retry::session::{SparkError, SparkSession};
use spark_connect_testkit::{Fault, Rpc, SparkException, TestServer};
use tonic::Code;

const ROWS: i64 = 2_000_000;

async fn run(remote: &str) -> Result<(), SparkError> {
    let spark = SparkSession::builder().remote(remote).build()?;
    println!("spark version: {}", spark.spark_version().await?);
    let query = format!("SELECT id, id*2 AS x FROM range({ROWS})");
    println!("running: {query}");
    let started = Instant::now();
    let mut stream = spark.sql(&query).await?;
    let (mut rows, mut sum_id, mut sum_x) = (0i64, 0i128, 0i128);
    let mut expected_next = 0i64;
    let mut in_order = true;
    while let Some(batch) = stream.next_batch().await {
        let batch = batch?;
        let ids = batch.column(0).as_any().downcast_ref::<Int64Array>();
        let xs = batch.column(1).as_any().downcast_ref::<Int64Array>();
        let (Some(ids), Some(xs)) = (ids, xs) else {
            return Err(SparkError::Protocol("unexpected column types".into()));
        };
        for (id, x) in ids.values().iter().zip(xs.values()) {
            in_order &= *id == expected_next;
            expected_next = id + 1;
            sum_id += *id as i128;
            sum_x += *x as i128;
        }
        rows += batch.num_rows() as i64;
    }
    let elapsed = started.elapsed();
    let s = stream.stats();
    let want_sum = (ROWS as i128) * (ROWS as i128 - 1) / 2;
    println!("rows:        {rows} (expected {ROWS})");
    println!("sum(id):     {sum_id} (expected {want_sum})");
    println!("sum(x):      {sum_x} (expected {})", want_sum * 2);
    println!("in order, no gaps, no duplicates: {in_order}");
    println!("responses:   {}", s.responses);
    println!(
        "reattaches:  {} ({} after graceful stream ends)",
        s.reattaches, s.graceful_ends
    );
    println!("re-executes: {}", s.re_executes);
    println!(
        "retries:     {} after backoff, {} immediate",
        s.policy_retries, s.immediate_retries
    );
    println!("elapsed:     {elapsed:.2?}");
    spark.close().await.expect("close");
    let exact = rows == ROWS && sum_id == want_sum && sum_x == want_sum * 2 && in_order;
    if exact {
        println!("OK: every row arrived exactly once");
        Ok(())
    } else {
        Err(SparkError::Protocol("result is not exact".into()))
    }
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let mut args = std::env::args().skip(1);
    let remote = match (args.next().as_deref(), args.next()) {
        (Some("--remote"), Some(url)) => Some(url),
        (None, _) => None,
        _ => {
            eprintln!("usage: demo [--remote sc://host:port]");
            return std::process::ExitCode::from(2);
        }
    };
    let server;
    let remote = match remote {
        Some(r) => r,
        None => {
            server = match TestServer::builder()
                .rows_per_batch(4096)
                .max_bytes_per_stream(4 << 20)
                .start()
                .await
            {
                Ok(s) => s,
                Err(e) => {
                    eprintln!("cannot start the embedded server: {e}");
                    return std::process::ExitCode::FAILURE;
                }
            };
            println!("embedded Spark Connect server on {}", server.remote());
            println!("faults injected:");
            let faults = [
                (
                    "the first ExecutePlan is lost before the server reads it",
                    Fault::lose_request().on(Rpc::ExecutePlan),
                ),
                (
                    "UNAVAILABLE on the next ReattachExecute",
                    Fault::unavailable().on(Rpc::ReattachExecute),
                ),
                (
                    "a TCP reset after 20 responses",
                    Fault::reset_connection()
                        .on(Rpc::ExecutePlan)
                        .after_responses(20),
                ),
                (
                    "RESOURCE_EXHAUSTED with RetryInfo(300 ms) on a reattach",
                    Fault::status(Code::ResourceExhausted, "server busy")
                        .retry_info(Duration::from_millis(300))
                        .on(Rpc::ReattachExecute),
                ),
                (
                    "INVALID_CURSOR.DISCONNECTED after 15 responses",
                    Fault::spark(SparkException::cursor_disconnected())
                        .on(Rpc::ReattachExecute)
                        .after_responses(15),
                ),
                (
                    "a TCP reset after 30 more responses",
                    Fault::reset_connection()
                        .on(Rpc::ReattachExecute)
                        .after_responses(30),
                ),
            ];
            for (what, fault) in faults {
                println!("  - {what}");
                server.faults().push(fault);
            }
            println!("  - graceful stream ends every 4 MiB (no ResultComplete)");
            server.remote()
        }
    };
    match run(&remote).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("FAILED: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
