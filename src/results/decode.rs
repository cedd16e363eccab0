//! Turning ExecutePlan responses into Arrow record batches, sans I/O.
//!
//! Spark sends a result as ArrowBatch responses, each one Arrow IPC stream;
//! a batch larger than the chunk size comes as several chunks that must be
//! joined before decoding. A lost, replayed, torn or miscounted batch must be
//! an error, never silently wrong data: the framing rules are
//! [`crate::reattach::integrity`]'s (checked by its `BatchAssembler`), and a
//! batch reaches the queue only once it is whole and its rows are counted.
//! The schema comes first from Spark's type description, then from the
//! batches themselves.
//!
//! Corrupt IPC bytes are an error, never a panic. arrow-ipc 60 validates the
//! arrays it builds, but slices each column buffer out of the message body
//! at the offsets the message header states *before* validating, and
//! `Buffer::slice_with_length` asserts they are in bounds: a header with a
//! buffer offset past the body panics (`docs/arrow-ipc-panic.md`). No
//! validating option of the decoder covers that, so the decode call is run
//! under `catch_unwind` and a panic becomes an Arrow error
//! ([`SparkError::Arrow`](crate::session::SparkError::Arrow)); the
//! decoder and its half-decoded state are dropped with it.
//!
//! Compressed batches (Spark 4.1+, `spark.sql.execution.arrow.compression.codec`
//! = `zstd` or `lz4`, SPARK-54134) decode like any other: arrow-ipc's codecs
//! are always built in, since the server's defaults alone can turn
//! compression on. Their headers are checked first and a failed batch is
//! explained per column (`ipc_scan`), as a [`ResultDecodeError`](crate::session::ResultDecodeError).
//!
//! No copy between the message and the arrays: `ArrowBatch.data` is a
//! `bytes::Bytes` slicing the buffer tonic decoded the response from
//! (`build.rs`), and the decoded columns point into that same allocation.
//! The one exception is arrow's alignment rule: a column buffer whose
//! address is not a multiple of its type's alignment (8 for `Int64`) is
//! copied to an aligned one by arrow-ipc (`with_require_alignment(false)`,
//! the default). Where a payload lands in tonic's buffer depends on the
//! bytes before it in the message (the session id, the varint lengths),
//! so an uncompressed batch is realigned or not as a whole; the copies
//! are counted ([`ArrowState::buffers_copied`]). A chunked batch is
//! joined into one fresh (aligned) allocation, so its columns are never
//! copied again.

use std::collections::VecDeque;
use std::panic::AssertUnwindSafe;

use arrow_array::RecordBatch;
use arrow_buffer::Buffer;
use arrow_schema::{ArrowError, SchemaRef};
use bytes::Bytes;

use super::error::ResultError;
use super::ipc_scan;
use crate::proto::ExecutePlanResponse;
use crate::proto::execute_plan_response::{ArrowBatch, ExecutionProgress, ResponseType};
use crate::reattach::integrity::{BatchAssembler, ChunkHeader, IntegrityError, check_row_count};

/// What one response added.
#[derive(Debug)]
pub(crate) enum Absorbed {
    /// A complete batch of this many rows was decoded and queued.
    Rows(u64),
    /// Progress to report.
    Progress(ExecutionProgress),
    /// Nothing for the consumer (a chunk, the schema, metrics, the end).
    Nothing,
}

/// Decoded batches waiting for the consumer, chunks being joined, the schema.
#[derive(Debug, Default)]
pub(crate) struct ArrowState {
    schema: Option<SchemaRef>,
    /// The schema came from a decoded batch (exact; never replaced again).
    schema_from_batches: bool,
    queue: VecDeque<RecordBatch>,
    chunks: BatchAssembler,
    /// Column buffers of uncompressed batches that do not point into
    /// their response's bytes (arrow copied them to align them).
    buffers_copied: u64,
    /// Column buffers of uncompressed batches.
    buffers: u64,
}

impl ArrowState {
    pub(crate) fn schema(&self) -> Option<SchemaRef> {
        self.schema.clone()
    }

    /// Column buffers of uncompressed batches decoded so far, and how many
    /// of them arrow copied (to align them) instead of pointing into the
    /// response's bytes.
    pub(crate) fn buffers_copied(&self) -> (u64, u64) {
        (self.buffers_copied, self.buffers)
    }

    pub(crate) fn pop(&mut self) -> Option<RecordBatch> {
        self.queue.pop_front()
    }

    /// The stream failed: forget every batch not yet handed out (nothing is
    /// delivered after an error).
    pub(crate) fn discard(&mut self) {
        self.queue.clear();
        self.chunks = BatchAssembler::default();
    }

