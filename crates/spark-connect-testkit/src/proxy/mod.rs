//! [`FaultProxy`]: a loopback TCP proxy that breaks connections on purpose.
//!
//! Put it between a client and a (real or embedded) Spark Connect server to
//! check that the client survives what networks do: connections reset,
//! closed or black-holed (silent, with no FIN or RST) mid-stream after a
//! given number of bytes, on a timer or after a connection has lived for a
//! while; refused connections; slow links; and a request that is lost before
//! the server read it.
//!
//! Everything is deterministic for a given configuration: byte cuts happen at
//! exact offsets, and [`CutSchedule::seeded`] turns a seed into a reproducible
//! list of cut offsets so a test can run many different schedules.
//!
//! The proxy only ever listens on and connects to loopback addresses
//! ([`FaultProxyError::NotLoopback`] otherwise): it is a test tool, never a
//! way to send traffic anywhere else.
//!
//! The parts: `handle` ([`FaultProxyBuilder`], [`FaultProxy`]), `accept` (the
//! accept loop: refusals, the lost request, the cut timer), `connection`
//! (one proxied connection: two pipes, byte, lifetime and timer cuts) and
//! `stats` ([`ProxyStats`]).
//!
//! ```
//! use std::time::Duration;
//! use spark_connect_testkit::proxy::{CutMode, Direction, FaultProxy};
//! use tokio::io::{AsyncReadExt, AsyncWriteExt};
//! use tokio::net::{TcpListener, TcpStream};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // An upstream that sends 1 MiB to whoever connects.
//! let upstream = TcpListener::bind("127.0.0.1:0").await?;
//! let upstream_addr = upstream.local_addr()?;
//! tokio::spawn(async move {
//!     while let Ok((mut socket, _)) = upstream.accept().await {
//!         tokio::spawn(async move {
//!             let _ = socket.write_all(&vec![7u8; 1 << 20]).await;
//!         });
//!     }
//! });
//!
//! // Reset every connection after 1000 bytes from the server, at most twice.
//! let proxy = FaultProxy::builder(upstream_addr)
//!     .cut_after_bytes(Direction::ServerToClient, 1000)
//!     .cut_mode(CutMode::Reset)
//!     .max_cuts(2)
//!     .start()
//!     .await?;
//!
//! let mut client = TcpStream::connect(proxy.local_addr()).await?;
//! let mut received = Vec::new();
//! let err = client.read_to_end(&mut received).await.unwrap_err();
//! assert_eq!(err.kind(), std::io::ErrorKind::ConnectionReset);
//! // An RST may overtake bytes still in the client's receive queue, so the
//! // client sees at most the 1000 bytes the proxy forwarded.
//! assert!(received.len() <= 1000);
//!
//! let stats = proxy.stats().snapshot();
//! assert_eq!(stats.cuts, 1);
//! assert_eq!(stats.bytes_server_to_client, 1000);
//! proxy.shutdown().await;
//! # Ok(())
//! # }
//! ```

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::ops::RangeInclusive;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

mod accept;
mod connection;
mod delay_line;
mod handle;
mod shared;
mod stats;

pub use handle::{FaultProxy, FaultProxyBuilder};
pub use stats::{ProxyStats, StatsSnapshot};

/// How many bytes the proxy reads from a socket at a time; also the unit that
/// [`FaultProxyBuilder::latency`] delays.
const CHUNK: usize = 64 * 1024;

/// The most bytes [`FaultProxyBuilder::one_way_delay`] holds per direction of
/// a connection before it stops reading: 256 MiB, which caps throughput only
/// above 5 GiB/s at a 50 ms one-way delay.
pub const MAX_DELAY_QUEUE: usize = 256 * 1024 * 1024;

/// How long a FIN cut keeps draining a peer's bytes after sending FIN, so the
/// final close does not turn into an RST (closing a socket with unread bytes
/// makes the kernel send RST, which would blur FIN with RST for the peer).
const FIN_DRAIN: Duration = Duration::from_secs(2);

/// One direction of a proxied connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    /// Bytes the client sends to the server (requests).
    ClientToServer,
    /// Bytes the server sends to the client (responses).
    ServerToClient,
}

