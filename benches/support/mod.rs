//! What the one-shot benchmark binaries that scripts drive
//! (`side_by_side`, `raw_drain`, `upload`) share: one measurement per
//! process, on the runtime a `#[tokio::main]` application gets, printed as
//! one line for the script to collect; and the median and settings from the
//! environment that the in-run comparisons (`resume`, `metrics`) read.
#![allow(dead_code)] // each bench uses part of this module

use std::process::ExitCode;

use arrow_array::{Array, Int64Array, RecordBatch};
use tokio::runtime::Runtime;

/// Runs `measure` with the parsed arguments on a fresh multi-threaded
/// runtime and prints its line. Bad arguments exit with 2, a failed
/// measurement with 1 and the message prefixed by `label(args)`.
pub fn main_with<A>(
    args: Result<A, String>,
    label: impl FnOnce(&A) -> String,
    measure: impl FnOnce(&Runtime, &A) -> Result<String, String>,
) -> ExitCode {
    let args = match args {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let rt = match Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("tokio runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match measure(&rt, &args) {
        Ok(line) => {
            println!("{line}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{}: {e}", label(&args));
            ExitCode::FAILURE
        }
    }
}

/// The rows of an `id, x` result and the exact sum of `x`, checking that ids
/// run 0, 1, 2, ... across batches and `x == 2 * id` on every row.
pub fn verify_id_x(batches: &[RecordBatch]) -> Result<(i64, i128), String> {
    let mut next_id = 0i64;
    let mut sum_x = 0i128;
    for b in batches {
        let col = |i: usize| {
            b.column(i)
                .as_any()
                .downcast_ref::<Int64Array>()
                .filter(|a| a.null_count() == 0)
                .ok_or(format!("column {i} is not a non-null int64"))
        };
        for (id, x) in col(0)?.values().iter().zip(col(1)?.values()) {
            if *id != next_id || *x != 2 * id {
                return Err(format!("row {next_id}: id={id} x={x}"));
            }
            next_id += 1;
            sum_x += i128::from(*x);
        }
    }
    Ok((next_id, sum_x))
}

/// The middle value of `v` (the upper one of an even count); NaN if empty.
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// The environment variable `name` as a count, if set and a number.
pub fn env_usize(name: &str) -> Option<usize> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}