    /// The result ended: an error if a chunked batch is incomplete.
    pub(crate) fn finish(&self) -> Result<(), ResultError> {
        self.chunks.finish().map_err(integrity)
    }

    /// Drop a batch whose chunks were arriving when the execution was lost
    /// (a resumed query starts over from chunk 0).
    pub(crate) fn discard_partial(&mut self) {
        self.chunks = BatchAssembler::default();
    }

    /// Take the schema from Spark's type description, if the response has
    /// one and no batch has given the exact schema yet.
    pub(crate) fn note_schema(&mut self, resp: &ExecutePlanResponse) -> Result<(), ResultError> {
        if !self.schema_from_batches
            && let Some(dt) = &resp.schema
        {
            self.schema = Some(super::schema::arrow_schema(dt)?);
        }
        Ok(())
    }

    /// Handle one response; `rows` is the count delivered so far.
    pub(crate) fn absorb(
        &mut self,
        resp: ExecutePlanResponse,
        rows: u64,
    ) -> Result<Absorbed, ResultError> {
        self.note_schema(&resp)?;
        match resp.response_type {
            Some(ResponseType::ArrowBatch(b)) => self.batch(b, rows),
            Some(ResponseType::ExecutionProgress(p)) => Ok(Absorbed::Progress(p)),
            Some(ResponseType::ResultComplete(_)) => {
                self.finish()?;
                Ok(Absorbed::Nothing)
            }
            _ => Ok(Absorbed::Nothing),
        }
    }

    fn batch(&mut self, b: ArrowBatch, rows: u64) -> Result<Absorbed, ResultError> {
        let header = ChunkHeader {
            row_count: b.row_count,
            start_offset: b.start_offset,
            chunk_index: b.chunk_index,
            num_chunks: b.num_chunks_in_batch,
        };
        let Some(whole) = self.chunks.push(header, b.data, rows).map_err(integrity)? else {
            return Ok(Absorbed::Nothing);
        };
        let Decoded {
            batches,
            schema,
            buffers,
        } = decode(whole.data, rows)?;
        if let Some((copied, all)) = buffers {
            self.buffers_copied += copied;
            self.buffers += all;
        }
        let decoded: i64 = batches.iter().map(|b| b.num_rows() as i64).sum();
        check_row_count(whole.row_count, decoded).map_err(integrity)?;
        // Only a whole, counted batch reaches the queue.
        if let Some(schema) = schema {
            self.schema = Some(schema);
            self.schema_from_batches = true;
        }
        self.queue.extend(batches);
        Ok(Absorbed::Rows(decoded as u64))
    }
}

/// The error for a broken integrity rule; a start offset keeps its own
/// variant.
fn integrity(e: IntegrityError) -> ResultError {
    match e {
        IntegrityError::BatchOffset { expected, got } => ResultError::BatchOffset { expected, got },
        other => ResultError::Integrity(other),
    }
}

/// One IPC stream, decoded.
pub(super) struct Decoded {
    pub(super) batches: Vec<RecordBatch>,
    pub(super) schema: Option<SchemaRef>,
    /// Uncompressed: the column buffers arrow copied (to align them), and
    /// all column buffers (`None` when compressed: every buffer is new).
    pub(super) buffers: Option<(u64, u64)>,
}

/// Decode one IPC stream in place: `StreamDecoder` slices the batch's
/// column buffers out of `data` (the response's own allocation: zero copy
/// when they are aligned), where `StreamReader` over a `Cursor` copied
/// every message body into fresh buffers. At ~160 MB per 10M-row result
/// the copies were a visible share of the client's CPU time. A panic
/// inside arrow (corrupt offsets, module docs) is caught here and returned
/// as an error.
pub(super) fn decode(data: Bytes, first_row: u64) -> Result<Decoded, ResultError> {
    let run = AssertUnwindSafe(move || -> Result<_, ResultError> {
        // Codec and stated lengths first: a corrupt length must not reach
        // arrow-ipc's allocation (`ipc_scan`).
        let codec = ipc_scan::check(&data, first_row).map_err(ResultError::ResultDecode)?;
        let whole = Buffer::from(data);
        let mut buf = whole.clone();
        let mut decoder = arrow_ipc::reader::StreamDecoder::new();
        let mut batches = Vec::new();
        let mut all = || -> Result<(), ArrowError> {
            while !buf.is_empty() {
                if let Some(batch) = decoder.decode(&mut buf)? {
                    batches.push(batch);
                }
            }
            decoder.finish()
        };
        match all() {
            Ok(()) => Ok(Decoded {
                buffers: codec.is_none().then(|| copied_buffers(&batches, &whole)),
                schema: decoder.schema(),
                batches,
            }),
            // Name the column, the row, the codec when one column explains it.
            Err(e) => Err(ipc_scan::explain(whole.as_slice(), first_row)
                .map(ResultError::ResultDecode)
                .unwrap_or(ResultError::Arrow(e))),
        }
    });
    match std::panic::catch_unwind(run) {
        Ok(result) => result,
        Err(panic) => {
            let what = panic
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| panic.downcast_ref::<&str>().copied())
                .unwrap_or("a panic");
            Err(ResultError::Arrow(ArrowError::IpcError(format!(
                "corrupt Arrow IPC data (the decoder panicked: {what})"
            ))))
        }
    }
}

