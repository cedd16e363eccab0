//! A fault schedule drawn from a seed: the world's shape (direct or through
//! the guard, result size, batch size, graceful stream ends, chunking) and
//! a list of faults, each timed (network, host) or turn-based (the server's
//! fault script). Printable, and shrinkable by dropping faults.
//!
//! *Why a seed draws from one RNG:* the same seed must give the same
//! schedule on every machine, and a schedule must be printable and
//! shrinkable as plain data. Faults added later are drawn after the older
//! ones, so that a seed's older faults stay what they were.

use std::fmt;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::unary::UnaryPlan;

/// Where the client's calls go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Topology {
    /// Client → server.
    Direct,
    /// Client → guard → server; the guard is a host of its own.
    Guard,
}

/// The client under test.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientKind {
    /// The generated stub over the `ReattachLayer` (one query).
    Stub,
    /// A `SparkSession` built from `sc://` with a connector on simulated
    /// TCP, running one SQL query per entry at once (the rows of each), then
    /// closed.
    Session {
        /// Rows of each query; all run at the same time on one session.
        queries: Vec<i64>,
    },
}

/// One link of the simulated network.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Link {
    /// The client's link to the host it calls (the server, or the guard).
    ClientSide,
    /// The guard's link to the server (only with [`Topology::Guard`]).
    GuardServer,
}

/// Which stream RPC a fault of the server's script matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamRpc {
    /// `ExecutePlan`.
    Execute,
    /// `ReattachExecute`.
    Reattach,
}

/// What one fault does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// Turn-based, from the server's fault script: the connection is
    /// dropped after `after` responses of the next matching stream (in the
    /// simulation a drop, not an RST set up with `SO_LINGER 0`).
    Reset {
        /// The RPC it fires on.
        rpc: StreamRpc,
        /// Responses before it fires.
        after: u32,
    },
    /// `UNAVAILABLE` after `after` responses.
    Unavailable {
        /// The RPC it fires on.
        rpc: StreamRpc,
        /// Responses before it fires.
        after: u32,
    },
    /// `INVALID_CURSOR.DISCONNECTED` after `after` responses.
    Disconnected {
        /// The RPC it fires on.
        rpc: StreamRpc,
        /// Responses before it fires.
        after: u32,
    },
    /// `RESOURCE_EXHAUSTED` with a `RetryInfo` of `ms`, at once.
    RetryInfo {
        /// The RPC it fires on.
        rpc: StreamRpc,
        /// The delay the server asks for.
        ms: u64,
    },
    /// The stream stops sending for `ms` after `after` responses.
    Stall {
        /// The RPC it fires on.
        rpc: StreamRpc,
        /// Responses before it fires.
        after: u32,
        /// How long (the client's stall detection may give up first).
        ms: u64,
    },
    /// `INVALID_HANDLE.OPERATION_NOT_FOUND` on the first `ExecutePlan`.
    OperationNotFound,
    /// `INVALID_HANDLE.SESSION_NOT_FOUND` on the first `ExecutePlan`.
    SessionNotFound,
    /// The first `ExecutePlan` is lost: its connection is dropped before the
    /// server registers it.
    LoseRequest,
    /// The server restarts in place after `after` responses (the test kit's
    /// restart: connections dropped, sessions and executions lost).
    Restart {
        /// The RPC it fires on.
        rpc: StreamRpc,
        /// Responses before it fires.
        after: u32,
    },
    /// Turn-based, repeating: `UNAVAILABLE` after every `every` responses
    /// of a stream, `times` times in all (the first on an `ExecutePlan`,
    /// the others on the `ReattachExecute`s that follow): more failures than
    /// the retry policy's budget, each after progress. A client that
    /// restores its budget on progress is exact; one that keeps one budget
    /// for the whole execution waits longer after each, then gives up.
    Repeat {
        /// Responses of each stream before it fires (at least 1: progress
        /// between failures).
        every: u32,
        /// Failures in all.
        times: u32,
    },
    /// Turn-based, hostile: the next `ReattachExecute` first re-sends the
    /// response the client last acknowledged, same `response_id`
    /// (the test kit's `Fault::replay`). A client must not deliver it
    /// twice: the query is exact, or ends with the typed integrity error.
    Replay,
    /// The server's bearer tokens expire: each is good for `every` result
    /// responses (the test kit's token rotation), and a stream opened with
    /// a replaced token fails `UNAUTHENTICATED` before its next response,
    /// wherever the client is. Sessions only: the session's token provider
    /// is an identity service that issues a new token on each call, which
    /// replaces the one before.
    TokenExpiry {
        /// Result responses each token is good for.
        every: u64,
    },
    /// Timed: a black hole on `link` from `at` for `dur`, then everything
    /// held is delivered.
    Hold {
        /// When it starts (simulated time).
        at: Duration,
        /// How long it lasts.
        dur: Duration,
        /// Where.
        link: Link,
    },
    /// Timed: a partition of `link` (both ways, or only towards the server
    /// side when `oneway`) from `at` for `dur`; what is sent meanwhile is
    /// lost.
    Partition {
        /// When it starts.
        at: Duration,
        /// How long it lasts.
        dur: Duration,
        /// Where.
        link: Link,
        /// Only the direction from the caller to the callee.
        oneway: bool,
    },
    /// Timed: `link`'s latency becomes `ms` from `at` on.
    Latency {
        /// When it starts.
        at: Duration,
        /// Where.
        link: Link,
        /// The new latency.
        ms: u64,
    },
    /// Timed: the server host crashes at `at` (its process and state gone)
    /// and starts again after `down`.
    Crash {
        /// When it crashes.
        at: Duration,
        /// How long it stays down.
        down: Duration,
    },
}

