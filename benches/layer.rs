//! Unary throughput and p50 latency through `RetryLayer` versus the raw
//! channel, on loopback, in one run. A plain `main` (harness = false): rounds
//! alternate raw / layer so drift affects both alike; medians are reported.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use spark_connect_retry::layer::RetryLayer;
use spark_connect_retry::proto::spark_connect_service_client::SparkConnectServiceClient;
use spark_connect_retry::proto::spark_connect_service_server::{
    SparkConnectService, SparkConnectServiceServer,
};
use spark_connect_retry::proto::*;
use spark_connect_retry::retrying::Retrying;
use tonic::client::GrpcService;
use tonic::transport::{Channel, Endpoint, Server};
use tonic::{Request, Response, Status};
use tower::ServiceBuilder;

struct Echo;

fn unimpl<T>() -> Result<Response<T>, Status> {
    Err(Status::unimplemented("bench"))
}

type Empty = tokio_stream::Empty<Result<ExecutePlanResponse, Status>>;

#[tonic::async_trait]
impl SparkConnectService for Echo {
    type ExecutePlanStream = Empty;
    type ReattachExecuteStream = Empty;
    async fn execute_plan(
        &self,
        _: Request<ExecutePlanRequest>,
    ) -> Result<Response<Empty>, Status> {
        unimpl()
    }
    async fn analyze_plan(
        &self,
        _: Request<AnalyzePlanRequest>,
    ) -> Result<Response<AnalyzePlanResponse>, Status> {
        unimpl()
    }
    async fn config(
        &self,
        req: Request<ConfigRequest>,
    ) -> Result<Response<ConfigResponse>, Status> {
        Ok(Response::new(ConfigResponse {
            session_id: req.into_inner().session_id,
            ..Default::default()
        }))
    }
    async fn add_artifacts(
        &self,
        _: Request<tonic::Streaming<AddArtifactsRequest>>,
    ) -> Result<Response<AddArtifactsResponse>, Status> {
        unimpl()
    }
    async fn artifact_status(
        &self,
        _: Request<ArtifactStatusesRequest>,
    ) -> Result<Response<ArtifactStatusesResponse>, Status> {
        unimpl()
    }
    async fn interrupt(
        &self,
        _: Request<InterruptRequest>,
    ) -> Result<Response<InterruptResponse>, Status> {
        unimpl()
    }
    async fn reattach_execute(
        &self,
        _: Request<ReattachExecuteRequest>,
    ) -> Result<Response<Empty>, Status> {
        unimpl()
    }
    async fn release_execute(
        &self,
        _: Request<ReleaseExecuteRequest>,
    ) -> Result<Response<ReleaseExecuteResponse>, Status> {
        unimpl()
    }
    async fn release_session(
        &self,
        _: Request<ReleaseSessionRequest>,
    ) -> Result<Response<ReleaseSessionResponse>, Status> {
        unimpl()
    }
    async fn fetch_error_details(
        &self,
        _: Request<FetchErrorDetailsRequest>,
    ) -> Result<Response<FetchErrorDetailsResponse>, Status> {
        unimpl()
    }
    async fn clone_session(
        &self,
        _: Request<CloneSessionRequest>,
    ) -> Result<Response<CloneSessionResponse>, Status> {
        unimpl()
    }
    async fn get_status(
        &self,
        _: Request<GetStatusRequest>,
    ) -> Result<Response<GetStatusResponse>, Status> {
        unimpl()
    }
}

const SEQ_CALLS: usize = 4000;
const TASKS: usize = 32;
const CALLS_PER_TASK: usize = 250;
const ROUNDS: usize = 7;

fn req() -> ConfigRequest {
    ConfigRequest {
        session_id: "00112233-4455-6677-8899-aabbccddeeff".into(),
        ..Default::default()
    }
}

/// (calls per second, p50 latency) of `SEQ_CALLS` sequential calls.
async fn sequential<T>(client: &mut SparkConnectServiceClient<T>) -> (f64, Duration)
where
    T: GrpcService<tonic::body::Body>,
    T::Error: Into<tonic::codegen::StdError>,
    T::ResponseBody: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    <T::ResponseBody as http_body::Body>::Error: Into<tonic::codegen::StdError> + Send,
{
    let mut lat = Vec::with_capacity(SEQ_CALLS);
    let start = Instant::now();
    for _ in 0..SEQ_CALLS {
        let t = Instant::now();
        client.config(req()).await.expect("call");
        lat.push(t.elapsed());
    }
    let total = start.elapsed();
    lat.sort();
    (SEQ_CALLS as f64 / total.as_secs_f64(), lat[lat.len() / 2])
}

