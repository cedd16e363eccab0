//! What a cut is: the direction it counts bytes in, how it closes the
//! sockets, why it happened ([`CutEvent`]), and the per-connection byte
//! offsets of a [`CutSchedule`]. Plain data every part of the proxy reads.

use std::ops::RangeInclusive;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

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
    /// ([`FaultProxyBuilder::cut_after_bytes`](crate::FaultProxyBuilder::cut_after_bytes), [`FaultProxyBuilder::cut_schedule`](crate::FaultProxyBuilder::cut_schedule)).
    Bytes(Direction),
    /// The periodic timer fired ([`FaultProxyBuilder::cut_every`](crate::FaultProxyBuilder::cut_every)).
    Timer,
    /// The connection reached its maximum lifetime ([`FaultProxyBuilder::cut_after`](crate::FaultProxyBuilder::cut_after)).
    Lifetime,
    /// [`FaultProxy::cut_all`](crate::FaultProxy::cut_all) was called.
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
/// [`FaultProxyBuilder::cut_schedule`](crate::FaultProxyBuilder::cut_schedule).
///
/// Entry `i` applies to the `i`-th proxied connection (refused connections
/// and the lost first request do not count); connections past the end of the
/// schedule are forwarded cleanly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CutSchedule {
    pub(super) offsets: Vec<u64>,
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
