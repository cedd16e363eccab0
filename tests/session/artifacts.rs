//! AddArtifacts, ArtifactStatus and local relations on the embedded server,
//! driven by the generated tonic client over loopback: uploads shaped as
//! PySpark 4.3 sends them, every upload fault of the script, and the rows
//! read back.

mod relations;
mod upload;

use spark_connect_retry::proto::{
    self,
    add_artifacts_request::{
        ArtifactChunk, Batch, BeginChunkedArtifact, Payload, SingleChunkArtifact,
    },
    spark_connect_service_client::SparkConnectServiceClient,
};
use spark_connect_testkit::TestServer;
use tonic::transport::Channel;
use tonic::{Code, Status};
use tonic_types::StatusExt;

pub type Client = SparkConnectServiceClient<Channel>;

pub const SESSION: &str = "5b0c8a52-6f1e-4d2a-9c3b-7e8f90a1b2c3";

/// PySpark's `ArtifactManager.CHUNK_SIZE`.
pub const CHUNK_SIZE: usize = 32 * 1024;

pub async fn client(server: &TestServer) -> Client {
    SparkConnectServiceClient::connect(server.endpoint())
        .await
        .expect("connect")
}

pub fn chunk(data: &[u8]) -> ArtifactChunk {
    ArtifactChunk {
        data: data.to_vec(),
        crc: i64::from(crc32fast::hash(data)),
    }
}

fn request(session_id: &str, payload: Payload) -> proto::AddArtifactsRequest {
    proto::AddArtifactsRequest {
        session_id: session_id.to_owned(),
        payload: Some(payload),
        ..Default::default()
    }
}

/// The requests PySpark 4.3's `ArtifactManager._add_artifacts` sends for
/// these artifacts: small ones batched up to 32 KiB per request, larger
/// ones as a `begin_chunk` and then one `chunk` per further 32 KiB.
pub fn pyspark_requests(
    session_id: &str,
    artifacts: &[(&str, &[u8])],
) -> Vec<proto::AddArtifactsRequest> {
    let mut out = Vec::new();
    let mut batch: Vec<SingleChunkArtifact> = Vec::new();
    let mut batch_size = 0;
    let flush = |batch: &mut Vec<SingleChunkArtifact>, out: &mut Vec<_>| {
        if !batch.is_empty() {
            let artifacts = std::mem::take(batch);
            out.push(request(session_id, Payload::Batch(Batch { artifacts })));
        }
    };
    for (name, data) in artifacts {
        if data.len() > CHUNK_SIZE {
            flush(&mut batch, &mut out);
            batch_size = 0;
            let mut chunks = data.chunks(CHUNK_SIZE);
            let first = chunks.next().expect("not empty");
            out.push(request(
                session_id,
                Payload::BeginChunk(BeginChunkedArtifact {
                    name: (*name).to_owned(),
                    total_bytes: data.len() as i64,
                    num_chunks: data.len().div_ceil(CHUNK_SIZE) as i64,
                    initial_chunk: Some(chunk(first)),
                }),
            ));
            out.extend(chunks.map(|c| request(session_id, Payload::Chunk(chunk(c)))));
        } else {
            if batch_size + data.len() > CHUNK_SIZE {
                flush(&mut batch, &mut out);
                batch_size = 0;
            }
            batch.push(SingleChunkArtifact {
                name: (*name).to_owned(),
                data: Some(chunk(data)),
            });
            batch_size += data.len();
        }
    }
    flush(&mut batch, &mut out);
    out
}

/// Sends one AddArtifacts stream of these requests.
pub async fn add(
    c: &mut Client,
    requests: Vec<proto::AddArtifactsRequest>,
) -> Result<proto::AddArtifactsResponse, Status> {
    c.add_artifacts(tokio_stream::iter(requests))
        .await
        .map(tonic::Response::into_inner)
}

/// `(name, is_crc_successful)` of each summary.
pub fn summaries(r: &proto::AddArtifactsResponse) -> Vec<(String, bool)> {
    r.artifacts
        .iter()
        .map(|a| (a.name.clone(), a.is_crc_successful))
        .collect()
}

/// Deterministic bytes (a small LCG), so every test has its own data.
pub fn data(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..len)
        .map(|_| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (x >> 56) as u8
        })
        .collect()
}

/// Asserts a Spark-encoded error: `INTERNAL` with this error class.
pub fn assert_spark(status: &Status, class: &str) {
    assert_eq!(status.code(), Code::Internal, "{status:?}");
    let info = status
        .get_details_error_info()
        .unwrap_or_else(|| panic!("no ErrorInfo in {status:?}"));
    assert_eq!(
        info.metadata.get("errorClass").map(String::as_str),
        Some(class),
        "{status:?}"
    );
}
