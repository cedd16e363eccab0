//! [`SparkSession`]: SQL in, Arrow out, every RPC under the retry policy.

use std::collections::HashSet;
use std::future::Future;
#[cfg(feature = "arrow")]
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
#[cfg(feature = "arrow")]
use std::task::{Context, Poll};
use std::time::Duration;

#[cfg(feature = "arrow")]
use tokio_stream::Stream;
use tokio_stream::StreamExt;
use tonic::Status;

use super::channel::{AuthInterceptor, ChannelBuilder};
use super::conn_string::ConnectionString;
use super::error::{ErrorDetails, ServerError, SparkError};
use crate::deadlines::RpcDeadlines;
use crate::policy::RetryPolicy;
#[cfg(feature = "arrow")]
use crate::proto::execute_plan_response::ResponseType;
use crate::proto::{self, ExecutePlanRequest, ExecutePlanResponse, Plan, Relation, UserContext};
use crate::reattach::core::CoreCounters;
use crate::reattach::{
    DEFAULT_IDLE_TIMEOUT, ExecutionStats, ReattachOptions, ReattachableExecution, ReleaseTracker,
};
use crate::renew::RenewableChannel;
use crate::retrying::Retrying;
use crate::transport::{GrpcChannel, SparkClient, grpc_channel};

/// How long [`SparkSession::close`] waits for background releases (PySpark: 10 s).
pub const DEFAULT_RELEASE_WAIT: Duration = Duration::from_secs(10);

struct Inner {
    client: SparkClient,
    session_id: String,
    user_context: UserContext,
    client_type: String,
    retrying: Retrying,
    deadlines: RpcDeadlines,
    idle_timeout: Option<Duration>,
    release_wait: Duration,
    server_side_session_id: Mutex<Option<String>>,
    closed: AtomicBool,
    releases: ReleaseTracker,
    fetched_error_ids: Mutex<HashSet<String>>,
}

/// A Spark Connect session.
///
/// Cheap to clone; clones share the session. Built from an `sc://`
/// connection string with [`SparkSession::builder`]. Unary RPCs run under
/// the [`Retrying`] loop with PySpark's [`RpcDeadlines`]; results stream
/// through a [`ReattachableExecution`].
#[derive(Clone)]
pub struct SparkSession {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for SparkSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SparkSession")
            .field("session_id", &self.inner.session_id)
            .field("client_type", &self.inner.client_type)
            .field("closed", &self.is_closed())
            .finish_non_exhaustive()
    }
}

/// Builds a [`SparkSession`].
#[derive(Debug, Default)]
#[must_use]
pub struct SparkSessionBuilder {
    remote: Option<String>,
    config: Option<ConnectionString>,
    retrying: Option<Retrying>,
    deadlines: Option<RpcDeadlines>,
    idle_timeout: Option<Option<Duration>>,
    release_wait: Option<Duration>,
    channel: Option<GrpcChannel>,
}

impl SparkSessionBuilder {
    /// Connect to this `sc://` URL (default: `SPARK_REMOTE`).
    pub fn remote(mut self, url: impl Into<String>) -> Self {
        self.remote = Some(url.into());
        self
    }
    /// Use an already parsed connection string.
    pub fn connection(mut self, config: ConnectionString) -> Self {
        self.config = Some(config);
        self
    }
    /// The retry policies, in order (default: one PySpark `DefaultPolicy`).
    pub fn retry_policies(mut self, policies: Vec<RetryPolicy>) -> Self {
        self.retrying = Some(Retrying::new(policies));
        self
    }
    /// A fully configured retry loop (policies, sleeper, clock, seed).
    pub fn retrying(mut self, retrying: Retrying) -> Self {
        self.retrying = Some(retrying);
        self
    }
    /// Per-RPC deadlines (default: PySpark 4.3's).
    pub fn deadlines(mut self, deadlines: RpcDeadlines) -> Self {
        self.deadlines = Some(deadlines);
        self
    }
    /// Stall detection: reattach, over a fresh connection, when a result
    /// stream is silent for this long (default
    /// [`crate::reattach::DEFAULT_IDLE_TIMEOUT`], 10 s; `None` turns it off).
    pub fn idle_timeout(mut self, idle: Option<Duration>) -> Self {
        self.idle_timeout = Some(idle);
        self
    }
    /// How long [`SparkSession::close`] waits for background releases.
    pub fn release_wait(mut self, wait: Duration) -> Self {
        self.release_wait = Some(wait);
        self
    }
    /// Send RPCs through this service stack instead of a channel built from
    /// the connection string (for example a channel wrapped in the retry
    /// layer, or a test proxy). Token and metadata headers are still added.
    pub fn channel(mut self, channel: GrpcChannel) -> Self {
        self.channel = Some(channel);
        self
    }

