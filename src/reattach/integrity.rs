//! Stream integrity: the rules that keep a result whole, stated once.
//!
//! *Why:* a retrying client is only as good as what it refuses. A server
//! (or a proxy, or a bug) that replays a response, drops the tail of a
//! chunked batch or disagrees with itself about a row count must never turn
//! into rows lost, rows counted twice or rows handed out after an error: the
//! caller cannot tell. Each rule below is checked where the data enters, and
//! a violation is an [`IntegrityError`] that ends the stream.
//!
//! The invariants of every execution:
//!
//! 1. **Nothing after a terminal error.** Once a stream has returned an
//!    error it returns nothing else, not even data decoded before the error
//!    was found ([`crate::reattach::ReattachableExecution`] finishes, the
//!    session's `ArrowStream` drops what it had queued).
//! 2. **Every response at most once.** Two responses with the same
//!    non-empty `response_id` in one execution are an error
//!    ([`IntegrityError::DuplicateResponseId`]): the server replayed what
//!    was already delivered ([`ResponseIds`]).
//! 3. **Resumable position.** A response with an empty `response_id` gives
//!    no position to resume from: reopening the stream after it would
//!    replay the result from its start. Such responses are accepted
//!    (PySpark does), but reopening after one is an error
//!    ([`IntegrityError::NoResumePosition`]) where PySpark would deliver the
//!    replay.
//! 4. **Whole batches only.** An Arrow batch is delivered only when all its
//!    chunks arrived, in order, agreeing on the batch's row count, chunk
//!    count and start offset, and when the rows decoded equal its
//!    `row_count` ([`BatchAssembler`], [`check_row_count`]). Chunk counts
//!    must be positive.
//! 5. **No torn batch at the end.** A stream that ends (with
//!    `ResultComplete`, or in any other way) while a chunked batch is
//!    incomplete is an error ([`IntegrityError::TornBatch`]).
//! 6. **Contiguous rows.** A batch's `start_offset`, when present, equals
//!    the rows delivered before it (a dropped or replayed batch).
//! 7. **Corrupt Arrow data is an error, never a panic** (the session's
//!    decoder; see `docs/arrow-ipc-panic.md`).

// The batch rules are the Arrow decoder's; without the `arrow` feature only
// the response-id rules are used.
#![cfg_attr(not(feature = "arrow"), allow(dead_code))]

use std::collections::HashSet;

use bytes::Bytes;

/// A broken stream-integrity rule (see [`crate::reattach`], "stream integrity").
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum IntegrityError {
    /// The same response id arrived twice in one execution.
    #[error("response id {0:?} received twice: the server replayed a response")]
    DuplicateResponseId(String),
    /// The stream had to be reopened after a response without an id: the
    /// server would replay the result from its start.
    #[error(
        "the stream must be resumed, but the last response had no response id: resuming would replay the result"
    )]
    NoResumePosition,
    /// A chunk arrived out of order (or was lost or repeated).
    #[error("expected chunk {expected} of an Arrow batch, got chunk {got}")]
    ChunkOrder {
        /// The chunk index expected.
        expected: i64,
        /// The chunk index received.
        got: i64,
    },
    /// `num_chunks_in_batch` is zero or negative.
    #[error("num_chunks_in_batch is {0}; it must be positive")]
    BadChunkCount(i64),
    /// A later chunk of a batch disagrees with its first chunk.
    #[error("a chunk of an Arrow batch has {field} {got:?}, its first chunk {first:?}")]
    ChunkMismatch {
        /// The field that differs: `num_chunks_in_batch`, `row_count` or `start_offset`.
        field: &'static str,
        /// The first chunk's value.
        first: Option<i64>,
        /// This chunk's value.
        got: Option<i64>,
    },
    /// A batch's declared `row_count` is not the rows its data decodes to.
    #[error("ArrowBatch says {declared} rows but carries {decoded}")]
    RowCount {
        /// The declared count.
        declared: i64,
        /// The rows decoded.
        decoded: i64,
    },
    /// A batch did not start where the previous one ended.
    #[error(
        "Arrow batch starts at row {got}, expected {expected}: a batch was dropped or replayed"
    )]
    BatchOffset {
        /// The row offset expected.
        expected: i64,
        /// The row offset received.
        got: i64,
    },
    /// The stream ended while a chunked batch was incomplete.
    #[error(
        "the result ended in the middle of a chunked Arrow batch ({received} of {total} chunks): its rows are missing"
    )]
    TornBatch {
        /// Chunks received.
        received: i64,
        /// Chunks announced.
        total: i64,
    },
}

