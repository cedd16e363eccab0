//! [`ArrowStream`]: the rows of one execution as Arrow record batches.
//!
//! A result must arrive whole or fail loudly: every batch exactly once, in
//! order (checked by `start_offset`), large batches reassembled from their
//! chunks, and every error enriched the same way whether the stream is read
//! with [`next_batch`](ArrowStream::next_batch) or as a `Stream`: both run
//! one poll loop. The stream can also be cancelled (interrupt, then
//! release), and knows its schema before its first batch.
//!
//! It lives with the session because it holds one: it starts the
//! execution, sends it again on a renewed session and resumes a lost query
//! through it. The rules for the bytes (decoding, the digest, the
//! resumption check) have no session in them and are in
//! [`results`](crate::results).

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio_stream::Stream;

use super::error::SparkError;
use super::generation::Generation;
#[cfg(feature = "arrow")]
use super::lost::execution_lost;
use super::spark::SparkSession;
use crate::proto::{self, ExecutePlanResponse, Plan};
use crate::reattach::{ReattachableExecution, StreamStats, StreamStatsHandle};
#[cfg(feature = "arrow")]
use crate::results::decode::{Absorbed, ArrowState};
#[cfg(feature = "arrow")]
use crate::results::resume::{Resume, budget, not_resumable};

/// A callback for ExecutionProgress messages.
type ProgressFn = Box<dyn FnMut(&proto::execute_plan_response::ExecutionProgress) + Send>;

/// A server error being enriched (FetchErrorDetails) before it is returned.
type Enriching = Pin<Box<dyn Future<Output = SparkError> + Send>>;

/// The session being readied (renewed if stale, builder configs applied)
/// and the execution started on it; whether its plan went compressed.
type Preparing = Pin<
    Box<
        dyn Future<Output = Result<(Arc<Generation>, ReattachableExecution, bool), SparkError>>
            + Send,
    >,
>;

/// Rows of a query as Arrow record batches, in order, each exactly once.
///
/// A `Stream` of `RecordBatch`es (with the `arrow` feature), or read with
/// [`next_batch`](Self::next_batch); the two share one loop and give the
/// same errors. The ArrowBatch `start_offset` of each batch is checked
/// against the rows seen so far, so a dropped or replayed batch is an
/// error, never silent.
///
/// Dropping an unfinished stream releases the execution on the server
/// (ReleaseExecute); with
/// [`interrupt_on_drop`](crate::session::SparkSessionBuilder::interrupt_on_drop) it
/// is interrupted first. [`cancel`](Self::cancel) does both and waits for
/// the interrupt.
pub struct ArrowStream {
    session: SparkSession,
    /// Sent again once if the server refuses the first ExecutePlan because
    /// the session is stale (before any response), or to resume a lost
    /// query ([`set_resume`](Self::set_resume)).
    plan: Option<Plan>,
    tags: Vec<String>,
    preparing: Option<Preparing>,
    /// The session generation the execution runs on, once started.
    generation: Option<Arc<Generation>>,
    /// Sent again on a renewed session already (at most once).
    resent: bool,
    /// The plan went compressed (SPARK-54194): a server that cannot read it
    /// gets it again, plain.
    compressed: bool,
    exec: Option<ReattachableExecution>,
    /// The counters of the latest execution, kept after it ends or fails.
    exec_stats: StreamStatsHandle,
    operation_id: String,
    rows: u64,
    batches: u64,
    /// Responses read by [`SparkSession::sql`] before it returned.
    held: VecDeque<ExecutePlanResponse>,
    enriching: Option<Enriching>,
    on_progress: Option<ProgressFn>,
    /// No more responses will come (end, error or cancel).
    done: bool,
    /// The batch stream returned a terminal error: it returns nothing more.
    #[cfg(feature = "arrow")]
    failed: bool,
    interrupt_on_drop: bool,
    #[cfg(feature = "arrow")]
    arrow: ArrowState,
    /// Verified resumption after a lost execution (`None`: off, no per-row work).
    #[cfg(feature = "arrow")]
    resume: Option<Box<Resume>>,
}

impl std::fmt::Debug for ArrowStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArrowStream")
            .field("operation_id", &self.operation_id)
            .field("rows", &self.rows)
            .field("batches", &self.batches)
            .field("done", &self.done)
            .finish_non_exhaustive()
    }
}

