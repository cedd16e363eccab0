//! The fault script: failures the [`TestServer`](super::TestServer) injects
//! into the next matching RPCs.
//!
//! A [`Fault`] matches one [`Rpc`] kind (or [`Rpc::Any`]), fires on the next
//! matching call and is consumed (after [`Fault::times`] firings). Faults fire
//! in the order they were pushed: a call takes the first fault that matches
//! its kind.
//!
//! | constructor | effect |
//! |---|---|
//! | [`Fault::status`], [`Fault::unavailable`] | the RPC fails at once with that status (the request is not processed) |
//! | [`Fault::spark`], [`Fault::session_not_found`], [`Fault::operation_not_found`] | same, with Spark's error encoding |
//! | [`Fault::reset_connection`] | the server processes the request, then cuts the TCP connection with a real RST |
//! | [`Fault::lose_request`] | the connection is cut with an RST before the request is processed (an ExecutePlan is never registered) |
//! | [`Fault::stall`], [`Fault::stall_forever`] | the server stops sending for a while (or forever) without closing |
//! | [`Fault::restart`] | the server restarts: connections reset, every session and execution lost |
//! | [`Fault::bad_status_details`] | `grpc-status: 14` with a `grpc-status-details-bin` that is not base64 |
//! | [`Fault::corrupt_chunk`] | (AddArtifacts) one byte of an artifact chunk changes in flight, so the server sees a CRC mismatch |
//! | [`Fault::replay`] | (ReattachExecute) the stream first re-sends the response the client last acknowledged, same `response_id`, then goes on: a hostile server |
//!
//! [`Fault::after_responses`] moves a fault into a response stream
//! (ExecutePlan / ReattachExecute): it fires after that many responses were
//! handed to the transport, so a status arrives in the trailers, a stall
//! pauses the stream, a reset cuts it. A stream whose whole result is
//! shorter (a client's command before its query) leaves the fault, once, at
//! the front of the script for the next matching call. On unary RPCs `after_responses` (any
//! value) means "after the request was processed": the effect replaces the
//! response.
//!
//! [`FaultScript::fired`] lists every firing, in order, with the RPC, what
//! the fault did and when (tokio's clock, so paused and simulated time
//! too): a test can tell a fault that fired from one still waiting, and
//! when the failure it injected began.
//!
//! `AddArtifacts` is a client stream; the server stages what it reads and
//! stores it only once the client has ended the stream, as Spark does:
//!
//! | fault on [`Rpc::AddArtifacts`] | effect |
//! |---|---|
//! | [`Fault::after_requests`]`(k)` with a reset, status or stall | fires once the server has read `k` request messages (0: before the first), before it reads more; a reset or status discards everything staged, nothing is stored; a stall pauses the reading. If the stream ends before `k` messages, it fires at the end, still before anything is stored |
//! | a reset without `after_requests` | the whole stream is read and its artifacts **stored**, then the connection is cut before the response: the client cannot know |
//! | a status without `after_requests`, [`Fault::lose_request`] | the call fails (or the connection is cut) before any message is read |
//! | [`Fault::corrupt_chunk`] (`after_requests(k)`: the message after the first `k`; default the first) | the first chunk of that message arrives with one byte changed: its artifact's summary says `is_crc_successful: false` and it is not stored |

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tonic::metadata::MetadataMap;
use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt};

use crate::error::SparkException;

/// The value sent in `grpc-status-details-bin` by
/// [`Fault::bad_status_details`]: `!` is not in the base64 alphabet.
pub const BAD_STATUS_DETAILS: &str = "!!!not-base64!!!";

/// An RPC of the Spark Connect service, as a fault target and in call records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
// Fault scripts name RPCs as the protocol spells them (`rpc = "ExecutePlan"`).
#[cfg_attr(feature = "cli", derive(serde::Deserialize))]
#[non_exhaustive]
pub enum Rpc {
    /// Matches every RPC (only meaningful as a fault target).
    Any,
    /// `ExecutePlan`.
    ExecutePlan,
    /// `ReattachExecute`.
    ReattachExecute,
    /// `ReleaseExecute` (both `release_all` and `release_until`).
    ReleaseExecute,
    /// `Config`.
    Config,
    /// `AnalyzePlan`.
    AnalyzePlan,
    /// `Interrupt`.
    Interrupt,
    /// `ReleaseSession`.
    ReleaseSession,
    /// `FetchErrorDetails`.
    FetchErrorDetails,
    /// `AddArtifacts` (a client stream: see [`Fault::after_requests`]).
    AddArtifacts,
    /// `ArtifactStatus`.
    ArtifactStatus,
    /// The RPCs this server does not implement (CloneSession, GetStatus).
    Other,
}

