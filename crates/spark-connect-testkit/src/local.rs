//! Local relations: data the client sent, queried back.
//!
//! An upload test is only worth something if the rows can be read back and
//! compared. The test server therefore executes the three relations a
//! client builds from its own data, as Spark 4.3's `SparkConnectPlanner`
//! resolves them:
//!
//! * `LocalRelation`: an Arrow IPC stream inline in `data`;
//! * `CachedLocalRelation`: the artifact `cache/<hash>` holds a serialized
//!   `LocalRelation` message;
//! * `ChunkedCachedLocalRelation`: each `cache/<dataHash>` artifact holds an
//!   Arrow IPC stream (one chunk of the rows, in order), `cache/<schemaHash>`
//!   the schema string.
//!
//! A missing artifact fails the plan as Spark does (`INTERNAL_ERROR` from
//! `InvalidPlanInput`, naming the hash and the session). The result is the
//! rows as uploaded, with the data's own Arrow schema: the server does not
//! parse Spark schema strings, so a `schema` next to data is not applied,
//! and a relation with a schema but no data is not supported.

use std::io::Cursor;

use arrow_array::RecordBatch;
use arrow_ipc::reader::StreamReader;
use arrow_ipc::writer::StreamWriter;
use arrow_schema::{DataType, Schema, SchemaRef, TimeUnit};
use bytes::Bytes;
use prost::Message as _;

use crate::error::{SparkException, unsupported};
use spark_connect_retry::proto::{self, data_type as dt, relation::RelType};

/// Looks an artifact of the plan's session up by name.
pub(crate) type Cache<'a> = &'a dyn Fn(&str) -> Option<Bytes>;

/// Rows sent by the client, decoded.
#[derive(Debug)]
pub(crate) struct LocalTable {
    schema: SchemaRef,
    batches: Vec<RecordBatch>,
    /// `starts[i]`: the row offset of `batches[i]`.
    starts: Vec<u64>,
    rows: u64,
    spark_schema: proto::DataType,
}

/// Resolves a local relation of any of the three kinds. `session_uuid` only
/// names the session in errors, as Spark does.
pub(crate) fn resolve(
    rel: &RelType,
    cache: Cache<'_>,
    session_uuid: &str,
) -> Result<LocalTable, SparkException> {
    match rel {
        RelType::LocalRelation(local) => from_local_relation(local),
        RelType::CachedLocalRelation(cached) => {
            let bytes = cache(&cache_name(&cached.hash)).ok_or_else(|| {
                SparkException::invalid_plan_input(&format!(
                    "Not found any cached local relation with the hash: {} in the session with sessionUUID {session_uuid}.",
                    cached.hash
                ))
            })?;
            let local = proto::LocalRelation::decode(bytes).map_err(|e| {
                SparkException::java(
                    "com.google.protobuf.InvalidProtocolBufferException",
                    format!(
                        "the cached local relation {} is not a LocalRelation: {e}",
                        cached.hash
                    ),
                )
            })?;
            from_local_relation(&local)
        }
        RelType::ChunkedCachedLocalRelation(chunked) => {
            let block = |hash: &str| {
                cache(&cache_name(hash)).ok_or_else(|| {
                    SparkException::invalid_plan_input(&format!(
                        "Not found chunked cached local relation block with the hash: {hash} in the session with sessionUUID {session_uuid}."
                    ))
                })
            };
            if chunked.data_hashes.is_empty() {
                return Err(SparkException::invalid_plan_input(
                    "ChunkedCachedLocalRelation should contain data.",
                ));
            }
            if let Some(hash) = &chunked.schema_hash {
                block(hash)?;
            }
            let chunks = chunked
                .data_hashes
                .iter()
                .map(|h| block(h))
                .collect::<Result<Vec<_>, _>>()?;
            LocalTable::from_ipc_chunks(&chunks)
        }
        _ => Err(unsupported("this relation")),
    }
}

/// The prefix of cached local relations and other cached blobs among a
/// session's artifacts.
pub(crate) const CACHE_PREFIX: &str = "cache/";

fn cache_name(hash: &str) -> String {
    format!("{CACHE_PREFIX}{hash}")
}

fn from_local_relation(local: &proto::LocalRelation) -> Result<LocalTable, SparkException> {
    match (&local.data, &local.schema) {
        (Some(data), _) => LocalTable::from_ipc_chunks(&[Bytes::copy_from_slice(data)]),
        (None, None) => Err(SparkException::invalid_plan_input(
            "Schema for LocalRelation is required when the input data is not provided.",
        )),
        (None, Some(_)) => Err(unsupported("a LocalRelation with a schema and no data")),
    }
}

fn bad_data(what: impl std::fmt::Display) -> SparkException {
    SparkException::invalid_plan_input(&format!(
        "Input data for LocalRelation is not a valid Arrow IPC stream: {what}"
    ))
}

