//! [`ReattachOptions`]: the segment deadlines and the stall detection of a
//! reattachable execution, with their defaults.

use std::time::Duration;

use tokio::time::Instant;

use super::core::Event;
use super::error::ReattachError;
use crate::deadlines::RpcDeadlines;

/// The default [`ReattachOptions::idle_timeout`]: 10 s (see the module docs,
/// "Stall detection", for how it was chosen).
pub(crate) const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(10);

/// Options of a reattachable execution.
#[derive(Debug, Clone)]
pub struct ReattachOptions {
    /// Segment deadlines (`reattachable_execute_plan`, `reattach_execute`).
    pub deadlines: RpcDeadlines,
    /// Stall detection: treat a stream segment that brings no message (or,
    /// while opening, no response headers) for this long as dead, and
    /// reattach over a fresh connection. Default 10 s;
    /// `None` turns it off. Must not be zero. Off, nothing bounds a request
    /// that tonic's channel strands when it is sent just as its connection
    /// dies (an upstream race, `docs/hangs.md`): it waits until the next
    /// request on the same channel.
    pub idle_timeout: Option<Duration>,
}

impl Default for ReattachOptions {
    fn default() -> Self {
        ReattachOptions {
            deadlines: RpcDeadlines::default(),
            idle_timeout: Some(DEFAULT_IDLE_TIMEOUT),
        }
    }
}

impl ReattachOptions {
    /// Checked where an execution starts, by every driver: a zero idle
    /// timeout, or a deadline too large for the clock (it would otherwise
    /// panic inside tonic on the first read).
    pub(crate) fn check(&self) -> Result<(), ReattachError> {
        if self.idle_timeout == Some(Duration::ZERO) {
            return Err(ReattachError::ZeroIdleTimeout);
        }
        self.deadlines
            .validate()
            .map_err(ReattachError::InvalidDeadline)
    }

    /// When a driver stops waiting on a segment, and the core's event for
    /// it: the idle timeout from now (a stall) or the segment deadline,
    /// whichever comes first (the deadline on a tie). `None` when neither
    /// is set.
    pub(crate) fn wait_bound(&self, segment_deadline: Option<Instant>) -> Option<(Instant, Event)> {
        let idle = self
            .idle_timeout
            .and_then(|d| Some((Instant::now().checked_add(d)?, Event::Stalled(d))));
        let deadline = segment_deadline.map(|at| (at, Event::SegmentDeadline));
        match (deadline, idle) {
            (Some(d), Some(i)) => Some(if i.0 < d.0 { i } else { d }),
            (d, i) => d.or(i),
        }
    }

    /// Waits for `fut` within [`wait_bound`](Self::wait_bound): its output,
    /// or the core's event for the bound that passed first. Both drivers
    /// (the session's stream and the tower layer) wait this way, opening a
    /// segment and reading it.
    pub(crate) async fn bounded<F: std::future::Future>(
        &self,
        segment_deadline: Option<Instant>,
        fut: F,
    ) -> Result<F::Output, Event> {
        match self.wait_bound(segment_deadline) {
            Some((at, event)) => tokio::time::timeout_at(at, fut).await.map_err(|_| event),
            None => Ok(fut.await),
        }
    }
}
