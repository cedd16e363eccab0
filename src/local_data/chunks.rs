//! Local Arrow data as Spark Connect expects it: Arrow IPC streams, cut
//! into chunks the way PySpark 4.3 cuts them.
//!
//! Spark reads client data as Arrow IPC. Small data travels inline in a
//! `LocalRelation`; data at or above `spark.sql.session.localRelationCacheThreshold`
//! is cut into chunks, each a complete IPC stream, uploaded as cached
//! artifacts. How big a chunk gets decides how much is held in memory and
//! re-sent after a cut, so the rules are PySpark's, exactly
//! (`LocalRelation._serialize_table_chunks`): rows are taken in slices of
//! `min(1024, localRelationChunkSizeRows)`, each slice weighed by its
//! in-memory size (pyarrow's `nbytes`: IPC overhead ignored), and a chunk is
//! closed when the next slice would take it over
//! `min(localRelationChunkSizeBytes, localRelationBatchOfChunksSizeBytes)`,
//! counting the bare schema stream's size once. Pure code, no I/O.

use arrow_array::{Array, RecordBatch};
use arrow_ipc::writer::StreamWriter;
use arrow_schema::{ArrowError, SchemaRef};
use bytes::Bytes;

use super::upload::UploadError;

/// The server configuration `create_dataframe` reads (PySpark reads the same).
pub(crate) const CONF_KEYS: [&str; 5] = [
    "spark.sql.session.localRelationCacheThreshold",
    "spark.sql.session.localRelationSizeLimit",
    "spark.sql.session.localRelationChunkSizeRows",
    "spark.sql.session.localRelationChunkSizeBytes",
    "spark.sql.session.localRelationBatchOfChunksSizeBytes",
];

/// Spark 4.3's defaults for [`CONF_KEYS`], used when a server has no value.
const DEFAULTS: [u64; 5] = [1 << 20, 3 << 30, 10_000, 16 << 20, 1 << 30];

/// The most data (in memory) ever inlined, whatever the server reports as
/// `localRelationCacheThreshold`: half of Spark's (and Sail's) default
/// 128 MiB maximum inbound message, leaving room for the IPC and plan
/// framing. Sail reports 2147483647 (it has no artifacts); taken as is, the
/// client would inline up to 2 GiB and the server refuse anything over
/// 128 MiB. Capped, larger data takes the artifact path, which Sail refuses
/// with a clear `UnsupportedOperationException`.
pub(crate) const MAX_INLINE_BYTES: u64 = 64 << 20;

/// PySpark's slice size (the Scala client's `batchSizeCheckInterval`).
const SLICE_ROWS: usize = 1024;

/// The local-relation limits of the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LocalRelationConf {
    /// Data of at least this many bytes (in memory) is uploaded, not inlined.
    pub(crate) cache_threshold: u64,
    /// The most serialized bytes a cached relation may have.
    pub(crate) size_limit: u64,
    /// Rows per slice: `min(1024, localRelationChunkSizeRows)`.
    pub(crate) slice_rows: usize,
    /// The most bytes per chunk (approximate, as PySpark counts them).
    pub(crate) chunk_bytes: u64,
    /// The most bytes PySpark sends in one `AddArtifacts` stream.
    pub(crate) batch_of_chunks_bytes: u64,
}

impl LocalRelationConf {
    /// Read the answer to a config GET of [`CONF_KEYS`]. A missing value is
    /// Spark 4.3's default; a value that is not a whole number (sizes may
    /// end in `b`), or a zero chunk size, is an error naming the key.
    pub(crate) fn parse(values: &[Option<String>]) -> Result<Self, UploadError> {
        let mut v = DEFAULTS;
        for (i, key) in CONF_KEYS.iter().enumerate() {
            let Some(raw) = values.get(i).and_then(|x| x.as_deref()) else {
                continue;
            };
            let invalid = |reason| UploadError::InvalidConf {
                key,
                value: raw.to_owned(),
                reason,
            };
            let digits = raw.trim().strip_suffix(['b', 'B']).unwrap_or(raw.trim());
            v[i] = digits
                .parse::<u64>()
                .map_err(|_| invalid("not a whole number of bytes or rows"))?;
            if i >= 2 && v[i] == 0 {
                return Err(invalid("must be at least 1"));
            }
        }
        Ok(LocalRelationConf {
            cache_threshold: v[0].min(MAX_INLINE_BYTES),
            size_limit: v[1],
            slice_rows: usize::try_from(v[2]).unwrap_or(usize::MAX).min(SLICE_ROWS),
            chunk_bytes: v[3],
            batch_of_chunks_bytes: v[4],
        })
    }
}

