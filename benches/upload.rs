//! One run of the upload benchmark against a real Spark Connect server:
//! `create_dataframe` of an Arrow IPC file (100 MiB made by
//! `scripts/upload-bench.sh`), one JSON line on stdout.
//!
//! ```text
//! cargo bench --bench upload -- --remote sc://127.0.0.1:15032 --file table.arrow
//! ```
//!
//! `scripts/upload-bench.sh` runs it alternately with
//! `scripts/upload_bench_pyspark.py` (PySpark 4.3.0's `createDataFrame` of
//! the same file) against one server. Each run is a new process and a new
//! session (the server keeps cached artifacts per session, so nothing is
//! skipped); the file is read and the session warmed up (`spark_version()`)
//! before the timer, which covers `create_dataframe` alone: the config
//! read, chunking, hashing and the upload. The data is read back and
//! checked (`x = 2 * id`, ids in order) after the timer.

mod support;

use std::process::ExitCode;
use std::time::Instant;

use arrow_ipc::reader::FileReader;
use spark_connect_retry::session::SparkSession;

const USAGE: &str = "usage: upload --remote URL --file PATH.arrow";

fn parse_args() -> Result<(String, String), String> {
    let (mut remote, mut file) = (None, None);
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--remote" => remote = Some(args.next().ok_or("--remote needs a URL")?),
            "--file" => file = Some(args.next().ok_or("--file needs a path")?),
            // `cargo bench` passes `--bench` to harness = false binaries.
            "--bench" => {}
            other => return Err(format!("unknown argument {other:?}\n{USAGE}")),
        }
    }
    Ok((remote.ok_or(USAGE)?, file.ok_or(USAGE)?))
}

async fn run(remote: &str, file: &str) -> Result<String, Box<dyn std::error::Error>> {
    let reader = FileReader::try_new(std::fs::File::open(file)?, None)?;
    let schema = reader.schema();
    let batches = reader.collect::<Result<Vec<_>, _>>()?;
    let expected = support::verify_id_x(&batches)?.0;
    // In-memory size as pyarrow's `nbytes` counts it (what PySpark reports).
    let bytes: usize = batches
        .iter()
        .flat_map(|b| b.columns())
        .map(|c| c.to_data().get_slice_memory_size().unwrap_or(0))
        .sum();

    let spark = SparkSession::builder().remote(remote).build()?;
    let version = spark.spark_version().await?;
    let t0 = Instant::now();
    let df = spark.create_dataframe(schema, batches).await?;
    let wall = t0.elapsed();
    let stats = df.upload_stats();
    if !df.is_cached() || stats.bytes_sent == 0 {
        return Err(format!("not uploaded: {stats:?}").into());
    }
    let rows = support::verify_id_x(&df.collect().await?)?.0;
    if rows != expected {
        return Err(format!("read back {rows} rows, want {expected}").into());
    }
    spark.close().await?;
    Ok(format!(
        concat!(
            "{{\"client\":\"rust\",\"case\":\"upload100m\",\"wall_ms\":{:.1},\"rows\":{},",
            "\"table_bytes\":{},\"bytes_sent\":{},\"artifacts\":{},\"streams\":{},",
            "\"mib_per_s\":{:.1},\"server\":\"{}\"}}"
        ),
        wall.as_secs_f64() * 1e3,
        rows,
        bytes,
        stats.bytes_sent,
        stats.artifacts,
        stats.streams,
        stats.bytes_sent as f64 / f64::from(1 << 20) / wall.as_secs_f64(),
        version,
    ))
}

fn main() -> ExitCode {
    support::main_with(
        parse_args(),
        |_| "upload bench".to_owned(),
        |rt, (remote, file)| rt.block_on(run(remote, file)).map_err(|e| e.to_string()),
    )
}
