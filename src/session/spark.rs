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
use tracing::Instrument;

use super::conn_string::ConnectionString;
use super::error::{ErrorDetails, ServerError, SparkError};
use super::generation::{Generation, Renewal};
use super::options::{Options, lock};
use crate::proto::execute_plan_request::{RequestOption, request_option};
use crate::proto::{
    self, ExecutePlanRequest, ExecutePlanResponse, Plan, ResultChunkingOptions, UserContext,
};
use crate::reattach::{ReattachError, ReattachOptions, ReattachableExecution, ReleaseTracker};
use crate::transport::SparkClient;

struct Inner {
    client: SparkClient,
    /// `host:port` of the server, for spans and errors (never the token).
    host: String,
    port: u16,
    user_context: UserContext,
    client_type: String,
    options: Options,
    renewal: Renewal,
    closed: AtomicBool,
    releases: ReleaseTracker,
    fetched_error_ids: Mutex<HashSet<String>>,
    tags: Mutex<Vec<String>>,
}

/// A Spark Connect session.
///
/// Cheap to clone; clones share the session (and its tags). Built from an
/// `sc://` connection string with [`SparkSession::builder`]; needs a tokio
/// runtime. Unary RPCs run under the [`Retrying`](crate::retrying::Retrying) loop with PySpark's
/// [`RpcDeadlines`](crate::deadlines::RpcDeadlines); results stream through a [`ReattachableExecution`].
#[derive(Clone)]
pub struct SparkSession {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for SparkSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SparkSession")
            .field("session_id", &self.session_id())
            .field("client_type", &self.inner.client_type)
            .field("closed", &self.is_closed())
            .field("session_renewals", &self.session_renewals())
            .finish_non_exhaustive()
    }
}

/// A response that names its session (checked by [`SparkSession::unary`]).
pub(super) trait SessionIds {
    fn ids(&self) -> (&str, &str);
}

macro_rules! session_ids {
    ($($t:ty),*) => {$(
        impl SessionIds for $t {
            fn ids(&self) -> (&str, &str) {
                (&self.session_id, &self.server_side_session_id)
            }
        }
    )*};
}
session_ids!(
    proto::ConfigResponse,
    proto::AnalyzePlanResponse,
    proto::InterruptResponse
);

/// A unary request: the RPC it is for (`rpc.method` in spans, the RPC named
/// in errors) and the session it names.
pub(super) trait UnaryRequest {
    /// The RPC's method name.
    const METHOD: &'static str;
    /// The client-side session id it carries.
    fn session_id(&self) -> &str;
}

macro_rules! unary_requests {
    ($($t:ty => $m:literal),*) => {$(
        impl UnaryRequest for $t {
            const METHOD: &'static str = $m;
            fn session_id(&self) -> &str {
                &self.session_id
            }
        }
    )*};
}
unary_requests!(
    proto::ConfigRequest => "Config",
    proto::AnalyzePlanRequest => "AnalyzePlan",
    proto::InterruptRequest => "Interrupt",
    proto::ReleaseSessionRequest => "ReleaseSession"
);

impl SparkSession {
    pub(super) fn new(client: SparkClient, config: &ConnectionString, options: Options) -> Self {
        let user_id = config.user_id().unwrap_or_default().to_owned();
        let session_id = config.session_id().unwrap_or_else(uuid::Uuid::new_v4);
        let renewal = Renewal::new(session_id.to_string(), options.renew_stale_session);
        SparkSession {
            inner: Arc::new(Inner {
                client,
                host: config.host().to_owned(),
                port: config.port(),
                user_context: UserContext {
                    user_id: user_id.clone(),
                    user_name: user_id,
                    extensions: vec![],
                },
                client_type: config.client_type(),
                options,
                renewal,
                closed: AtomicBool::new(false),
                releases: ReleaseTracker::new(),
                fetched_error_ids: Mutex::new(HashSet::new()),
                tags: Mutex::new(Vec::new()),
            }),
        }
    }

