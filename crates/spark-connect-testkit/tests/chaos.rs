//! `spark-connect-chaos`, the program: each shipped scenario served by the
//! real binary (spawned, on a free port, stopped with SIGTERM), queried by
//! this workspace's own client, whose result must be what the scenario's
//! `[expect]` says a correct client returns.

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

// The theme's tests, one file each: tests/chaos/*.rs.
mod chaos {
    mod program;
    mod scenarios;
}

/// The program Cargo built for these tests.
const BIN: &str = env!("CARGO_BIN_EXE_spark-connect-chaos");

/// The shipped scenarios, sorted.
fn scenarios() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios");
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("scenarios/")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    v.sort();
    v
}

/// A running `spark-connect-chaos`: its process and the address it printed.
struct Running {
    child: Child,
    addr: String,
}

impl Running {
    /// Starts the program on a free port with `args` and waits for its
    /// `listening on` line.
    fn start(args: &[&str]) -> Running {
        let mut child = Command::new(BIN)
            .args(["--listen", "127.0.0.1:0"])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn spark-connect-chaos");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("read the first line");
        let addr = line
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("not a ready line: {line:?}"))
            .trim()
            .to_owned();
        Running { child, addr }
    }

    /// Stops it with SIGTERM; returns its exit status and its event log.
    fn stop(self) -> (std::process::ExitStatus, String) {
        let pid = self.child.id().to_string();
        let killed = Command::new("kill").args(["-TERM", &pid]).status();
        assert!(killed.is_ok_and(|s| s.success()), "kill -TERM {pid}");
        let out = self.child.wait_with_output().expect("wait");
        (
            out.status,
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }
}
