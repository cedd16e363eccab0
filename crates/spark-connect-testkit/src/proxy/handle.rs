//! [`FaultProxyBuilder`] and [`FaultProxy`]: configure, start and stop a
//! proxy, and read what it did.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::accept::{accept_loop, ticker};
use super::cut::{CutMode, CutReason, CutSchedule, Direction};
use super::error::{AddrRole, FaultProxyError};
use super::shared::{BytePlan, Config, Shared, dir_index};
use super::stats::{ProxyStats, ProxyStatsHandle};

/// Builder for a [`FaultProxy`]; created by [`FaultProxy::builder`].
///
/// With no fault configured the proxy forwards everything cleanly. Faults
/// combine: e.g. a byte cut and a lifetime cut both apply, whichever comes
/// first, and all cuts together are bounded by [`max_cuts`](Self::max_cuts).
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until start() is called"]
pub struct FaultProxyBuilder {
    upstream: SocketAddr,
    listen: SocketAddr,
    config: Config,
}

impl FaultProxyBuilder {
    /// Listen on this address instead of `127.0.0.1:0` (an ephemeral port).
    /// Must be a loopback address.
    pub fn listen_addr(mut self, addr: SocketAddr) -> Self {
        self.listen = addr;
        self
    }

    /// Cut every proxied connection once exactly `bytes` bytes have been
    /// forwarded in `direction` (`0` cuts as soon as the connection is set
    /// up). Replaces an earlier byte plan for the same direction; the two
    /// directions can each have one.
    pub fn cut_after_bytes(mut self, direction: Direction, bytes: u64) -> Self {
        self.config.byte_cuts[dir_index(direction)] = Some(BytePlan::Every(bytes));
        self
    }

    /// Cut the `i`-th proxied connection after `schedule.offsets()[i]` bytes
    /// in `direction`; later connections are forwarded cleanly. Replaces an
    /// earlier byte plan for the same direction.
    pub fn cut_schedule(mut self, direction: Direction, schedule: CutSchedule) -> Self {
        self.config.byte_cuts[dir_index(direction)] = Some(BytePlan::Schedule(schedule.offsets));
        self
    }

    /// Every `period`, cut all live connections (the first tick is one
    /// `period` after start).
    pub fn cut_every(mut self, period: Duration) -> Self {
        self.config.cut_every = Some(period);
        self
    }

    /// Cut each connection once it has been open for `lifetime`.
    pub fn cut_after(mut self, lifetime: Duration) -> Self {
        self.config.cut_after = Some(lifetime);
        self
    }

    /// Refuse the first `count` connections.
    ///
    /// A refused connection is accepted and immediately closed with an RST
    /// (`SO_LINGER` 0), without connecting upstream. The kernel completes the
    /// TCP handshake before `accept`, so the client's `connect` succeeds and
    /// its first read or write fails with `ConnectionReset` (or a broken
    /// pipe); a gRPC client reports a transport error / UNAVAILABLE. This was
    /// chosen over not listening at all (`ConnectionRefused`) because closing
    /// the port would let another process take it between attempts.
    pub fn refuse_first(mut self, count: u64) -> Self {
        self.config.refuse_first = count;
        self
    }

    /// How cuts close the sockets (default [`CutMode::Reset`]). Applies to
    /// both the client and the upstream socket of a cut connection.
    pub fn cut_mode(mut self, mode: CutMode) -> Self {
        self.config.mode = mode;
        self
    }

    /// Delay every chunk (up to 64 KiB, as read) by `delay` before forwarding
    /// it, in both directions. Uses tokio's clock, so a test can run it under
    /// `tokio::time::pause`.
    ///
    /// Only one chunk is in flight per direction, so this is also a slow link
    /// (64 KiB per `delay`); for a long round trip that does not limit
    /// throughput, use [`one_way_delay`](Self::one_way_delay). The last of the
    /// two set wins.
    pub fn latency(mut self, delay: Duration) -> Self {
        self.config.latency = delay;
        self.config.max_queued = 0;
        self
    }

