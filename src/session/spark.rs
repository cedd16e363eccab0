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

use super::error::{ErrorDetails, SparkError};
use super::generation::{Generation, Renewal};
use super::options::{Options, lock};
use super::stale::{Verdict, reported_class, verdict};
use crate::connect::conn_string::ConnectionString;
use crate::error_classes::SESSION_CHANGED;
use crate::proto::execute_plan_request::{RequestOption, request_option};
use crate::proto::{
    self, ExecutePlanRequest, ExecutePlanResponse, Plan, ResultChunkingOptions, UserContext,
};
use crate::reattach::{ReattachError, ReattachOptions, ReattachableExecution, ReleaseTracker};
use crate::retrying::AttemptError;
use crate::token::call::CallToken;
use crate::token::service::TokenUsed;
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
    plan_compression: super::plan_codec::PlanCompression,
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
            .field("credentials", &self.inner.options.credentials)
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
    /// Its gRPC path, the method metrics are recorded under.
    const PATH: &'static str;
    /// The client-side session id it carries.
    fn session_id(&self) -> &str;
}

macro_rules! unary_requests {
    ($($t:ty => $m:literal),*) => {$(
        impl UnaryRequest for $t {
            const METHOD: &'static str = $m;
            const PATH: &'static str = concat!("/spark.connect.SparkConnectService/", $m);
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
    pub(crate) fn new(client: SparkClient, config: &ConnectionString, options: Options) -> Self {
        let user_id = config.user_id().unwrap_or_default().to_owned();
        let session_id = config.session_id().unwrap_or_else(uuid::Uuid::new_v4);
        let renewal = Renewal::new(session_id.to_string(), options.renew_stale_session)
            .metered(options.meters.clone());
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
                plan_compression: Default::default(),
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
    /// Marks the session closed; whether it was already closed.
    pub(super) fn was_closed(&self) -> bool {
        self.inner.closed.swap(true, Ordering::SeqCst)
    }
    pub(super) fn tag_list(&self) -> &Mutex<Vec<String>> {
        &self.inner.tags
    }
    pub(super) fn renewal(&self) -> &Renewal {
        &self.inner.renewal
    }
    pub(crate) fn options(&self) -> &Options {
        &self.inner.options
    }
    pub(crate) fn user_context(&self) -> Option<UserContext> {
        Some(self.inner.user_context.clone())
    }
    pub(crate) fn client_type_field(&self) -> Option<String> {
        Some(self.inner.client_type.clone())
    }

    /// Verify a response's session ids against its generation, with the
    /// rule executions use ([`crate::reattach::ids`]); a changed server
    /// session makes the session stale.
    pub(crate) fn verify(
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

    /// Records what a failed call of generation `g` says about the session:
    /// with renewal on, a stale session is marked for renewal; off, a
    /// `SESSION_CHANGED` closes it, as in PySpark (the other stale errors
    /// keep coming from the server).
    pub(crate) fn note_failure(
        &self,
        g: &Generation,
        err: &SparkError,
        untouched: bool,
    ) -> Verdict {
        let v = verdict(reported_class(err), g.observed().is_some(), untouched);
        if v == Verdict::Unrelated {
            return v;
        }
        if !self.renewal().enabled {
            if reported_class(err) == Some(SESSION_CHANGED) {
                self.mark_closed();
            }
        } else if !g.stale.swap(true, Ordering::SeqCst) {
            tracing::info!(
                session_id = g.session_id(),
                error_class = err.error_class(),
                "Spark Connect session is stale; the next call renews it"
            );
        }
        v
    }

    /// Whether a call that failed with this verdict is sent again on a
    /// fresh session.
    pub(crate) fn resend(&self, v: Verdict) -> bool {
        v == Verdict::StaleRefused && self.renewal().enabled
    }

    /// The session's plan compression state.
    pub(super) fn plan_compression(&self) -> &super::plan_codec::PlanCompression {
        &self.inner.plan_compression
    }

    /// The client every RPC of this session goes through.
    #[cfg(feature = "arrow")]
    pub(crate) fn client(&self) -> SparkClient {
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
        let retrying = self.inner.options.retrying.clone();
        self.send_with(retrying, deadline, req, call).await
    }

    /// [`send`](Self::send) under `retrying` instead of the session's loop
    /// (a call that is only worth one attempt).
    pub(super) async fn send_with<Req, Resp, F, Fut>(
        &self,
        retrying: crate::retrying::Retrying,
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
        let token = &CallToken::new(self.inner.options.credentials.as_ref());
        retrying
            .with_method(Req::PATH)
            .run::<_, std::convert::Infallible, _, _>(|| {
                let used = token.slot();
                let attempt = with_deadline(deadline, req.clone(), used.clone(), |r| {
                    call(self.inner.client.clone(), r)
                });
                async move { attempt.await.map_err(|s| token.judge(s, &used)) }
            })
            .instrument(span)
            .await
            .0
            .map_err(AttemptError::into_status)
    }

    /// Turn a status of the RPC `rpc` into a [`SparkError`]: Spark's
    /// class, SQLSTATE and parameters, the operation id, the details
    /// FetchErrorDetails adds (once per error id), the RPC and the server's
    /// address (which a give-up displays with its history).
    pub(crate) async fn call_error(
        &self,
        status: Status,
        rpc: Option<&'static str>,
        operation_id: Option<&str>,
        g: &Generation,
    ) -> SparkError {
        let target = format!("{}:{}", self.inner.host, self.inner.port);
        let mut e = SparkError::from_status(status, Some((rpc, &target)));
        if let SparkError::Server(err) = &mut e {
            if let Some(op) = operation_id {
                err.set_operation_id(op);
            }
            if let Some(id) = err.error_id().map(str::to_owned)
                && let Some(details) = self.fetch_error_details(g, &id).await
            {
                err.set_details(details);
            }
        }
        e
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
        let used = TokenUsed::default();
        let resp = with_deadline(deadline, req, used, |r| client.fetch_error_details(r))
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
        self.start_execution(
            &self.inner.renewal.current(),
            plan,
            None,
            lock(&self.inner.tags).clone(),
        )
    }

    /// A reattachable execution of `plan` on generation `g`.
    pub(crate) fn start_execution(
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
        )?
        .with_credentials(self.inner.options.credentials.clone())
        .observed(self.inner.options.meters.observers()))
    }

    /// Checks one item of an execution of generation `g`: session ids on a
    /// response; a stale session noted. A server status is handed back
    /// unconverted (`Err(Ok(status))`) so the caller can enrich it.
    pub(crate) fn check_item(
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
}

/// One attempt of an RPC under a client-side deadline: `grpc-timeout` on
/// the request, and the whole call (a client stream's upload included)
/// bounded by it, since tonic's timeout covers only the time to headers.
/// `used` learns which token the request carried.
pub(crate) async fn with_deadline<Req, Resp, Fut>(
    deadline: Option<Duration>,
    req: Req,
    used: TokenUsed,
    call: impl FnOnce(tonic::Request<Req>) -> Fut,
) -> Result<Resp, Status>
where
    Fut: Future<Output = Result<tonic::Response<Resp>, Status>>,
{
    let mut request = tonic::Request::new(req);
    request.extensions_mut().insert(used);
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