impl Fault {
    /// When a timed fault starts (`None` for the server's script).
    pub fn at(&self) -> Option<Duration> {
        match self {
            Fault::Hold { at, .. }
            | Fault::Partition { at, .. }
            | Fault::Latency { at, .. }
            | Fault::Crash { at, .. } => Some(*at),
            _ => None,
        }
    }

    /// Whether this fault may legitimately end the query with an error
    /// (the server lost the execution after responses were delivered).
    pub fn may_lose_state(&self) -> bool {
        matches!(
            self,
            Fault::Crash { .. }
                | Fault::Restart { .. }
                | Fault::SessionNotFound
                | Fault::OperationNotFound
                | Fault::LoseRequest
        )
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fault::Reset { rpc, after } => write!(f, "reset {rpc:?} after {after}"),
            Fault::Unavailable { rpc, after } => write!(f, "unavailable {rpc:?} after {after}"),
            Fault::Disconnected { rpc, after } => {
                write!(f, "INVALID_CURSOR.DISCONNECTED {rpc:?} after {after}")
            }
            Fault::RetryInfo { rpc, ms } => write!(f, "RetryInfo {ms}ms on {rpc:?}"),
            Fault::Stall { rpc, after, ms } => write!(f, "stall {ms}ms {rpc:?} after {after}"),
            Fault::OperationNotFound => write!(f, "OPERATION_NOT_FOUND on ExecutePlan"),
            Fault::SessionNotFound => write!(f, "SESSION_NOT_FOUND on ExecutePlan"),
            Fault::LoseRequest => write!(f, "lost ExecutePlan"),
            Fault::Restart { rpc, after } => write!(f, "server restart {rpc:?} after {after}"),
            Fault::Repeat { every, times } => {
                write!(
                    f,
                    "unavailable after every {every} responses, {times} times"
                )
            }
            Fault::TokenExpiry { every } => {
                write!(f, "tokens expire every {every} responses")
            }
            Fault::Replay => write!(f, "replay of the acknowledged response on ReattachExecute"),
            Fault::Hold { at, dur, link } => {
                write!(f, "at {at:?}: hold {link:?} for {dur:?}")
            }
            Fault::Partition {
                at,
                dur,
                link,
                oneway,
            } => write!(
                f,
                "at {at:?}: partition {link:?}{} for {dur:?}",
                if *oneway { " one way" } else { "" }
            ),
            Fault::Latency { at, link, ms } => write!(f, "at {at:?}: latency {link:?} {ms}ms"),
            Fault::Crash { at, down } => write!(f, "at {at:?}: crash the server for {down:?}"),
        }
    }
}