impl Rpc {
    fn matches(self, call: Rpc) -> bool {
        self == Rpc::Any || self == call
    }

    pub(crate) fn is_stream(self) -> bool {
        matches!(self, Rpc::ExecutePlan | Rpc::ReattachExecute)
    }
}

/// What a fault does when it fires.
#[derive(Debug, Clone)]
pub(crate) enum Action {
    Fail(FailWith),
    Reset,
    LoseRequest,
    Stall(Option<Duration>),
    BadStatusDetails,
    Corrupt,
    Restart,
    Replay,
}

/// The status of a failing fault.
#[derive(Debug, Clone)]
pub(crate) enum FailWith {
    Status(Code, String),
    Spark(SparkException),
    SessionNotFound,
    OperationNotFound,
}

/// One scripted failure. Build with a constructor, refine with the builder
/// methods, then [`FaultScript::push`] it.
///
/// ```
/// use std::time::Duration;
/// use spark_connect_testkit::{Fault, Rpc};
///
/// // The next two ExecutePlan/ReattachExecute/... calls fail with UNAVAILABLE
/// // and a RetryInfo of 10 ms.
/// let f = Fault::unavailable().retry_info(Duration::from_millis(10)).times(2);
/// // The next ReattachExecute stream is cut (TCP RST) after 3 responses.
/// let g = Fault::reset_connection().on(Rpc::ReattachExecute).after_responses(3);
/// # let _ = (f, g);
/// ```
#[derive(Debug, Clone)]
pub struct Fault {
    pub(crate) rpc: Rpc,
    pub(crate) times: u32,
    pub(crate) after: Option<u32>,
    pub(crate) action: Action,
    pub(crate) retry_info: Option<Duration>,
    pub(crate) reset_grace: Duration,
}

impl Fault {
    fn new(action: Action) -> Self {
        Fault {
            rpc: Rpc::Any,
            times: 1,
            after: None,
            action,
            retry_info: None,
            reset_grace: Duration::from_millis(20),
        }
    }

    /// Fail with `code` and `message` (no details unless
    /// [`retry_info`](Self::retry_info)). Matches [`Rpc::Any`].
    pub fn status(code: Code, message: impl Into<String>) -> Self {
        Self::new(Action::Fail(FailWith::Status(code, message.into())))
    }

    /// Fail with `UNAVAILABLE` "injected fault: unavailable".
    pub fn unavailable() -> Self {
        Self::status(Code::Unavailable, "injected fault: unavailable")
    }

    /// Fail with a Spark-encoded error (gRPC `INTERNAL` with `ErrorInfo`).
    pub fn spark(error: SparkException) -> Self {
        Self::new(Action::Fail(FailWith::Spark(error)))
    }

    /// Fail with `INVALID_HANDLE.SESSION_NOT_FOUND` for the request's session.
    pub fn session_not_found() -> Self {
        Self::new(Action::Fail(FailWith::SessionNotFound))
    }

    /// Fail with `INVALID_HANDLE.OPERATION_NOT_FOUND` for the request's
    /// operation id.
    pub fn operation_not_found() -> Self {
        Self::new(Action::Fail(FailWith::OperationNotFound))
    }

    /// Cut the TCP connection with a real reset (`SO_LINGER 0`, then close)
    /// after the request was processed. On a stream it cuts before the first
    /// response unless [`after_responses`](Self::after_responses) says
    /// otherwise. Responses handed to the transport just before the cut may
    /// or may not reach the client; the server waits a short grace period
    /// (20 ms) so they usually do.
    pub fn reset_connection() -> Self {
        Self::new(Action::Reset)
    }

    /// Cut the TCP connection with a reset before the request is processed:
    /// an ExecutePlan is never registered, so a later ReattachExecute gets
    /// `INVALID_HANDLE.OPERATION_NOT_FOUND`, as when a proxy loses the request.
    pub fn lose_request() -> Self {
        Self::new(Action::LoseRequest)
    }

    /// Stop sending for `duration` without closing anything, then go on.
    pub fn stall(duration: Duration) -> Self {
        Self::new(Action::Stall(Some(duration)))
    }

