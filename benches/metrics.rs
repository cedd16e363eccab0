//! What metrics (feature `otel`) cost, in one run: the retry layer's unary
//! call with gRFC A66/A96 recording on against the same layer with it off,
//! and a large query through a session recording on a real SDK pipeline
//! against one recording on the no-op global meter. A plain `main`
//! (harness = false).
//!
//! * Layer: `METRICS_BENCH_PROCESSES` (default 6) child processes, each a
//!   current-thread runtime (client and server on one thread: the layer's
//!   own CPU time), `RetryLayer::spark_connect` over its own loopback
//!   connection twice, one arm with `.metrics(..)` on an `SdkMeterProvider`
//!   (aggregating; its in-memory exporter runs once a minute, so never
//!   during the run); 20 000 `Config` calls per arm after 1 000 warm-up
//!   calls, interleaved in blocks of 250, the order alternating. One
//!   process is one sample: the p50 the metrics add, median over processes.
//! * Query: `METRICS_BENCH_ROWS` rows (default 10 000 000, 0 to skip) of
//!   `range(n)` from the embedded server, `METRICS_BENCH_QUERY_RUNS`
//!   (default 3) runs per arm, alternating; the median time per arm.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use spark_connect_retry::layer::{RetryLayer, SparkConnectLayer};
use spark_connect_retry::proto::spark_connect_service_client::SparkConnectServiceClient;
use spark_connect_retry::proto::{ConfigRequest, ConfigResponse};
use spark_connect_retry::retrying::Retrying;
use spark_connect_retry::session::SparkSession;
use spark_connect_testkit::{SparkConnectService, SparkConnectServiceServer, TestServer};
use tonic::transport::{Channel, Endpoint, Server};
use tonic::{Request, Response, Status};
use tonic_retry::metrics::GrpcMetrics;
use tonic_retry_echo::metrics::Pipeline;
use tower::ServiceBuilder;

const CHILD: &str = "METRICS_BENCH_CHILD";
const PROCESSES: usize = 6;
const CALLS: usize = 20_000;
const BLOCK: usize = 250;

struct Echo;

#[tonic::async_trait]
impl SparkConnectService for Echo {
    async fn config(
        &self,
        req: Request<ConfigRequest>,
    ) -> Result<Response<ConfigResponse>, Status> {
        Ok(Response::new(ConfigResponse {
            session_id: req.into_inner().session_id,
            ..Default::default()
        }))
    }
}

fn env_usize(name: &str) -> Option<usize> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

async fn serve() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let incoming = tokio_stream::StreamExt::map(
        tokio_stream::wrappers::TcpListenerStream::new(listener),
        |conn| {
            conn.inspect(|s| {
                s.set_nodelay(true).expect("TCP_NODELAY");
            })
        },
    );
    tokio::spawn(
        Server::builder()
            .add_service(SparkConnectServiceServer::new(Echo))
            .serve_with_incoming(incoming),
    );
    addr
}

fn channel(addr: SocketAddr) -> Channel {
    Endpoint::from_shared(format!("http://{addr}"))
        .expect("uri")
        .connect_lazy()
}

/// One child: prints `#sample off=P50 on=P50` (µs).
async fn layer_child() {
    let addr = serve().await;
    let pipeline = Pipeline::new();
    let off = RetryLayer::spark_connect(Retrying::default());
    let on = RetryLayer::spark_connect(Retrying::default())
        .metrics(GrpcMetrics::from_provider(pipeline.provider()).with_target("bench:1"));
    let mut clients = [
        SparkConnectServiceClient::new(ServiceBuilder::new().layer(off).service(channel(addr))),
        SparkConnectServiceClient::new(ServiceBuilder::new().layer(on).service(channel(addr))),
    ];
    let req = || ConfigRequest {
        session_id: "00112233-4455-6677-8899-aabbccddeeff".into(),
        ..Default::default()
    };
    for _ in 0..1000 {
        for c in &mut clients {
            c.config(req()).await.expect("call");
        }
    }
    let calls = env_usize("METRICS_BENCH_CALLS").unwrap_or(CALLS);
    let mut lat: [Vec<Duration>; 2] = Default::default();
    for round in 0..calls.div_ceil(BLOCK) {
        let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
        for arm in order {
            for _ in 0..BLOCK {
                let t = Instant::now();
                clients[arm].config(req()).await.expect("call");
                lat[arm].push(t.elapsed());
            }
        }
    }
    // The metrics arm recorded every call.
    let recorded = pipeline.read();
    let started = recorded.of("grpc.client.attempt.started");
    assert_eq!(started.len(), 1, "one label set: {started:?}");
    assert_eq!(started[0].sum as usize, 1000 + lat[1].len());
    let p50 = |v: &mut Vec<Duration>| {
        v.sort();
        v[v.len() / 2].as_secs_f64() * 1e6
    };
    println!(
        "#sample off={:.3} on={:.3} sdk={:.3}",
        p50(&mut lat[0]),
        p50(&mut lat[1]),
        sdk_floor(&pipeline) * 1e6
    );
}