    /// Hold every chunk for `delay` in each direction, without limiting
    /// throughput: a long-haul link whose round trip is `2 × delay` (plus up
    /// to about a millisecond of timer rounding per direction), with no loss
    /// and no bandwidth limit. Up to [`MAX_DELAY_QUEUE`](crate::MAX_DELAY_QUEUE)
    /// bytes per direction wait in the proxy; a destination that stops reading
    /// pushes back on the sender through TCP. Only application-level flow
    /// control (HTTP/2 windows, request/response turns) pays the delay: the
    /// endpoints' kernels see a loopback round trip. Uses tokio's clock, so a
    /// test can run it under `tokio::time::pause`. The last of this and
    /// [`latency`](Self::latency) set wins.
    ///
    /// ```
    /// use std::time::Duration;
    /// use spark_connect_testkit::FaultProxy;
    /// use tokio::io::{AsyncReadExt, AsyncWriteExt};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let upstream = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    /// let proxy = FaultProxy::builder(upstream.local_addr()?)
    ///     .one_way_delay(Duration::from_millis(20))
    ///     .start()
    ///     .await?;
    /// let start = tokio::time::Instant::now();
    /// let mut client = tokio::net::TcpStream::connect(proxy.local_addr()).await?;
    /// let (mut server, _) = upstream.accept().await?;
    /// client.write_all(b"ping").await?;
    /// let mut buf = [0u8; 4];
    /// server.read_exact(&mut buf).await?;
    /// server.write_all(b"pong").await?;
    /// client.read_exact(&mut buf).await?;
    /// assert_eq!(&buf, b"pong");
    /// assert!(start.elapsed() >= Duration::from_millis(40)); // a lower bound only
    /// proxy.shutdown().await;
    /// # Ok(())
    /// # }
    /// ```
    pub fn one_way_delay(mut self, delay: Duration) -> Self {
        self.config.latency = delay;
        self.config.max_queued = super::shared::MAX_DELAY_QUEUE;
        self
    }

    /// Limit each direction of every connection to `bits_per_second` (`0`:
    /// no limit, the default): a thin link, such as a 100 Mbit/s WAN.
    ///
    /// A token bucket per direction, one 64 KiB chunk deep, paces the bytes;
    /// each chunk is forwarded once its last byte has left the link, plus
    /// the [`one_way_delay`](Self::one_way_delay) or
    /// [`latency`](Self::latency) if set (the two combine: `_rtt20` over a
    /// 100 Mbit/s link). The proxy holds at most what the link holds (the
    /// bytes on the wire during the delay plus 50 ms at full rate), then
    /// stops reading, so TCP pushes back on the sender as at a real
    /// bottleneck. Pure user space (no `tc`), only the proxied connections
    /// are shaped, and it runs on tokio's clock (paused time works).
    ///
    /// ```
    /// use spark_connect_testkit::FaultProxy;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let upstream = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    /// let proxy = FaultProxy::builder(upstream.local_addr()?)
    ///     .bandwidth(100_000_000) // 100 Mbit/s each way
    ///     .one_way_delay(std::time::Duration::from_millis(10))
    ///     .start()
    ///     .await?;
    /// # proxy.shutdown().await;
    /// # Ok(())
    /// # }
    /// ```
    pub fn bandwidth(mut self, bits_per_second: u64) -> Self {
        self.config.bandwidth = (bits_per_second > 0).then_some(bits_per_second);
        self
    }

    /// At most `cuts` cuts in total (all reasons together); once they are
    /// spent the proxy forwards cleanly. Refusals and the lost first request
    /// are not cuts.
    pub fn max_cuts(mut self, cuts: u64) -> Self {
        self.config.max_cuts = Some(cuts);
        self
    }

    /// Lose the first request: on the first connection that is not refused,
    /// read the client's bytes without connecting upstream or forwarding
    /// anything, and reset the client (RST) once it has written at least
    /// `min_bytes` bytes (or at its end of stream).
    ///
    /// This simulates a request (e.g. an `ExecutePlan`) that the server
    /// never read. An HTTP/2 client writes its 24-byte preface, SETTINGS
    /// and the request without waiting for the server, so pick `min_bytes`
    /// past the preface to be sure the request itself was written. The
    /// connection waits for as long as the client writes less than that.
    pub fn lose_first_request(mut self, min_bytes: u64) -> Self {
        self.config.lose_first_request = Some(min_bytes);
        self
    }

