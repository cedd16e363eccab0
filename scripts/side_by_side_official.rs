//! The `official` arm of scripts/side-by-side.sh: the official Rust client,
//! `apache-spark-connect` 4.2.0 from crates.io, run once, one JSON line on
//! stdout. Built by the script in a directory of its own (it needs a system
//! `protoc`, which this crate never does), so it is not part of the crate.
//!
//! Same shape as the other arms: connect and one `version()` round trip
//! before the timer; the timer covers `sql()` to the last batch
//! (`arrow10m`, `collect_record_batches`) or to the first one
//! (`first_batch`, `to_local_iterator`); the result is checked after it.

use std::time::Instant;

use spark_connect::session::SparkSession;

const ROWS: i64 = 10_000_000;
const QUERY: &str = "SELECT id, id*2 AS x FROM range(10000000)";

fn main() {
    let mut args = std::env::args().skip(1);
    let (mut remote, mut case) = (String::new(), String::new());
    while let Some(a) = args.next() {
        match a.as_str() {
            "--remote" => remote = args.next().expect("--remote URL"),
            "--case" => case = args.next().expect("--case NAME"),
            "--proxy-cuts" => {
                args.next();
            }
            other => panic!("unknown argument {other:?}"),
        }
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
