//! [`UploadError`]: what local data or its upload can fail with, apart
//! from a server status. A leaf: the rules in `core` and the session's
//! [`SparkError`](crate::session::SparkError) both name it.

/// What went wrong with local data or its upload, before or besides any
/// server status.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum UploadError {
    /// The server reports that an artifact's bytes did not match their CRC.
    #[error(
        "the server reports a CRC mismatch for artifact {name}: the data was corrupted on the way; not retried"
    )]
    CrcMismatch {
        /// The artifact, `cache/<sha256>`.
        name: String,
    },
    /// The server's answer does not summarise an artifact that was sent.
    #[error("AddArtifacts answer has no summary for artifact {name}")]
    MissingSummary {
        /// The artifact sent.
        name: String,
    },
    /// The server's answer summarises an artifact that was not sent.
    #[error("AddArtifacts answer summarises artifact {name}, which was not sent")]
    UnexpectedSummary {
        /// The name in the answer.
        name: String,
    },
    /// A batch's schema differs from the schema given.
    #[error("batch {index} has schema {got}, expected {expected}")]
    SchemaMismatch {
        /// The batch's position in the input.
        index: usize,
        /// The schema given to `create_dataframe`.
        expected: String,
        /// The batch's schema.
        got: String,
    },
    /// The serialized data exceeds `spark.sql.session.localRelationSizeLimit`
    /// (PySpark's `LOCAL_RELATION_SIZE_LIMIT_EXCEEDED`).
    #[error(
        "[LOCAL_RELATION_SIZE_LIMIT_EXCEEDED] local data of at least {actual} bytes exceeds spark.sql.session.localRelationSizeLimit = {limit}"
    )]
    SizeLimitExceeded {
        /// Bytes serialized so far.
        actual: u64,
        /// The server's limit.
        limit: u64,
    },
    /// A server configuration value this client needs is not usable.
    #[error("server configuration {key} = {value:?} is not usable: {reason}")]
    InvalidConf {
        /// The configuration key.
        key: &'static str,
        /// The value the server gave.
        value: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The batches could not be written as Arrow IPC.
    #[error("cannot serialize the batches as Arrow IPC: {0}")]
    Arrow(#[source] arrow_schema::ArrowError),
}
