//! The layer's transport: the one reattach driver
//! ([`crate::reattach::driver`]) on raw bytes.
//!
//! *Why a transport and not a second driver:* every rule (when to
//! reattach, backoff, NOT_FOUND, stalls, integrity, progress, releases) is
//! the core's and the driver's. This file only says how the caller's bytes
//! travel: the core sees a head of the caller's request
//! ([`wire::RequestHead`]) and of each response ([`wire::ResponseHead`]),
//! and the bytes the caller sent and the server answered are what go out
//! and come back.

use std::sync::Arc;

use bytes::Bytes;
use http::uri::PathAndQuery;
use tonic::codec::Streaming;
use tonic::metadata::MetadataMap;
use tonic::{Code, Extensions, Status};

use super::frame::RawCodec;
use super::released::{CallerReleases, Released};
use super::wire::{self, RequestHead};
use super::{EXECUTE_PLAN, REATTACH_EXECUTE, RELEASE_EXECUTE, Releases};
use crate::policy::{Failure, FailureKind};
use crate::proto::{
    ExecutePlanRequest, ExecutePlanResponse, ReleaseExecuteRequest, execute_plan_response,
};
use crate::reattach::core::{Open, ReattachCore};
use crate::reattach::driver::Driver;
use crate::reattach::release::{ReleaseTracker, Releaser};
use crate::reattach::transport::{Call, Transport};
use crate::reattach::{ReattachError, ReattachOptions};
use crate::retrying::Retrying;
use crate::transport::GrpcChannel;

/// How the execution started.
#[derive(Debug)]
enum Start {
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

/// The caller's bytes over the layer's inner service.
#[derive(Clone)]
pub(crate) struct Raw {
    grpc: tonic::client::Grpc<GrpcChannel>,
    /// The caller's metadata, copied onto every request made for it.
    metadata: MetadataMap,
    head: Arc<RequestHead>,
    start: Arc<Start>,
    /// The response headers of the first segment that answered.
    first_headers: Option<MetadataMap>,
    /// Set once the caller releases this operation by itself.
    released: Released,
}

impl Raw {
    fn request(&self, raw: Bytes, call: Call) -> tonic::Request<Bytes> {
        let mut request =
            tonic::Request::from_parts(self.metadata.clone(), Extensions::default(), raw);
        call.apply(&mut request);
        request
    }

    /// The response headers of the first segment that answered, once.
    pub(crate) fn take_first_headers(&mut self) -> Option<MetadataMap> {
        self.first_headers.take()
    }
}

impl Transport for Raw {
    type Segment = Streaming<Bytes>;
    type Message = Bytes;
    type Kept = Bytes;

    async fn open(&mut self, open: Open, call: Call) -> Result<Self::Segment, Status> {
        let (raw, path) = match (&open, &*self.start) {
            (Open::Execute(_), Start::Execute(initial)) => (initial.clone(), EXECUTE_PLAN),
            // The core never re-executes a resumed execution.
            (Open::Execute(_), Start::Reattach(_)) => {
                return Err(Status::internal("reattach layer: no plan to execute"));
            }
            (Open::Reattach(r), start) => {
                let last = r.last_response_id.as_deref();
                let raw = match start {
                    Start::Execute(_) => wire::with_user_context(r, &self.head),
                    Start::Reattach(caller) => wire::reattach_from(caller, &self.head, last),
                };
                (raw, REATTACH_EXECUTE)
            }
        };
        let request = self.request(raw, call);
        let mut grpc = self.grpc.clone();
        grpc.ready()
            .await
            .map_err(|e| Status::unavailable(format!("channel not ready: {e}")))?;
        let (metadata, stream, _) = grpc
            .server_streaming(request, PathAndQuery::from_static(path), RawCodec)
            .await?
            .into_parts();
        if self.first_headers.is_none() {
            self.first_headers = Some(metadata);
        }
        Ok(stream)
    }

