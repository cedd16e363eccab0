//! # spark-connect-retry
//!
//! Rust programs that talk to Apache Spark through [Spark Connect] (gRPC over
//! [tonic]) lose queries to transient faults: a server restarting, a load
//! balancer cutting an idle connection, a cursor preempted by another RPC, a
//! server asking its clients to back off. A plain tonic client turns each of
//! these into a failed query, and a naive retry either hammers a struggling
//! server or re-runs a long query from the start. PySpark and the JVM client
//! survive them with a tuned retry policy and *reattachable execution*.
//!
//! This crate brings the same to Rust: PySpark 4.3.0's retry policy to the
//! millisecond, an `ExecutePlan` stream that resumes after any transient fault,
//! a tower retry layer for any tonic client, and a Spark Connect session (SQL
//! in, Arrow out).
//!
//! | module | what |
//! |---|---|
//! | [`policy`] | [`RetryPolicy`](policy::RetryPolicy) with PySpark's `DefaultPolicy` as its default, classification of `tonic::Status` (transport failures included), the pure decision core |
//! | [`retrying`] | the async retry loop (PySpark's defaults and wording), injectable sleeper, clock and jitter |
//! | [`reattach`] | [`ReattachableExecution`](reattach::ReattachableExecution) and its sans-I/O core |
//! | [`layer`] | [`RetryLayer`](layer::RetryLayer) for any tonic client |
//! | [`session`] | [`SparkSession`](session::SparkSession), `sc://` connection strings |
//! | [`token`] | [`TokenProvider`](token::TokenProvider): bearer tokens that expire, refreshed by the session |
//! | [`deadlines`] | [`RpcDeadlines`](deadlines::RpcDeadlines), PySpark 4.3's per-RPC deadlines |
//! | [`status`] | Spark's error class, SQLSTATE and `RetryInfo` read from status details, defensively |
//! | [`sanitize`] | [`SanitizeLayer`](sanitize::SanitizeLayer): a guard against tonic's panic on non-base64 status details |
//! | [`transport`] | [`GrpcChannel`](transport::GrpcChannel): any service stack as one boxed, sanitized client type |
//! | [`proto`] | the Spark Connect protocol (`spark.connect`), generated at build time |
//!
//! # Features
//!
//! | feature | default | what |
//! |---|---|---|
//! | `arrow` | yes | decode results into arrow `RecordBatch`es, Arrow in (`create_dataframe`, uploads) |
//! | `tls` | yes | TLS (rustls) for `use_ssl=true` connection strings |
//! | `chrono` | no | chrono's `NaiveDate`, `NaiveDateTime` and `DateTime` as SQL parameters ([`session::params`]) |
//! | `otel` | no | OpenTelemetry metrics: gRPC's (gRFC A66, A96) for every unary call and the session's own (`spark_connect.client.*`), on the global meter or [`SparkSessionBuilder::meter`](session::SparkSessionBuilder::meter); the table is in `docs/metrics.md` |
//!
//! The retry policy, loop and layer come from [`tonic_retry`], which has no
//! Spark in it; the embedded test server and the fault proxy live in the
//! `spark-connect-testkit` crate.
//!
//! ```no_run
//! use spark_connect_retry::session::SparkSession;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let spark = SparkSession::builder().remote("sc://localhost:15002").build()?;
//! let batches = spark.sql("SELECT id FROM range(100)").await?.collect().await?;
//! assert_eq!(batches.iter().map(|b| b.num_rows()).sum::<usize>(), 100);
//! # Ok(()) }
//! ```
//!
//! [Spark Connect]: https://spark.apache.org/docs/latest/spark-connect-overview.html
//! [tonic]: https://docs.rs/tonic
#![warn(missing_docs, unreachable_pub)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod connect;
pub mod deadlines;
mod error_classes;
pub mod layer;
#[cfg(feature = "arrow")]
mod local_data;
mod meters;
pub mod policy;
pub mod proto;
pub mod reattach;
pub mod reconnect;
mod results;
pub mod retrying;
pub mod session;
pub mod status;
pub mod token;
pub mod transport;

pub mod sanitize {
    //! A guard against tonic's panic on a non-base64 `grpc-status-details-bin`
    //! header: [`SanitizeLayer`] on any service stack turns such a response
    //! into an `INTERNAL` status, and maps an HTTP error a proxy answers
    //! itself (no `grpc-status`) as gRPC's HTTP-to-gRPC table says. Every
    //! channel this crate builds carries it already. The layer and its
    //! service come from `tonic_retry::sanitize`, with the rest of that
    //! module's plumbing.
    pub use tonic_retry::sanitize::{Sanitize, SanitizeLayer};
}

/// The crates whose types appear in this crate's API, re-exported so that a
/// program's versions cannot drift from the ones this crate was built with.
pub mod deps {
    #[cfg(feature = "arrow")]
    pub use arrow_array;
    #[cfg(feature = "arrow")]
    pub use arrow_schema;
    pub use tonic;
    pub use tonic_retry;
}

/// The README's Rust code blocks, compiled (and, unless marked `no_run`,
/// run) as doctests, so that the README cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
mod readme {}
