//! The embedded Spark Connect server: sessions, reattachable executions with
//! a retry buffer, releases, graceful stream ends and the fault script.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_stream::StreamExt as _;
use tokio_stream::wrappers::{ReceiverStream, TcpListenerStream};
use tonic::metadata::MetadataMap;
use tonic::{Request, Response, Status, Streaming};

use super::conn::{Connections, KillSwitch, KillableTcp};
use super::error::SparkError;
use super::faults::{Action, Fault, FaultScript, Rpc, lock};
use super::plan::{Work, parse_plan};
use crate::proto::spark_connect_service_server::{SparkConnectService, SparkConnectServiceServer};
use crate::proto::{self, execute_plan_response as epr};

/// The Spark version `AnalyzePlan.spark_version` reports by default.
pub const DEFAULT_SPARK_VERSION: &str = "4.3.0";

/// Default of [`TestServerBuilder::retry_buffer_bytes`]: 10 MiB, the real
/// server's `observerRetryBufferSize`.
pub const DEFAULT_RETRY_BUFFER_BYTES: usize = 10 * 1024 * 1024;

/// Default of [`TestServerBuilder::rows_per_batch`].
pub const DEFAULT_ROWS_PER_BATCH: u64 = 8192;

/// Default of [`TestServerBuilder::max_stream_duration`]: 2 minutes, the
/// real server's `senderMaxStreamDuration`.
pub const DEFAULT_MAX_STREAM_DURATION: Duration = Duration::from_secs(120);

/// How many produced-but-unsent responses an execution may run ahead of its
/// consumer. The real server produces without bound; this cap only keeps a
/// huge `range` from filling memory when nobody reads it.
const PRODUCER_WINDOW: u64 = 256;

/// The gRPC message-size limit of the real server (128 MiB).
const MAX_MESSAGE_BYTES: usize = 128 * 1024 * 1024;

#[derive(Debug, Clone)]
struct Settings {
    retry_buffer_bytes: usize,
    max_responses_per_stream: Option<u64>,
    max_bytes_per_stream: Option<u64>,
    max_stream_duration: Option<Duration>,
    rows_per_batch: u64,
    batch_delay: Duration,
    execution_progress: bool,
    required_token: Option<String>,
    spark_version: String,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            retry_buffer_bytes: DEFAULT_RETRY_BUFFER_BYTES,
            max_responses_per_stream: None,
            max_bytes_per_stream: None,
            max_stream_duration: Some(DEFAULT_MAX_STREAM_DURATION),
            rows_per_batch: DEFAULT_ROWS_PER_BATCH,
            batch_delay: Duration::ZERO,
            execution_progress: false,
            required_token: None,
            spark_version: DEFAULT_SPARK_VERSION.to_owned(),
        }
    }
}

/// Configures and starts a [`TestServer`]. Get one from
/// [`TestServer::builder`].
#[derive(Debug, Clone, Default)]
pub struct TestServerBuilder {
    settings: Settings,
}

impl TestServerBuilder {
    /// Bytes of already-sent responses kept for reattach, behind the current
    /// one (default [`DEFAULT_RETRY_BUFFER_BYTES`]). 0 keeps none, so a
    /// reattach from anything but the last response id fails with
    /// `INVALID_CURSOR.POSITION_NOT_AVAILABLE`.
    pub fn retry_buffer_bytes(mut self, bytes: usize) -> Self {
        self.settings.retry_buffer_bytes = bytes;
        self
    }

    /// End each reattachable stream gracefully (status OK, no
    /// `ResultComplete`) after this many responses. Default: unlimited.
    pub fn max_responses_per_stream(mut self, n: u64) -> Self {
        self.settings.max_responses_per_stream = Some(n.max(1));
        self
    }

    /// End each reattachable stream gracefully once more than this many
    /// bytes were sent on it (the response crossing the limit is still sent,
    /// like Spark's `senderMaxStreamSize`). Default: unlimited.
    pub fn max_bytes_per_stream(mut self, bytes: u64) -> Self {
        self.settings.max_bytes_per_stream = Some(bytes);
        self
    }

    /// End each reattachable stream gracefully after this long (`None`:
    /// never). Default [`DEFAULT_MAX_STREAM_DURATION`].
    pub fn max_stream_duration(mut self, duration: Option<Duration>) -> Self {
        self.settings.max_stream_duration = duration;
        self
    }

    /// Rows per `ArrowBatch` response (default [`DEFAULT_ROWS_PER_BATCH`];
    /// 0 is treated as 1).
    pub fn rows_per_batch(mut self, rows: u64) -> Self {
        self.settings.rows_per_batch = rows.max(1);
        self
    }

    /// Pause the execution this long after producing each batch, to keep it
    /// running while a test interrupts or releases it. Default: none.
    pub fn batch_delay(mut self, delay: Duration) -> Self {
        self.settings.batch_delay = delay;
        self
    }

    /// Send an `ExecutionProgress` response before every `ArrowBatch`, as
    /// the real server does every `spark.connect.progress.reportInterval`.
    /// Clients must skip them. Default: off.
    pub fn execution_progress(mut self, on: bool) -> Self {
        self.settings.execution_progress = on;
        self
    }

    /// Require `authorization: Bearer <token>` on every RPC
    /// (`UNAUTHENTICATED` otherwise), like `spark.connect.authenticate.token`.
    pub fn required_token(mut self, token: impl Into<String>) -> Self {
        self.settings.required_token = Some(token.into());
        self
    }

    /// The version `AnalyzePlan.spark_version` reports (default
    /// [`DEFAULT_SPARK_VERSION`]).
    pub fn spark_version(mut self, version: impl Into<String>) -> Self {
        self.settings.spark_version = version.into();
        self
    }

    /// Binds `127.0.0.1:0` and starts serving on the current tokio runtime.
    pub async fn start(self) -> io::Result<TestServer> {
        TestServer::start_with(self.settings).await
    }
}

/// How many times each RPC was called (including calls that failed or were
/// hit by a fault). See [`TestServer::calls`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CallCounts {
    /// `ExecutePlan` calls.
    pub execute: u64,
    /// `ReattachExecute` calls.
    pub reattach: u64,
    /// `ReleaseExecute` calls with `release_until`.
    pub release_until: u64,
    /// `ReleaseExecute` calls with `release_all`.
    pub release_all: u64,
    /// `Config` calls.
    pub config: u64,
    /// `AnalyzePlan` calls.
    pub analyze: u64,
    /// `Interrupt` calls.
    pub interrupt: u64,
    /// `ReleaseSession` calls.
    pub release_session: u64,
    /// `FetchErrorDetails` calls.
    pub fetch_error_details: u64,
    /// Calls of RPCs this server does not implement.
    pub other: u64,
}

/// Retry-buffer occupancy of one execution. See [`TestServer::buffer_stats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct BufferStats {
    /// Responses buffered now: sent ones kept for reattach, plus produced
    /// ones not sent yet (the producer runs up to 256 responses ahead).
    pub buffered: usize,
    /// Of those, responses already sent: neither released by the client
    /// (`release_until`) nor evicted by the retry-buffer limit yet.
    pub sent_buffered: usize,
    /// Encoded bytes of all buffered responses.
    pub buffered_bytes: u64,
    /// Most `sent_buffered` seen so far, checked after every send.
    pub max_sent_buffered: usize,
    /// Most `buffered` seen so far.
    pub max_buffered: usize,
}

