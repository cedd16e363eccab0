//! Test tools for Spark Connect clients: an embedded Spark Connect server
//! with a fault script, and [`FaultProxy`], a loopback TCP proxy that cuts,
//! refuses, delays and loses traffic.
//!
//! A retry layer is only as good as the faults it was tested against, and
//! real servers fail when they choose to, not when a test needs them to.
//! This crate makes the failures scriptable: every fault the client must
//! survive can be produced on demand, on loopback, in a test that can fail.
//! It is kept apart from `spark-connect-retry` (as tower keeps `tower-test`)
//! so that the library compiles no gRPC server.
//!
//! [`TestServer`] listens on `127.0.0.1` with an ephemeral port (unless
//! [`listen_addr`](TestServerBuilder::listen_addr) says otherwise) and imitates
//! the parts of the real Spark Connect server (4.3) that matter for retries
//! and reattachable executions:
//!
//! * **Sessions** keyed by `session_id` (must be a UUID), one fixed random
//!   `server_side_session_id` per server ([`TestServer::rotate_server_side_session_id`],
//!   [`TestServer::simulate_restart`]). A request whose
//!   `client_observed_server_side_session_id` differs fails with
//!   `INVALID_HANDLE.SESSION_CHANGED`; after `ReleaseSession`, RPCs on that
//!   session fail with `INVALID_HANDLE.SESSION_CLOSED`.
//! * **ExecutePlan** runs the plan in a background task, independently of
//!   the attached stream. Each response gets a fresh UUID `response_id`.
//!   With `reattach_options.reattachable = true` the responses are buffered,
//!   the execution ends with `ResultComplete`, and:
//!   * **ReattachExecute** resumes after `last_response_id` (absent: from the
//!     start); a new attach preempts the previous stream, which ends with
//!     `INVALID_CURSOR.DISCONNECTED`;
//!   * the retry buffer keeps the current response plus ≥
//!     [`retry_buffer_bytes`](TestServerBuilder::retry_buffer_bytes) of
//!     earlier ones; resuming from an evicted one fails with
//!     `INVALID_CURSOR.POSITION_NOT_AVAILABLE`;
//!   * **ReleaseExecute** `release_until` evicts up to an id, `release_all`
//!     removes (and cancels) the execution; an unknown operation is a no-op
//!     success with `operation_id` unset;
//!   * streams end **gracefully** (OK, no `ResultComplete`) after
//!     [`max_responses_per_stream`](TestServerBuilder::max_responses_per_stream),
//!     [`max_bytes_per_stream`](TestServerBuilder::max_bytes_per_stream) or
//!     [`max_stream_duration`](TestServerBuilder::max_stream_duration).
//! * **Plans**: `Range` and SQL (`Relation.sql`, or `Command.sql_command`
//!   with the query as its `input` or in its older `sql` fields, as the JVM
//!   client sends it, answered with a `SqlCommandResult`) in a tiny grammar,
//!   case-insensitive:
//!   `SELECT 1`, `SELECT * FROM range(..)`, `SELECT id FROM range(..)`,
//!   `SELECT id, id*2 AS x FROM range(..)` with `range(end)`,
//!   `range(start, end)` or `range(start, end, step)`. Results are real Arrow
//!   IPC streams (one schema plus one batch per `ArrowBatch`, column `id`
//!   Int64 not null), with `row_count` and `start_offset`, after a response
//!   carrying the schema as Spark's `DataType`, as Spark sends it
//!   ([`schema_response`](TestServerBuilder::schema_response)). A client
//!   that allows result chunking (`ResultChunkingOptions`) gets batches
//!   larger than its preferred size, or
//!   [`max_chunk_bytes`](TestServerBuilder::max_chunk_bytes), in chunks.
//!   A number in `range(..)` may be a `:name` or `?` marker bound to an
//!   integer literal by the SQL relation's parameters (an unbound one fails
//!   with `UNBOUND_SQL_PARAMETER`, SQLSTATE 42P02).
//!   Other SQL fails with `PARSE_SYNTAX_ERROR` (SQLSTATE 42601).
//! * **Temporary views**: `Command.create_dataframe_view` names a relation
//!   in its session (`TEMP_TABLE_OR_VIEW_ALREADY_EXISTS` for a taken name
//!   without `replace`; names are plain identifiers, case-insensitive);
//!   `SELECT * FROM name` reads it, an unknown name fails with
//!   `TABLE_OR_VIEW_NOT_FOUND` (SQLSTATE 42P01).
//! * **Errors** are encoded like Spark's: gRPC `INTERNAL`, message
//!   `[ERROR.CLASS] text SQLSTATE: xxxxx`, and a `google.rpc.ErrorInfo`
//!   (see [`SparkException`]) with an `errorId` that **FetchErrorDetails** serves
//!   once.
//! * **Local relations**: `LocalRelation` (an Arrow IPC stream in `data`),
//!   `CachedLocalRelation` and `ChunkedCachedLocalRelation` (read from the
//!   session's `cache/<hash>` artifacts; a missing one fails as in Spark,
//!   `INTERNAL_ERROR` naming the hash). The result is the rows as sent, with
//!   their Arrow schema, in responses of at most `rows_per_batch` rows.
//! * **AddArtifacts**: PySpark's batches and chunked artifacts, each chunk's
//!   CRC-32 checked; what a stream carries is stored only once the client
//!   ends it, so a cut stream stores nothing. An artifact with a CRC mismatch
//!   gets `is_crc_successful: false` in the summary and is not stored;
//!   `cache/` names are replaced by a new upload, other names never change
//!   (`ARTIFACT_ALREADY_EXISTS`). **ArtifactStatus** says which `cache/`
//!   artifacts a session holds. The handle reports every upload
//!   ([`upload_calls`](TestServer::upload_calls): messages, bytes, names
//!   stored), the artifacts ([`artifacts`](TestServer::artifacts)) and how
//!   often each was written ([`artifact_writes`](TestServer::artifact_writes)).
//! * **Config** (set/get/get_with_default/get_option/get_all/unset),
//!   **AnalyzePlan** (`spark_version` → `"4.3.0"`, `schema` → the plan's
//!   `DataType`), **Interrupt** (all, by tag, by operation id; running
//!   executions end with `OPERATION_CANCELED`), **ReleaseSession**. The other
//!   RPCs (CloneSession, GetStatus) answer `UNIMPLEMENTED`.
//! * Optional **auth** ([`required_token`](TestServerBuilder::required_token)):
//!   every RPC then needs `authorization: Bearer <token>`.
//! * **Observability**: [`calls`](TestServer::calls),
//!   [`live_executions`](TestServer::live_executions), the metadata of every
//!   call ([`recorded_calls`](TestServer::recorded_calls)) and the
//!   ExecutePlan / ReattachExecute / ReleaseExecute requests.
//!
//! [`plans`] has helpers to build these plans and decode the Arrow results;
//! [`TestServerBuilder::execution_progress`] adds `ExecutionProgress`
//! responses, which clients must skip.
//!
//! The [fault script](Fault) injects failures: statuses (with `RetryInfo`
//! or Spark's encoding), mid-stream errors, real TCP resets, lost requests,
//! stalls, an undecodable `grpc-status-details-bin`, uploads cut after any
//! request message or after the store, and corrupted artifact chunks.
//!
//! Each fault that fires, each graceful stream end and each restart is
//! logged with `tracing` at `info` (targets under `spark_connect_testkit`).
//!
//! With the feature `test-util`, the module `held_clock` has a paused clock that
//! moves only when the test moves it, for tests of idle timeouts and
//! deadlines over loopback that must see exactly one timeout.
//!
//! # For clients in other languages
//!
//! The `spark-connect-chaos` program (feature `cli`, on by default;
//! `cargo install spark-connect-testkit`) serves this server on an address
//! with a fault script written in TOML, prints `listening on HOST:PORT` when
//! ready, logs every injected event and stops on SIGINT/SIGTERM. The crate
//! README describes the script, the shipped scenarios and how to start it in
//! another project's CI.
//!
//! # Example
//!
//! ```
//! use spark_connect_retry::proto::{
//!     self, spark_connect_service_client::SparkConnectServiceClient,
//! };
//! use spark_connect_testkit::{Fault, Rpc, TestServer};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let server = TestServer::builder().rows_per_batch(4).start().await?;
//! // The first ExecutePlan fails with UNAVAILABLE.
//! server.faults().push(Fault::unavailable().on(Rpc::ExecutePlan));
//!
//! let mut client = SparkConnectServiceClient::connect(server.endpoint()).await?;
//! let request = proto::ExecutePlanRequest {
//!     session_id: "00112233-4455-6677-8899-aabbccddeeff".into(),
//!     plan: Some(proto::Plan {
//!         op_type: Some(proto::plan::OpType::Root(proto::Relation {
//!             common: None,
//!             rel_type: Some(proto::relation::RelType::Range(proto::Range {
//!                 start: None,
//!                 end: 10,
//!                 step: 1,
//!                 num_partitions: None,
//!             })),
//!         })),
//!     }),
//!     ..Default::default()
//! };
//! let err = client.execute_plan(request.clone()).await.unwrap_err();
//! assert_eq!(err.code(), tonic::Code::Unavailable);
//!
//! let mut stream = client.execute_plan(request).await?.into_inner();
//! let mut rows = 0;
//! while let Some(resp) = stream.message().await? {
//!     if let Some(proto::execute_plan_response::ResponseType::ArrowBatch(b)) =
//!         resp.response_type
//!     {
//!         rows += b.row_count;
//!     }
//! }
//! assert_eq!(rows, 10);
//! assert_eq!(server.calls().execute, 2);
//! server.shutdown().await;
//! # Ok(())
//! # }
//! ```

