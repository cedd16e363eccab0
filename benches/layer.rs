//! Unary throughput and p50 latency through `RetryLayer` versus the raw
//! channel, on loopback, in one run. A plain `main` (harness = false).
//!
//! The design is paired, because this class of host drifts by more than the
//! effect measured: sequential calls are interleaved in short blocks across
//! the arms (raw, layer, raw + sanitize guard, layer passing `Config` through
//! without replay), and concurrent throughput is
//! measured in short raw/layer bursts whose per-pair ratios are reported.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use spark_connect_retry::layer::{MethodConfig, RetryLayer};
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

/// Processes per bench run (`LAYER_BENCH_PROCESSES`): each process has its
/// own memory layout (ASLR), and the layout moves the layer's added p50 by
/// about a point from one process to the next (the same binary with ASLR off
/// repeats within 0.2 points), so one process is one sample.
const PROCESSES: usize = 8;
/// Concurrent pairs per process when several processes run.
const PAIRS_PER_PROCESS: usize = 5;
/// Set in the children of a multi-process run.
const CHILD: &str = "LAYER_BENCH_CHILD";

/// Sequential calls per arm, interleaved in blocks across the three arms.
const SEQ_CALLS: usize = 20_000;
/// Calls per arm in one block of the sequential part.
const BLOCK: usize = 250;
const TASKS: usize = 32;
/// Calls per task in one concurrent burst (the `LAYER_BENCH_ONLY` profiles).
const CALLS_PER_TASK: usize = 250;
/// Concurrent bursts per arm, paired raw/layer, the order alternating.
const PAIRS: usize = 21;
/// Calls per task in one paired burst: short, so both arms of a pair see the
/// same state of the host.
const PAIR_CALLS_PER_TASK: usize = 40;

fn req() -> ConfigRequest {
    ConfigRequest {
        session_id: "00112233-4455-6677-8899-aabbccddeeff".into(),
        ..Default::default()
    }
}

/// The latency of one call.
async fn one_call<T>(client: &mut SparkConnectServiceClient<T>) -> Duration
where
    T: GrpcService<tonic::body::Body>,
    T::Error: Into<tonic::codegen::StdError>,
    T::ResponseBody: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    <T::ResponseBody as http_body::Body>::Error: Into<tonic::codegen::StdError> + Send,
{
    let t = Instant::now();
    client.config(req()).await.expect("call");
    t.elapsed()
}

/// (calls per second of call time, p50 latency in µs) of one arm's samples.
fn summarize(mut lat: Vec<Duration>) -> (f64, f64) {
    let total: Duration = lat.iter().sum();
    lat.sort();
    (
        lat.len() as f64 / total.as_secs_f64(),
        lat[lat.len() / 2].as_secs_f64() * 1e6,
    )
}

/// Calls per second of `TASKS` concurrent callers, `per_task` calls each.
async fn concurrent<T>(client: SparkConnectServiceClient<T>, per_task: usize) -> f64
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
                for _ in 0..per_task {
                    c.config(req()).await.expect("call");
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.expect("task");
    }
    (TASKS * per_task) as f64 / start.elapsed().as_secs_f64()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

fn env_usize(name: &str) -> Option<usize> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

