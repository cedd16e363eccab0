//! Fuzz-style test of the Arrow decode path: thousands of seeded, mutated
//! IPC payloads (plain, zstd- and lz4-compressed, and a STRING that is not
//! UTF-8) must each decode to valid batches or fail with a typed error; no
//! panic may reach the caller.

use std::sync::Arc;

use arrow_array::{ArrayRef, Int32Array, Int64Array, ListArray, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use arrow_ipc::CompressionType;

use super::decode::decode_vec as decode;
use super::decode_codec_tests::{ipc_with, not_utf8_ipc};
use super::error::ResultError;

/// A few valid payloads with varied layouts (fixed width, offsets, nulls,
/// nesting, two batches in one stream).
fn seeds() -> Vec<Vec<u8>> {
    let ints: ArrayRef = Arc::new(Int64Array::from_iter_values(0..37));
    let strs: ArrayRef = Arc::new(StringArray::from_iter(
        (0..37).map(|i| (i % 5 != 0).then(|| format!("row-{i}"))),
    ));
    let list: ArrayRef = Arc::new(ListArray::from_iter_primitive::<
        arrow_array::types::Int32Type,
        _,
        _,
    >((0..37).map(|i| Some((0..i % 4).map(Some)))));
    let small: ArrayRef = Arc::new(Int32Array::from(vec![Some(1), None, Some(3)]));
    let mut out = Vec::new();
    for cols in [
        vec![("id", ints.clone())],
        vec![("id", ints), ("s", strs.clone())],
        vec![("l", list)],
        vec![("n", small)],
    ] {
        let batch = RecordBatch::try_from_iter(cols).unwrap();
        out.push(ipc(std::slice::from_ref(&batch)));
        for codec in [CompressionType::ZSTD, CompressionType::LZ4_FRAME] {
            out.push(ipc_with(std::slice::from_ref(&batch), Some(codec)));
        }
        out.push(ipc(&[batch.clone(), batch]));
    }
    for codec in [
        None,
        Some(CompressionType::ZSTD),
        Some(CompressionType::LZ4_FRAME),
    ] {
        out.push(not_utf8_ipc(codec));
    }
    out
}

fn ipc(batches: &[RecordBatch]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut w = arrow_ipc::writer::StreamWriter::try_new(&mut out, &batches[0].schema()).unwrap();
    for b in batches {
        w.write(b).unwrap();
    }
    w.finish().unwrap();
    drop(w);
    out
}

/// One random mutation: flip bits, overwrite bytes with boundary values,
/// truncate, duplicate or insert a run.
fn mutate(rng: &mut StdRng, data: &mut Vec<u8>) {
    let edits = rng.random_range(1..=4);
    for _ in 0..edits {
        if data.is_empty() {
            data.push(rng.random());
            continue;
        }
        let at = rng.random_range(0..data.len());
        match rng.random_range(0..6) {
            0 => data[at] ^= 1 << rng.random_range(0..8),
            1 => data[at] = [0x00, 0x01, 0x7f, 0x80, 0xff][rng.random_range(0..5)],
            2 => {
                // A little-endian i32/i64 field set to an extreme.
                let v: [u8; 4] = [0xff, 0xff, 0xff, 0x7f];
                for (i, b) in v.iter().enumerate() {
                    if let Some(x) = data.get_mut(at + i) {
                        *x = *b;
                    }
                }
            }
            3 => data.truncate(at),
            4 => {
                let end = (at + rng.random_range(1..16)).min(data.len());
                let run = data[at..end].to_vec();
                data.splice(at..at, run);
            }
            _ => data.insert(at, rng.random()),
        }
    }
}

#[test]
fn mutated_payloads_decode_or_fail_typed_never_panic() {
    let seeds = seeds();
    let mut rng = StdRng::seed_from_u64(0x5eed_a770);
    let (mut ok, mut errors, mut contained) = (0u32, 0u32, 0u32);
    let mut explained = 0u32;
    for i in 0..9000 {
        let mut data = seeds[i % seeds.len()].clone();
        mutate(&mut rng, &mut data);
        let result = std::panic::catch_unwind(|| decode(data.clone(), 0));
        let Ok(result) = result else {
            panic!("a panic escaped the decoder for payload {i}");
        };
        match result {
            Ok((batches, _)) => {
                for b in &batches {
                    for c in b.columns() {
                        c.to_data()
                            .validate_full()
                            .unwrap_or_else(|e| panic!("payload {i}: invalid array decoded: {e}"));
                    }
                }
                ok += 1;
            }
            Err(ResultError::Arrow(e)) => {
                if e.to_string().contains("decoder panicked") {
                    contained += 1;
                }
                errors += 1;
            }
            Err(ResultError::ResultDecode(_)) => {
                explained += 1;
                errors += 1;
            }
            Err(other) => panic!("payload {i}: an untyped error {other:?}"),
        }
    }
    assert_eq!(ok + errors, 9000);
    assert!(
        explained > 100,
        "compressed and not-UTF-8 failures are explained: {explained}"
    );
    assert!(
        errors > 1000,
        "the mutations must break most payloads: {errors}"
    );
    eprintln!(
        "decoded {ok}, errors {errors} (of which {contained} contained panics, {explained} explained)"
    );
}

/// The unmutated seeds decode to exactly what was encoded (the not-UTF-8
/// ones, the last three, fail typed).
#[test]
fn seeds_round_trip() {
    let seeds = seeds();
    let (good, bad) = seeds.split_at(seeds.len() - 3);
    for data in bad {
        assert!(matches!(
            decode(data.clone(), 0),
            Err(ResultError::ResultDecode(_))
        ));
    }
    for data in good.iter().cloned() {
        let (batches, schema) = decode(data, 0).unwrap();
        assert!(schema.is_some());
        assert!(!batches.is_empty());
    }
    let schema = Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, false)]));
    assert_eq!(schema.fields().len(), 1);
}

