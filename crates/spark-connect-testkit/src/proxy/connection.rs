//! One proxied connection: a pipe per direction (a [`DelayLine`] between a
//! read and its write, with the byte counts and limit), and the cuts: byte limits,
//! the connection's lifetime, and cut-all requests, all bounded by the cut
//! budget. A cut resets (RST) or closes (FIN) both sockets, or black-holes
//! the connection (stops forwarding, closes nothing).

use std::io;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::time::{Instant, sleep_until, timeout};

use super::cut::{CutEvent, CutMode, CutReason, Direction};
use super::delay_line::{DelayLine, ReadOutcome};
use super::shared::{CHUNK, Config, FIN_DRAIN, Shared, dir_index};
use super::stats::{ActiveGuard, ProxyStatsHandle};

/// One direction's state: its [`DelayLine`], byte counts, the byte limit
/// and the half-close.
struct Pipe {
    direction: Direction,
    line: DelayLine,
    /// Bytes read from the source (bounded by `limit`).
    read: u64,
    /// Bytes written to the destination.
    forwarded: u64,
    /// Cut once `forwarded` reaches this.
    limit: Option<u64>,
    /// The source reached end of stream.
    eof: bool,
    /// The destination's write half was shut down after `eof`.
    shut: bool,
}

impl Pipe {
    fn new(direction: Direction, limit: Option<u64>, cfg: &Config) -> Self {
        Pipe {
            direction,
            line: DelayLine::new(cfg.latency, cfg.max_queued, cfg.bandwidth),
            read: 0,
            forwarded: 0,
            limit,
            eof: false,
            shut: false,
        }
    }

    fn has_data(&self) -> bool {
        self.line.has_data()
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
        !self.eof && self.line.can_read() && self.read_room() > 0
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
fn read_into(pipe: &mut Pipe, src: &TcpStream) -> Step {
    match pipe.line.read_from(src, pipe.read_room()) {
        Ok(ReadOutcome::Eof) => {
            pipe.eof = true;
            Step::Continue
        }
        Ok(ReadOutcome::Queued(n)) => {
            pipe.read += n as u64;
            Step::Continue
        }
        Ok(ReadOutcome::WouldBlock) => Step::Continue,
        Err(_) => Step::Abort,
    }
}

/// Write the due bytes of `pipe` to `dst`.
fn write_from(pipe: &mut Pipe, dst: &TcpStream, stats: &ProxyStatsHandle) -> Step {
    match pipe.line.write_due(dst) {
        Ok(n) => {
            pipe.forwarded += n as u64;
            stats.add_bytes(pipe.direction, n as u64);
            Step::Continue
        }
        Err(_) => Step::Abort,
    }
}

async fn writable_after(dst: &TcpStream, due: Option<Instant>) -> io::Result<()> {
    if let Some(t) = due {
        sleep_until(t).await;
    }
    dst.writable().await
}

/// Proxies one accepted connection to the upstream until it is cut, fails,
/// closes or the proxy shuts down.
pub(super) async fn connection(
    client: TcpStream,
    index: u64,
    proxied: u64,
    shared: Arc<Shared>,
    shutdown: watch::Receiver<bool>,
    _guard: ActiveGuard,
) {
    let Some(server) = connect_upstream(&client, &shared).await else {
        return;
    };
    let mut conn = Conn::new(client, server, proxied, &shared, shutdown);
    let outcome = conn.run().await;
    conn.finish(outcome, index).await;
}

/// Connects to the upstream; when it cannot be reached, resets the client
/// (mirroring the failure instead of leaving it hanging).
async fn connect_upstream(client: &TcpStream, shared: &Shared) -> Option<TcpStream> {
    match TcpStream::connect(shared.upstream).await {
        Ok(server) => {
            let _ = server.set_nodelay(true);
            Some(server)
        }
        Err(e) => {
            tracing::debug!("fault proxy: upstream {} unreachable: {e}", shared.upstream);
            shared
                .stats
                .inner
                .upstream_errors
                .fetch_add(1, Ordering::SeqCst);
            let _ = client.set_zero_linger();
            None
        }
    }
}

/// One proxied connection: both sockets, both pipes and the cut triggers.
struct Conn<'a> {
    shared: &'a Shared,
    client: TcpStream,
    server: TcpStream,
    c2s: Pipe,
    s2c: Pipe,
    /// When the connection's lifetime cut is due ([`FaultProxyBuilder::cut_after`]).
    ///
    /// [`FaultProxyBuilder::cut_after`]: super::FaultProxyBuilder::cut_after
    lifetime_deadline: Option<Instant>,
    /// Cut-all requests (timer ticks and `cut_all`).
    cut_rx: watch::Receiver<(u64, CutReason)>,
    cut_rx_open: bool,
    shutdown: watch::Receiver<bool>,
}

impl<'a> Conn<'a> {
    fn new(
        client: TcpStream,
        server: TcpStream,
        proxied: u64,
        shared: &'a Shared,
        shutdown: watch::Receiver<bool>,
    ) -> Self {
        let cfg = &shared.config;
        let limit = |d: Direction| {
            cfg.byte_cuts[dir_index(d)]
                .as_ref()
                .and_then(|p| p.limit_for(proxied))
        };
        let pipe = |d: Direction| Pipe::new(d, limit(d), cfg);
        let mut cut_rx = shared.cut_tx.subscribe();
        cut_rx.mark_unchanged();
        Conn {
            shared,
            client,
            server,
            c2s: pipe(Direction::ClientToServer),
            s2c: pipe(Direction::ServerToClient),
            lifetime_deadline: cfg.cut_after.map(|d| Instant::now() + d),
            cut_rx,
            cut_rx_open: true,
            shutdown,
        }
    }

