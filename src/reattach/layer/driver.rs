//! The layer's driver over [`ReattachCore`]: the third driver of the one
//! reattach engine (after the session's [`ReattachableExecution`] and the
//! core's own tests), on raw bytes.
//!
//! *Why a driver and not a second engine:* every rule (when to reattach,
//! backoff, NOT_FOUND, stalls, integrity, progress) is the core's. This
//! file only performs its actions with the caller's bytes: the core sees a
//! head of the caller's request ([`wire::RequestHead`]) and of each response
//! ([`wire::ResponseHead`]), and the bytes the caller sent and the server
//! answered are what go out and come back.
//!
//! [`ReattachableExecution`]: crate::reattach::ReattachableExecution

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::uri::PathAndQuery;
use tokio::time::Instant;
use tonic::codec::Streaming;
use tonic::metadata::MetadataMap;
use tonic::{Extensions, Status};

use super::frame::RawCodec;
use super::wire::{self, RequestHead};
use super::{EXECUTE_PLAN, REATTACH_EXECUTE, RELEASE_EXECUTE, Releases};
use crate::proto::{
    ExecutePlanRequest, ExecutePlanResponse, ReleaseExecuteRequest, execute_plan_response,
};
use crate::reattach::core::{Action, Event, Open, ReattachCore, Release};
use crate::reattach::release::{MIN_RELEASE_ATTEMPT, UntilPacer};
use crate::reattach::{ReattachError, ReattachOptions};
use crate::reconnect::FreshConnection;
use crate::retrying::{AttemptError, Retrying};
use crate::transport::GrpcChannel;

/// How the execution started.
#[derive(Debug)]
pub(crate) enum Start {
    /// The caller's ExecutePlan, with the id and option appended.
    Execute(Bytes),
    /// The caller's own ReattachExecute, as sent.
    Reattach(Bytes),
}

/// What the caller gets next.
#[derive(Debug)]
pub(crate) enum Item {
    /// A response, as the server sent it.
    Message(Bytes),
    /// The result's real end.
    End,
    /// A terminal error.
    Error(Status),
}

pub(crate) struct Driver {
    core: ReattachCore,
    head: Arc<RequestHead>,
    start: Start,
    grpc: tonic::client::Grpc<GrpcChannel>,
    /// The caller's metadata, copied onto every request made for it.
    metadata: MetadataMap,
    retrying: Retrying,
    options: ReattachOptions,
    releaser: Option<RawReleaser>,
    current: Option<Streaming<Bytes>>,
    segment_deadline: Option<Instant>,
    /// The bytes of the response last fed to the core.
    pending: Option<Bytes>,
    /// The response headers of the first segment that answered.
    pub(crate) first_headers: Option<MetadataMap>,
}

impl std::fmt::Debug for Driver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Driver")
            .field("operation_id", &self.core.operation_id())
            .finish_non_exhaustive()
    }
}

/// The core's view of the caller's request: its ids, nothing else.
fn core_request(head: &RequestHead) -> ExecutePlanRequest {
    ExecutePlanRequest {
        session_id: head.session_id.clone(),
        client_observed_server_side_session_id: head.observed_server_side_session_id.clone(),
        operation_id: head.operation_id.clone(),
        client_type: head.client_type.clone(),
        ..Default::default()
    }
}

impl Driver {
    /// A driver for the caller's ExecutePlan (`raw`, read as `head`).
    pub(crate) fn execute(
        raw: &Bytes,
        head: RequestHead,
        parts: Parts,
    ) -> Result<Driver, ReattachError> {
        let core = ReattachCore::new(core_request(&head))?;
        let initial = wire::execute_request(raw, &head, core.operation_id());
        Ok(Driver::new(core, head, Start::Execute(initial), parts))
    }

    /// A driver for the caller's own ReattachExecute (`raw`, read as `head`).
    pub(crate) fn resume(
        raw: Bytes,
        head: RequestHead,
        parts: Parts,
    ) -> Result<Driver, ReattachError> {
        let last = head.last_response_id.clone().filter(|l| !l.is_empty());
        let core = ReattachCore::resume(core_request(&head), last)?;
        Ok(Driver::new(core, head, Start::Reattach(raw), parts))
    }

    fn new(core: ReattachCore, head: RequestHead, start: Start, parts: Parts) -> Driver {
        let head = Arc::new(head);
        let releaser = match parts.releases {
            Releases::Own => Some(RawReleaser {
                grpc: parts.grpc.clone(),
                metadata: parts.metadata.clone(),
                retrying: parts.retrying.clone(),
                head: head.clone(),
                until: UntilPacer::default(),
                attempt_timeout: parts
                    .options
                    .idle_timeout
                    .map(|d| d.max(MIN_RELEASE_ATTEMPT)),
            }),
            Releases::CallerOnly => None,
        };
        Driver {
            core,
            head,
            start,
            grpc: parts.grpc,
            metadata: parts.metadata,
            retrying: parts.retrying,
            options: parts.options,
            releaser,
            current: None,
            segment_deadline: None,
            pending: None,
            first_headers: None,
        }
    }

