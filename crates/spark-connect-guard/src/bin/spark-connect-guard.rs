//! `spark-connect-guard`: a local Spark Connect proxy that gives any client
//! exact results through faults (see the crate docs and README).
//!
//! ```text
//! spark-connect-guard [--listen ADDR] [--idle-timeout-ms MS]
//!     [--health-interval-ms MS] [--health-timeout-ms MS] [--health-failures N]
//!     [--drain-timeout SECONDS] [--tls-cert FILE --tls-key FILE [--tls-client-ca FILE]]
//!     [--client-token-file FILE] [--metrics-listen ADDR]
//!     [--egress-proxy URL | --no-egress-proxy] UPSTREAM
//! ```
//!
//! It prints one line on stdout once it accepts connections,
//! `listening on HOST:PORT`, logs on stderr (`RUST_LOG`, default `info`;
//! tokens are never logged), and on SIGINT or SIGTERM drains (NOT_SERVING,
//! stops accepting, ends streams still open after `--drain-timeout` with
//! UNAVAILABLE) and exits with status 0; a second signal stops at once.
//! A bad upstream string or listen address exits with status 2.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use spark_connect_guard::{ClientToken, Guard, GuardBuilder, GuardError, GuardTls, HealthCheck};
use spark_connect_retry::layer::ReattachLayer;
use spark_connect_retry::reattach::ReattachOptions;

