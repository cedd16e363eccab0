//! The guard's front service: what every call on its port goes through
//! before the reattach layer.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use spark_connect_retry::layer::ReattachService;
use tonic_health::pb::health_server::HealthServer;
use tonic_health::server::HealthService;
use tower::{Service, ServiceExt};

type Request = http::Request<tonic::body::Body>;
type Response = http::Response<tonic::body::Body>;

/// Health calls go to the health service; every other call to the
/// reattach layer.
#[derive(Clone)]
pub(crate) struct Front {
    pub(crate) proxy: ReattachService,
    pub(crate) health: HealthServer<HealthService>,
}

const HEALTH_PREFIX: &str = "/grpc.health.v1.Health/";

impl Service<Request> for Front {
    type Response = Response;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        // Each call waits for its service's readiness itself.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request) -> Self::Future {
        if req.uri().path().starts_with(HEALTH_PREFIX) {
            let health = self.health.clone();
            return Box::pin(health.oneshot(req));
        }
        let proxy = self.proxy.clone();
        Box::pin(async move {
            Ok(proxy
                .oneshot(req)
                .await
                .unwrap_or_else(|status| status.into_http()))
        })
    }
}