    /// Stop sending forever (until the client gives up, a newer attach
    /// preempts the stream, or the server shuts down).
    pub fn stall_forever() -> Self {
        Self::new(Action::Stall(None))
    }

    /// End the call with `grpc-status: 14` and a `grpc-status-details-bin`
    /// of [`BAD_STATUS_DETAILS`], which is not base64. tonic 0.14 clients
    /// panic when decoding it (grpc-rust#2618); use it to test a guard.
    pub fn bad_status_details() -> Self {
        Self::new(Action::BadStatusDetails)
    }

    /// Change one byte of an artifact chunk in flight (the first chunk of the
    /// first `AddArtifacts` message, or of the message after
    /// [`after_requests`](Self::after_requests)`(k)`): the server sees a CRC
    /// mismatch, answers `is_crc_successful: false` for that artifact and
    /// does not store it. A chunk with no data gets a wrong CRC instead.
    /// Matches [`Rpc::AddArtifacts`].
    pub fn corrupt_chunk() -> Self {
        Self::new(Action::Corrupt).on(Rpc::AddArtifacts)
    }

    /// Restart the server, as [`TestServer::simulate_restart`] does: every
    /// open connection is reset, the server-side session id changes, and
    /// every session and execution is lost. On a stream it fires before the
    /// first response unless [`after_responses`](Self::after_responses) says
    /// otherwise; on a unary RPC it replaces the response (the call fails
    /// with `UNAVAILABLE` on a connection that was just reset).
    ///
    /// [`TestServer::simulate_restart`]: crate::TestServer::simulate_restart
    pub fn restart() -> Self {
        Self::new(Action::Restart)
    }

    /// A hostile server that replays: the stream re-sends the response
    /// before its current position, with its `response_id` unchanged, then
    /// goes on as if nothing happened. On a ReattachExecute (after 0
    /// responses, the default) that is the response the client named in
    /// `last_response_id`, the one it last acknowledged; after
    /// [`after_responses`](Self::after_responses)`(k)` it is the `k`-th
    /// response of the stream. A client must not deliver it twice (Spark
    /// Connect clients fail the stream on a repeated response id).
    ///
    /// The response is re-sent even if a `release_until` already freed it:
    /// once a replay fault was pushed, the server keeps the latest response
    /// each release or eviction dropped, for this. With nothing before the
    /// position (a reattach without `last_response_id`, an ExecutePlan
    /// after 0 responses) it sends nothing more. Matches
    /// [`Rpc::ReattachExecute`]; it has no effect on unary RPCs.
    ///
    /// ```
    /// use spark_connect_testkit::{Fault, Rpc};
    ///
    /// let f = Fault::replay();
    /// assert_eq!(f.rpc(), Rpc::ReattachExecute);
    /// assert_eq!(f.to_string(), "replay of the last response sent");
    /// ```
    pub fn replay() -> Self {
        Self::new(Action::Replay).on(Rpc::ReattachExecute)
    }

    /// Only match calls of this RPC kind (default: [`Rpc::Any`]).
    pub fn on(mut self, rpc: Rpc) -> Self {
        self.rpc = rpc;
        self
    }

    /// Fire `n` times before being consumed (default 1; 0 is treated as 1).
    pub fn times(mut self, n: u32) -> Self {
        self.times = n.max(1);
        self
    }

    /// Fire after `k` responses of a stream (see the module docs).
    pub fn after_responses(mut self, k: u32) -> Self {
        self.after = Some(k);
        self
    }

