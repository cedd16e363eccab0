//! Compressed and hostile result batches through the session's decoder:
//! zstd and lz4 decode exactly; an unknown codec, a corrupt compressed
//! buffer, an impossible stated length and a STRING that is not UTF-8 are
//! each a [`ResultDecodeError`] naming what it can.

use std::sync::Arc;

use arrow_array::{ArrayRef, BinaryArray, Int64Array, RecordBatch, StringArray};
use arrow_ipc::CompressionType;
use arrow_ipc::writer::{IpcWriteOptions, StreamWriter};

use super::decode::decode_vec as decode;
use super::decode_error::ResultDecodeError;
use super::error::ResultError;
use super::ipc_scan::messages;

fn batch(rows: i64) -> RecordBatch {
    let id: ArrayRef = Arc::new(Int64Array::from_iter_values(0..rows));
    let x: ArrayRef = Arc::new(Int64Array::from_iter_values((0..rows).map(|v| v * 2)));
    let s: ArrayRef = Arc::new(StringArray::from_iter_values(
        (0..rows).map(|v| format!("row-{v:08}")),
    ));
    RecordBatch::try_from_iter([("id", id), ("x", x), ("s", s)]).unwrap()
}

pub(super) fn ipc_with(batches: &[RecordBatch], codec: Option<CompressionType>) -> Vec<u8> {
    let options = IpcWriteOptions::default()
        .try_with_compression(codec)
        .unwrap();
    let mut w =
        StreamWriter::try_new_with_options(Vec::new(), &batches[0].schema(), options).unwrap();
    for b in batches {
        w.write(b).unwrap();
    }
    w.finish().unwrap();
    w.into_inner().unwrap()
}

/// Where, in `data`, the body of its `n`th message starts, and the
/// (offset, length) of each of that message's buffers.
fn body_of(data: &[u8], n: usize) -> (usize, Vec<(usize, usize)>) {
    let msg = messages(data).nth(n).unwrap();
    let start = msg.body.as_ptr() as usize - data.as_ptr() as usize;
    let rb = msg.header.header_as_record_batch().unwrap();
    let bufs = rb
        .buffers()
        .unwrap()
        .iter()
        .map(|b| (b.offset() as usize, b.length() as usize))
        .collect();
    (start, bufs)
}

fn decode_err(data: Vec<u8>, first_row: u64) -> ResultDecodeError {
    match decode(data, first_row) {
        Err(ResultError::ResultDecode(e)) => e,
        other => panic!("expected a ResultDecodeError, got {other:?}"),
    }
}

#[test]
fn zstd_and_lz4_batches_decode_exactly() {
    let b = batch(5000);
    for codec in [CompressionType::ZSTD, CompressionType::LZ4_FRAME] {
        let data = ipc_with(&[b.clone(), b.clone()], Some(codec));
        assert!(
            data.len() < ipc_with(&[b.clone(), b.clone()], None).len(),
            "{codec:?} compresses"
        );
        let (batches, schema) = decode(data, 0).unwrap();
        assert_eq!(batches, vec![b.clone(), b.clone()], "{codec:?}");
        assert_eq!(schema.unwrap(), b.schema());
    }
}

#[test]
fn a_codec_the_client_does_not_know_is_named() {
    let data = ipc_with(&[batch(100)], Some(CompressionType::ZSTD));
    // The codec byte of the batch's BodyCompression: the one byte whose
    // change makes the header name another codec.
    let (body, _) = body_of(&data, 1);
    let unknown = (0..body)
        .filter(|&i| data[i] == CompressionType::ZSTD.0 as u8)
        .find_map(|i| {
            let mut d = data.clone();
            d[i] = 7;
            let m = messages(&d).nth(1)?;
            let codec = m.header.header_as_record_batch()?.compression()?.codec();
            (codec == CompressionType(7)).then_some(d)
        })
        .expect("the codec byte");
    match decode_err(unknown, 8192) {
        ResultDecodeError::UnsupportedCodec { batch_start, codec } => {
            assert_eq!((batch_start, codec.as_str()), (8192, "CompressionType(7)"));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_corrupt_compressed_buffer_names_codec_and_column() {
    for (codec, name) in [
        (CompressionType::ZSTD, "ZSTD"),
        (CompressionType::LZ4_FRAME, "LZ4_FRAME"),
    ] {
        let mut data = ipc_with(&[batch(1000)], Some(codec));
        let (body, bufs) = body_of(&data, 1);
        // Buffers: id (validity, values), x (validity, values), s (…).
        // Overwrite the frame magic of x's values, after the length prefix.
        let (off, len) = bufs[3];
        assert!(len > 12, "x's values are compressed");
        let at = body + off + 8;
        data[at..at + 4].copy_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
        match decode_err(data, 0) {
            ResultDecodeError::CorruptBuffer { codec, column, .. } => {
                assert_eq!((codec.as_str(), column.as_deref()), (name, Some("x")));
            }
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn an_impossible_stated_length_is_refused_before_any_allocation() {
    let mut data = ipc_with(&[batch(1000)], Some(CompressionType::ZSTD));
    let (body, bufs) = body_of(&data, 1);
    // Buffers: id (2), x (2), s (validity, offsets, values): s's values say it decompresses to 1 PiB.
    let (off, _) = bufs[6];
    data[body + off..body + off + 8].copy_from_slice(&(1i64 << 50).to_le_bytes());
    match decode_err(data, 40) {
        ResultDecodeError::CorruptBuffer {
            batch_start,
            codec,
            column,
            reason,
        } => {
            assert_eq!(
                (batch_start, codec.as_str(), column.as_deref()),
                (40, "ZSTD", Some("s"))
            );
            assert!(reason.contains("1125899906842624"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
}

/// `SELECT CAST(X'00FF01' AS STRING)`: Spark sends a Utf8 column whose
/// bytes are not UTF-8. Made here by writing a Binary column and turning
/// the schema's Binary into Utf8 (one byte of the schema message).
pub(super) fn not_utf8_ipc(codec: Option<CompressionType>) -> Vec<u8> {
    let id: ArrayRef = Arc::new(Int64Array::from_iter_values(0..4));
    let s: ArrayRef = Arc::new(BinaryArray::from_iter_values([
        b"ok".as_slice(),
        b"fine",
        b"\x00\xff\x01",
        b"also fine",
    ]));
    let b = RecordBatch::try_from_iter([("id", id), ("s", s)]).unwrap();
    let data = ipc_with(&[b], codec);
    let (schema_end, _) = body_of(&data, 1);
    (0..schema_end)
        .find_map(|i| {
            let mut d = data.clone();
            d[i] = d[i].wrapping_add(1);
            let m = messages(&d).next()?;
            let s = arrow_ipc::convert::try_fb_to_schema(m.header.header_as_schema()?).ok()?;
            (s.fields().len() == 2 && s.field(1).data_type() == &arrow_schema::DataType::Utf8)
                .then_some(d)
        })
        .expect("the type byte")
}

#[test]
fn a_string_that_is_not_utf8_names_column_and_row() {
    for codec in [
        None,
        Some(CompressionType::ZSTD),
        Some(CompressionType::LZ4_FRAME),
    ] {
        match decode_err(not_utf8_ipc(codec), 100) {
            ResultDecodeError::NotUtf8 {
                batch_start,
                column,
                row,
            } => assert_eq!((batch_start, column.as_str(), row), (100, "s", Some(102))),
            other => panic!("{codec:?}: {other:?}"),
        }
    }
}
