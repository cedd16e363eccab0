//! A Spark Connect session on the retry core: `sc://` connection strings
//! ([`conn_string`]), the tonic channel with TLS, token and keepalive
//! ([`channel`]), and [`SparkSession`]: SQL in, Arrow `RecordBatch`es out,
//! every RPC under the policy.
//!
//! ```no_run
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), spark_connect_retry::session::SparkError> {
//! use spark_connect_retry::session::SparkSession;
//!
//! let spark = SparkSession::builder().remote("sc://localhost:15002").build()?;
//! let batches = spark.sql("SELECT id, id*2 AS x FROM range(10)").await?.collect().await?;
//! let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
//! assert_eq!(rows, 10);
//! spark.close().await;
//! # Ok(())
//! # }
//! ```

pub mod channel;
pub mod conn_string;
mod error;
mod spark;

pub use error::{ErrorDetails, ServerError, SparkError};
pub use spark::{ArrowStream, DEFAULT_RELEASE_WAIT, SparkSession, SparkSessionBuilder};
