//! A Spark Connect session on the retry core.
//!
//! Talking to Spark through raw generated gRPC stubs means rebuilding what
//! every Spark client has: connection strings, authentication, retries,
//! reattachable results, Arrow decoding, Spark's errors. This module is that
//! client: `sc://` connection strings ([`conn_string`]), the tonic channel
//! with TLS, token and keepalive ([`channel`]), tokens that expire
//! ([`token`]), and [`SparkSession`]: SQL
//! in, Arrow `RecordBatch`es out, every RPC under the policy, behaving like
//! PySpark's session (eager `sql()`, tags and interrupts, `close()` ending
//! the server session, errors with Spark's class and SQLSTATE).
//!
//! A session needs a tokio runtime.
//!
//! ```no_run
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), spark_connect_retry::session::SparkError> {
//! use spark_connect_retry::session::SparkSession;
//!
//! let spark = SparkSession::builder().remote("sc://localhost:15002").build()?;
//! spark.sql("CREATE TABLE IF NOT EXISTS t (id BIGINT) USING parquet").await?;
//! let rows = spark.sql("SELECT id, id*2 AS x FROM range(10)").await?;
//! let schema = rows.schema().expect("sql() returns once the schema is known");
//! assert_eq!(schema.field(1).name(), "x");
//! let batches = rows.collect().await?;
//! let n: usize = batches.iter().map(|b| b.num_rows()).sum();
//! assert_eq!(n, 10);
//! spark.close().await?;
//! # Ok(())
//! # }
//! ```

mod arrow_stream;
mod builder;
mod builder_configs;
pub mod channel;
mod config;
pub mod conn_string;
#[cfg(feature = "arrow")]
mod dataframe;
#[cfg(feature = "arrow")]
mod decode;
#[cfg(all(test, feature = "arrow"))]
mod decode_codec_tests;
#[cfg(feature = "arrow")]
mod decode_error;
#[cfg(all(test, feature = "arrow"))]
mod decode_fuzz;
#[cfg(feature = "arrow")]
mod digest;
mod error;
mod flow_control;
mod generation;
#[cfg(feature = "arrow")]
mod ipc_scan;
#[cfg(feature = "arrow")]
mod local_data;
mod options;
pub mod params;
mod plan_compression;
mod queries;
mod renewal;
mod result_compression;
#[cfg(feature = "arrow")]
pub mod resume;
mod rpcs;
#[cfg(feature = "arrow")]
pub mod schema;
mod spark;
mod stale;
mod tags;
#[cfg(feature = "tls")]
pub mod tls;
pub mod token;
#[cfg(feature = "arrow")]
mod upload;
#[cfg(feature = "arrow")]
mod view;

pub use arrow_stream::ArrowStream;
pub use builder::{DEFAULT_RELEASE_WAIT, MIN_ARROW_CHUNK_SIZE, SparkSessionBuilder};
#[cfg(feature = "arrow")]
pub use dataframe::{DataFrame, UPLOAD_GROUP_BYTES};
#[cfg(feature = "arrow")]
pub use decode_error::ResultDecodeError;
pub use error::{ErrorDetails, ResultChange, ServerError, SparkError};
pub use flow_control::{
    DEFAULT_CONNECTION_WINDOW, DEFAULT_STREAM_WINDOW, Http2FlowControl, MAX_WINDOW, MIN_WINDOW,
};
pub use result_compression::{InvalidResultCompression, ResultCompression};
pub use spark::SparkSession;
#[cfg(feature = "arrow")]
pub use upload::{UploadError, UploadStats};
