//! The session's metrics exported while the embedded server injects
//! faults: gRPC's (gRFC A66, A96) for the unary calls and releases, and the
//! session's own `spark_connect.client.*` (docs/metrics.md).
//!
//! ```sh
//! cargo run --example metrics --features otel
//! ```
//!
//! The exporter prints to stdout, so the example runs with no collector
//! and no network. A service keeps the same pipeline and swaps in
//! `opentelemetry_otlp::MetricExporter` (OTLP, what collectors and vendors'
//! agents take) for `opentelemetry_stdout::MetricExporter`.

use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider};
use spark_connect_retry::session::SparkSession;
use spark_connect_testkit::{Fault, Rpc, TestServer};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The pipeline: a reader that exports every minute, and at shutdown.
    let exporter = opentelemetry_stdout::MetricExporter::default();
    let provider = SdkMeterProvider::builder()
        .with_reader(PeriodicReader::builder(exporter).build())
        .build();
    // A session records on the global meter provider unless given a meter
    // (`SparkSessionBuilder::meter`).
    opentelemetry::global::set_meter_provider(provider.clone());

    // A server that fails: AnalyzePlan answers UNAVAILABLE twice, result
    // streams end every 5 responses, one is reset after 3.
    let server = TestServer::builder()
        .rows_per_batch(10_000)
        .max_responses_per_stream(5)
        .start()
        .await?;
    server
        .faults()
        .push(Fault::unavailable().on(Rpc::AnalyzePlan).times(2))
        .push(
            Fault::reset_connection()
                .on(Rpc::ExecutePlan)
                .after_responses(3),
        );

    let spark = SparkSession::builder().remote(server.remote()).build()?;
    println!("Spark {}", spark.spark_version().await?);
    let stream = spark
        .sql("SELECT id, id * 2 AS x FROM range(200000)")
        .await?;
    let batches = stream.collect().await?;
    let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
    println!("{rows} rows");
    spark.close().await?;

    // Export what was recorded, then stop the pipeline.
    provider.shutdown()?;
    Ok(())
}
