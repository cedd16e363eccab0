//! End-to-end stream benchmarks against the embedded `TestServer` on loopback.
//!
//! 1. Throughput: a `range` result read through [`ReattachableExecution`]
//!    versus the raw generated client's `ExecutePlan` stream (same request,
//!    reattach option included, so the server does the same work). The two
//!    alternate A/B several times in one process and the medians are compared.
//! 2. Cut-to-next-delivery latency: a TCP reset mid-stream, the default policy
//!    (initial backoff 50 ms), real time. Reported two ways, see `latency`.
//! 3. The per-response box: `ReattachableExecution::poll_next` boxes one
//!    future (about 4 KiB) per response. The same pattern is measured against
//!    awaiting the stream directly, interleaved: in memory (the box alone) and
//!    over the embedded server with small batches (its share of a response).
//!
//! `cargo bench --bench stream` (optional arguments:
//! `--rows N`, `--rounds N`, `--reps N`, `--box-items N`, and `--only
//! throughput|latency|box` to run one part).

use std::future::Future;
use std::mem::MaybeUninit;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context as TaskContext, Poll};
use std::time::{Duration, Instant};

use spark_connect_retry::proto::execute_plan_request::{RequestOption, request_option};
use spark_connect_retry::proto::execute_plan_response::ResponseType;
use spark_connect_retry::proto::spark_connect_service_client::SparkConnectServiceClient;
use spark_connect_retry::proto::{
    self, ExecutePlanRequest, Plan, Relation, ReleaseExecuteRequest, release_execute_request,
};
use spark_connect_retry::reattach::{ReattachOptions, ReattachableExecution};
use spark_connect_retry::retrying::PySparkRetrying;
use spark_connect_retry::retrying::Retrying;
use spark_connect_retry::transport::spark_client;
use spark_connect_testkit::{Fault, Rpc, TestServer};
use tokio_stream::{Stream, StreamExt as _};
use tonic::transport::Channel;
use tracing_subscriber::layer::{Context, SubscriberExt};

const SESSION: &str = "6f1c6a7e-2b9d-4c1a-9d8e-0a1b2c3d4e5f";

fn range_request(end: i64) -> ExecutePlanRequest {
    ExecutePlanRequest {
        session_id: SESSION.into(),
        plan: Some(Plan {
            op_type: Some(proto::plan::OpType::Root(Relation {
                common: None,
                rel_type: Some(proto::relation::RelType::Range(proto::Range {
                    start: Some(0),
                    end,
                    step: 1,
                    num_partitions: None,
                })),
            })),
        }),
        client_type: Some("bench".into()),
        ..Default::default()
    }
}

