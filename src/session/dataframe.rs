//! [`SparkSession::create_dataframe`]: Arrow record batches in, a
//! queryable [`DataFrame`] out.
//!
//! Users send data as well as read it: a lookup table, a batch of events,
//! a test fixture. PySpark's `createDataFrame` inlines small data in the
//! plan and uploads larger data first as cached artifacts; this is the same
//! for Rust, with the upload under the retry policy and exactly once
//! ([`crate::local_data::upload`]).
//!
//! * Data smaller than the server's `spark.sql.session.localRelationCacheThreshold`
//!   (in memory, as pyarrow's `nbytes`) becomes a `LocalRelation`: one Arrow
//!   IPC stream inside the plan.
//! * Data at or above it is cut into IPC chunks ([`crate::local_data::chunks`]),
//!   uploaded as `cache/<sha256>` artifacts, and referenced by a
//!   `ChunkedCachedLocalRelation` (the data hashes, no schema hash: Spark
//!   takes the schema from the Arrow stream).
//!
//! The batches are read lazily from the iterator. Memory held beyond the
//! caller's batches: the batches read before the threshold is reached (at
//! most the threshold, 1 MiB by default), one chunk being built
//! (≤ `localRelationChunkSizeBytes`, 16 MiB by default), and one upload
//! group of serialized chunks kept until the server acknowledges it:
//! at most [`UPLOAD_GROUP_BYTES`] (64 MiB) plus one chunk.

use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use bytes::Bytes;

use super::arrow_stream::ArrowStream;
use super::error::SparkError;
use super::generation::Generation;
use super::spark::SparkSession;
use crate::local_data::chunks::{CONF_KEYS, Chunker, LocalRelationConf, ipc_stream, nbytes};
use crate::local_data::upload::{UploadError, UploadStats};
use crate::proto::{self, Relation, relation::RelType};

/// The most serialized bytes sent in one `AddArtifacts` stream, and kept
/// in memory until the server acknowledges them: the smaller of this and
/// the server's `localRelationBatchOfChunksSizeBytes` (1 GiB by default,
/// which PySpark holds in memory). A cut re-sends at most one group.
pub(crate) const UPLOAD_GROUP_BYTES: u64 = 64 << 20;

/// Local data as a relation of a session, ready to query.
///
/// Made by [`SparkSession::create_dataframe`]. Cheap to clone; querying it
/// does not upload anything again (cached data stays on the server for the
/// session's lifetime).
#[derive(Debug, Clone)]
pub struct DataFrame {
    session: SparkSession,
    relation: Relation,
    stats: UploadStats,
}

impl DataFrame {
    /// The relation: a `LocalRelation` or a `ChunkedCachedLocalRelation`,
    /// usable in any plan sent to the same session.
    pub fn relation(&self) -> &Relation {
        &self.relation
    }
    /// The session the data belongs to.
    pub(super) fn session(&self) -> &SparkSession {
        &self.session
    }
    /// What the upload did (all zero when the data went inline).
    pub fn upload_stats(&self) -> UploadStats {
        self.stats
    }
    /// Whether the data was uploaded as cached artifacts (not inlined).
    pub fn is_cached(&self) -> bool {
        matches!(
            self.relation.rel_type,
            Some(RelType::ChunkedCachedLocalRelation(_))
        )
    }
    /// Stream the rows (lazy, as [`SparkSession::relation`]).
    pub fn stream(&self) -> Result<ArrowStream, SparkError> {
        self.session.relation(self.relation.clone())
    }
    /// Read every row back.
    pub async fn collect(&self) -> Result<Vec<RecordBatch>, SparkError> {
        self.stream()?.collect().await
    }
}

