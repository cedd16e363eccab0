//! What the one-shot benchmark binaries that scripts drive
//! (`side_by_side`, `raw_drain`, `upload`) share: one measurement per
//! process, on the runtime a `#[tokio::main]` application gets, printed as
//! one line for the script to collect.

use std::process::ExitCode;

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
