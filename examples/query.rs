//! Run one SQL query against a Spark Connect server and print the result.
//!
//! ```text
//! cargo run --example query -- [--remote URL] [--format table|csv|summary] [--stats] "SQL"
//! ```
//!
//! The remote defaults to `SPARK_REMOTE`. `table` is for people, `csv` (a
//! header, then one line per row) for machines, `summary` prints counts only.
//! `--stats` prints one JSON line on stderr. On a terminal, a progress line
//! fed by ExecutionProgress is shown on stderr. Errors exit non-zero with the
//! Spark error class and message.

use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::time::Instant;

use arrow_array::RecordBatch;
use arrow_cast::display::{ArrayFormatter, FormatOptions};
use spark_connect_retry::session::{SparkError, SparkSession};

#[derive(Clone, Copy, PartialEq)]
enum Format {
    Table,
    Csv,
    Summary,
}

struct Args {
    remote: Option<String>,
    format: Format,
    stats: bool,
    sql: String,
}

const USAGE: &str = "usage: query [--remote URL] [--format table|csv|summary] [--stats] \"SQL\"";

fn parse_args() -> Result<Args, String> {
    let mut args = std::env::args().skip(1);
    let mut out = Args {
        remote: None,
        format: Format::Table,
        stats: false,
        sql: String::new(),
    };
    let mut sql = None;
    while let Some(a) = args.next() {
        match a.as_str() {
            "--remote" => out.remote = Some(args.next().ok_or("--remote needs a URL")?),
            "--format" => {
                out.format = match args.next().as_deref() {
                    Some("table") => Format::Table,
                    Some("csv") => Format::Csv,
                    Some("summary") => Format::Summary,
                    other => return Err(format!("unknown --format {other:?}")),
                }
            }
            "--stats" => out.stats = true,
            "-h" | "--help" => return Err(USAGE.to_owned()),
            s if s.starts_with("--") => return Err(format!("unknown option {s}\n{USAGE}")),
            s => {
                if sql.replace(s.to_owned()).is_some() {
                    return Err(format!("give the SQL as one argument\n{USAGE}"));
                }
            }
        }
    }
    out.sql = sql.ok_or_else(|| USAGE.to_owned())?;
    Ok(out)
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_owned()
    }
}

fn write_csv(out: &mut impl Write, batch: &RecordBatch, header: bool) -> Result<(), String> {
    let opts = FormatOptions::default().with_null("");
    if header {
        let names: Vec<String> = batch
            .schema()
            .fields()
            .iter()
            .map(|f| csv_field(f.name()))
            .collect();
        writeln!(out, "{}", names.join(",")).map_err(|e| e.to_string())?;
    }
    let formatters = batch
        .columns()
        .iter()
        .map(|c| ArrayFormatter::try_new(c.as_ref(), &opts))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())?;
    for row in 0..batch.num_rows() {
        let cells: Vec<String> = formatters
            .iter()
            .map(|f| csv_field(&f.value(row).to_string()))
            .collect();
        writeln!(out, "{}", cells.join(",")).map_err(|e| e.to_string())?;
    }
    Ok(())
}

async fn run(args: Args) -> Result<(), SparkError> {
    let mut builder = SparkSession::builder();
    if let Some(r) = &args.remote {
        builder = builder.remote(r.clone());
    }
    let spark = builder.build()?;
    let started = Instant::now();
    let tty = std::io::stderr().is_terminal();
    let mut stream = spark.sql(&args.sql).await?;
    if tty {
        stream = stream.on_progress(|p| {
            let (done, total) = p.stages.iter().fold((0, 0), |(d, t), s| {
                (d + s.num_completed_tasks, t + s.num_tasks)
            });
            if total > 0 {
                let width = 30usize;
                let filled = (done as usize * width) / total as usize;
                eprint!(
                    "\r[{}{}] {done}/{total} tasks, {} running ",
                    "#".repeat(filled),
                    " ".repeat(width - filled),
                    p.num_inflight_tasks
                );
            }
        });
    }
    let stats = stream.stats_handle();
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let mut table = Vec::new();
    let mut first = true;
    let (mut rows, mut batches) = (0u64, 0u64);
    while let Some(batch) = stream.next_batch().await {
        let batch = batch?;
        rows += batch.num_rows() as u64;
        batches += 1;
        match args.format {
            Format::Csv => {
                if let Err(e) = write_csv(&mut out, &batch, first) {
                    return Err(SparkError::Protocol(format!("writing output: {e}")));
                }
            }
            Format::Table => table.push(batch),
            Format::Summary => {}
        }
        first = false;
    }
    if tty {
        eprint!("\r{}\r", " ".repeat(60));
    }
    match args.format {
        Format::Table => {
            let text = arrow_cast::pretty::pretty_format_batches(&table)
                .map_err(|e| SparkError::Protocol(e.to_string()))?;
            let _ = writeln!(out, "{text}");
        }
        Format::Summary => {
            let _ = writeln!(out, "{rows} rows in {batches} batches");
        }
        Format::Csv => {}
    }
    let elapsed = started.elapsed();
    if args.stats {
        let s = stats.snapshot();
        eprintln!(
            "{{\"rows\":{rows},\"batches\":{batches},\"retries\":{},\"reattaches\":{},\"re_executes\":{},\"elapsed_ms\":{}}}",
            s.policy_retries + s.immediate_retries,
            s.reattaches,
            s.re_executes,
            elapsed.as_millis()
        );
    }
    spark.close().await;
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    match run(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            match e.error_class() {
                Some(class) => eprintln!("error [{class}]: {e}"),
                None => eprintln!("error: {e}"),
            }
            ExitCode::FAILURE
        }
    }
}