    /// Build the session. The channel connects lazily, on the first RPC.
    pub fn build(self) -> Result<SparkSession, SparkError> {
        let config = match (self.config, self.remote) {
            (Some(c), _) => c,
            (None, Some(url)) => ConnectionString::parse(&url)?,
            (None, None) => ConnectionString::from_env()?,
        };
        let deadlines = self.deadlines.unwrap_or_default();
        deadlines
            .validate()
            .map_err(|e| SparkError::Protocol(e.to_string()))?;
        let channel = match self.channel {
            Some(c) => c,
            None => grpc_channel(RenewableChannel::new(
                ChannelBuilder::new(&config).endpoint()?,
            )),
        };
        let intercepted = tonic::service::interceptor::InterceptedService::new(
            channel,
            AuthInterceptor::new(&config),
        );
        let client = SparkClient::new(grpc_channel(intercepted))
            .max_decoding_message_size(config.max_message_size())
            .max_encoding_message_size(config.max_message_size());
        let user_id = config.user_id().unwrap_or_default().to_owned();
        Ok(SparkSession {
            inner: Arc::new(Inner {
                client,
                session_id: config.session_id().to_string(),
                user_context: UserContext {
                    user_id: user_id.clone(),
                    user_name: user_id,
                    extensions: vec![],
                },
                client_type: config.client_type(),
                retrying: self.retrying.unwrap_or_default(),
                deadlines,
                idle_timeout: self.idle_timeout.unwrap_or(Some(DEFAULT_IDLE_TIMEOUT)),
                release_wait: self.release_wait.unwrap_or(DEFAULT_RELEASE_WAIT),
                server_side_session_id: Mutex::new(None),
                closed: AtomicBool::new(false),
                releases: ReleaseTracker::new(),
                fetched_error_ids: Mutex::new(HashSet::new()),
            }),
        })
    }
}

impl SparkSession {
    /// A builder with PySpark's defaults.
    pub fn builder() -> SparkSessionBuilder {
        SparkSessionBuilder::default()
    }

    /// Connect to `url` with defaults.
    pub fn connect(url: &str) -> Result<SparkSession, SparkError> {
        Self::builder().remote(url).build()
    }