/// The request metadata (headers) of one call, in arrival order.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RecordedCall {
    /// Which RPC was called.
    pub rpc: Rpc,
    /// Its request metadata (e.g. `authorization`, `user-agent`, custom keys).
    pub metadata: MetadataMap,
}

#[derive(Debug, Default)]
struct Counters {
    execute: AtomicU64,
    reattach: AtomicU64,
    release_until: AtomicU64,
    release_all: AtomicU64,
    config: AtomicU64,
    analyze: AtomicU64,
    interrupt: AtomicU64,
    release_session: AtomicU64,
    fetch_error_details: AtomicU64,
    other: AtomicU64,
}

#[derive(Debug, Default)]
struct Log {
    calls: Vec<RecordedCall>,
    execute: Vec<proto::ExecutePlanRequest>,
    reattach: Vec<proto::ReattachExecuteRequest>,
    release: Vec<proto::ReleaseExecuteRequest>,
}

#[derive(Debug, Default)]
struct Session {
    conf: BTreeMap<String, String>,
    ops: HashMap<String, Arc<Operation>>,
}

#[derive(Debug, Default)]
struct State {
    sessions: HashMap<String, Session>,
    closed: HashSet<String>,
    /// errorId → (session id, error), served once by FetchErrorDetails.
    errors: HashMap<String, (String, SparkError)>,
}

#[derive(Debug)]
struct Shared {
    settings: Settings,
    server_side_session_id: Mutex<String>,
    state: Mutex<State>,
    faults: FaultScript,
    counters: Counters,
    log: Mutex<Log>,
    connections: Connections,
    stopping: watch::Sender<bool>,
}

// ---------------------------------------------------------------------------
// Executions
// ---------------------------------------------------------------------------

#[derive(Debug, Default)]
struct OpState {
    /// index (1-based) → (response, encoded size).
    buffer: BTreeMap<u64, (proto::ExecutePlanResponse, u64)>,
    /// Every response id ever produced → index (never pruned, like Spark).
    index_of: HashMap<String, u64>,
    /// `ids[i - 1]` is the response id of index `i`.
    ids: Vec<String>,
    produced: u64,
    highest_consumed: u64,
    /// Set once: `Ok` after the last response, or the execution's error.
    outcome: Option<Result<(), Status>>,
    /// Bumped by every attach; a sender whose generation is stale was
    /// preempted.
    attach_gen: u64,
    /// Released (ReleaseAll / session closed): attached senders disconnect.
    closed: bool,
    /// High-water mark of sent-but-still-buffered responses, for
    /// [`TestServer::buffer_stats`]: what a client's releases keep bounded.
    max_sent_buffered: usize,
    /// High-water mark of all buffered responses (sent or produced ahead).
    max_buffered: usize,
}

impl OpState {
    /// Responses already sent (index ≤ `highest_consumed`) and still held.
    fn sent_buffered(&self) -> usize {
        self.buffer.range(..=self.highest_consumed).count()
    }

    fn update_gauges(&mut self) {
        self.max_sent_buffered = self.max_sent_buffered.max(self.sent_buffered());
        self.max_buffered = self.max_buffered.max(self.buffer.len());
    }
}

enum Step {
    Send(Box<proto::ExecutePlanResponse>, u64),
    Wait,
    Finished(Result<(), Status>),
    Disconnected,
    Evicted(String, u64),
}

#[derive(Debug)]
struct Operation {
    id: String,
    session_id: String,
    reattachable: bool,
    tags: Vec<String>,
    plan: Option<proto::Plan>,
    state: Mutex<OpState>,
    /// Pinged on every state change; senders and the producer wait on it.
    changed: watch::Sender<()>,
}

impl Operation {
    fn notify(&self) {
        self.changed.send_replace(());
    }

    fn attach(&self) -> u64 {
        let gen_ = {
            let mut st = lock(&self.state);
            st.attach_gen += 1;
            st.attach_gen
        };
        // Wakes older senders so they see they were preempted.
        self.notify();
        gen_
    }

    /// Appends a produced response. `false` once the execution has ended
    /// (cancelled or released), which stops the producer.
    fn push(&self, mut resp: proto::ExecutePlanResponse) -> bool {
        {
            let mut st = lock(&self.state);
            if st.outcome.is_some() || st.closed {
                return false;
            }
            Self::append(&mut st, &self.session_id, &self.id, &mut resp);
        }
        self.notify();
        true
    }

    fn append(
        st: &mut OpState,
        session_id: &str,
        op_id: &str,
        resp: &mut proto::ExecutePlanResponse,
    ) {
        st.produced += 1;
        let index = st.produced;
        let id = uuid::Uuid::new_v4().to_string();
        resp.response_id = id.clone();
        resp.session_id = session_id.to_owned();
        resp.operation_id = op_id.to_owned();
        st.index_of.insert(id.clone(), index);
        st.ids.push(id);
        let size = prost::Message::encoded_len(resp) as u64;
        st.buffer.insert(index, (resp.clone(), size));
        st.max_buffered = st.max_buffered.max(st.buffer.len());
    }

    /// Successful end: a reattachable execution appends `ResultComplete` in
    /// the same step, as Spark does.
    fn complete(&self) {
        {
            let mut st = lock(&self.state);
            if st.outcome.is_some() || st.closed {
                return;
            }
            if self.reattachable {
                let mut done = proto::ExecutePlanResponse {
                    response_type: Some(epr::ResponseType::ResultComplete(epr::ResultComplete {})),
                    ..Default::default()
                };
                Self::append(&mut st, &self.session_id, &self.id, &mut done);
            }
            st.outcome = Some(Ok(()));
        }
        self.notify();
    }

    /// Ends the execution with an error unless it already ended. Returns
    /// whether it was still running.
    fn fail(&self, status: Status) -> bool {
        let was_running = {
            let mut st = lock(&self.state);
            if st.outcome.is_some() {
                false
            } else {
                st.outcome = Some(Err(status));
                true
            }
        };
        self.notify();
        was_running
    }

    fn is_running(&self) -> bool {
        lock(&self.state).outcome.is_none()
    }

    /// ReleaseAll: drop the buffer and disconnect attached senders.
    fn close(&self) {
        {
            let mut st = lock(&self.state);
            st.closed = true;
            st.buffer.clear();
        }
        self.notify();
    }

    fn index_of(&self, response_id: &str) -> Option<u64> {
        lock(&self.state).index_of.get(response_id).copied()
    }

    /// ReleaseUntil: evict up to and including `response_id`.
    fn release_until(&self, response_id: &str) -> Result<(), SparkError> {
        let mut st = lock(&self.state);
        let index = *st
            .index_of
            .get(response_id)
            .ok_or_else(|| SparkError::position_not_found(response_id))?;
        st.buffer = st.buffer.split_off(&(index + 1));
        Ok(())
    }

