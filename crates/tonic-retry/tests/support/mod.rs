//! What tonic-retry's test binaries share: clients through a layer, the
//! loopback servers (the scripted echo server, and [`Gated`], whose streams
//! the test feeds message by message, and [`recorded::Recorded`], which
//! records what each attempt carried), a proxy that mistreats its first
//! connections, and the tracing capture.
#![allow(dead_code)] // each test binary uses part of this module

pub mod proxy;
pub mod recorded;

#[allow(unused_imports)] // each test binary uses part of this module
pub use tonic_retry_echo::capture;

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use futures_util::Stream;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_stream::wrappers::{ReceiverStream, TcpListenerStream};
use tonic::{Request, Response, Status};
use tonic_retry::layer::{RetryLayer, RetryService, ServiceConfig};
use tonic_retry::policy::RetryPolicy;
use tonic_retry::retrying::{RecordingSleeper, Retrying};
use tonic_retry_echo::{Echo, EchoClient, EchoReply, EchoRequest, EchoServer};
use tower::ServiceBuilder;

/// The generated echo client through a layer over a lazy channel.
pub type Client = EchoClient<RetryService<tonic::transport::Channel>>;

/// A client of the server at `addr` through `layer`. It installs the
/// binary's global tracing subscriber first ([`capture::init`]): every test
/// of a binary that captures events must, before any of the crate's code
/// runs (docs/flaky-tests.md).
pub fn client(addr: SocketAddr, layer: RetryLayer) -> Client {
    capture::init();
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect_lazy();
    EchoClient::new(ServiceBuilder::new().layer(layer).service(channel))
}

/// A request for `count` echoes of "hello".
pub fn hello(count: u32) -> EchoRequest {
    EchoRequest {
        message: "hello".into(),
        count,
    }
}

/// The base loop: a recording sleeper, a fixed jitter sequence.
pub fn base(sleeper: &RecordingSleeper) -> Retrying {
    Retrying::default()
        .with_sleeper(sleeper.clone())
        .with_seed(7)
}

/// The gRPC default policy without jitter (100 ms doubling to 1 s, 4
/// retries), through a recording sleeper: every wait exact.
pub fn exact(sleeper: &RecordingSleeper) -> Retrying {
    let policy = RetryPolicy::builder()
        .proportional_jitter(0.0)
        .build()
        .unwrap();
    Retrying::new(vec![policy]).with_sleeper(sleeper.clone())
}

/// A `Say` request with `message`.
pub fn say(message: &str) -> EchoRequest {
    EchoRequest {
        message: message.to_owned(),
        count: 0,
    }
}

/// A service config that must parse.
pub fn config(json: &str) -> ServiceConfig {
    ServiceConfig::from_json_strict(json).unwrap()
}

/// Every method of `echo.Echo` retried on UNAVAILABLE, 5 attempts,
/// 100 ms doubling to 1 s.
pub const RETRY_ECHO: &str = r#"{"methodConfig": [{
    "name": [{"service": "echo.Echo"}],
    "retryPolicy": {"maxAttempts": 5, "initialBackoff": "0.1s", "maxBackoff": "1s",
                    "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}}]}"#;

/// What one `Repeat` call of a [`Gated`] server does.
pub enum Plan {
    /// Send the response headers, then fail with this status before any
    /// message (a tonic streaming handler whose stream fails first).
    FailFirst(Status),
    /// Send whatever the test puts in the channel, message by message;
    /// the stream ends when the sender is dropped.
    Feed(mpsc::Receiver<Result<EchoReply, Status>>),
}

/// An echo server whose `Repeat` streams follow the test's [`Plan`]s, one
/// per call, and whose `Say` echoes at once, recording each request's
/// `grpc-timeout`.
#[derive(Clone, Default)]
pub struct Gated {
    calls: Arc<AtomicU32>,
    plans: Arc<Mutex<VecDeque<Plan>>>,
    timeouts: Arc<Mutex<Vec<Option<String>>>>,
}

impl Gated {
    /// Queue the plan of the next `Repeat` call.
    pub fn plan(&self, plan: Plan) {
        self.plans.lock().unwrap().push_back(plan);
    }
    /// Calls received so far (both methods).
    pub fn calls(&self) -> u32 {
        self.calls.load(Ordering::SeqCst)
    }
    /// The `grpc-timeout` of each `Say` call, as sent.
    pub fn timeouts(&self) -> Vec<Option<String>> {
        self.timeouts.lock().unwrap().clone()
    }
    /// Serve on a fresh loopback port, in the background.
    pub async fn spawn(&self) -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(EchoServer::new(self.clone()))
                .serve_with_incoming(TcpListenerStream::new(listener)),
        );
        addr
    }
}

/// One echo.
pub fn reply(message: &str) -> EchoReply {
    EchoReply {
        message: message.to_owned(),
    }
}

type Replies = Pin<Box<dyn Stream<Item = Result<EchoReply, Status>> + Send>>;

#[tonic::async_trait]
impl Echo for Gated {
    async fn say(&self, request: Request<EchoRequest>) -> Result<Response<EchoReply>, Status> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let timeout = request
            .metadata()
            .get("grpc-timeout")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        self.timeouts.lock().unwrap().push(timeout);
        Ok(Response::new(reply(&request.into_inner().message)))
    }

    type RepeatStream = Replies;

    async fn repeat(&self, _: Request<EchoRequest>) -> Result<Response<Replies>, Status> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let plan = self.plans.lock().unwrap().pop_front();
        let replies: Replies = match plan {
            Some(Plan::FailFirst(status)) => {
                Box::pin(futures_util::stream::once(async move { Err(status) }))
            }
            Some(Plan::Feed(rx)) => Box::pin(ReceiverStream::new(rx)),
            None => return Err(Status::failed_precondition("no plan for this call")),
        };
        Ok(Response::new(replies))
    }
}
