//! The pure rules of a cached-artifact upload: names, hashes, the request
//! shapes of an `AddArtifacts` stream, and what a retry still has to send.
//!
//! An upload that a cut can interrupt anywhere must never leave two copies
//! or a missing one on the server, and must not send again what the server
//! already acknowledged. Those decisions are made here, without I/O, so
//! every rule is unit-tested; the async driver
//! (`driver`) only moves bytes.
//!
//! Naming, chunking and CRC follow PySpark 4.3's `ArtifactManager`:
//! `cache/<sha256 hex>` names, 32 KiB pieces, artifacts larger than one
//! piece sent as `BeginChunkedArtifact` + `ArtifactChunk`s, smaller ones
//! packed into `Batch` requests of at most 32 KiB, each piece with its
//! zlib CRC-32.

use std::collections::HashMap;

use bytes::Bytes;
use sha2::{Digest, Sha256};

use super::error::UploadError;
use crate::proto::add_artifacts_request::{
    ArtifactChunk, Batch, BeginChunkedArtifact, Payload, SingleChunkArtifact,
};
use crate::proto::add_artifacts_response::ArtifactSummary;
use crate::proto::artifact_statuses_response::ArtifactStatus;

/// PySpark's `ArtifactManager.CHUNK_SIZE`: the piece size of an `AddArtifacts` stream.
pub(crate) const ARTIFACT_CHUNK_SIZE: usize = 32 * 1024;

/// The name prefix of cached artifacts (PySpark's `CACHE_PREFIX`).
pub(crate) const CACHE_PREFIX: &str = "cache";

/// One artifact: its name on the server and its bytes.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Artifact {
    pub(crate) name: String,
    pub(crate) data: Bytes,
}

impl std::fmt::Debug for Artifact {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Artifact({}, {} bytes)", self.name, self.data.len())
    }
}