#![warn(missing_docs, unreachable_pub)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod conn;
mod edit;
mod error;
mod faults;
#[cfg(feature = "test-util")]
#[cfg_attr(docsrs, doc(cfg(feature = "test-util")))]
pub mod held_clock;
mod local;
pub mod plans;
mod proxy;
mod server;
mod sql_grammar;
mod sql_params;
mod stubs;
mod views;

pub use edit::ResultEdit;
pub use error::{SPARK_ERROR_DOMAIN, SparkException};
pub use faults::{BAD_STATUS_DETAILS, Fault, FaultScript, FiredFault, Rpc};
pub use proxy::{
    AddrRole, CutEvent, CutMode, CutReason, CutSchedule, Direction, FaultProxy, FaultProxyBuilder,
    FaultProxyError, MAX_DELAY_QUEUE, ProxyStats, ProxyStatsHandle,
};
pub use server::{
    BufferStats, CallCounts, DEFAULT_MAX_CHUNK_BYTES, DEFAULT_MAX_STREAM_DURATION,
    DEFAULT_RETRY_BUFFER_BYTES, DEFAULT_ROWS_PER_BATCH, DEFAULT_SPARK_VERSION, RecordedCall,
    TestServer, TestServerBuilder, TokenRotation, UploadCall,
};
pub use stubs::{SparkConnectService, SparkConnectServiceServer};