    /// Takes response `index` for the sender of generation `gen_`, then
    /// evicts like Spark's observer: the current response plus a tail of at
    /// least `retry_buffer` bytes of earlier ones stay.
    fn consume(&self, index: u64, gen_: u64, retry_buffer: u64) -> Step {
        let step;
        let advanced;
        {
            let mut st = lock(&self.state);
            let before = st.highest_consumed;
            step = Self::consume_locked(&mut st, index, gen_, retry_buffer);
            advanced = st.highest_consumed > before;
        }
        if advanced {
            // A producer may be waiting for the consumer (back-pressure).
            self.notify();
        }
        step
    }

    fn consume_locked(st: &mut OpState, index: u64, gen_: u64, retry_buffer: u64) -> Step {
        if st.closed || st.attach_gen != gen_ {
            return Step::Disconnected;
        }
        if let Some((resp, size)) = st.buffer.get(&index).cloned() {
            st.highest_consumed = st.highest_consumed.max(index);
            let mut kept = 0u64;
            let mut i = index - 1;
            while i >= 1 && kept < retry_buffer {
                match st.buffer.get(&i) {
                    Some((_, s)) => kept += s,
                    None => break,
                }
                i -= 1;
            }
            if i >= 1 {
                st.buffer = st.buffer.split_off(&(i + 1));
            }
            st.update_gauges();
            return Step::Send(Box::new(resp), size);
        }
        if index <= st.produced {
            let id = st.ids.get(index as usize - 1).cloned().unwrap_or_default();
            return Step::Evicted(id, index);
        }
        match &st.outcome {
            Some(outcome) => Step::Finished(outcome.clone()),
            None => Step::Wait,
        }
    }

    /// Waits for a state change (the producer's back-pressure).
    fn must_wait_for_consumer(&self) -> Option<bool> {
        let st = lock(&self.state);
        if st.outcome.is_some() || st.closed {
            return None;
        }
        Some(st.produced - st.highest_consumed >= PRODUCER_WINDOW)
    }
}

type ExecStream = ReceiverStream<Result<proto::ExecutePlanResponse, Status>>;

impl Shared {
    fn ssid(&self) -> String {
        lock(&self.server_side_session_id).clone()
    }

    /// A Spark-encoded status; when the session exists the error gets an
    /// `errorId` that FetchErrorDetails serves once.
    fn spark_status(&self, err: &SparkError, session_id: Option<&str>) -> Status {
        let id = session_id.and_then(|sid| {
            let mut st = lock(&self.state);
            st.sessions.contains_key(sid).then(|| {
                let id = uuid::Uuid::new_v4().to_string();
                st.errors.insert(id.clone(), (sid.to_owned(), err.clone()));
                id
            })
        });
        err.to_status(id.as_deref())
    }

    fn check_observed(&self, session_id: &str, observed: Option<&str>) -> Result<(), Status> {
        match observed {
            Some(o) if o != self.ssid() => {
                Err(self.spark_status(&SparkError::session_changed(session_id), None))
            }
            _ => Ok(()),
        }
    }

    fn get_or_create_session(
        &self,
        session_id: &str,
        observed: Option<&str>,
    ) -> Result<(), Status> {
        if uuid::Uuid::parse_str(session_id).is_err() {
            return Err(SparkError::invalid_handle_format(session_id).to_status(None));
        }
        {
            let mut st = lock(&self.state);
            if st.closed.contains(session_id) {
                return Err(SparkError::session_closed(session_id).to_status(None));
            }
            st.sessions.entry(session_id.to_owned()).or_default();
        }
        self.check_observed(session_id, observed)
    }

    fn lookup_session(&self, session_id: &str, observed: Option<&str>) -> Result<(), Status> {
        {
            let st = lock(&self.state);
            if st.closed.contains(session_id) {
                return Err(SparkError::session_closed(session_id).to_status(None));
            }
            if !st.sessions.contains_key(session_id) {
                return Err(SparkError::session_not_found(session_id).to_status(None));
            }
        }
        self.check_observed(session_id, observed)
    }

    fn find_op(&self, session_id: &str, op_id: &str) -> Option<Arc<Operation>> {
        lock(&self.state)
            .sessions
            .get(session_id)
            .and_then(|s| s.ops.get(op_id).cloned())
    }

    fn remove_op(&self, op: &Operation) {
        let mut st = lock(&self.state);
        if let Some(s) = st.sessions.get_mut(&op.session_id)
            && s.ops
                .get(&op.id)
                .is_some_and(|o| std::ptr::eq(Arc::as_ptr(o), op))
        {
            s.ops.remove(&op.id);
        }
    }

    fn canceled_status(&self, session_id: &str) -> Status {
        self.spark_status(&SparkError::operation_canceled(), Some(session_id))
    }

    /// Cancels (if still running) and disconnects these executions.
    fn close_ops(&self, ops: Vec<Arc<Operation>>) {
        for op in ops {
            if op.is_running() {
                let status = self.canceled_status(&op.session_id);
                op.fail(status);
            }
            op.close();
        }
    }
}

// ---------------------------------------------------------------------------
// Producer and sender tasks
// ---------------------------------------------------------------------------

async fn produce(shared: Arc<Shared>, op: Arc<Operation>, work: Result<Work, SparkError>) {
    let work = match work {
        Ok(w) => w,
        Err(e) => {
            let status = shared.spark_status(&e, Some(&op.session_id));
            op.fail(status);
            return;
        }
    };
    match work {
        Work::SqlCommand(relation) => {
            let resp = proto::ExecutePlanResponse {
                response_type: Some(epr::ResponseType::SqlCommandResult(epr::SqlCommandResult {
                    relation: Some(relation),
                })),
                ..Default::default()
            };
            if op.push(resp) {
                op.complete();
            }
        }
        Work::Rows(query) => {
            let total = query.row_count();
            let per_batch = shared.settings.rows_per_batch;
            let mut changed = op.changed.subscribe();
            let mut offset = 0u64;
            loop {
                let len = per_batch.min(total - offset);
                let data = match query.ipc_batch(offset, len) {
                    Ok(d) => d,
                    Err(e) => {
                        let status = shared.spark_status(&e, Some(&op.session_id));
                        op.fail(status);
                        return;
                    }
                };
                if shared.settings.execution_progress {
                    let progress = proto::ExecutePlanResponse {
                        response_type: Some(epr::ResponseType::ExecutionProgress(
                            epr::ExecutionProgress {
                                stages: Vec::new(),
                                num_inflight_tasks: 1,
                            },
                        )),
                        ..Default::default()
                    };
                    if !op.push(progress) {
                        return;
                    }
                }
                let resp = proto::ExecutePlanResponse {
                    response_type: Some(epr::ResponseType::ArrowBatch(epr::ArrowBatch {
                        row_count: len as i64,
                        data,
                        start_offset: Some(offset as i64),
                        chunk_index: None,
                        num_chunks_in_batch: None,
                    })),
                    ..Default::default()
                };
                if !op.push(resp) {
                    return;
                }
                offset += len;
                if offset >= total {
                    break;
                }
                if !shared.settings.batch_delay.is_zero() {
                    tokio::time::sleep(shared.settings.batch_delay).await;
                }
                // Back-pressure: wait until the consumer catches up.
                loop {
                    changed.borrow_and_update();
                    match op.must_wait_for_consumer() {
                        None => return,
                        Some(false) => break,
                        Some(true) => {
                            if changed.changed().await.is_err() {
                                return;
                            }
                        }
                    }
                }
            }
            op.complete();
        }
    }
}

