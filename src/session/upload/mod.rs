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
//! are in `upload::core`, without I/O; this file is the thin driver.

pub(crate) mod core;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use tokio_stream::StreamExt;

use self::core::{UploadGroup, payload, shapes};
use super::error::SparkError;
use super::generation::Generation;
use super::options::lock;
use super::spark::{SparkSession, with_deadline};
use crate::proto::{self, AddArtifactsRequest};
use crate::retrying::AttemptError;

pub use self::core::{ARTIFACT_CHUNK_SIZE, CACHE_PREFIX};

/// What went wrong with local data or its upload, before or besides any
/// server status.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum UploadError {
    /// The server reports that an artifact's bytes did not match their CRC.
    #[error(
        "the server reports a CRC mismatch for artifact {name}: the data was corrupted on the way; not retried"
    )]
    CrcMismatch {
        /// The artifact, `cache/<sha256>`.
        name: String,
    },
    /// The server's answer does not summarise an artifact that was sent.
    #[error("AddArtifacts answer has no summary for artifact {name}")]
    MissingSummary {
        /// The artifact sent.
        name: String,
    },
    /// The server's answer summarises an artifact that was not sent.
    #[error("AddArtifacts answer summarises artifact {name}, which was not sent")]
    UnexpectedSummary {
        /// The name in the answer.
        name: String,
    },
    /// A batch's schema differs from the schema given.
    #[error("batch {index} has schema {got}, expected {expected}")]
    SchemaMismatch {
        /// The batch's position in the input.
        index: usize,
        /// The schema given to `create_dataframe`.
        expected: String,
        /// The batch's schema.
        got: String,
    },
    /// The serialized data exceeds `spark.sql.session.localRelationSizeLimit`
    /// (PySpark's `LOCAL_RELATION_SIZE_LIMIT_EXCEEDED`).
    #[error(
        "[LOCAL_RELATION_SIZE_LIMIT_EXCEEDED] local data of at least {actual} bytes exceeds spark.sql.session.localRelationSizeLimit = {limit}"
    )]
    SizeLimitExceeded {
        /// Bytes serialized so far.
        actual: u64,
        /// The server's limit.
        limit: u64,
    },
    /// A server configuration value this client needs is not usable.
    #[error("server configuration {key} = {value:?} is not usable: {reason}")]
    InvalidConf {
        /// The configuration key.
        key: &'static str,
        /// The value the server gave.
        value: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The batches could not be written as Arrow IPC.
    #[error("cannot serialize the batches as Arrow IPC: {0}")]
    Arrow(#[source] arrow_schema::ArrowError),
}

/// What an upload did: counted over every attempt.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct UploadStats {
    /// Distinct artifacts the data became (0 when it went inline).
    pub artifacts: u64,
    /// Artifact sends, resends included.
    pub artifacts_sent: u64,
    /// Artifacts skipped because the server already held them.
    pub artifacts_skipped: u64,
    /// Artifact bytes handed to the transport, resends included.
    pub bytes_sent: u64,
    /// Artifact bytes skipped because the server already held them.
    pub bytes_skipped: u64,
    /// `AddArtifacts` streams opened.
    pub streams: u64,
    /// Attempts retried under the policy (either RPC failed transiently).
    pub retries: u64,
}

impl SparkSession {
    /// Upload `blobs` as `cache/<sha256>` artifacts in one group, under the
    /// retry policy, exactly once, on generation `g` of the session (all
    /// groups of one relation must land in one server-side session);
    /// returns their hashes in order.
    pub(super) async fn cache_blobs(
        &self,
        g: &Generation,
        blobs: Vec<Bytes>,
        stats: &mut UploadStats,
    ) -> Result<Vec<String>, SparkError> {
        let (group, hashes) = UploadGroup::new(blobs);
        let group = Mutex::new(group);
        let sent = Arc::new(AtomicU64::new(0));
        let counts = Mutex::new(UploadStats::default());
        // The RPC of the last attempt's last call: what a failure names.
        let rpc = Mutex::new("ArtifactStatus");
        let (result, loop_stats) = self
            .options()
            .retrying
            .run_with_stats(|| self.upload_attempt(g, &group, &counts, sent.clone(), &rpc))
            .await;
        let group = group.into_inner().unwrap_or_else(|e| e.into_inner());
        let counts = counts.into_inner().unwrap_or_else(|e| e.into_inner());
        stats.artifacts_sent += counts.artifacts_sent;
        stats.artifacts_skipped += group.held_count();
        stats.bytes_sent += sent.load(Ordering::Relaxed);
        stats.bytes_skipped += group.held_bytes();
        stats.streams += counts.streams;
        stats.retries += u64::from(loop_stats.policy_retries + loop_stats.immediate_retries);
        let err = match result {
            Ok(()) => return Ok(hashes),
            Err(AttemptError::Other(e)) => e,
            Err(AttemptError::Status(s) | AttemptError::RetryNow(Some(s))) => {
                let rpc = *lock(&rpc);
                self.call_error(s, Some(rpc), None, g).await
            }
            Err(AttemptError::RetryNow(None)) => SparkError::Protocol(
                "upload gave up on an immediate retry without a cause".to_owned(),
            ),
        };
        // A stale session is noted (renewed by the next call, with renewal
        // on); the upload is not moved: its other groups are on this one.
        self.note_failure(g, &err, false);
        Err(err)
    }

