//! Reattachable executions: an `ExecutePlan` result stream that survives
//! transient faults (PySpark 4.3.0 semantics).
//!
//! A query's results arrive on one long server stream, and long streams break:
//! load balancers cut connections, servers end stream segments on purpose
//! (`senderMaxStreamDuration`, `senderMaxStreamSize`), a newer attach preempts
//! a cursor, a connection resets. Retrying the whole `ExecutePlan` would run
//! the query again from the start and deliver rows the caller already has.
//! Spark Connect lets a client instead *reattach* to the running execution and
//! resume after the last response it received, while the server keeps recent
//! responses in a buffer the client frees with `ReleaseExecute` as it goes.
//!
//! [`ReattachableExecution`] is the client side of that protocol, with
//! PySpark's rules:
//!
//! * **Operation id**: generated (UUIDv4) or validated; the reattach option is
//!   appended; the same request is re-sent byte-identical on re-execute.
//! * **Resume point**: `last_response_id` is the last response *yielded* to the
//!   consumer; the `ResultComplete` response is yielded too.
//! * **Clean end without ResultComplete**: ReattachExecute at once (no sleep,
//!   no budget): the server ends stream segments on purpose.
//! * **Retry budget**: fresh for every delivered response. Policy-retryable
//!   errors (see [`crate::policy`]) back off, then reattach.
//! * **OPERATION_NOT_FOUND / SESSION_NOT_FOUND**: before any yielded response
//!   the ExecutePlan never reached the server, so it is re-sent at once; after
//!   one, [`ReattachError::ResponseAlreadyReceived`]. Each server's wording of
//!   "not found" is one row of the `not_found` table (Spark's classes;
//!   Sail's `INTERNAL` message only before any answer).
//! * **ExecutePlan that provably never left**: while every ExecutePlan failed
//!   `Unprocessed` (e.g. connection refused) and nothing was answered, the
//!   retry after the backoff re-sends the ExecutePlan instead of reattaching
//!   (`not_found`): no server wording is needed for the commonest case.
//! * **Deadlines and stalls**: DEADLINE_EXCEEDED, tonic's client timeout
//!   (`Cancelled` with a `TimeoutExpired` source), the client-enforced
//!   segment deadline ([`RpcDeadlines`](crate::deadlines::RpcDeadlines)) and
//!   the idle timeout (stall detection, below) all reattach at once, bounded
//!   by the immediate-retry elapsed-time bound.
//! * **Session**: the server-side session id must not change within the
//!   stream; `client_observed_server_side_session_id` is sent on reattach.
//! * **Releases**: `release_until` after progress (coalesced, newest id wins),
//!   `release_all` on completion, terminal error and drop; background, best effort.
//!
//! Two rules on top of PySpark's keep a misbehaving server from making the
//! client spin or lose rows: **progress-aware reopening** (`progress`: the
//! immediate reopens above are immediate only for segments that delivered
//! something, lived at least their owed backoff, or are the first short
//! empty one of a run; later ones wait the policy's backoff, and the run
//! ends in [`ReattachError::NoProgress`]), and **stream integrity**
//! (`integrity`: replayed response ids, resuming without a position, torn
//! or miscounted batches are errors; nothing is delivered after an error).
//!
//!
//! # Stall detection (on by default)
//!
//! *Why:* a connection can go silent without an error: a stuck middlebox
//! stops carrying bytes both ways and sends no FIN or RST. Without a
//! client-side bound the stream waits for HTTP/2 keepalive (60 s + 20 s by
//! default), for the server to end the segment (`senderMaxStreamDuration`,
//! 2 min, if its bytes can still arrive), or, with keepalive off, forever.
//!
//! *What:* when a segment brings no message for
//! [`ReattachOptions::idle_timeout`] (default 10 s),
//! or a segment being opened gets no response headers for that long, the
//! execution reattaches at once from the last response it yielded, and sends
//! that ReattachExecute over a **fresh connection**
//! ([`crate::reconnect::FreshConnection`]; honoured by the channel a
//! `session::SparkSession` builds, ignored by other channels).
//!
//! *The default:* Spark 4 servers send an `ExecutionProgress` response every
//! `spark.connect.progress.reportInterval` (default 2 s, a session SQL conf;
//! negative disables) while a Spark job of the query runs: the response
//! sender wakes at that interval and, if the query has a running job, sends
//! the progress even when nothing changed (`ExecuteGrpcResponseSender`,
//! `enqueueProgressMessage(force = true)`). A healthy stream of a running
//! query is therefore never silent for much over 2 s; 10 s is five intervals,
//! enough margin for GC pauses and a loaded machine, and leaves time within a
//! 30 s recovery target for the fresh connection and the reattach. Measured
//! on Spark 4.3.0: a black hole mid-stream recovered in about 11 s (README).
//!
//! *Silent queries are safe.* A query can be silent for longer (progress
//! disabled, or driver-side work with no Spark job). A stall then only costs
//! a reattach, which never re-executes: the server keeps computing, and the
//! new segment resumes from the same position. A stall reattach that the
//! server answers (response headers or a message) does not count toward the
//! immediate-retry bound (1 h by default, [`Retrying::with_retry_now_bound`](crate::retrying::Retrying::with_retry_now_bound));
//! only unanswered ones add up. Spark 4.3's server sends a reattached
//! stream's headers together with its first message, so a query silent
//! *without* progress reports for over an hour in a row fails with the stall
//! as cause; turn stall detection off for such queries.
//!
//! *Turning it off:* `idle_timeout: None` in [`ReattachOptions`], or
//! `SparkSessionBuilder::idle_timeout(None)`. Zero is rejected
//! ([`ReattachError::ZeroIdleTimeout`]); a huge value is effectively off.
//!
//! The decision logic is `core::ReattachCore`, a pure state machine
//! unit-tested beside its code; its drivers only perform its actions:
//! [`ReattachableExecution`] for the session's typed client, and
//! [`layer::ReattachLayer`](crate::layer::ReattachLayer) on raw bytes under any generated stub.

pub(crate) mod core;
pub(crate) mod driver;
mod error;
pub(crate) mod ids;
pub(crate) mod integrity;
pub(crate) mod not_found;
mod options;
pub(crate) mod progress;
pub(crate) mod release;
pub(crate) mod stats;
mod stream;
pub(crate) mod transport;

pub use error::ReattachError;
pub use integrity::IntegrityError;
pub(crate) use options::DEFAULT_IDLE_TIMEOUT;
pub use options::ReattachOptions;
pub use progress::EmptySegment;
pub use release::ReleaseTracker;
pub use stats::{StreamStats, StreamStatsHandle};
pub use stream::ReattachableExecution;
