//! What the session's metrics (feature `otel`) cost a large query: the
//! same `range(n)` read to its end from the embedded server through a
//! session recording on a real SDK pipeline and through one recording on
//! the no-op global meter, in one run. A plain `main` (harness = false).
//! What gRPC's A66/A96 metrics add to one call through the retry layer is
//! measured by tonic-retry's own bench (`cargo bench -p tonic-retry --bench
//! layer --features otel`, its `metered` arm).
//!
//! `METRICS_BENCH_ROWS` rows (default 10 000 000), `METRICS_BENCH_QUERY_RUNS`
//! (default 3) runs per arm, alternating; the median time per arm.

mod support;

use std::time::{Duration, Instant};

use spark_connect_retry::session::SparkSession;
use spark_connect_testkit::TestServer;
use tonic_retry_echo::metrics::Pipeline;

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
    let runs = support::env_usize("METRICS_BENCH_QUERY_RUNS").unwrap_or(3);
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
        support::median(times[0].clone()),
        support::median(times[1].clone()),
        support::median(times[1].clone()) / support::median(times[0].clone())
    );
}

fn main() {
    let rows = support::env_usize("METRICS_BENCH_ROWS").unwrap_or(10_000_000);
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(query_bench(rows));
}
