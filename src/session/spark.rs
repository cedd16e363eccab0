//! [`SparkSession`]: SQL in, Arrow out, every RPC under the retry policy.
//!
//! A Spark user expects the session to behave like PySpark's: `sql()` runs
//! the statement (DDL happens even if the result is never read, bad SQL
//! fails right there), tags mark operations so they can be interrupted
//! together, `close()` ends the server session, and errors carry Spark's
//! error class and SQLSTATE. This file is the session and its RPCs; the
//! result stream is [`ArrowStream`], the options are
//! [`SparkSessionBuilder`](super::SparkSessionBuilder).

use std::collections::HashSet;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tonic::Status;

use super::builder::SparkSessionBuilder;
use super::conn_string::ConnectionString;
use super::error::{ErrorDetails, ServerError, SparkError};
use super::stream::ArrowStream;
use crate::deadlines::RpcDeadlines;
use crate::proto::execute_plan_request::{RequestOption, request_option};
use crate::proto::{
    self, ExecutePlanRequest, ExecutePlanResponse, Plan, Relation, ResultChunkingOptions,
    UserContext,
};
use crate::reattach::ids::check_session_ids;
use crate::reattach::{ReattachError, ReattachOptions, ReattachableExecution, ReleaseTracker};
use crate::retrying::Retrying;
use crate::transport::SparkClient;

/// The checked options [`SparkSessionBuilder::build`] hands to the session.
pub(super) struct Options {
    pub(super) retrying: Retrying,
    pub(super) deadlines: RpcDeadlines,
    pub(super) idle_timeout: Option<Duration>,
    pub(super) release_wait: Duration,
    /// The preferred Arrow chunk size; `None` turns chunking off.
    pub(super) arrow_chunk_size: Option<usize>,
    pub(super) interrupt_on_drop: bool,
}

struct Inner {
    client: SparkClient,
    session_id: String,
    user_context: UserContext,
    client_type: String,
    options: Options,
    server_side_session_id: Mutex<Option<String>>,
    closed: AtomicBool,
    releases: ReleaseTracker,
    fetched_error_ids: Mutex<HashSet<String>>,
    tags: Mutex<Vec<String>>,
}

/// A Spark Connect session.
///
/// Cheap to clone; clones share the session (and its tags). Built from an
/// `sc://` connection string with [`SparkSession::builder`]; needs a tokio
/// runtime. Unary RPCs run under the [`Retrying`] loop with PySpark's
/// [`RpcDeadlines`]; results stream through a [`ReattachableExecution`].
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

impl SparkSession {
    pub(super) fn new(client: SparkClient, config: &ConnectionString, options: Options) -> Self {
        let user_id = config.user_id().unwrap_or_default().to_owned();
        let session_id = config.session_id().unwrap_or_else(uuid::Uuid::new_v4);
        SparkSession {
            inner: Arc::new(Inner {
                client,
                session_id: session_id.to_string(),
                user_context: UserContext {
                    user_id: user_id.clone(),
                    user_name: user_id,
                    extensions: vec![],
                },
                client_type: config.client_type(),
                options,
                server_side_session_id: Mutex::new(None),
                closed: AtomicBool::new(false),
                releases: ReleaseTracker::new(),
                fetched_error_ids: Mutex::new(HashSet::new()),
                tags: Mutex::new(Vec::new()),
            }),
        }
    }

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
        lock(&self.inner.server_side_session_id).clone()
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

    pub(super) fn check_open(&self) -> Result<(), SparkError> {
        if self.is_closed() {
            Err(SparkError::SessionClosed)
        } else {
            Ok(())
        }
    }

    /// Verify a response's session ids, with the same rule as executions
    /// ([`check_session_ids`]); a changed server session closes this one.
    pub(super) fn verify(&self, session_id: &str, server_side: &str) -> Result<(), SparkError> {
        let mut seen = lock(&self.inner.server_side_session_id);
        check_session_ids(&self.inner.session_id, &mut seen, session_id, server_side)
            .map_err(|e| self.reattach_error(e.into()))
    }

    /// Convert a stream's non-status error; SESSION_CHANGED closes the session.
    fn reattach_error(&self, e: ReattachError) -> SparkError {
        let e = SparkError::from(e);
        if matches!(e, SparkError::SessionChanged { .. }) {
            self.inner.closed.store(true, Ordering::SeqCst);
        }
        e
    }

