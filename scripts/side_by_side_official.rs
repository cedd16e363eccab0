//! The `official` arm of scripts/side-by-side.sh: the official Rust client,
//! `apache-spark-connect` 4.2.0 from crates.io, run once, one JSON line on
//! stdout. Built by the script in a directory of its own (it needs a system
//! `protoc`, which this crate never does), so it is not part of the crate.
//!
//! Same shape as the other arms: connect and one `version()` round trip
//! before the timer; the timer covers `sql()` to the last batch
//! (`arrow10m`, `collect_record_batches`) or to the first one
//! (`first_batch`, `to_local_iterator`); the result is checked after it.
//!
//! With `--query SQL` it is the `official` column of scripts/chaos-table.sh
//! instead: it runs that query once and prints what the client returned
//! (rows, whether they are exactly `range(n)` with `x = id * 2` in order, and
//! the error it returned, if any) as one JSON line, never panicking on a
//! client error: what the client does under faults is the result under test.
//!
//! Built by scripts/official-client.sh, the one place that builds it.

use std::time::Instant;

use arrow::array::{Array, Int64Array};
use arrow::record_batch::RecordBatch;
use spark_connect::session::SparkSession;

const ROWS: i64 = 10_000_000;
const QUERY: &str = "SELECT id, id*2 AS x FROM range(10000000)";

fn main() {
    let mut args = std::env::args().skip(1);
    let (mut remote, mut case, mut query) = (String::new(), String::new(), None);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--remote" => remote = args.next().expect("--remote URL"),
            "--case" => case = args.next().expect("--case NAME"),
            "--query" => query = Some(args.next().expect("--query SQL")),
            "--proxy-cuts" => {
                args.next();
            }
            other => panic!("unknown argument {other:?}"),
        }
    }
    if let Some(query) = query {
        scenario(&remote, &query);
        return;
    }
    let spark = SparkSession::builder()
        .remote(&remote)
        .get_or_create()
        .expect("connect");
    let version = spark.version().expect("version");
    let t0 = Instant::now();
    let df = spark.sql(QUERY).expect("sql");
    let rows: i64 = if case == "first_batch" {
        let mut it = df.to_local_iterator(false).expect("iterator");
        let first = it.next().expect("a row").expect("no error");
        drop(first);
        1
    } else {
        df.collect_record_batches()
            .expect("collect")
            .iter()
            .map(|b| b.num_rows() as i64)
            .sum()
    };
    let wall = t0.elapsed();
    if case == "first_batch" {
        let _ = spark.interrupt_all();
    }
    let want = if case == "first_batch" { 1 } else { ROWS };
    assert_eq!(rows, want, "row count");
    let _ = spark.stop();
    println!(
        "{{\"client\":\"official\",\"case\":\"{case}\",\"wall_ms\":{:.1},\"cpu_ms\":null,\"rows\":{rows},\"proxy_cuts\":0,\"server\":\"{version}\"}}",
        wall.as_secs_f64() * 1e3
    );
}

/// The chaos table's run: one query, what the client returned as JSON.
fn scenario(remote: &str, query: &str) {
    let t0 = Instant::now();
    let result = SparkSession::builder()
        .remote(remote)
        .get_or_create()
        .and_then(|spark| {
            let batches = spark.sql(query).and_then(|df| df.collect_record_batches());
            let _ = spark.stop();
            batches
        });
    let seconds = t0.elapsed().as_secs_f64();
    let (rows, wrong, error) = match result {
        Ok(batches) => {
            let (rows, wrong) = check(&batches);
            (rows, wrong, None)
        }
        Err(e) => (0, None, Some(e.to_string())),
    };
    println!(
        "{{\"client\":\"official\",\"rows\":{rows},\"wrong\":{},\"error\":{},\"seconds\":{seconds:.3}}}",
        json(wrong.as_deref()),
        json(error.as_deref().map(|e| e.lines().next().unwrap_or(""))),
    );
}

/// The rows, and why they are not `range(n)` (`id`, then `x = id * 2`) in
/// order, if they are not.
fn check(batches: &[RecordBatch]) -> (u64, Option<String>) {
    let mut next = 0i64;
    let mut wrong = None;
    for b in batches {
        let int64 = |i: usize| b.columns().get(i)?.as_any().downcast_ref::<Int64Array>();
        let Some(ids) = int64(0) else {
            wrong.get_or_insert_with(|| "column 0 is not a non-null Int64".to_owned());
            next += b.num_rows() as i64;
            continue;
        };
        let xs = int64(1);
        for (i, id) in ids.values().iter().enumerate() {
            if wrong.is_none() && (*id != next || ids.is_null(i)) {
                wrong = Some(format!("row {next} has id {id}"));
            }
            if wrong.is_none() && xs.is_some_and(|xs| xs.value(i) != id * 2) {
                wrong = Some(format!("row {next} has x != id * 2"));
            }
            next += 1;
        }
    }
    (next as u64, wrong)
}

fn json(s: Option<&str>) -> String {
    let Some(s) = s else {
        return "null".to_owned();
    };
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}
