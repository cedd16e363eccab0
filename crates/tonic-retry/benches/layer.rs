//! The retry layer's cost per unary call, against the raw tonic `Channel`
//! and against the design the gRPC team chose for grpc-rust's `tonic-xds`,
//! all in one run. A plain `main` (harness = false).
//!
//! Arms, each its own connection to one loopback server:
//!
//! * `raw`: the generated client over a `Channel`;
//! * `ours`: through a `RetryLayer` with `Say` idempotent (every call
//!   buffered for replay);
//! * `reference`: a `tower::retry::Retry` per call over a cloneable shared
//!   request body, with a small `tower::retry::Policy` that retries
//!   trailers-only statuses and connection errors (the design of
//!   `tonic-xds`'s retry layer, written here for the comparison);
//! * `sanitize`: the raw channel behind the `sanitize` guard alone, which
//!   every response through our layer passes;
//! * `metered` (feature `otel` only): the `ours` layer recording gRFC
//!   A66/A96 metrics on an OpenTelemetry `SdkMeterProvider` (aggregating;
//!   its in-memory exporter runs once a minute, so never during the run).
//!   Its p50 against `ours`, paired per process, is what the metrics add
//!   to a call; beside it the SDK's own six recordings timed alone.
//!
//! The parent runs `LAYER_BENCH_PROCESSES` (default 8) pairs of child
//! processes, because a process's memory layout moves a figure by about a
//! point: a sequential child on a current-thread runtime (one thread for
//! client and server: the layer's own CPU time per call, without
//! cross-thread wake-ups), its arms interleaved in blocks of 250 calls, the
//! order rotating; then a concurrent child on the multi-thread runtime, 32
//! tasks, raw, ours and reference in short bursts back to back. It reports
//! the p50 latency each arm adds to the raw call, median over processes,
//! and the median per-round concurrent-throughput ratio to raw.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tonic::client::GrpcService;
use tonic::transport::{Channel, Endpoint, Server};
use tonic::{Request, Response, Status};
use tonic_retry::layer::{MethodConfig, RetryLayer};
use tonic_retry::retrying::Retrying;
use tonic_retry_echo::{EchoClient, EchoReply, EchoRequest, EchoServer};
use tower::ServiceBuilder;

/// The server: `Say` echoes at once.
struct Echo;

#[tonic::async_trait]
impl tonic_retry_echo::Echo for Echo {
    async fn say(&self, req: Request<EchoRequest>) -> Result<Response<EchoReply>, Status> {
        Ok(Response::new(EchoReply {
            message: req.into_inner().message,
        }))
    }

    type RepeatStream = tokio_stream::Empty<Result<EchoReply, Status>>;

    async fn repeat(
        &self,
        _: Request<EchoRequest>,
    ) -> Result<Response<Self::RepeatStream>, Status> {
        Err(Status::unimplemented("the bench calls Say only"))
    }
}

/// The layer of the `ours` arm: the echo's `Say` retried, so every call is
/// buffered for replay (the cost measured).
fn ours_layer() -> RetryLayer {
    RetryLayer::new(Retrying::default()).method("/echo.Echo/Say", MethodConfig::idempotent())
}

mod layer {
    //! The parts of this benchmark in `benches/layer/`.
    pub mod reference;
}
use layer::reference::reference;

/// Processes per run (`LAYER_BENCH_PROCESSES`): each has its own memory
/// layout, so one process is one sample.
const PROCESSES: usize = 8;
/// Set in the children: `seq` or `conc`.
const CHILD: &str = "LAYER_BENCH_CHILD";
/// Sequential calls per arm (`LAYER_BENCH_SEQ`), interleaved in blocks.
const SEQ_CALLS: usize = 20_000;
const BLOCK: usize = 250;
const TASKS: usize = 32;
/// Concurrent rounds per process (`LAYER_BENCH_ROUNDS`): raw, ours and
/// reference bursts back to back.
const ROUNDS: usize = 9;
/// Calls per task in one burst.
const PAIR_CALLS_PER_TASK: usize = 100;
/// The arms of a sequential child, in the order of its `#sample` line.
#[cfg(not(feature = "otel"))]
const ARMS: &[&str] = &["raw", "ours", "reference", "sanitize"];
/// The arms of a sequential child, in the order of its `#sample` line
/// (then `sdk`, the SDK's recordings alone).
#[cfg(feature = "otel")]
const ARMS: &[&str] = &["raw", "ours", "reference", "sanitize", "metered"];

