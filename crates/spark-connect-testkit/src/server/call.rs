//! What every RPC does around its handler: count and record the call, check
//! auth, take a fault from the script and apply it before or after the
//! request is processed. The RPC handlers (`executions`, `session_rpcs`,
//! `artifacts`) call these; they depend on nothing above them.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tonic::{Request, Response, Status};

use super::state::{RecordedCall, Shared};
use crate::conn::KillSwitch;
use crate::faults::{Action, Fault, Rpc, lock};
use spark_connect_retry::proto;

/// The connection's kill switch, which tonic put into the request.
pub(super) fn kill_switch<T>(req: &Request<T>) -> Option<KillSwitch> {
    req.extensions().get::<KillSwitch>().cloned()
}

/// Counts and records the call, checks auth, and takes a fault. Faults that
/// act before the request is processed are applied here; the others are
/// returned to act later (streams get `after = Some(0)` when unset).
pub(super) async fn begin<T>(
    shared: &Shared,
    rpc: Rpc,
    counter: &AtomicU64,
    req: &Request<T>,
    session_id: &str,
    op_id: &str,
) -> Result<Option<Fault>, Status> {
    counter.fetch_add(1, Ordering::SeqCst);
    lock(&shared.log).calls.push(RecordedCall {
        rpc,
        metadata: req.metadata().clone(),
    });
    if let Some(tokens) = &shared.tokens {
        tokens.check(req.metadata())?;
    } else if let Some(token) = &shared.settings.required_token {
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
            shared
                .faults
                .fire(&fault, rpc, "before the request was processed");
            if let Some(k) = kill_switch(req) {
                k.kill();
            }
            // Never reaches the client: the connection is already dead.
            Err(Status::unavailable("request lost by fault injection"))
        }
        (Action::Fail(_) | Action::BadStatusDetails, None) => {
            shared
                .faults
                .fire(&fault, rpc, "before the request was processed");
            Err(fault
                .status_for(session_id, op_id)
                .unwrap_or_else(|| Status::internal("fault")))
        }
        (Action::Stall(duration), None) if !rpc.is_stream() => {
            shared
                .faults
                .fire(&fault, rpc, "before the request was processed");
            stall(shared, *duration).await;
            Ok(None)
        }
        (Action::Restart, None) if !rpc.is_stream() => {
            shared
                .faults
                .fire(&fault, rpc, "before the request was processed");
            shared.restart();
            Err(Status::unavailable("server restarted by fault injection"))
        }
        (_, None) if rpc.is_stream() => {
            fault.after = Some(0);
            Ok(Some(fault))
        }
        _ => Ok(Some(fault)),
    }
}

/// A stream fault taken from the script that has not fired yet. If the call
/// fails before its stream starts (an unknown operation, a bad request), the
/// fault is spent without firing; dropping this logs that.
pub(super) struct Deferred(Option<(Rpc, Fault)>);

impl Deferred {
    pub(super) fn new(rpc: Rpc, fault: Option<Fault>) -> Self {
        Deferred(fault.map(|f| (rpc, f)))
    }

    /// Hands the fault to the stream that fires it.
    pub(super) fn into_stream(mut self) -> Option<(Rpc, Fault)> {
        self.0.take()
    }
}

impl Drop for Deferred {
    fn drop(&mut self) {
        if let Some((rpc, fault)) = &self.0 {
            fault.log_spent(*rpc);
        }
    }
}

/// Waits `duration` (`None`: forever), or until the server stops.
pub(super) async fn stall(shared: &Shared, duration: Option<Duration>) {
    let mut stopping = shared.stopping.subscribe();
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
pub(super) async fn finish<R>(
    shared: &Shared,
    fault: Option<(Rpc, Fault)>,
    kill: Option<KillSwitch>,
    session_id: &str,
    op_id: &str,
    result: Result<R, Status>,
) -> Result<Response<R>, Status> {
    if let Some((rpc, fault)) = fault {
        shared
            .faults
            .fire(&fault, rpc, "after the request was processed");
        apply(shared, &fault, kill.as_ref(), session_id, op_id).await?;
    }
    result.map(Response::new)
}

/// Applies a fault that acts after (part of) a request was processed: a
/// status or a reset ends the call, a stall delays it.
pub(super) async fn apply(
    shared: &Shared,
    fault: &Fault,
    kill: Option<&KillSwitch>,
    session_id: &str,
    op_id: &str,
) -> Result<(), Status> {
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
        Action::Restart => {
            shared.restart();
            Err(Status::unavailable("server restarted by fault injection"))
        }
        Action::Stall(d) => {
            stall(shared, *d).await;
            Ok(())
        }
        // Only meaningful on AddArtifacts, which applies it while reading.
        Action::Corrupt => Ok(()),
        // Only meaningful on response streams, which apply it themselves.
        Action::Replay => Ok(()),
    }
}

/// Runs a unary RPC: [`begin`], then `handle` on the request, then
/// [`finish`] with its result.
pub(super) async fn unary<Req, R>(
    shared: &Shared,
    rpc: Rpc,
    counter: &AtomicU64,
    request: Request<Req>,
    op_id: &str,
    handle: impl FnOnce(&Shared, Req) -> Result<R, Status>,
) -> Result<Response<R>, Status>
where
    Req: UnaryRequest,
{
    let kill = kill_switch(&request);
    let session_id = request.get_ref().session_id().to_owned();
    let fault = begin(shared, rpc, counter, &request, &session_id, op_id).await?;
    let result = handle(shared, request.into_inner());
    let fault = fault.map(|f| (rpc, f));
    finish(shared, fault, kill, &session_id, op_id, result).await
}

/// [`unary`] for an RPC that opens its session (created on first use,
/// checked against the server-side session id the client saw) before
/// `handle` runs.
pub(super) async fn session_unary<Req, R>(
    shared: &Shared,
    rpc: Rpc,
    counter: &AtomicU64,
    request: Request<Req>,
    handle: impl FnOnce(&Shared, Req) -> Result<R, Status>,
) -> Result<Response<R>, Status>
where
    Req: UnaryRequest,
{
    unary(shared, rpc, counter, request, "", |shared, req| {
        shared.get_or_create_session(req.session_id(), req.observed())?;
        handle(shared, req)
    })
    .await
}

/// What [`unary`] reads from a request: its session id, and the server-side
/// session id the client last observed (if the RPC carries one).
pub(super) trait UnaryRequest {
    fn session_id(&self) -> &str;
    fn observed(&self) -> Option<&str>;
}

macro_rules! unary_request {
    ($($req:ty),* $(,)?) => {$(
        impl UnaryRequest for $req {
            fn session_id(&self) -> &str {
                &self.session_id
            }
            fn observed(&self) -> Option<&str> {
                self.client_observed_server_side_session_id.as_deref()
            }
        }
    )*};
}

unary_request!(
    proto::AnalyzePlanRequest,
    proto::ConfigRequest,
    proto::InterruptRequest,
    proto::FetchErrorDetailsRequest,
    proto::ReleaseExecuteRequest,
    proto::ArtifactStatusesRequest,
);

impl UnaryRequest for proto::ReleaseSessionRequest {
    fn session_id(&self) -> &str {
        &self.session_id
    }
    /// ReleaseSession carries no observed id.
    fn observed(&self) -> Option<&str> {
        None
    }
}