/// The SDK's own share: what the six recordings of a unary call (the
/// attempt counter, three attempt histograms, the call's duration and
/// delay) cost with the same labels, without a call around them; seconds
/// per call, the mean over 20 000.
fn sdk_floor(pipeline: &Pipeline) -> f64 {
    use opentelemetry::KeyValue;
    use std::sync::Arc;
    let meter = pipeline.meter();
    let counter = meter.u64_counter("floor.started").build();
    let latency = [
        meter.f64_histogram("floor.attempt").build(),
        meter.f64_histogram("floor.call").build(),
        meter.f64_histogram("floor.delay").build(),
    ];
    let sizes = [
        meter.u64_histogram("floor.sent").build(),
        meter.u64_histogram("floor.rcvd").build(),
    ];
    let method: Arc<str> = Arc::from("spark.connect.SparkConnectService/Config");
    let target: Arc<str> = Arc::from("bench:1");
    let base = [
        KeyValue::new("grpc.method", method),
        KeyValue::new("grpc.target", target),
    ];
    let with_status = || {
        [
            base[0].clone(),
            base[1].clone(),
            KeyValue::new("grpc.status", "OK"),
        ]
    };
    let n = 20_000;
    let t = Instant::now();
    for i in 0..n {
        counter.add(1, &base);
        let labels = with_status();
        latency[0].record(i as f64 * 1e-9, &labels);
        sizes[0].record(40, &labels);
        sizes[1].record(40, &labels);
        latency[1].record(i as f64 * 1e-9, &with_status());
        latency[2].record(0.0, &base);
    }
    t.elapsed().as_secs_f64() / f64::from(n)
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split(' ').take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

fn layer_parent(n: usize) {
    let exe = std::env::current_exe().expect("current exe");
    let (mut added, mut off, mut sdk) = (vec![], vec![], vec![]);
    println!("load average before: {}", load_average());
    for i in 0..n {
        let out = std::process::Command::new(&exe)
            .env(CHILD, "layer")
            .output()
            .expect("run a bench process");
        assert!(out.status.success(), "bench process failed: {out:?}");
        let text = String::from_utf8_lossy(&out.stdout);
        let line = text
            .lines()
            .find_map(|l| l.strip_prefix("#sample "))
            .expect("a #sample line");
        let v: Vec<f64> = line
            .split(' ')
            .map(|kv| kv.split_once('=').expect("k=v").1.parse().expect("number"))
            .collect();
        println!(
            "process {}/{n}: off p50 {:.2} us, on p50 {:.2} us, added {:+.2} us; the SDK's six recordings alone {:.2} us; load {}",
            i + 1,
            v[0],
            v[1],
            v[1] - v[0],
            v[2],
            load_average()
        );
        off.push(v[0]);
        sdk.push(v[2]);
        added.push(v[1] - v[0]);
    }
    let lo = added.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = added.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    println!(
        "layer, unary Config over loopback, {n} processes: p50 without metrics {:.1} us; \
         metrics add {:+.2} us (median; range {lo:+.2} .. {hi:+.2}), of which the SDK's \
         six recordings alone {:.2} us",
        median(off),
        median(added.clone()),
        median(sdk)
    );
}

/// Read `range(rows)` to the end; the time it took.
async fn query(spark: &SparkSession, rows: usize) -> Duration {
    let t = Instant::now();
    let mut stream = spark
        .sql(&format!("SELECT id FROM range({rows})"))
        .await
        .expect("sql");
    let mut n = 0;
    while let Some(b) = stream.next_batch().await {
        n += b.expect("batch").num_rows();
    }
    assert_eq!(n, rows);
    t.elapsed()
}

async fn query_bench(rows: usize) {
    let server = TestServer::builder()
        .rows_per_batch(8192)
        .start()
        .await
        .expect("server");
    let pipeline = Pipeline::new();
    // Off: the no-op global meter (no provider set); on: a real SDK.
    let off = SparkSession::builder()
        .remote(server.remote())
        .build()
        .expect("session");
    let on = SparkSession::builder()
        .remote(server.remote())
        .meter(pipeline.meter())
        .build()
        .expect("session");
    query(&off, 100_000).await;
    query(&on, 100_000).await;
    let runs = env_usize("METRICS_BENCH_QUERY_RUNS").unwrap_or(3);
    let mut times: [Vec<f64>; 2] = Default::default();
    for run in 0..runs {
        let order = if run % 2 == 0 { [0, 1] } else { [1, 0] };
        for arm in order {
            let spark = if arm == 0 { &off } else { &on };
            times[arm].push(query(spark, rows).await.as_secs_f64());
        }
    }
    let recorded = pipeline.read();
    let counted: f64 = recorded
        .of("spark_connect.client.result.rows")
        .iter()
        .map(|p| p.sum)
        .sum();
    assert_eq!(counted as usize, 100_000 + runs * rows, "every row counted");
    println!(
        "query, {rows} rows, {runs} runs per arm alternating: off {:?} s, on {:?} s; medians off {:.3} s, on {:.3} s (on/off {:.3})",
        times[0],
        times[1],
        median(times[0].clone()),
        median(times[1].clone()),
        median(times[1].clone()) / median(times[0].clone())
    );
}

fn main() {
    if std::env::var(CHILD).as_deref() == Ok("layer") {
        return tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
            .block_on(layer_child());
    }
    layer_parent(env_usize("METRICS_BENCH_PROCESSES").unwrap_or(PROCESSES));
    let rows = env_usize("METRICS_BENCH_ROWS").unwrap_or(10_000_000);
    if rows > 0 {
        tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .expect("runtime")
            .block_on(query_bench(rows));
    }
    println!("load average after: {}", load_average());
}