    /// One attempt: ArtifactStatus, then AddArtifacts with what is missing.
    async fn upload_attempt(
        &self,
        g: &Generation,
        group: &Mutex<UploadGroup>,
        counts: &Mutex<UploadStats>,
        sent_bytes: Arc<AtomicU64>,
        rpc: &Mutex<&'static str>,
    ) -> Result<(), AttemptError<SparkError>> {
        if lock(group).is_done() {
            return Ok(());
        }
        let names = lock(group).unsettled();
        *lock(rpc) = "ArtifactStatus";
        let statuses = self.artifact_statuses(g, names).await?;
        let send = lock(group).plan(&statuses);
        if send.is_empty() {
            return Ok(());
        }
        {
            let mut c = lock(counts);
            c.streams += 1;
            c.artifacts_sent += send.len() as u64;
        }
        let send = Arc::new(send);
        let sizes: Vec<usize> = send.iter().map(|a| a.data.len()).collect();
        let (session_id, observed) = (g.session_id().to_owned(), g.observed());
        let (user_context, client_type) = (self.user_context(), self.client_type_field());
        let artifacts = send.clone();
        let requests = tokio_stream::iter(shapes(&sizes)).map(move |shape| {
            let payload = payload(&artifacts, &shape);
            sent_bytes.fetch_add(payload_bytes(&payload), Ordering::Relaxed);
            AddArtifactsRequest {
                session_id: session_id.clone(),
                user_context: user_context.clone(),
                client_observed_server_side_session_id: observed.clone(),
                client_type: client_type.clone(),
                payload: Some(payload),
            }
        });
        *lock(rpc) = "AddArtifacts";
        let mut client = self.client();
        let resp = with_deadline(self.options().deadlines.add_artifacts, requests, |r| {
            client.add_artifacts(r)
        })
        .await
        .map_err(AttemptError::Status)?;
        self.verify(g, &resp.session_id, &resp.server_side_session_id)
            .map_err(AttemptError::Other)?;
        lock(group)
            .acknowledge(&send, &resp.artifacts)
            .map_err(|e| AttemptError::Other(e.into()))
    }

    /// ArtifactStatus for `names`: which of them the server holds.
    async fn artifact_statuses(
        &self,
        g: &Generation,
        names: Vec<String>,
    ) -> Result<
        HashMap<String, proto::artifact_statuses_response::ArtifactStatus>,
        AttemptError<SparkError>,
    > {
        let req = proto::ArtifactStatusesRequest {
            session_id: g.session_id().to_owned(),
            client_observed_server_side_session_id: g.observed(),
            user_context: self.user_context(),
            client_type: self.client_type_field(),
            names,
        };
        let mut client = self.client();
        let resp = with_deadline(self.options().deadlines.artifact_status, req, |r| {
            client.artifact_status(r)
        })
        .await
        .map_err(AttemptError::Status)?;
        self.verify(g, &resp.session_id, &resp.server_side_session_id)
            .map_err(AttemptError::Other)?;
        Ok(resp.statuses)
    }
}

/// The artifact bytes a request carries.
fn payload_bytes(p: &proto::add_artifacts_request::Payload) -> u64 {
    use proto::add_artifacts_request::Payload;
    let n = match p {
        Payload::Batch(b) => b
            .artifacts
            .iter()
            .map(|a| a.data.as_ref().map_or(0, |c| c.data.len()))
            .sum(),
        Payload::BeginChunk(b) => b.initial_chunk.as_ref().map_or(0, |c| c.data.len()),
        Payload::Chunk(c) => c.data.len(),
    };
    n as u64
}