    /// Bind the listening socket and start proxying on the current tokio
    /// runtime.
    ///
    /// # Errors
    ///
    /// [`FaultProxyError::NotLoopback`] when either address is not loopback,
    /// [`FaultProxyError::Bind`] when binding fails.
    pub async fn start(self) -> Result<FaultProxy, FaultProxyError> {
        for (role, addr) in [
            (AddrRole::Listen, self.listen),
            (AddrRole::Upstream, self.upstream),
        ] {
            if !addr.ip().to_canonical().is_loopback() {
                return Err(FaultProxyError::NotLoopback { role, addr });
            }
        }
        let listener = TcpListener::bind(self.listen)
            .await
            .map_err(FaultProxyError::Bind)?;
        let local_addr = listener.local_addr().map_err(FaultProxyError::Bind)?;

        let (cut_tx, _) = watch::channel((0u64, CutReason::Manual));
        let (shutdown_tx, shutdown_rx) = watch::channel(false);
        let shared = Arc::new(Shared {
            config: self.config,
            upstream: self.upstream,
            stats: ProxyStatsHandle::default(),
            cut_tx,
        });

        if let Some(period) = shared.config.cut_every {
            tokio::spawn(ticker(shared.clone(), period, shutdown_rx.clone()));
        }
        let accept = tokio::spawn(accept_loop(listener, shared.clone(), shutdown_rx));
        Ok(FaultProxy {
            local_addr,
            shared,
            shutdown_tx,
            accept: Some(accept),
        })
    }
}

/// A loopback TCP proxy that breaks connections on purpose.
///
/// Put it between a client and a (real or embedded) Spark Connect server to
/// check that the client survives what networks do: connections reset,
/// closed or black-holed (silent, with no FIN or RST) mid-stream after a
/// given number of bytes, on a timer or after a connection has lived for a
/// while; refused connections; slow links; and a request that is lost before
/// the server read it.
///
/// Everything is deterministic for a given configuration: byte cuts happen at
/// exact offsets, and [`CutSchedule::seeded`](crate::CutSchedule::seeded) turns a seed into a reproducible
/// list of cut offsets so a test can run many different schedules.
///
/// The proxy only ever listens on and connects to loopback addresses
/// ([`FaultProxyError::NotLoopback`](crate::FaultProxyError::NotLoopback) otherwise): it is a test tool, never a
/// way to send traffic anywhere else.
///
/// ```
/// use std::time::Duration;
/// use spark_connect_testkit::{CutMode, Direction, FaultProxy};
/// use tokio::io::{AsyncReadExt, AsyncWriteExt};
/// use tokio::net::{TcpListener, TcpStream};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// // An upstream that sends 1 MiB to whoever connects.
/// let upstream = TcpListener::bind("127.0.0.1:0").await?;
/// let upstream_addr = upstream.local_addr()?;
/// tokio::spawn(async move {
///     while let Ok((mut socket, _)) = upstream.accept().await {
///         tokio::spawn(async move {
///             let _ = socket.write_all(&vec![7u8; 1 << 20]).await;
///         });
///     }
/// });
///
/// // Reset every connection after 1000 bytes from the server, at most twice.
/// let proxy = FaultProxy::builder(upstream_addr)
///     .cut_after_bytes(Direction::ServerToClient, 1000)
///     .cut_mode(CutMode::Reset)
///     .max_cuts(2)
///     .start()
///     .await?;
///
/// let mut client = TcpStream::connect(proxy.local_addr()).await?;
/// let mut received = Vec::new();
/// let err = client.read_to_end(&mut received).await.unwrap_err();
/// assert_eq!(err.kind(), std::io::ErrorKind::ConnectionReset);
/// // An RST may overtake bytes still in the client's receive queue, so the
/// // client sees at most the 1000 bytes the proxy forwarded.
/// assert!(received.len() <= 1000);
///
/// let stats = proxy.stats();
/// assert_eq!(stats.cuts, 1);
/// assert_eq!(stats.bytes_server_to_client, 1000);
/// proxy.shutdown().await;
/// # Ok(())
/// # }
/// ```
///
/// Dropping it stops accepting and closes the live connections (as does
/// [`shutdown`](Self::shutdown), which also waits for the listener to close).
#[derive(Debug)]
pub struct FaultProxy {
    local_addr: SocketAddr,
    shared: Arc<Shared>,
    shutdown_tx: watch::Sender<bool>,
    accept: Option<JoinHandle<()>>,
}

