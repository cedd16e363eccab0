//! Client peak memory while streaming large results, and the server's
//! buffer while the client releases as it goes.
//!
//! The parent process runs the embedded `TestServer`; every measurement runs
//! in a child process (this binary re-executed with `--child`), so each
//! child's `VmHWM` (peak RSS, Linux) is the client's alone, per size. The
//! server's buffers would otherwise count in the same RSS: the producer runs
//! up to 256 responses ahead of the consumer, which for 1 MiB batches is far
//! more than the client holds.
//!
//! The child consumes `SparkSession::range(...)` with `ArrowStream::next_batch`,
//! dropping each decoded batch after counting its rows.
//!
//! `cargo bench --bench memory`

use std::io::BufRead;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use spark_connect_retry::session::SparkSession;
use spark_connect_testkit::{BufferStats, TestServer};

/// 131 072 Int64 rows: a 1 MiB column, ~1 MiB of Arrow IPC per response,
/// well under tonic's default 4 MiB decoding limit.
const ROWS_PER_BATCH: u64 = 128 * 1024;
const MIB: u64 = 1024 * 1024;

fn vm_hwm_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status (Linux)");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM in /proc/self/status")
}

/// The child: connect, stream `rows` rows, print one `key=value` line.
fn child(remote: &str, rows: i64) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let session = SparkSession::builder().remote(remote).build().unwrap();
        let start = Instant::now();
        let mut stream = session.range(0, rows, 1).unwrap();
        let mut counted = 0i64;
        let mut batches = 0u64;
        while let Some(batch) = stream.next_batch().await {
            let batch = batch.unwrap();
            counted += batch.num_rows() as i64;
            batches += 1;
            drop(batch);
        }
        assert_eq!(counted, rows);
        let secs = start.elapsed().as_secs_f64();
        session.close().await.expect("close");
        println!(
            "rows={counted} batches={batches} secs={secs:.3} vm_hwm_kib={}",
            vm_hwm_kib()
        );
    });
}

struct ChildResult {
    rows: i64,
    batches: u64,
    secs: f64,
    hwm_kib: u64,
    server: Option<BufferStats>,
}

/// Runs one child streaming `rows` rows, sampling the server's buffer of its
/// (only) execution every millisecond meanwhile.
async fn measure(server: &TestServer, rows: i64) -> ChildResult {
    let exe = std::env::current_exe().unwrap();
    let remote = server.remote();
    let mut child = tokio::task::spawn_blocking(move || {
        Command::new(exe)
            .args(["--child", &remote, &rows.to_string()])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap()
    })
    .await
    .unwrap();
    let stdout = child.stdout.take().unwrap();
    let reader = tokio::task::spawn_blocking(move || {
        let line = std::io::BufReader::new(stdout).lines().next();
        let status = child.wait().unwrap();
        assert!(status.success(), "child failed: {status}");
        line.unwrap().unwrap()
    });
    // The gauges are high-water marks kept by the server, so sampling only
    // has to catch the execution before its release_all removes it.
    let mut last: Option<BufferStats> = None;
    while !reader.is_finished() {
        for id in server.live_executions() {
            if let Some(s) = server.buffer_stats(&id) {
                last = Some(s);
            }
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let line = reader.await.unwrap();
    let get = |k: &str| {
        line.split_whitespace()
            .find_map(|kv| kv.strip_prefix(k)?.strip_prefix('='))
            .unwrap_or_else(|| panic!("{k} missing in {line:?}"))
            .to_owned()
    };
    ChildResult {
        rows: get("rows").parse().unwrap(),
        batches: get("batches").parse().unwrap(),
        secs: get("secs").parse().unwrap(),
        hwm_kib: get("vm_hwm_kib").parse().unwrap(),
        server: last,
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--child") {
        child(&args[i + 1], args[i + 2].parse().unwrap());
        return;
    }

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        // 8 bytes per Int64 row: these are the sizes of the `id` column.
        let sizes: [(&str, i64); 3] = [
            ("1 batch (baseline)", ROWS_PER_BATCH as i64),
            ("100 MiB", (100 * MIB / 8) as i64),
            ("1 GiB", (1024 * MIB / 8) as i64),
        ];
        // A 1 MiB retry buffer (the brief's setting) and, for comparison, an
        // unlimited one, where only the client's release_until evicts sent
        // responses, so the server gauge shows what the releases bound.
        for (label, retry_buffer) in [("retry buffer 1 MiB", MIB as usize), ("retry buffer unlimited", usize::MAX)] {
            let server = TestServer::builder()
                .rows_per_batch(ROWS_PER_BATCH)
                .retry_buffer_bytes(retry_buffer)
                .start()
                .await
                .unwrap();
            println!("\n## {label}, {ROWS_PER_BATCH} rows per batch (~1 MiB Arrow IPC per response)");
            println!(
                "| result | rows | batches | client s | client VmHWM MiB | server max buffered | server max sent-but-unreleased |"
            );
            println!("|---|---|---|---|---|---|---|");
            let mut hwm = Vec::new();
            let sizes_here: &[(&str, i64)] = if retry_buffer == usize::MAX {
                &sizes[2..] // the server-side question needs only the big run
            } else {
                &sizes
            };
            for (name, rows) in sizes_here {
                let r = measure(&server, *rows).await;
                assert_eq!(r.rows, *rows);
                let s = r.server.unwrap_or_default();
                println!(
                    "| {name} | {} | {} | {:.2} | {:.1} | {} | {} |",
                    r.rows,
                    r.batches,
                    r.secs,
                    r.hwm_kib as f64 / 1024.0,
                    s.max_buffered,
                    s.max_sent_buffered
                );
                hwm.push(r.hwm_kib);
            }
            if hwm.len() == 3 {
                println!(
                    "\nclient peak RSS, 1 GiB run minus 100 MiB run: {:+.1} MiB (target: <= a constant + 2 batches, ~2 MiB)",
                    (hwm[2] as f64 - hwm[1] as f64) / 1024.0
                );
                println!(
                    "client peak RSS, 100 MiB run minus 1-batch run: {:+.1} MiB",
                    (hwm[1] as f64 - hwm[0] as f64) / 1024.0
                );
            }
            server.shutdown().await;
        }
    });
}