    /// The next thing the caller gets.
    pub(crate) async fn next(&mut self) -> Item {
        let mut action = self.core.poll_next(&self.retrying);
        loop {
            action = match action {
                Action::Finish => return Item::End,
                Action::Emit(_, release) => {
                    self.release(release);
                    return match self.pending.take() {
                        Some(msg) => Item::Message(msg),
                        None => {
                            Item::Error(Status::internal("reattach layer: no response to emit"))
                        }
                    };
                }
                Action::Fail(err, release) => {
                    self.current = None;
                    if let Some(r) = release {
                        self.release(r);
                    }
                    return Item::Error(to_status(err));
                }
                Action::SleepThenOpen(delay, open) => {
                    self.current = None;
                    self.retrying.sleeper().sleep(delay).await;
                    self.open(open).await
                }
                // The layer holds no token of its own: the channel under it does.
                Action::Open(open) | Action::RefreshThenOpen(open) => self.open(open).await,
                Action::Read => self.read().await,
            };
        }
    }

    fn release(&self, release: Release) {
        if let Some(r) = &self.releaser {
            let all = matches!(release, Release::All);
            r.release(all, self.core.release_request(&release));
        }
    }

    async fn open(&mut self, open: Open) -> Action {
        self.current = None;
        let (raw, path, deadline) = match (&open, &self.start) {
            (Open::Execute(_), Start::Execute(initial)) => (
                initial.clone(),
                EXECUTE_PLAN,
                self.options.deadlines.reattachable_execute_plan,
            ),
            (Open::Execute(_), Start::Reattach(_)) => {
                // The core never re-executes a resumed execution.
                let status = Status::internal("reattach layer: no plan to execute");
                return self.core.on_event(Event::Error(status), &self.retrying);
            }
            (Open::Reattach(r), start) => {
                let last = r.last_response_id.as_deref();
                let raw = match start {
                    Start::Execute(_) => wire::with_user_context(r, &self.head),
                    Start::Reattach(caller) => wire::reattach_from(caller, &self.head, last),
                };
                (
                    raw,
                    REATTACH_EXECUTE,
                    self.options.deadlines.reattach_execute,
                )
            }
        };
        tracing::debug!(rpc = path, "reattach layer: opening a segment");
        self.segment_deadline = deadline.and_then(|d| Instant::now().checked_add(d));
        let mut request =
            tonic::Request::from_parts(self.metadata.clone(), Extensions::default(), raw);
        if let Some(d) = deadline {
            request.set_timeout(d);
        }
        if self.core.opening_after_stall() {
            request.extensions_mut().insert(FreshConnection);
        }
        let mut grpc = self.grpc.clone();
        let call = async move {
            grpc.ready()
                .await
                .map_err(|e| Status::unavailable(format!("channel not ready: {e}")))?;
            grpc.server_streaming(request, PathAndQuery::from_static(path), RawCodec)
                .await
        };
        let result = match self.options.bounded(self.segment_deadline, call).await {
            Ok(r) => r,
            Err(event) => return self.core.on_event(event, &self.retrying),
        };
        match result {
            Ok(resp) => {
                let (metadata, stream, _) = resp.into_parts();
                if self.first_headers.is_none() {
                    self.first_headers = Some(metadata);
                }
                self.current = Some(stream);
                self.core.on_event(Event::Opened, &self.retrying)
            }
            Err(status) => self.failed(status),
        }
    }

    fn failed(&mut self, status: Status) -> Action {
        self.current = None;
        tracing::debug!(
            rpc.grpc.status_code = status.code() as i32,
            "reattach layer: segment failed"
        );
        self.core.on_event(Event::Error(status), &self.retrying)
    }

    async fn read(&mut self) -> Action {
        let Some(stream) = self.current.as_mut() else {
            let status = Status::internal("reattach layer: no open stream to read");
            return self.core.on_event(Event::Error(status), &self.retrying);
        };
        let result = match self
            .options
            .bounded(self.segment_deadline, stream.message())
            .await
        {
            Ok(r) => r,
            Err(event) => {
                self.current = None;
                return self.core.on_event(event, &self.retrying);
            }
        };
        let event = match result {
            Ok(Some(msg)) => match wire::response_head(&msg) {
                Ok(head) => {
                    self.pending = Some(msg);
                    Event::Response(Box::new(core_response(head)))
                }
                Err(e) => {
                    self.current = None;
                    Event::Error(Status::internal(format!("from the server: {e}")))
                }
            },
            Ok(None) => {
                self.current = None;
                Event::EndOfStream
            }
            Err(status) => return self.failed(status),
        };
        self.core.on_event(event, &self.retrying)
    }
}

