//! The rules of one `AddArtifacts` stream, without I/O.
//!
//! An upload is a client stream the server may see only part of: the
//! connection can die after any message. Spark therefore stages what it
//! reads and stores nothing until the client has ended the stream
//! (`SparkConnectAddArtifactsHandler`); a stream cut anywhere before that
//! leaves the session as it was. This module is that staging area, with
//! Spark 4.3's checks:
//!
//! * a message carries a `batch` of small artifacts (one chunk each), the
//!   `begin_chunk` of a chunked artifact, or one more `chunk` of it;
//! * every chunk carries the CRC-32 of its data; an artifact whose chunks do
//!   not all match is reported with `is_crc_successful: false` and is not
//!   stored;
//! * `begin_chunk` while a chunked artifact is open, or a `chunk` with none
//!   open, fails the call (`requirement failed`, as Spark's `require`);
//! * a chunked artifact closes when its `num_chunks` chunks have arrived;
//!   their sizes must then add up to `total_bytes`;
//! * a name that is absolute or leaves the session's directory fails the
//!   call with `INVALID_ARTIFACT_PATH`.
//!
//! Where Spark 4.3 behaves oddly we chose the strict side: a stream that ends
//! while a chunked artifact is still open (too few chunks, or a
//! `num_chunks` below 2) fails the call and stores nothing; Spark fails it
//! too, but only after storing that artifact.

use crate::error::SparkException;
use spark_connect_retry::proto::add_artifacts_request::{ArtifactChunk, Payload};

/// An artifact read completely, waiting for the end of the stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Staged {
    pub(super) name: String,
    pub(super) data: Vec<u8>,
    /// Every chunk's CRC matched its data.
    pub(super) crc_ok: bool,
}

/// The chunked artifact being received: the last entry of `staged`.
#[derive(Debug)]
struct Open {
    remaining: i64,
    num_chunks: i64,
    total_bytes: i64,
    received: i64,
}

/// The staging area of one `AddArtifacts` call.
#[derive(Debug, Default)]
pub(super) struct Upload {
    staged: Vec<Staged>,
    open: Option<Open>,
}

fn requirement_failed() -> SparkException {
    SparkException::java("java.lang.IllegalArgumentException", "requirement failed")
}

/// The CRC-32 (zlib's, as PySpark's `zlib.crc32` and Java's `CRC32`) of `data`.
pub(crate) fn crc32(data: &[u8]) -> i64 {
    i64::from(crc32fast::hash(data))
}

/// Spark's artifact-name check: a relative path that stays inside the
/// session's directory.
fn check_name(name: &str) -> Result<(), SparkException> {
    let bad = name.is_empty()
        || name.starts_with('/')
        || name.starts_with('\\')
        || name.split(['/', '\\']).any(|part| part == "..");
    if bad {
        Err(SparkException::invalid_artifact_path(name))
    } else {
        Ok(())
    }
}

impl Upload {
    /// Reads one request's payload.
    pub(super) fn push(&mut self, payload: Option<Payload>) -> Result<(), SparkException> {
        match payload {
            Some(Payload::Batch(batch)) => {
                for artifact in batch.artifacts {
                    check_name(&artifact.name)?;
                    let chunk = artifact.data.unwrap_or_default();
                    let crc_ok = crc32(&chunk.data) == chunk.crc;
                    self.staged.push(Staged {
                        name: artifact.name,
                        data: chunk.data,
                        crc_ok,
                    });
                }
                Ok(())
            }
            Some(Payload::BeginChunk(begin)) => {
                if self.open.is_some() {
                    return Err(requirement_failed());
                }
                check_name(&begin.name)?;
                self.staged.push(Staged {
                    name: begin.name,
                    data: Vec::new(),
                    crc_ok: true,
                });
                self.open = Some(Open {
                    remaining: begin.num_chunks,
                    num_chunks: begin.num_chunks,
                    total_bytes: begin.total_bytes,
                    received: 0,
                });
                // Spark writes the initial chunk but does not close the
                // artifact here, even when it was the only one.
                self.write(begin.initial_chunk.unwrap_or_default());
                Ok(())
            }
            Some(Payload::Chunk(chunk)) => {
                if self.open.as_ref().is_none_or(|o| o.remaining == 0) {
                    return Err(requirement_failed());
                }
                self.write(chunk);
                self.close_if_finished()
            }
            None => Err(SparkException::java(
                "java.lang.UnsupportedOperationException",
                "Unsupported data transfer request: the AddArtifactsRequest has no payload",
            )),
        }
    }