/// A fault that fires inside a response stream.
struct StreamFault {
    fault: Fault,
    after: u64,
}

/// Attaches a new sender to `op`, starting after index `start_after`, and
/// returns its response stream. Attaching preempts older senders at once.
fn attach_stream(
    shared: Arc<Shared>,
    op: Arc<Operation>,
    start_after: u64,
    fault: Option<Fault>,
    kill: Option<KillSwitch>,
) -> ExecStream {
    let gen_ = op.attach();
    let (tx, rx) = mpsc::channel(1);
    let fault = fault.map(|f| StreamFault {
        after: u64::from(f.after.unwrap_or(0)),
        fault: f,
    });
    tokio::spawn(async move {
        let last = run_sender(&shared, &op, gen_, start_after, fault, kill, &tx).await;
        if !op.reattachable {
            // A non-reattachable execution lives only as long as its one
            // stream: it is removed (and cancelled if unfinished) before the
            // client can see the end, so tests observe it deterministically.
            if op.is_running() {
                let status = shared.canceled_status(&op.session_id);
                op.fail(status);
            }
            shared.remove_op(&op);
        }
        if let Some(status) = last {
            let _ = tx.send(Err(status)).await;
        }
    });
    ReceiverStream::new(rx)
}

type Tx = mpsc::Sender<Result<proto::ExecutePlanResponse, Status>>;