/// One simulated run: its world and its faults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    /// The seed it was drawn from (also seeds turmoil and the client's
    /// jitter).
    pub seed: u64,
    /// Direct, or through the guard.
    pub topology: Topology,
    /// Rows of the `range` query.
    pub rows: i64,
    /// Rows per Arrow batch.
    pub rows_per_batch: u64,
    /// The server ends each stream gracefully after this many responses.
    pub max_responses_per_stream: Option<u64>,
    /// The client allows chunked Arrow batches of this preferred size.
    pub chunk_bytes: Option<i64>,
    /// The faults, in the order drawn.
    pub faults: Vec<Fault>,
    /// The client (drawn from a stream of its own, so that the world and
    /// the faults of a seed are the same for either client).
    pub client: ClientKind,
    /// A second client's unary calls, if any (drawn from a stream of its
    /// own as well; none where tokens expire, as it has no provider).
    pub unary: Option<UnaryPlan>,
}

const RPCS: [StreamRpc; 2] = [StreamRpc::Execute, StreamRpc::Reattach];

/// The share of seeds with a [`Fault::Repeat`].
const REPEAT_SHARE: f64 = 0.12;
/// The share of seeds with a [`Fault::Replay`].
const REPLAY_SHARE: f64 = 0.15;
/// The share of the sessions' seeds with a [`Fault::TokenExpiry`].
const TOKEN_SHARE: f64 = 0.35;

impl Schedule {
    /// Draws a schedule from `seed` (`StdRng::seed_from_u64`).
    pub fn from_seed(seed: u64) -> Schedule {
        let mut rng = StdRng::seed_from_u64(seed);
        let topology = if rng.random_bool(0.35) {
            Topology::Guard
        } else {
            Topology::Direct
        };
        let rows = match rng.random_range(0..4) {
            0 => rng.random_range(1..20),
            1 => rng.random_range(20..400),
            _ => rng.random_range(400..3000),
        };
        let rows_per_batch = rng.random_range(10..300);
        let max_responses_per_stream = rng.random_bool(0.4).then(|| rng.random_range(1..8));
        let chunk_bytes = rng.random_bool(0.25).then_some(1024);
        let mut s = Schedule {
            seed,
            topology,
            rows,
            rows_per_batch,
            max_responses_per_stream,
            chunk_bytes,
            faults: vec![],
            client: ClientKind::Stub,
            unary: UnaryPlan::draw(seed),
        };
        for i in 0..rng.random_range(0..6) {
            s.faults.push(Self::draw_fault(&mut rng, i == 0, topology));
        }
        if rng.random_bool(REPEAT_SHARE) {
            s.draw_repeat(&mut rng);
        }
        if rng.random_bool(REPLAY_SHARE) {
            s.faults.push(Fault::Replay);
        }
        let token = rng
            .random_bool(TOKEN_SHARE)
            .then(|| rng.random_range(20..80));
        s.client = Self::draw_client(seed, s.rows);
        if let (Some(every), ClientKind::Session { .. }) = (token, &s.client) {
            s.faults.push(Fault::TokenExpiry { every });
            // The ops client has no token provider.
            s.unary = None;
        }
        s
    }

    /// Whether tokens expire by responses sent that the client may not
    /// see for a while: a hold or a partition keeps them from it, a
    /// stalled stream the client gave up on sends them once the stall
    /// ends, and the guard reads ahead of its client (its HTTP/2 windows
    /// hold up to 32 MiB). The server can then use up a fresh token's life on
    /// responses the client has not seen, and the session's second
    /// refusal without progress ends the query with its token error, as
    /// documented.
    pub(crate) fn tokens_used_unseen(&self) -> bool {
        self.token_expiry().is_some()
            && (self.topology == Topology::Guard
                || self.faults.iter().any(|f| {
                    matches!(
                        f,
                        Fault::Hold { .. } | Fault::Partition { .. } | Fault::Stall { .. }
                    )
                }))
    }

    /// The tokens' life in responses, when they expire.
    pub(crate) fn token_expiry(&self) -> Option<u64> {
        self.faults.iter().find_map(|f| match f {
            Fault::TokenExpiry { every } => Some(*every),
            _ => None,
        })
    }

