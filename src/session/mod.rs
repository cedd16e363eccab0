//! A Spark Connect session on the retry core.
//!
//! Talking to Spark through raw generated gRPC stubs means rebuilding what
//! every Spark client has: connection strings, authentication, retries,
//! reattachable results, Arrow decoding, Spark's errors. This module is that
//! client: `sc://` connection strings ([`conn_string`]), the tonic channel
//! with TLS, token and keepalive ([`channel`]), tokens that expire
//! ([`token`](crate::token)), and [`SparkSession`]: SQL
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
mod config;
#[cfg(feature = "arrow")]
mod dataframe;
mod error;
pub(crate) mod generation;
#[cfg(feature = "arrow")]
mod lost;
pub(crate) mod options;
pub mod params;
mod plan_codec;
mod plan_compression;
mod queries;
mod renewal;
mod rpcs;
pub(crate) mod spark;
mod stale;
mod tags;
#[cfg(feature = "arrow")]
mod upload;
#[cfg(feature = "arrow")]
mod view;

pub use crate::connect::channel;
pub use crate::connect::conn_string;
pub use crate::connect::flow_control::Http2FlowControl;
pub use crate::connect::result_batch_rows::ResultBatchRows;
pub use crate::connect::result_compression::ResultCompression;
#[cfg(feature = "tls")]
pub use crate::connect::tls;
#[cfg(feature = "arrow")]
pub use crate::local_data::upload::{UploadError, UploadStats};
pub use crate::results::change::ResultChange;
#[cfg(feature = "arrow")]
pub use crate::results::decode_error::ResultDecodeError;
pub use arrow_stream::ArrowStream;
pub use builder::SparkSessionBuilder;
#[cfg(feature = "arrow")]
pub use dataframe::DataFrame;
pub use error::{ErrorDetails, ServerError, SparkError};
pub use spark::SparkSession;