impl ArrowStream {
    /// A stream of `plan`, started when first read (lazy); the operation id
    /// is drawn now.
    pub(crate) fn new(
        session: SparkSession,
        plan: Plan,
        tags: Vec<String>,
        interrupt_on_drop: bool,
    ) -> Self {
        let mut stream = ArrowStream {
            session,
            plan: Some(plan),
            tags,
            preparing: None,
            generation: None,
            resent: false,
            compressed: false,
            exec: None,
            exec_stats: StreamStatsHandle::default(),
            operation_id: uuid::Uuid::new_v4().to_string(),
            rows: 0,
            batches: 0,
            held: VecDeque::new(),
            enriching: None,
            on_progress: None,
            done: false,
            #[cfg(feature = "arrow")]
            failed: false,
            interrupt_on_drop,
            #[cfg(feature = "arrow")]
            arrow: Default::default(),
            #[cfg(feature = "arrow")]
            resume: None,
        };
        #[cfg(feature = "arrow")]
        if stream.session.options().resume_queries {
            stream.resume = stream.resumable().ok();
        }
        stream.preparing = Some(stream.prepare());
        stream
    }

    /// Ready the session (renewed if stale, builder configs applied), then
    /// start the execution on it, under this stream's operation id.
    fn prepare(&self) -> Preparing {
        let session = self.session.clone();
        let plan = self.plan.clone().unwrap_or_default();
        let operation_id = self.operation_id.clone();
        let tags = self.tags.clone();
        Box::pin(async move {
            let g = session.generation().await?;
            let (plan, compressed) = session.plan_to_send(plan).await;
            let exec = session.start_execution(&g, plan, Some(operation_id), tags)?;
            Ok((g, exec, compressed))
        })
    }

    /// No response of the execution arrived: the rule under which the
    /// reattachable stream itself sends its ExecutePlan again when the
    /// server no longer knows the operation (PySpark's, SPARK-48056).
    fn untouched(&self) -> bool {
        self.plan.is_some() && self.stats_handle().snapshot().responses == 0
    }

    /// The operation id of the execution.
    pub fn operation_id(&self) -> &str {
        &self.operation_id
    }
    /// Rows received so far.
    pub fn rows(&self) -> u64 {
        self.rows
    }
    /// Arrow batches (responses) received so far.
    pub fn batches(&self) -> u64 {
        self.batches
    }
    /// Reattach and retry counters of the execution (of all of them, and
    /// the resumptions, for a [resumed](Self::set_resume) query).
    pub fn stats(&self) -> StreamStats {
        let current = self.stats_handle().snapshot();
        #[cfg(feature = "arrow")]
        if let Some(r) = &self.resume {
            return r.stats(current);
        }
        current
    }
    /// A live handle to the counters of the current execution (a resumed
    /// query's re-execution has its own).
    pub fn stats_handle(&self) -> StreamStatsHandle {
        self.exec_stats.clone()
    }
    /// Call `f` for every ExecutionProgress the server sends from now on.
    pub fn on_progress(
        mut self,
        f: impl FnMut(&proto::execute_plan_response::ExecutionProgress) + Send + 'static,
    ) -> Self {
        self.on_progress = Some(Box::new(f));
        self
    }

    /// Read until the first response that is not progress (the server has
    /// analysed the plan), or the first error: the eager half of
    /// [`SparkSession::sql`]. Responses read are held for the consumer.
    pub(crate) async fn start(&mut self) -> Result<(), SparkError> {
        // From the execution, not through `held`: what is read here is held,
        // and reading it back would loop on a leading progress response.
        while let Some(item) = std::future::poll_fn(|cx| self.poll_execution(cx)).await {
            let resp = item?;
            let progress = matches!(
                resp.response_type,
                Some(proto::execute_plan_response::ResponseType::ExecutionProgress(_))
            );
            #[cfg(feature = "arrow")]
            self.arrow.note_schema(&resp)?;
            self.held.push_back(resp);
            if !progress {
                break;
            }
        }
        Ok(())
    }