/// A batch's in-memory size as pyarrow's `nbytes` counts it (the bytes its
/// slice refers to, not whole shared buffers).
pub(crate) fn nbytes(batch: &RecordBatch) -> u64 {
    batch
        .columns()
        .iter()
        .map(|c| {
            c.to_data()
                .get_slice_memory_size()
                .unwrap_or_else(|_| c.get_array_memory_size()) as u64
        })
        .sum()
}

/// `batches` as one Arrow IPC stream.
pub(crate) fn ipc_stream(schema: &SchemaRef, batches: &[RecordBatch]) -> Result<Bytes, ArrowError> {
    let mut writer = StreamWriter::try_new(Vec::new(), schema)?;
    for b in batches {
        writer.write(b)?;
    }
    writer.finish()?;
    Ok(Bytes::from(writer.into_inner()?))
}

/// Cuts batches into IPC-stream chunks, PySpark's way, as they are pushed.
#[derive(Debug)]
pub(crate) struct Chunker {
    schema: SchemaRef,
    slice_rows: usize,
    max_bytes: u64,
    schema_size: u64,
    current: Vec<RecordBatch>,
    current_size: u64,
}

impl Chunker {
    /// A chunker for `schema` under `conf`.
    pub(crate) fn new(schema: SchemaRef, conf: &LocalRelationConf) -> Result<Self, ArrowError> {
        let schema_size = ipc_stream(&schema, &[])?.len() as u64;
        Ok(Chunker {
            schema,
            slice_rows: conf.slice_rows,
            max_bytes: conf.chunk_bytes.min(conf.batch_of_chunks_bytes),
            schema_size,
            current: Vec::new(),
            current_size: schema_size,
        })
    }

    /// Take `batch`; returns the chunks it completed.
    pub(crate) fn push(&mut self, batch: &RecordBatch) -> Result<Vec<Bytes>, ArrowError> {
        let mut done = Vec::new();
        let mut offset = 0;
        while offset < batch.num_rows() {
            let len = self.slice_rows.min(batch.num_rows() - offset);
            let slice = batch.slice(offset, len);
            offset += len;
            let size = nbytes(&slice);
            if !self.current.is_empty() && self.current_size + size > self.max_bytes {
                done.push(self.flush()?);
            }
            self.current.push(slice);
            self.current_size += size;
        }
        Ok(done)
    }

    /// The last chunk, if any rows are left.
    pub(crate) fn finish(&mut self) -> Result<Option<Bytes>, ArrowError> {
        if self.current.is_empty() {
            return Ok(None);
        }
        self.flush().map(Some)
    }