    fn observed_id(&self) -> Option<String> {
        self.server_side_session_id()
    }

    /// For the session's other files: the user context sent on every request.
    #[cfg(feature = "arrow")]
    pub(super) fn user_context(&self) -> UserContext {
        self.inner.user_context.clone()
    }
    /// The client every RPC of this session goes through.
    #[cfg(feature = "arrow")]
    pub(super) fn client(&self) -> SparkClient {
        self.inner.client.clone()
    }
    /// The session's retry loop.
    #[cfg(feature = "arrow")]
    pub(super) fn retrying(&self) -> &Retrying {
        &self.inner.options.retrying
    }
    /// The session's RPC deadlines.
    #[cfg(feature = "arrow")]
    pub(super) fn deadlines(&self) -> &RpcDeadlines {
        &self.inner.options.deadlines
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
            .options
            .retrying
            .call(|| {
                with_deadline(deadline, req.clone(), |r| {
                    call(self.inner.client.clone(), r)
                })
            })
            .await;
        match result {
            Ok(r) => Ok(r),
            Err(status) => Err(self.server_error(status, None).await),
        }
    }

    /// Turn a status into a [`SparkError`]: Spark's class, SQLSTATE and
    /// parameters, the operation id, the details FetchErrorDetails adds
    /// (once per error id); SESSION_CHANGED closes the session.
    pub(super) async fn server_error(
        &self,
        status: Status,
        operation_id: Option<&str>,
    ) -> SparkError {
        let mut err = ServerError::from_status(status);
        if let Some(op) = operation_id {
            err.set_operation_id(op);
        }
        if err.error_class() == Some("INVALID_HANDLE.SESSION_CHANGED") {
            self.inner.closed.store(true, Ordering::SeqCst);
        }
        if let Some(id) = err.error_id().map(str::to_owned)
            && let Some(details) = self.fetch_error_details(&id).await
        {
            err.set_details(details);
        }
        SparkError::Server(Box::new(err))
    }

    /// FetchErrorDetails: once per error id, best effort, never retried.
    async fn fetch_error_details(&self, error_id: &str) -> Option<ErrorDetails> {
        let first = lock(&self.inner.fetched_error_ids).insert(error_id.to_owned());
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
        let deadline = self.inner.options.deadlines.fetch_error_details;
        let mut client = self.inner.client.clone();
        let resp = with_deadline(deadline, req, |r| client.fetch_error_details(r))
            .await
            .ok()?;
        error_details(&resp)
    }

    /// Start a reattachable execution of `plan` (low level: raw responses).
    ///
    /// Nothing is sent until the execution is first polled. The session's
    /// tags and the result-chunking option go with the request.
    pub fn execute_plan(&self, plan: Plan) -> Result<ReattachableExecution, SparkError> {
        self.check_open()?;
        let mut request_options = Vec::new();
        if let Some(size) = self.inner.options.arrow_chunk_size {
            request_options.push(RequestOption {
                request_option: Some(request_option::RequestOption::ResultChunkingOptions(
                    ResultChunkingOptions {
                        allow_arrow_batch_chunking: true,
                        preferred_arrow_chunk_size: Some(size as i64),
                    },
                )),
            });
        }
        let req = ExecutePlanRequest {
            session_id: self.inner.session_id.clone(),
            client_observed_server_side_session_id: self.observed_id(),
            user_context: Some(self.inner.user_context.clone()),
            operation_id: None,
            plan: Some(plan),
            client_type: Some(self.inner.client_type.clone()),
            request_options,
            tags: self.tags(),
        };
        let options = ReattachOptions {
            deadlines: self.inner.options.deadlines,
            idle_timeout: self.inner.options.idle_timeout,
        };
        Ok(ReattachableExecution::with_tracker(
            self.inner.client.clone(),
            req,
            self.inner.options.retrying.clone(),
            options,
            self.inner.releases.clone(),
        )?)
    }