/// The core's view of a response: its ids and whether it completes the result.
fn core_response(head: wire::ResponseHead) -> ExecutePlanResponse {
    ExecutePlanResponse {
        session_id: head.session_id,
        server_side_session_id: head.server_side_session_id,
        response_id: head.response_id,
        response_type: head.result_complete.then_some(
            execute_plan_response::ResponseType::ResultComplete(
                execute_plan_response::ResultComplete {},
            ),
        ),
        ..Default::default()
    }
}

/// The status the caller gets for `err`: the server's own status (details
/// and metadata kept) when there is one, else one naming the rule.
pub(crate) fn to_status(err: ReattachError) -> Status {
    match err {
        ReattachError::Status(s) => s,
        // The server's status as it came when it has rich details: gRPC
        // clients (grpc-python) refuse details whose message differs from
        // grpc-message. Without details, the message says what happened.
        ReattachError::ResponseAlreadyReceived { status, .. } if !status.details().is_empty() => {
            status
        }
        ReattachError::ResponseAlreadyReceived { status, .. } => Status::with_metadata(
            status.code(),
            format!(
                "[RESPONSE_ALREADY_RECEIVED] the server lost the execution after responses were delivered: {}",
                status.message()
            ),
            status.metadata().clone(),
        ),
        ReattachError::InvalidOperationId(_) => Status::invalid_argument(err.to_string()),
        other => Status::internal(other.to_string()),
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        if let Some(release) = self.core.on_drop() {
            self.release(release);
        }
    }
}

/// What every execution of one layer service shares.
#[derive(Clone)]
pub(crate) struct Parts {
    pub(crate) grpc: tonic::client::Grpc<GrpcChannel>,
    pub(crate) metadata: MetadataMap,
    pub(crate) retrying: Retrying,
    pub(crate) options: ReattachOptions,
    pub(crate) releases: Releases,
}

/// Sends the layer's own ReleaseExecutes (built from the caller's ids and
/// metadata) in the background: `release_until` coalesced (newest wins, at
/// most one in flight, paced by the session's `UntilPacer`), `release_all` at
/// once. Best effort under the retry policy, as PySpark's.
#[derive(Clone)]
struct RawReleaser {
    grpc: tonic::client::Grpc<GrpcChannel>,
    metadata: MetadataMap,
    retrying: Retrying,
    head: Arc<RequestHead>,
    /// The pacing of release_until, shared with the session's releaser.
    until: UntilPacer<ReleaseExecuteRequest>,
    /// Give an attempt up after this long without an answer, as the
    /// session's releaser does, so a release lost in a black hole cannot
    /// hold back the execution's later releases.
    attempt_timeout: Option<Duration>,
}

impl RawReleaser {
    /// Send the core's `req` (a `release_all` when `all`) with the caller's
    /// user context as sent.
    fn release(&self, all: bool, req: ReleaseExecuteRequest) {
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if all {
            self.until.clear();
            let this = self.clone();
            rt.spawn(async move { this.send(req).await });
        } else if self.until.offer(req) {
            let this = self.clone();
            rt.spawn(async move {
                while let Some(next) = this.until.next().await {
                    this.send(next).await;
                }
            });
        }
    }

    async fn send(&self, req: ReleaseExecuteRequest) {
        let raw = wire::with_user_context(&req, &self.head);
        let (result, _) = self
            .retrying
            .clone()
            .with_method(RELEASE_EXECUTE)
            .run::<_, std::convert::Infallible, _, _>(|| {
                let mut grpc = self.grpc.clone();
                let request = tonic::Request::from_parts(
                    self.metadata.clone(),
                    Extensions::default(),
                    raw.clone(),
                );
                let limit = self.attempt_timeout;
                async move {
                    let call = async {
                        grpc.ready()
                            .await
                            .map_err(|e| Status::unavailable(e.to_string()))?;
                        grpc.unary(
                            request,
                            PathAndQuery::from_static(RELEASE_EXECUTE),
                            RawCodec,
                        )
                        .await
                    };
                    let result = match limit {
                        None => call.await,
                        Some(limit) => {
                            tokio::time::timeout(limit, call).await.unwrap_or_else(|_| {
                                Err(Status::unavailable(format!(
                                    "ReleaseExecute got no answer within {limit:?}"
                                )))
                            })
                        }
                    };
                    result.map_err(AttemptError::Status)
                }
            })
            .await;
        if let Err(e) = result {
            tracing::warn!(error = %e, "reattach layer: ReleaseExecute failed");
        }
    }
}
