//! What the guard counts itself: clients, open calls, bytes, calls ended
//! by status code. Plain atomics, always on; [`GuardStats`] is a snapshot.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use spark_connect_retry::reattach::StreamStats;

/// The Spark Connect methods a call is counted under; anything else is
/// `other` (bounded labels: never an operation or session id).
pub(crate) const METHODS: [&str; 13] = [
    "ExecutePlan",
    "ReattachExecute",
    "ReleaseExecute",
    "AnalyzePlan",
    "Config",
    "AddArtifacts",
    "ArtifactStatus",
    "Interrupt",
    "ReleaseSession",
    "FetchErrorDetails",
    "CloneSession",
    "GetStatus",
    "other",
];

/// gRPC's status codes by number, as `grpc.status` labels name them.
pub(crate) const CODES: [&str; 17] = [
    "OK",
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
];

/// The method index of a request path.
pub(crate) fn method_of(path: &str) -> usize {
    let name = path
        .strip_prefix("/spark.connect.SparkConnectService/")
        .unwrap_or("");
    METHODS[..METHODS.len() - 1]
        .iter()
        .position(|m| *m == name)
        .unwrap_or(METHODS.len() - 1)
}

/// The code index of a `grpc-status` value (an unknown one is UNKNOWN).
pub(crate) fn code_of(value: Option<&http::HeaderValue>) -> usize {
    value
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|c| *c < CODES.len())
        .unwrap_or(2)
}

/// The live counters, shared by the guard's services.
#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) connections_accepted: AtomicU64,
    pub(crate) connections_closed: AtomicU64,
    pub(crate) calls_started: AtomicU64,
    pub(crate) calls_finished: AtomicU64,
    pub(crate) bytes_to_clients: AtomicU64,
    pub(crate) refused: AtomicU64,
    pub(crate) cut_by_drain: AtomicU64,
    /// The health status is SERVING.
    pub(crate) serving: AtomicBool,
    /// Calls ended, `[method][code]`.
    pub(crate) ended: [[AtomicU64; CODES.len()]; METHODS.len()],
    /// Reattaches of ended executions, by [`CAUSES`].
    pub(crate) reattaches: [AtomicU64; CAUSES.len()],
    /// ExecutePlans sent again after NOT_FOUND, of ended executions.
    pub(crate) re_executes: AtomicU64,
    /// Ended executions that reattached at least once.
    pub(crate) resumed_streams: AtomicU64,
}

/// Why the reattach layer reattached, as the `cause` label names it: a
/// stream that ended without its result, one given up as silent, any
/// other fault.
pub(crate) const CAUSES: [&str; 3] = ["graceful_end", "stall", "fault"];

impl std::fmt::Debug for Counters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.snapshot().fmt(f)
    }
}

impl Counters {
    pub(crate) fn end(&self, method: usize, code: usize) {
        self.ended[method][code].fetch_add(1, Ordering::Relaxed);
    }

    /// An execution the reattach layer carried has ended: add what it
    /// went through.
    pub(crate) fn stream_ended(&self, s: &StreamStats) {
        let faults = s
            .reattaches
            .saturating_sub(s.graceful_ends)
            .saturating_sub(s.stalls);
        for (slot, n) in self
            .reattaches
            .iter()
            .zip([s.graceful_ends, s.stalls, faults])
        {
            slot.fetch_add(n, Ordering::Relaxed);
        }
        self.re_executes.fetch_add(s.re_executes, Ordering::Relaxed);
        if s.reattaches > 0 {
            self.resumed_streams.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub(crate) fn snapshot(&self) -> GuardStats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let accepted = get(&self.connections_accepted);
        let started = get(&self.calls_started);
        let mut ended = Vec::new();
        for (m, row) in self.ended.iter().enumerate() {
            for (c, n) in row.iter().enumerate() {
                let n = get(n);
                if n > 0 {
                    ended.push((METHODS[m], CODES[c], n));
                }
            }
        }
        GuardStats {
            clients: accepted.saturating_sub(get(&self.connections_closed)),
            connections_accepted: accepted,
            open_calls: started.saturating_sub(get(&self.calls_finished)),
            calls_started: started,
            bytes_to_clients: get(&self.bytes_to_clients),
            refused: get(&self.refused),
            cut_by_drain: get(&self.cut_by_drain),
            ended,
            reattaches: CAUSES
                .iter()
                .zip(&self.reattaches)
                .map(|(cause, n)| (*cause, get(n)))
                .collect(),
            re_executes: get(&self.re_executes),
            resumed_streams: get(&self.resumed_streams),
        }
    }
}

/// Counts a connection open until dropped.
pub(crate) struct ConnectionOpen(pub(crate) Arc<Counters>);

impl ConnectionOpen {
    pub(crate) fn new(counters: Arc<Counters>) -> Self {
        counters
            .connections_accepted
            .fetch_add(1, Ordering::Relaxed);
        ConnectionOpen(counters)
    }
}

impl Drop for ConnectionOpen {
    fn drop(&mut self) {
        self.0.connections_closed.fetch_add(1, Ordering::Relaxed);
    }
}

/// What the guard counted, as of [`Guard::stats`](crate::Guard::stats).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct GuardStats {
    /// Client connections open now.
    pub clients: u64,
    /// Client connections accepted since start.
    pub connections_accepted: u64,
    /// Calls (streams) open now, health checks excluded.
    pub open_calls: u64,
    /// Calls started since start, health checks excluded.
    pub calls_started: u64,
    /// Response bytes (gRPC frames) sent towards clients.
    pub bytes_to_clients: u64,
    /// Calls refused for a missing or wrong client token.
    pub refused: u64,
    /// Calls the drain ended with UNAVAILABLE.
    pub cut_by_drain: u64,
    /// Calls ended, by method and status code name (`CANCELLED` for a
    /// client that went away): only the pairs seen.
    pub ended: Vec<(&'static str, &'static str, u64)>,
    /// Reattaches of the executions that have ended, by cause:
    /// `graceful_end` (the server ended a stream before the result),
    /// `stall` (a silent stream given up), `fault` (any other).
    pub reattaches: Vec<(&'static str, u64)>,
    /// ExecutePlans sent again after the server lost one before any
    /// response, of the executions that have ended.
    pub re_executes: u64,
    /// Executions that have ended after reattaching at least once.
    pub resumed_streams: u64,
}

impl GuardStats {
    /// Calls ended with status `code` (a name such as `"UNAVAILABLE"`),
    /// any method.
    pub fn ended_with(&self, code: &str) -> u64 {
        self.ended
            .iter()
            .filter(|(_, c, _)| *c == code)
            .map(|(_, _, n)| n)
            .sum()
    }
}
