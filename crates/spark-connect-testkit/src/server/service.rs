//! The gRPC service: dispatches each RPC to its handler in `executions`,
//! `session_rpcs` or `artifacts`. RPCs the server does not implement answer
//! `UNIMPLEMENTED`.

use std::sync::Arc;

use tonic::codegen::BoxStream;
use tonic::{Request, Response, Status, Streaming};

use super::sender::ExecStream;
use super::state::Shared;
use super::{artifacts, call, executions, session_rpcs};
use crate::faults::Rpc;
use crate::stubs::SparkConnectService;
use spark_connect_retry::proto;

/// The Spark Connect service of one server.
#[derive(Debug, Clone)]
pub(super) struct Service {
    pub(super) shared: Arc<Shared>,
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
        Ok(boxed(
            executions::execute_plan(&self.shared, request).await?,
        ))
    }

    async fn reattach_execute(
        &self,
        request: Request<proto::ReattachExecuteRequest>,
    ) -> Result<Response<BoxStream<proto::ExecutePlanResponse>>, Status> {
        Ok(boxed(
            executions::reattach_execute(&self.shared, request).await?,
        ))
    }

    async fn release_execute(
        &self,
        request: Request<proto::ReleaseExecuteRequest>,
    ) -> Result<Response<proto::ReleaseExecuteResponse>, Status> {
        executions::release_execute(&self.shared, request).await
    }

    async fn analyze_plan(
        &self,
        request: Request<proto::AnalyzePlanRequest>,
    ) -> Result<Response<proto::AnalyzePlanResponse>, Status> {
        session_rpcs::analyze_plan(&self.shared, request).await
    }

    async fn config(
        &self,
        request: Request<proto::ConfigRequest>,
    ) -> Result<Response<proto::ConfigResponse>, Status> {
        session_rpcs::config(&self.shared, request).await
    }

    async fn interrupt(
        &self,
        request: Request<proto::InterruptRequest>,
    ) -> Result<Response<proto::InterruptResponse>, Status> {
        session_rpcs::interrupt(&self.shared, request).await
    }

    async fn release_session(
        &self,
        request: Request<proto::ReleaseSessionRequest>,
    ) -> Result<Response<proto::ReleaseSessionResponse>, Status> {
        session_rpcs::release_session(&self.shared, request).await
    }

    async fn fetch_error_details(
        &self,
        request: Request<proto::FetchErrorDetailsRequest>,
    ) -> Result<Response<proto::FetchErrorDetailsResponse>, Status> {
        session_rpcs::fetch_error_details(&self.shared, request).await
    }

    async fn add_artifacts(
        &self,
        request: Request<Streaming<proto::AddArtifactsRequest>>,
    ) -> Result<Response<proto::AddArtifactsResponse>, Status> {
        artifacts::add_artifacts(&self.shared, request).await
    }

    async fn artifact_status(
        &self,
        request: Request<proto::ArtifactStatusesRequest>,
    ) -> Result<Response<proto::ArtifactStatusesResponse>, Status> {
        artifacts::artifact_status(&self.shared, request).await
    }

    async fn clone_session(
        &self,
        request: Request<proto::CloneSessionRequest>,
    ) -> Result<Response<proto::CloneSessionResponse>, Status> {
        let counter = &self.shared.counters.other;
        call::begin(&self.shared, Rpc::Other, counter, &request, "", "").await?;
        Err(Status::unimplemented(
            "CloneSession is not implemented by the test server",
        ))
    }

    async fn get_status(
        &self,
        request: Request<proto::GetStatusRequest>,
    ) -> Result<Response<proto::GetStatusResponse>, Status> {
        let counter = &self.shared.counters.other;
        call::begin(&self.shared, Rpc::Other, counter, &request, "", "").await?;
        Err(Status::unimplemented(
            "GetStatus is not implemented by the test server",
        ))
    }
}