    /// Run `query` and stream its rows as Arrow.
    ///
    /// Eager, as in PySpark: the ExecutePlan is sent now, and `sql()`
    /// returns once the server has analysed the statement (its first
    /// response other than progress: the schema), or fails with the
    /// server's error (a syntax error, a missing table), all under the retry
    /// policy. DDL and DML have run by then, so the stream may be dropped
    /// unread. [`ArrowStream::schema`] is known on return.
    ///
    /// The query travels as `Plan.root = Relation.sql`, one ExecutePlan.
    /// PySpark 4.3 instead sends a `SqlCommand` and then executes the
    /// relation the server returns: two round trips.
    pub async fn sql(&self, query: &str) -> Result<ArrowStream, SparkError> {
        let mut stream = self.relation(Relation {
            common: None,
            rel_type: Some(proto::relation::RelType::Sql(proto::Sql {
                query: query.to_owned(),
            })),
        })?;
        stream.start().await?;
        Ok(stream)
    }

    /// `spark.range(start, end, step)`, streamed as Arrow (column `id`); lazy
    /// like [`relation`](Self::relation).
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
    ///
    /// Lazy, unlike [`sql`](Self::sql): nothing is sent until the stream is
    /// first read, so a relation can be prepared and handed on cheaply.
    pub fn relation(&self, relation: Relation) -> Result<ArrowStream, SparkError> {
        let exec = self.execute_plan(Plan {
            op_type: Some(proto::plan::OpType::Root(relation)),
        })?;
        Ok(ArrowStream::new(
            self.clone(),
            exec,
            self.inner.options.interrupt_on_drop,
        ))
    }