/// The lowercase hex SHA-256 of `data`: the hash a cached relation refers to.
pub(crate) fn sha256_hex(data: &[u8]) -> String {
    Sha256::digest(data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The artifact name for a cached blob: `cache/<hash>`.
pub(crate) fn cache_name(hash: &str) -> String {
    format!("{CACHE_PREFIX}/{hash}")
}

/// zlib's CRC-32 (what `zlib.crc32` gives PySpark), as the proto's `int64`.
pub(crate) fn crc(data: &[u8]) -> i64 {
    i64::from(crc32fast::hash(data))
}

/// Where an artifact stands in its group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Not known to be on the server: (re)sent by the next attempt.
    Pending,
    /// The server already held it (ArtifactStatus said so): never sent again.
    Held,
    /// The server acknowledged it (AddArtifacts' summary, CRC good).
    Acknowledged,
}

/// One `AddArtifacts` stream's worth of cached blobs, kept until the server
/// holds every one of them.
///
/// Identical blobs are one artifact (the name is their hash). Before each
/// attempt the driver asks `ArtifactStatus` about [`unsettled`](Self::unsettled)
/// names and hands the answer to [`plan`](Self::plan), which returns what to
/// send; the answer to that stream goes to [`acknowledge`](Self::acknowledge).
#[derive(Debug)]
pub(crate) struct UploadGroup {
    artifacts: Vec<Artifact>,
    states: Vec<State>,
}

impl UploadGroup {
    /// A group of blobs; also returns each blob's hash, in order (duplicates included).
    pub(crate) fn new(blobs: Vec<Bytes>) -> (Self, Vec<String>) {
        let mut artifacts: Vec<Artifact> = Vec::new();
        let mut hashes = Vec::with_capacity(blobs.len());
        for data in blobs {
            let hash = sha256_hex(&data);
            let name = cache_name(&hash);
            if !artifacts.iter().any(|a| a.name == name) {
                artifacts.push(Artifact { name, data });
            }
            hashes.push(hash);
        }
        let states = vec![State::Pending; artifacts.len()];
        (UploadGroup { artifacts, states }, hashes)
    }

    /// Names the server is not yet known to hold: what ArtifactStatus is asked about.
    pub(crate) fn unsettled(&self) -> Vec<String> {
        self.pending()
            .map(|i| self.artifacts[i].name.clone())
            .collect()
    }

    fn pending(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.artifacts.len()).filter(|&i| self.states[i] == State::Pending)
    }

    /// Apply an ArtifactStatus answer: what the server holds is never sent
    /// again. Returns the artifacts still to send (cheap clones), in order;
    /// empty when the group is done.
    pub(crate) fn plan(&mut self, statuses: &HashMap<String, ArtifactStatus>) -> Vec<Artifact> {
        for i in 0..self.artifacts.len() {
            if self.states[i] == State::Pending
                && statuses
                    .get(&self.artifacts[i].name)
                    .is_some_and(|s| s.exists)
            {
                self.states[i] = State::Held;
            }
        }
        self.pending().map(|i| self.artifacts[i].clone()).collect()
    }

    /// Apply the summaries answering a stream that carried `sent`. Every
    /// artifact sent must be summarised once with a good CRC; a bad CRC is
    /// [`UploadError::CrcMismatch`] (never retried: the bytes left this
    /// client with their CRC), anything else the server could not have
    /// meant is a protocol error.
    pub(crate) fn acknowledge(
        &mut self,
        sent: &[Artifact],
        summaries: &[ArtifactSummary],
    ) -> Result<(), UploadError> {
        for s in summaries {
            if !sent.iter().any(|a| a.name == s.name) {
                return Err(UploadError::UnexpectedSummary {
                    name: s.name.clone(),
                });
            }
            if !s.is_crc_successful {
                return Err(UploadError::CrcMismatch {
                    name: s.name.clone(),
                });
            }
        }
        for a in sent {
            if !summaries.iter().any(|s| s.name == a.name) {
                return Err(UploadError::MissingSummary {
                    name: a.name.clone(),
                });
            }
        }
        for a in sent {
            if let Some(i) = self.artifacts.iter().position(|x| x.name == a.name) {
                self.states[i] = State::Acknowledged;
            }
        }
        Ok(())
    }

    /// Whether the server holds every artifact of the group.
    pub(crate) fn is_done(&self) -> bool {
        self.pending().next().is_none()
    }

    /// Bytes of the artifacts the server already held when asked (skipped).
    pub(crate) fn held_bytes(&self) -> u64 {
        self.bytes_in(State::Held)
    }

    /// How many artifacts the server already held when asked (skipped).
    pub(crate) fn held_count(&self) -> u64 {
        self.states.iter().filter(|s| **s == State::Held).count() as u64
    }

    fn bytes_in(&self, state: State) -> u64 {
        self.artifacts
            .iter()
            .zip(&self.states)
            .filter(|(_, s)| **s == state)
            .map(|(a, _)| a.data.len() as u64)
            .sum()
    }
}

/// The shape of one `AddArtifacts` request: which artifact bytes it carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Shape {
    /// Whole small artifacts, by index.
    Batch(Vec<usize>),
    /// The first piece of a large artifact (`BeginChunkedArtifact`).
    Begin {
        /// Which artifact.
        artifact: usize,
        /// Its piece count.
        num_chunks: usize,
    },
    /// A later piece of a large artifact, from `offset`.
    Chunk {
        /// Which artifact.
        artifact: usize,
        /// Where the piece starts.
        offset: usize,
    },
}

/// PySpark's `_add_artifacts`: an artifact larger than one piece flushes
/// the pending batch and goes alone in pieces; smaller ones are packed into
/// batches whose total stays within one piece.
pub(crate) fn shapes(sizes: &[usize]) -> Vec<Shape> {
    let mut out = Vec::new();
    let mut batch = Vec::new();
    let mut batch_size = 0;
    for (i, &size) in sizes.iter().enumerate() {
        if size > ARTIFACT_CHUNK_SIZE {
            if !batch.is_empty() {
                out.push(Shape::Batch(std::mem::take(&mut batch)));
                batch_size = 0;
            }
            let num_chunks = size.div_ceil(ARTIFACT_CHUNK_SIZE);
            out.push(Shape::Begin {
                artifact: i,
                num_chunks,
            });
            out.extend((1..num_chunks).map(|k| Shape::Chunk {
                artifact: i,
                offset: k * ARTIFACT_CHUNK_SIZE,
            }));
        } else {
            if batch_size + size > ARTIFACT_CHUNK_SIZE {
                out.push(Shape::Batch(std::mem::take(&mut batch)));
                batch_size = 0;
            }
            batch.push(i);
            batch_size += size;
        }
    }
    if !batch.is_empty() {
        out.push(Shape::Batch(batch));
    }
    out
}

