//! Tower layers for any Spark Connect tonic client: the [`RetryLayer`] (from
//! [`tonic_retry::layer`]) set up for Spark Connect, and the
//! [`ReattachLayer`], which makes every `ExecutePlan` under a generated
//! stub a reattachable execution.
//!
//! *Why a room of their own:* a program with its own stub (the guard, a
//! gateway) builds on these, not on the session. Both drive the crate's
//! cores: the retry policy, and the reattach core with its one driver
//! ([`crate::reattach`]).
//!
//! # The retry layer
//!
//! The layer itself knows nothing of Spark: it retries what its policy and
//! method table allow. Spark Connect needs one table, written here once:
//! every RPC is safe to replay except `ExecutePlan`, whose command may
//! write (the reattachable execution, keyed by its operation id, replays it
//! instead).
//!
//! | RPC | idempotent | kind | why |
//! |---|---|---|---|
//! | `ExecutePlan` | **no** | server-streaming | a command may write; the reattachable execution replays it instead |
//! | `ReattachExecute` | yes | server-streaming | resumes from a response id |
//! | `AnalyzePlan`, `Config`, `ArtifactStatus`, `FetchErrorDetails`, `GetStatus` | yes | unary | reads, or sets to a fixed value |
//! | `AddArtifacts` | yes | unary | re-adding the same artifact (same name, same CRC) is a no-op |
//! | `Interrupt`, `ReleaseExecute`, `ReleaseSession` | yes | unary | repeating a release or interrupt is harmless |
//! | `CloneSession` | yes | unary | the client names the new session |
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use tower::ServiceBuilder;
//! use spark_connect_retry::layer::{RetryLayer, RetryThrottle, SparkConnectLayer};
//! use spark_connect_retry::proto::spark_connect_service_client::SparkConnectServiceClient;
//! use spark_connect_retry::retrying::{PySparkRetrying, Retrying};
//!
//! let channel = tonic::transport::Endpoint::from_static("http://127.0.0.1:15002")
//!     .connect_lazy();
//! let layer = RetryLayer::spark_connect(Retrying::pyspark())
//!     .per_attempt_timeout(Duration::from_secs(30))
//!     .throttle(RetryThrottle::new(10, 0.1)?);
//! let mut client =
//!     SparkConnectServiceClient::new(ServiceBuilder::new().layer(layer).service(channel));
//! # let _ = &mut client;
//! # Ok(()) }
//! ```
//!
//! # The reattach layer
//!
//! [`ReattachLayer`]: reattachable executions for any Spark Connect tonic
//! client, as a tower layer under its generated stub.
//!
//! *Why:* only users of this crate's session got reattachable results. A
//! program with its own `SparkConnectServiceClient<T>`, generated from any
//! copy of Spark's protos, gets none: a clean stream end without
//! `ResultComplete` looks like the end of the result, and a reset loses it.
//! Under such a stub this layer makes each `ExecutePlan` a reattachable
//! execution driven by the same sans-I/O core as the session
//! ([`crate::reattach`]'s rules: resume from the last response after faults
//! and clean ends, NOT_FOUND, stalls, backoff, stream integrity), and
//! hands the stub one stream that ends with the result's real end or with a
//! `tonic::Status`.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use spark_connect_retry::layer::ReattachLayer;
//! use tower::Layer;
//!
//! let channel = tonic::transport::Endpoint::from_static("http://127.0.0.1:15002").connect_lazy();
//! let service = ReattachLayer::new().layer(channel);
//! // Any generated stub over it: `SparkConnectServiceClient::new(service)`.
//! # let _ = service;
//! # Ok(())
//! # }
//! ```
//!
//! ## What it does to the bytes
//!
//! It never decodes and re-encodes a caller's message (our protos are a
//! subset of Spark's; see `wire`). For an `ExecutePlan` it reads the ids, and
//! appends an `operation_id` (a UUIDv4) and `reattach_options { reattachable:
//! true }` when they are absent; everything else, unknown fields included,
//! goes out byte for byte. The `ReattachExecute` and `ReleaseExecute`
//! requests it makes are built from the caller's session id, user context
//! (as sent, extensions included) and client type, and carry the caller's
//! request metadata (`authorization`, `x-databricks-cluster-id`, …).
//! Responses reach the caller as the server sent them.
//!
//! A `ReattachExecute` the caller sends itself is carried on the same way:
//! its bytes are forwarded, and later segments are the same bytes with
//! `last_response_id` appended. "Not found" then ends the stream with the
//! server's status, since the plan is the caller's.
//!
//! Every other RPC passes through untouched, and so does an `ExecutePlan`
//! that asks for `reattachable: false` or comes compressed, except that a
//! transport failure under such a call (the connection broke, was refused
//! or reset, before the server's status) reaches the caller as UNAVAILABLE,
//! as grpc-core reports one, and not as tonic's UNKNOWN or a reset stream,
//! which PySpark and the JVM client do not retry. The retry is the
//! caller's: the layer sends a forwarded call once.
//!
//! When the layer gives up on a stream it carries, the caller gets the
//! server's last status, except for a failure of the layer's own hop (a
//! broken, refused, reset or truncated connection or stream): that one ends
//! the stream UNAVAILABLE, message kept, as grpc-core reports it. The
//! caller reads it from trailers without its cause, and tonic's code for
//! most of these is UNKNOWN, which a caller that reattaches by itself takes
//! for the server's verdict; the execution is still on the server, and a
//! reattach resumes it exactly.
//!
//! ## Releases
//!
//! [`Releases::Own`] (the default): the layer frees the server's buffer as
//! the session does (`release_until` after progress, `release_all` at the
//! end, on error and when the caller drops the stream). [`Releases::CallerOnly`]:
//! the layer sends no release at all and leaves them to the caller; for a
//! caller that reattaches by itself (PySpark, the JVM client), which may ask
//! again for any response after the last one *it* released
//! (`spark-connect-guard` uses this).
//!
//! Under either, a `ReleaseExecute` the caller sends through the layer is
//! noted for the layer's executions of that operation: none of them sends
//! its `ExecutePlan` again, and "not found" ends them with the server's
//! status. A caller that reattached on a new connection, read the result
//! and released it may have left an older execution of the layer behind,
//! still reading for it (a partition drops the caller's `RST_STREAM` too);
//! without the note, that execution's "not found" would look like a lost
//! `ExecutePlan` and re-create the released query on the server.
//!
//! ## Stalls need a channel that can reconnect
//!
//! A stall (no message within the idle timeout) reattaches over a fresh
//! connection: the layer marks that request
//! [`FreshConnection`](crate::reconnect::FreshConnection), which a
//! [`ReconnectingChannel`](crate::reconnect::ReconnectingChannel) honours
//! (and the channel `SparkSessionBuilder::build_channel` returns, which
//! the guard uses upstream). A plain tonic `Channel` ignores the mark, so
//! on a connection that went silent without a reset, every reattach goes
//! to the same dead connection until HTTP/2 keepalive closes it: give such
//! a channel keepalive (`Endpoint::http2_keep_alive_interval` and
//! `keep_alive_timeout`), or the stall repeats until the immediate-retry
//! bound (1 h by default) ends the stream. Found by the deterministic
//! simulation (`docs/simulation.md`).
//!
//! ## Bounded buffering
//!
//! The layer reads the next response only when the caller's body is polled
//! for it: at most one response is held between the two streams, on top of
//! what HTTP/2 flow control lets each connection buffer.

pub use reattach::{ReattachLayer, ReattachService, Releases};
pub use retry::SparkConnectLayer;
pub use tonic_retry::layer::{
    CallOptions, CallStats, CallStatsHandle, ConfigWarning, HedgingPolicy, MethodConfig,
    ResponseKind, RetryLayer, RetryService, RetryStats, RetryStatsHandle, RetryThrottle,
    ServiceConfig, ServiceConfigError,
};

mod reattach;
mod retry;
