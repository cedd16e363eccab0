//! Retries for any tonic client, as a tower layer.
//!
//! tonic has no retries, and its interceptors cannot add them: an
//! interceptor sees a request once and never its response. A tower layer
//! between the generated client and the `Channel` can: [`RetryLayer`] keeps
//! the request body in memory, reads each response until its gRPC status
//! is known, and sends the call again when the [policy](crate::policy)
//! says so, the same policy core as the rest of the crate. Generated clients
//! are used unchanged:
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use tower::ServiceBuilder;
//! use tonic_retry::layer::{MethodConfig, RetryLayer, RetryThrottle};
//! use tonic_retry::retrying::Retrying;
//!
//! let channel = tonic::transport::Endpoint::from_static("http://127.0.0.1:50051")
//!     .connect_lazy();
//! let layer = RetryLayer::new(Retrying::default())
//!     .method("/kv.Store/Get", MethodConfig::idempotent())
//!     .per_attempt_timeout(Duration::from_secs(30))
//!     .throttle(RetryThrottle::new(10, 0.1)?);
//! let stats = layer.stats_handle();
//! // Any generated client: `StoreClient::new(ServiceBuilder::new().layer(layer).service(channel))`.
//! let mut client = tonic::client::Grpc::new(ServiceBuilder::new().layer(layer).service(channel));
//! # let _ = (&mut client, stats);
//! # Ok(()) }
//! ```
//!
//! Two constructors:
//!
//! * [`RetryLayer::new`]: the policies of a [`Retrying`](crate::retrying::Retrying)
//!   (by default UNAVAILABLE, RetryInfo and transport failures, 5 attempts:
//!   [`policy`](crate::policy)), with methods named one by one
//!   ([`RetryLayer::method`], [`MethodConfig`]);
//! * [`RetryLayer::from_service_config`]: for any gRPC service, from a
//!   gRFC A6 service config ([`ServiceConfig::from_json`]): the codes it
//!   names, as many attempts as it says, A6's backoff and throttling.
//!
//! # Which calls are replayed
//!
//! The layer decides after each attempt in one pure function, by these
//! rules, in order:
//!
//! | # | rule | result (`reason`) |
//! |---|---|---|
//! | 1 | the attempt succeeded, or its response was committed to the caller | deliver it; the token bucket gets `token_ratio` back (`done`) |
//! | 2 | the call's overall deadline expired during the attempt | fail with DEADLINE_EXCEEDED (`deadline`) |
//! | 3 | the attempt's own timeout fired (time is left overall) | judged below as UNAVAILABLE; if the call stops here, it fails with DEADLINE_EXCEEDED |
//! | 4 | a failure the policy would retry, or one with a pushback | takes a token from the bucket (gRFC A6); this alone decides nothing |
//! | 5 | `grpc-retry-pushback-ms` negative or garbled | deliver (`pushback_stop`) |
//! | 6 | a non-idempotent method, unless the failure shows the work did not start (below) | deliver (`not_replayable`) |
//! | 7 | the first policy whose classifier accepts the status decides | deliver if none (`not_retryable`) or its budget is spent (`exhausted`: the attempt's event is the give-up warning) |
//! | 8 | the token bucket is at or below half | deliver (`throttled`) |
//! | 9 | the wait: the pushback exactly (capped by the policy's `max_server_retry_delay`, 10 min by default, as RetryInfo is), then the policy's backoff restarts (A6); else the policy's wait, with RetryInfo as its floor | |
//! | 10 | the retry would start at or past the deadline | deliver (`deadline`) |
//! | 11 | otherwise | retry after the wait (`pushback`, `retry_info` or `policy`) |
//!
//! A method is idempotent or not ([`MethodConfig`]); **unknown methods
//! are non-idempotent**, because a duplicated write is worse than a
//! surfaced error. Which failures replay which methods:
//!
//! | failure | idempotent | non-idempotent |
//! |---|---|---|
//! | the request never reached the server (`FailureKind::Unprocessed`: refused connection, `REFUSED_STREAM`, GOAWAY `NO_ERROR`, canceled before it was written) | policy decides | policy decides |
//! | a status with `grpc-retry-pushback-ms` ≥ 0 (the server asks for this retry) | policy decides | policy decides |
//! | RESOURCE_EXHAUSTED with `google.rpc.RetryInfo` (rejected at admission) | policy decides | policy decides |
//! | any other status (UNAVAILABLE, RetryInfo on other codes, …) | policy decides | never |
//! | a transport failure after the request was written (a reset, …) | policy decides | never |
//! | the attempt's own timeout | retried as UNAVAILABLE | never |
//! | `grpc-retry-pushback-ms` negative or garbled | never (A6) | never |
//!
//! "Policy decides" means the first [`RetryPolicy`](crate::policy::RetryPolicy)
//! of the method's [`Retrying`](crate::retrying::Retrying) that accepts the
//! status, within its budget.
//!
//! The request body is buffered up to a cap (1 MiB by default,
//! [`RetryLayer::max_request_buffer`]); a bigger request is sent once,
//! never retried (counted as `passthrough_too_large`). A retry is possible
//! only while the caller has seen nothing of the response, so each
//! response is read until its status is known, or committed (handed on,
//! never retried):
//!
//! | response | how the status is found | retryable? |
//! |---|---|---|
//! | trailers-only (`grpc-status` in the headers) | the headers | yes |
//! | HTTP status ≠ 200 without `grpc-status` | gRPC's HTTP mapping (503 → UNAVAILABLE, …) | yes |
//! | transport error from the channel | `Status::from_error`, source chain kept | yes |
//! | body error before anything was delivered | the body's status | yes |
//! | [`Auto`](ResponseKind::Auto) (the default): message then trailers already received | the trailers | yes |
//! | [`Auto`](ResponseKind::Auto): message, nothing more received yet, or a second message | committed at once: a stream's first message is never held | before the first message only |
//! | [`Unary`](ResponseKind::Unary) (declared): message then trailers | the trailers, the message buffered up to the response cap | yes, unless over the cap (committed) |
//! | [`ServerStreaming`](ResponseKind::ServerStreaming) (declared) | committed at its first data | before data only |
//! | body ends without trailers | handed on (tonic reports the missing status) | no |
//!
//! # gRPC conventions
//!
//! * Retries carry `grpc-previous-rpc-attempts: N`.
//! * Waits: `grpc-retry-pushback-ms` ≥ 0 exactly (the policy's budget is
//!   still used and its backoff restarts, as in A6), capped like
//!   `RetryInfo` by the policy's `max_server_retry_delay` (10 minutes by
//!   default; a hedge waits at most 10 minutes), else the policy's backoff
//!   with `RetryInfo` as its floor.
//! * Deadline across attempts: the smaller of the request's `grpc-timeout`
//!   and the method's timeout (service config) or
//!   [`RetryLayer::default_deadline`]. Each attempt's `grpc-timeout` is
//!   `min(per-attempt timeout, time left)`. No retry is scheduled to start
//!   at or past the deadline; when it expires during an attempt the caller
//!   gets DEADLINE_EXCEEDED. Durations too large for the clock mean "none",
//!   never a panic.
//! * Throttling ([`RetryLayer::throttle`]): A6's token bucket, shared by
//!   every clone; a throttled retry fails fast with the last status.
//!
//! # Hedging
//!
//! An idempotent method can be hedged instead of retried (gRFC A6
//! `hedgingPolicy`: [`RetryLayer::hedge`], [`MethodConfig::with_hedging`],
//! or a service config): copies of the call go out `hedgingDelay` apart
//! and the first answer wins; the others are dropped, which resets their
//! HTTP/2 streams. A request over the buffer cap is sent once, as for
//! retries; a server stream is committed by its first message. The rules,
//! in order:
//!
//! | # | rule | result (`reason`) |
//! |---|---|---|
//! | 1 | an attempt succeeded, or its response was committed (a stream's first message) | commit it, cancel the others; the token bucket gets `token_ratio` back (`done`) |
//! | 2 | an attempt timed out at the call's deadline | fail with DEADLINE_EXCEEDED, cancel the others (`deadline`) |
//! | 3 | an attempt failed with a status not in `nonFatalStatusCodes` (a timeout of its own counts as UNAVAILABLE) | commit it, cancel the others (`not_retryable`) |
//! | 4 | a non-fatal failure | takes a token; pushback negative or garbled stops hedging (`pushback_stop`), positive sets the next hedge that long after now (at most the policy's `max_server_retry_delay`, 10 minutes by default), none sends it at once |
//! | 5 | the first attempt | at once |
//! | 6 | `maxAttempts` started | no more hedges (`exhausted` once all failed) |
//! | 7 | a hedge would start at or past the deadline (the first attempt always starts, as an unhedged call's does) | no more hedges (`deadline`) |
//! | 8 | the token bucket is at or below half | no more hedges (`throttled`) |
//! | 9 | otherwise | a hedge at the hedge time, the next one `hedgingDelay` later (`hedge`) |
//!
//!
//! When no attempt is in flight and no hedge will start, the call ends with
//! the last failure. Each hedge carries `grpc-previous-rpc-attempts`.
//!
//! # Per-call overrides
//!
//! [`CallOptions`] in a request's extensions cap one call's attempts, turn
//! its retries off, give it its own deadline, and record its attempts in a
//! [`CallStatsHandle`].
//!
//! # Observability
//!
//! Each call runs in a `grpc_retry` debug span with OpenTelemetry's RPC
//! fields: `rpc.system = "grpc"`, `rpc.service`, `rpc.method`, and
//! `rpc.grpc.status_code` once the call ends. Each attempt logs exactly
//! one event with `rpc.service`, `rpc.method`, `attempt` (1 for the first,
//! as the retry loop counts), `rpc.grpc.status_code`, `wait_ms` (the wait
//! actually slept before the next attempt, whether it came from the
//! backoff, a pushback or a `RetryInfo`) and `reason` (the table above):
//! a `grpc attempt` debug event, except for the attempt that spends the
//! budget, whose event is the give-up warning (the `Retrying`'s
//! [`give_up_message`](crate::retrying::Retrying::give_up_message), with
//! `attempts`, `waited_ms` and `server.address`, the request's authority
//! or [`RetryLayer::target`]): the span is at debug level, so the warning
//! names the call itself. A hedged call logs each hedge with
//! `reason = "hedge"`, and the event that ends it names the attempt that
//! `won`. [`RetryLayer::stats`] counts calls, attempts, retries, throttled
//! and exhausted calls, and hedges sent, won and cancelled. Waits use the
//! `Retrying`'s injected sleeper, so tests never sleep.

mod attempt;
mod body;
mod call;
mod config;
mod decide;
mod hedging_machine;
mod hedging_policy;
#[allow(clippy::module_inception)]
mod layer;
mod method;
mod service;
mod stats;
mod throttle;

pub use call::{CallOptions, CallStats, CallStatsHandle};
pub use config::{ConfigWarning, MethodEntry, MethodName, ServiceConfig, ServiceConfigError};
pub use hedging_policy::HedgingPolicy;
pub use layer::RetryLayer;
pub use method::{MethodConfig, ResponseKind};
pub use service::RetryService;
pub use stats::{RetryStats, RetryStatsHandle};
pub use throttle::RetryThrottle;
