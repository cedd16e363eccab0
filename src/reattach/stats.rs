//! What an execution's stream did: [`StreamStats`], the plain snapshot
//! users read (`stream.stats().reattaches`), and [`StreamStatsHandle`], a
//! live, cloneable handle on the same counters for a caller that watches a
//! stream another task consumes.

use std::sync::{Arc, Mutex};

/// What one execution's stream did: responses, reattaches, re-executes,
/// retries, stalls: a plain value. What every `stats()` of a stream
/// ([`ReattachableExecution::stats`](super::ReattachableExecution::stats),
/// `session::ArrowStream::stats`) and
/// [`StreamStatsHandle::snapshot`] return.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StreamStats {
    /// Responses handed to the consumer.
    pub responses: u64,
    /// ReattachExecute streams opened.
    pub reattaches: u64,
    /// ExecutePlan re-sent after NOT_FOUND.
    pub re_executes: u64,
    /// Policy retries (each after a sleep).
    pub policy_retries: u64,
    /// Immediate retries (NOT_FOUND, deadline, stall, a cut stream).
    pub immediate_retries: u64,
    /// Transparent re-sends of requests that never reached the server
    /// (gRFC A6: a GOAWAY, a refused stream, a request dropped unsent by a
    /// closing connection), without a wait or the retry budget.
    pub transparent_retries: u64,
    /// Streams that ended cleanly without ResultComplete.
    pub graceful_ends: u64,
    /// Streams given up as silent (no message within the idle timeout), each followed by a reattach.
    pub stalls: u64,
    /// Stall reattaches the server answered (headers or a message), which
    /// therefore did not count toward the immediate-retry bound.
    pub stalls_answered: u64,
    /// Reopens delayed because the segment before them was short and empty
    /// (the no-progress rule, see the [module docs](super)).
    pub empty_backoffs: u64,
    /// Times a query was re-executed after the server lost it, and resumed
    /// after the rows already delivered (counted by the session's stream,
    /// `SparkSessionBuilder::resume_queries`; always 0 in the core).
    pub resumptions: u64,
    /// Fresh tokens asked for after the server refused the stream's token
    /// (each followed by a reattach; [`crate::token`]).
    pub token_refreshes: u64,
}

/// Live counters of one execution's stream; cheap to clone, clones share
/// the counters. [`snapshot`](Self::snapshot) reads them as they are now.
#[derive(Debug, Clone, Default)]
pub struct StreamStatsHandle {
    inner: Arc<Mutex<StreamStats>>,
}

impl StreamStatsHandle {
    /// The counters as they are now.
    pub fn snapshot(&self) -> StreamStats {
        *self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Replaces the counters (the driver, after each step of the core).
    pub(super) fn set(&self, stats: StreamStats) {
        *self.inner.lock().unwrap_or_else(|e| e.into_inner()) = stats;
    }
}

/// Hears a stream's counters after each step.
pub(crate) type StatsObserver = Box<dyn FnMut(&StreamStats) + Send>;

/// Who hears what an execution does as it does it: its counters after
/// each step, and each background release's outcome. The session's
/// metrics sit above this module, so they are handed in, not named.
pub(crate) struct Observers {
    /// The stream's counters after each step.
    pub(crate) stats: StatsObserver,
    /// A background release ended (`true`: the server answered).
    pub(crate) released: std::sync::Arc<dyn Fn(bool) + Send + Sync>,
}