/// Run the bench in `n` child processes, one after another, and summarize
/// the per-process figures: mean, standard deviation, median and range.
fn parent(n: usize) {
    let exe = std::env::current_exe().expect("current exe");
    let mut samples: Vec<Vec<(String, f64)>> = vec![];
    let mut pair_ratios = vec![];
    for i in 0..n {
        let out = std::process::Command::new(&exe)
            .args(std::env::args_os().skip(1))
            .env(CHILD, "1")
            .output()
            .expect("run a bench process");
        assert!(out.status.success(), "bench process {i} failed: {out:?}");
        let text = String::from_utf8_lossy(&out.stdout);
        let line = text
            .lines()
            .find_map(|l| l.strip_prefix("#sample "))
            .expect("a #sample line");
        let mut fields = vec![];
        for kv in line.split(' ') {
            let (k, v) = kv.split_once('=').expect("key=value");
            if k == "pairs" {
                pair_ratios.extend(v.split(',').filter_map(|x| x.parse::<f64>().ok()));
            } else {
                fields.push((k.to_string(), v.parse::<f64>().expect("number")));
            }
        }
        let get = |k: &str| fields.iter().find(|f| f.0 == k).map_or(f64::NAN, |f| f.1);
        println!(
            "process {}/{n}: raw p50 {:.1} us; layer p50 {:+.1} %, throughput {:.3}; raw+sanitize p50 {:+.1} %, {:.3}; passed through p50 {:+.1} %",
            i + 1,
            get("raw_p50_us"),
            get("layer_p50"),
            get("layer_paired"),
            get("sanitize_p50"),
            get("sanitize_paired"),
            get("passthru_p50"),
        );
        samples.push(fields);
    }
    let column = |k: &str| -> Vec<f64> {
        samples
            .iter()
            .filter_map(|f| f.iter().find(|x| x.0 == k).map(|x| x.1))
            .collect()
    };
    let describe = |v: Vec<f64>, unit: &str, prec: usize| {
        let m = v.iter().sum::<f64>() / v.len() as f64;
        let sd = (v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (v.len() as f64 - 1.0).max(1.0))
            .sqrt();
        let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        format!(
            "mean {m:.prec$}{unit} (sd {sd:.prec$}, se {:.prec$}), median {:.prec$}{unit}, range {lo:.prec$} .. {hi:.prec$}",
            sd / (v.len() as f64).sqrt(),
            median(v.clone())
        )
    };
    println!("unary Config over loopback; {n} processes (one memory layout each)");
    for (label, key, unit, prec) in [
        ("layer p50 added", "layer_p50", " %", 2),
        ("layer sequential throughput", "layer_paired", "", 3),
        ("raw+sanitize p50 added", "sanitize_p50", " %", 2),
        ("raw+sanitize throughput", "sanitize_paired", "", 3),
        ("layer passed through p50 added", "passthru_p50", " %", 2),
    ] {
        println!(
            "{:<32}{}",
            format!("{label}:"),
            describe(column(key), unit, prec)
        );
    }
    println!(
        "concurrent ({TASKS} tasks), {} pairs over all processes: median layer/raw ratio {:.3}",
        pair_ratios.len(),
        median(pair_ratios)
    );
}

