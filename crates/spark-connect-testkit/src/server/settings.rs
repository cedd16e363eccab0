//! The server's settings and their defaults: what a [`TestServerBuilder`]
//! collects and every part of a running server reads. Plain data, below
//! everything else in the server, so that none of them imports another to
//! reach it.
//!
//! [`TestServerBuilder`]: super::builder::TestServerBuilder

use std::net::SocketAddr;
use std::time::Duration;

use super::tokens::TokenRotation;

/// The Spark version `AnalyzePlan.spark_version` reports by default.
pub const DEFAULT_SPARK_VERSION: &str = "4.3.0";

/// Default of [`TestServerBuilder::retry_buffer_bytes`](crate::TestServerBuilder::retry_buffer_bytes): 10 MiB, the real
/// server's `observerRetryBufferSize`.
pub const DEFAULT_RETRY_BUFFER_BYTES: usize = 10 * 1024 * 1024;

/// Default of [`TestServerBuilder::rows_per_batch`](crate::TestServerBuilder::rows_per_batch).
pub const DEFAULT_ROWS_PER_BATCH: u64 = 8192;

/// Default of [`TestServerBuilder::max_stream_duration`](crate::TestServerBuilder::max_stream_duration): 2 minutes, the
/// real server's `senderMaxStreamDuration`.
pub const DEFAULT_MAX_STREAM_DURATION: Duration = Duration::from_secs(120);

/// How many produced-but-unsent responses an execution may run ahead of its
/// consumer. The real server produces without bound; this cap only keeps a
/// huge `range` from filling memory when nobody reads it.
pub(crate) const PRODUCER_WINDOW: u64 = 256;

/// Default of [`TestServerBuilder::max_chunk_bytes`](crate::TestServerBuilder::max_chunk_bytes): 4 MiB.
pub const DEFAULT_MAX_CHUNK_BYTES: usize = 4 * 1024 * 1024;

/// The gRPC message-size limit of the real server (128 MiB).
pub(crate) const MAX_MESSAGE_BYTES: usize = 128 * 1024 * 1024;

#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) listen_addr: SocketAddr,
    pub(crate) retry_buffer_bytes: usize,
    pub(crate) max_responses_per_stream: Option<u64>,
    pub(crate) max_bytes_per_stream: Option<u64>,
    pub(crate) max_stream_duration: Option<Duration>,
    pub(crate) rows_per_batch: u64,
    pub(crate) batch_delay: Duration,
    pub(crate) execution_progress: bool,
    pub(crate) schema_response: bool,
    pub(crate) max_chunk_bytes: usize,
    pub(crate) required_token: Option<String>,
    pub(crate) token_rotation: Option<TokenRotation>,
    pub(crate) spark_version: String,
    /// The server's SQL conf defaults (`--conf`): every session starts with them.
    pub(crate) default_conf: std::collections::BTreeMap<String, String>,
    /// Read `Plan.compressed_operation` (else: `CANNOT_PARSE`).
    pub(crate) compressed_plans: bool,
    /// Session confs a Config `Set` is refused for (`CANNOT_MODIFY_CONFIG`).
    pub(crate) refused_confs: std::collections::BTreeSet<String>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            listen_addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            retry_buffer_bytes: DEFAULT_RETRY_BUFFER_BYTES,
            max_responses_per_stream: None,
            max_bytes_per_stream: None,
            max_stream_duration: Some(DEFAULT_MAX_STREAM_DURATION),
            rows_per_batch: DEFAULT_ROWS_PER_BATCH,
            refused_confs: Default::default(),
            batch_delay: Duration::ZERO,
            execution_progress: false,
            schema_response: true,
            max_chunk_bytes: DEFAULT_MAX_CHUNK_BYTES,
            required_token: None,
            token_rotation: None,
            spark_version: DEFAULT_SPARK_VERSION.to_owned(),
            default_conf: Default::default(),
            compressed_plans: true,
        }
    }
}