/// The response ids seen in one execution (invariant 2).
#[derive(Debug, Default, Clone)]
pub(crate) struct ResponseIds {
    seen: HashSet<String>,
}

impl ResponseIds {
    /// Record `id`; an error if it was seen before. Empty ids are not
    /// recorded (invariant 3 covers them).
    pub(crate) fn insert(&mut self, id: &str) -> Result<(), IntegrityError> {
        if id.is_empty() || self.seen.insert(id.to_owned()) {
            Ok(())
        } else {
            Err(IntegrityError::DuplicateResponseId(id.to_owned()))
        }
    }
}

/// One ArrowBatch response's framing fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ChunkHeader {
    /// `row_count`.
    pub row_count: i64,
    /// `start_offset`.
    pub start_offset: Option<i64>,
    /// `chunk_index` (absent: 0).
    pub chunk_index: Option<i64>,
    /// `num_chunks_in_batch` (absent: 1).
    pub num_chunks: Option<i64>,
}

/// A batch whose chunks have all arrived: its IPC bytes and declared rows.
#[derive(Debug)]
pub(crate) struct WholeBatch {
    /// The Arrow IPC stream: a lone chunk's own bytes (the buffer the
    /// response was decoded from, not a copy), or the chunks joined.
    pub data: Bytes,
    /// The declared `row_count`.
    pub row_count: i64,
}

/// Joins the chunks of Arrow batches (invariants 4 to 6), without decoding.
#[derive(Debug, Default)]
pub(crate) struct BatchAssembler {
    /// The first chunk's header of the batch in progress.
    first: Option<ChunkHeader>,
    received: i64,
    data: Vec<u8>,
}

/// The most [`BatchAssembler`] reserves ahead for a chunked batch, trusting
/// the server's chunk count (64 MiB; more grows as the chunks arrive).
const MAX_RESERVE: usize = 64 << 20;

impl BatchAssembler {
    /// Add one ArrowBatch response; `rows` is the count delivered before it.
    /// `Some` when its batch is whole.
    pub(crate) fn push(
        &mut self,
        h: ChunkHeader,
        data: Bytes,
        rows: u64,
    ) -> Result<Option<WholeBatch>, IntegrityError> {
        let total = h.num_chunks.unwrap_or(1);
        if total < 1 {
            return Err(IntegrityError::BadChunkCount(total));
        }
        let index = h.chunk_index.unwrap_or(0);
        if index != self.received {
            return Err(IntegrityError::ChunkOrder {
                expected: self.received,
                got: index,
            });
        }
        match self.first {
            None => {
                if let Some(start) = h.start_offset {
                    let expected = i64::try_from(rows).unwrap_or(i64::MAX);
                    if start != expected {
                        return Err(IntegrityError::BatchOffset {
                            expected,
                            got: start,
                        });
                    }
                }
            }
            Some(first) => {
                let fields = [
                    ("num_chunks_in_batch", first.num_chunks, h.num_chunks),
                    ("row_count", Some(first.row_count), Some(h.row_count)),
                    ("start_offset", first.start_offset, h.start_offset),
                ];
                for (field, first, got) in fields {
                    if first != got {
                        return Err(IntegrityError::ChunkMismatch { field, first, got });
                    }
                }
            }
        }
        if total == 1 {
            // Not chunked: hand the payload over without a copy.
            return Ok(Some(WholeBatch {
                data,
                row_count: h.row_count,
            }));
        }
        if self.first.is_none() {
            // Chunks but the last are as large: one allocation, not a
            // doubling per chunk (bounded: the count is the server's word).
            let ahead = usize::try_from(total).unwrap_or(usize::MAX);
            self.data
                .reserve(data.len().saturating_mul(ahead).min(MAX_RESERVE));
        }
        self.first.get_or_insert(h);
        self.data.extend_from_slice(&data);
        self.received += 1;
        if self.received < total {
            return Ok(None);
        }
        self.first = None;
        self.received = 0;
        Ok(Some(WholeBatch {
            data: Bytes::from(std::mem::take(&mut self.data)),
            row_count: h.row_count,
        }))
    }