impl LocalTable {
    /// Decodes Arrow IPC streams holding consecutive rows of one schema.
    pub(crate) fn from_ipc_chunks(chunks: &[Bytes]) -> Result<Self, SparkException> {
        let mut schema: Option<SchemaRef> = None;
        let mut batches = Vec::new();
        for chunk in chunks {
            let reader =
                StreamReader::try_new(Cursor::new(chunk.clone()), None).map_err(bad_data)?;
            match &schema {
                None => schema = Some(reader.schema()),
                Some(s) if *s != reader.schema() => {
                    return Err(bad_data("the chunks do not share one schema"));
                }
                Some(_) => {}
            }
            for batch in reader {
                let batch = batch.map_err(bad_data)?;
                // Empty batches carry no rows and would only split responses.
                if batch.num_rows() > 0 {
                    batches.push(batch);
                }
            }
        }
        let schema = schema.ok_or_else(|| bad_data("no data"))?;
        let spark_schema = spark_struct(&schema)?;
        let mut starts = Vec::with_capacity(batches.len());
        let mut rows = 0u64;
        for b in &batches {
            starts.push(rows);
            rows += b.num_rows() as u64;
        }
        Ok(LocalTable {
            schema,
            batches,
            starts,
            rows,
            spark_schema,
        })
    }

    pub(crate) fn row_count(&self) -> u64 {
        self.rows
    }

    /// The index of the batch holding row `offset`.
    fn batch_at(&self, offset: u64) -> Option<usize> {
        let i = self
            .starts
            .partition_point(|&s| s <= offset)
            .checked_sub(1)?;
        (offset < self.starts[i] + self.batches[i].num_rows() as u64).then_some(i)
    }

    /// How many rows, at most `max`, one response takes from `offset`: a
    /// response never spans two uploaded batches.
    pub(crate) fn next_len(&self, offset: u64, max: u64) -> u64 {
        match self.batch_at(offset) {
            Some(i) => (self.starts[i] + self.batches[i].num_rows() as u64 - offset).min(max),
            None => 0,
        }
    }

    /// Rows `first .. first + len` (inside one batch, see
    /// [`next_len`](Self::next_len)) as an Arrow IPC stream.
    pub(crate) fn ipc_batch(&self, first: u64, len: u64) -> Result<Vec<u8>, SparkException> {
        let batch = match self.batch_at(first) {
            Some(i) => self.batches[i].slice((first - self.starts[i]) as usize, len as usize),
            None => RecordBatch::new_empty(self.schema.clone()),
        };
        write_ipc(&self.schema, &batch)
    }

    pub(crate) fn spark_schema(&self) -> proto::DataType {
        self.spark_schema.clone()
    }
}

/// The Spark schema of an Arrow schema, as Spark's `ArrowUtils.fromArrowSchema`
/// maps the common types; others fail with `UNSUPPORTED_ARROWTYPE`.
fn spark_struct(schema: &SchemaRef) -> Result<proto::DataType, SparkException> {
    let fields = schema
        .fields()
        .iter()
        .map(|f| {
            Ok(dt::StructField {
                name: f.name().clone(),
                data_type: Some(spark_type(f.data_type())?),
                nullable: f.is_nullable(),
                metadata: None,
            })
        })
        .collect::<Result<Vec<_>, SparkException>>()?;
    Ok(proto::DataType {
        kind: Some(dt::Kind::Struct(dt::Struct {
            fields,
            type_variation_reference: 0,
        })),
    })
}

fn spark_type(t: &DataType) -> Result<proto::DataType, SparkException> {
    use dt::Kind;
    let kind = match t {
        DataType::Null => Kind::Null(Default::default()),
        DataType::Boolean => Kind::Boolean(Default::default()),
        DataType::Int8 => Kind::Byte(Default::default()),
        DataType::Int16 => Kind::Short(Default::default()),
        DataType::Int32 => Kind::Integer(Default::default()),
        DataType::Int64 => Kind::Long(Default::default()),
        DataType::Float32 => Kind::Float(Default::default()),
        DataType::Float64 => Kind::Double(Default::default()),
        DataType::Utf8 | DataType::LargeUtf8 => Kind::String(Default::default()),
        DataType::Binary | DataType::LargeBinary => Kind::Binary(Default::default()),
        DataType::Date32 => Kind::Date(Default::default()),
        DataType::Timestamp(TimeUnit::Microsecond, Some(_)) => Kind::Timestamp(Default::default()),
        DataType::Timestamp(TimeUnit::Microsecond, None) => Kind::TimestampNtz(Default::default()),
        DataType::Decimal128(p, s) => Kind::Decimal(dt::Decimal {
            scale: Some(i32::from(*s)),
            precision: Some(i32::from(*p)),
            type_variation_reference: 0,
        }),
        other => {
            return Err(SparkException::new(
                "UNSUPPORTED_ARROWTYPE",
                "0A000",
                format!("Unsupported arrow type {other}."),
            )
            .with_parameter("typeName", other.to_string()));
        }
    };
    Ok(proto::DataType { kind: Some(kind) })
}

pub(crate) fn arrow_failed(e: arrow_schema::ArrowError) -> SparkException {
    SparkException::java("java.lang.IllegalStateException", format!("arrow: {e}"))
}