fn main() {
    let processes = env_usize("LAYER_BENCH_PROCESSES").unwrap_or(PROCESSES);
    let child = std::env::var_os(CHILD).is_some();
    if processes > 1 && !child && std::env::var_os("LAYER_BENCH_ONLY").is_none() {
        return parent(processes);
    }
    // `LAYER_BENCH_RT=current`: one thread for client and server, which
    // takes cross-thread wake-ups out of the comparison.
    let rt = match std::env::var("LAYER_BENCH_RT").as_deref() {
        Ok("current") => tokio::runtime::Builder::new_current_thread(),
        _ => tokio::runtime::Builder::new_multi_thread(),
    }
    .enable_all()
    .build()
    .expect("runtime");
    let bench = async move {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr: SocketAddr = listener.local_addr().expect("addr");
        // TCP_NODELAY on the server's side too, as gRPC servers set it (the
        // client's `Endpoint` sets it by default). Without it, Nagle's
        // algorithm meets the client's delayed ACK now and then: 40 ms
        // stalls, a handful per run in either arm, and in some runs many in
        // one arm (its throughput ratio fell to 0.5–0.67 while its p50 did
        // not move).
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
        let channel = |addr: SocketAddr| -> Channel {
            Endpoint::from_shared(format!("http://{addr}"))
                .expect("uri")
                .connect_lazy()
        };
        // Separate channels (connections) so neither run warms the other's.
        let mut raw = SparkConnectServiceClient::new(channel(addr));
        let layer = RetryLayer::spark_connect(Retrying::default());
        let stats = layer.stats();
        let mut wrapped = SparkConnectServiceClient::new(
            ServiceBuilder::new().layer(layer).service(channel(addr)),
        );
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
        // A fourth arm: the layer with `Config` passed through (no buffering,
        // no retries): the layer's fixed cost per call without the replay.
        let passthrough_layer = RetryLayer::spark_connect(Retrying::default()).method(
            "/spark.connect.SparkConnectService/Config",
            MethodConfig::passthrough(),
        );
        let mut passthrough = SparkConnectServiceClient::new(
            ServiceBuilder::new()
                .layer(passthrough_layer)
                .service(channel(addr)),
        );
        for _ in 0..1000 {
            passthrough.config(req()).await.expect("warm");
        }
        // `LAYER_BENCH_ONLY=raw|layer|sanitize`: one arm, sequential calls only,
        // (or `raw-concurrent|layer-concurrent`)
        // for profilers and instruction counters (run it once per arm, compare).
        if let Ok(arm) = std::env::var("LAYER_BENCH_ONLY") {
            let calls: usize = std::env::var("LAYER_BENCH_CALLS")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(20_000);
            let start = Instant::now();
            // `raw-concurrent` / `layer-concurrent`: TASKS callers, `calls` in total.
            if let Some(arm) = arm.strip_suffix("-concurrent") {
                let rounds = calls.div_ceil(TASKS * CALLS_PER_TASK);
                for _ in 0..rounds {
                    match arm {
                        "raw" => concurrent(raw.clone(), CALLS_PER_TASK).await,
                        "layer" => concurrent(wrapped.clone(), CALLS_PER_TASK).await,
                        other => {
                            panic!("LAYER_BENCH_ONLY={other}-concurrent: expected raw or layer")
                        }
                    };
                }
                println!(
                    "{arm}-concurrent: {} calls in {:.2?}",
                    rounds * TASKS * CALLS_PER_TASK,
                    start.elapsed()
                );
                return;
            }
            for _ in 0..calls {
                match arm.as_str() {
                    "raw" => raw.config(req()).await.map(drop),
                    "layer" => wrapped.config(req()).await.map(drop),
                    "sanitize" => sanitized.config(req()).await.map(drop),
                    "passthrough" => passthrough.config(req()).await.map(drop),
                    other => panic!(
                        "LAYER_BENCH_ONLY={other}: expected raw, layer, sanitize or passthrough"
                    ),
                }
                .expect("call");
            }
            println!("{arm}: {calls} calls in {:.2?}", start.elapsed());
            return;
        }
        // Sequential: blocks of `block` calls per arm, the order of the three
        // arms changing every round (all six permutations), so every arm
        // samples the same stretches of the host's noise. Blocks rather than
        // single calls, so each arm runs with its own code and data in cache,
        // as an application calling through one client does.
        // (`LAYER_BENCH_BLOCK=1` interleaves call by call.)
        let block: usize = std::env::var("LAYER_BENCH_BLOCK")
            .ok()
            .and_then(|v| v.parse().ok())
            .filter(|&b| b > 0)
            .unwrap_or(BLOCK);
        let seq_calls = env_usize("LAYER_BENCH_SEQ").unwrap_or(SEQ_CALLS);
        let pairs =
            env_usize("LAYER_BENCH_PAIRS").unwrap_or(if child { PAIRS_PER_PROCESS } else { PAIRS });
        let mut lat: [Vec<Duration>; 4] = Default::default();
        for round in 0..seq_calls.div_ceil(block) {
            // Rotate the order each round, and reverse it every other cycle.
            let mut order = [0usize, 1, 2, 3];
            order.rotate_left(round % 4);
            if (round / 4) % 2 == 1 {
                order.reverse();
            }
            for arm in order {
                for _ in 0..block {
                    let d = match arm {
                        0 => one_call(&mut raw).await,
                        1 => one_call(&mut wrapped).await,
                        2 => one_call(&mut sanitized).await,
                        _ => one_call(&mut passthrough).await,
                    };
                    lat[arm].push(d);
                }
            }
        }
        if std::env::var_os("LAYER_BENCH_PERCENTILES").is_some() {
            for (name, v) in ["raw", "layer", "sanitize", "passthru"].iter().zip(&lat) {
                let mut v = v.clone();
                v.sort();
                let q = |p: f64| v[((v.len() - 1) as f64 * p) as usize].as_secs_f64() * 1e6;
                let mean = v.iter().sum::<Duration>().as_secs_f64() * 1e6 / v.len() as f64;
                println!(
                    "{name:>8}: p10 {:.1}  p25 {:.1}  p50 {:.1}  p75 {:.1}  p90 {:.1}  p99 {:.1}  p99.9 {:.1}  max {:.1}  mean {mean:.1} us",
                    q(0.10),
                    q(0.25),
                    q(0.5),
                    q(0.75),
                    q(0.9),
                    q(0.99),
                    q(0.999),
                    q(1.0)
                );
            }
        }
        // Throughput as the median over rounds of the paired per-block
        // ratio (raw block time / arm block time): blocks of one round run
        // back to back, so the pair shares the host's state, and a stall in
        // one block cannot move the median the way it moves a mean.
        let paired = |arm: usize| {
            let blocks = |a: usize| lat[a].chunks(block).map(|c| c.iter().sum::<Duration>());
            median(
                blocks(0)
                    .zip(blocks(arm))
                    .map(|(raw, other)| raw.as_secs_f64() / other.as_secs_f64())
                    .collect(),
            )
        };
        let (paired_layer, paired_sanitize) = (paired(1), paired(2));
        let [r, l, z, t] = lat.map(summarize);
        // Concurrent: short bursts in pairs, order alternating; the median of
        // the per-pair ratios.
        let (mut rc, mut lc, mut ratios) = (vec![], vec![], vec![]);
        for pair in 0..pairs {
            let (a, b) = if pair % 2 == 0 {
                let a = concurrent(raw.clone(), PAIR_CALLS_PER_TASK).await;
                (a, concurrent(wrapped.clone(), PAIR_CALLS_PER_TASK).await)
            } else {
                let b = concurrent(wrapped.clone(), PAIR_CALLS_PER_TASK).await;
                (concurrent(raw.clone(), PAIR_CALLS_PER_TASK).await, b)
            };
            rc.push(a);
            lc.push(b);
            ratios.push(b / a);
        }
        println!(
            "unary Config over loopback; {seq_calls} sequential calls per arm, interleaved in blocks of {block}"
        );
        println!(
            "sequential: raw {:>8.0} calls/s  layer {:>8.0} calls/s  ratio {:.3}   (raw+sanitize {:>8.0} calls/s, ratio {:.3})",
            r.0,
            l.0,
            l.0 / r.0,
            z.0,
            z.0 / r.0
        );
        println!(
            "sequential, median of per-round paired ratios: layer {paired_layer:.3}   (raw+sanitize {paired_sanitize:.3})"
        );
        println!(
            "p50 latency: raw {:>7.1} us  layer {:>7.1} us  added {:+.1} %   (raw+sanitize {:>7.1} us, {:+.1} %)",
            r.1,
            l.1,
            (l.1 / r.1 - 1.0) * 100.0,
            z.1,
            (z.1 / r.1 - 1.0) * 100.0
        );
        println!(
            "layer with Config passed through (no replay): {:>8.0} calls/s, p50 {:>7.1} us, added {:+.1} %",
            t.0,
            t.1,
            (t.1 / r.1 - 1.0) * 100.0
        );
        println!(
            "concurrent ({TASKS} tasks x {PAIR_CALLS_PER_TASK} calls, {pairs} pairs): raw {:>8.0} calls/s  layer {:>8.0} calls/s  median pair ratio {:.3}",
            median(rc),
            median(lc),
            median(ratios.clone())
        );
        // Every call must have succeeded on its first attempt, or the arms
        // did not do the same work.
        let s = stats.snapshot();
        println!(
            "layer stats: {} calls, {} attempts, {} retries",
            s.calls, s.attempts, s.retries
        );
        // For the parent of a multi-process run.
        let pct = |x: f64| (x / r.1 - 1.0) * 100.0;
        println!(
            "#sample raw_p50_us={:.2} layer_p50={:.3} layer_paired={:.4} sanitize_p50={:.3} sanitize_paired={:.4} passthru_p50={:.3} pairs={}",
            r.1,
            pct(l.1),
            paired_layer,
            pct(z.1),
            paired_sanitize,
            pct(t.1),
            ratios
                .iter()
                .map(|x| format!("{x:.4}"))
                .collect::<Vec<_>>()
                .join(",")
        );
    };
    // The callers run as a task on the runtime's workers, as application
    // code does. `LAYER_BENCH_CALLER=block_on` drives them from the main
    // thread instead: on this 2-vCPU host that third thread added ~20 µs to
    // the raw p50 and doubled the layer's added p50 (docs/layer-bench.md).
    if std::env::var("LAYER_BENCH_CALLER").as_deref() == Ok("block_on") {
        rt.block_on(bench);
    } else {
        rt.block_on(async { tokio::spawn(bench).await.expect("bench task") });
    }
}