/// A local Spark Connect proxy: every ExecutePlan through it becomes a
/// reattachable execution, exact through upstream faults.
#[derive(Parser)]
#[command(name = "spark-connect-guard", version)]
struct Args {
    /// Where to listen (default 127.0.0.1:0, a free loopback port). An
    /// address off loopback makes the guard reachable from other hosts.
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// Stall detection: reattach when the upstream sends nothing for this
    /// long (0 turns it off).
    #[arg(long, default_value_t = 10_000)]
    idle_timeout_ms: u64,
    /// gRPC health: time between two checks of the upstream.
    #[arg(long, default_value_t = 5_000, value_parser = clap::value_parser!(u64).range(1..))]
    health_interval_ms: u64,
    /// gRPC health: how long one check may take before it fails.
    #[arg(long, default_value_t = 2_000, value_parser = clap::value_parser!(u64).range(1..))]
    health_timeout_ms: u64,
    /// gRPC health: failed checks in a row before NOT_SERVING.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..))]
    health_failures: u32,
    /// On SIGTERM or SIGINT: seconds open streams may still run before
    /// they are ended with UNAVAILABLE (clients reattach); a second signal
    /// stops at once. Keep it below the supervisor's kill timeout.
    #[arg(long, value_name = "SECONDS", default_value_t = 25)]
    drain_timeout: u64,
    /// Serve TLS with this certificate chain (PEM); needs --tls-key.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The private key (PEM) of --tls-cert.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// mTLS: require client certificates from this CA (PEM).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_client_ca: Option<PathBuf>,
    /// Require clients to send `authorization: Bearer <token>` with the
    /// token in this file (or in $SPARK_CONNECT_GUARD_CLIENT_TOKEN).
    #[arg(long, value_name = "FILE")]
    client_token_file: Option<PathBuf>,
    /// Serve Prometheus metrics at http://ADDR/metrics (off by default).
    #[cfg(feature = "metrics")]
    #[arg(long, value_name = "ADDR")]
    metrics_listen: Option<SocketAddr>,
    /// Reach the upstream through this HTTP CONNECT proxy,
    /// `http://[user:password@]host:port`. Default: $HTTPS_PROXY (else
    /// $ALL_PROXY) unless $NO_PROXY names the upstream. Credentials are
    /// better given in the environment, which the process list does not
    /// show; neither is ever logged.
    #[arg(long, value_name = "URL", conflicts_with = "no_egress_proxy")]
    egress_proxy: Option<String>,
    /// Reach the upstream directly, whatever $HTTPS_PROXY says.
    #[arg(long)]
    no_egress_proxy: bool,
    /// The upstream server, an `sc://` connection string (TLS, token and
    /// keepalive as its parameters say). Default: $SPARK_REMOTE.
    upstream: Option<String>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("spark-connect-guard: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(run(args))
}

async fn run(args: Args) -> ExitCode {
    let Some(upstream) = args
        .upstream
        .clone()
        .or_else(|| std::env::var("SPARK_REMOTE").ok())
    else {
        eprintln!("spark-connect-guard: no upstream given (an sc:// string, or SPARK_REMOTE)");
        return ExitCode::from(2);
    };
    let options = ReattachOptions {
        idle_timeout: (args.idle_timeout_ms > 0)
            .then(|| Duration::from_millis(args.idle_timeout_ms)),
        ..ReattachOptions::default()
    };
    let builder = match secure(Guard::builder(upstream), &args) {
        Ok(b) => b,
        Err(e) => {
            // Names the file or option, never a key or token.
            eprintln!("spark-connect-guard: {e}");
            return ExitCode::from(2);
        }
    };
    let guard = match builder
        .listen(args.listen)
        .layer(ReattachLayer::new().options(options))
        .drain_timeout(Duration::from_secs(args.drain_timeout))
        .health_check(
            HealthCheck::new()
                .interval(Duration::from_millis(args.health_interval_ms))
                .timeout(Duration::from_millis(args.health_timeout_ms))
                .failure_threshold(args.health_failures),
        )
        .start()
        .await
    {
        Ok(g) => g,
        Err(e) => {
            // The connection string's error names the parameter, never the token.
            eprintln!("spark-connect-guard: {e}");
            return ExitCode::from(2);
        }
    };
    println!("listening on {}", guard.local_addr());
    stop_signal().await;
    tracing::info!(
        drain_timeout_s = args.drain_timeout,
        "spark-connect-guard: draining (a second signal stops at once)"
    );
    let drain = guard.drain();
    tokio::select! {
        stats = drain => {
            tracing::info!(cut = stats.cut_by_drain, "spark-connect-guard: drained");
        }
        () = stop_signal() => {
            // Dropping the drain drops the guard: its connections end with
            // the process.
            tracing::warn!("spark-connect-guard: second signal: stopping at once");
        }
    }
    ExitCode::SUCCESS
}

/// TLS, the client token, metrics and the egress proxy, from the flags
/// and the environment.
fn secure(mut builder: GuardBuilder, args: &Args) -> Result<GuardBuilder, GuardError> {
    if let (Some(cert), Some(key)) = (&args.tls_cert, &args.tls_key) {
        let mut tls = GuardTls::from_pem_files(cert, key)?;
        if let Some(ca) = &args.tls_client_ca {
            tls = tls.client_ca_file(ca)?;
        }
        builder = builder.tls(tls);
    }
    let token = match (
        &args.client_token_file,
        std::env::var("SPARK_CONNECT_GUARD_CLIENT_TOKEN"),
    ) {
        (Some(file), _) => Some(ClientToken::from_file(file)?),
        (None, Ok(token)) => Some(ClientToken::new(token)?),
        (None, Err(_)) => None,
    };
    if let Some(token) = token {
        builder = builder.client_token(token);
    }
    #[cfg(feature = "metrics")]
    if let Some(addr) = args.metrics_listen {
        builder = builder.metrics_listen(addr);
    }
    if let Some(url) = &args.egress_proxy {
        builder = builder.egress_proxy(url.clone());
    } else if args.no_egress_proxy {
        builder = builder.no_egress_proxy();
    }
    Ok(builder)
}

/// SIGINT, or SIGTERM on Unix.
async fn stop_signal() {
    #[cfg(unix)]
    {
        let Ok(mut term) =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        else {
            let _ = tokio::signal::ctrl_c().await;
            return;
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