/// [`decode`] of an owned payload, as batches and schema (the tests').
#[cfg(test)]
pub(super) fn decode_vec(
    data: Vec<u8>,
    first_row: u64,
) -> Result<(Vec<RecordBatch>, Option<SchemaRef>), ResultError> {
    decode(Bytes::from(data), first_row).map(|d| (d.batches, d.schema))
}

/// The column buffers of `batches` (children included) that do not point
/// into `whole`, and all of them: a few pointer comparisons per column.
fn copied_buffers(batches: &[RecordBatch], whole: &Buffer) -> (u64, u64) {
    fn walk(data: &arrow_data::ArrayData, range: &std::ops::Range<usize>, n: &mut (u64, u64)) {
        for b in data
            .buffers()
            .iter()
            .chain(data.nulls().map(|n| n.buffer()))
        {
            if b.is_empty() {
                continue;
            }
            n.1 += 1;
            let start = b.as_ptr() as usize;
            if !(range.contains(&start) && start + b.len() <= range.end) {
                n.0 += 1;
            }
        }
        for child in data.child_data() {
            walk(child, range, n);
        }
    }
    let start = whole.as_ptr() as usize;
    let range = start..start + whole.len();
    let mut n = (0, 0);
    for batch in batches {
        for column in batch.columns() {
            walk(&column.to_data(), &range, &mut n);
        }
    }
    n
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::Int64Array;
    use arrow_schema::{DataType, Field, Schema};

    use super::*;

    fn ipc(rows: i64) -> Vec<u8> {
        let schema = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)]));
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![Arc::new(Int64Array::from_iter_values(0..rows))],
        )
        .unwrap();
        let mut out = Vec::new();
        let mut w = arrow_ipc::writer::StreamWriter::try_new(&mut out, &schema).unwrap();
        w.write(&batch).unwrap();
        w.finish().unwrap();
        drop(w);
        out
    }

    fn response(b: ArrowBatch) -> ExecutePlanResponse {
        ExecutePlanResponse {
            response_type: Some(ResponseType::ArrowBatch(b)),
            ..Default::default()
        }
    }

    fn chunked(data: &[u8], parts: usize, rows: i64, start: i64) -> Vec<ExecutePlanResponse> {
        let size = data.len().div_ceil(parts);
        data.chunks(size)
            .enumerate()
            .map(|(i, c)| {
                response(ArrowBatch {
                    row_count: rows,
                    data: Bytes::copy_from_slice(c),
                    start_offset: Some(start),
                    chunk_index: Some(i as i64),
                    num_chunks_in_batch: Some(parts as i64),
                })
            })
            .collect()
    }

    #[test]
    fn chunks_are_joined_in_order() {
        let data = ipc(1000);
        let mut s = ArrowState::default();
        let parts = chunked(&data, 4, 1000, 0);
        let mut results = Vec::new();
        for r in parts {
            results.push(s.absorb(r, 0).unwrap());
        }
        assert!(matches!(
            results[..3],
            [Absorbed::Nothing, Absorbed::Nothing, Absorbed::Nothing]
        ));
        assert!(matches!(results[3], Absorbed::Rows(1000)));
        assert_eq!(s.pop().unwrap().num_rows(), 1000);
        assert_eq!(s.schema().unwrap().field(0).name(), "id");
    }

    #[test]
    fn a_lost_or_repeated_chunk_is_an_error() {
        let data = ipc(10);
        let parts = chunked(&data, 3, 10, 0);
        let mut s = ArrowState::default();
        s.absorb(parts[0].clone(), 0).unwrap();
        let err = s.absorb(parts[2].clone(), 0).unwrap_err();
        assert!(err.to_string().contains("expected chunk 1"), "{err}");
        let mut s = ArrowState::default();
        s.absorb(parts[0].clone(), 0).unwrap();
        assert!(s.absorb(parts[0].clone(), 0).is_err());
    }

    #[test]
    fn a_batch_at_the_wrong_offset_is_an_error() {
        let mut s = ArrowState::default();
        let b = response(ArrowBatch {
            row_count: 10,
            data: ipc(10).into(),
            start_offset: Some(5),
            ..Default::default()
        });
        match s.absorb(b, 0) {
            Err(ResultError::BatchOffset {
                expected: 0,
                got: 5,
            }) => {}
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_wrong_row_count_is_an_error() {
        let mut s = ArrowState::default();
        let b = response(ArrowBatch {
            row_count: 11,
            data: ipc(10).into(),
            ..Default::default()
        });
        let err = s.absorb(b, 0).unwrap_err();
        assert!(err.to_string().contains("says 11 rows"), "{err}");
    }

    /// Whether every buffer of `batch`'s columns lies inside `within`.
    fn points_into(batch: &RecordBatch, within: &[u8]) -> bool {
        let (copied, all) = copied_buffers(
            std::slice::from_ref(batch),
            &Buffer::from(Bytes::copy_from_slice(&[])),
        );
        assert_eq!(copied, all);
        let range = within.as_ptr_range();
        batch.columns().iter().all(|c| {
            let d = c.to_data();
            d.buffers().iter().all(|b| {
                range.contains(&b.as_ptr()) && b.as_ptr().wrapping_add(b.len()) <= range.end
            })
        })
    }

    #[test]
    fn an_aligned_payload_is_decoded_in_place() {
        let data = Bytes::from(ipc(1000));
        assert!(
            (data.as_ptr() as usize).is_multiple_of(8),
            "a fresh allocation"
        );
        let mut s = ArrowState::default();
        let b = response(ArrowBatch {
            row_count: 1000,
            data: data.clone(),
            ..Default::default()
        });
        assert!(matches!(s.absorb(b, 0).unwrap(), Absorbed::Rows(1000)));
        let batch = s.pop().unwrap();
        assert!(
            points_into(&batch, &data),
            "the column is the payload's bytes"
        );
        assert_eq!(s.buffers_copied(), (0, 1));
    }

    #[test]
    fn a_misaligned_payload_is_copied_once_to_align_it() {
        // The payload one byte into its allocation: every Int64 buffer is
        // misaligned, arrow copies it (and the copies are counted).
        let mut shifted = vec![0u8];
        shifted.extend(ipc(1000));
        let data = Bytes::from(shifted).slice(1..);
        let mut s = ArrowState::default();
        let b = response(ArrowBatch {
            row_count: 1000,
            data: data.clone(),
            ..Default::default()
        });
        assert!(matches!(s.absorb(b, 0).unwrap(), Absorbed::Rows(1000)));
        let batch = s.pop().unwrap();
        assert!(!points_into(&batch, &data));
        let ids = batch.column(0).as_any().downcast_ref::<Int64Array>();
        assert!(ids.unwrap().values().iter().copied().eq(0..1000));
        assert_eq!(s.buffers_copied(), (1, 1));
    }

    #[test]
    fn a_payload_decoded_from_a_message_slices_it() {
        use prost::Message as _;
        // As tonic hands prost a response: one allocation holding the
        // message. Where the payload lands depends on the bytes before it
        // (here the session id's length): aligned, nothing is copied;
        // misaligned, arrow copies the column to align it.
        let mut in_place = 0;
        for pad in 0..8 {
            let resp = ExecutePlanResponse {
                session_id: "s".repeat(36 + pad),
                ..response(ArrowBatch {
                    row_count: 1000,
                    data: ipc(1000).into(),
                    ..Default::default()
                })
            };
            let wire = Bytes::from(resp.encode_to_vec());
            let decoded = ExecutePlanResponse::decode(wire.clone()).unwrap();
            let Some(ResponseType::ArrowBatch(b)) = &decoded.response_type else {
                panic!("an ArrowBatch");
            };
            assert!(
                points_into_bytes(&b.data, &wire),
                "prost sliced the message"
            );
            let aligned = (b.data.as_ptr() as usize).is_multiple_of(8);
            let mut s = ArrowState::default();
            s.absorb(decoded, 0).unwrap();
            let batch = s.pop().unwrap();
            assert_eq!(points_into(&batch, &wire), aligned, "pad {pad}");
            assert_eq!(s.buffers_copied(), (u64::from(!aligned), 1), "pad {pad}");
            in_place += usize::from(aligned);
        }
        assert_eq!(in_place, 1, "one session id length in 8 lands aligned");
    }

    fn points_into_bytes(part: &Bytes, whole: &Bytes) -> bool {
        let range = whole.as_ptr_range();
        range.contains(&part.as_ptr()) && part.as_ptr_range().end <= range.end
    }

    #[test]
    fn joined_chunks_are_aligned_and_not_copied_again() {
        let data = ipc(1000);
        let mut s = ArrowState::default();
        for r in chunked(&data, 3, 1000, 0) {
            s.absorb(r, 0).unwrap();
        }
        assert_eq!(s.pop().unwrap().num_rows(), 1000);
        assert_eq!(s.buffers_copied(), (0, 1));
    }
}