/// The request exactly as `ReattachCore` prepares it: an operation id and the
/// reattach option, so the server buffers responses and ends with
/// `ResultComplete` in both arms.
fn raw_request(end: i64) -> ExecutePlanRequest {
    let mut req = range_request(end);
    req.operation_id = Some(uuid::Uuid::new_v4().to_string());
    req.request_options.push(RequestOption {
        request_option: Some(request_option::RequestOption::ReattachOptions(
            proto::ReattachOptions { reattachable: true },
        )),
    });
    req
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn percentile(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let idx = ((v.len() - 1) as f64 * p).round() as usize;
    v[idx]
}

/// The embedded server with `rows_per_batch`, and a connected channel to it.
async fn serve(rows_per_batch: u64) -> (TestServer, Channel) {
    let server = TestServer::builder()
        .rows_per_batch(rows_per_batch)
        .start()
        .await
        .unwrap();
    let channel = tonic::transport::Endpoint::from_shared(server.endpoint())
        .unwrap()
        .connect()
        .await
        .unwrap();
    (server, channel)
}

/// Frees a finished raw execution on the server.
async fn release_all(client: &mut SparkConnectServiceClient<Channel>, operation_id: String) {
    client
        .release_execute(ReleaseExecuteRequest {
            session_id: SESSION.into(),
            operation_id,
            release: Some(release_execute_request::Release::ReleaseAll(
                release_execute_request::ReleaseAll {},
            )),
            ..Default::default()
        })
        .await
        .unwrap();
}

/// Rows counted from `ArrowBatch.row_count`; neither arm decodes Arrow, so
/// the comparison is about the transport and the reattach machinery.
async fn run_raw(client: &mut SparkConnectServiceClient<Channel>, rows: i64) -> (Duration, i64) {
    let req = raw_request(rows);
    let op_id = req.operation_id.clone().unwrap();
    let start = Instant::now();
    let mut stream = client.execute_plan(req).await.unwrap().into_inner();
    let mut n = 0;
    let mut complete = false;
    while let Some(resp) = stream.message().await.unwrap() {
        match resp.response_type {
            Some(ResponseType::ArrowBatch(b)) => n += b.row_count,
            Some(ResponseType::ResultComplete(_)) => complete = true,
            _ => {}
        }
    }
    let elapsed = start.elapsed();
    assert!(
        complete,
        "raw stream ended without ResultComplete after {n} of {rows} rows"
    );
    // Untimed clean-up: without it the server would keep the finished
    // execution and its retry buffer for the rest of the run.
    release_all(client, op_id).await;
    (elapsed, n)
}

async fn run_reattach(channel: &Channel, rows: i64) -> (Duration, i64) {
    let exec = ReattachableExecution::new(
        spark_client(channel.clone()),
        range_request(rows),
        Retrying::pyspark(),
        ReattachOptions::default(),
    )
    .unwrap();
    let start = Instant::now();
    let (n, complete) = drain(exec, None).await;
    let elapsed = start.elapsed();
    assert!(complete, "reattachable stream ended without ResultComplete");
    (elapsed, n)
}

/// Drains `exec`; when `arrivals` is given, records the arrival time of every response.
async fn drain(
    mut exec: ReattachableExecution,
    mut arrivals: Option<&mut Vec<Instant>>,
) -> (i64, bool) {
    let mut n = 0;
    let mut complete = false;
    while let Some(item) = exec.next_response().await {
        let resp = item.unwrap();
        if let Some(a) = arrivals.as_deref_mut() {
            a.push(Instant::now());
        }
        match resp.response_type {
            Some(ResponseType::ArrowBatch(b)) => n += b.row_count,
            Some(ResponseType::ResultComplete(_)) => complete = true,
            _ => {}
        }
    }
    (n, complete)
}

async fn throughput(rows: i64, rows_per_batch: u64, rounds: usize) {
    let (server, channel) = serve(rows_per_batch).await;
    let mut raw = SparkConnectServiceClient::new(channel.clone());

    // Warm-up, one of each (connection, allocator, page cache of the binary).
    run_raw(&mut raw, rows / 4).await;
    run_reattach(&channel, rows / 4).await;

    let mut raw_s = Vec::new();
    let mut re_s = Vec::new();
    println!("\n## Throughput: {rows} rows, {rows_per_batch} rows/batch, {rounds} A/B rounds");
    println!("| round | raw s | reattachable s |");
    println!("|---|---|---|");
    for round in 0..rounds {
        // Alternate which arm goes first, so slow drift hits both alike.
        let (r, a) = if round % 2 == 0 {
            let r = run_raw(&mut raw, rows).await;
            let a = run_reattach(&channel, rows).await;
            (r, a)
        } else {
            let a = run_reattach(&channel, rows).await;
            let r = run_raw(&mut raw, rows).await;
            (r, a)
        };
        assert_eq!((r.1, a.1), (rows, rows));
        println!(
            "| {round} | {:.3} | {:.3} |",
            r.0.as_secs_f64(),
            a.0.as_secs_f64()
        );
        raw_s.push(r.0.as_secs_f64());
        re_s.push(a.0.as_secs_f64());
    }
    let raw_m = median(&mut raw_s);
    let re_m = median(&mut re_s);
    let batches = (rows as f64 / rows_per_batch as f64).ceil();
    println!();
    println!(
        "raw          median {:.3} s  {:>6.1} Mrows/s  {:>6.0} responses/s",
        raw_m,
        rows as f64 / raw_m / 1e6,
        batches / raw_m
    );
    println!(
        "reattachable median {:.3} s  {:>6.1} Mrows/s  {:>6.0} responses/s",
        re_m,
        rows as f64 / re_m / 1e6,
        batches / re_m
    );
    println!(
        "throughput ratio reattachable/raw = {:.3} (target >= 0.95)",
        raw_m / re_m
    );
    let c = server.calls();
    println!(
        "server calls: execute {} reattach {} release_until {} release_all {}",
        c.execute, c.reattach, c.release_until, c.release_all
    );
    server.shutdown().await;
}

/// Records when the retry loop decided to retry: `Retrying::decide` logs
/// `"retrying"` at debug level the moment the client has classified the
/// transport error, which is the closest observable point to the cut.
#[derive(Clone, Default)]
struct RetryMarks(Arc<Mutex<Vec<Instant>>>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for RetryMarks {
    fn on_event(&self, event: &tracing::Event<'_>, _ctx: Context<'_, S>) {
        struct IsRetrying(bool);
        impl tracing::field::Visit for IsRetrying {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                if field.name() == "message" && format!("{value:?}") == "retrying" {
                    self.0 = true;
                }
            }
        }
        let now = Instant::now();
        let mut v = IsRetrying(false);
        event.record(&mut v);
        if v.0 {
            self.0.lock().unwrap().push(now);
        }
    }
}

async fn latency(reps: usize, marks: RetryMarks) {
    const ROWS_PER_BATCH: u64 = 1024;
    const BATCHES: i64 = 60;
    const CUT_AFTER: u32 = 20;
    // A small delay per produced batch gives the stream a steady, measurable
    // inter-response gap (otherwise responses arrive back to back and the
    // "normal gap" is noise).
    let server = TestServer::builder()
        .rows_per_batch(ROWS_PER_BATCH)
        .batch_delay(Duration::from_millis(2))
        .start()
        .await
        .unwrap();
    let channel = tonic::transport::Endpoint::from_shared(server.endpoint())
        .unwrap()
        .connect_lazy();
    let policy_backoff = Retrying::pyspark().policies()[0].initial_backoff();

    let mut total_gap = Vec::new();
    let mut excess = Vec::new();
    let mut decide_to_next = Vec::new();
    let mut cut_to_decide = Vec::new();
    for _ in 0..reps {
        server.faults().push(
            Fault::reset_connection()
                .on(Rpc::ExecutePlan)
                .after_responses(CUT_AFTER),
        );
        marks.0.lock().unwrap().clear();
        let exec = ReattachableExecution::new(
            spark_client(channel.clone()),
            range_request(ROWS_PER_BATCH as i64 * BATCHES),
            Retrying::pyspark(), // real TokioSleeper, default policy
            ReattachOptions::default(),
        )
        .unwrap();
        let mut arrivals = Vec::new();
        let (n, complete) = drain(exec, Some(&mut arrivals)).await;
        assert!(complete && n == ROWS_PER_BATCH as i64 * BATCHES);
        let retries = marks.0.lock().unwrap().clone();
        // A background ReleaseExecute hit by the same reset may log a retry
        // too; both see the cut at the same moment, so the first mark counts.
        assert!(!retries.is_empty(), "expected a policy retry");
        // Only a decision after the first delivered response can be the cut
        // of this stream; take the earliest such one.
        let decided = retries
            .iter()
            .copied()
            .filter(|t| *t > arrivals[0])
            .min()
            .expect("a retry decision after the first response");
        // The first response that arrived after the retry decision.
        let k = arrivals
            .iter()
            .position(|t| *t > decided)
            .expect("a response after the cut");
        let gap = arrivals[k] - arrivals[k - 1];
        // The normal gap: median of the inter-arrival times away from the cut.
        let mut gaps: Vec<f64> = arrivals
            .windows(2)
            .enumerate()
            .filter(|(i, _)| *i + 1 != k)
            .map(|(_, w)| (w[1] - w[0]).as_secs_f64())
            .collect();
        let normal = median(&mut gaps);
        total_gap.push(gap.as_secs_f64() * 1e3);
        excess.push((gap.as_secs_f64() - normal) * 1e3);
        decide_to_next.push((arrivals[k] - decided).as_secs_f64() * 1e3);
        cut_to_decide.push((decided - arrivals[k - 1]).as_secs_f64() * 1e3);
    }
    let p = |v: &mut Vec<f64>| {
        (
            percentile(v, 0.5),
            percentile(v, 0.9),
            v.iter().cloned().fold(f64::MAX, f64::min),
            v.iter().cloned().fold(f64::MIN, f64::max),
        )
    };
    println!(
        "\n## Cut-to-next-delivery latency: {reps} reps, TCP reset after {CUT_AFTER} responses, default policy (initial backoff {} ms), real time",
        policy_backoff.as_millis()
    );
    println!("| measure | p50 ms | p90 ms | min ms | max ms |");
    println!("|---|---|---|---|---|");
    for (name, v) in [
        (
            "last response before cut -> first after (raw gap)",
            &mut total_gap,
        ),
        ("  same, minus the normal inter-response gap", &mut excess),
        (
            "  of which: last response -> retry decided (server grace 20 ms + RST)",
            &mut cut_to_decide,
        ),
        (
            "retry decided (error seen) -> first response after",
            &mut decide_to_next,
        ),
    ] {
        let (p50, p90, min, max) = p(v);
        println!("| {name} | {p50:.1} | {p90:.1} | {min:.1} | {max:.1} |");
    }
    println!(
        "target: error seen -> next delivery <= initial backoff + 10 ms = {} ms",
        policy_backoff.as_millis() + 10
    );
    let c = server.calls();
    println!(
        "server calls: execute {} reattach {} (expected {reps} / {reps})",
        c.execute, c.reattach
    );
    server.shutdown().await;
}

/// The size of the future `ReattachableExecution` boxes per response
/// (`size_of_val` of `async move { driver.next().await }`, tonic 0.14.9,
/// x86_64): the mimic below holds an uninitialised pad of this size across
/// its await, so it allocates as much.
const DRIVER_FUTURE_BYTES: usize = 4192;

type PerItem<S> = Pin<Box<dyn Future<Output = (Box<S>, Option<<S as Stream>::Item>)> + Send>>;

/// `ReattachableExecution`'s polling pattern around any stream: the state is
/// moved into a freshly boxed future for every item, then taken back.
struct BoxPerItem<S: Stream> {
    state: Option<Box<S>>,
    pending: Option<PerItem<S>>,
}

impl<S> BoxPerItem<S>
where
    S: Stream + Unpin + Send + 'static,
    S::Item: Send,
{
    fn new(stream: S) -> Self {
        BoxPerItem {
            state: Some(Box::new(stream)),
            pending: None,
        }
    }

    fn poll_item(&mut self, cx: &mut TaskContext<'_>) -> Poll<Option<S::Item>> {
        if self.pending.is_none() {
            let Some(mut state) = self.state.take() else {
                return Poll::Ready(None);
            };
            self.pending = Some(Box::pin(async move {
                let pad = MaybeUninit::<[u8; DRIVER_FUTURE_BYTES]>::uninit();
                let item = state.next().await;
                std::hint::black_box(&pad);
                (state, item)
            }));
        }
        let fut = self.pending.as_mut().expect("pending future set above");
        let (state, item) = std::task::ready!(fut.as_mut().poll(cx));
        self.pending = None;
        self.state = Some(state);
        Poll::Ready(item)
    }

    async fn next_item(&mut self) -> Option<S::Item> {
        std::future::poll_fn(|cx| self.poll_item(cx)).await
    }
}

/// Drains `stream` directly or through [`BoxPerItem`]; returns the time and
/// the sum of `weight` over the items.
async fn drain_stream<S>(stream: S, boxed: bool, weight: impl Fn(S::Item) -> u64) -> (Duration, u64)
where
    S: Stream + Unpin + Send + 'static,
    S::Item: Send,
{
    let start = Instant::now();
    let mut sum = 0u64;
    if boxed {
        let mut s = BoxPerItem::new(stream);
        while let Some(item) = s.next_item().await {
            sum += weight(std::hint::black_box(item));
        }
    } else {
        let mut s = stream;
        while let Some(item) = s.next().await {
            sum += weight(std::hint::black_box(item));
        }
    }
    (start.elapsed(), sum)
}

/// Per-item medians of an interleaved A/B run, in ns.
struct AbResult {
    direct: f64,
    boxed: f64,
    /// Median, min and max over rounds of (boxed - direct), each round's two
    /// arms run back to back.
    diff: (f64, f64, f64),
}

/// Alternates the two arms `rounds` times (which goes first swaps every
/// round) and returns the medians per item.
async fn ab_per_item<F, Fut>(rounds: usize, items: u64, mut run: F) -> AbResult
where
    F: FnMut(bool) -> Fut,
    Fut: Future<Output = (Duration, u64)>,
{
    let (mut direct, mut boxed, mut diff) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds {
        let mut pair = [0.0; 2];
        for boxed_arm in [round % 2 == 1, round % 2 == 0] {
            let (t, n) = run(boxed_arm).await;
            assert_eq!(n, items, "every item arrives in both arms");
            pair[usize::from(boxed_arm)] = t.as_secs_f64() * 1e9 / items as f64;
        }
        direct.push(pair[0]);
        boxed.push(pair[1]);
        diff.push(pair[1] - pair[0]);
    }
    let min = diff.iter().copied().fold(f64::MAX, f64::min);
    let max = diff.iter().copied().fold(f64::MIN, f64::max);
    AbResult {
        direct: median(&mut direct),
        boxed: median(&mut boxed),
        diff: (median(&mut diff), min, max),
    }
}

fn print_ab(case: &str, items: u64, r: &AbResult) {
    let (med, min, max) = r.diff;
    println!(
        "| {case} | {items} | {:.1} | {:.1} | {med:.1} [{min:.1}, {max:.1}] |",
        r.direct, r.boxed,
    );
}

async fn box_cost(items: u64, rounds: usize) {
    println!("\n## Per-response box: {rounds} interleaved A/B rounds");
    println!(
        "| case | items | direct ns/item | boxed ns/item | boxed - direct ns/item, median [min, max] |"
    );
    println!("|---|---|---|---|---|");
    let alone = ab_per_item(rounds, items, |boxed| {
        drain_stream(tokio_stream::iter(0..items), boxed, |_| 1)
    })
    .await;
    print_ab("in memory (the box alone)", items, &alone);

    // Over loopback: small responses, where a fixed per-response cost weighs most.
    const ROWS_PER_BATCH: u64 = 16;
    let responses = 10_000u64;
    let rows = (ROWS_PER_BATCH * responses) as i64;
    let (server, channel) = serve(ROWS_PER_BATCH).await;
    let client = SparkConnectServiceClient::new(channel);
    let run = |boxed: bool| {
        let mut client = client.clone();
        async move {
            let req = raw_request(rows);
            let operation_id = req.operation_id.clone().unwrap();
            let stream = client.execute_plan(req).await.unwrap().into_inner();
            let (t, n) = drain_stream(stream, boxed, |r| match r.unwrap().response_type {
                Some(ResponseType::ArrowBatch(_)) => 1,
                _ => 0,
            })
            .await;
            // Untimed: free the finished execution so runs do not pile up.
            release_all(&mut client, operation_id).await;
            (t, n)
        }
    };
    run(false).await; // warm-up
    let served = ab_per_item(rounds, responses, run).await;
    print_ab(
        &format!("embedded server, {ROWS_PER_BATCH} rows/response"),
        responses,
        &served,
    );
    println!(
        "\nthe box alone is {:.1} ns per response = {:.3} % of a {ROWS_PER_BATCH}-row response over loopback (direct median {:.1} us); keep threshold: > 1000 ns or > 1 %",
        alone.diff.0,
        alone.diff.0 / served.direct * 100.0,
        served.direct / 1e3
    );
    server.shutdown().await;
}

fn arg(args: &[String], name: &str, default: usize) -> usize {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    // `cargo bench` passes `--bench`; ignore everything we do not know.
    let rows = arg(&args, "--rows", 20_000_000) as i64;
    let rows_per_batch = arg(&args, "--rows-per-batch", 8192) as u64;
    let rounds = arg(&args, "--rounds", 7);
    let reps = arg(&args, "--reps", 25);
    let box_items = arg(&args, "--box-items", 1_000_000) as u64;

    let marks = RetryMarks::default();
    // Only the crate's debug events are needed; everything else stays off.
    let filter = tracing_subscriber::filter::Targets::new()
        .with_target("tonic_retry::retrying", tracing::Level::DEBUG);
    let subscriber = tracing_subscriber::registry().with(tracing_subscriber::Layer::with_filter(
        marks.clone(),
        filter,
    ));
    tracing::subscriber::set_global_default(subscriber).unwrap();

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let only = args
        .iter()
        .position(|a| a == "--only")
        .and_then(|i| args.get(i + 1))
        .map(String::as_str);
    let run = |part: &str| only.is_none_or(|o| o == part);
    rt.block_on(async {
        if run("throughput") {
            throughput(rows, rows_per_batch, rounds).await;
        }
        if run("latency") {
            latency(reps, marks).await;
        }
        if run("box") {
            box_cost(box_items, rounds).await;
        }
    });
}