    /// The stream ended (or `ResultComplete` arrived): an error if a batch
    /// is incomplete (invariant 5).
    pub(crate) fn finish(&self) -> Result<(), IntegrityError> {
        match self.first {
            Some(first) => Err(IntegrityError::TornBatch {
                received: self.received,
                total: first.num_chunks.unwrap_or(1),
            }),
            None => Ok(()),
        }
    }
}

/// Invariant 4's last half: the rows decoded equal the declared count.
pub(crate) fn check_row_count(declared: i64, decoded: i64) -> Result<(), IntegrityError> {
    if declared == decoded {
        Ok(())
    } else {
        Err(IntegrityError::RowCount { declared, decoded })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(index: Option<i64>, total: Option<i64>, rows: i64) -> ChunkHeader {
        ChunkHeader {
            row_count: rows,
            start_offset: Some(0),
            chunk_index: index,
            num_chunks: total,
        }
    }

    #[test]
    fn duplicate_ids_are_refused_empty_ones_ignored() {
        let mut ids = ResponseIds::default();
        ids.insert("a").unwrap();
        ids.insert("").unwrap();
        ids.insert("").unwrap();
        assert_eq!(
            ids.insert("a"),
            Err(IntegrityError::DuplicateResponseId("a".into()))
        );
    }

    #[test]
    fn chunk_counts_must_be_positive_and_consistent() {
        let mut a = BatchAssembler::default();
        for bad in [0, -1, i64::MIN] {
            assert_eq!(
                a.push(h(None, Some(bad), 1), Bytes::new(), 0).unwrap_err(),
                IntegrityError::BadChunkCount(bad)
            );
        }
        assert!(
            a.push(h(Some(0), Some(2), 5), Bytes::from_static(&[1]), 0)
                .unwrap()
                .is_none()
        );
        assert!(matches!(
            a.push(h(Some(1), Some(3), 5), Bytes::from_static(&[2]), 0),
            Err(IntegrityError::ChunkMismatch {
                field: "num_chunks_in_batch",
                ..
            })
        ));
        assert!(matches!(
            a.push(h(Some(1), Some(2), 6), Bytes::from_static(&[2]), 0),
            Err(IntegrityError::ChunkMismatch {
                field: "row_count",
                ..
            })
        ));
        assert_eq!(
            a.finish(),
            Err(IntegrityError::TornBatch {
                received: 1,
                total: 2
            })
        );
        let whole = a
            .push(h(Some(1), Some(2), 5), Bytes::from_static(&[2]), 0)
            .unwrap()
            .unwrap();
        assert_eq!((&whole.data[..], whole.row_count), (&[1, 2][..], 5));
        assert_eq!(a.finish(), Ok(()));
    }

    #[test]
    fn row_counts_must_match() {
        assert!(check_row_count(3, 3).is_ok());
        assert_eq!(
            check_row_count(3, 2),
            Err(IntegrityError::RowCount {
                declared: 3,
                decoded: 2
            })
        );
    }
}
