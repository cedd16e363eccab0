//! The local data the upload tests send: `id` (0..n) and `x = 2 * id`, two
//! non-null `BIGINT`s, made lazily batch by batch, so a read-back can check
//! every row exactly.
#![allow(dead_code)] // each test binary uses part of this module

use std::sync::Arc;

use arrow_array::{Int64Array, RecordBatch};
use arrow_schema::{DataType, Field, Schema, SchemaRef};

/// `id: Int64, x: Int64`, both non-null.
pub fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("x", DataType::Int64, false),
    ]))
}

/// `id, id * 2` for `0..n`, in batches of `per` rows, made lazily.
pub fn rows(n: i64, per: i64) -> impl Iterator<Item = RecordBatch> {
    let schema = schema();
    (0..n).step_by(per as usize).map(move |start| {
        let end = (start + per).min(n);
        RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(Int64Array::from_iter_values(start..end)),
                Arc::new(Int64Array::from_iter_values((start..end).map(|i| i * 2))),
            ],
        )
        .expect("two int64 columns of equal length")
    })
}
