//! Results: an execution's responses turned into Arrow record batches,
//! whole and exactly once, or a typed error.
//!
//! Kept apart from the session because a result outlives the call that
//! started it: [`ArrowStream`](arrow_stream::ArrowStream) reads a
//! reattachable execution, decodes Spark's Arrow batches (`decode`,
//! [`schema`]), keeps a digest of the rows (`digest`) and, when the server
//! lost the execution, re-runs the query and checks the digest
//! ([`resume`]). The module is private; users name these items under
//! [`session`](crate::session), one public path each.

pub(crate) mod arrow_stream;
#[cfg(feature = "arrow")]
mod decode;
#[cfg(all(test, feature = "arrow"))]
mod decode_codec_tests;
#[cfg(feature = "arrow")]
pub(crate) mod decode_error;
#[cfg(all(test, feature = "arrow"))]
mod decode_fuzz;
#[cfg(feature = "arrow")]
mod digest;
#[cfg(feature = "arrow")]
mod ipc_scan;
#[cfg(feature = "arrow")]
pub(crate) mod resume;
#[cfg(feature = "arrow")]
pub(crate) mod schema;
