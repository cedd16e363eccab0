//! `spark-connect-chaos`: the test kit's embedded Spark Connect server as a
//! program, for clients in any language.
//!
//! A client that claims to survive faults should be tested against them on
//! demand. This serves the embedded server on an address, with a fault
//! script read from a TOML file (see `scenarios/` and the crate README),
//! prints `listening on HOST:PORT` on stdout once it accepts connections,
//! logs every injected event with its time on stderr, and stops cleanly on
//! SIGINT or SIGTERM. A malformed script is an error naming its line and
//! field, before anything listens.

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use spark_connect_testkit::TestServer;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

mod script;

/// The embedded, fault-injecting Spark Connect server of
/// spark-connect-testkit, for any Spark Connect client.
#[derive(Debug, Parser)]
#[command(name = "spark-connect-chaos", version)]
struct Args {
    /// The fault script (TOML): `[server]` settings and `[[fault]]` entries.
    /// Without one, the server injects nothing.
    script: Option<PathBuf>,
    /// Where to listen. Port 0 picks a free port; the address bound is
    /// printed as `listening on HOST:PORT`.
    #[arg(long, default_value = "127.0.0.1:15002")]
    listen: SocketAddr,
    /// Check the script and exit (status 0 when it is valid).
    #[arg(long)]
    check: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let script = match &args.script {
        None => script::Script::default(),
        Some(path) => {
            let text = match std::fs::read_to_string(path) {
                Ok(t) => t,
                Err(e) => {
                    eprintln!("spark-connect-chaos: cannot read {}: {e}", path.display());
                    return ExitCode::from(2);
                }
            };
            match script::parse(&text) {
                Ok(s) => s,
                Err(e) => {
                    eprintln!("spark-connect-chaos: {}: {e}", path.display());
                    return ExitCode::from(2);
                }
            }
        }
    };
    if args.check {
        println!("ok: {} fault(s)", script.faults.len());
        return ExitCode::SUCCESS;
    }
    tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_target(false),
        )
        .with(
            Targets::new()
                .with_target("spark_connect_testkit", tracing::Level::INFO)
                .with_target("spark_connect_chaos", tracing::Level::INFO),
        )
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("spark-connect-chaos: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(serve(args.listen, script))
}

async fn serve(listen: SocketAddr, script: script::Script) -> ExitCode {
    let builder = script
        .server
        .apply(TestServer::builder().listen_addr(listen));
    let server = match builder.start().await {
        Ok(s) => s,
        Err(e) => {
            eprintln!("spark-connect-chaos: cannot listen on {listen}: {e}");
            return ExitCode::FAILURE;
        }
    };
    for f in &script.faults {
        server.faults().push(f.to_fault());
    }
    tracing::info!(
        faults = script.faults.len(),
        "serving the embedded Spark Connect server"
    );
    // Listen for the signals before saying ready: a SIGTERM right after the
    // ready line must stop the server cleanly, not kill it.
    let signals = Signals::new();
    println!("listening on {}", server.addr());
    let _ = std::io::stdout().flush();
    signals.recv().await;
    tracing::info!(
        faults_left = server.faults().pending(),
        "stopping on a signal"
    );
    server.shutdown().await;
    ExitCode::SUCCESS
}

/// SIGINT and SIGTERM (Ctrl-C where there are no Unix signals).
struct Signals {
    #[cfg(unix)]
    streams: Option<(tokio::signal::unix::Signal, tokio::signal::unix::Signal)>,
}

impl Signals {
    fn new() -> Self {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            let streams = signal(SignalKind::interrupt())
                .and_then(|i| Ok((i, signal(SignalKind::terminate())?)))
                .ok();
            Signals { streams }
        }
        #[cfg(not(unix))]
        Signals {}
    }

    /// Resolves on the first signal.
    async fn recv(self) {
        #[cfg(unix)]
        if let Some((mut int, mut term)) = self.streams {
            tokio::select! {
                _ = int.recv() => {}
                _ = term.recv() => {}
            }
            return;
        }
        let _ = tokio::signal::ctrl_c().await;
    }
}
