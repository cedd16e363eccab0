//! This crate's own `SparkSession` as a client of the chaos table
//! (scripts/chaos-table.sh, its `ours` column): run one query and print what
//! the session returned as one JSON line.
//!
//! Why an example: the table runs every client as a program taking
//! `--remote` and `--query` and judges the JSON line it prints, so the
//! session is measured by the same rules, on the same faults, as PySpark,
//! the JVM client and the official Rust client. The session is built with
//! its defaults (`SparkSession::builder().remote(..).build()`): its own
//! retries, reattach and idle timeout are what is under test.
//!
//! ```text
//! cargo run --example chaos_client -- --remote sc://127.0.0.1:15002 \
//!     --query "SELECT id, id*2 AS x FROM range(2000000)"
//! ```
//!
//! It prints `{"client":"ours","rows":N,"wrong":..,"error":..,"seconds":S}`:
//! the rows returned, why they are not exactly `range(n)` with `x = id * 2`
//! in order (`null` when they are), and the error the session returned
//! (`[ERROR_CLASS] message` when the server named a class), `null` when
//! none. Each batch is checked as it arrives and then dropped, so a long
//! result is never held whole. A client error is the result under test, so
//! it exits 0 after printing it; only bad arguments exit non-zero.

use std::process::ExitCode;
use std::time::Instant;

use arrow_array::{Array, Int64Array, RecordBatch};
use spark_connect_retry::session::{SparkError, SparkSession};

const USAGE: &str = "usage: chaos_client --remote sc://HOST:PORT --query SQL";

/// The rows seen so far, and the first reason they are not `range(n)`
/// with `x = id * 2`, in order.
#[derive(Default)]
struct Check {
    rows: u64,
    wrong: Option<String>,
}

impl Check {
    fn batch(&mut self, batch: &RecordBatch) {
        let int64 = |i: usize| {
            batch
                .columns()
                .get(i)?
                .as_any()
                .downcast_ref::<Int64Array>()
        };
        let Some(ids) = int64(0) else {
            self.wrong
                .get_or_insert_with(|| "column 0 is not Int64".to_owned());
            self.rows += batch.num_rows() as u64;
            return;
        };
        let xs = int64(1);
        for (i, id) in ids.values().iter().enumerate() {
            let row = self.rows;
            if self.wrong.is_none() && (ids.is_null(i) || *id != row as i64) {
                self.wrong = Some(format!("row {row} has id {id}"));
            }
            if self.wrong.is_none() && xs.is_some_and(|xs| xs.value(i) != id * 2) {
                self.wrong = Some(format!("row {row} has x != id * 2"));
            }
            self.rows += 1;
        }
    }
}

async fn run(remote: &str, query: &str, check: &mut Check) -> Result<(), SparkError> {
    let spark = SparkSession::builder().remote(remote).build()?;
    let result = async {
        let mut stream = spark.sql(query).await?;
        while let Some(batch) = stream.next_batch().await {
            check.batch(&batch?);
        }
        Ok(())
    }
    .await;
    // The session may be gone (the restart scenario): the query's own
    // result is the answer, not the close's.
    let _ = spark.close().await;
    result
}

fn error_text(e: &SparkError) -> String {
    let first = e.to_string();
    let first = first.lines().next().unwrap_or("");
    match e.error_class() {
        Some(class) if !first.contains(class) => format!("[{class}] {first}"),
        _ => first.to_owned(),
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let (mut remote, mut query) = (None, None);
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--remote" => remote = args.next(),
            "--query" => query = args.next(),
            other => {
                eprintln!("unknown argument {other:?}\n{USAGE}");
                return ExitCode::from(2);
            }
        }
    }
    let (Some(remote), Some(query)) = (remote, query) else {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    };
    let started = Instant::now();
    let mut check = Check::default();
    let error = run(&remote, &query, &mut check)
        .await
        .err()
        .map(|e| error_text(&e));
    let seconds = started.elapsed().as_secs_f64();
    let line = serde_json::json!({
        "client": "ours",
        "rows": check.rows,
        "wrong": check.wrong,
        "error": error,
        "seconds": (seconds * 1000.0).round() / 1000.0,
    });
    println!("{line}");
    ExitCode::SUCCESS
}