    /// The client-side session id (a UUID).
    pub fn session_id(&self) -> &str {
        &self.inner.session_id
    }
    /// The server-side session id, once a response has carried it.
    pub fn server_side_session_id(&self) -> Option<String> {
        self.inner
            .server_side_session_id
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
    /// The `client_type` sent on every request.
    pub fn client_type(&self) -> &str {
        &self.inner.client_type
    }
    /// Whether the session is closed (released, closed, or its server session changed).
    pub fn is_closed(&self) -> bool {
        self.inner.closed.load(Ordering::SeqCst)
    }
    /// Background releases of this session's executions.
    pub fn releases(&self) -> &ReleaseTracker {
        &self.inner.releases
    }

    fn observed_id(&self) -> Option<String> {
        self.server_side_session_id()
    }

    fn check_open(&self) -> Result<(), SparkError> {
        if self.is_closed() {
            Err(SparkError::SessionClosed)
        } else {
            Ok(())
        }
    }

    /// Verify a response's session ids (PySpark's `_verify_response_integrity`).
    fn verify(&self, session_id: &str, server_side: &str) -> Result<(), SparkError> {
        if session_id != self.inner.session_id {
            return Err(SparkError::Protocol(format!(
                "received session id {session_id}, expected {}",
                self.inner.session_id
            )));
        }
        let mut seen = self
            .inner
            .server_side_session_id
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        match seen.as_deref() {
            Some(s) if !server_side.is_empty() && s != server_side => {
                let err = SparkError::SessionChanged {
                    expected: s.to_owned(),
                    got: server_side.to_owned(),
                };
                self.inner.closed.store(true, Ordering::SeqCst);
                Err(err)
            }
            Some(_) => Ok(()),
            None => {
                if !server_side.is_empty() {
                    *seen = Some(server_side.to_owned());
                }
                Ok(())
            }
        }
    }

    /// Run a unary RPC under the retry loop with a deadline, then enrich errors.
    async fn unary<Req, Resp, F, Fut>(
        &self,
        deadline: Option<Duration>,
        req: Req,
        call: F,
    ) -> Result<Resp, SparkError>
    where
        Req: Clone,
        F: Fn(SparkClient, tonic::Request<Req>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<Resp>, Status>>,
    {
        let result = self
            .inner
            .retrying
            .call(|| {
                let mut request = tonic::Request::new(req.clone());
                if let Some(d) = deadline {
                    request.set_timeout(d);
                }
                let fut = call(self.inner.client.clone(), request);
                async move {
                    match deadline {
                        Some(d) => tokio::time::timeout(d, fut).await.unwrap_or_else(|_| {
                            Err(Status::deadline_exceeded(
                                "client-side RPC deadline expired",
                            ))
                        }),
                        None => fut.await,
                    }
                }
            })
            .await;
        match result {
            Ok(r) => Ok(r.into_inner()),
            Err(status) => Err(self.server_error(status, None).await),
        }
    }

    /// Turn a status into a [`SparkError`]; fetch details once per error id;
    /// mark the session closed on SESSION_CHANGED.
    async fn server_error(&self, status: Status, operation_id: Option<&str>) -> SparkError {
        let mut err = self.server_error_now(status, operation_id);
        if let Some(id) = err.error_id().map(str::to_owned)
            && let Some(details) = self.fetch_error_details(&id).await
        {
            err.set_details(details);
        }
        SparkError::Server(Box::new(err))
    }

    /// The part of [`server_error`](Self::server_error) that needs no RPC.
    fn server_error_now(&self, status: Status, operation_id: Option<&str>) -> ServerError {
        let mut err = ServerError::from_status(status);
        if let Some(op) = operation_id {
            err.set_operation_id(op);
        }
        if err.error_class() == Some("INVALID_HANDLE.SESSION_CHANGED") {
            self.inner.closed.store(true, Ordering::SeqCst);
        }
        err
    }

    /// FetchErrorDetails: once per error id, best effort, never retried.
    async fn fetch_error_details(&self, error_id: &str) -> Option<ErrorDetails> {
        let first = self
            .inner
            .fetched_error_ids
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(error_id.to_owned());
        if !first {
            return None;
        }
        let req = proto::FetchErrorDetailsRequest {
            session_id: self.inner.session_id.clone(),
            client_observed_server_side_session_id: self.observed_id(),
            user_context: Some(self.inner.user_context.clone()),
            error_id: error_id.to_owned(),
            client_type: Some(self.inner.client_type.clone()),
        };
        let mut request = tonic::Request::new(req);
        let deadline = self.inner.deadlines.fetch_error_details;
        if let Some(d) = deadline {
            request.set_timeout(d);
        }
        let mut client = self.inner.client.clone();
        let fut = client.fetch_error_details(request);
        let resp = match deadline {
            Some(d) => tokio::time::timeout(d, fut).await.ok()?.ok()?,
            None => fut.await.ok()?,
        }
        .into_inner();
        let root = usize::try_from(resp.root_error_idx?).ok()?;
        let first = resp.errors.get(root)?;
        let mut causes = Vec::new();
        let mut next = first.cause_idx;
        while let Some(i) = next.and_then(|i| usize::try_from(i).ok()) {
            let Some(e) = resp.errors.get(i) else { break };
            if causes.len() >= resp.errors.len() {
                break; // a cycle from a hostile server
            }
            causes.push(e.message.clone());
            next = e.cause_idx;
        }
        Some(ErrorDetails {
            message: first.message.clone(),
            causes,
        })
    }

    /// Start a reattachable execution of `plan` (low level: raw responses).
    pub fn execute_plan(&self, plan: Plan) -> Result<ReattachableExecution, SparkError> {
        self.check_open()?;
        let req = ExecutePlanRequest {
            session_id: self.inner.session_id.clone(),
            client_observed_server_side_session_id: self.observed_id(),
            user_context: Some(self.inner.user_context.clone()),
            operation_id: None,
            plan: Some(plan),
            client_type: Some(self.inner.client_type.clone()),
            request_options: vec![],
            tags: vec![],
        };
        let options = ReattachOptions {
            deadlines: self.inner.deadlines,
            idle_timeout: self.inner.idle_timeout,
        };
        Ok(ReattachableExecution::with_tracker(
            self.inner.client.clone(),
            req,
            self.inner.retrying.clone(),
            options,
            self.inner.releases.clone(),
        )?)
    }

    /// Run `query` and stream its rows as Arrow.
    ///
    /// The query travels as `Plan.root = Relation.sql`, one ExecutePlan.
    /// PySpark 4.3 instead sends a `SqlCommand` and then executes the
    /// relation the server returns: two round trips, and the returned
    /// relation may use relation types this crate does not model. Spark
    /// runs commands (DDL) eagerly either way.
    pub async fn sql(&self, query: &str) -> Result<ArrowStream, SparkError> {
        self.relation(Relation {
            common: None,
            rel_type: Some(proto::relation::RelType::Sql(proto::Sql {
                query: query.to_owned(),
            })),
        })
    }

    /// `spark.range(start, end, step)`, streamed as Arrow (column `id`).
    pub fn range(&self, start: i64, end: i64, step: i64) -> Result<ArrowStream, SparkError> {
        self.relation(Relation {
            common: None,
            rel_type: Some(proto::relation::RelType::Range(proto::Range {
                start: Some(start),
                end,
                step,
                num_partitions: None,
            })),
        })
    }

    /// Execute a relation and stream its rows as Arrow.
    pub fn relation(&self, relation: Relation) -> Result<ArrowStream, SparkError> {
        let exec = self.execute_plan(Plan {
            op_type: Some(proto::plan::OpType::Root(relation)),
        })?;
        Ok(ArrowStream::new(self.clone(), exec))
    }

    /// Checks one item of an execution: session ids on a response, the
    /// session closed on SESSION_CHANGED. A server status is handed back
    /// unconverted (`Err(Ok(status))`) so the async path can enrich it.
    fn check_item(
        &self,
        item: Result<ExecutePlanResponse, crate::reattach::ReattachError>,
    ) -> Result<ExecutePlanResponse, Result<Status, SparkError>> {
        match item {
            Ok(resp) => {
                self.verify(&resp.session_id, &resp.server_side_session_id)
                    .map_err(Err)?;
                Ok(resp)
            }
            Err(crate::reattach::ReattachError::Status(status)) => Err(Ok(status)),
            Err(e) => {
                let e = SparkError::from(e);
                if matches!(e, SparkError::SessionChanged { .. }) {
                    self.inner.closed.store(true, Ordering::SeqCst);
                }
                Err(Err(e))
            }
        }
    }

    /// [`check_item`](Self::check_item), with server errors enriched
    /// (FetchErrorDetails) and tagged with the operation id.
    async fn checked(
        &self,
        item: Result<ExecutePlanResponse, crate::reattach::ReattachError>,
        operation_id: &str,
    ) -> Result<ExecutePlanResponse, SparkError> {
        match self.check_item(item) {
            Ok(resp) => Ok(resp),
            Err(Ok(status)) => Err(self.server_error(status, Some(operation_id)).await),
            Err(Err(SparkError::ResponseAlreadyReceived(mut e))) => {
                e.set_operation_id(operation_id);
                Err(SparkError::ResponseAlreadyReceived(e))
            }
            Err(Err(e)) => Err(e),
        }
    }

    async fn config(
        &self,
        op: proto::config_request::operation::OpType,
    ) -> Result<proto::ConfigResponse, SparkError> {
        self.check_open()?;
        let req = proto::ConfigRequest {
            session_id: self.inner.session_id.clone(),
            client_observed_server_side_session_id: self.observed_id(),
            user_context: Some(self.inner.user_context.clone()),
            operation: Some(proto::config_request::Operation { op_type: Some(op) }),
            client_type: Some(self.inner.client_type.clone()),
        };
        let resp = self
            .unary(self.inner.deadlines.config, req, |mut c, r| async move {
                c.config(r).await
            })
            .await?;
        self.verify(&resp.session_id, &resp.server_side_session_id)?;
        Ok(resp)
    }

    /// Set Spark configuration values.
    pub async fn config_set(&self, pairs: &[(&str, &str)]) -> Result<(), SparkError> {
        use proto::config_request::operation::OpType;
        let pairs = pairs
            .iter()
            .map(|(k, v)| proto::KeyValue {
                key: (*k).to_owned(),
                value: Some((*v).to_owned()),
            })
            .collect();
        self.config(OpType::Set(proto::config_request::Set {
            pairs,
            silent: None,
        }))
        .await
        .map(drop)
    }

    /// Get configuration values (`None` where unset and without a default).
    pub async fn config_get(&self, keys: &[&str]) -> Result<Vec<Option<String>>, SparkError> {
        use proto::config_request::operation::OpType;
        let keys: Vec<String> = keys.iter().map(|k| (*k).to_owned()).collect();
        let resp = self
            .config(OpType::GetOption(proto::config_request::GetOption {
                keys: keys.clone(),
            }))
            .await?;
        Ok(keys
            .iter()
            .map(|k| {
                resp.pairs
                    .iter()
                    .find(|p| &p.key == k)
                    .and_then(|p| p.value.clone())
            })
            .collect())
    }

    /// Unset configuration values.
    pub async fn config_unset(&self, keys: &[&str]) -> Result<(), SparkError> {
        use proto::config_request::operation::OpType;
        let keys = keys.iter().map(|k| (*k).to_owned()).collect();
        self.config(OpType::Unset(proto::config_request::Unset { keys }))
            .await
            .map(drop)
    }

    /// The server's Spark version.
    pub async fn spark_version(&self) -> Result<String, SparkError> {
        self.check_open()?;
        let req = proto::AnalyzePlanRequest {
            session_id: self.inner.session_id.clone(),
            client_observed_server_side_session_id: self.observed_id(),
            user_context: Some(self.inner.user_context.clone()),
            client_type: Some(self.inner.client_type.clone()),
            analyze: Some(proto::analyze_plan_request::Analyze::SparkVersion(
                proto::analyze_plan_request::SparkVersion {},
            )),
        };
        let resp = self
            .unary(
                self.inner.deadlines.analyze_plan,
                req,
                |mut c, r| async move { c.analyze_plan(r).await },
            )
            .await?;
        self.verify(&resp.session_id, &resp.server_side_session_id)?;
        match resp.result {
            Some(proto::analyze_plan_response::Result::SparkVersion(v)) => Ok(v.version),
            _ => Err(SparkError::Protocol(
                "AnalyzePlan returned no spark_version".to_owned(),
            )),
        }
    }

    async fn interrupt(
        &self,
        kind: proto::interrupt_request::InterruptType,
        target: Option<proto::interrupt_request::Interrupt>,
    ) -> Result<Vec<String>, SparkError> {
        self.check_open()?;
        let req = proto::InterruptRequest {
            session_id: self.inner.session_id.clone(),
            client_observed_server_side_session_id: self.observed_id(),
            user_context: Some(self.inner.user_context.clone()),
            client_type: Some(self.inner.client_type.clone()),
            interrupt_type: kind as i32,
            interrupt: target,
        };
        let resp = self
            .unary(self.inner.deadlines.interrupt, req, |mut c, r| async move {
                c.interrupt(r).await
            })
            .await?;
        self.verify(&resp.session_id, &resp.server_side_session_id)?;
        Ok(resp.interrupted_ids)
    }

    /// Interrupt every running operation of this session; returns their ids.
    pub async fn interrupt_all(&self) -> Result<Vec<String>, SparkError> {
        self.interrupt(proto::interrupt_request::InterruptType::All, None)
            .await
    }

    /// Interrupt one operation.
    pub async fn interrupt_operation(&self, operation_id: &str) -> Result<Vec<String>, SparkError> {
        self.interrupt(
            proto::interrupt_request::InterruptType::OperationId,
            Some(proto::interrupt_request::Interrupt::OperationId(
                operation_id.to_owned(),
            )),
        )
        .await
    }

    /// Release the server session; later calls fail with SESSION_CLOSED.
    /// A second call is a no-op.
    pub async fn release_session(&self) -> Result<(), SparkError> {
        if self.inner.closed.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        let req = proto::ReleaseSessionRequest {
            session_id: self.inner.session_id.clone(),
            user_context: Some(self.inner.user_context.clone()),
            client_type: Some(self.inner.client_type.clone()),
            allow_reconnect: false,
        };
        let resp = self
            .unary(
                self.inner.deadlines.release_session,
                req,
                |mut c, r| async move { c.release_session(r).await },
            )
            .await?;
        // The session is closed either way; only a different session id is an error.
        if resp.session_id != self.inner.session_id {
            return Err(SparkError::Protocol(
                "ReleaseSession answered another session".to_owned(),
            ));
        }
        Ok(())
    }

    /// Wait (at most the configured release wait, 10 s by default) for
    /// outstanding background releases, then mark the session closed.
    /// Returns `true` if every release finished in time.
    pub async fn close(&self) -> bool {
        let idle = self.inner.releases.wait_idle(self.inner.release_wait).await;
        self.inner.closed.store(true, Ordering::SeqCst);
        idle
    }
}

/// A callback for ExecutionProgress messages.
type ProgressFn = Box<dyn FnMut(&proto::execute_plan_response::ExecutionProgress) + Send>;

/// Rows of a query as Arrow record batches, in order, each exactly once.
///
/// A `Stream` of `RecordBatch`es (with the `arrow` feature). The ArrowBatch
/// `start_offset` of each batch is checked against the rows seen so far, so
/// a dropped or replayed batch is an error, never silent.
pub struct ArrowStream {
    session: SparkSession,
    exec: ReattachableExecution,
    operation_id: String,
    rows: u64,
    batches: u64,
    #[cfg(feature = "arrow")]
    queue: std::collections::VecDeque<arrow_array::RecordBatch>,
    #[cfg_attr(not(feature = "arrow"), allow(dead_code))]
    chunks: Vec<u8>,
    on_progress: Option<ProgressFn>,
    #[cfg_attr(not(feature = "arrow"), allow(dead_code))]
    done: bool,
}

impl std::fmt::Debug for ArrowStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArrowStream")
            .field("operation_id", &self.operation_id)
            .field("rows", &self.rows)
            .field("batches", &self.batches)
            .finish_non_exhaustive()
    }
}

