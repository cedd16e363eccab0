//! The gRPC service: per-call bookkeeping (call counters, the metadata log,
//! auth, the fault script) and the dispatch of each RPC to its handler in
//! `executions`, `session_rpcs` or `artifacts`. RPCs the server does not implement answer
//! `UNIMPLEMENTED`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tonic::codegen::BoxStream;
use tonic::{Request, Response, Status, Streaming};

use super::sender::ExecStream;
use super::state::RecordedCall;
use super::state::Shared;
use crate::conn::KillSwitch;
use crate::faults::{Action, Fault, Rpc, lock};
use spark_connect_retry::proto::{self, spark_connect_service_server::SparkConnectService};

#[derive(Debug, Clone)]
pub(super) struct Service {
    pub(super) shared: Arc<Shared>,
}

pub(super) fn kill_switch<T>(req: &Request<T>) -> Option<KillSwitch> {
    req.extensions().get::<KillSwitch>().cloned()
}

impl Service {
    /// Counts and records the call, checks auth, and takes a fault. Faults
    /// that act before the request is processed are applied here.
    pub(super) async fn begin<T>(
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
    pub(super) async fn finish<R>(
        &self,
        fault: Option<Fault>,
        kill: Option<KillSwitch>,
        session_id: &str,
        op_id: &str,
        result: Result<R, Status>,
    ) -> Result<Response<R>, Status> {
        if let Some(fault) = fault {
            self.apply(&fault, kill.as_ref(), session_id, op_id).await?;
        }
        result.map(Response::new)
    }

    /// Applies a fault that acts after (part of) a request was processed: a
    /// status or a reset ends the call, a stall delays it.
    pub(super) async fn apply(
        &self,
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
            Action::Stall(d) => {
                self.stall(*d).await;
                Ok(())
            }
            // Only meaningful on AddArtifacts, which applies it while reading.
            Action::Corrupt => Ok(()),
        }
    }

    /// Runs a unary RPC: [`begin`](Self::begin), then `handle` on the
    /// request, then [`finish`](Self::finish) with its result.
    pub(super) async fn unary<Req, R>(
        &self,
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
        let fault = self
            .begin(rpc, counter, &request, &session_id, op_id)
            .await?;
        let result = handle(&self.shared, request.into_inner());
        self.finish(fault, kill, &session_id, op_id, result).await
    }

    /// [`unary`](Self::unary) for an RPC that opens its session (created on
    /// first use, checked against the server-side session id the client saw)
    /// before `handle` runs.
    pub(super) async fn session_unary<Req, R>(
        &self,
        rpc: Rpc,
        counter: &AtomicU64,
        request: Request<Req>,
        handle: impl FnOnce(&Shared, Req) -> Result<R, Status>,
    ) -> Result<Response<R>, Status>
    where
        Req: UnaryRequest,
    {
        self.unary(rpc, counter, request, "", |shared, req| {
            shared.get_or_create_session(req.session_id(), req.observed())?;
            handle(shared, req)
        })
        .await
    }
}

/// What [`Service::unary`] reads from a request: its session id, and the
/// server-side session id the client last observed (if the RPC carries one).
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

/// The generated trait's server-streaming type (its default stubs need one).
fn boxed(response: Response<ExecStream>) -> Response<BoxStream<proto::ExecutePlanResponse>> {
    response.map(|s| Box::pin(s) as BoxStream<_>)
}

#[tonic::async_trait]
impl SparkConnectService for Service {
    async fn execute_plan(
        &self,
        request: Request<proto::ExecutePlanRequest>,
    ) -> Result<Response<BoxStream<proto::ExecutePlanResponse>>, Status> {
        Ok(boxed(self.rpc_execute_plan(request).await?))
    }

    async fn reattach_execute(
        &self,
        request: Request<proto::ReattachExecuteRequest>,
    ) -> Result<Response<BoxStream<proto::ExecutePlanResponse>>, Status> {
        Ok(boxed(self.rpc_reattach_execute(request).await?))
    }

    async fn release_execute(
        &self,
        request: Request<proto::ReleaseExecuteRequest>,
    ) -> Result<Response<proto::ReleaseExecuteResponse>, Status> {
        self.rpc_release_execute(request).await
    }

    async fn analyze_plan(
        &self,
        request: Request<proto::AnalyzePlanRequest>,
    ) -> Result<Response<proto::AnalyzePlanResponse>, Status> {
        self.rpc_analyze_plan(request).await
    }

    async fn config(
        &self,
        request: Request<proto::ConfigRequest>,
    ) -> Result<Response<proto::ConfigResponse>, Status> {
        self.rpc_config(request).await
    }

    async fn interrupt(
        &self,
        request: Request<proto::InterruptRequest>,
    ) -> Result<Response<proto::InterruptResponse>, Status> {
        self.rpc_interrupt(request).await
    }

    async fn release_session(
        &self,
        request: Request<proto::ReleaseSessionRequest>,
    ) -> Result<Response<proto::ReleaseSessionResponse>, Status> {
        self.rpc_release_session(request).await
    }

    async fn fetch_error_details(
        &self,
        request: Request<proto::FetchErrorDetailsRequest>,
    ) -> Result<Response<proto::FetchErrorDetailsResponse>, Status> {
        self.rpc_fetch_error_details(request).await
    }

    async fn add_artifacts(
        &self,
        request: Request<Streaming<proto::AddArtifactsRequest>>,
    ) -> Result<Response<proto::AddArtifactsResponse>, Status> {
        self.rpc_add_artifacts(request).await
    }

    async fn artifact_status(
        &self,
        request: Request<proto::ArtifactStatusesRequest>,
    ) -> Result<Response<proto::ArtifactStatusesResponse>, Status> {
        self.rpc_artifact_status(request).await
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