/// One Arrow IPC stream: `schema`, then `batch`.
pub(crate) fn write_ipc(schema: &Schema, batch: &RecordBatch) -> Result<Vec<u8>, SparkException> {
    let mut writer = StreamWriter::try_new(Vec::new(), schema).map_err(arrow_failed)?;
    writer.write(batch).map_err(arrow_failed)?;
    writer.finish().map_err(arrow_failed)?;
    writer.into_inner().map_err(arrow_failed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    use arrow_array::{Int64Array, StringArray};
    use arrow_schema::{Field, Schema};

    fn ipc(batches: &[RecordBatch]) -> Bytes {
        let mut w =
            arrow_ipc::writer::StreamWriter::try_new(Vec::new(), &batches[0].schema()).unwrap();
        for b in batches {
            w.write(b).unwrap();
        }
        w.finish().unwrap();
        Bytes::from(w.into_inner().unwrap())
    }

    fn batch(ids: std::ops::Range<i64>) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("s", DataType::Utf8, true),
        ]));
        let s: Vec<String> = ids.clone().map(|i| format!("r{i}")).collect();
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from_iter_values(ids)),
                Arc::new(StringArray::from(s)),
            ],
        )
        .unwrap()
    }

    #[test]
    fn responses_never_span_two_batches() {
        let t =
            LocalTable::from_ipc_chunks(&[ipc(&[batch(0..5), batch(5..7)]), ipc(&[batch(7..10)])])
                .unwrap();
        assert_eq!(t.row_count(), 10);
        let mut offset = 0;
        let mut lens = Vec::new();
        while offset < t.row_count() {
            let len = t.next_len(offset, 4);
            lens.push(len);
            offset += len;
        }
        assert_eq!(lens, vec![4, 1, 2, 3]);
        let one = t.ipc_batch(5, 2).unwrap();
        let back: Vec<RecordBatch> = StreamReader::try_new(Cursor::new(one), None)
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(back, vec![batch(5..7)]);
        assert_eq!(t.next_len(10, 4), 0);
        let empty = LocalTable::from_ipc_chunks(&[ipc(&[batch(0..0)])]).unwrap();
        assert_eq!((empty.row_count(), empty.next_len(0, 4)), (0, 0));
        assert!(!empty.ipc_batch(0, 0).unwrap().is_empty());
    }

    #[test]
    fn chunks_must_share_a_schema_and_be_arrow() {
        let other = RecordBatch::try_new(
            Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, false)])),
            vec![Arc::new(Int64Array::from(vec![1]))],
        )
        .unwrap();
        assert!(LocalTable::from_ipc_chunks(&[ipc(&[batch(0..1)]), ipc(&[other])]).is_err());
        let e = LocalTable::from_ipc_chunks(&[Bytes::from_static(b"not arrow")]).unwrap_err();
        assert_eq!(e.error_class.as_deref(), Some("INTERNAL_ERROR"));
    }

    #[test]
    fn missing_artifacts_fail_as_spark_does() {
        let empty = |_: &str| None;
        let rel = RelType::ChunkedCachedLocalRelation(proto::ChunkedCachedLocalRelation {
            data_hashes: vec!["abc".into()],
            schema_hash: None,
        });
        let e = resolve(&rel, &empty, "sess").unwrap_err();
        assert_eq!(
            e.message(),
            "[INTERNAL_ERROR] Not found chunked cached local relation block with the hash: abc in the session with sessionUUID sess. SQLSTATE: XX000"
        );
        let rel = RelType::CachedLocalRelation(proto::CachedLocalRelation { hash: "h".into() });
        let e = resolve(&rel, &empty, "sess").unwrap_err();
        assert!(
            e.text
                .starts_with("Not found any cached local relation with the hash: h")
        );
    }

    #[test]
    fn cached_relations_read_their_artifacts() {
        let data = ipc(&[batch(0..3)]);
        let local = proto::LocalRelation {
            data: Some(data.to_vec()),
            schema: None,
        };
        let whole = Bytes::from(local.encode_to_vec());
        let cache = |name: &str| match name {
            "cache/whole" => Some(whole.clone()),
            "cache/part" => Some(data.clone()),
            "cache/schema" => Some(Bytes::from_static(b"id long, s string")),
            _ => None,
        };
        let rel = RelType::CachedLocalRelation(proto::CachedLocalRelation {
            hash: "whole".into(),
        });
        assert_eq!(resolve(&rel, &cache, "s").unwrap().row_count(), 3);
        let rel = RelType::ChunkedCachedLocalRelation(proto::ChunkedCachedLocalRelation {
            data_hashes: vec!["part".into(), "part".into()],
            schema_hash: Some("schema".into()),
        });
        let t = resolve(&rel, &cache, "s").unwrap();
        assert_eq!(t.row_count(), 6);
        let dt::Kind::Struct(s) = t.spark_schema().kind.unwrap() else {
            panic!("a struct")
        };
        assert_eq!(s.fields.len(), 2);
        assert!(!s.fields[0].nullable && s.fields[1].nullable);
        let rel = RelType::ChunkedCachedLocalRelation(proto::ChunkedCachedLocalRelation {
            data_hashes: vec![],
            schema_hash: None,
        });
        assert!(resolve(&rel, &cache, "s").is_err());
    }
}