    /// Checks one item of an execution: session ids on a response, the
    /// session closed on SESSION_CHANGED. A server status is handed back
    /// unconverted (`Err(Ok(status))`) so the caller can enrich it.
    pub(super) fn check_item(
        &self,
        item: Result<ExecutePlanResponse, ReattachError>,
    ) -> Result<ExecutePlanResponse, Result<Status, SparkError>> {
        match item {
            Ok(resp) => {
                self.verify(&resp.session_id, &resp.server_side_session_id)
                    .map_err(Err)?;
                Ok(resp)
            }
            Err(ReattachError::Status(status)) => Err(Ok(status)),
            Err(e) => Err(Err(self.reattach_error(e))),
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
            .unary(
                self.inner.options.deadlines.config,
                req,
                |mut c, r| async move { c.config(r).await },
            )
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
                self.inner.options.deadlines.analyze_plan,
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
            .unary(
                self.inner.options.deadlines.interrupt,
                req,
                |mut c, r| async move { c.interrupt(r).await },
            )
            .await?;
        self.verify(&resp.session_id, &resp.server_side_session_id)?;
        Ok(resp.interrupted_ids)
    }

    /// Interrupt every running operation of this session; returns their ids.
    pub async fn interrupt_all(&self) -> Result<Vec<String>, SparkError> {
        self.interrupt(proto::interrupt_request::InterruptType::All, None)
            .await
    }

    /// Interrupt the operations started with `tag`; returns their ids.
    pub async fn interrupt_tag(&self, tag: &str) -> Result<Vec<String>, SparkError> {
        check_tag(tag)?;
        self.interrupt(
            proto::interrupt_request::InterruptType::Tag,
            Some(proto::interrupt_request::Interrupt::OperationTag(
                tag.to_owned(),
            )),
        )
        .await
    }

    /// Interrupt one operation; returns its id if it was running.
    pub async fn interrupt_operation(&self, operation_id: &str) -> Result<Vec<String>, SparkError> {
        self.interrupt(
            proto::interrupt_request::InterruptType::OperationId,
            Some(proto::interrupt_request::Interrupt::OperationId(
                operation_id.to_owned(),
            )),
        )
        .await
    }

    /// Add a tag to every operation this session starts from now on (all
    /// clones share the tags). A tag is non-empty and has no comma.
    pub fn add_tag(&self, tag: &str) -> Result<(), SparkError> {
        check_tag(tag)?;
        let mut tags = lock(&self.inner.tags);
        if !tags.iter().any(|t| t == tag) {
            tags.push(tag.to_owned());
        }
        Ok(())
    }

    /// Stop adding `tag` to new operations.
    pub fn remove_tag(&self, tag: &str) -> Result<(), SparkError> {
        check_tag(tag)?;
        lock(&self.inner.tags).retain(|t| t != tag);
        Ok(())
    }

    /// The tags added to new operations, in the order they were added.
    pub fn tags(&self) -> Vec<String> {
        lock(&self.inner.tags).clone()
    }

    /// Remove every tag.
    pub fn clear_tags(&self) {
        lock(&self.inner.tags).clear();
    }

    /// Release the server session (ReleaseSession), as PySpark's `stop()`
    /// does; later calls fail with [`SparkError::SessionClosed`]. A second
    /// call sends nothing and succeeds.
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
                self.inner.options.deadlines.release_session,
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

    /// End the session: wait (at most the configured release wait, 10 s by
    /// default) for outstanding background releases, then release the
    /// server session ([`release_session`](Self::release_session)). Calls
    /// after it fail with [`SparkError::SessionClosed`]; closing twice is
    /// harmless. An error means the server could not be told; the session
    /// is closed locally either way.
    pub async fn close(&self) -> Result<(), SparkError> {
        if !self.is_closed() {
            let wait = self.inner.options.release_wait;
            if !self.inner.releases.wait_idle(wait).await {
                tracing::warn!(
                    outstanding = self.inner.releases.outstanding(),
                    "close: background releases still running after {wait:?}"
                );
            }
        }
        self.release_session().await
    }
}

/// One attempt of an RPC under a client-side deadline: `grpc-timeout` on
/// the request, and the whole call (a client stream's upload included)
/// bounded by it, since tonic's timeout covers only the time to headers.
pub(super) async fn with_deadline<Req, Resp, Fut>(
    deadline: Option<Duration>,
    req: Req,
    call: impl FnOnce(tonic::Request<Req>) -> Fut,
) -> Result<Resp, Status>
where
    Fut: Future<Output = Result<tonic::Response<Resp>, Status>>,
{
    let mut request = tonic::Request::new(req);
    if let Some(d) = deadline {
        request.set_timeout(d);
    }
    let fut = call(request);
    let resp = match deadline {
        Some(d) => tokio::time::timeout(d, fut).await.unwrap_or_else(|_| {
            Err(Status::deadline_exceeded(
                "client-side RPC deadline expired",
            ))
        }),
        None => fut.await,
    };
    resp.map(tonic::Response::into_inner)
}

/// PySpark's tag rule: non-empty, no comma (tags are joined with commas).
fn check_tag(tag: &str) -> Result<(), SparkError> {
    let reason = if tag.is_empty() {
        "a tag must not be empty"
    } else if tag.contains(',') {
        "a tag must not contain ','"
    } else {
        return Ok(());
    };
    Err(SparkError::InvalidTag {
        tag: tag.to_owned(),
        reason,
    })
}

/// The root error of a FetchErrorDetails answer and its cause chain.
fn error_details(resp: &proto::FetchErrorDetailsResponse) -> Option<ErrorDetails> {
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
    let throwable = first.spark_throwable.as_ref();
    let details = ErrorDetails {
        message: first.message.clone(),
        causes,
        error_class: throwable.and_then(|t| t.error_class.clone()),
        sql_state: throwable.and_then(|t| t.sql_state.clone()),
        message_parameters: throwable
            .map(|t| t.message_parameters.clone().into_iter().collect())
            .unwrap_or_default(),
    };
    Some(details)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_follow_pyspark_rules() {
        assert!(check_tag("etl").is_ok());
        for bad in ["", "a,b"] {
            match check_tag(bad) {
                Err(SparkError::InvalidTag { tag, .. }) => assert_eq!(tag, bad),
                other => panic!("{bad:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn error_details_follow_causes_and_stop_on_cycles() {
        use proto::fetch_error_details_response::{Error, SparkThrowable};
        let resp = proto::FetchErrorDetailsResponse {
            root_error_idx: Some(0),
            errors: vec![
                Error {
                    message: "root".into(),
                    cause_idx: Some(1),
                    spark_throwable: Some(SparkThrowable {
                        error_class: Some("DIVIDE_BY_ZERO".into()),
                        sql_state: Some("22012".into()),
                        message_parameters: [("config".to_owned(), "c".to_owned())].into(),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
                Error {
                    message: "cause".into(),
                    cause_idx: Some(0),
                    ..Default::default()
                },
            ],
            ..Default::default()
        };
        let d = error_details(&resp).unwrap();
        assert_eq!(d.message, "root");
        assert_eq!(d.causes, ["cause", "root"]);
        assert_eq!(d.error_class.as_deref(), Some("DIVIDE_BY_ZERO"));
        assert_eq!(d.sql_state.as_deref(), Some("22012"));
        assert_eq!(d.message_parameters["config"], "c");
        let empty = proto::FetchErrorDetailsResponse::default();
        assert_eq!(error_details(&empty), None);
    }
}
