//! [`FaultProxy`]: a loopback TCP proxy that breaks connections on purpose.
//!
//! The parts, each depending only on those below it: `handle`
//! ([`FaultProxyBuilder`], [`FaultProxy`]), `accept` (the accept loop:
//! refusals, the lost request, the cut timer), `connection` (one proxied
//! connection: two pipes, byte, lifetime and timer cuts), `delay_line` (the
//! delayed pipe), `token_bucket` (its bandwidth limit), `shared` (the
//! settings and state they all read), `stats` ([`ProxyStatsHandle`],
//! [`ProxyStats`]), `cut` (what a cut is) and `error` ([`FaultProxyError`]).

mod accept;
mod connection;
mod cut;
mod delay_line;
mod error;
mod handle;
mod shared;
mod stats;
mod token_bucket;

pub use cut::{CutEvent, CutMode, CutReason, CutSchedule, Direction};
pub use error::{AddrRole, FaultProxyError};
pub use handle::{FaultProxy, FaultProxyBuilder};
pub use shared::MAX_DELAY_QUEUE;
pub use stats::{ProxyStats, ProxyStatsHandle};