impl SparkSession {
    /// Arrow record batches as a [`DataFrame`] (PySpark's `createDataFrame`
    /// from an Arrow table).
    ///
    /// Reads the server's local-relation limits (one Config RPC, as
    /// PySpark does on every call, so a changed limit applies at once).
    /// Below `spark.sql.session.localRelationCacheThreshold` (capped at
    /// 64 MiB, as a server may report a threshold above its own message
    /// limit: Sail reports 2 GiB and accepts 128 MiB) the data goes
    /// inline as a `LocalRelation`; at or above it, it is uploaded as
    /// cached artifacts under the retry policy, exactly once, before this
    /// returns. Batches are read lazily; held in memory besides them: the
    /// batches read before the threshold is reached, one chunk being built
    /// and one upload group (64 MiB). Every batch must have `schema`'s fields
    /// ([`UploadError::SchemaMismatch`] otherwise).
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::sync::Arc;
    /// use arrow_array::{Int64Array, RecordBatch};
    /// use arrow_schema::{DataType, Field, Schema};
    /// use spark_connect_retry::session::SparkSession;
    ///
    /// let spark = SparkSession::connect("sc://localhost:15002")?;
    /// let schema = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)]));
    /// let batches = (0..10).map(|k| {
    ///     let ids = Int64Array::from_iter_values(k * 100_000..(k + 1) * 100_000);
    ///     RecordBatch::try_new(schema.clone(), vec![Arc::new(ids)]).unwrap()
    /// });
    /// // 8 MB: over the 1 MiB default threshold, so uploaded as cached artifacts.
    /// let df = spark.create_dataframe(schema.clone(), batches).await?;
    /// assert!(df.is_cached());
    /// assert_eq!(df.upload_stats().retries, 0);
    /// let rows: usize = df.collect().await?.iter().map(|b| b.num_rows()).sum();
    /// assert_eq!(rows, 1_000_000);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn create_dataframe<I>(
        &self,
        schema: SchemaRef,
        batches: I,
    ) -> Result<DataFrame, SparkError>
    where
        I: IntoIterator<Item = RecordBatch>,
    {
        self.check_open()?;
        let conf = LocalRelationConf::parse(&self.config_get(&CONF_KEYS).await?)?;
        let mut batches = batches.into_iter().enumerate();
        let mut head = Vec::new();
        let (mut size, mut rows) = (0, 0);
        // Read until the threshold is reached with rows to cut, or the end.
        let exhausted = loop {
            if size >= conf.cache_threshold && rows > 0 {
                break false;
            }
            let Some((index, batch)) = batches.next() else {
                break true;
            };
            check_schema(&schema, index, &batch)?;
            size += nbytes(&batch);
            rows += batch.num_rows();
            head.push(batch);
        };
        if exhausted {
            // Below the threshold, or no rows at all (PySpark inlines those too).
            let data = ipc_stream(&schema, &head).map_err(UploadError::Arrow)?;
            return Ok(self.dataframe(
                RelType::LocalRelation(proto::LocalRelation {
                    data: Some(data.to_vec()),
                    schema: None,
                }),
                UploadStats::default(),
            ));
        }
        // Every group of this relation goes to one server-side session.
        let generation = self.generation().await?;
        let mut upload = Upload::new(self, generation, schema.clone(), &conf)?;
        for batch in head.iter() {
            upload.push(batch).await?;
        }
        drop(head);
        for (index, batch) in batches {
            check_schema(&schema, index, &batch)?;
            upload.push(&batch).await?;
        }
        let (hashes, stats) = upload.finish().await?;
        Ok(self.dataframe(
            RelType::ChunkedCachedLocalRelation(proto::ChunkedCachedLocalRelation {
                data_hashes: hashes,
                schema_hash: None,
            }),
            stats,
        ))
    }

    fn dataframe(&self, rel: RelType, stats: UploadStats) -> DataFrame {
        DataFrame {
            session: self.clone(),
            relation: Relation {
                common: None,
                rel_type: Some(rel),
            },
            stats,
        }
    }
}

fn check_schema(schema: &SchemaRef, index: usize, batch: &RecordBatch) -> Result<(), UploadError> {
    if batch.schema().fields() == schema.fields() {
        return Ok(());
    }
    Err(UploadError::SchemaMismatch {
        index,
        expected: schema.to_string(),
        got: batch.schema().to_string(),
    })
}