    /// Fire once the server has read `k` request messages of a client stream
    /// (`AddArtifacts`; see the module docs). The same setting as
    /// [`after_responses`](Self::after_responses), counted on the other side.
    ///
    /// ```
    /// use spark_connect_retry::proto::{
    ///     self, add_artifacts_request as aar,
    ///     spark_connect_service_client::SparkConnectServiceClient,
    /// };
    /// use spark_connect_testkit::{Fault, Rpc, TestServer};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let server = TestServer::start().await?;
    /// let session = "00112233-4455-6677-8899-aabbccddeeff";
    /// // One artifact in two chunks, as PySpark sends artifacts over 32 KiB.
    /// let chunk = |data: &[u8]| aar::ArtifactChunk {
    ///     data: data.to_vec(),
    ///     crc: i64::from(crc32fast::hash(data)),
    /// };
    /// let request = |payload| proto::AddArtifactsRequest {
    ///     session_id: session.into(),
    ///     payload: Some(payload),
    ///     ..Default::default()
    /// };
    /// let upload = vec![
    ///     request(aar::Payload::BeginChunk(aar::BeginChunkedArtifact {
    ///         name: "cache/abc".into(),
    ///         total_bytes: 6,
    ///         num_chunks: 2,
    ///         initial_chunk: Some(chunk(b"abc")),
    ///     })),
    ///     request(aar::Payload::Chunk(chunk(b"def"))),
    /// ];
    /// // Cut the connection once the first message was read.
    /// server.faults().push(Fault::reset_connection().on(Rpc::AddArtifacts).after_requests(1));
    /// let mut client = SparkConnectServiceClient::connect(server.endpoint()).await?;
    /// assert!(client.add_artifacts(tokio_stream::iter(upload.clone())).await.is_err());
    /// assert!(server.artifacts(session).is_empty(), "a cut upload stores nothing");
    /// assert_eq!(server.upload_calls()[0].bytes, 3);
    ///
    /// let mut client = SparkConnectServiceClient::connect(server.endpoint()).await?;
    /// let done = client.add_artifacts(tokio_stream::iter(upload)).await?.into_inner();
    /// assert!(done.artifacts[0].is_crc_successful);
    /// assert_eq!(server.artifact(session, "cache/abc").as_deref(), Some(&b"abcdef"[..]));
    /// assert_eq!(server.artifact_writes(session, "cache/abc"), 1);
    /// server.shutdown().await;
    /// # Ok(())
    /// # }
    /// ```
    pub fn after_requests(self, k: u32) -> Self {
        self.after_responses(k)
    }

    /// Add a `google.rpc.RetryInfo` with this delay to the failing status.
    pub fn retry_info(mut self, delay: Duration) -> Self {
        self.retry_info = Some(delay);
        self
    }

    /// The kind of RPC this fault matches.
    pub fn rpc(&self) -> Rpc {
        self.rpc
    }

    /// Logs that a stream of `rpc` completed after `sent` responses, before
    /// this fault's trigger, and the fault went back to the script.
    pub(crate) fn log_put_back(&self, rpc: Rpc, sent: u64) {
        tracing::info!(rpc = ?rpc, fault = %self.describe(), "fault kept for the next stream: this one completed after {sent} responses");
    }

    /// Logs that this fault was taken by a call of `rpc` that failed before
    /// the fault could fire (it is spent).
    pub(crate) fn log_spent(&self, rpc: Rpc) {
        tracing::info!(rpc = ?rpc, fault = %self.describe(), "fault spent unfired: the call failed before its stream started");
    }

    /// A short description of what the fault does (its `Display`).
    fn describe(&self) -> String {
        let what = match &self.action {
            Action::Fail(FailWith::Status(code, _)) => format!("status {code:?}"),
            Action::Fail(FailWith::Spark(e)) => {
                format!(
                    "spark error {}",
                    e.error_class.as_deref().unwrap_or("(no class)")
                )
            }
            Action::Fail(FailWith::SessionNotFound) => "INVALID_HANDLE.SESSION_NOT_FOUND".into(),
            Action::Fail(FailWith::OperationNotFound) => {
                "INVALID_HANDLE.OPERATION_NOT_FOUND".into()
            }
            Action::Reset => "connection reset".into(),
            Action::LoseRequest => "lost request".into(),
            Action::Stall(Some(d)) => format!("stall {d:?}"),
            Action::Stall(None) => "stall forever".into(),
            Action::BadStatusDetails => "bad grpc-status-details-bin".into(),
            Action::Corrupt => "corrupt chunk".into(),
            Action::Restart => "server restart".into(),
            Action::Replay => "replay of the last response sent".into(),
        };
        match self.retry_info {
            Some(d) => format!("{what} with RetryInfo {d:?}"),
            None => what,
        }
    }

    /// Builds the status this fault fails with (`None` for non-failing faults).
    pub(crate) fn status_for(&self, session_id: &str, operation_id: &str) -> Option<Status> {
        match &self.action {
            Action::Fail(with) => Some(self.fail_status(with, session_id, operation_id)),
            Action::BadStatusDetails => Some(bad_details_status()),
            _ => None,
        }
    }

