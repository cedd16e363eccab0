//! A [`FaultProxy`] as a command-line tool, so clients that cannot embed it
//! (PySpark) meet exactly the same faults as this crate's client.
//!
//! ```text
//! cargo run --example fault_proxy -- \
//!     --upstream 127.0.0.1:15010 [--listen 127.0.0.1:0] \
//!     [--cuts 20M,30M,30M,30M,30M] [--mode reset|fin] [--one-way-delay-ms 20] \
//!     [--bandwidth-mbps 100]
//! ```
//!
//! `--one-way-delay-ms D` holds every chunk for `D` ms each way without
//! limiting throughput ([`FaultProxyBuilder::one_way_delay`]): a long-haul link
//! with a round trip of `2 × D` ms.
//!
//! `--bandwidth-mbps R` limits each direction to `R` Mbit/s (10^6 bits per
//! second; a token bucket per direction, [`FaultProxyBuilder::bandwidth`]);
//! with `--one-way-delay-ms` too, a thin long-haul link.
//!
//! [`FaultProxyBuilder::one_way_delay`]: spark_connect_testkit::FaultProxyBuilder::one_way_delay
//! [`FaultProxyBuilder::bandwidth`]: spark_connect_testkit::FaultProxyBuilder::bandwidth
//!
//! `--cuts` is a [`CutSchedule`] on server→client bytes: the `i`-th proxied
//! connection is cut after that many bytes (suffix `K`/`M` for KiB/MiB);
//! later connections are forwarded cleanly. A client that reattaches after
//! each cut opens one new connection per cut, so `20M,30M,30M,30M,30M` cuts
//! one result stream at about 20, 50, 80, 110 and 140 MiB (about, because
//! each reattach resends the responses the client had not received yet).
//!
//! Prints the listen address (`127.0.0.1:PORT`) as the first line of stdout
//! once it accepts connections, then runs until SIGTERM or SIGINT, when it
//! prints one JSON summary line on stdout (cuts, connections, bytes) and
//! exits 0.

use std::io::Write;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use spark_connect_testkit::{CutMode, CutSchedule, Direction, FaultProxy};
use tokio::signal::unix::{SignalKind, signal};

const USAGE: &str = "usage: fault_proxy --upstream HOST:PORT [--listen HOST:PORT] [--cuts N[K|M],...] [--mode reset|fin] [--one-way-delay-ms MS] [--bandwidth-mbps MBIT]";

struct Args {
    upstream: SocketAddr,
    listen: SocketAddr,
    cuts: Vec<u64>,
    mode: CutMode,
    one_way_delay: Duration,
    /// Bits per second each way; 0: no limit.
    bandwidth: u64,
}

fn parse_size(s: &str) -> Result<u64, String> {
    let (digits, unit) = match s.as_bytes().last() {
        Some(b'K' | b'k') => (&s[..s.len() - 1], 1u64 << 10),
        Some(b'M' | b'm') => (&s[..s.len() - 1], 1u64 << 20),
        _ => (s, 1),
    };
    digits
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(unit))
        .ok_or_else(|| format!("bad byte count {s:?}"))
}

fn parse_args() -> Result<Args, String> {
    let mut upstream = None;
    let mut listen: SocketAddr = ([127, 0, 0, 1], 0).into();
    let mut cuts = Vec::new();
    let mut mode = CutMode::Reset;
    let mut one_way_delay = Duration::ZERO;
    let mut bandwidth = 0;
    let mut args = std::env::args().skip(1);
    let addr = |v: Option<String>| -> Result<SocketAddr, String> {
        let v = v.ok_or(USAGE)?;
        v.parse().map_err(|e| format!("bad address {v:?}: {e}"))
    };
    while let Some(a) = args.next() {
        match a.as_str() {
            "--upstream" => upstream = Some(addr(args.next())?),
            "--listen" => listen = addr(args.next())?,
            "--cuts" => {
                let v = args.next().ok_or(USAGE)?;
                cuts = v
                    .split(',')
                    .filter(|s| !s.is_empty())
                    .map(parse_size)
                    .collect::<Result<_, _>>()?;
            }
            "--mode" => {
                mode = match args.next().as_deref() {
                    Some("reset") => CutMode::Reset,
                    Some("fin") => CutMode::Fin,
                    other => return Err(format!("unknown --mode {other:?}\n{USAGE}")),
                }
            }
            "--one-way-delay-ms" => {
                let v = args.next().ok_or(USAGE)?;
                let ms = v
                    .parse::<u64>()
                    .map_err(|e| format!("bad --one-way-delay-ms {v:?}: {e}"))?;
                one_way_delay = Duration::from_millis(ms);
            }
            "--bandwidth-mbps" => {
                let v = args.next().ok_or(USAGE)?;
                bandwidth = v
                    .parse::<u64>()
                    .ok()
                    .and_then(|m| m.checked_mul(1_000_000))
                    .ok_or_else(|| format!("bad --bandwidth-mbps {v:?}"))?;
            }
            "-h" | "--help" => return Err(USAGE.to_owned()),
            other => return Err(format!("unknown argument {other:?}\n{USAGE}")),
        }
    }
    Ok(Args {
        upstream: upstream.ok_or(USAGE)?,
        listen,
        cuts,
        mode,
        one_way_delay,
        bandwidth,
    })
}

async fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    // Install the handlers before announcing the address: a driver that
    // kills us right after reading it must still get the summary.
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let n_cuts = args.cuts.len() as u64;
    let mut builder = FaultProxy::builder(args.upstream).listen_addr(args.listen);
    if !args.one_way_delay.is_zero() {
        builder = builder.one_way_delay(args.one_way_delay);
    }
    let proxy = builder
        .bandwidth(args.bandwidth)
        .cut_schedule(Direction::ServerToClient, CutSchedule::new(args.cuts))
        .cut_mode(args.mode)
        .max_cuts(n_cuts)
        .start()
        .await?;
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "{}", proxy.local_addr())?;
        out.flush()?;
    }
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    let s = proxy.stats();
    let offsets: Vec<String> = proxy
        .stats_handle()
        .cut_events()
        .iter()
        .map(|e| e.server_to_client.to_string())
        .collect();
    println!(
        "{{\"cuts\":{},\"connections\":{},\"bytes_server_to_client\":{},\"bytes_client_to_server\":{},\"cut_at\":[{}]}}",
        s.cuts,
        s.connections,
        s.bytes_server_to_client,
        s.bytes_client_to_server,
        offsets.join(",")
    );
    proxy.shutdown().await;
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
            eprintln!("fault_proxy: {e}");
            ExitCode::FAILURE
        }
    }
}
