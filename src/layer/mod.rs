//! A tower retry layer for tonic channels.
//!
//! [`RetryLayer`] wraps a tonic `Channel` (any
//! `Service<http::Request<tonic::body::Body>, Response = http::Response<B>> + Clone`)
//! and retries whole gRPC calls under a [`Retrying`](crate::retrying::Retrying)
//! configuration — the same policy core ([`RetryState`](crate::policy::RetryState),
//! [`classify_failure`](crate::policy::classify_failure)) as the rest of the
//! crate. Generated clients are used unchanged:
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use tower::ServiceBuilder;
//! use spark_connect_retry::layer::RetryLayer;
//! use spark_connect_retry::proto::spark_connect_service_client::SparkConnectServiceClient;
//! use spark_connect_retry::retrying::Retrying;
//!
//! let channel = tonic::transport::Endpoint::from_static("http://127.0.0.1:15002")
//!     .connect_lazy();
//! let layer = RetryLayer::spark_connect(Retrying::default())
//!     .per_attempt_timeout(Duration::from_secs(30))
//!     .throttle(10, 0.1);
//! let stats = layer.stats();
//! let mut client =
//!     SparkConnectServiceClient::new(ServiceBuilder::new().layer(layer).service(channel));
//! # let _ = (&mut client, stats);
//! # Ok(()) }
//! ```
//!
//! # What an attempt is, and when it is final
//!
//! The request body is buffered for replay up to a cap (1 MiB by default,
//! [`RetryLayer::max_request_buffer`]); a bigger request is sent once,
//! prefix and rest streamed, never retried (`passthrough_too_large`).
//!
//! The layer must know an attempt's gRPC status before it hands anything to
//! the caller:
//!
//! | response | how the status is found | retried? |
//! |---|---|---|
//! | trailers-only (`grpc-status` in the headers) | the headers | yes |
//! | HTTP status ≠ 200 without `grpc-status` | gRPC's HTTP mapping (503 → UNAVAILABLE, …) | yes |
//! | transport error from the channel | `Status::from_error`, source chain kept | yes |
//! | body error before it was committed | the body's `Status` | yes |
//! | [`ResponseKind::Unary`]: message(s) then trailers | buffer up to the response cap, read `grpc-status` from the trailers | yes, unless over the cap (committed) |
//! | [`ResponseKind::ServerStreaming`] | committed at the first data frame (gRFC A6 commit rule); an error status before any data is retried | before data only |
//! | [`ResponseKind::Auto`] (default) | buffer the first message; trailers next ⇒ unary (status known); a second message starting ⇒ stream, committed | unary: yes; stream: before its first message |
//! | body ends without trailers | delivered as is (tonic reports the truncation) | no |
//!
//! `Auto` needs no configuration and never retries past delivered data, but
//! holds a stream's first message until its second begins; naming streaming
//! methods avoids that ([`RetryLayer::spark_connect`] does).
//! Statuses are built with `Status::from_header_map` after the
//! [`sanitize`](crate::sanitize) guard, so the policy sees details
//! (RetryInfo) and tonic never panics on a malformed details header. Every
//! response goes through that guard.
//!
//! # Replay safety
//!
//! Methods are configured by gRPC path with [`MethodConfig`]. **The default
//! is non-idempotent**: an unknown method may have side effects, and a
//! duplicate write is worse than a surfaced error. Which failures are
//! replayed:
//!
//! | failure | idempotent | non-idempotent |
//! |---|---|---|
//! | `FailureKind::Unprocessed`: `ConnectError`, hyper canceled-before-write, `REFUSED_STREAM`, GOAWAY `NO_ERROR` | policy decides | policy decides |
//! | server status with `grpc-retry-pushback-ms` ≥ 0 (the server asks for this retry) | policy decides | policy decides |
//! | server `RESOURCE_EXHAUSTED` with `RetryInfo` (rejected at admission) | policy decides | policy decides |
//! | any other server status (UNAVAILABLE, RetryInfo on other codes, …) | policy decides | never |
//! | `MaybeProcessed` transport failures (reset after the request was written, …) | policy decides | never |
//! | per-attempt timeout | retried as UNAVAILABLE | never |
//! | `grpc-retry-pushback-ms` negative or garbled | never (A6) | never |
//!
//! "Policy decides" means the first matching [`RetryPolicy`](crate::policy::RetryPolicy)
//! of the `Retrying` (PySpark's `DefaultPolicy` by default) and its budget.
//!
//! Spark Connect ([`RetryLayer::spark_connect`]):
//!
//! | RPC | idempotent | kind | why |
//! |---|---|---|---|
//! | `ExecutePlan` | **no** | server-streaming | a command may write; replay through the reattachable execution (keyed by operation id) instead |
//! | `ReattachExecute` | yes | server-streaming | resumes from a response id |
//! | `AnalyzePlan`, `Config`, `ArtifactStatus`, `FetchErrorDetails`, `GetStatus` | yes | unary | reads, or sets to a fixed value |
//! | `AddArtifacts` | yes | unary | re-adding the same artifact (same name, same CRC) is a no-op |
//! | `Interrupt`, `ReleaseExecute`, `ReleaseSession` | yes | unary | repeating a release or interrupt is harmless |
//! | `CloneSession` | yes | unary | the client names the new session |
//!
//! # gRPC conventions
//!
//! * Retries carry `grpc-previous-rpc-attempts: N`.
//! * Wait precedence: `grpc-retry-pushback-ms` ≥ 0 (exactly that wait; the
//!   policy's budget is still consumed and its backoff restarts, as in A6)
//!   \> the policy's backoff with `RetryInfo` as its floor (capped by the
//!   policy's `max_server_retry_delay`). Pushback is honoured only when the
//!   policy would retry the status; negative or garbled pushback stops.
//! * Overall deadline: the request's `grpc-timeout`, else
//!   [`RetryLayer::default_deadline`]. Each attempt's `grpc-timeout` is
//!   `min(per-attempt timeout, remaining)`. A retry whose wait would end at
//!   or past the deadline is not scheduled: the last status is returned.
//!   When the deadline expires during an attempt the caller gets
//!   DEADLINE_EXCEEDED.
//! * Throttling ([`RetryLayer::throttle`]): gRFC A6's token bucket, shared
//!   by every clone; a throttled retry fails fast with the last status.
//!
//! # Cost on the success path
//!
//! Most calls succeed at once, so that path is kept short:
//!
//! * The first attempt is sent from `RetryService::call` itself, on the
//!   service that was polled ready, when the request body is ready at once
//!   (a tonic unary request is) and no timer is needed. Its response is read
//!   by a small hand-written future held inline by the caller's future
//!   (264 bytes over a tonic `Channel`); the boxed retry loop is made only
//!   after a failure, or from the start for a call with a deadline or a
//!   body that has to wait.
//! * The first attempt takes the request's own head. What a retry needs of
//!   it is kept without allocating for a tonic request (up to four headers
//!   and tonic's `GrpcMethod` extension); other heads are cloned.
//! * The response body is a [`RetryBody`], not boxed: tonic's decoder boxes
//!   it once, as it does a `Channel`'s.
//! * A retry clones the inner service from a spare kept by the
//!   `RetryService`; the success path clones none.
//! * What only a failure needs (the decision, the spare service, the loop),
//!   committing a stream, and responses judged from their headers are out
//!   of line and `#[cold]`: the success path's code is small, and on a call
//!   that is mostly instruction-cache misses, size is what costs.
//!
//! `benches/layer.rs` measures the layer against the raw channel; the
//! README has the figures.
//!
//! # Observability
//!
//! A `grpc_retry` debug span per call (field `method`) with one `grpc attempt`
//! event per attempt (`method`, `attempt`, `code`, `wait_ms`, `why`: `done`,
//! `policy`, `retry_info`, `pushback`, `exhausted`, `not_retryable`,
//! `not_replayable`, `throttled`, `deadline`, `pushback_stop`), plus
//! [`RetryLayer::stats`]. Sleeping uses the `Retrying`'s injected sleeper.

mod attempt;
mod body;
mod future;
mod head;
#[allow(clippy::module_inception)]
mod layer;
mod service;
mod stats;
mod throttle;

pub use body::RetryBody;
pub use future::{BoxError, ResponseFuture};
pub use layer::{
    DEFAULT_MAX_REQUEST_BUFFER, DEFAULT_MAX_RESPONSE_BUFFER, MethodConfig, ResponseKind,
    RetryLayer, SPARK_CONNECT_SERVICE,
};
pub use service::RetryService;
pub use stats::{RetryStats, RetryStatsSnapshot};
pub use throttle::RetryThrottle;
