//! The latency tail with and without hedging (gRFC A6 `hedgingPolicy`).
//!
//! A loopback tonic server answers 98 % of unary calls at once and 2 %
//! after 50 ms. Which attempts are slow is drawn from an RNG seeded by the
//! call's index and the attempt's number (`grpc-previous-rpc-attempts`),
//! so both arms see the same slow first attempts, and a hedge is slow as
//! independently as a new request to a real server would be. Both arms
//! run in the same process, in alternating rounds over the same call
//! indices: the plain layer, and the layer hedging `Config` after 5 ms (at
//! most 3 attempts). Reported: p50, p99, p99.9, and the requests that
//! reached the server per call. `HEDGING_CALLS` (default 5000 per arm) and
//! `HEDGING_CONCURRENCY` (default 8) change the load.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use spark_connect_retry::layer::{HedgingPolicy, RetryLayer, RetryService, SparkConnectLayer};
use spark_connect_retry::proto::spark_connect_service_client::SparkConnectServiceClient;
use spark_connect_retry::proto::{ConfigRequest, ConfigResponse};
use spark_connect_retry::retrying::PySparkRetrying;
use spark_connect_retry::retrying::Retrying;
use spark_connect_testkit::{SparkConnectService, SparkConnectServiceServer};
use tonic::transport::{Channel, Endpoint, Server};
use tonic::{Request, Response, Status};
use tower::ServiceBuilder;

const CONFIG: &str = "/spark.connect.SparkConnectService/Config";
const SLOW: Duration = Duration::from_millis(50);
const SLOW_SHARE: f64 = 0.02;
const HEDGE_DELAY: Duration = Duration::from_millis(5);
const ROUNDS: usize = 5;

/// Answers `Config` at once, or after [`SLOW`] for the seeded 2 %.
#[derive(Clone, Default)]
struct Tail {
    requests: Arc<AtomicU64>,
}

/// Whether attempt `attempt` of call `index` is slow.
fn slow(index: u64, attempt: u64) -> bool {
    StdRng::seed_from_u64(index * 8 + attempt).random_bool(SLOW_SHARE)
}

#[tonic::async_trait]
impl SparkConnectService for Tail {
    async fn config(
        &self,
        req: Request<ConfigRequest>,
    ) -> Result<Response<ConfigResponse>, Status> {
        self.requests.fetch_add(1, Ordering::Relaxed);
        let attempt = req
            .metadata()
            .get("grpc-previous-rpc-attempts")
            .and_then(|v| v.to_str().ok()?.parse().ok())
            .unwrap_or(0);
        let session_id = req.into_inner().session_id;
        let index = session_id.parse().unwrap_or(0);
        if slow(index, attempt) {
            tokio::time::sleep(SLOW).await;
        }
        Ok(Response::new(ConfigResponse {
            session_id,
            ..Default::default()
        }))
    }
}

async fn serve(tail: Tail) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    // TCP_NODELAY, as gRPC servers set it (serve_with_incoming does not).
    let incoming = tokio_stream::StreamExt::map(
        tokio_stream::wrappers::TcpListenerStream::new(listener),
        |conn| conn.inspect(|s| s.set_nodelay(true).expect("TCP_NODELAY")),
    );
    tokio::spawn(
        Server::builder()
            .add_service(SparkConnectServiceServer::new(tail))
            .serve_with_incoming(incoming),
    );
    addr
}

type Client = SparkConnectServiceClient<RetryService<Channel>>;

/// One arm: its client, the latencies of its calls, and its server's count.
struct Arm {
    name: &'static str,
    client: Client,
    tail: Tail,
    latencies: Vec<Duration>,
}

impl Arm {
    async fn new(name: &'static str, hedged: bool) -> Arm {
        let tail = Tail::default();
        let addr = serve(tail.clone()).await;
        let mut layer = RetryLayer::spark_connect(Retrying::pyspark());
        if hedged {
            let policy = HedgingPolicy::new(3, HEDGE_DELAY).expect("policy");
            layer = layer.hedge(CONFIG, policy);
        }
        let channel = Endpoint::from_shared(format!("http://{addr}"))
            .expect("endpoint")
            .tcp_nodelay(true)
            .connect()
            .await
            .expect("connect");
        let client =
            SparkConnectServiceClient::new(ServiceBuilder::new().layer(layer).service(channel));
        Arm {
            name,
            client,
            tail,
            latencies: Vec::new(),
        }
    }

    /// Calls `indices`, `concurrency` at a time, recording each latency.
    async fn round(&mut self, indices: std::ops::Range<u64>, concurrency: usize) {
        let client = self.client.clone();
        let calls = futures_util::stream::iter(indices).map(|i| {
            let mut client = client.clone();
            async move {
                let req = ConfigRequest {
                    session_id: i.to_string(),
                    ..Default::default()
                };
                let start = Instant::now();
                let res = client.config(req).await.expect("call");
                assert_eq!(res.into_inner().session_id, i.to_string());
                start.elapsed()
            }
        });
        let mut done = calls
            .buffer_unordered(concurrency)
            .collect::<Vec<_>>()
            .await;
        self.latencies.append(&mut done);
    }

    fn report(&mut self) -> [f64; 4] {
        self.latencies.sort_unstable();
        let n = self.latencies.len();
        let q = |p: f64| {
            let i = ((p * n as f64).ceil() as usize).clamp(1, n) - 1;
            self.latencies[i].as_secs_f64() * 1000.0
        };
        let per_call = self.tail.requests.load(Ordering::Relaxed) as f64 / n as f64;
        [q(0.5), q(0.99), q(0.999), per_call]
    }
}

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let calls = env("HEDGING_CALLS", 5000) as u64;
    let concurrency = env("HEDGING_CONCURRENCY", 8);
    let mut arms = [
        Arm::new("no hedging", false).await,
        Arm::new("hedging (5 ms, 3 attempts)", true).await,
    ];
    // Warm-up: connections, allocators.
    for arm in &mut arms {
        arm.round(calls..calls + 200, concurrency).await;
        arm.latencies.clear();
        arm.tail.requests.store(0, Ordering::Relaxed);
    }
    let per_round = calls.div_ceil(ROUNDS as u64);
    for r in 0..ROUNDS as u64 {
        let range = (r * per_round).min(calls)..((r + 1) * per_round).min(calls);
        for arm in &mut arms {
            arm.round(range.clone(), concurrency).await;
        }
    }
    let slow_first = (0..calls).filter(|&i| slow(i, 0)).count();
    println!(
        "{calls} calls per arm, {concurrency} at a time; {slow_first} first attempts slow ({} ms)",
        SLOW.as_millis()
    );
    println!("| arm | p50 (ms) | p99 (ms) | p99.9 (ms) | server requests per call |");
    println!("|---|---|---|---|---|");
    let mut p99 = [0.0; 2];
    for (i, arm) in arms.iter_mut().enumerate() {
        let [p50, p, p999, per_call] = arm.report();
        p99[i] = p;
        println!(
            "| {} | {p50:.2} | {p:.2} | {p999:.2} | {per_call:.3} |",
            arm.name
        );
    }
    println!("p99 without / with hedging: {:.1}x", p99[0] / p99[1]);
}
