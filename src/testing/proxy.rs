//! [`FaultProxy`]: a loopback TCP proxy that breaks connections on purpose.
//!
//! Put it between a client and a (real or embedded) Spark Connect server to
//! check that the client survives what networks do: connections reset or
//! closed mid-stream after a given number of bytes, on a timer or after a
//! connection has lived for a while; refused connections; slow links; and a
//! request that is lost before the server read it.
//!
//! Everything is deterministic for a given configuration: byte cuts happen at
//! exact offsets, and [`CutSchedule::seeded`] turns a seed into a reproducible
//! list of cut offsets so a test can run many different schedules.
//!
//! The proxy only ever listens on and connects to loopback addresses
//! ([`FaultProxyError::NotLoopback`] otherwise): it is a test tool, never a
//! way to send traffic anywhere else.
//!
//! ```
//! use std::time::Duration;
//! use spark_connect_retry::testing::proxy::{CutMode, Direction, FaultProxy};
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
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep_until, timeout};

/// How many bytes the proxy reads from a socket at a time; also the unit that
/// [`FaultProxyBuilder::latency`] delays.
const CHUNK: usize = 64 * 1024;

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

/// Byte-cut plan for one direction.
#[derive(Debug, Clone)]
enum BytePlan {
    /// Every proxied connection is cut at this offset.
    Every(u64),
    /// Connection `i` is cut at `offsets[i]`.
    Schedule(Vec<u64>),
}

impl BytePlan {
    fn limit_for(&self, proxied_index: u64) -> Option<u64> {
        match self {
            BytePlan::Every(n) => Some(*n),
            BytePlan::Schedule(v) => usize::try_from(proxied_index)
                .ok()
                .and_then(|i| v.get(i).copied()),
        }
    }
}

#[derive(Debug, Clone, Default)]
struct Config {
    /// Indexed by [`dir_index`].
    byte_cuts: [Option<BytePlan>; 2],
    cut_every: Option<Duration>,
    cut_after: Option<Duration>,
    refuse_first: u64,
    mode: CutMode,
    latency: Duration,
    max_cuts: Option<u64>,
    lose_first_request: Option<u64>,
}

fn dir_index(d: Direction) -> usize {
    match d {
        Direction::ClientToServer => 0,
        Direction::ServerToClient => 1,
    }
}

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
    pub fn latency(mut self, delay: Duration) -> Self {
        self.config.latency = delay;
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
            stats: ProxyStats::default(),
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

/// A running fault-injecting TCP proxy on loopback; see the [module docs](self).
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

    /// A cheap, cloneable handle on what the proxy did so far.
    pub fn stats(&self) -> ProxyStats {
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

#[derive(Debug)]
struct Shared {
    config: Config,
    upstream: SocketAddr,
    stats: ProxyStats,
    /// A change asks every live connection to cut, for the given reason
    /// (timer ticks and [`FaultProxy::cut_all`]); the counter makes each
    /// request a change even when the reason repeats.
    cut_tx: watch::Sender<(u64, CutReason)>,
}

impl Shared {
    /// Take one cut out of the `max_cuts` budget; false when it is spent.
    fn reserve_cut(&self) -> bool {
        let max = self.config.max_cuts.unwrap_or(u64::MAX);
        self.stats
            .inner
            .cuts
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |c| {
                (c < max).then_some(c + 1)
            })
            .is_ok()
    }

    fn request_cut_all(&self, reason: CutReason) {
        self.cut_tx.send_modify(|(g, r)| {
            *g = g.wrapping_add(1);
            *r = reason;
        });
    }

    fn cuts_left(&self) -> bool {
        self.stats.inner.cuts.load(Ordering::SeqCst) < self.config.max_cuts.unwrap_or(u64::MAX)
    }
}

/// Cheap cloneable handle on a [`FaultProxy`]'s counters (shared, live).
#[derive(Debug, Clone, Default)]
pub struct ProxyStats {
    inner: Arc<StatsInner>,
}

#[derive(Debug, Default)]
struct StatsInner {
    connections: AtomicU64,
    active: AtomicU64,
    refused: AtomicU64,
    lost_requests: AtomicU64,
    cuts: AtomicU64,
    upstream_errors: AtomicU64,
    bytes_client_to_server: AtomicU64,
    bytes_server_to_client: AtomicU64,
    events: Mutex<Vec<CutEvent>>,
    /// Proxied connections so far; indexes [`CutSchedule`]s.
    proxied: AtomicU64,
}

/// A point-in-time copy of [`ProxyStats`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct StatsSnapshot {
    /// Connections accepted, refused ones included.
    pub connections: u64,
    /// Connections open right now.
    pub active: u64,
    /// Connections refused by [`FaultProxyBuilder::refuse_first`].
    pub refused: u64,
    /// Connections whose request was dropped by
    /// [`FaultProxyBuilder::lose_first_request`] (0 or 1).
    pub lost_requests: u64,
    /// Cuts made, all reasons together.
    pub cuts: u64,
    /// Connections reset because the upstream could not be reached.
    pub upstream_errors: u64,
    /// Bytes forwarded from clients to the upstream.
    pub bytes_client_to_server: u64,
    /// Bytes forwarded from the upstream to clients.
    pub bytes_server_to_client: u64,
}

