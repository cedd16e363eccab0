//! Run one SQL query against a Spark Connect server and print the result.
//!
//! ```text
//! cargo run --example query -- [--remote URL] [--format table|csv|summary] [--stats] "SQL"
//! ```
//!
//! The remote defaults to `SPARK_REMOTE`. `table` is for people, `csv` (a
//! header, then one line per row, written by `arrow-csv`) for machines,
//! `summary` prints counts only. `--stats` prints one JSON line on stderr.
//! On a terminal, a progress bar fed by ExecutionProgress is shown on
//! stderr. Errors exit non-zero with the Spark error class and message.

use std::io::{BufWriter, IsTerminal, Write};
use std::process::ExitCode;
use std::time::Instant;

use clap::{Parser, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use spark_connect_retry::session::{SparkError, SparkSession};

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Format {
    /// An aligned table, for people.
    Table,
    /// CSV with a header line, for machines.
    Csv,
    /// Row and batch counts only.
    Summary,
}

/// Run one SQL query against a Spark Connect server.
#[derive(Parser)]
#[command(name = "query")]
struct Args {
    /// The `sc://` connection string (default: `SPARK_REMOTE`).
    #[arg(long)]
    remote: Option<String>,
    /// How to print the result.
    #[arg(long, value_enum, default_value = "table")]
    format: Format,
    /// Print one JSON line of statistics on stderr.
    #[arg(long)]
    stats: bool,
    /// The SQL to run.
    sql: String,
}

fn output_error(e: impl std::fmt::Display) -> SparkError {
    SparkError::Protocol(format!("writing output: {e}"))
}

/// A progress bar on stderr fed by ExecutionProgress (tasks done / total).
fn progress_bar() -> ProgressBar {
    let bar = ProgressBar::new(0);
    bar.set_style(
        ProgressStyle::with_template("[{bar:30}] {pos}/{len} tasks, {msg}")
            .expect("a valid template")
            .progress_chars("#> "),
    );
    bar
}

async fn run(args: Args) -> Result<(), SparkError> {
    let mut builder = SparkSession::builder();
    if let Some(r) = &args.remote {
        builder = builder.remote(r.clone());
    }
    let spark = builder.build()?;
    let started = Instant::now();
    let mut stream = spark.sql(&args.sql).await?;
    let bar = std::io::stderr().is_terminal().then(progress_bar);
    if let Some(bar) = bar.clone() {
        stream = stream.on_progress(move |p| {
            let (done, total) = p.stages.iter().fold((0, 0), |(d, t), s| {
                (d + s.num_completed_tasks, t + s.num_tasks)
            });
            bar.set_length(total.max(0) as u64);
            bar.set_position(done.max(0) as u64);
            bar.set_message(format!("{} running", p.num_inflight_tasks));
        });
    }
    let stats = stream.stats_handle();
    let mut out = BufWriter::new(std::io::stdout().lock());
    let mut csv = (args.format == Format::Csv).then(|| {
        arrow_csv::WriterBuilder::new()
            .with_header(true)
            .build(BufWriter::new(std::io::stdout()))
    });
    let mut table = Vec::new();
    let (mut rows, mut batches) = (0u64, 0u64);
    while let Some(batch) = stream.next_batch().await {
        let batch = batch?;
        rows += batch.num_rows() as u64;
        batches += 1;
        match (&mut csv, args.format) {
            (Some(w), _) => w.write(&batch).map_err(output_error)?,
            (None, Format::Table) => table.push(batch),
            (None, _) => {}
        }
    }
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    match args.format {
        Format::Table => {
            let text = arrow_cast::pretty::pretty_format_batches(&table).map_err(output_error)?;
            writeln!(out, "{text}").map_err(output_error)?;
        }
        Format::Summary => {
            writeln!(out, "{rows} rows in {batches} batches").map_err(output_error)?
        }
        Format::Csv if batches == 0 => {
            // No batch came, so the writer wrote no header: an empty batch
            // with the schema makes it write one.
            if let (Some(w), Some(schema)) = (&mut csv, stream.schema()) {
                w.write(&arrow_array::RecordBatch::new_empty(schema))
                    .map_err(output_error)?;
            }
        }
        Format::Csv => {}
    }
    out.flush().map_err(output_error)?;
    if let Some(w) = csv {
        w.into_inner().flush().map_err(output_error)?;
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
    spark.close().await
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
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