/// Sends responses of `op` from index `start_after + 1` until the stream
/// ends. Returns the status to end the stream with (`None`: OK, or nothing
/// more can be sent).
async fn run_sender(
    shared: &Shared,
    op: &Operation,
    gen_: u64,
    start_after: u64,
    mut fault: Option<StreamFault>,
    kill: Option<KillSwitch>,
    tx: &Tx,
) -> Option<Status> {
    let settings = &shared.settings;
    let limits = op.reattachable;
    let deadline = settings
        .max_stream_duration
        .filter(|_| limits)
        .map(|d| Instant::now() + d);
    let retry_buffer = if op.reattachable {
        settings.retry_buffer_bytes as u64
    } else {
        0
    };
    let mut changed = op.changed.subscribe();
    let mut stopping = shared.stopping.subscribe();
    let mut next = start_after + 1;
    let mut sent = 0u64;
    let mut bytes = 0u64;
    loop {
        if fault.as_ref().is_some_and(|f| f.after == sent) {
            let StreamFault { fault: f, .. } = fault.take()?;
            match &f.action {
                Action::Fail(_) | Action::BadStatusDetails => {
                    return f.status_for(&op.session_id, &op.id);
                }
                Action::Reset | Action::LoseRequest => {
                    // Let the responses already handed over reach the socket.
                    tokio::time::sleep(f.reset_grace).await;
                    if let Some(k) = &kill {
                        k.kill();
                    }
                    return None;
                }
                Action::Stall(duration) => {
                    let sleep = async {
                        match duration {
                            Some(d) => tokio::time::sleep(*d).await,
                            None => std::future::pending().await,
                        }
                    };
                    tokio::select! {
                        _ = sleep => {}
                        _ = tx.closed() => return None,
                        _ = stopping.changed() => return None,
                        _ = preempted(op, gen_, &mut changed) => {}
                    }
                }
            }
        }
        changed.borrow_and_update();
        match op.consume(next, gen_, retry_buffer) {
            Step::Send(mut resp, size) => {
                resp.server_side_session_id = shared.ssid();
                if tx.send(Ok(*resp)).await.is_err() {
                    return None; // The client went away.
                }
                sent += 1;
                bytes += size;
                next += 1;
                let over_count = settings.max_responses_per_stream.is_some_and(|n| sent >= n);
                let over_bytes = settings.max_bytes_per_stream.is_some_and(|n| bytes > n);
                let over_time = deadline.is_some_and(|d| Instant::now() >= d);
                if limits && (over_count || over_bytes || over_time) {
                    // Graceful end: OK status, no ResultComplete; the client
                    // must reattach.
                    return None;
                }
            }
            Step::Wait => {
                let timeout = async {
                    match deadline {
                        Some(d) => tokio::time::sleep_until(d).await,
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    r = changed.changed() => if r.is_err() { return None },
                    _ = tx.closed() => return None,
                    _ = stopping.changed() => return None,
                    _ = timeout => return None,
                }
            }
            Step::Finished(outcome) => return outcome.err(),
            Step::Disconnected => {
                let err = SparkError::cursor_disconnected();
                return Some(shared.spark_status(&err, Some(&op.session_id)));
            }
            Step::Evicted(id, index) => {
                let err = SparkError::position_not_available(&id, index);
                return Some(shared.spark_status(&err, Some(&op.session_id)));
            }
        }
    }
}

/// Resolves once a newer sender attached or the operation was released.
async fn preempted(op: &Operation, gen_: u64, changed: &mut watch::Receiver<()>) {
    loop {
        changed.borrow_and_update();
        {
            let st = lock(&op.state);
            if st.closed || st.attach_gen != gen_ {
                return;
            }
        }
        if changed.changed().await.is_err() {
            return std::future::pending().await;
        }
    }
}

// ---------------------------------------------------------------------------
// The gRPC service
// ---------------------------------------------------------------------------

#[derive(Debug, Clone)]
struct Service {
    shared: Arc<Shared>,
}

fn kill_switch<T>(req: &Request<T>) -> Option<KillSwitch> {
    req.extensions().get::<KillSwitch>().cloned()
}

impl Service {
    /// Counts and records the call, checks auth, and takes a fault. Faults
    /// that act before the request is processed are applied here.
    async fn begin<T>(
        &self,
        rpc: Rpc,
        counter: &AtomicU64,
        req: &Request<T>,
        session_id: &str,
        op_id: &str,
    ) -> Result<Option<Fault>, Status> {
        let shared = &self.shared;
        counter.fetch_add(1, Ordering::SeqCst);
        lock(&shared.log).calls.push(RecordedCall {
            rpc,
            metadata: req.metadata().clone(),
        });
        if let Some(token) = &shared.settings.required_token {
            match req.metadata().get("authorization").map(|v| v.to_str()) {
                None => return Err(Status::unauthenticated("No authentication token provided")),
                Some(Ok(v)) if v.strip_prefix("Bearer ") == Some(token.as_str()) => {}
                Some(_) => return Err(Status::unauthenticated("Invalid authentication token")),
            }
        }
        let Some(mut fault) = shared.faults.take(rpc) else {
            return Ok(None);
        };
        match (&fault.action, fault.after) {
            (Action::LoseRequest, _) => {
                if let Some(k) = kill_switch(req) {
                    k.kill();
                }
                // Never reaches the client: the connection is already dead.
                Err(Status::unavailable("request lost by fault injection"))
            }
            (Action::Fail(_) | Action::BadStatusDetails, None) => Err(fault
                .status_for(session_id, op_id)
                .unwrap_or_else(|| Status::internal("fault"))),
            (Action::Stall(duration), None) if !rpc.is_stream() => {
                self.stall(*duration).await;
                Ok(None)
            }
            (_, None) if rpc.is_stream() => {
                fault.after = Some(0);
                Ok(Some(fault))
            }
            _ => Ok(Some(fault)),
        }
    }

    async fn stall(&self, duration: Option<Duration>) {
        let mut stopping = self.shared.stopping.subscribe();
        match duration {
            Some(d) => {
                tokio::select! { _ = tokio::time::sleep(d) => {}, _ = stopping.changed() => {} }
            }
            None => {
                let _ = stopping.changed().await;
            }
        }
    }

    /// Applies a fault that acts after a unary request was processed.
    async fn finish<R>(
        &self,
        fault: Option<Fault>,
        kill: Option<KillSwitch>,
        session_id: &str,
        op_id: &str,
        result: Result<R, Status>,
    ) -> Result<Response<R>, Status> {
        let Some(fault) = fault else {
            return result.map(Response::new);
        };
        match &fault.action {
            Action::Fail(_) | Action::BadStatusDetails => Err(fault
                .status_for(session_id, op_id)
                .unwrap_or_else(|| Status::internal("fault"))),
            Action::Reset | Action::LoseRequest => {
                if let Some(k) = kill {
                    k.kill();
                }
                Err(Status::unavailable("connection reset by fault injection"))
            }
            Action::Stall(d) => {
                self.stall(*d).await;
                result.map(Response::new)
            }
        }
    }

    fn reattachable(req: &proto::ExecutePlanRequest) -> bool {
        req.request_options.iter().any(|o| {
            matches!(
                &o.request_option,
                Some(proto::execute_plan_request::request_option::RequestOption::ReattachOptions(r)) if r.reattachable
            )
        })
    }
}

#[tonic::async_trait]
impl SparkConnectService for Service {
    type ExecutePlanStream = ExecStream;
    type ReattachExecuteStream = ExecStream;

    async fn execute_plan(
        &self,
        request: Request<proto::ExecutePlanRequest>,
    ) -> Result<Response<ExecStream>, Status> {
        let shared = &self.shared;
        let kill = kill_switch(&request);
        let session_id = request.get_ref().session_id.clone();
        let op_hint = request.get_ref().operation_id.clone().unwrap_or_default();
        let fault = self
            .begin(
                Rpc::ExecutePlan,
                &shared.counters.execute,
                &request,
                &session_id,
                &op_hint,
            )
            .await?;
        let req = request.into_inner();
        lock(&shared.log).execute.push(req.clone());
        shared.get_or_create_session(
            &session_id,
            req.client_observed_server_side_session_id.as_deref(),
        )?;
        let op_id = match &req.operation_id {
            Some(id) if uuid::Uuid::parse_str(id).is_err() => {
                return Err(SparkError::invalid_handle_format(id).to_status(None));
            }
            Some(id) => id.clone(),
            None => uuid::Uuid::new_v4().to_string(),
        };
        let reattachable = Self::reattachable(&req);
        let work = parse_plan(req.plan.as_ref());
        if req.plan.as_ref().and_then(|p| p.op_type.as_ref()).is_none() {
            // Like Spark's plan validation before the execution starts: the
            // error is returned at once and nothing is registered.
            if let Err(e) = &work {
                return Err(shared.spark_status(e, Some(&session_id)));
            }
        }

        // Spark 4.1+ "idempotent ExecutePlan": the same plan under a live
        // operation id attaches to it from the beginning.
        if let Some(existing) = shared.find_op(&session_id, &op_id) {
            if existing.plan != req.plan {
                let e = SparkError::operation_already_exists(&op_id);
                return Err(shared.spark_status(&e, Some(&session_id)));
            }
            if !existing.reattachable {
                return Err(shared.spark_status(&SparkError::not_reattachable(), Some(&session_id)));
            }
            let stream = attach_stream(shared.clone(), existing, 0, fault, kill);
            return Ok(Response::new(stream));
        }

        let op = Arc::new(Operation {
            id: op_id.clone(),
            session_id: session_id.clone(),
            reattachable,
            tags: req.tags.clone(),
            plan: req.plan.clone(),
            state: Mutex::new(OpState::default()),
            changed: watch::Sender::new(()),
        });
        {
            let mut st = lock(&shared.state);
            match st.sessions.get_mut(&session_id) {
                Some(s) => {
                    s.ops.insert(op_id.clone(), op.clone());
                }
                // Released concurrently.
                None => return Err(SparkError::session_closed(&session_id).to_status(None)),
            }
        }
        tokio::spawn(produce(shared.clone(), op.clone(), work));
        Ok(Response::new(attach_stream(
            shared.clone(),
            op,
            0,
            fault,
            kill,
        )))
    }

    async fn reattach_execute(
        &self,
        request: Request<proto::ReattachExecuteRequest>,
    ) -> Result<Response<ExecStream>, Status> {
        let shared = &self.shared;
        let kill = kill_switch(&request);
        let session_id = request.get_ref().session_id.clone();
        let op_id = request.get_ref().operation_id.clone();
        let fault = self
            .begin(
                Rpc::ReattachExecute,
                &shared.counters.reattach,
                &request,
                &session_id,
                &op_id,
            )
            .await?;
        let req = request.into_inner();
        lock(&shared.log).reattach.push(req.clone());
        shared.lookup_session(
            &session_id,
            req.client_observed_server_side_session_id.as_deref(),
        )?;
        let Some(op) = shared.find_op(&session_id, &op_id) else {
            return Err(
                shared.spark_status(&SparkError::operation_not_found(&op_id), Some(&session_id))
            );
        };
        if !op.reattachable {
            return Err(shared.spark_status(&SparkError::not_reattachable(), Some(&session_id)));
        }
        let start_after = match &req.last_response_id {
            None => 0,
            Some(id) => match op.index_of(id) {
                Some(i) => i,
                None => {
                    let e = SparkError::position_not_found(id);
                    return Err(shared.spark_status(&e, Some(&session_id)));
                }
            },
        };
        Ok(Response::new(attach_stream(
            shared.clone(),
            op,
            start_after,
            fault,
            kill,
        )))
    }

    async fn release_execute(
        &self,
        request: Request<proto::ReleaseExecuteRequest>,
    ) -> Result<Response<proto::ReleaseExecuteResponse>, Status> {
        use proto::release_execute_request::Release;
        let shared = &self.shared;
        let kill = kill_switch(&request);
        let session_id = request.get_ref().session_id.clone();
        let op_id = request.get_ref().operation_id.clone();
        let counter = match request.get_ref().release {
            Some(Release::ReleaseUntil(_)) => &shared.counters.release_until,
            _ => &shared.counters.release_all,
        };
        let fault = self
            .begin(Rpc::ReleaseExecute, counter, &request, &session_id, &op_id)
            .await?;
        let req = request.into_inner();
        lock(&shared.log).release.push(req.clone());
        let result = (|| {
            // Spark looks the session up without checking the observed id.
            shared.lookup_session(&session_id, None)?;
            let mut resp = proto::ReleaseExecuteResponse {
                session_id: session_id.clone(),
                server_side_session_id: shared.ssid(),
                operation_id: None,
            };
            let Some(op) = shared.find_op(&session_id, &op_id) else {
                return Ok(resp); // Already gone: a no-op success.
            };
            if !op.reattachable {
                return Err(shared.spark_status(&SparkError::not_reattachable(), Some(&session_id)));
            }
            match &req.release {
                Some(Release::ReleaseAll(_)) => {
                    shared.remove_op(&op);
                    shared.close_ops(vec![op]);
                }
                Some(Release::ReleaseUntil(u)) => {
                    if let Err(e) = op.release_until(&u.response_id) {
                        return Err(shared.spark_status(&e, Some(&session_id)));
                    }
                }
                None => {
                    let e = SparkError::java(
                        "java.lang.UnsupportedOperationException",
                        "ReleaseExecute needs release_all or release_until",
                    );
                    return Err(shared.spark_status(&e, Some(&session_id)));
                }
            }
            resp.operation_id = Some(op_id.clone());
            Ok(resp)
        })();
        self.finish(fault, kill, &session_id, &op_id, result).await
    }

    async fn analyze_plan(
        &self,
        request: Request<proto::AnalyzePlanRequest>,
    ) -> Result<Response<proto::AnalyzePlanResponse>, Status> {
        use proto::{analyze_plan_request::Analyze, analyze_plan_response as apr};
        let shared = &self.shared;
        let kill = kill_switch(&request);
        let session_id = request.get_ref().session_id.clone();
        let fault = self
            .begin(
                Rpc::AnalyzePlan,
                &shared.counters.analyze,
                &request,
                &session_id,
                "",
            )
            .await?;
        let req = request.into_inner();
        let result = (|| {
            shared.get_or_create_session(
                &session_id,
                req.client_observed_server_side_session_id.as_deref(),
            )?;
            let result = match &req.analyze {
                Some(Analyze::SparkVersion(_)) => apr::Result::SparkVersion(apr::SparkVersion {
                    version: shared.settings.spark_version.clone(),
                }),
                // The DataType message is declared empty in this crate.
                Some(Analyze::Schema(_)) => apr::Result::Schema(apr::Schema {
                    schema: Some(proto::DataType {}),
                }),
                None => {
                    return Err(Status::unimplemented(
                        "this AnalyzePlan request is not implemented by the test server",
                    ));
                }
            };
            Ok(proto::AnalyzePlanResponse {
                session_id: session_id.clone(),
                server_side_session_id: shared.ssid(),
                result: Some(result),
            })
        })();
        self.finish(fault, kill, &session_id, "", result).await
    }

    async fn config(
        &self,
        request: Request<proto::ConfigRequest>,
    ) -> Result<Response<proto::ConfigResponse>, Status> {
        use proto::config_request::operation::OpType;
        let shared = &self.shared;
        let kill = kill_switch(&request);
        let session_id = request.get_ref().session_id.clone();
        let fault = self
            .begin(
                Rpc::Config,
                &shared.counters.config,
                &request,
                &session_id,
                "",
            )
            .await?;
        let req = request.into_inner();
        let result = (|| {
            shared.get_or_create_session(
                &session_id,
                req.client_observed_server_side_session_id.as_deref(),
            )?;
            let kv = |k: &str, v: Option<String>| proto::KeyValue {
                key: k.to_owned(),
                value: v,
            };
            let mut pairs = Vec::new();
            let missing: Option<String> = {
                let mut st = lock(&shared.state);
                let Some(conf) = st.sessions.get_mut(&session_id).map(|s| &mut s.conf) else {
                    return Err(SparkError::session_closed(&session_id).to_status(None));
                };
                let op = req.operation.as_ref().and_then(|o| o.op_type.as_ref());
                let mut missing = None;
                match op {
                    Some(OpType::Set(set)) => {
                        for p in &set.pairs {
                            match &p.value {
                                Some(v) => conf.insert(p.key.clone(), v.clone()),
                                None => conf.remove(&p.key),
                            };
                        }
                    }
                    Some(OpType::Get(get)) => {
                        for k in &get.keys {
                            match conf.get(k) {
                                Some(v) => pairs.push(kv(k, Some(v.clone()))),
                                None => {
                                    missing = Some(k.clone());
                                    break;
                                }
                            }
                        }
                    }
                    Some(OpType::GetWithDefault(g)) => {
                        for p in &g.pairs {
                            pairs.push(kv(&p.key, conf.get(&p.key).cloned().or(p.value.clone())));
                        }
                    }
                    Some(OpType::GetOption(g)) => {
                        for k in &g.keys {
                            pairs.push(kv(k, conf.get(k).cloned()));
                        }
                    }
                    Some(OpType::GetAll(g)) => {
                        let prefix = g.prefix.as_deref().unwrap_or("");
                        for (k, v) in conf.iter().filter(|(k, _)| k.starts_with(prefix)) {
                            pairs.push(kv(k, Some(v.clone())));
                        }
                    }
                    Some(OpType::Unset(u)) => {
                        for k in &u.keys {
                            conf.remove(k);
                        }
                    }
                    Some(OpType::IsModifiable(m)) => {
                        for k in &m.keys {
                            pairs.push(kv(k, Some("true".to_owned())));
                        }
                    }
                    None => {}
                }
                missing
            };
            if let Some(k) = missing {
                return Err(shared.spark_status(&SparkError::conf_not_found(&k), Some(&session_id)));
            }
            Ok(proto::ConfigResponse {
                session_id: session_id.clone(),
                server_side_session_id: shared.ssid(),
                pairs,
                warnings: Vec::new(),
            })
        })();
        self.finish(fault, kill, &session_id, "", result).await
    }

    async fn interrupt(
        &self,
        request: Request<proto::InterruptRequest>,
    ) -> Result<Response<proto::InterruptResponse>, Status> {
        use proto::interrupt_request::{Interrupt, InterruptType};
        let shared = &self.shared;
        let kill = kill_switch(&request);
        let session_id = request.get_ref().session_id.clone();
        let fault = self
            .begin(
                Rpc::Interrupt,
                &shared.counters.interrupt,
                &request,
                &session_id,
                "",
            )
            .await?;
        let req = request.into_inner();
        let result = (|| {
            shared.get_or_create_session(
                &session_id,
                req.client_observed_server_side_session_id.as_deref(),
            )?;
            let ops: Vec<Arc<Operation>> = lock(&shared.state)
                .sessions
                .get(&session_id)
                .map(|s| s.ops.values().cloned().collect())
                .unwrap_or_default();
            let selected: Vec<Arc<Operation>> = match (req.interrupt_type(), &req.interrupt) {
                (InterruptType::All, _) => ops,
                (InterruptType::Tag, Some(Interrupt::OperationTag(t))) => {
                    ops.into_iter().filter(|o| o.tags.contains(t)).collect()
                }
                (InterruptType::OperationId, Some(Interrupt::OperationId(id))) => {
                    ops.into_iter().filter(|o| &o.id == id).collect()
                }
                _ => {
                    let e = SparkError::java(
                        "java.lang.IllegalArgumentException",
                        "Unsupported or incomplete interrupt type",
                    );
                    return Err(shared.spark_status(&e, Some(&session_id)));
                }
            };
            let mut interrupted_ids = Vec::new();
            for op in selected {
                if op.is_running() && op.fail(shared.canceled_status(&session_id)) {
                    interrupted_ids.push(op.id.clone());
                }
            }
            interrupted_ids.sort();
            Ok(proto::InterruptResponse {
                session_id: session_id.clone(),
                server_side_session_id: shared.ssid(),
                interrupted_ids,
            })
        })();
        self.finish(fault, kill, &session_id, "", result).await
    }

    async fn release_session(
        &self,
        request: Request<proto::ReleaseSessionRequest>,
    ) -> Result<Response<proto::ReleaseSessionResponse>, Status> {
        let shared = &self.shared;
        let kill = kill_switch(&request);
        let session_id = request.get_ref().session_id.clone();
        let fault = self
            .begin(
                Rpc::ReleaseSession,
                &shared.counters.release_session,
                &request,
                &session_id,
                "",
            )
            .await?;
        let req = request.into_inner();
        let ops: Vec<Arc<Operation>> = {
            let mut st = lock(&shared.state);
            let ops = st
                .sessions
                .remove(&session_id)
                .map(|s| s.ops.into_values().collect())
                .unwrap_or_default();
            if !req.allow_reconnect {
                st.closed.insert(session_id.clone());
            }
            ops
        };
        for op in ops {
            // The session is gone, so the cancel error carries no errorId.
            op.fail(SparkError::operation_canceled().to_status(None));
            op.close();
        }
        let result = Ok(proto::ReleaseSessionResponse {
            session_id: session_id.clone(),
            server_side_session_id: shared.ssid(),
        });
        self.finish(fault, kill, &session_id, "", result).await
    }

    async fn fetch_error_details(
        &self,
        request: Request<proto::FetchErrorDetailsRequest>,
    ) -> Result<Response<proto::FetchErrorDetailsResponse>, Status> {
        use proto::fetch_error_details_response as fed;
        let shared = &self.shared;
        let kill = kill_switch(&request);
        let session_id = request.get_ref().session_id.clone();
        let fault = self
            .begin(
                Rpc::FetchErrorDetails,
                &shared.counters.fetch_error_details,
                &request,
                &session_id,
                "",
            )
            .await?;
        let req = request.into_inner();
        let result = (|| {
            shared.get_or_create_session(
                &session_id,
                req.client_observed_server_side_session_id.as_deref(),
            )?;
            let mut resp = proto::FetchErrorDetailsResponse {
                server_side_session_id: shared.ssid(),
                session_id: session_id.clone(),
                root_error_idx: None,
                errors: Vec::new(),
            };
            let found = {
                let mut st = lock(&shared.state);
                match st.errors.get(&req.error_id) {
                    Some((sid, _)) if *sid == session_id => st.errors.remove(&req.error_id),
                    _ => None,
                }
            };
            if let Some((_, e)) = found {
                resp.root_error_idx = Some(0);
                resp.errors.push(fed::Error {
                    error_type_hierarchy: e.classes.clone(),
                    message: e.message(),
                    stack_trace: Vec::new(),
                    cause_idx: None,
                    spark_throwable: Some(fed::SparkThrowable {
                        error_class: e.error_class.clone(),
                        message_parameters: e.message_parameters.clone().into_iter().collect(),
                        sql_state: e.sql_state.clone(),
                        condition: e.error_class.clone(),
                    }),
                });
            }
            Ok(resp)
        })();
        self.finish(fault, kill, &session_id, "", result).await
    }

    async fn add_artifacts(
        &self,
        request: Request<Streaming<proto::AddArtifactsRequest>>,
    ) -> Result<Response<proto::AddArtifactsResponse>, Status> {
        self.begin(Rpc::Other, &self.shared.counters.other, &request, "", "")
            .await?;
        Err(Status::unimplemented(
            "AddArtifacts is not implemented by the test server",
        ))
    }

    async fn artifact_status(
        &self,
        request: Request<proto::ArtifactStatusesRequest>,
    ) -> Result<Response<proto::ArtifactStatusesResponse>, Status> {
        self.begin(Rpc::Other, &self.shared.counters.other, &request, "", "")
            .await?;
        Err(Status::unimplemented(
            "ArtifactStatus is not implemented by the test server",
        ))
    }

    async fn clone_session(
        &self,
        request: Request<proto::CloneSessionRequest>,
    ) -> Result<Response<proto::CloneSessionResponse>, Status> {
        self.begin(Rpc::Other, &self.shared.counters.other, &request, "", "")
            .await?;
        Err(Status::unimplemented(
            "CloneSession is not implemented by the test server",
        ))
    }

    async fn get_status(
        &self,
        request: Request<proto::GetStatusRequest>,
    ) -> Result<Response<proto::GetStatusResponse>, Status> {
        self.begin(Rpc::Other, &self.shared.counters.other, &request, "", "")
            .await?;
        Err(Status::unimplemented(
            "GetStatus is not implemented by the test server",
        ))
    }
}

// ---------------------------------------------------------------------------
// The public handle
// ---------------------------------------------------------------------------

/// An embedded Spark Connect server on `127.0.0.1` with an ephemeral port.
///
/// See the [module docs](super) for what it implements. Dropping it stops
/// the server (in the background); [`shutdown`](Self::shutdown) waits.
#[derive(Debug)]
pub struct TestServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    shutdown_tx: Option<oneshot::Sender<()>>,
    serve: Option<JoinHandle<()>>,
}