impl ProxyStats {
    /// Copy all counters at once (each is read atomically; the set is not a
    /// single atomic snapshot while connections are live).
    pub fn snapshot(&self) -> StatsSnapshot {
        let s = &self.inner;
        StatsSnapshot {
            connections: s.connections.load(Ordering::SeqCst),
            active: s.active.load(Ordering::SeqCst),
            refused: s.refused.load(Ordering::SeqCst),
            lost_requests: s.lost_requests.load(Ordering::SeqCst),
            cuts: s.cuts.load(Ordering::SeqCst),
            upstream_errors: s.upstream_errors.load(Ordering::SeqCst),
            bytes_client_to_server: s.bytes_client_to_server.load(Ordering::SeqCst),
            bytes_server_to_client: s.bytes_server_to_client.load(Ordering::SeqCst),
        }
    }

    /// Connections accepted, refused ones included.
    pub fn connections(&self) -> u64 {
        self.inner.connections.load(Ordering::SeqCst)
    }

    /// Cuts made so far.
    pub fn cuts(&self) -> u64 {
        self.inner.cuts.load(Ordering::SeqCst)
    }

    /// Connections refused so far.
    pub fn refused(&self) -> u64 {
        self.inner.refused.load(Ordering::SeqCst)
    }

    /// Bytes forwarded in `direction` so far.
    pub fn bytes(&self, direction: Direction) -> u64 {
        match direction {
            Direction::ClientToServer => self.inner.bytes_client_to_server.load(Ordering::SeqCst),
            Direction::ServerToClient => self.inner.bytes_server_to_client.load(Ordering::SeqCst),
        }
    }

