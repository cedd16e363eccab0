//! [`RowDigest`]: a running digest of a result's rows, independent of how
//! the rows are cut into batches.
//!
//! A resumed query re-executes its plan and must prove that the first N rows
//! of the new result are the N rows the caller already has, without keeping
//! them. Both sides are digested the same way and compared: equal digests
//! mean the same rows (up to a digest collision), whatever the batch sizes
//! on either side, because the digested byte streams only depend on the
//! rows, in order.
//!
//! **Canonical encoding, per column.** Each column feeds two XXH3-128
//! streams:
//!
//! * *values*: for a fixed-width column (integers, floats, decimals, dates,
//!   timestamps, intervals) the little-endian value bytes of each row, a
//!   null slot as zeros (Arrow leaves its bytes undefined), straight from
//!   the column's buffer (no per-row work when the batch has no nulls); for
//!   any other type (strings, binary, booleans, nested, dictionaries), each
//!   row's encoding in Arrow's row format (`arrow-row`, which includes
//!   nulls and is the same for equal values), prefixed by its length;
//! * *nulls*: the absolute row index of each null (fixed-width columns).
//!
//! A batch's rows are appended to these streams, so a result cut into
//! batches of 3 and of 5 rows feeds the same bytes. The digest is the
//! XXH3-128 of the row count, the schema (names and types) and every
//! column's two stream digests. Floats compare by their bits (`-0.0` is not
//! `0.0`; a NaN equals only the same NaN).
//!
//! **Width and strength.** 128 bits from XXH3, a fast non-cryptographic
//! hash: an accidental change of the rows goes unnoticed with probability
//! about 2⁻¹²⁸, but a server that wanted to could forge a collision.

use std::sync::Arc;

use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_row::{RowConverter, SortField};
use arrow_schema::{DataType, SchemaRef};
use xxhash_rust::xxh3::Xxh3;

use super::error::ResultError;

/// A 128-bit digest of rows (see the [module docs](self)).
pub(super) type Digest = u128;

/// How one column is digested.
enum Encoding {
    /// Fixed-width values of this many bytes, taken from the values buffer.
    Fixed(usize),
    /// Arrow's row format, one length-prefixed row at a time.
    Rows(RowConverter),
}

struct Column {
    encoding: Encoding,
    values: Xxh3,
    nulls: Xxh3,
}

/// The running digest of the rows fed so far.
#[derive(Default)]
pub(super) struct RowDigest {
    schema: Option<SchemaRef>,
    columns: Vec<Column>,
    rows: u64,
    /// Scratch for a fixed-width column with nulls (slots zeroed).
    scratch: Vec<u8>,
}

impl std::fmt::Debug for RowDigest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RowDigest")
            .field("rows", &self.rows)
            .finish_non_exhaustive()
    }
}

/// Whether two schemas describe the same rows: names and types, in order.
fn same_columns(a: &SchemaRef, b: &SchemaRef) -> bool {
    a.fields().len() == b.fields().len()
        && a.fields()
            .iter()
            .zip(b.fields())
            .all(|(x, y)| x.name() == y.name() && x.data_type() == y.data_type())
}

fn encoding(dt: &DataType) -> Result<Encoding, ResultError> {
    if dt.is_primitive()
        && let Some(width) = dt.primitive_width()
    {
        return Ok(Encoding::Fixed(width));
    }
    let converter =
        RowConverter::new(vec![SortField::new(dt.clone())]).map_err(ResultError::Arrow)?;
    Ok(Encoding::Rows(converter))
}

impl RowDigest {
    /// Rows fed so far.
    pub(super) fn rows(&self) -> u64 {
        self.rows
    }