/// The payload of `docs/arrow-ipc-panic.md`: a one-row Int32 stream whose
/// first buffer offset (byte 240) says 0x7f, past the 64-byte body.
const PANIC_PAYLOAD_HEX: &str = concat!(
    "ffffffff780000001000000000000a000c000a00090004000a0000001000000000010400080008000000040008000000",
    "04000000010000001400000010001400100000000f00040000000800100000001800000020000000000000021c000000",
    "08000c0004000b00080000002000000000000001000000000100000078000000ffffffffb8000000100000000c001a00",
    "18001700040008000c000000200000004000000000000000000000000000000304000a0018000c00080004000a000000",
    "2c0000001000000001000000000000000000000001000000010000000000000000000000000000000000000002000000",
    "7f0000000000000000000000000000000000000000000000040000000000000000000000000000000000000000000000",
    "000000000000000000000000000000000000000000000000000000000000000007000000000000000000000000000000",
    "000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000",
    "ffffffff00000000",
);

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

#[test]
fn the_documented_panic_payload_is_a_typed_error() {
    let data = unhex(PANIC_PAYLOAD_HEX);
    assert_eq!((data.len(), data[240]), (392, 0x7f));
    // Upstream, arrow-ipc 60.1 panics on it inside arrow-buffer.
    let raw = std::panic::catch_unwind(|| {
        let mut buf = arrow_buffer::Buffer::from_vec(data.clone());
        let mut d = arrow_ipc::reader::StreamDecoder::new();
        while !buf.is_empty() {
            if d.decode(&mut buf).is_err() {
                break;
            }
        }
    });
    assert!(
        raw.is_err(),
        "arrow-ipc no longer panics: update docs/arrow-ipc-panic.md"
    );
    match decode(data, 0) {
        Err(ResultError::Arrow(e)) => assert!(e.to_string().contains("corrupt Arrow IPC"), "{e}"),
        other => panic!("{other:?}"),
    }
}
