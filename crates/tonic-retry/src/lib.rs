#![doc = include_str!("../README.md")]
#![warn(missing_docs, unreachable_pub)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod boxed;
mod framing;
mod headers;
pub mod layer;
#[cfg(feature = "otel")]
#[cfg_attr(docsrs, doc(cfg(feature = "otel")))]
pub mod metrics;
pub mod policy;
mod recorder;
mod request_error;
pub mod retrying;
pub mod sanitize;
mod status;
pub mod transport;