    async fn read(
        segment: &mut Self::Segment,
    ) -> Result<Option<(ExecutePlanResponse, Bytes)>, Status> {
        let Some(msg) = segment.message().await? else {
            return Ok(None);
        };
        let head = wire::response_head(&msg)
            .map_err(|e| Status::internal(format!("from the server: {e}")))?;
        Ok(Some((core_response(head), msg)))
    }

    fn message(_: ExecutePlanResponse, kept: Bytes) -> Bytes {
        kept
    }

    fn released_by_caller(&self) -> bool {
        self.released.get()
    }

    async fn release(&self, request: ReleaseExecuteRequest, call: Call) -> Result<(), Status> {
        let request = self.request(wire::with_user_context(&request, &self.head), call);
        let mut grpc = self.grpc.clone();
        grpc.ready()
            .await
            .map_err(|e| Status::unavailable(e.to_string()))?;
        grpc.unary(
            request,
            PathAndQuery::from_static(RELEASE_EXECUTE),
            RawCodec,
        )
        .await
        .map(drop)
    }
}

/// One execution the layer carries.
pub(crate) type RawDriver = Driver<Raw>;

/// What every execution of one layer service shares.
#[derive(Clone)]
pub(crate) struct Parts {
    pub(crate) grpc: tonic::client::Grpc<GrpcChannel>,
    pub(crate) metadata: MetadataMap,
    pub(crate) retrying: Retrying,
    pub(crate) options: ReattachOptions,
    pub(crate) releases: Releases,
    /// The operations the caller released ([`super::released`]).
    pub(crate) caller_releases: CallerReleases,
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

/// A driver for the caller's ExecutePlan (`raw`, read as `head`).
pub(crate) fn execute(
    raw: &Bytes,
    head: RequestHead,
    parts: Parts,
) -> Result<RawDriver, ReattachError> {
    let core = ReattachCore::new(core_request(&head))?;
    let initial = wire::execute_request(raw, &head, core.operation_id());
    Ok(driver(core, head, Start::Execute(initial), parts))
}

/// A driver for the caller's own ReattachExecute (`raw`, read as `head`).
pub(crate) fn resume(
    raw: Bytes,
    head: RequestHead,
    parts: Parts,
) -> Result<RawDriver, ReattachError> {
    let last = head.last_response_id.clone().filter(|l| !l.is_empty());
    let core = ReattachCore::resume(core_request(&head), last)?;
    Ok(driver(core, head, Start::Reattach(raw), parts))
}

fn driver(core: ReattachCore, head: RequestHead, start: Start, parts: Parts) -> RawDriver {
    let released = parts
        .caller_releases
        .watch(&head.session_id, core.operation_id());
    let transport = Raw {
        grpc: parts.grpc,
        metadata: parts.metadata,
        head: Arc::new(head),
        start: Arc::new(start),
        first_headers: None,
        released,
    };
    let releaser = match parts.releases {
        Releases::Own => Some(Releaser::new(
            transport.clone(),
            parts.retrying.clone(),
            ReleaseTracker::new(),
            parts.options.idle_timeout,
        )),
        Releases::CallerOnly => None,
    };
    Driver::new(core, transport, parts.retrying, parts.options, releaser)
}

/// The next thing the caller gets.
pub(crate) async fn next(driver: &mut RawDriver) -> Item {
    match driver.next().await {
        None => Item::End,
        Some(Ok(msg)) => Item::Message(msg),
        Some(Err(err)) => Item::Error(to_status(err)),
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
/// and metadata kept) when there is one, a failure of the layer's own hop
/// as UNAVAILABLE ([`hop_failure`]), else one naming the rule.
pub(crate) fn to_status(err: ReattachError) -> Status {
    match err {
        ReattachError::Status(s) => hop_failure(s),
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

/// `status` as the caller gets it when it is a failure of the layer's own
/// hop to the server, not the server's answer: a broken, refused or reset
/// connection or stream, or a truncated one (a transport or ambiguous
/// [`FailureKind`]). Those become UNAVAILABLE, their message and metadata
/// kept; any other status is left as it is.
///
/// *Why:* the caller reads the status from trailers, without its source
/// chain, and tonic reports most of these failures as UNKNOWN (`h2
/// protocol error: error reading a body from connection`). A caller that
/// reattaches by itself (a client behind the guard, with the layer of its
/// own) takes a sourceless UNKNOWN for the server's verdict and fails,
/// though its execution is still on the server and a reattach by response
/// id resumes it exactly. grpc-core reports the same failures as
/// UNAVAILABLE, which every Spark Connect client reattaches on; a replayed
/// ExecutePlan carries the same operation id, so nothing runs twice.
fn hop_failure(status: Status) -> Status {
    let hop = matches!(
        Failure::new(&status).kind(),
        FailureKind::Unprocessed | FailureKind::MaybeProcessed | FailureKind::Ambiguous
    );
    if !hop || status.code() == Code::Unavailable {
        return status;
    }
    Status::with_metadata(
        Code::Unavailable,
        status.message(),
        status.metadata().clone(),
    )
}

/// `status` as UNAVAILABLE (message and metadata kept) when it is a
/// transport failure of the layer's hop to the server (a broken, refused
/// or reset connection: [`FailureKind::is_transport`]), as grpc-core
/// reports those; `None` for any other status, the server's own included.
///
/// For calls the layer forwards without carrying them. Narrower than
/// [`hop_failure`]: a stream the server itself reset, or one that ended
/// without a status, reaches the caller as it would without the layer,
/// since the layer cannot tell whether the call's work was done and the
/// caller's retry would not resume it.
pub(crate) fn transport_failure(status: &Status) -> Option<Status> {
    Failure::new(status).kind().is_transport().then(|| {
        Status::with_metadata(
            Code::Unavailable,
            status.message(),
            status.metadata().clone(),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_failures_reach_the_caller_as_unavailable() {
        // A connection reset under a body read: tonic's UNKNOWN, with an
        // I/O cause (MaybeProcessed).
        let mut reset = Status::unknown("h2 protocol error: error reading a body from connection");
        reset.set_source(Arc::new(std::io::Error::from(
            std::io::ErrorKind::ConnectionReset,
        )));
        let out = to_status(ReattachError::Status(reset));
        assert_eq!(out.code(), Code::Unavailable);
        assert_eq!(
            out.message(),
            "h2 protocol error: error reading a body from connection"
        );
        // The same nested in another status's chain, as a give-up keeps
        // its last attempt's.
        let mut inner = Status::unknown("transport error");
        inner.set_source(Arc::new(std::io::Error::other("refused")));
        let mut outer = Status::unknown("transport error");
        outer.set_source(Arc::new(inner));
        assert_eq!(hop_failure(outer).code(), Code::Unavailable);
        // A truncated stream (no trailers): ambiguous, so UNAVAILABLE too.
        let cut = Status::unknown("protocol error: missing grpc-status trailer");
        assert_eq!(hop_failure(cut).code(), Code::Unavailable);
        // The server's own statuses are left as they came.
        for s in [
            Status::unknown("the server's own UNKNOWN"),
            Status::internal("boom"),
            Status::deadline_exceeded("late"),
        ] {
            let code = s.code();
            assert_eq!(hop_failure(s).code(), code);
        }
    }

    #[test]
    fn forwarded_calls_get_unavailable_for_transport_failures_only() {
        let mut reset = Status::unknown("transport error");
        reset.set_source(Arc::new(std::io::Error::from(
            std::io::ErrorKind::ConnectionReset,
        )));
        let out = transport_failure(&reset).expect("a transport failure");
        assert_eq!(out.code(), Code::Unavailable);
        assert_eq!(out.message(), "transport error");
        // A truncated stream is ambiguous: left as it came, as the
        // server's own statuses are.
        for s in [
            Status::unknown("protocol error: missing grpc-status trailer"),
            Status::unknown("the server's own UNKNOWN"),
            Status::internal("boom"),
        ] {
            assert!(transport_failure(&s).is_none(), "{s:?}");
        }
    }
}