    /// The client-side session id (a UUID): a new one after each renewal of
    /// a stale session ([`renew_stale_session`](super::SparkSessionBuilder::renew_stale_session)).
    pub fn session_id(&self) -> String {
        self.inner.renewal.current().session_id().to_owned()
    }
    /// The server-side session id, once a response has carried it (`None`
    /// again right after a renewal).
    pub fn server_side_session_id(&self) -> Option<String> {
        self.inner.renewal.current().observed()
    }
    /// How many times a stale session was moved to a fresh server-side
    /// session ([`renew_stale_session`](super::SparkSessionBuilder::renew_stale_session)).
    /// Reconnects (a fresh connection after a stall) are not counted here.
    pub fn session_renewals(&self) -> u64 {
        self.inner.renewal.renewals()
    }

    /// The old name of [`session_renewals`](Self::session_renewals).
    #[deprecated(since = "0.2.0", note = "renamed to session_renewals()")]
    pub fn renewals(&self) -> u64 {
        self.session_renewals()
    }
    /// The `client_type` sent on every request.
    pub fn client_type(&self) -> &str {
        &self.inner.client_type
    }
    /// Whether the session is closed: released, closed, or (without
    /// [`renew_stale_session`](super::SparkSessionBuilder::renew_stale_session))
    /// its server session changed or vanished.
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
    pub(super) fn mark_closed(&self) {
        self.inner.closed.store(true, Ordering::SeqCst);
    }
    pub(super) fn tag_list(&self) -> &Mutex<Vec<String>> {
        &self.inner.tags
    }
    pub(super) fn renewal(&self) -> &Renewal {
        &self.inner.renewal
    }
    pub(super) fn options(&self) -> &Options {
        &self.inner.options
    }
    pub(super) fn user_context(&self) -> Option<UserContext> {
        Some(self.inner.user_context.clone())
    }
    pub(super) fn client_type_field(&self) -> Option<String> {
        Some(self.inner.client_type.clone())
    }

    /// Verify a response's session ids against its generation, with the
    /// rule executions use ([`crate::reattach::ids`]); a changed server
    /// session makes the session stale.
    pub(super) fn verify(
        &self,
        g: &Generation,
        session_id: &str,
        server_side: &str,
    ) -> Result<(), SparkError> {
        g.verify(session_id, server_side)
            .map_err(|e| self.reattach_error(g, e.into()))
    }

    /// Convert a stream's non-status error, noting a stale session.
    fn reattach_error(&self, g: &Generation, e: ReattachError) -> SparkError {
        let e = SparkError::from(e);
        self.note_failure(g, &e, false);
        e
    }