    /// Adds a [`Fault::Repeat`] of 16 to 24 failures (more than the retry
    /// policy's 15), one every 1 to 3 responses, on a result long enough
    /// for all of them (2,000 to 3,000 rows in batches of 10 to 25: at least
    /// 80 responses) and with graceful stream ends, if any, after more
    /// responses than `every` (a stream that ends first spends a firing).
    fn draw_repeat(&mut self, rng: &mut StdRng) {
        let every = rng.random_range(1..=3);
        let times = rng.random_range(16..=24);
        self.rows = rng.random_range(2000..3000);
        self.rows_per_batch = rng.random_range(10..=25);
        if let Some(m) = self.max_responses_per_stream.as_mut()
            && *m <= u64::from(every)
        {
            *m = u64::from(every) + rng.random_range(1..4);
        }
        self.faults.push(Fault::Repeat { every, times });
    }

    /// The client: the stub for about half of the seeds, else a session
    /// running one to three queries at once (the first of `rows` rows).
    fn draw_client(seed: u64, rows: i64) -> ClientKind {
        let mut rng = StdRng::seed_from_u64(seed ^ 0xc1_1e47);
        if rng.random_bool(0.5) {
            return ClientKind::Stub;
        }
        let mut queries = vec![rows];
        for _ in 1..rng.random_range(1..4) {
            queries.push(rng.random_range(1..2000));
        }
        ClientKind::Session { queries }
    }

    fn draw_fault(rng: &mut StdRng, first: bool, topology: Topology) -> Fault {
        let rpc = RPCS[usize::from(!first && rng.random_bool(0.6))];
        let after = rng.random_range(0..6);
        let at = Duration::from_millis(rng.random_range(0..3000));
        let link = if topology == Topology::Guard && rng.random_bool(0.5) {
            Link::GuardServer
        } else {
            Link::ClientSide
        };
        match rng.random_range(0..15) {
            0 => Fault::Reset { rpc, after },
            1 => Fault::Unavailable { rpc, after },
            2 => Fault::Disconnected { rpc, after },
            3 => Fault::RetryInfo {
                rpc,
                ms: rng.random_range(0..3000),
            },
            4 => Fault::Stall {
                rpc,
                after,
                ms: rng.random_range(100..15_000),
            },
            5 if first => Fault::OperationNotFound,
            6 if first => Fault::SessionNotFound,
            7 if first => Fault::LoseRequest,
            8 => Fault::Restart { rpc, after },
            9 | 10 => Fault::Hold {
                at,
                dur: Duration::from_millis(rng.random_range(10..20_000)),
                link,
            },
            11 | 12 => Fault::Partition {
                at,
                dur: Duration::from_millis(rng.random_range(10..20_000)),
                link,
                oneway: rng.random_bool(0.5),
            },
            13 => Fault::Latency {
                at,
                link,
                ms: rng.random_range(1..300),
            },
            14 => Fault::Crash {
                at,
                down: Duration::from_millis(rng.random_range(10..10_000)),
            },
            _ => Fault::Unavailable { rpc, after: 0 },
        }
    }

    /// The same schedule without fault `i`.
    pub fn without(&self, i: usize) -> Schedule {
        let mut s = self.clone();
        s.faults.remove(i);
        s
    }

    /// Whether a fault may legitimately end the query with an error.
    pub fn may_lose_state(&self) -> bool {
        self.faults.iter().any(Fault::may_lose_state)
    }
}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "seed {}: {:?}, {} rows in batches of {}, stream ends after {:?} responses, chunks {:?}",
            self.seed,
            self.topology,
            self.rows,
            self.rows_per_batch,
            self.max_responses_per_stream,
            self.chunk_bytes
        )?;
        if let ClientKind::Session { queries } = &self.client {
            writeln!(f, "  client: a session running {queries:?} rows at once")?;
        }
        if let Some(u) = &self.unary {
            writeln!(
                f,
                "  ops: {} unary calls under RetryLayer, the first {} AnalyzePlan UNAVAILABLE",
                u.calls, u.unavailable
            )?;
        }
        if self.faults.is_empty() {
            writeln!(f, "  (no faults)")?;
        }
        for (i, fault) in self.faults.iter().enumerate() {
            writeln!(f, "  {i}: {fault}")?;
        }
        Ok(())
    }
}