    /// Append a batch's rows. The first batch fixes the schema; a later one
    /// with other columns is a protocol error (one result, one schema).
    pub(super) fn update(&mut self, batch: &RecordBatch) -> Result<(), ResultError> {
        match &self.schema {
            Some(s) if !same_columns(s, &batch.schema()) => {
                return Err(ResultError::Protocol(
                    "a batch of the result has other columns than the batches before it".to_owned(),
                ));
            }
            Some(_) => {}
            None => {
                let schema = batch.schema();
                self.columns = schema
                    .fields()
                    .iter()
                    .map(|f| {
                        Ok(Column {
                            encoding: encoding(f.data_type())?,
                            values: Xxh3::new(),
                            nulls: Xxh3::new(),
                        })
                    })
                    .collect::<Result<_, ResultError>>()?;
                self.schema = Some(schema);
            }
        }
        for (column, array) in self.columns.iter_mut().zip(batch.columns()) {
            column.update(array, self.rows, &mut self.scratch)?;
        }
        self.rows += batch.num_rows() as u64;
        Ok(())
    }

    /// The digest of the rows fed so far (the digest itself keeps running).
    pub(super) fn finish(&self) -> Digest {
        let mut h = Xxh3::new();
        h.update(&self.rows.to_le_bytes());
        if let Some(schema) = &self.schema {
            for f in schema.fields() {
                let desc = format!("{}:{}", f.name(), f.data_type());
                h.update(&(desc.len() as u64).to_le_bytes());
                h.update(desc.as_bytes());
            }
        }
        for c in &self.columns {
            h.update(&c.values.digest128().to_le_bytes());
            h.update(&c.nulls.digest128().to_le_bytes());
        }
        h.digest128()
    }
}