/// How a cut closes both sockets of a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CutMode {
    /// Abortive close: `SO_LINGER` 0, then close. The peers see a TCP RST
    /// (`ConnectionReset`; gRPC clients report UNAVAILABLE). Bytes still in
    /// the proxy's send buffer are discarded by the kernel.
    #[default]
    Reset,
    /// Orderly close: shut down the write half (TCP FIN), so the peers read a
    /// clean end of stream, then drain and close.
    Fin,
    /// A black hole (a stuck middlebox): the connection stops carrying bytes
    /// in both directions, and neither socket is closed, so the peers see no
    /// FIN, no RST and no error, only silence. Both sockets stay open, unread
    /// and unwritten, until the proxy shuts down. Bytes the proxy already
    /// forwarded stay delivered; what the peers write afterwards sits in the
    /// kernels' buffers (on loopback the kernel acknowledges it, so TCP itself
    /// never times out). Only the application can notice: HTTP/2 keepalive,
    /// or a stall timeout.
    BlackHole,
}

/// Why a connection was cut, as recorded in [`CutEvent`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CutReason {
    /// The byte limit of this direction was reached
    /// ([`FaultProxyBuilder::cut_after_bytes`], [`FaultProxyBuilder::cut_schedule`]).
    Bytes(Direction),
    /// The periodic timer fired ([`FaultProxyBuilder::cut_every`]).
    Timer,
    /// The connection reached its maximum lifetime ([`FaultProxyBuilder::cut_after`]).
    Lifetime,
    /// [`FaultProxy::cut_all`] was called.
    Manual,
}

/// A record of one cut.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CutEvent {
    /// The connection's accept index (0 for the first connection accepted,
    /// refused ones included).
    pub connection: u64,
    /// What triggered the cut.
    pub reason: CutReason,
    /// Bytes forwarded client → server on this connection before the cut.
    pub client_to_server: u64,
    /// Bytes forwarded server → client on this connection before the cut.
    pub server_to_client: u64,
}

/// Per-connection byte offsets at which to cut, for
/// [`FaultProxyBuilder::cut_schedule`].
///
/// Entry `i` applies to the `i`-th proxied connection (refused connections
/// and the lost first request do not count); connections past the end of the
/// schedule are forwarded cleanly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CutSchedule {
    offsets: Vec<u64>,
}

impl CutSchedule {
    /// A schedule with explicit offsets, one per proxied connection.
    pub fn new(offsets: impl Into<Vec<u64>>) -> Self {
        Self {
            offsets: offsets.into(),
        }
    }

    /// A reproducible schedule of `cuts` offsets drawn uniformly from `bytes`
    /// by a [`StdRng`] seeded with `seed`: the same seed gives the same
    /// schedule (for a given `rand` version), so a failing seed can be re-run.
    ///
    /// # Panics
    ///
    /// If `bytes` is empty.
    pub fn seeded(seed: u64, cuts: usize, bytes: RangeInclusive<u64>) -> Self {
        assert!(!bytes.is_empty(), "CutSchedule::seeded: empty byte range");
        let mut rng = StdRng::seed_from_u64(seed);
        let offsets = (0..cuts).map(|_| rng.random_range(bytes.clone())).collect();
        Self { offsets }
    }

    /// The offsets, in connection order.
    pub fn offsets(&self) -> &[u64] {
        &self.offsets
    }
}

/// Which of the proxy's two addresses a [`FaultProxyError::NotLoopback`] is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddrRole {
    /// The address the proxy listens on.
    Listen,
    /// The server the proxy forwards to.
    Upstream,
}

/// Errors from [`FaultProxyBuilder::start`].
#[derive(Debug)]
#[non_exhaustive]
pub enum FaultProxyError {
    /// The listen or upstream address is not a loopback address; the proxy is
    /// a test tool and refuses to carry traffic anywhere else.
    NotLoopback {
        /// Which address was refused.
        role: AddrRole,
        /// The refused address.
        addr: SocketAddr,
    },
    /// Binding the listening socket failed.
    Bind(io::Error),
    /// [`FaultProxy::builder_for_remote`] could not read a loopback
    /// `host:port` out of the connection string.
    InvalidRemote(String),
}

impl fmt::Display for FaultProxyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FaultProxyError::NotLoopback { role, addr } => {
                let role = match role {
                    AddrRole::Listen => "listen",
                    AddrRole::Upstream => "upstream",
                };
                write!(
                    f,
                    "fault proxy {role} address {addr} is not a loopback address"
                )
            }
            FaultProxyError::Bind(e) => write!(f, "fault proxy could not bind: {e}"),
            FaultProxyError::InvalidRemote(r) => {
                write!(
                    f,
                    "fault proxy: cannot take a loopback host:port from {r:?}"
                )
            }
        }
    }
}

impl std::error::Error for FaultProxyError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            FaultProxyError::Bind(e) => Some(e),
            FaultProxyError::NotLoopback { .. } | FaultProxyError::InvalidRemote(_) => None,
        }
    }
}