    fn fail_status(&self, with: &FailWith, session_id: &str, operation_id: &str) -> Status {
        let spark = match with {
            FailWith::Status(code, msg) => {
                return match self.retry_info {
                    Some(d) => Status::with_error_details(
                        *code,
                        msg.clone(),
                        ErrorDetails::with_retry_info(Some(d)),
                    ),
                    None => Status::new(*code, msg.clone()),
                };
            }
            FailWith::Spark(e) => e.clone(),
            FailWith::SessionNotFound => SparkException::session_not_found(session_id),
            FailWith::OperationNotFound => SparkException::operation_not_found(operation_id),
        };
        spark.to_status_with(Code::Internal, None, self.retry_info)
    }
}

impl fmt::Display for Fault {
    /// What the fault does, as the event log and [`FiredFault::what`] say
    /// it: `status Unavailable`, `stall 1.5s`, `connection reset`, ... (the
    /// RPC and the trigger are not part of it).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.describe())
    }
}

/// One firing of a fault, as [`FaultScript::fired`] lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FiredFault {
    /// The RPC of the call it fired on.
    pub rpc: Rpc,
    /// What the fault did (its `Display`).
    pub what: String,
    /// When it fired (tokio's clock: paused or simulated time when the
    /// server runs on such a runtime).
    pub at: tokio::time::Instant,
}

/// A status whose details header is not base64. tonic copies metadata that
/// is not reserved (`grpc-status-details-bin` is not) verbatim into the
/// headers/trailers, and only base64-encodes `Status::details`, which is
/// left empty here.
fn bad_details_status() -> Status {
    let mut headers = http::HeaderMap::new();
    headers.insert(
        "grpc-status-details-bin",
        http::HeaderValue::from_static(BAD_STATUS_DETAILS),
    );
    Status::with_metadata(
        Code::Unavailable,
        "injected fault: bad grpc-status-details-bin",
        MetadataMap::from_headers(headers),
    )
}

/// The queue of pending faults of a server, and the log of those that
/// fired. Cheap to clone (shared).
#[derive(Debug, Clone, Default)]
pub struct FaultScript {
    inner: Arc<Mutex<Vec<Fault>>>,
    fired: Arc<Mutex<Vec<FiredFault>>>,
    /// A [`Fault::replay`] was pushed once: released responses are kept
    /// for it (one per execution).
    replays: Arc<AtomicBool>,
}

impl FaultScript {
    /// Appends a fault.
    pub fn push(&self, fault: Fault) -> &Self {
        if matches!(fault.action, Action::Replay) {
            self.replays.store(true, Ordering::Relaxed);
        }
        lock(&self.inner).push(fault);
        self
    }

    /// Every firing so far, in order. A fault of [`Fault::times`]`(n)`
    /// fires up to `n` times, each listed; a fault spent without firing (its
    /// call failed first) is not.
    pub fn fired(&self) -> Vec<FiredFault> {
        lock(&self.fired).clone()
    }

    /// Logs (at `info`, target `spark_connect_testkit::faults`) and records
    /// that `fault` fired on a call of `rpc`, and when.
    pub(crate) fn fire(&self, fault: &Fault, rpc: Rpc, when: &str) {
        tracing::info!(rpc = ?rpc, fault = %fault, "fault fired {when}");
        lock(&self.fired).push(FiredFault {
            rpc,
            what: fault.describe(),
            at: tokio::time::Instant::now(),
        });
    }

    /// Whether a [`Fault::replay`] was ever pushed: an execution then keeps
    /// the latest response it dropped, so that the fault can re-send it.
    pub(crate) fn keeps_replayable(&self) -> bool {
        self.replays.load(Ordering::Relaxed)
    }

    /// Removes every pending fault.
    pub fn clear(&self) {
        lock(&self.inner).clear();
    }

    /// The number of faults still pending.
    pub fn pending(&self) -> usize {
        lock(&self.inner).len()
    }

    /// Returns one firing of a fault to the front of the script, to act on
    /// the next matching call.
    pub(crate) fn put_back(&self, mut fault: Fault) {
        fault.times = 1;
        lock(&self.inner).insert(0, fault);
    }

    /// Takes one firing of the first fault matching `rpc`.
    pub(crate) fn take(&self, rpc: Rpc) -> Option<Fault> {
        let mut faults = lock(&self.inner);
        let pos = faults.iter().position(|f| f.rpc.matches(rpc))?;
        let fault = &mut faults[pos];
        fault.times -= 1;
        if fault.times == 0 {
            Some(faults.remove(pos))
        } else {
            Some(fault.clone())
        }
    }
}

/// Locks, ignoring poisoning: a panicking test thread must not cascade into
/// every later call.
pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