    /// Interrupt the operation on the server, then release it; returns the
    /// ids the server interrupted (this operation's, if it was still
    /// running). What was not yet read is discarded.
    ///
    /// After the interrupt the stream is read to its end (the server
    /// answers an interrupted execution with `OPERATION_CANCELED`), and
    /// only then released: a ReleaseExecute racing the interrupt makes
    /// Spark 4.3 log an illegal-state error and can leave the job running.
    pub async fn cancel(mut self) -> Result<Vec<String>, SparkError> {
        let interrupted = self.session.interrupt_operation(&self.operation_id).await;
        self.held.clear();
        if interrupted.is_ok()
            && let Some(exec) = self.exec.as_mut()
        {
            drain(exec).await;
        }
        self.done = true;
        // Dropping the execution sends ReleaseExecute(all) if the end did not.
        self.exec = None;
        interrupted
    }

    /// The next raw response of the execution (session ids verified, errors
    /// enriched), for callers that decode results themselves. Do not mix
    /// with [`next_batch`](Self::next_batch) on the same stream.
    pub async fn next_response(&mut self) -> Option<Result<ExecutePlanResponse, SparkError>> {
        std::future::poll_fn(|cx| self.poll_response(cx)).await
    }

    /// The one loop under every read: held responses first, then the
    /// execution; a server error is enriched (FetchErrorDetails) before it
    /// is returned, and ends the stream.
    fn poll_response(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<ExecutePlanResponse, SparkError>>> {
        if let Some(resp) = self.held.pop_front() {
            return Poll::Ready(Some(Ok(resp)));
        }
        self.poll_execution(cx)
    }

    /// The next response of the execution itself (nothing held), with
    /// session ids checked and server errors enriched.
    fn poll_execution(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<ExecutePlanResponse, SparkError>>> {
        loop {
            if let Some(fut) = self.enriching.as_mut() {
                let err = std::task::ready!(fut.as_mut().poll(cx));
                self.enriching = None;
                if let Some(g) = self.generation.clone() {
                    let verdict = self.session.note_failure(&g, &err, self.untouched());
                    let unread = self.compressed && self.session.compressed_plan_refused(&err);
                    if !self.resent && (unread || self.session.resend(verdict)) {
                        // Refused before anything ran: once more, renewed
                        // or with the plan plain.
                        self.resent = true;
                        self.done = false;
                        self.exec = None;
                        self.preparing = Some(self.prepare());
                        continue;
                    }
                }
                return Poll::Ready(Some(Err(err)));
            }
            if let Some(fut) = self.preparing.as_mut() {
                let ready = std::task::ready!(fut.as_mut().poll(cx));
                self.preparing = None;
                match ready {
                    Ok((g, exec, compressed)) => {
                        self.compressed = compressed;
                        self.generation = Some(g);
                        self.exec_stats = exec.stats_handle();
                        self.exec = Some(exec);
                    }
                    Err(e) => {
                        self.fail();
                        return Poll::Ready(Some(Err(e)));
                    }
                }
            }
            if self.done {
                return Poll::Ready(None);
            }
            let (Some(exec), Some(g)) = (self.exec.as_mut(), self.generation.clone()) else {
                self.done = true;
                continue;
            };
            let Some(item) = std::task::ready!(Pin::new(exec).poll_next(cx)) else {
                self.done = true;
                continue;
            };
            match self.session.check_item(&g, item) {
                Ok(resp) => {
                    return Poll::Ready(Some(Ok(resp)));
                }
                Err(Ok(status)) => {
                    self.done = true;
                    let session = self.session.clone();
                    let op = self.operation_id.clone();
                    let rpc = self.exec.as_ref().map_or("ExecutePlan", |e| e.last_rpc());
                    self.enriching = Some(Box::pin(async move {
                        session.call_error(status, Some(rpc), Some(&op), &g).await
                    }));
                }
                Err(Err(e)) => {
                    self.fail();
                    return Poll::Ready(Some(Err(e.with_operation_id(&self.operation_id))));
                }
            }
        }
    }

    /// End the stream after an error: the execution is released.
    fn fail(&mut self) {
        self.done = true;
        self.exec = None;
        self.preparing = None;
    }

    /// A terminal error of the batch stream: the execution is released and
    /// nothing decoded but not yet handed out is delivered after it.
    #[cfg(feature = "arrow")]
    fn fail_arrow(&mut self, e: impl Into<SparkError>) -> SparkError {
        self.fail();
        self.failed = true;
        self.arrow.discard();
        e.into()
    }

    #[cfg(feature = "arrow")]
    fn progress(&mut self, p: &proto::execute_plan_response::ExecutionProgress) {
        if let Some(f) = self.on_progress.as_mut() {
            f(p);
        }
    }
}

#[cfg(feature = "arrow")]
impl ArrowStream {
    /// The result's schema: known when [`SparkSession::sql`] returns (Spark
    /// sends it first), even for an empty result. Converted from Spark's
    /// type description until the first batch arrives; from then on the
    /// batches' own Arrow schema (which also carries the session time zone
    /// of timestamps). `None` for a lazy stream not yet read, or a server
    /// that sent neither.
    pub fn schema(&self) -> Option<arrow_schema::SchemaRef> {
        self.arrow.schema()
    }

    /// The next record batch, or `None` at the end.
    pub async fn next_batch(&mut self) -> Option<Result<arrow_array::RecordBatch, SparkError>> {
        std::future::poll_fn(|cx| Pin::new(&mut *self).poll_next(cx)).await
    }

    /// Collect every batch. An empty result gives one empty batch with the
    /// result's schema (when the server sent one), so the schema is never
    /// lost.
    pub async fn collect(mut self) -> Result<Vec<arrow_array::RecordBatch>, SparkError> {
        let mut out = Vec::new();
        while let Some(b) = self.next_batch().await {
            out.push(b?);
        }
        if out.is_empty()
            && let Some(schema) = self.schema()
        {
            out.push(arrow_array::RecordBatch::new_empty(schema));
        }
        Ok(out)
    }
}

#[cfg(feature = "arrow")]
impl ArrowStream {
    /// Turn verified resumption on or off for this stream, overriding the
    /// session's [`resume_queries`](crate::session::SparkSessionBuilder::resume_queries):
    /// see there for what it does. Only before the first batch is read
    /// (rows delivered before it were not digested), only for a query (a
    /// command is never re-run), and only on a session with
    /// [`renew_stale_session`](crate::session::SparkSessionBuilder::renew_stale_session):
    /// otherwise turning it on fails with [`SparkError::InvalidOption`] and
    /// changes nothing.
    pub fn set_resume(&mut self, enabled: bool) -> Result<(), SparkError> {
        if !enabled {
            self.resume = None;
            return Ok(());
        }
        if self.resume.is_some() {
            return Ok(());
        }
        let invalid = |reason| SparkError::InvalidOption {
            field: "resume",
            reason,
        };
        if !self.session.options().renew_stale_session {
            return Err(invalid("needs a session with renew_stale_session(true)"));
        }
        if self.rows > 0 {
            return Err(invalid("rows were already delivered without a digest"));
        }
        self.resume = Some(self.resumable().map_err(invalid)?);
        Ok(())
    }

    /// The resumption state for this stream's plan, or why it has none.
    fn resumable(&self) -> Result<Box<Resume>, &'static str> {
        let plan = self.plan.as_ref().ok_or("the plan is no longer known")?;
        if let Some(reason) = not_resumable(plan) {
            return Err(reason);
        }
        let budget = budget(&self.session.options().retrying);
        Ok(Resume::new(budget, &self.operation_id))
    }

    /// The execution failed with `err`: run the query again if the server
    /// lost it, the session may move to a fresh server-side session
    /// (`renew_stale_session`) and the budget allows it
    /// ([`results::resume`](crate::results::resume)), else hand `err` back.
    fn restart(&mut self, err: SparkError) -> Result<(), SparkError> {
        let current = self.stats_handle().snapshot();
        let renewal = self.session.options().renew_stale_session;
        let Some(r) = self.resume.as_mut() else {
            return Err(err);
        };
        if !renewal || !execution_lost(&err) {
            return Err(err);
        }
        let Some(operation_id) = r.begin(err.error_class(), current) else {
            return Err(err);
        };
        self.operation_id = operation_id;
        self.session.options().meters.resumed();
        self.arrow.discard_partial();
        self.held.clear();
        self.enriching = None;
        self.exec = None; // releases the lost execution, best effort
        self.exec_stats = StreamStatsHandle::default();
        self.resent = false;
        self.done = false;
        self.preparing = Some(self.prepare());
        Ok(())
    }
}

#[cfg(feature = "arrow")]
impl Stream for ArrowStream {
    type Item = Result<arrow_array::RecordBatch, SparkError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        loop {
            if this.failed {
                return Poll::Ready(None);
            }
            if let Some(b) = this.arrow.pop() {
                let Some(r) = this.resume.as_mut() else {
                    return Poll::Ready(Some(Ok(b)));
                };
                match r.deliver(b) {
                    Ok(Some(b)) => return Poll::Ready(Some(Ok(b))),
                    Ok(None) => continue,
                    Err(e) => return Poll::Ready(Some(Err(this.fail_arrow(e)))),
                }
            }
            let resp = match std::task::ready!(this.poll_response(cx)) {
                None => {
                    if let Err(e) = this.arrow.finish() {
                        return Poll::Ready(Some(Err(this.fail_arrow(e))));
                    }
                    let (copied, buffers) = this.arrow.buffers_copied();
                    tracing::debug!(
                        operation_id = this.operation_id,
                        batches = this.batches,
                        buffers,
                        copied,
                        "result decoded (column buffers arrow copied to align them)"
                    );
                    match this.resume.as_mut().map(|r| r.at_end()) {
                        Some(Err(e)) => return Poll::Ready(Some(Err(this.fail_arrow(e)))),
                        _ => return Poll::Ready(None),
                    }
                }
                Some(Err(e)) if this.resume.is_none() => {
                    return Poll::Ready(Some(Err(this.fail_arrow(e))));
                }
                Some(Err(e)) => match this.restart(e) {
                    Ok(()) => continue,
                    Err(e) => return Poll::Ready(Some(Err(this.fail_arrow(e)))),
                },
                Some(Ok(resp)) => resp,
            };
            let offset = this
                .resume
                .as_ref()
                .map_or(this.rows, |r| r.offset(this.rows));
            let meters = &this.session.options().meters;
            meters.received(0, arrow_bytes(&resp));
            match this.arrow.absorb(resp, offset) {
                Ok(Absorbed::Rows(n)) => {
                    meters.received(n, 0);
                    this.rows = match this.resume.as_mut() {
                        Some(r) => r.absorbed(this.rows, n),
                        None => this.rows + n,
                    };
                    this.batches += 1;
                }
                Ok(Absorbed::Progress(p)) => this.progress(&p),
                Ok(Absorbed::Nothing) => {}
                Err(e) => return Poll::Ready(Some(Err(this.fail_arrow(e)))),
            }
        }
    }
}

