//! What every part of a running proxy reads: its settings and the state
//! its connections share.
//!
//! Plain data, kept apart from the handle that builds it and the loops that
//! use it, so that none of them imports another to reach it.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::sync::watch;

use super::cut::{CutMode, CutReason, Direction};
use super::stats::ProxyStatsHandle;

/// How many bytes the proxy reads from a socket at a time; also the unit that
/// [`FaultProxyBuilder::latency`](crate::FaultProxyBuilder::latency) delays.
pub(super) const CHUNK: usize = 64 * 1024;

/// The most bytes [`FaultProxyBuilder::one_way_delay`](crate::FaultProxyBuilder::one_way_delay) holds per direction of
/// a connection before it stops reading: 256 MiB, which caps throughput only
/// above 5 GiB/s at a 50 ms one-way delay.
pub const MAX_DELAY_QUEUE: usize = 256 * 1024 * 1024;

/// How long a FIN cut keeps draining a peer's bytes after sending FIN, so the
/// final close does not turn into an RST (closing a socket with unread bytes
/// makes the kernel send RST, which would blur FIN with RST for the peer).
pub(super) const FIN_DRAIN: Duration = Duration::from_secs(2);

/// Byte-cut plan for one direction.
#[derive(Debug, Clone)]
pub(super) enum BytePlan {
    /// Every proxied connection is cut at this offset.
    Every(u64),
    /// Connection `i` is cut at `offsets[i]`.
    Schedule(Vec<u64>),
}

impl BytePlan {
    pub(super) fn limit_for(&self, proxied_index: u64) -> Option<u64> {
        match self {
            BytePlan::Every(n) => Some(*n),
            BytePlan::Schedule(v) => usize::try_from(proxied_index)
                .ok()
                .and_then(|i| v.get(i).copied()),
        }
    }
}

#[derive(Debug, Clone, Default)]
pub(super) struct Config {
    /// Indexed by [`dir_index`].
    pub(super) byte_cuts: [Option<BytePlan>; 2],
    pub(super) cut_every: Option<Duration>,
    pub(super) cut_after: Option<Duration>,
    pub(super) refuse_first: u64,
    pub(super) mode: CutMode,
    /// Delay of each chunk, each way.
    pub(super) latency: Duration,
    /// The [`DelayLine`](super::delay_line::DelayLine) cap: `0` for one chunk
    /// in flight ([`FaultProxyBuilder::latency`]), large for
    /// [`FaultProxyBuilder::one_way_delay`].
    pub(super) max_queued: usize,
    /// The bandwidth limit of each direction, in bits per second.
    pub(super) bandwidth: Option<u64>,
    pub(super) max_cuts: Option<u64>,
    pub(super) lose_first_request: Option<u64>,
}

pub(super) fn dir_index(d: Direction) -> usize {
    match d {
        Direction::ClientToServer => 0,
        Direction::ServerToClient => 1,
    }
}

#[derive(Debug)]
pub(super) struct Shared {
    pub(super) config: Config,
    pub(super) upstream: SocketAddr,
    pub(super) stats: ProxyStatsHandle,
    /// A change asks every live connection to cut, for the given reason
    /// (timer ticks and [`FaultProxy::cut_all`]); the counter makes each
    /// request a change even when the reason repeats.
    pub(super) cut_tx: watch::Sender<(u64, CutReason)>,
}

impl Shared {
    /// Take one cut out of the `max_cuts` budget; false when it is spent.
    pub(super) fn reserve_cut(&self) -> bool {
        let max = self.config.max_cuts.unwrap_or(u64::MAX);
        self.stats
            .inner
            .cuts
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |c| {
                (c < max).then_some(c + 1)
            })
            .is_ok()
    }

    pub(super) fn request_cut_all(&self, reason: CutReason) {
        self.cut_tx.send_modify(|(g, r)| {
            *g = g.wrapping_add(1);
            *r = reason;
        });
    }

    pub(super) fn cuts_left(&self) -> bool {
        self.stats.inner.cuts.load(Ordering::SeqCst) < self.config.max_cuts.unwrap_or(u64::MAX)
    }
}