fn req() -> EchoRequest {
    EchoRequest {
        message: "00112233-4455-6677-8899-aabbccddeeff".into(),
        count: 0,
    }
}

/// The latency of one call.
async fn one_call<T>(client: &mut EchoClient<T>) -> Duration
where
    T: GrpcService<tonic::body::Body>,
    T::Error: Into<tonic::codegen::StdError>,
    T::ResponseBody: http_body::Body<Data = Bytes> + Send + 'static,
    <T::ResponseBody as http_body::Body>::Error: Into<tonic::codegen::StdError> + Send,
{
    let t = Instant::now();
    client.say(req()).await.expect("call");
    t.elapsed()
}

/// CPU time used so far by every thread of this process (client and
/// server alike), in ns, from the scheduler's own accounting.
fn cpu_ns() -> u64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("schedstat")).ok())
        .filter_map(|s| s.split(' ').next()?.parse::<u64>().ok())
        .sum()
}

/// `TASKS` concurrent callers, `per_task` calls each: (calls per second of
/// wall-clock time, calls per second of the process's CPU time). On a
/// shared host the second is far steadier: time the process spends
/// preempted by others counts in the first only.
async fn concurrent<T>(client: EchoClient<T>, per_task: usize) -> (f64, f64)
where
    T: GrpcService<tonic::body::Body> + Clone + Send + 'static,
    T::Future: Send,
    T::Error: Into<tonic::codegen::StdError>,
    T::ResponseBody: http_body::Body<Data = Bytes> + Send + 'static,
    <T::ResponseBody as http_body::Body>::Error: Into<tonic::codegen::StdError> + Send,
{
    let (start, cpu) = (Instant::now(), cpu_ns());
    let tasks: Vec<_> = (0..TASKS)
        .map(|_| {
            let mut c = client.clone();
            tokio::spawn(async move {
                for _ in 0..per_task {
                    c.say(req()).await.expect("call");
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.expect("task");
    }
    let calls = (TASKS * per_task) as f64;
    let cpu = cpu_ns().saturating_sub(cpu).max(1) as f64 / 1e9;
    (calls / start.elapsed().as_secs_f64(), calls / cpu)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

fn env_usize(name: &str) -> Option<usize> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

async fn serve() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    // TCP_NODELAY on the server too, as gRPC servers set it: without it
    // Nagle's algorithm meets the client's delayed ACK now and then.
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
            .add_service(EchoServer::new(Echo))
            .serve_with_incoming(incoming),
    );
    addr
}

fn channel(addr: SocketAddr) -> Channel {
    Endpoint::from_shared(format!("http://{addr}"))
        .expect("uri")
        .connect_lazy()
}

/// A sequential child: one `#sample` line with each arm's p50 in µs.
async fn sequential() {
    let addr = serve().await;
    let mut raw = EchoClient::new(channel(addr));
    let layer = ours_layer();
    let stats = layer.stats_handle();
    let mut ours = EchoClient::new(ServiceBuilder::new().layer(layer).service(channel(addr)));
    let mut refr = EchoClient::new(reference(channel(addr)));
    let mut sanitized = EchoClient::new(
        ServiceBuilder::new()
            .layer(tonic_retry::sanitize::SanitizeLayer)
            .service(channel(addr)),
    );
    #[cfg(feature = "otel")]
    let pipeline = tonic_retry_echo::metrics::Pipeline::new();
    #[cfg(feature = "otel")]
    let mut metered = EchoClient::new(
        ServiceBuilder::new()
            .layer(
                ours_layer().metrics(
                    tonic_retry::metrics::GrpcMetrics::from_provider(pipeline.provider())
                        .with_target("bench:1"),
                ),
            )
            .service(channel(addr)),
    );
    let mut call = async |arm: usize| match arm {
        0 => one_call(&mut raw).await,
        1 => one_call(&mut ours).await,
        2 => one_call(&mut refr).await,
        3 => one_call(&mut sanitized).await,
        #[cfg(feature = "otel")]
        4 => one_call(&mut metered).await,
        _ => unreachable!("arm {arm}"),
    };
    const WARM_UP: usize = 1000;
    for _ in 0..WARM_UP {
        for arm in 0..ARMS.len() {
            call(arm).await;
        }
    }
    let seq = env_usize("LAYER_BENCH_SEQ").unwrap_or(SEQ_CALLS);
    let mut lat = vec![Vec::<Duration>::new(); ARMS.len()];
    for round in 0..seq.div_ceil(BLOCK) {
        // Rotate the order each round, reversed every other cycle, so every
        // arm samples the same stretches of the host's noise.
        let mut order: Vec<usize> = (0..ARMS.len()).collect();
        order.rotate_left(round % ARMS.len());
        if (round / ARMS.len()) % 2 == 1 {
            order.reverse();
        }
        for arm in order {
            for _ in 0..BLOCK {
                lat[arm].push(call(arm).await);
            }
        }
    }
    // Every call must have succeeded at once, or the arms did different work.
    let s = stats.snapshot();
    assert_eq!(s.attempts, s.calls, "a retry in the bench: {s:?}");
    let p50 = |v: &mut Vec<Duration>| {
        v.sort();
        v[v.len() / 2].as_secs_f64() * 1e6
    };
    #[allow(unused_mut)] // without `otel`, nothing follows the arms
    let mut fields: Vec<String> = ARMS
        .iter()
        .zip(lat.iter_mut())
        .map(|(name, v)| format!("{name}={:.3}", p50(v)))
        .collect();
    #[cfg(feature = "otel")]
    {
        // The metered arm recorded every call, under one label set.
        let started = pipeline.read();
        let started = started.of("grpc.client.attempt.started");
        assert_eq!(started.len(), 1, "one label set: {started:?}");
        assert_eq!(started[0].sum as usize, WARM_UP + lat[4].len());
        fields.push(format!("sdk={:.3}", sdk_floor(&pipeline) * 1e6));
    }
    println!("#sample {}", fields.join(" "));
}

/// The SDK's own share of a metered call: what the six recordings of a
/// unary call (the attempt counter, three attempt histograms, the call's
/// duration and delay) cost with the same labels, without a call around
/// them; seconds per call, the mean over 20 000.
#[cfg(feature = "otel")]
fn sdk_floor(pipeline: &tonic_retry_echo::metrics::Pipeline) -> f64 {
    use opentelemetry::KeyValue;
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
    let method: std::sync::Arc<str> = "echo.Echo/Say".into();
    let target: std::sync::Arc<str> = "bench:1".into();
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

/// A concurrent child: one `#rounds` line of ours/raw and reference/raw
/// throughput ratios, one pair per round (the three arms back to back, the
/// order rotating).
async fn concurrency() {
    let addr = serve().await;
    let raw = EchoClient::new(channel(addr));
    let ours = EchoClient::new(
        ServiceBuilder::new()
            .layer(ours_layer())
            .service(channel(addr)),
    );
    let refr = EchoClient::new(reference(channel(addr)));
    concurrent(raw.clone(), PAIR_CALLS_PER_TASK).await;
    concurrent(ours.clone(), PAIR_CALLS_PER_TASK).await;
    concurrent(refr.clone(), PAIR_CALLS_PER_TASK).await;
    let mut rounds = vec![];
    for round in 0..env_usize("LAYER_BENCH_ROUNDS").unwrap_or(ROUNDS) {
        let mut order = [0usize, 1, 2];
        order.rotate_left(round % 3);
        let mut rate = [(0.0, 0.0); 3];
        for arm in order {
            rate[arm] = match arm {
                0 => concurrent(raw.clone(), PAIR_CALLS_PER_TASK).await,
                1 => concurrent(ours.clone(), PAIR_CALLS_PER_TASK).await,
                _ => concurrent(refr.clone(), PAIR_CALLS_PER_TASK).await,
            };
        }
        rounds.push(format!(
            "{:.0}:{:.4}:{:.4}:{:.4}:{:.4}",
            rate[0].0,
            rate[1].0 / rate[0].0,
            rate[2].0 / rate[0].0,
            rate[1].1 / rate[0].1,
            rate[2].1 / rate[0].1
        ));
    }
    println!("#rounds {}", rounds.join(","));
}

fn child_output(kind: &str) -> String {
    let exe = std::env::current_exe().expect("current exe");
    let out = std::process::Command::new(exe)
        .env(CHILD, kind)
        .output()
        .expect("run a bench process");
    assert!(out.status.success(), "bench process failed: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split(' ').take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

fn parent(n: usize) {
    let mut added = vec![Vec::<f64>::new(); ARMS.len()];
    // With `otel`: (metered - ours, the SDK's recordings alone) per process.
    #[cfg(feature = "otel")]
    let mut metrics: (Vec<f64>, Vec<f64>) = Default::default();
    let mut raw = vec![];
    let mut rounds: Vec<[f64; 5]> = vec![];
    println!("load average before: {}", load_average());
    for i in 0..n {
        let text = child_output("seq");
        let line = text
            .lines()
            .find_map(|l| l.strip_prefix("#sample "))
            .expect("a #sample line");
        let p50: Vec<f64> = line
            .split(' ')
            .map(|kv| kv.split_once('=').expect("k=v").1.parse().expect("number"))
            .collect();
        raw.push(p50[0]);
        for arm in 1..ARMS.len() {
            added[arm].push(p50[arm] - p50[0]);
        }
        #[cfg(feature = "otel")]
        {
            println!(
                "process {}/{n}: metrics add {:+.2} us to ours, the SDK's six recordings alone {:.2} us",
                i + 1,
                p50[4] - p50[1],
                p50[5]
            );
            metrics.0.push(p50[4] - p50[1]);
            metrics.1.push(p50[5]);
        }
        let text = child_output("conc");
        let line = text
            .lines()
            .find_map(|l| l.strip_prefix("#rounds "))
            .expect("a #rounds line");
        let mut mine = vec![];
        for r in line.split(',') {
            let v: Vec<f64> = r.split(':').map(|x| x.parse().expect("number")).collect();
            mine.push([v[0], v[1], v[2], v[3], v[4]]);
        }
        let col = |v: &[[f64; 5]], k: usize| median(v.iter().map(|m| m[k]).collect());
        println!(
            "process {}/{n}: raw p50 {:.1} us; added: ours {:+.2} us, reference {:+.2} us, raw+sanitize {:+.2} us; concurrent: raw {:.0} calls/s, ours/raw {:.3} (per CPU s {:.3}), reference/raw {:.3} ({:.3}); load {}",
            i + 1,
            p50[0],
            p50[1] - p50[0],
            p50[2] - p50[0],
            p50[3] - p50[0],
            col(&mine, 0),
            col(&mine, 1),
            col(&mine, 3),
            col(&mine, 2),
            col(&mine, 4),
            load_average()
        );
        rounds.extend(mine);
    }
    let spread = |v: &[f64]| {
        let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        format!("{lo:+.2} .. {hi:+.2}")
    };
    println!("unary Say over loopback, {n} processes; p50 added to the raw call (one thread):");
    println!("  raw p50: median {:.1} us", median(raw));
    for arm in 1..ARMS.len() {
        println!(
            "  {:<12} median {:+.2} us   (range {})",
            ARMS[arm],
            median(added[arm].clone()),
            spread(&added[arm])
        );
    }
    let ours_vs_ref: Vec<f64> = added[1].iter().zip(&added[2]).map(|(o, r)| o - r).collect();
    println!(
        "  ours - reference, paired per process: median {:+.2} us   (range {})",
        median(ours_vs_ref.clone()),
        spread(&ours_vs_ref)
    );
    #[cfg(feature = "otel")]
    println!(
        "  metered - ours, paired per process (A66/A96 metrics on an SDK pipeline): median {:+.2} us   (range {}); \
         the SDK's six recordings alone: median {:.2} us (range {:.2} .. {:.2})",
        median(metrics.0.clone()),
        spread(&metrics.0),
        median(metrics.1.clone()),
        metrics.1.iter().copied().fold(f64::INFINITY, f64::min),
        metrics.1.iter().copied().fold(f64::NEG_INFINITY, f64::max)
    );
    let col = |k: usize| median(rounds.iter().map(|m| m[k]).collect());
    println!(
        "concurrent ({TASKS} tasks, multi-thread runtime), {} rounds, medians of per-round ratios:",
        rounds.len()
    );
    println!(
        "  wall clock:   ours/raw {:.3}, reference/raw {:.3}   (raw {:.0} calls/s)",
        col(1),
        col(2),
        col(0)
    );
    println!(
        "  per CPU time: ours/raw {:.3}, reference/raw {:.3}",
        col(3),
        col(4)
    );
    println!("load average after: {}", load_average());
}

fn main() {
    match std::env::var(CHILD).as_deref() {
        Ok("seq") => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
            .block_on(sequential()),
        Ok("conc") => tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .expect("runtime")
            .block_on(async { tokio::spawn(concurrency()).await.expect("bench task") }),
        _ => parent(env_usize("LAYER_BENCH_PROCESSES").unwrap_or(PROCESSES)),
    }
}
