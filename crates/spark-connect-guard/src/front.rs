//! The guard's front service: what every call on its port goes through
//! before the reattach layer.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};

use spark_connect_retry::layer::ReattachService;
use tokio_util::sync::CancellationToken;
use tonic_health::pb::health_server::HealthServer;
use tonic_health::server::HealthService;
use tower::{Service, ServiceExt};

use spark_connect_retry::reattach::StreamStatsHandle;

use crate::body::{CallOpen, GuardBody, drained};
use crate::stats::{Counters, code_of, method_of};
use crate::token::ClientToken;

type Request = http::Request<tonic::body::Body>;
type Response = http::Response<tonic::body::Body>;

/// Health calls go to the health service; every other call is counted and
/// goes to the reattach layer. Every response can be cut by a drain.
#[derive(Clone)]
pub(crate) struct Front {
    pub(crate) proxy: ReattachService,
    pub(crate) health: HealthServer<HealthService>,
    /// Fired when a drain runs out of time.
    pub(crate) cut: CancellationToken,
    pub(crate) counters: Arc<Counters>,
    /// The token clients must present, if any.
    pub(crate) token: Option<Arc<ClientToken>>,
}

const HEALTH_PREFIX: &str = "/grpc.health.v1.Health/";

fn with_body(answer: Response, cut: &CancellationToken, call: Option<CallOpen>) -> Response {
    let cut = cut.clone();
    answer.map(move |b| tonic::body::Body::new(GuardBody::new(b, &cut, call)))
}

impl Service<Request> for Front {
    type Response = Response;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        // Each call waits for its service's readiness itself.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request) -> Self::Future {
        let cut = self.cut.clone();
        if req.uri().path().starts_with(HEALTH_PREFIX) {
            let health = self.health.clone();
            return Box::pin(async move {
                let answer = health.oneshot(req).await?;
                Ok(with_body(answer, &cut, None))
            });
        }
        let mut req = req;
        let mut call = CallOpen::new(self.counters.clone(), method_of(req.uri().path()));
        if let Some(token) = &self.token
            && let Err(status) = token.admit(req.headers_mut())
        {
            self.counters.refused.fetch_add(1, Ordering::Relaxed);
            call.end(16);
            return Box::pin(async move { Ok(status.into_http()) });
        }
        let proxy = self.proxy.clone();
        let counters = self.counters.clone();
        Box::pin(async move {
            let answer = tokio::select! {
                biased;
                answer = proxy.oneshot(req) => answer.unwrap_or_else(|status| status.into_http()),
                () = cut.cancelled() => {
                    // No answer yet: the client retries or reattaches.
                    counters.cut_by_drain.fetch_add(1, Ordering::Relaxed);
                    call.end(14);
                    return Ok(drained().into_http());
                }
            };
            if let Some(code) = answer.headers().get("grpc-status") {
                // Trailers-only: the status is already known.
                call.end(code_of(Some(code)));
            }
            let stream = answer.extensions().get::<StreamStatsHandle>().cloned();
            Ok(with_body(answer, &cut, Some(call.with_stream(stream))))
        })
    }
}