    /// Every cut so far, in the order they happened.
    pub fn cut_events(&self) -> Vec<CutEvent> {
        self.inner
            .events
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn add_bytes(&self, direction: Direction, n: u64) {
        let counter = match direction {
            Direction::ClientToServer => &self.inner.bytes_client_to_server,
            Direction::ServerToClient => &self.inner.bytes_server_to_client,
        };
        counter.fetch_add(n, Ordering::SeqCst);
    }

    fn record(&self, event: CutEvent) {
        self.inner
            .events
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(event);
    }
}

/// Decrements `active` however a connection task ends.
struct ActiveGuard(ProxyStats);

impl Drop for ActiveGuard {
    fn drop(&mut self) {
        self.0.inner.active.fetch_sub(1, Ordering::SeqCst);
    }
}

async fn ticker(shared: Arc<Shared>, period: Duration, mut shutdown: watch::Receiver<bool>) {
    let mut next = Instant::now() + period;
    loop {
        tokio::select! {
            _ = sleep_until(next) => {
                next += period;
                shared.request_cut_all(CutReason::Timer);
            }
            r = shutdown.changed() => if r.is_err() || *shutdown.borrow() { return },
        }
    }
}

async fn accept_loop(
    listener: TcpListener,
    shared: Arc<Shared>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut lost_done = false;
    loop {
        let (client, _) = tokio::select! {
            r = listener.accept() => match r {
                Ok(c) => c,
                // Transient accept errors (e.g. EMFILE, aborted handshakes):
                // keep serving rather than silently dying mid-test.
                Err(e) => {
                    tracing::debug!("fault proxy accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            },
            r = shutdown.changed() => if r.is_err() || *shutdown.borrow() { return } else { continue },
        };
        let stats = &shared.stats.inner;
        let index = stats.connections.fetch_add(1, Ordering::SeqCst);
        let _ = client.set_nodelay(true);

        if index < shared.config.refuse_first {
            stats.refused.fetch_add(1, Ordering::SeqCst);
            let _ = client.set_zero_linger();
            drop(client);
            continue;
        }

        stats.active.fetch_add(1, Ordering::SeqCst);
        let guard = ActiveGuard(shared.stats.clone());
        if let (Some(min_bytes), false) = (shared.config.lose_first_request, lost_done) {
            lost_done = true;
            tokio::spawn(lose_request(
                client,
                min_bytes,
                shared.clone(),
                shutdown.clone(),
                guard,
            ));
            continue;
        }

        let proxied = stats.proxied.fetch_add(1, Ordering::SeqCst);
        tokio::spawn(connection(
            client,
            index,
            proxied,
            shared.clone(),
            shutdown.clone(),
            guard,
        ));
    }
}

async fn lose_request(
    client: TcpStream,
    min_bytes: u64,
    shared: Arc<Shared>,
    mut shutdown: watch::Receiver<bool>,
    _guard: ActiveGuard,
) {
    let mut buf = vec![0u8; CHUNK];
    let mut seen = 0u64;
    while seen < min_bytes {
        tokio::select! {
            r = client.readable() => {
                if r.is_err() { break }
                match client.try_read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => seen += n as u64,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(_) => break,
                }
            }
            r = shutdown.changed() => if r.is_err() || *shutdown.borrow() { return },
        }
    }
    shared
        .stats
        .inner
        .lost_requests
        .fetch_add(1, Ordering::SeqCst);
    let _ = client.set_zero_linger();
}

/// One direction's state: a single-chunk buffer between a read and its write.
struct Pipe {
    direction: Direction,
    buf: Vec<u8>,
    start: usize,
    end: usize,
    /// Bytes read from the source (bounded by `limit`).
    read: u64,
    /// Bytes written to the destination.
    forwarded: u64,
    /// Cut once `forwarded` reaches this.
    limit: Option<u64>,
    /// When the buffered chunk may be written (latency).
    ready_at: Option<Instant>,
    /// The source reached end of stream.
    eof: bool,
    /// The destination's write half was shut down after `eof`.
    shut: bool,
}

impl Pipe {
    fn new(direction: Direction, limit: Option<u64>) -> Self {
        Pipe {
            direction,
            buf: vec![0; CHUNK],
            start: 0,
            end: 0,
            read: 0,
            forwarded: 0,
            limit,
            ready_at: None,
            eof: false,
            shut: false,
        }
    }

    fn has_data(&self) -> bool {
        self.start < self.end
    }

    /// How many bytes the next read may take: the chunk size, but never past
    /// the byte limit, so a cut lands exactly on its offset.
    fn read_room(&self) -> usize {
        let room = CHUNK as u64;
        let room = match self.limit {
            Some(l) => room.min(l.saturating_sub(self.read)),
            None => room,
        };
        room as usize
    }

    fn can_read(&self) -> bool {
        !self.eof && !self.has_data() && self.read_room() > 0
    }

    fn limit_reached(&self) -> bool {
        self.limit.is_some_and(|l| self.forwarded >= l) && !self.has_data()
    }
}

/// What a step of the connection loop decided.
enum Step {
    Continue,
    Cut(CutReason),
    /// One side failed: reset the other side too, like a network failure would.
    Abort,
    /// Shut down: close both sides without counting a cut.
    Close,
}

/// Read a chunk from `src` into `pipe`.
fn read_into(pipe: &mut Pipe, src: &TcpStream, latency: Duration) -> Step {
    let room = pipe.read_room();
    match src.try_read(&mut pipe.buf[..room]) {
        Ok(0) => {
            pipe.eof = true;
            Step::Continue
        }
        Ok(n) => {
            pipe.start = 0;
            pipe.end = n;
            pipe.read += n as u64;
            pipe.ready_at = (!latency.is_zero()).then(|| Instant::now() + latency);
            Step::Continue
        }
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Step::Continue,
        Err(_) => Step::Abort,
    }
}

/// Write buffered bytes of `pipe` to `dst`.
fn write_from(pipe: &mut Pipe, dst: &TcpStream, stats: &ProxyStats) -> Step {
    pipe.ready_at = None;
    match dst.try_write(&pipe.buf[pipe.start..pipe.end]) {
        Ok(n) => {
            pipe.start += n;
            pipe.forwarded += n as u64;
            stats.add_bytes(pipe.direction, n as u64);
            Step::Continue
        }
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Step::Continue,
        Err(_) => Step::Abort,
    }
}

async fn writable_after(dst: &TcpStream, ready_at: Option<Instant>) -> io::Result<()> {
    if let Some(t) = ready_at {
        sleep_until(t).await;
    }
    dst.writable().await
}

async fn connection(
    client: TcpStream,
    index: u64,
    proxied: u64,
    shared: Arc<Shared>,
    mut shutdown: watch::Receiver<bool>,
    _guard: ActiveGuard,
) {
    let mut server = match TcpStream::connect(shared.upstream).await {
        Ok(s) => s,
        Err(e) => {
            // Mirror the failure to the client instead of leaving it hanging.
            tracing::debug!("fault proxy: upstream {} unreachable: {e}", shared.upstream);
            shared
                .stats
                .inner
                .upstream_errors
                .fetch_add(1, Ordering::SeqCst);
            let _ = client.set_zero_linger();
            return;
        }
    };
    let _ = server.set_nodelay(true);
    let mut client = client;

    let cfg = &shared.config;
    let limit = |d: Direction| {
        cfg.byte_cuts[dir_index(d)]
            .as_ref()
            .and_then(|p| p.limit_for(proxied))
    };
    let mut c2s = Pipe::new(Direction::ClientToServer, limit(Direction::ClientToServer));
    let mut s2c = Pipe::new(Direction::ServerToClient, limit(Direction::ServerToClient));
    let mut lifetime_deadline = cfg.cut_after.map(|d| Instant::now() + d);
    let mut cut_rx = shared.cut_tx.subscribe();
    cut_rx.mark_unchanged();
    let mut cut_rx_open = true;
    let latency = cfg.latency;
    let stats = &shared.stats;

    let outcome = loop {
        // Byte cuts first: a limit reached and flushed cuts now, or, when the
        // cut budget is spent, the limit is dropped and forwarding goes on.
        let mut byte_cut = None;
        for pipe in [&mut c2s, &mut s2c] {
            if pipe.limit_reached() {
                if byte_cut.is_none() && shared.reserve_cut() {
                    byte_cut = Some(CutReason::Bytes(pipe.direction));
                } else if byte_cut.is_none() {
                    pipe.limit = None;
                }
            }
        }
        if let Some(reason) = byte_cut {
            break Step::Cut(reason);
        }
        // Once the budget is spent no timer can cut either.
        if lifetime_deadline.is_some() && !shared.cuts_left() {
            lifetime_deadline = None;
        }

        // Propagate a half-close once its direction is flushed.
        if c2s.eof && !c2s.has_data() && !c2s.shut {
            c2s.shut = true;
            let _ = server.shutdown().await;
        }
        if s2c.eof && !s2c.has_data() && !s2c.shut {
            s2c.shut = true;
            let _ = client.shutdown().await;
        }
        if c2s.shut && s2c.shut {
            break Step::Close;
        }

        let step = tokio::select! {
            r = shutdown.changed() => {
                if r.is_err() || *shutdown.borrow() { Step::Close } else { Step::Continue }
            }
            r = cut_rx.changed(), if cut_rx_open => {
                if r.is_err() {
                    cut_rx_open = false;
                    Step::Continue
                } else if shared.reserve_cut() {
                    Step::Cut(cut_rx.borrow_and_update().1)
                } else {
                    Step::Continue
                }
            }
            _ = sleep_until(lifetime_deadline.unwrap_or_else(Instant::now)), if lifetime_deadline.is_some() => {
                lifetime_deadline = None;
                if shared.reserve_cut() { Step::Cut(CutReason::Lifetime) } else { Step::Continue }
            }
            r = client.readable(), if c2s.can_read() => match r {
                Ok(()) => read_into(&mut c2s, &client, latency),
                Err(_) => Step::Abort,
            },
            r = server.readable(), if s2c.can_read() => match r {
                Ok(()) => read_into(&mut s2c, &server, latency),
                Err(_) => Step::Abort,
            },
            r = writable_after(&server, c2s.ready_at), if c2s.has_data() => match r {
                Ok(()) => write_from(&mut c2s, &server, stats),
                Err(_) => Step::Abort,
            },
            r = writable_after(&client, s2c.ready_at), if s2c.has_data() => match r {
                Ok(()) => write_from(&mut s2c, &client, stats),
                Err(_) => Step::Abort,
            },
        };
        match step {
            Step::Continue => {}
            other => break other,
        }
    };

    match outcome {
        Step::Cut(reason) => {
            stats.record(CutEvent {
                connection: index,
                reason,
                client_to_server: c2s.forwarded,
                server_to_client: s2c.forwarded,
            });
            match cfg.mode {
                CutMode::Reset => reset(&client, &server),
                CutMode::Fin => fin(client, server).await,
            }
        }
        Step::Abort => reset(&client, &server),
        Step::Close | Step::Continue => {}
    }
}

/// Arrange for both sockets to send RST when they are dropped (right after).
fn reset(client: &TcpStream, server: &TcpStream) {
    let _ = client.set_zero_linger();
    let _ = server.set_zero_linger();
}

/// Send FIN both ways, then read and discard until both peers close (bounded
/// by [`FIN_DRAIN`]) so the final close stays orderly.
async fn fin(mut client: TcpStream, mut server: TcpStream) {
    let _ = client.shutdown().await;
    let _ = server.shutdown().await;
    let drain = async {
        let (a, b) = tokio::join!(drain(&client), drain(&server));
        (a, b)
    };
    let _ = timeout(FIN_DRAIN, drain).await;
}

async fn drain(stream: &TcpStream) {
    let mut buf = vec![0u8; CHUNK];
    loop {
        if stream.readable().await.is_err() {
            return;
        }
        match stream.try_read(&mut buf) {
            Ok(0) => return,
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(_) => return,
        }
    }
}