/// The payload of a request of `shape` over `artifacts`: the bytes are
/// copied out of the kept chunks only now, when the stream asks for them.
pub(crate) fn payload(artifacts: &[Artifact], shape: &Shape) -> Payload {
    fn chunk(data: &[u8]) -> ArtifactChunk {
        ArtifactChunk {
            data: data.to_vec(),
            crc: crc(data),
        }
    }
    fn piece(a: &Artifact, offset: usize) -> &[u8] {
        let end = (offset + ARTIFACT_CHUNK_SIZE).min(a.data.len());
        &a.data[offset..end]
    }
    match shape {
        Shape::Batch(items) => Payload::Batch(Batch {
            artifacts: items
                .iter()
                .map(|&i| SingleChunkArtifact {
                    name: artifacts[i].name.clone(),
                    data: Some(chunk(&artifacts[i].data)),
                })
                .collect(),
        }),
        Shape::Begin {
            artifact,
            num_chunks,
        } => {
            let a = &artifacts[*artifact];
            Payload::BeginChunk(BeginChunkedArtifact {
                name: a.name.clone(),
                total_bytes: a.data.len() as i64,
                num_chunks: *num_chunks as i64,
                initial_chunk: Some(chunk(piece(a, 0))),
            })
        }
        Shape::Chunk { artifact, offset } => {
            Payload::Chunk(chunk(piece(&artifacts[*artifact], *offset)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(exists: bool) -> ArtifactStatus {
        ArtifactStatus { exists }
    }

    fn summary(name: &str, ok: bool) -> ArtifactSummary {
        ArtifactSummary {
            name: name.to_owned(),
            is_crc_successful: ok,
        }
    }

    #[test]
    fn names_are_cache_slash_sha256_and_crc_is_zlibs() {
        // sha256("abc") and zlib.crc32(b"abc"), as Python computes them.
        let h = sha256_hex(b"abc");
        assert_eq!(
            h,
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(cache_name(&h), format!("cache/{h}"));
        assert_eq!(crc(b"abc"), 891_568_578);
        assert_eq!(crc(b""), 0);
    }

    #[test]
    fn duplicate_blobs_are_one_artifact_but_keep_their_hashes() {
        let (g, hashes) = UploadGroup::new(vec![
            Bytes::from_static(b"a"),
            Bytes::from_static(b"b"),
            Bytes::from_static(b"a"),
        ]);
        assert_eq!(hashes.len(), 3);
        assert_eq!(hashes[0], hashes[2]);
        assert_ne!(hashes[0], hashes[1]);
        assert_eq!(g.unsettled().len(), 2);
    }

    #[test]
    fn what_the_server_holds_is_skipped_and_never_sent_again() {
        let (mut g, h) =
            UploadGroup::new(vec![Bytes::from_static(b"one"), Bytes::from_static(b"two")]);
        let statuses = HashMap::from([
            (cache_name(&h[0]), status(true)),
            (cache_name(&h[1]), status(false)),
        ]);
        let send = g.plan(&statuses);
        assert_eq!(send.len(), 1);
        assert_eq!(send[0].name, cache_name(&h[1]));
        assert_eq!((g.held_count(), g.held_bytes()), (1, 3));
        // A later answer that forgets the first changes nothing: it stays held.
        assert_eq!(g.unsettled(), vec![cache_name(&h[1])]);
        let send = g.plan(&HashMap::new());
        assert_eq!(send.len(), 1);
        assert!(!g.is_done());
    }

    #[test]
    fn a_cut_stream_is_resent_whole_minus_what_the_server_flushed() {
        let blobs: Vec<Bytes> = (0..3u8).map(|i| Bytes::from(vec![i; 10])).collect();
        let (mut g, h) = UploadGroup::new(blobs);
        let first = g.plan(&HashMap::new());
        assert_eq!(first.len(), 3);
        // The stream was cut: no summaries. The server flushed only the first.
        let names = g.unsettled();
        assert_eq!(names.len(), 3);
        let second = g.plan(&HashMap::from([(cache_name(&h[0]), status(true))]));
        assert_eq!(second.len(), 2);
        let summaries: Vec<_> = second.iter().map(|a| summary(&a.name, true)).collect();
        g.acknowledge(&second, &summaries).unwrap();
        assert!(g.is_done());
        assert!(g.unsettled().is_empty());
        // Done: nothing is ever planned again, whatever the server says.
        assert!(g.plan(&HashMap::new()).is_empty());
    }

    #[test]
    fn bad_crc_missing_and_unexpected_summaries_are_errors() {
        let (mut g, h) = UploadGroup::new(vec![Bytes::from_static(b"x")]);
        let sent = g.plan(&HashMap::new());
        let name = cache_name(&h[0]);
        match g.acknowledge(&sent, &[summary(&name, false)]) {
            Err(UploadError::CrcMismatch { name: n }) => assert_eq!(n, name),
            other => panic!("{other:?}"),
        }
        match g.acknowledge(&sent, &[]) {
            Err(UploadError::MissingSummary { name: n }) => assert_eq!(n, name),
            other => panic!("{other:?}"),
        }
        match g.acknowledge(&sent, &[summary(&name, true), summary("cache/zz", true)]) {
            Err(UploadError::UnexpectedSummary { name: n }) => assert_eq!(n, "cache/zz"),
            other => panic!("{other:?}"),
        }
        assert!(!g.is_done(), "nothing is acknowledged by a rejected answer");
    }

    #[test]
    fn shapes_follow_pysparks_add_artifacts() {
        const C: usize = ARTIFACT_CHUNK_SIZE;
        // Small ones pack up to one piece; a large one flushes the batch first.
        assert_eq!(
            shapes(&[10, C - 10, 1, 2 * C + 1, 5]),
            vec![
                Shape::Batch(vec![0, 1]),
                Shape::Batch(vec![2]),
                Shape::Begin {
                    artifact: 3,
                    num_chunks: 3
                },
                Shape::Chunk {
                    artifact: 3,
                    offset: C
                },
                Shape::Chunk {
                    artifact: 3,
                    offset: 2 * C
                },
                Shape::Batch(vec![4]),
            ]
        );
        // Exactly one piece is still "small" (PySpark: size > CHUNK_SIZE is chunked).
        assert_eq!(shapes(&[C]), vec![Shape::Batch(vec![0])]);
        assert_eq!(shapes(&[0, 0]), vec![Shape::Batch(vec![0, 1])]);
        assert!(shapes(&[]).is_empty());
    }

    #[test]
    fn payloads_carry_every_byte_once_with_its_crc() {
        let big: Vec<u8> = (0..(2 * ARTIFACT_CHUNK_SIZE + 100))
            .map(|i| (i % 251) as u8)
            .collect();
        let arts = vec![Artifact {
            name: "cache/big".into(),
            data: Bytes::from(big.clone()),
        }];
        let mut joined = Vec::new();
        for (k, s) in shapes(&[big.len()]).iter().enumerate() {
            let c = match payload(&arts, s) {
                Payload::BeginChunk(b) => {
                    assert_eq!(k, 0);
                    assert_eq!(
                        (b.name.as_str(), b.total_bytes, b.num_chunks),
                        ("cache/big", big.len() as i64, 3)
                    );
                    b.initial_chunk.unwrap()
                }
                Payload::Chunk(c) => c,
                other => panic!("{other:?}"),
            };
            assert_eq!(c.crc, crc(&c.data));
            joined.extend_from_slice(&c.data);
        }
        assert_eq!(joined, big);
        let small = vec![Artifact {
            name: "cache/s".into(),
            data: Bytes::from_static(b"abc"),
        }];
        match payload(&small, &Shape::Batch(vec![0])) {
            Payload::Batch(b) => {
                assert_eq!(b.artifacts[0].name, "cache/s");
                assert_eq!(b.artifacts[0].data.as_ref().unwrap().crc, 891_568_578);
            }
            other => panic!("{other:?}"),
        }
    }
}
