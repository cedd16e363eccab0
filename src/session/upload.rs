//! The async driver of an upload group: each attempt asks `ArtifactStatus`,
//! streams what the server lacks with `AddArtifacts` and checks the answer,
//! all under the session's retry loop.
//!
//! It lives with the session because it is the session's RPCs on the
//! session's generation; the rules it follows (what to send, what an answer
//! must say) have no session in them and are in
//! [`local_data::upload`](crate::local_data::upload) (`core`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use tokio_stream::StreamExt;

use super::error::SparkError;
use super::generation::Generation;
use super::options::lock;
use super::spark::{SparkSession, with_deadline};
use crate::local_data::upload::core::{UploadGroup, payload, shapes};
use crate::local_data::upload::stats::UploadStats;
use crate::proto::{self, AddArtifactsRequest};
use crate::retrying::AttemptError;
use crate::token::call::CallToken;

impl SparkSession {
    /// Upload `blobs` as `cache/<sha256>` artifacts in one group, under the
    /// retry policy, exactly once, on generation `g` of the session (all
    /// groups of one relation must land in one server-side session);
    /// returns their hashes in order.
    pub(crate) async fn cache_blobs(
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
        let token = CallToken::new(self.options().credentials.as_ref());
        let (result, loop_stats) = self
            .options()
            .retrying
            .run(|| self.upload_attempt(g, &group, &counts, sent.clone(), &rpc, &token))
            .await;
        let group = group.into_inner().unwrap_or_else(|e| e.into_inner());
        let counts = counts.into_inner().unwrap_or_else(|e| e.into_inner());
        stats.artifacts_sent += counts.artifacts_sent;
        stats.artifacts_skipped += group.held_count();
        stats.bytes_sent += sent.load(Ordering::Relaxed);
        stats.bytes_skipped += group.held_bytes();
        stats.streams += counts.streams;
        let retries = u64::from(loop_stats.policy_retries + loop_stats.immediate_retries);
        stats.retries += retries;
        self.options()
            .meters
            .upload_retried(retries, result.is_ok());
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
        token: &CallToken<'_>,
    ) -> Result<(), AttemptError<SparkError>> {
        if lock(group).is_done() {
            return Ok(());
        }
        let names = lock(group).unsettled();
        *lock(rpc) = "ArtifactStatus";
        let statuses = self.artifact_statuses(g, names, token).await?;
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
        let used = token.slot();
        let resp = with_deadline(
            self.options().deadlines.add_artifacts,
            requests,
            used.clone(),
            |r| client.add_artifacts(r),
        )
        .await
        .map_err(|s| token.judge(s, &used))?;
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
        token: &CallToken<'_>,
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
        let used = token.slot();
        let resp = with_deadline(
            self.options().deadlines.artifact_status,
            req,
            used.clone(),
            |r| client.artifact_status(r),
        )
        .await
        .map_err(|s| token.judge(s, &used))?;
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