impl Drop for ArrowStream {
    fn drop(&mut self) {
        if self.done || !self.interrupt_on_drop {
            return; // dropping the execution releases it
        }
        let (Some(exec), Ok(rt)) = (self.exec.take(), tokio::runtime::Handle::try_current()) else {
            return;
        };
        let session = self.session.clone();
        let op = std::mem::take(&mut self.operation_id);
        rt.spawn(async move {
            let mut exec = exec;
            match session.interrupt_operation(&op).await {
                Ok(_) => drain(&mut exec).await,
                Err(e) => {
                    tracing::debug!(operation_id = op, error = %e, "interrupt on drop failed")
                }
            }
            drop(exec); // then release
        });
    }
}

/// How long an interrupted execution is read, waiting for the server to end
/// it, before it is released anyway.
const CANCEL_DRAIN: Duration = Duration::from_secs(10);

/// The Arrow IPC bytes a response carries (0 for one without a batch).
#[cfg(feature = "arrow")]
fn arrow_bytes(resp: &ExecutePlanResponse) -> u64 {
    match &resp.response_type {
        Some(proto::execute_plan_response::ResponseType::ArrowBatch(b)) => b.data.len() as u64,
        _ => 0,
    }
}

/// Read an interrupted execution to its end (the server's
/// `OPERATION_CANCELED`), at most [`CANCEL_DRAIN`], discarding what comes.
async fn drain(exec: &mut ReattachableExecution) {
    let end = async {
        while let Some(item) = exec.next_response().await {
            if item.is_err() {
                break;
            }
        }
    };
    if tokio::time::timeout(CANCEL_DRAIN, end).await.is_err() {
        tracing::debug!("interrupted execution still running; releasing it anyway");
    }
}