impl ArrowStream {
    fn new(session: SparkSession, exec: ReattachableExecution) -> Self {
        let operation_id = exec.operation_id().to_owned();
        ArrowStream {
            session,
            exec,
            operation_id,
            rows: 0,
            batches: 0,
            #[cfg(feature = "arrow")]
            queue: Default::default(),
            chunks: Vec::new(),
            on_progress: None,
            done: false,
        }
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
    /// Reattach and retry counters of the execution.
    pub fn stats(&self) -> CoreCounters {
        self.exec.stats().snapshot()
    }
    /// A live handle to the execution's counters.
    pub fn stats_handle(&self) -> ExecutionStats {
        self.exec.stats()
    }
    /// Call `f` for every ExecutionProgress the server sends.
    pub fn on_progress(
        mut self,
        f: impl FnMut(&proto::execute_plan_response::ExecutionProgress) + Send + 'static,
    ) -> Self {
        self.on_progress = Some(Box::new(f));
        self
    }

    /// The next raw response of the execution (session ids verified, errors
    /// enriched), for callers that decode results themselves. Do not mix
    /// with [`next_batch`](Self::next_batch) on the same stream.
    pub async fn next_response(&mut self) -> Option<Result<ExecutePlanResponse, SparkError>> {
        let item = self.exec.next().await?;
        Some(self.session.checked(item, &self.operation_id).await)
    }

    /// Handle one response; returns decoded batches (if any).
    #[cfg(feature = "arrow")]
    fn absorb(&mut self, resp: ExecutePlanResponse) -> Result<(), SparkError> {
        match resp.response_type {
            Some(ResponseType::ArrowBatch(b)) => {
                if let Some(start) = b.start_offset
                    && b.chunk_index.unwrap_or(0) == 0
                    && start != self.rows as i64
                {
                    return Err(SparkError::BatchOffset {
                        expected: self.rows as i64,
                        got: start,
                    });
                }
                let chunks = b.num_chunks_in_batch.unwrap_or(1);
                let data = if chunks > 1 {
                    self.chunks.extend_from_slice(&b.data);
                    if b.chunk_index.unwrap_or(0) + 1 < chunks {
                        return Ok(());
                    }
                    std::mem::take(&mut self.chunks)
                } else {
                    // `b` is owned: move the payload out rather than copy it.
                    b.data
                };
                // Decode in place: `StreamDecoder` slices the batch's column
                // buffers out of `data` (zero copy when they are aligned),
                // where `StreamReader` over a `Cursor` copied every message
                // body into fresh buffers. At ~160 MB per 10M-row result the
                // copies were a visible share of the client's CPU time.
                let mut buf = arrow_buffer::Buffer::from_vec(data);
                let mut decoder = arrow_ipc::reader::StreamDecoder::new();
                let mut decoded = 0i64;
                while !buf.is_empty() {
                    if let Some(batch) = decoder.decode(&mut buf).map_err(SparkError::Arrow)? {
                        decoded += batch.num_rows() as i64;
                        self.queue.push_back(batch);
                    }
                }
                decoder.finish().map_err(SparkError::Arrow)?;
                if decoded != b.row_count {
                    return Err(SparkError::Protocol(format!(
                        "ArrowBatch says {} rows but carries {decoded}",
                        b.row_count
                    )));
                }
                self.rows += decoded as u64;
                self.batches += 1;
            }
            Some(ResponseType::ExecutionProgress(p)) => {
                if let Some(f) = self.on_progress.as_mut() {
                    f(&p);
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// The next record batch, or `None` at the end.
    #[cfg(feature = "arrow")]
    pub async fn next_batch(&mut self) -> Option<Result<arrow_array::RecordBatch, SparkError>> {
        loop {
            if let Some(b) = self.queue.pop_front() {
                return Some(Ok(b));
            }
            if self.done {
                return None;
            }
            match self.next_response().await {
                None => {
                    self.done = true;
                }
                Some(Err(e)) => {
                    self.done = true;
                    return Some(Err(e));
                }
                Some(Ok(resp)) => {
                    if let Err(e) = self.absorb(resp) {
                        self.done = true;
                        return Some(Err(e));
                    }
                }
            }
        }
    }

    /// Collect every batch.
    #[cfg(feature = "arrow")]
    pub async fn collect(mut self) -> Result<Vec<arrow_array::RecordBatch>, SparkError> {
        let mut out = Vec::new();
        while let Some(b) = self.next_batch().await {
            out.push(b?);
        }
        Ok(out)
    }
}

#[cfg(feature = "arrow")]
impl Stream for ArrowStream {
    type Item = Result<arrow_array::RecordBatch, SparkError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        // The same checks as `next_batch`, without the async FetchErrorDetails
        // enrichment a poll cannot await (the error keeps its status and ids).
        loop {
            if let Some(b) = self.queue.pop_front() {
                return Poll::Ready(Some(Ok(b)));
            }
            if self.done {
                return Poll::Ready(None);
            }
            let Some(item) = std::task::ready!(Pin::new(&mut self.exec).poll_next(cx)) else {
                self.done = true;
                continue;
            };
            let checked = match self.session.check_item(item) {
                Ok(resp) => self.absorb(resp),
                Err(Ok(status)) => Err(SparkError::Server(Box::new(
                    self.session
                        .server_error_now(status, Some(&self.operation_id)),
                ))),
                Err(Err(e)) => Err(e),
            };
            if let Err(e) = checked {
                self.done = true;
                return Poll::Ready(Some(Err(e)));
            }
        }
    }
}