impl TestServer {
    /// Starts a server with default settings.
    pub async fn start() -> io::Result<TestServer> {
        TestServerBuilder::default().start().await
    }

    /// A builder to change the defaults.
    pub fn builder() -> TestServerBuilder {
        TestServerBuilder::default()
    }

    async fn start_with(settings: Settings) -> io::Result<TestServer> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let (stopping, _) = watch::channel(false);
        let shared = Arc::new(Shared {
            settings,
            server_side_session_id: Mutex::new(uuid::Uuid::new_v4().to_string()),
            state: Mutex::new(State::default()),
            faults: FaultScript::default(),
            counters: Counters::default(),
            log: Mutex::new(Log::default()),
            connections: Connections::default(),
            stopping,
        });
        let svc = SparkConnectServiceServer::new(Service {
            shared: shared.clone(),
        })
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES);
        let conns = shared.clone();
        let incoming = TcpListenerStream::new(listener)
            .map(move |r| r.map(|s| KillableTcp::new(s, &conns.connections)));
        let (shutdown_tx, shutdown_rx) = oneshot::channel::<()>();
        let serve = tokio::spawn(async move {
            let result = tonic::transport::Server::builder()
                .add_service(svc)
                .serve_with_incoming_shutdown(incoming, async {
                    let _ = shutdown_rx.await;
                })
                .await;
            if let Err(e) = result {
                tracing::warn!(error = %e, "spark-connect-retry test server stopped with an error");
            }
        });
        Ok(TestServer {
            addr,
            shared,
            shutdown_tx: Some(shutdown_tx),
            serve: Some(serve),
        })
    }

    /// The bound socket address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`, for `tonic::transport::Endpoint`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// `sc://127.0.0.1:PORT`, a Spark Connect connection string.
    pub fn remote(&self) -> String {
        format!("sc://{}", self.addr)
    }

    /// The fault script: push faults here.
    pub fn faults(&self) -> &FaultScript {
        &self.shared.faults
    }

    /// Per-RPC call counters.
    pub fn calls(&self) -> CallCounts {
        let c = &self.shared.counters;
        let get = |a: &AtomicU64| a.load(Ordering::SeqCst);
        CallCounts {
            execute: get(&c.execute),
            reattach: get(&c.reattach),
            release_until: get(&c.release_until),
            release_all: get(&c.release_all),
            config: get(&c.config),
            analyze: get(&c.analyze),
            interrupt: get(&c.interrupt),
            release_session: get(&c.release_session),
            fetch_error_details: get(&c.fetch_error_details),
            other: get(&c.other),
        }
    }

    /// The operation ids still registered (not released, and for
    /// non-reattachable executions not yet finished), sorted.
    pub fn live_executions(&self) -> Vec<String> {
        let st = lock(&self.shared.state);
        let mut ids: Vec<String> = st
            .sessions
            .values()
            .flat_map(|s| s.ops.keys().cloned())
            .collect();
        ids.sort();
        ids
    }

    /// Retry-buffer occupancy of a registered execution (`None` once it was
    /// released or never existed). Lets benchmarks and tests check that the
    /// client's releases keep the server's buffer bounded.
    pub fn buffer_stats(&self, operation_id: &str) -> Option<BufferStats> {
        let op = {
            let st = lock(&self.shared.state);
            st.sessions
                .values()
                .find_map(|s| s.ops.get(operation_id).cloned())?
        };
        let st = lock(&op.state);
        Some(BufferStats {
            buffered: st.buffer.len(),
            sent_buffered: st.sent_buffered(),
            buffered_bytes: st.buffer.values().map(|(_, size)| size).sum(),
            max_sent_buffered: st.max_sent_buffered,
            max_buffered: st.max_buffered,
        })
    }

    /// The server-side session id set on every response.
    pub fn server_side_session_id(&self) -> String {
        self.shared.ssid()
    }

    /// Replaces the server-side session id and returns the new one. Later
    /// responses carry it, and requests that still carry the old one in
    /// `client_observed_server_side_session_id` fail with
    /// `INVALID_HANDLE.SESSION_CHANGED`. Sessions and executions survive;
    /// see [`simulate_restart`](Self::simulate_restart) for a full restart.
    pub fn rotate_server_side_session_id(&self) -> String {
        let id = uuid::Uuid::new_v4().to_string();
        *lock(&self.shared.server_side_session_id) = id.clone();
        id
    }

    /// Simulates a server restart: every open connection is reset (TCP RST),
    /// the server-side session id changes, and every session and execution
    /// is forgotten. Later reattaches get `INVALID_HANDLE.SESSION_NOT_FOUND`,
    /// and requests carrying the old id in
    /// `client_observed_server_side_session_id` get
    /// `INVALID_HANDLE.SESSION_CHANGED`. Returns the new id.
    pub fn simulate_restart(&self) -> String {
        self.reset_connections();
        let id = self.rotate_server_side_session_id();
        let ops: Vec<Arc<Operation>> = {
            let mut st = lock(&self.shared.state);
            st.errors.clear();
            st.closed.clear();
            st.sessions
                .drain()
                .flat_map(|(_, s)| s.ops.into_values())
                .collect()
        };
        for op in ops {
            op.fail(SparkError::operation_canceled().to_status(None));
            op.close();
        }
        id
    }

    /// Resets (TCP RST) every open client connection now. Returns how many.
    pub fn reset_connections(&self) -> usize {
        self.shared.connections.kill_all()
    }

    /// The metadata of every call so far, in arrival order.
    pub fn recorded_calls(&self) -> Vec<RecordedCall> {
        lock(&self.shared.log).calls.clone()
    }

    /// The metadata of the last call of `rpc` ([`Rpc::Any`]: of any call).
    pub fn last_metadata(&self, rpc: Rpc) -> Option<MetadataMap> {
        lock(&self.shared.log)
            .calls
            .iter()
            .rev()
            .find(|c| rpc == Rpc::Any || c.rpc == rpc)
            .map(|c| c.metadata.clone())
    }

    /// Every ExecutePlan request that passed auth and the fault script.
    pub fn execute_requests(&self) -> Vec<proto::ExecutePlanRequest> {
        lock(&self.shared.log).execute.clone()
    }

    /// The last ExecutePlan request that passed auth and the fault script.
    pub fn last_execute_request(&self) -> Option<proto::ExecutePlanRequest> {
        lock(&self.shared.log).execute.last().cloned()
    }

    /// Every ReattachExecute request that passed auth and the fault script.
    pub fn reattach_requests(&self) -> Vec<proto::ReattachExecuteRequest> {
        lock(&self.shared.log).reattach.clone()
    }

    /// The last ReattachExecute request that passed auth and the fault script.
    pub fn last_reattach_request(&self) -> Option<proto::ReattachExecuteRequest> {
        lock(&self.shared.log).reattach.last().cloned()
    }

    /// Every ReleaseExecute request that passed auth and the fault script.
    pub fn release_requests(&self) -> Vec<proto::ReleaseExecuteRequest> {
        lock(&self.shared.log).release.clone()
    }

    /// The last ReleaseExecute request that passed auth and the fault script.
    pub fn last_release_request(&self) -> Option<proto::ReleaseExecuteRequest> {
        lock(&self.shared.log).release.last().cloned()
    }

    /// The config of a live session (what `Config.set` stored).
    pub fn session_config(&self, session_id: &str) -> Option<BTreeMap<String, String>> {
        lock(&self.shared.state)
            .sessions
            .get(session_id)
            .map(|s| s.conf.clone())
    }

    fn signal_stop(&mut self) {
        self.shared.stopping.send_replace(true);
        if let Some(tx) = self.shutdown_tx.take() {
            let _ = tx.send(());
        }
    }

    /// Stops the server: ends every open stream (stalled ones too), stops
    /// accepting, and waits up to 2 s for open connections to drain before
    /// dropping the accept loop.
    pub async fn shutdown(mut self) {
        self.signal_stop();
        if let Some(serve) = self.serve.take() {
            let abort = serve.abort_handle();
            if tokio::time::timeout(Duration::from_secs(2), serve)
                .await
                .is_err()
            {
                abort.abort();
            }
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.signal_stop();
    }
}
