//! # tonic-retry
//!
//! Retries for any [tonic] client: a retry policy, an async retry loop and a
//! tower layer that reads gRPC service configs (gRFC A6: `retryPolicy`,
//! `hedgingPolicy`, `retryThrottling`).
//!
//! tonic has no retries, and its interceptors cannot add them: an
//! interceptor sees a request once and never its response, and tower's own
//! `Retry` needs a `Clone` request, which `http::Request` with a streaming
//! body is not. So a tonic program turns every restart, reset connection or
//! `UNAVAILABLE` into an error of its own, or writes a loop that either
//! hammers a struggling server or replays a call that was not safe to
//! replay. This crate is that loop, written once and tested against real
//! sockets.
//!
//! | module | what |
//! |---|---|
//! | [`policy`] | [`RetryPolicy`](policy::RetryPolicy): classification of `tonic::Status` (transport failures included), budgets, backoff and jitter, the pure decision core |
//! | [`retrying`] | [`Retrying`](retrying::Retrying), the async retry loop, with injectable sleeper, clock and jitter |
//! | [`layer`] | [`RetryLayer`](layer::RetryLayer), a tower layer for any generated tonic client, from code or a service config |
//! | [`status`] | `google.rpc.RetryInfo` read from status details, defensively |
//! | [`request_error`] | [`RequestErrorLayer`](request_error::RequestErrorLayer): a request that cannot be encoded fails with its own status, not the stream reset it causes |
//! | [`sanitize`] | [`SanitizeLayer`](sanitize::SanitizeLayer): a guard against tonic's panic on non-base64 status details |
//! | [`transport`] | [`GrpcChannel`](transport::GrpcChannel): any service stack as one boxed, sanitized client type |
//!
//! No cargo features: everything is always built, and nothing here compiles
//! a gRPC server, a protocol of its own or Arrow.
//!
//! ```
//! use std::time::Duration;
//! use tonic_retry::layer::{RetryLayer, ServiceConfig};
//! use tonic_retry::retrying::Retrying;
//!
//! let config = ServiceConfig::from_json(r#"{
//!   "methodConfig": [{
//!     "name": [{"service": "echo.Echo"}],
//!     "retryPolicy": {
//!       "maxAttempts": 4, "initialBackoff": "0.1s", "maxBackoff": "1s",
//!       "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]
//!     }
//!   }]
//! }"#)?;
//! let layer = RetryLayer::from_service_config(&config, Retrying::default());
//! assert!(layer.method_config("/echo.Echo/Say").is_idempotent());
//! // Methods the config does not name are never replayed.
//! assert!(!layer.method_config("/other.Service/Write").is_idempotent());
//! # Ok::<(), tonic_retry::layer::ServiceConfigError>(())
//! ```
//!
//! [tonic]: https://docs.rs/tonic
#![warn(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod headers;
pub mod layer;
pub mod policy;
pub mod request_error;
pub mod retrying;
pub mod sanitize;
pub mod status;
pub mod transport;
