//! The README's quick start, runnable: the code between the `README` markers
//! is the README's block, line for line (`tests/readme.rs` checks both that
//! and that its output comments are what this prints).
//!
//! ```sh
//! cargo run --example quickstart                                  # an embedded test server
//! cargo run --example quickstart -- --remote sc://localhost:15002 # a real Spark Connect server
//! ```

use spark_connect_testkit::TestServer;

// README quick start: begin
use std::sync::Arc;

use spark_connect_retry::deps::arrow_array::{Int64Array, RecordBatch};
use spark_connect_retry::deps::arrow_schema::{DataType, Field, Schema};
use spark_connect_retry::session::SparkSession;

async fn quick_start(remote: &str) -> Result<(), Box<dyn std::error::Error>> {
    let spark = SparkSession::builder().remote(remote).build()?;
    // Eager, as in PySpark: sql() returns once the server has the statement.
    let mut rows = spark.sql("SELECT id, id * 2 AS x FROM range(5)").await?;
    let schema = rows.schema().expect("known when sql() returns");
    let columns: Vec<String> = (schema.fields().iter())
        .map(|f| format!("{}: {}", f.name(), f.data_type()))
        .collect();
    println!("{}", columns.join(", ")); // id: Int64, x: Int64
    let mut xs = Vec::new();
    while let Some(batch) = rows.next_batch().await {
        let batch = batch?; // an arrow RecordBatch
        let x = batch.column(1).as_any().downcast_ref::<Int64Array>();
        xs.extend(x.expect("x is Int64").values().iter().copied());
    }
    println!("{xs:?}"); // [0, 2, 4, 6, 8]
    let stats = rows.stats(); // what the stream went through: reattaches, retries, …
    println!("{} reattaches", stats.reattaches); // 0 reattaches

    // Arrow in: small data goes inline, large data is uploaded first as
    // cached artifacts, under the retry policy and exactly once.
    let schema = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)]));
    let ids = Int64Array::from_iter_values(0..1_000_000);
    let batch = RecordBatch::try_new(schema.clone(), vec![Arc::new(ids)])?;
    let df = spark.create_dataframe(schema, [batch]).await?; // 8 MB: over 1 MiB, uploaded
    println!("{} artifact(s) uploaded", df.upload_stats().artifacts); // 1 artifact(s) uploaded
    // Named for SQL, as PySpark's df.createOrReplaceTempView("ids"):
    df.create_or_replace_temp_view("ids").await?;
    let back = spark.sql("SELECT * FROM ids").await?.collect().await?;
    println!("{} rows", back.iter().map(|b| b.num_rows()).sum::<usize>()); // 1000000 rows
    spark.close().await?; // ReleaseSession; later calls fail with "no active session"
    Ok(())
}
// README quick start: end

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let remote = args
        .iter()
        .position(|a| a == "--remote")
        .and_then(|i| args.get(i + 1).cloned());
    let (remote, server) = match remote {
        Some(remote) => (remote, None),
        None => {
            let server = TestServer::start().await?;
            (format!("sc://{}", server.addr()), Some(server))
        }
    };
    quick_start(&remote).await?;
    if let Some(server) = server {
        server.shutdown().await;
    }
    Ok(())
}
