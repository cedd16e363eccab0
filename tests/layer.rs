//! The retry layer against a real tonic server on loopback.

mod support;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use spark_connect_retry::layer::{
    MethodConfig, ResponseKind, RetryLayer, RetryService, RetryThrottle, SparkConnectLayer,
};
use spark_connect_retry::policy::RetryPolicy;
use spark_connect_retry::proto::spark_connect_service_client::SparkConnectServiceClient;
use spark_connect_retry::proto::*;
use spark_connect_retry::retrying::{BoxFuture, RecordingSleeper, Retrying, Sleeper};
use spark_connect_testkit::{SparkConnectService, SparkConnectServiceServer};
use tokio::net::{TcpListener, TcpStream};
use tokio_stream::wrappers::TcpListenerStream;
use tonic::metadata::MetadataValue;
use tonic::transport::{Channel, Endpoint, Server};
use tonic::{Code, Request, Response, Status};
use tonic_types::{ErrorDetails, StatusExt};
use tower::ServiceBuilder;

#[path = "layer/basics.rs"]
mod basics;
#[path = "layer/deadlines.rs"]
mod deadlines;
#[path = "layer/idempotency.rs"]
mod idempotency;
#[path = "layer/kinds.rs"]
mod kinds;

const CONFIG: &str = "/spark.connect.SparkConnectService/Config";
const EXECUTE: &str = "/spark.connect.SparkConnectService/ExecutePlan";

type ConfigFn = dyn Fn(u32) -> BoxFuture<Result<(), Status>> + Send + Sync;
type ExecFn = dyn Fn(u32) -> Vec<Result<ExecutePlanResponse, Status>> + Send + Sync;

/// A scripted Spark Connect server: `config` and `execute_plan` follow the
/// script by call index; every other RPC is unimplemented.
#[derive(Clone)]
struct Scripted {
    config_calls: Arc<AtomicU32>,
    exec_calls: Arc<AtomicU32>,
    previous_attempts: Arc<Mutex<Vec<Option<String>>>>,
    timeouts: Arc<Mutex<Vec<Option<String>>>>,
    /// The session ids of every AddArtifacts message, per call; the first
    /// call fails UNAVAILABLE after reading its whole stream.
    artifact_streams: Arc<Mutex<Vec<Vec<String>>>>,
    config: Arc<ConfigFn>,
    exec: Arc<ExecFn>,
}

impl Scripted {
    fn new(config: impl Fn(u32) -> BoxFuture<Result<(), Status>> + Send + Sync + 'static) -> Self {
        Scripted {
            config_calls: Arc::default(),
            exec_calls: Arc::default(),
            previous_attempts: Arc::default(),
            timeouts: Arc::default(),
            artifact_streams: Arc::default(),
            config: Arc::new(config),
            exec: Arc::new(|_| vec![]),
        }
    }
    fn with_exec(
        mut self,
        f: impl Fn(u32) -> Vec<Result<ExecutePlanResponse, Status>> + Send + Sync + 'static,
    ) -> Self {
        self.exec = Arc::new(f);
        self
    }
    fn config_calls(&self) -> u32 {
        self.config_calls.load(Ordering::SeqCst)
    }
    fn record<T>(&self, req: &Request<T>) {
        let get = |k: &str| {
            req.metadata()
                .get(k)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        self.previous_attempts
            .lock()
            .unwrap()
            .push(get("grpc-previous-rpc-attempts"));
        self.timeouts.lock().unwrap().push(get("grpc-timeout"));
    }
}

fn ready(r: Result<(), Status>) -> BoxFuture<Result<(), Status>> {
    Box::pin(std::future::ready(r))
}

fn unavailable_n(n: u32) -> impl Fn(u32) -> BoxFuture<Result<(), Status>> {
    move |i| {
        ready(if i < n {
            Err(Status::unavailable("restarting"))
        } else {
            Ok(())
        })
    }
}

fn with_pushback(code: Code, value: &'static str) -> Status {
    let mut md = tonic::metadata::MetadataMap::new();
    md.insert("grpc-retry-pushback-ms", MetadataValue::from_static(value));
    Status::with_metadata(code, "pushback", md)
}

type ExecStream = tonic::codegen::BoxStream<ExecutePlanResponse>;

#[tonic::async_trait]
impl SparkConnectService for Scripted {
    async fn execute_plan(
        &self,
        req: Request<ExecutePlanRequest>,
    ) -> Result<Response<ExecStream>, Status> {
        self.record(&req);
        let i = self.exec_calls.fetch_add(1, Ordering::SeqCst);
        Ok(Response::new(Box::pin(tokio_stream::iter((self.exec)(i)))))
    }
    async fn config(
        &self,
        req: Request<ConfigRequest>,
    ) -> Result<Response<ConfigResponse>, Status> {
        self.record(&req);
        let i = self.config_calls.fetch_add(1, Ordering::SeqCst);
        (self.config)(i).await?;
        // Echo the session id, so that a large request proves byte-exact delivery.
        Ok(Response::new(ConfigResponse {
            session_id: req.into_inner().session_id,
            ..Default::default()
        }))
    }
    async fn add_artifacts(
        &self,
        req: Request<tonic::Streaming<AddArtifactsRequest>>,
    ) -> Result<Response<AddArtifactsResponse>, Status> {
        let mut stream = req.into_inner();
        let mut ids = vec![];
        while let Some(m) = stream.message().await? {
            ids.push(m.session_id);
        }
        let call = {
            let mut streams = self.artifact_streams.lock().unwrap();
            streams.push(ids.clone());
            streams.len()
        };
        if call == 1 {
            return Err(Status::unavailable("restarting"));
        }
        Ok(Response::new(AddArtifactsResponse {
            session_id: ids.join(","),
            ..Default::default()
        }))
    }
}

async fn serve_on(listener: TcpListener, svc: Scripted) {
    // Every test starts a server before any layer code runs: the global
    // subscriber is in place before any of the crate's callsites is reached.
    support::init();
    tokio::spawn(
        Server::builder()
            .add_service(SparkConnectServiceServer::new(svc))
            .serve_with_incoming(TcpListenerStream::new(listener)),
    );
}

async fn serve(svc: Scripted) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    serve_on(listener, svc).await;
    addr
}

fn channel(addr: SocketAddr) -> Channel {
    Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect_lazy()
}

type Client = SparkConnectServiceClient<RetryService<Channel>>;

fn client(addr: SocketAddr, layer: RetryLayer) -> Client {
    SparkConnectServiceClient::new(ServiceBuilder::new().layer(layer).service(channel(addr)))
}

fn retrying(sleeper: &RecordingSleeper) -> Retrying {
    Retrying::default()
        .with_sleeper(sleeper.clone())
        .with_seed(1)
}

fn config_req(session: &str) -> ConfigRequest {
    ConfigRequest {
        session_id: session.to_owned(),
        ..Default::default()
    }
}

/// The layer's events while `fut` runs on this thread, as `name=value` fields
/// (a current-thread test runtime runs the layer's futures here).
async fn captured<T, E: std::fmt::Debug>(
    fut: impl std::future::Future<Output = Result<T, E>>,
) -> Vec<String> {
    let (out, events) = support::capture(fut).await;
    out.expect("call");
    events
        .into_iter()
        .filter(|e| e.target.starts_with("tonic_retry::layer"))
        .map(|e| e.fields.join(" "))
        .collect()
}