impl Column {
    fn update(
        &mut self,
        array: &ArrayRef,
        first_row: u64,
        scratch: &mut Vec<u8>,
    ) -> Result<(), ResultError> {
        match &self.encoding {
            Encoding::Fixed(width) => {
                let width = *width;
                let data = array.to_data();
                let Some(buffer) = data.buffers().first() else {
                    return Err(ResultError::Protocol(
                        "a fixed-width Arrow column without a values buffer".to_owned(),
                    ));
                };
                let (start, end) = (data.offset() * width, (data.offset() + data.len()) * width);
                let Some(bytes) = buffer.as_slice().get(start..end) else {
                    return Err(ResultError::Protocol(
                        "an Arrow column shorter than its length".to_owned(),
                    ));
                };
                match data.nulls().filter(|n| n.null_count() > 0) {
                    None => self.values.update(bytes),
                    Some(nulls) => {
                        scratch.clear();
                        scratch.extend_from_slice(bytes);
                        for i in nulls.iter().enumerate().filter(|(_, v)| !v).map(|(i, _)| i) {
                            scratch[i * width..(i + 1) * width].fill(0);
                            self.nulls.update(&(first_row + i as u64).to_le_bytes());
                        }
                        self.values.update(scratch);
                    }
                }
            }
            Encoding::Rows(converter) => {
                let rows = converter
                    .convert_columns(&[Arc::clone(array)])
                    .map_err(ResultError::Arrow)?;
                for row in rows.iter() {
                    let bytes = row.as_ref();
                    self.values.update(&(bytes.len() as u64).to_le_bytes());
                    self.values.update(bytes);
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::{BooleanArray, Float64Array, Int64Array, StringArray};
    use arrow_schema::{Field, Schema};

    use super::*;

    fn batch(ids: Vec<Option<i64>>, names: Vec<Option<&str>>) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("name", DataType::Utf8, true),
            Field::new("flag", DataType::Boolean, false),
            Field::new("f", DataType::Float64, false),
        ]));
        let n = ids.len();
        let flags: Vec<bool> = (0..n).map(|i| i % 3 == 0).collect();
        let fs: Vec<f64> = (0..n).map(|i| i as f64 / 7.0).collect();
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from(ids)),
                Arc::new(StringArray::from(names)),
                Arc::new(BooleanArray::from(flags)),
                Arc::new(Float64Array::from(fs)),
            ],
        )
        .unwrap()
    }

    fn sample(n: i64) -> RecordBatch {
        let ids = (0..n).map(|i| (i % 5 != 2).then_some(i * 3)).collect();
        let names = (0..n)
            .map(|i| (i % 4 != 1).then_some(if i % 2 == 0 { "ab" } else { "a" }))
            .collect();
        batch(ids, names)
    }

    fn digest_in_cuts(b: &RecordBatch, cuts: &[usize]) -> (Digest, u64) {
        let mut d = RowDigest::default();
        let mut at = 0;
        for &len in cuts {
            d.update(&b.slice(at, len)).unwrap();
            at += len;
        }
        d.update(&b.slice(at, b.num_rows() - at)).unwrap();
        (d.finish(), d.rows())
    }

    #[test]
    fn the_digest_does_not_depend_on_batch_cuts() {
        let b = sample(40);
        let whole = digest_in_cuts(&b, &[]);
        assert_eq!(whole.1, 40);
        for cuts in [&[1usize][..], &[3, 5, 7], &[0, 13, 0, 2], &[39], &[20, 20]] {
            assert_eq!(digest_in_cuts(&b, cuts), whole, "{cuts:?}");
        }
    }

    #[test]
    fn any_changed_row_changes_the_digest() {
        let b = sample(12);
        let base = digest_in_cuts(&b, &[5]).0;
        let ids: Vec<Option<i64>> = (0..12).map(|i| (i % 5 != 2).then_some(i * 3)).collect();
        let names: Vec<Option<&str>> = (0..12)
            .map(|i| (i % 4 != 1).then_some(if i % 2 == 0 { "ab" } else { "a" }))
            .collect();
        for row in 0..12 {
            let mut v = ids.clone();
            v[row] = Some(v[row].map_or(0, |x| x + 1)); // a value, or a null made 0
            let changed = batch(v, names.clone());
            assert_ne!(digest_in_cuts(&changed, &[5]).0, base, "id of row {row}");
            let mut s = names.clone();
            s[row] = match s[row] {
                None => Some(""),
                Some(_) => None,
            };
            let changed = batch(ids.clone(), s);
            assert_ne!(digest_in_cuts(&changed, &[5]).0, base, "name of row {row}");
        }
        // A row moved from one column's string into the next row's.
        let mut s = names.clone();
        s[0] = Some("a");
        s[2] = Some("bab");
        assert_ne!(digest_in_cuts(&batch(ids.clone(), s), &[5]).0, base);
        // Fewer rows.
        assert_ne!(digest_in_cuts(&b.slice(0, 11), &[5]).0, base);
    }

    #[test]
    fn a_null_and_a_zero_differ_even_with_garbage_under_the_null() {
        let zero = batch(vec![Some(0)], vec![Some("x")]);
        let null = batch(vec![None], vec![Some("x")]);
        assert_ne!(digest_in_cuts(&zero, &[]).0, digest_in_cuts(&null, &[]).0);
        // A null slot over a non-zero value digests like any other null.
        let data = Int64Array::from(vec![7]).into_data().into_builder();
        let garbage = Int64Array::from(
            data.nulls(Some(arrow_buffer::NullBuffer::new_null(1)))
                .build()
                .unwrap(),
        );
        let mut with_garbage = null.columns().to_vec();
        with_garbage[0] = Arc::new(garbage);
        let with_garbage = RecordBatch::try_new(null.schema(), with_garbage).unwrap();
        assert_eq!(
            digest_in_cuts(&with_garbage, &[]).0,
            digest_in_cuts(&null, &[]).0
        );
    }

    #[test]
    fn the_schema_is_part_of_the_digest() {
        let a = RecordBatch::try_new(
            Arc::new(Schema::new(vec![Field::new("a", DataType::Int64, false)])),
            vec![Arc::new(Int64Array::from(vec![1, 2]))],
        )
        .unwrap();
        let b = RecordBatch::try_new(
            Arc::new(Schema::new(vec![Field::new("b", DataType::Int64, false)])),
            vec![Arc::new(Int64Array::from(vec![1, 2]))],
        )
        .unwrap();
        assert_ne!(digest_in_cuts(&a, &[]).0, digest_in_cuts(&b, &[]).0);
        let mut d = RowDigest::default();
        d.update(&a).unwrap();
        assert!(matches!(d.update(&b), Err(ResultError::Protocol(_))));
    }
}