    fn flush(&mut self) -> Result<Bytes, ArrowError> {
        let chunk = ipc_stream(&self.schema, &self.current)?;
        self.current.clear();
        self.current_size = self.schema_size;
        Ok(chunk)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::Int64Array;
    use arrow_ipc::reader::StreamReader;
    use arrow_schema::{DataType, Field, Schema};

    use super::*;

    fn conf(values: [&str; 5]) -> Result<LocalRelationConf, UploadError> {
        let v: Vec<Option<String>> = values.iter().map(|s| Some((*s).to_owned())).collect();
        LocalRelationConf::parse(&v)
    }

    fn batch(start: i64, rows: i64) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)]));
        let ids = Int64Array::from_iter_values(start..start + rows);
        RecordBatch::try_new(schema, vec![Arc::new(ids)]).unwrap()
    }

    fn read(chunk: &Bytes) -> Vec<i64> {
        let reader = StreamReader::try_new(std::io::Cursor::new(chunk.to_vec()), None).unwrap();
        let mut out = Vec::new();
        for b in reader {
            let b = b.unwrap();
            let ids = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
            out.extend(ids.values().iter().copied());
        }
        out
    }

    #[test]
    fn conf_defaults_suffixes_and_errors() {
        let c = LocalRelationConf::parse(&[]).unwrap();
        assert_eq!(
            c,
            LocalRelationConf {
                cache_threshold: 1 << 20,
                size_limit: 3 << 30,
                slice_rows: 1024,
                chunk_bytes: 16 << 20,
                batch_of_chunks_bytes: 1 << 30
            }
        );
        // Sail's "never cache" is capped at a message the server accepts.
        let c = conf(["2147483647", "1", "1", "1", "1"]).unwrap();
        assert_eq!(c.cache_threshold, MAX_INLINE_BYTES);
        let c = conf(["0", "10b", "7", "100", "50"]).unwrap();
        assert_eq!((c.cache_threshold, c.size_limit, c.slice_rows), (0, 10, 7));
        for (bad, key) in [
            (["x", "1", "1", "1", "1"], CONF_KEYS[0]),
            (["1", "-1", "1", "1", "1"], CONF_KEYS[1]),
            (["1", "1", "0", "1", "1"], CONF_KEYS[2]),
            (["1", "1", "1", "0", "1"], CONF_KEYS[3]),
        ] {
            match conf(bad) {
                Err(UploadError::InvalidConf { key: k, .. }) => assert_eq!(k, key),
                other => panic!("{bad:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn nbytes_counts_the_slice_not_the_shared_buffer() {
        let b = batch(0, 4096);
        assert_eq!(nbytes(&b), 4096 * 8);
        assert_eq!(nbytes(&b.slice(100, 1024)), 1024 * 8);
    }

    #[test]
    fn chunks_follow_pysparks_cut_points_and_carry_every_row_once() {
        // 1024-row slices of 8 KiB; chunk limit 20 KiB + the schema's size:
        // two slices per chunk, the third starts a new one.
        let schema = batch(0, 1).schema();
        let schema_size = ipc_stream(&schema, &[]).unwrap().len() as u64;
        let c = conf([
            "0",
            "1000000000",
            "10000",
            &(20_480 + schema_size).to_string(),
            "1000000000",
        ])
        .unwrap();
        let mut chunker = Chunker::new(schema, &c).unwrap();
        let mut chunks = chunker.push(&batch(0, 3000)).unwrap();
        chunks.extend(chunker.push(&batch(3000, 2000)).unwrap());
        chunks.extend(chunker.finish().unwrap());
        assert!(chunker.finish().unwrap().is_none());
        let sizes: Vec<usize> = chunks.iter().map(|c| read(c).len()).collect();
        // Slices: 1024, 1024, 952 | 1024, 976 (a new batch starts new slices).
        assert_eq!(sizes, vec![2048, 952 + 1024, 976]);
        let all: Vec<i64> = chunks.iter().flat_map(read).collect();
        assert_eq!(all, (0..5000).collect::<Vec<_>>());
    }

    #[test]
    fn a_slice_larger_than_the_limit_is_a_chunk_of_its_own() {
        let schema = batch(0, 1).schema();
        let c = conf(["0", "1000000000", "10000", "1", "1000000000"]).unwrap();
        let mut chunker = Chunker::new(schema, &c).unwrap();
        let mut chunks = chunker.push(&batch(0, 2500)).unwrap();
        chunks.extend(chunker.finish().unwrap());
        assert_eq!(
            chunks.iter().map(|c| read(c).len()).collect::<Vec<_>>(),
            [1024, 1024, 452]
        );
    }
}
