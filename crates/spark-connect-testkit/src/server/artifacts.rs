//! The artifact RPCs: AddArtifacts reads a client stream into the staging
//! area of [`upload`](super::upload), applies the fault script between
//! messages, and stores the artifacts once the client has ended the stream
//! ([`store`](super::store)); ArtifactStatus says which `cache/` artifacts a
//! session holds.
//!
//! As in Spark, the session is the one of the first request (created on
//! first use, checked against the server-side session id the client saw);
//! a stream with no request at all fails with `INTERNAL` (Spark fails it
//! with a `NullPointerException`).

use tonic::{Request, Response, Status, Streaming};

use super::call::{self, kill_switch};
use super::state::Shared;
use super::state::UploadCall;
use super::upload::Upload;
use crate::conn::KillSwitch;
use crate::error::SparkException;
use crate::faults::{Action, Fault, Rpc, lock};
use spark_connect_retry::proto::{self, add_artifacts_request::Payload};

/// AddArtifacts: reads the stream, applies its fault, stores what it carried.
pub(super) async fn add_artifacts(
    shared: &Shared,
    request: Request<Streaming<proto::AddArtifactsRequest>>,
) -> Result<Response<proto::AddArtifactsResponse>, Status> {
    let kill = kill_switch(&request);
    let fault = call::begin(
        shared,
        Rpc::AddArtifacts,
        &shared.counters.add_artifacts,
        &request,
        "",
        "",
    )
    .await?;
    let mut record = UploadCall::default();
    let result = read_upload(
        shared,
        request.into_inner(),
        fault.as_ref(),
        kill.as_ref(),
        &mut record,
    )
    .await;
    lock(&shared.log).uploads.push(record.clone());
    let response = result?;
    // A fault without `after_requests` acts once everything was stored.
    let after_store = fault.filter(|f| f.after.is_none() && !matches!(f.action, Action::Corrupt));
    let after_store = after_store.map(|f| (Rpc::AddArtifacts, f));
    call::finish(
        shared,
        after_store,
        kill,
        &record.session_id,
        "",
        Ok(response),
    )
    .await
}

/// Reads the stream, then stores what it carried.
async fn read_upload(
    shared: &Shared,
    mut stream: Streaming<proto::AddArtifactsRequest>,
    fault: Option<&Fault>,
    kill: Option<&KillSwitch>,
    record: &mut UploadCall,
) -> Result<proto::AddArtifactsResponse, Status> {
    let is_corrupt = |f: &&Fault| matches!(f.action, Action::Corrupt);
    let corrupt_at = fault.filter(is_corrupt).map(|f| f.after.unwrap_or(0));
    let mut pending = fault.filter(|f| f.after.is_some() && !is_corrupt(f));
    let mut upload = Upload::default();
    let mut read = 0u32;
    loop {
        if let Some(f) = pending.filter(|f| f.after == Some(read)) {
            pending = None;
            shared
                .faults
                .fire(f, Rpc::AddArtifacts, "after reading request messages");
            call::apply(shared, f, kill, &record.session_id, "").await?;
        }
        // An error here is the client's cut: everything staged is dropped.
        let Some(mut msg) = stream.message().await? else {
            break;
        };
        if let Some(f) = fault.filter(|_| corrupt_at == Some(read)) {
            shared
                .faults
                .fire(f, Rpc::AddArtifacts, "corrupting a chunk");
            corrupt(&mut msg.payload);
        }
        read += 1;
        record.messages += 1;
        record.bytes += payload_bytes(msg.payload.as_ref());
        if record.messages == 1 {
            shared.get_or_create_session(
                &msg.session_id,
                msg.client_observed_server_side_session_id.as_deref(),
            )?;
            record.session_id = msg.session_id.clone();
        }
        upload
            .push(msg.payload)
            .map_err(|e| shared.spark_status(&e, Some(&record.session_id)))?;
    }
    if let Some(f) = pending {
        shared
            .faults
            .fire(f, Rpc::AddArtifacts, "at the end of the request stream");
        call::apply(shared, f, kill, &record.session_id, "").await?;
    }
    if record.messages == 0 {
        return Err(SparkException::java(
            "java.lang.IllegalStateException",
            "The AddArtifacts stream ended before its first request",
        )
        .to_status(None));
    }
    let session_id = record.session_id.clone();
    let staged = upload
        .finish()
        .map_err(|e| shared.spark_status(&e, Some(&session_id)))?;
    let commit = {
        let mut st = lock(&shared.state);
        let Some(session) = st.sessions.get_mut(&session_id) else {
            // Released while the stream was read.
            return Err(SparkException::session_closed(&session_id).to_status(None));
        };
        session.artifacts.commit(staged)
    };
    record.stored = commit.stored;
    if let Some(e) = commit.error {
        return Err(shared.spark_status(&e, Some(&session_id)));
    }
    Ok(proto::AddArtifactsResponse {
        session_id,
        server_side_session_id: shared.ssid(),
        artifacts: commit.summaries,
    })
}

/// ArtifactStatus, as [`answer_artifact_status`].
pub(super) async fn artifact_status(
    shared: &Shared,
    request: Request<proto::ArtifactStatusesRequest>,
) -> Result<Response<proto::ArtifactStatusesResponse>, Status> {
    let counter = &shared.counters.artifact_status;
    call::session_unary(
        shared,
        Rpc::ArtifactStatus,
        counter,
        request,
        answer_artifact_status,
    )
    .await
}

/// ArtifactStatus: `exists` for each name (only `cache/` names can exist).
fn answer_artifact_status(
    shared: &Shared,
    req: proto::ArtifactStatusesRequest,
) -> Result<proto::ArtifactStatusesResponse, Status> {
    use proto::artifact_statuses_response::ArtifactStatus;
    let statuses = {
        let st = lock(&shared.state);
        let artifacts = st.sessions.get(&req.session_id).map(|s| &s.artifacts);
        req.names
            .into_iter()
            .map(|name| {
                let exists = artifacts.is_some_and(|a| a.exists(&name));
                (name, ArtifactStatus { exists })
            })
            .collect()
    };
    Ok(proto::ArtifactStatusesResponse {
        session_id: req.session_id,
        server_side_session_id: shared.ssid(),
        statuses,
    })
}

/// Artifact data bytes in a request.
fn payload_bytes(payload: Option<&Payload>) -> u64 {
    let n = match payload {
        Some(Payload::Batch(b)) => b
            .artifacts
            .iter()
            .map(|a| a.data.as_ref().map_or(0, |c| c.data.len()))
            .sum(),
        Some(Payload::BeginChunk(b)) => b.initial_chunk.as_ref().map_or(0, |c| c.data.len()),
        Some(Payload::Chunk(c)) => c.data.len(),
        None => 0,
    };
    n as u64
}

/// Changes the first chunk of a request as a bad link would: its first byte
/// flipped, or its CRC when it has no data.
fn corrupt(payload: &mut Option<Payload>) {
    let chunk = match payload {
        Some(Payload::Batch(b)) => b.artifacts.first_mut().and_then(|a| a.data.as_mut()),
        Some(Payload::BeginChunk(b)) => b.initial_chunk.as_mut(),
        Some(Payload::Chunk(c)) => Some(c),
        None => None,
    };
    if let Some(chunk) = chunk {
        match chunk.data.first_mut() {
            Some(byte) => *byte ^= 0xff,
            None => chunk.crc ^= 1,
        }
    }
}
