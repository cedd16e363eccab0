//! What one run of the loop did, counted.
//!
//! Why: a caller that reports on its own work (how many attempts an upload
//! took, how long it waited) needs the loop's counts without parsing its
//! events. [`Retrying::run`](super::Retrying::run) returns them beside the
//! result; that is the one place they are read.

use std::time::Duration;

/// Counters of what a loop did, for observability.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LoopStats {
    /// Attempts made, including the first.
    pub attempts: u32,
    /// Policy-governed retries (each after a sleep).
    pub policy_retries: u32,
    /// Immediate retries.
    pub immediate_retries: u32,
    /// Transparent re-sends of requests that never reached the server
    /// (gRFC A6; no wait, no budget spent).
    pub transparent_retries: u32,
    /// Total time asked of the sleeper (saturating at `Duration::MAX`).
    pub slept: Duration,
}
