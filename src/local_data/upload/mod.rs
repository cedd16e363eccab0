//! Cached-artifact uploads (`AddArtifacts`) under the retry policy.
//!
//! An upload is where retries are hardest: the request is a client stream,
//! the server may have seen part of it when the connection drops, and the
//! data must end up on the server exactly once. PySpark retries its
//! `cache_artifacts` as a whole, asking `ArtifactStatus` first; the
//! official Rust client does not retry uploads at all.
//!
//! Here a group of blobs (one `AddArtifacts` stream, as PySpark batches its
//! chunks) is kept in memory until the server has acknowledged every one.
//! Each attempt of the [`Retrying`](crate::retrying::Retrying) loop:
//!
//! 1. asks `ArtifactStatus` about the names not yet settled, and skips what
//!    the server already holds (a stream cut after the server stored it);
//! 2. streams the rest, the request bytes cut from the kept blobs only when
//!    tonic asks for the next message;
//! 3. checks the answer: every artifact sent summarised once, CRC good.
//!
//! A transient failure of either RPC is retried by the session's policy; a
//! CRC mismatch the server reports is [`UploadError::CrcMismatch`] at once
//! (the bytes left with their CRC, so a resend would not help). The rules
//! are in `core`, without I/O; the thin driver that makes the RPCs is the
//! session's (`session/upload.rs`), so this module has no session in it.

pub(crate) mod core;
mod error;
pub(crate) mod stats;

pub use error::UploadError;
pub use stats::UploadStats;