    /// Run a unary RPC under the retry loop with a deadline: on the current
    /// generation (renewed and re-sent once if the server refused it as
    /// stale, with renewal on), errors enriched, response ids verified.
    pub(super) async fn unary<Req, Resp, B, F, Fut>(
        &self,
        deadline: Option<Duration>,
        build: B,
        call: F,
    ) -> Result<Resp, SparkError>
    where
        Req: Clone + UnaryRequest,
        Resp: SessionIds,
        B: Fn(&Generation) -> Req,
        F: Fn(SparkClient, tonic::Request<Req>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<Resp>, Status>>,
    {
        self.with_renewal(|g| {
            let req = build(&g);
            let call = &call;
            async move {
                let resp = match self.send(deadline, req, call).await {
                    Ok(r) => r,
                    Err(status) => {
                        return Err(self.call_error(status, Some(Req::METHOD), None, &g).await);
                    }
                };
                let (sid, ssid) = resp.ids();
                self.verify(&g, sid, ssid)?;
                Ok(resp)
            }
        })
        .await
    }

    /// The client every RPC of this session goes through.
    #[cfg(feature = "arrow")]
    pub(super) fn client(&self) -> SparkClient {
        self.inner.client.clone()
    }

    /// One unary RPC under the retry loop, with a deadline per attempt, in
    /// one `spark_connect` span for the whole call: OpenTelemetry's
    /// `rpc.system`, `rpc.service`, `rpc.method`, `server.address` and
    /// `server.port`, and the `session_id`. The loop's retry and give-up
    /// events are inside it.
    pub(super) async fn send<Req, Resp, F, Fut>(
        &self,
        deadline: Option<Duration>,
        req: Req,
        call: &F,
    ) -> Result<Resp, Status>
    where
        Req: Clone + UnaryRequest,
        F: Fn(SparkClient, tonic::Request<Req>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<Resp>, Status>>,
    {
        let span = tracing::info_span!(
            "spark_connect",
            rpc.system = "grpc",
            rpc.service = crate::proto::SERVICE_NAME,
            rpc.method = Req::METHOD,
            server.address = self.inner.host.as_str(),
            server.port = self.inner.port,
            session_id = req.session_id(),
        );
        self.inner
            .options
            .retrying
            .call(|| {
                with_deadline(deadline, req.clone(), |r| {
                    call(self.inner.client.clone(), r)
                })
            })
            .instrument(span)
            .await
    }

    /// Turn a status into a [`SparkError`]: Spark's class, SQLSTATE and
    /// parameters, the operation id, the details FetchErrorDetails adds
    /// (once per error id). An error with an operation id is an
    /// `ExecutePlan`'s.
    pub(super) async fn server_error(
        &self,
        status: Status,
        operation_id: Option<&str>,
        g: &Generation,
    ) -> SparkError {
        let rpc = operation_id.map(|_| "ExecutePlan");
        self.call_error(status, rpc, operation_id, g).await
    }

    /// [`server_error`](Self::server_error) of the RPC `rpc`, which the
    /// error names (with the server's address) when the retries gave up.
    pub(super) async fn call_error(
        &self,
        status: Status,
        rpc: Option<&'static str>,
        operation_id: Option<&str>,
        g: &Generation,
    ) -> SparkError {
        #[cfg(feature = "tls")]
        if let Some(tls) = crate::session::tls::TlsHandshakeError::from_status(&status) {
            return SparkError::Tls(tls.clone());
        }
        let mut err = ServerError::from_status(status);
        if let Some(op) = operation_id {
            err.set_operation_id(op);
        }
        err.set_call(rpc, &format!("{}:{}", self.inner.host, self.inner.port));
        if let Some(id) = err.error_id().map(str::to_owned)
            && let Some(details) = self.fetch_error_details(g, &id).await
        {
            err.set_details(details);
        }
        SparkError::Server(Box::new(err))
    }

    /// FetchErrorDetails: once per error id, best effort, never retried.
    async fn fetch_error_details(&self, g: &Generation, error_id: &str) -> Option<ErrorDetails> {
        let first = lock(&self.inner.fetched_error_ids).insert(error_id.to_owned());
        if !first {
            return None;
        }
        let req = proto::FetchErrorDetailsRequest {
            session_id: g.session_id().to_owned(),
            client_observed_server_side_session_id: g.observed(),
            user_context: self.user_context(),
            error_id: error_id.to_owned(),
            client_type: self.client_type_field(),
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
    /// tags and the result-chunking option go with the request. It runs on
    /// the session as it is: unlike [`sql`](Self::sql) and
    /// [`relation`](Self::relation), it neither applies the builder's
    /// [`config`](super::SparkSessionBuilder::config)s nor renews a stale session.
    pub fn execute_plan(&self, plan: Plan) -> Result<ReattachableExecution, SparkError> {
        self.check_open()?;
        self.start_execution(&self.inner.renewal.current(), plan, None, self.tags())
    }

    /// A reattachable execution of `plan` on generation `g`.
    pub(super) fn start_execution(
        &self,
        g: &Generation,
        plan: Plan,
        operation_id: Option<String>,
        tags: Vec<String>,
    ) -> Result<ReattachableExecution, SparkError> {
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
            session_id: g.session_id().to_owned(),
            client_observed_server_side_session_id: g.observed(),
            user_context: self.user_context(),
            operation_id,
            plan: Some(plan),
            client_type: self.client_type_field(),
            request_options,
            tags,
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

    /// Checks one item of an execution of generation `g`: session ids on a
    /// response; a stale session noted. A server status is handed back
    /// unconverted (`Err(Ok(status))`) so the caller can enrich it.
    pub(super) fn check_item(
        &self,
        g: &Generation,
        item: Result<ExecutePlanResponse, ReattachError>,
    ) -> Result<ExecutePlanResponse, Result<Status, SparkError>> {
        match item {
            Ok(resp) => {
                self.verify(g, &resp.session_id, &resp.server_side_session_id)
                    .map_err(Err)?;
                Ok(resp)
            }
            Err(ReattachError::Status(status)) => Err(Ok(status)),
            Err(e) => Err(Err(self.reattach_error(g, e))),
        }
    }

    /// The server's Spark version.
    pub async fn spark_version(&self) -> Result<String, SparkError> {
        let resp = self
            .unary(
                self.inner.options.deadlines.analyze_plan,
                |g| proto::AnalyzePlanRequest {
                    session_id: g.session_id().to_owned(),
                    client_observed_server_side_session_id: g.observed(),
                    user_context: self.user_context(),
                    client_type: self.client_type_field(),
                    analyze: Some(proto::analyze_plan_request::Analyze::SparkVersion(
                        proto::analyze_plan_request::SparkVersion {},
                    )),
                },
                |mut c, r| async move { c.analyze_plan(r).await },
            )
            .await?;
        match resp.result {
            Some(proto::analyze_plan_response::Result::SparkVersion(v)) => Ok(v.version),
            _ => Err(SparkError::Protocol(
                "AnalyzePlan returned no spark_version".to_owned(),
            )),
        }
    }

    pub(super) async fn interrupt(
        &self,
        kind: proto::interrupt_request::InterruptType,
        target: Option<proto::interrupt_request::Interrupt>,
    ) -> Result<Vec<String>, SparkError> {
        let resp = self
            .unary(
                self.inner.options.deadlines.interrupt,
                |g| proto::InterruptRequest {
                    session_id: g.session_id().to_owned(),
                    client_observed_server_side_session_id: g.observed(),
                    user_context: self.user_context(),
                    client_type: self.client_type_field(),
                    interrupt_type: kind as i32,
                    interrupt: target.clone(),
                },
                |mut c, r| async move { c.interrupt(r).await },
            )
            .await?;
        Ok(resp.interrupted_ids)
    }

    /// Interrupt every running operation of this session; returns their ids.
    pub async fn interrupt_all(&self) -> Result<Vec<String>, SparkError> {
        self.interrupt(proto::interrupt_request::InterruptType::All, None)
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

    /// Release the server session (ReleaseSession), as PySpark's `stop()`
    /// does; later calls fail with [`SparkError::SessionClosed`]. A second
    /// call sends nothing and succeeds.
    pub async fn release_session(&self) -> Result<(), SparkError> {
        if self.inner.closed.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        let session_id = self.session_id();
        let req = proto::ReleaseSessionRequest {
            session_id: session_id.clone(),
            user_context: self.user_context(),
            client_type: self.client_type_field(),
            allow_reconnect: false,
        };
        let deadline = self.inner.options.deadlines.release_session;
        let current = self.inner.renewal.current();
        let resp = match self
            .send(deadline, req, &|mut c: SparkClient, r| async move {
                c.release_session(r).await
            })
            .await
        {
            Ok(resp) => resp,
            Err(status) => {
                let rpc = Some("ReleaseSession");
                return Err(self.call_error(status, rpc, None, &current).await);
            }
        };
        // The session is closed either way; only a different session id is an error.
        if resp.session_id != session_id {
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

#[cfg(test)]
mod tests {
    use super::*;

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