impl FaultProxy {
    /// Start configuring a proxy to `upstream` (a loopback address).
    pub fn builder(upstream: SocketAddr) -> FaultProxyBuilder {
        FaultProxyBuilder {
            upstream,
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            config: Config::default(),
        }
    }

    /// Start configuring a proxy to the server of a Spark Connect connection
    /// string such as `sc://127.0.0.1:15002/;token=t` (what the
    /// `SPARK_CONNECT_TEST_REMOTE*` variables hold). The host must be a
    /// loopback IP or `localhost` (taken as `127.0.0.1`); the port defaults to
    /// 15002 like Spark's. Parameters after `/` or `;` are ignored: point the
    /// client at [`remote`](Self::remote) with its own parameters.
    ///
    /// # Errors
    ///
    /// [`FaultProxyError::InvalidRemote`] when no `host:port` can be read, or
    /// [`FaultProxyError::NotLoopback`] for a non-loopback IP. A host name
    /// other than `localhost` is refused rather than resolved.
    pub fn builder_for_remote(remote: &str) -> Result<FaultProxyBuilder, FaultProxyError> {
        let invalid = || FaultProxyError::InvalidRemote(remote.to_owned());
        let rest = remote.strip_prefix("sc://").ok_or_else(invalid)?;
        let authority = rest.split(['/', ';']).next().unwrap_or_default();
        // A ':' after any IPv6 brackets means an explicit port.
        let has_port = authority
            .rsplit_once(']')
            .map_or(authority, |(_, after)| after)
            .contains(':');
        let authority = if has_port {
            authority.to_owned()
        } else {
            format!("{authority}:15002")
        };
        let authority = match authority.strip_prefix("localhost:") {
            Some(port) => format!("127.0.0.1:{port}"),
            None => authority,
        };
        let addr: SocketAddr = authority.parse().map_err(|_| invalid())?;
        if !addr.ip().to_canonical().is_loopback() {
            return Err(FaultProxyError::NotLoopback {
                role: AddrRole::Upstream,
                addr,
            });
        }
        Ok(Self::builder(addr))
    }

    /// The address clients connect to.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The address the proxy forwards to.
    pub fn upstream_addr(&self) -> SocketAddr {
        self.shared.upstream
    }

    /// A Spark Connect connection string for the proxy, `sc://IP:PORT`.
    pub fn remote(&self) -> String {
        format!("sc://{}", self.local_addr)
    }

    /// What the proxy did so far: a copy of its counters.
    pub fn stats(&self) -> ProxyStats {
        self.shared.stats.snapshot()
    }

    /// A cheap, cloneable handle that reads the counters and the cut log as
    /// they change.
    pub fn stats_handle(&self) -> ProxyStatsHandle {
        self.shared.stats.clone()
    }

    /// Cut all live connections now, as the [`cut_every`] timer does; each
    /// cut counts toward [`max_cuts`] and is recorded with [`CutReason::Manual`].
    ///
    /// [`cut_every`]: FaultProxyBuilder::cut_every
    /// [`max_cuts`]: FaultProxyBuilder::max_cuts
    pub fn cut_all(&self) {
        self.shared.request_cut_all(CutReason::Manual);
    }

    /// Stop accepting, close all live connections and wait for the listener
    /// to be closed.
    pub async fn shutdown(mut self) {
        let _ = self.shutdown_tx.send(true);
        if let Some(accept) = self.accept.take() {
            let _ = accept.await;
        }
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        let _ = self.shutdown_tx.send(true);
    }
}
