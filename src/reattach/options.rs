//! [`ReattachOptions`]: the segment deadlines and the stall detection of a
//! reattachable execution, with their defaults.

use std::time::Duration;

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
    /// `None` turns it off. Must not be zero.
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