    /// Forwards until something other than [`Step::Continue`] happens.
    async fn run(&mut self) -> Step {
        loop {
            if let Some(reason) = self.byte_cut() {
                return Step::Cut(reason);
            }
            // Once the budget is spent no timer can cut either.
            if self.lifetime_deadline.is_some() && !self.shared.cuts_left() {
                self.lifetime_deadline = None;
            }
            if self.propagate_half_close().await {
                return Step::Close;
            }
            match self.next_event().await {
                Step::Continue => {}
                other => return other,
            }
        }
    }

    /// Byte cuts first: a limit reached and flushed cuts now, or, when the
    /// cut budget is spent, the limit is dropped and forwarding goes on.
    fn byte_cut(&mut self) -> Option<CutReason> {
        let mut byte_cut = None;
        for pipe in [&mut self.c2s, &mut self.s2c] {
            if pipe.limit_reached() {
                if byte_cut.is_none() && self.shared.reserve_cut() {
                    byte_cut = Some(CutReason::Bytes(pipe.direction));
                } else if byte_cut.is_none() {
                    pipe.limit = None;
                }
            }
        }
        byte_cut
    }

    /// Propagates a half-close once its direction is flushed. `true` once
    /// both directions are shut.
    async fn propagate_half_close(&mut self) -> bool {
        if self.c2s.eof && !self.c2s.has_data() && !self.c2s.shut {
            self.c2s.shut = true;
            let _ = self.server.shutdown().await;
        }
        if self.s2c.eof && !self.s2c.has_data() && !self.s2c.shut {
            self.s2c.shut = true;
            let _ = self.client.shutdown().await;
        }
        self.c2s.shut && self.s2c.shut
    }

    /// Waits for the next event (shutdown, a cut trigger, a socket ready)
    /// and handles it.
    async fn next_event(&mut self) -> Step {
        let shared = self.shared;
        let stats = &shared.stats;
        let deadline = self.lifetime_deadline;
        tokio::select! {
            r = self.shutdown.changed() => {
                if r.is_err() || *self.shutdown.borrow() { Step::Close } else { Step::Continue }
            }
            r = self.cut_rx.changed(), if self.cut_rx_open => {
                if r.is_err() {
                    self.cut_rx_open = false;
                    Step::Continue
                } else if shared.reserve_cut() {
                    Step::Cut(self.cut_rx.borrow_and_update().1)
                } else {
                    Step::Continue
                }
            }
            _ = sleep_until(deadline.unwrap_or_else(Instant::now)), if deadline.is_some() => {
                self.lifetime_deadline = None;
                if shared.reserve_cut() { Step::Cut(CutReason::Lifetime) } else { Step::Continue }
            }
            r = self.client.readable(), if self.c2s.can_read() => match r {
                Ok(()) => read_into(&mut self.c2s, &self.client),
                Err(_) => Step::Abort,
            },
            r = self.server.readable(), if self.s2c.can_read() => match r {
                Ok(()) => read_into(&mut self.s2c, &self.server),
                Err(_) => Step::Abort,
            },
            r = writable_after(&self.server, self.c2s.line.pending_due()), if self.c2s.has_data() => match r {
                Ok(()) => write_from(&mut self.c2s, &self.server, stats),
                Err(_) => Step::Abort,
            },
            r = writable_after(&self.client, self.s2c.line.pending_due()), if self.s2c.has_data() => match r {
                Ok(()) => write_from(&mut self.s2c, &self.client, stats),
                Err(_) => Step::Abort,
            },
        }
    }

    /// Closes the connection the way `outcome` asks: a cut is recorded and
    /// made in the configured mode; a failure resets both sides.
    async fn finish(self, outcome: Step, index: u64) {
        match outcome {
            Step::Cut(reason) => {
                self.shared.stats.record(CutEvent {
                    connection: index,
                    reason,
                    client_to_server: self.c2s.forwarded,
                    server_to_client: self.s2c.forwarded,
                });
                match self.shared.config.mode {
                    CutMode::Reset => reset(&self.client, &self.server),
                    CutMode::Fin => fin(self.client, self.server).await,
                    CutMode::BlackHole => {
                        black_hole(self.client, self.server, self.shutdown).await;
                    }
                }
            }
            Step::Abort => reset(&self.client, &self.server),
            Step::Close | Step::Continue => {}
        }
    }
}

/// Arrange for both sockets to send RST when they are dropped (right after).
fn reset(client: &TcpStream, server: &TcpStream) {
    let _ = client.set_zero_linger();
    let _ = server.set_zero_linger();
}

/// Hold both sockets open, reading and writing nothing, until the proxy
/// shuts down (or is dropped); then reset them, as a proxy that gives up on a
/// connection would.
async fn black_hole(client: TcpStream, server: TcpStream, mut shutdown: watch::Receiver<bool>) {
    while !*shutdown.borrow_and_update() {
        if shutdown.changed().await.is_err() {
            break;
        }
    }
    reset(&client, &server);
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