    /// Appends a chunk to the open artifact.
    fn write(&mut self, chunk: ArtifactChunk) {
        let (Some(open), Some(artifact)) = (self.open.as_mut(), self.staged.last_mut()) else {
            return;
        };
        artifact.crc_ok &= crc32(&chunk.data) == chunk.crc;
        open.received = open
            .received
            .saturating_add(i64::try_from(chunk.data.len()).unwrap_or(i64::MAX));
        open.remaining -= 1;
        artifact.data.extend_from_slice(&chunk.data);
    }

    fn close_if_finished(&mut self) -> Result<(), SparkException> {
        let Some(open) = self.open.take_if(|o| o.remaining == 0) else {
            return Ok(());
        };
        if open.received != open.total_bytes {
            let name = self.staged.last().map_or("", |a| a.name.as_str());
            return Err(missing_chunks(name, &open));
        }
        Ok(())
    }

    /// The end of the stream: every artifact read, in order, or the error
    /// that fails the call (a chunked artifact still open).
    pub(super) fn finish(self) -> Result<Vec<Staged>, SparkException> {
        match &self.open {
            Some(_) => Err(requirement_failed()),
            None => Ok(self.staged),
        }
    }
}

fn missing_chunks(name: &str, open: &Open) -> SparkException {
    SparkException::java(
        "java.lang.RuntimeException",
        format!(
            "Missing data chunks for artifact: {name}. Expected {} chunks and received {} chunks. Processed {} bytes out of {} bytes.",
            open.num_chunks,
            open.num_chunks - open.remaining,
            open.received,
            open.total_bytes
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use spark_connect_retry::proto::add_artifacts_request::Batch;
    use spark_connect_retry::proto::add_artifacts_request::{
        BeginChunkedArtifact, SingleChunkArtifact,
    };

    fn chunk(data: &[u8]) -> ArtifactChunk {
        ArtifactChunk {
            data: data.to_vec(),
            crc: crc32(data),
        }
    }

    fn batch(items: &[(&str, &[u8])]) -> Option<Payload> {
        Some(Payload::Batch(Batch {
            artifacts: items
                .iter()
                .map(|(name, data)| SingleChunkArtifact {
                    name: (*name).to_owned(),
                    data: Some(chunk(data)),
                })
                .collect(),
        }))
    }

    fn begin(name: &str, total: i64, n: i64, first: &[u8]) -> Option<Payload> {
        Some(Payload::BeginChunk(BeginChunkedArtifact {
            name: name.to_owned(),
            total_bytes: total,
            num_chunks: n,
            initial_chunk: Some(chunk(first)),
        }))
    }

    fn more(data: &[u8]) -> Option<Payload> {
        Some(Payload::Chunk(chunk(data)))
    }

    #[test]
    fn crc_is_zlibs() {
        // zlib.crc32(b"hello") in Python.
        assert_eq!(crc32(b"hello"), 907_060_870);
        assert_eq!(crc32(b""), 0);
    }

    #[test]
    fn batch_then_chunked() {
        let mut u = Upload::default();
        u.push(batch(&[("cache/a", b"one"), ("files/b", b"")]))
            .unwrap();
        u.push(begin("cache/c", 5, 3, b"ab")).unwrap();
        u.push(more(b"cd")).unwrap();
        u.push(more(b"e")).unwrap();
        let staged = u.finish().unwrap();
        let got: Vec<(&str, &[u8], bool)> = staged
            .iter()
            .map(|a| (a.name.as_str(), a.data.as_slice(), a.crc_ok))
            .collect();
        assert_eq!(
            got,
            vec![
                ("cache/a", &b"one"[..], true),
                ("files/b", &b""[..], true),
                ("cache/c", &b"abcde"[..], true)
            ]
        );
    }

    #[test]
    fn a_bad_crc_marks_only_its_artifact() {
        let mut u = Upload::default();
        let mut bad = chunk(b"xy");
        bad.crc ^= 1;
        u.push(Some(Payload::Batch(Batch {
            artifacts: vec![
                SingleChunkArtifact {
                    name: "cache/bad".into(),
                    data: Some(bad.clone()),
                },
                SingleChunkArtifact {
                    name: "cache/good".into(),
                    data: Some(chunk(b"z")),
                },
            ],
        })))
        .unwrap();
        u.push(begin("cache/big", 4, 2, b"ab")).unwrap();
        u.push(Some(Payload::Chunk(bad))).unwrap();
        let crc: Vec<bool> = u.finish().unwrap().iter().map(|a| a.crc_ok).collect();
        assert_eq!(crc, vec![false, true, false]);
    }

    #[test]
    fn chunk_order_is_checked() {
        let mut u = Upload::default();
        assert_eq!(
            u.push(more(b"a")).unwrap_err().text,
            "requirement failed",
            "a chunk with no artifact open"
        );
        let mut u = Upload::default();
        u.push(begin("cache/a", 2, 2, b"a")).unwrap();
        let e = u.push(begin("cache/b", 2, 2, b"a")).unwrap_err();
        assert_eq!(e.classes[0], "java.lang.IllegalArgumentException");
        let mut u = Upload::default();
        u.push(begin("cache/a", 2, 2, b"a")).unwrap();
        u.push(more(b"b")).unwrap();
        assert!(u.push(more(b"c")).is_err(), "one chunk too many");
    }

    #[test]
    fn sizes_must_add_up() {
        let mut u = Upload::default();
        u.push(begin("cache/a", 10, 2, b"a")).unwrap();
        let e = u.push(more(b"b")).unwrap_err();
        assert_eq!(e.classes[0], "java.lang.RuntimeException");
        assert_eq!(
            e.text,
            "Missing data chunks for artifact: cache/a. Expected 2 chunks and received 2 chunks. Processed 2 bytes out of 10 bytes."
        );
    }

    #[test]
    fn an_unfinished_artifact_fails_the_call() {
        let mut u = Upload::default();
        u.push(batch(&[("cache/a", b"one")])).unwrap();
        u.push(begin("cache/b", 4, 2, b"ab")).unwrap();
        assert!(u.finish().is_err());
        // A single-chunk BeginChunkedArtifact never closes, as in Spark.
        let mut u = Upload::default();
        u.push(begin("cache/b", 2, 1, b"ab")).unwrap();
        assert!(u.finish().is_err());
        // Neither do nonsense counts.
        let mut u = Upload::default();
        u.push(begin("cache/b", -1, -1, b"ab")).unwrap();
        assert!(u.push(more(b"c")).is_ok());
        assert!(u.finish().is_err());
    }

    #[test]
    fn names_are_checked() {
        for name in ["", "/abs", "\\abs", "../x", "files/../../x", "a/.."] {
            let mut u = Upload::default();
            let e = u.push(batch(&[(name, b"x")])).unwrap_err();
            assert_eq!(
                e.error_class.as_deref(),
                Some("INVALID_ARTIFACT_PATH"),
                "{name:?}"
            );
        }
        let mut u = Upload::default();
        let e = u.push(begin("/x", 1, 2, b"x")).unwrap_err();
        assert_eq!(e.error_class.as_deref(), Some("INVALID_ARTIFACT_PATH"));
        let mut u = Upload::default();
        u.push(batch(&[("cache/..x", b"x"), ("jars/a.jar", b"y")]))
            .unwrap();
    }

    #[test]
    fn an_empty_request_is_rejected() {
        let e = Upload::default().push(None).unwrap_err();
        assert_eq!(e.classes[0], "java.lang.UnsupportedOperationException");
    }
}