/// The cached path: chunks grouped PySpark's way, each group uploaded
/// exactly once before the next is built.
struct Upload<'a> {
    session: &'a SparkSession,
    generation: Arc<Generation>,
    chunker: Chunker,
    size_limit: u64,
    group_limit: u64,
    group: Vec<Bytes>,
    group_size: u64,
    total: u64,
    hashes: Vec<String>,
    stats: UploadStats,
}

impl<'a> Upload<'a> {
    fn new(
        session: &'a SparkSession,
        generation: Arc<Generation>,
        schema: SchemaRef,
        conf: &LocalRelationConf,
    ) -> Result<Self, UploadError> {
        Ok(Upload {
            session,
            generation,
            chunker: Chunker::new(schema, conf).map_err(UploadError::Arrow)?,
            size_limit: conf.size_limit,
            group_limit: conf.batch_of_chunks_bytes.min(UPLOAD_GROUP_BYTES),
            group: Vec::new(),
            group_size: 0,
            total: 0,
            hashes: Vec::new(),
            stats: UploadStats::default(),
        })
    }

    async fn push(&mut self, batch: &RecordBatch) -> Result<(), SparkError> {
        for chunk in self.chunker.push(batch).map_err(UploadError::Arrow)? {
            self.add(chunk).await?;
        }
        Ok(())
    }

    /// PySpark's `_cache_local_relation`: the size limit on the running
    /// total, a group sent when the next chunk would take it over its limit.
    async fn add(&mut self, chunk: Bytes) -> Result<(), SparkError> {
        let len = chunk.len() as u64;
        self.total += len;
        if self.total > self.size_limit {
            return Err(UploadError::SizeLimitExceeded {
                actual: self.total,
                limit: self.size_limit,
            }
            .into());
        }
        if !self.group.is_empty() && self.group_size + len > self.group_limit {
            self.send().await?;
        }
        self.group.push(chunk);
        self.group_size += len;
        Ok(())
    }

    async fn send(&mut self) -> Result<(), SparkError> {
        let group = std::mem::take(&mut self.group);
        self.group_size = 0;
        let hashes = self
            .session
            .cache_blobs(&self.generation, group, &mut self.stats)
            .await?;
        self.hashes.extend(hashes);
        Ok(())
    }

    async fn finish(mut self) -> Result<(Vec<String>, UploadStats), SparkError> {
        if let Some(chunk) = self.chunker.finish().map_err(UploadError::Arrow)? {
            self.add(chunk).await?;
        }
        if !self.group.is_empty() {
            self.send().await?;
        }
        let mut distinct = self.hashes.clone();
        distinct.sort();
        distinct.dedup();
        self.stats.artifacts = distinct.len() as u64;
        Ok((self.hashes, self.stats))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Compiles only if `create_dataframe`'s future can be spawned.
    #[allow(dead_code)]
    fn create_dataframe_is_send(s: &SparkSession, schema: SchemaRef, b: Vec<RecordBatch>) {
        fn send<T: Send>(_: T) {}
        send(s.create_dataframe(schema, b));
    }

    #[test]
    fn a_batch_with_other_fields_is_named() {
        use std::sync::Arc;
        let a: SchemaRef = Arc::new(arrow_schema::Schema::new(vec![arrow_schema::Field::new(
            "id",
            arrow_schema::DataType::Int64,
            false,
        )]));
        let batch = RecordBatch::try_new(
            a.clone(),
            vec![Arc::new(arrow_array::Int64Array::from(vec![1]))],
        )
        .unwrap();
        assert!(check_schema(&a, 0, &batch).is_ok());
        let b: SchemaRef = Arc::new(arrow_schema::Schema::new(vec![arrow_schema::Field::new(
            "id",
            arrow_schema::DataType::Int64,
            true,
        )]));
        match check_schema(&b, 3, &batch) {
            Err(UploadError::SchemaMismatch { index: 3, .. }) => {}
            other => panic!("{other:?}"),
        }
    }
}