/// Calls per second of `TASKS` concurrent callers.
async fn concurrent<T>(client: SparkConnectServiceClient<T>) -> f64
where
    T: GrpcService<tonic::body::Body> + Clone + Send + 'static,
    T::Future: Send,
    T::Error: Into<tonic::codegen::StdError>,
    T::ResponseBody: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    <T::ResponseBody as http_body::Body>::Error: Into<tonic::codegen::StdError> + Send,
{
    let start = Instant::now();
    let tasks: Vec<_> = (0..TASKS)
        .map(|_| {
            let mut c = client.clone();
            tokio::spawn(async move {
                for _ in 0..CALLS_PER_TASK {
                    c.config(req()).await.expect("call");
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.expect("task");
    }
    (TASKS * CALLS_PER_TASK) as f64 / start.elapsed().as_secs_f64()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr: SocketAddr = listener.local_addr().expect("addr");
        tokio::spawn(
            Server::builder()
                .add_service(SparkConnectServiceServer::new(Echo))
                .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
        );
        let channel = |addr: SocketAddr| -> Channel {
            Endpoint::from_shared(format!("http://{addr}"))
                .expect("uri")
                .connect_lazy()
        };
        // Separate channels (connections) so neither run warms the other's.
        let mut raw = SparkConnectServiceClient::new(channel(addr));
        let layer = RetryLayer::spark_connect(Retrying::default());
        let mut wrapped =
            SparkConnectServiceClient::new(ServiceBuilder::new().layer(layer).service(channel(addr)));
        for _ in 0..1000 {
            raw.config(req()).await.expect("warm");
            wrapped.config(req()).await.expect("warm");
        }
        // A third arm: the raw channel behind the sanitize guard alone, which
        // the layer always applies; it splits the layer's cost in two.
        let mut sanitized = SparkConnectServiceClient::new(
            ServiceBuilder::new()
                .layer(spark_connect_retry::sanitize::SanitizeLayer)
                .service(channel(addr)),
        );
        for _ in 0..1000 {
            sanitized.config(req()).await.expect("warm");
        }
        // `LAYER_BENCH_ONLY=raw|layer|sanitize`: one arm, sequential calls only,
        // for profilers and instruction counters (run it once per arm, compare).
        if let Ok(arm) = std::env::var("LAYER_BENCH_ONLY") {
            let calls: usize = std::env::var("LAYER_BENCH_CALLS")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(20_000);
            let start = Instant::now();
            for _ in 0..calls {
                match arm.as_str() {
                    "raw" => raw.config(req()).await.map(drop),
                    "layer" => wrapped.config(req()).await.map(drop),
                    "sanitize" => sanitized.config(req()).await.map(drop),
                    other => panic!("LAYER_BENCH_ONLY={other}: expected raw, layer or sanitize"),
                }
                .expect("call");
            }
            println!("{arm}: {calls} calls in {:.2?}", start.elapsed());
            return;
        }
        let (mut rs, mut ls, mut ss, mut rp, mut lp, mut sp, mut rc, mut lc) =
            (vec![], vec![], vec![], vec![], vec![], vec![], vec![], vec![]);
        for round in 0..ROUNDS {
            // Rotate the order, so no arm always runs first.
            let mut r = None;
            let mut l = None;
            let mut z = None;
            for k in 0..3 {
                match (round + k) % 3 {
                    0 => r = Some(sequential(&mut raw).await),
                    1 => l = Some(sequential(&mut wrapped).await),
                    _ => z = Some(sequential(&mut sanitized).await),
                }
            }
            let (r, l, z) = (r.expect("raw"), l.expect("layer"), z.expect("sanitized"));
            rs.push(r.0);
            rp.push(r.1.as_secs_f64() * 1e6);
            ls.push(l.0);
            lp.push(l.1.as_secs_f64() * 1e6);
            ss.push(z.0);
            sp.push(z.1.as_secs_f64() * 1e6);
            // Alternate which concurrent arm goes first, too.
            if round % 2 == 0 {
                rc.push(concurrent(raw.clone()).await);
                lc.push(concurrent(wrapped.clone()).await);
            } else {
                lc.push(concurrent(wrapped.clone()).await);
                rc.push(concurrent(raw.clone()).await);
            }
        }
        let (rs, ls, ss, rp, lp, sp, rc, lc) = (
            median(rs),
            median(ls),
            median(ss),
            median(rp),
            median(lp),
            median(sp),
            median(rc),
            median(lc),
        );
        println!("unary Config over loopback, medians of {ROUNDS} rotating rounds");
        println!(
            "sequential ({SEQ_CALLS} calls): raw {rs:>9.0} calls/s  layer {ls:>9.0} calls/s  ratio {:.3}   (raw+sanitize {ss:>9.0} calls/s, ratio {:.3})",
            ls / rs,
            ss / rs
        );
        println!(
            "p50 latency:                raw {rp:>9.1} us       layer {lp:>9.1} us       added {:+.1} %   (raw+sanitize {sp:>9.1} us, {:+.1} %)",
            (lp / rp - 1.0) * 100.0,
            (sp / rp - 1.0) * 100.0
        );
        println!(
            "concurrent ({TASKS}x{CALLS_PER_TASK}):      raw {rc:>9.0} calls/s  layer {lc:>9.0} calls/s  ratio {:.3}",
            lc / rc
        );
    });
}
