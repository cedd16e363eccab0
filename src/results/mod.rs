//! Results: an execution's responses turned into Arrow record batches,
//! whole and exactly once, or a typed error.
//!
//! Kept apart from the session because these are rules about a result,
//! with no session and no I/O in them, each tested on bytes alone: Spark's
//! Arrow batches decoded and checked (`decode`, [`schema`]), a digest of
//! the rows delivered (`digest`) and, when the server lost the execution
//! and the query ran again, the check that the new result starts with the
//! same rows ([`resume`]). The session's
//! [`ArrowStream`](crate::session::ArrowStream) drives them; their errors
//! are their own ([`ResultError`](error::ResultError)), which the session
//! turns into its [`SparkError`](crate::session::SparkError). The module is
//! private; users name its public items under [`session`](crate::session),
//! one public path each.

pub(crate) mod change;
#[cfg(feature = "arrow")]
pub(crate) mod decode;
#[cfg(all(test, feature = "arrow"))]
mod decode_codec_tests;
#[cfg(feature = "arrow")]
pub(crate) mod decode_error;
#[cfg(all(test, feature = "arrow"))]
mod decode_fuzz;
#[cfg(feature = "arrow")]
mod digest;
#[cfg(feature = "arrow")]
pub(crate) mod error;
#[cfg(feature = "arrow")]
mod ipc_scan;
#[cfg(feature = "arrow")]
pub(crate) mod resume;
#[cfg(feature = "arrow")]
pub(crate) mod schema;
