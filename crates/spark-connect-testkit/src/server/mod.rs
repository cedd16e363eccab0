//! The embedded Spark Connect server: sessions, reattachable executions with
//! a retry buffer, releases, graceful stream ends and the fault script.
//!
//! One file per concern:
//!
//! * `service`: the gRPC service, its per-call bookkeeping (counters, auth,
//!   the fault script) and the RPC dispatch;
//! * `executions`: the ExecutePlan, ReattachExecute and ReleaseExecute RPCs;
//!   `buffer`: an execution and its response buffer; `producer`: the task
//!   that runs a plan; `sender`: the task that streams an execution to one
//!   attached client;
//! * `session_rpcs`: AnalyzePlan, Config, Interrupt, ReleaseSession and
//!   FetchErrorDetails;
//! * `artifacts`: AddArtifacts and ArtifactStatus; `upload`: the rules of one
//!   upload stream (pure); `store`: a session's artifacts and how a finished
//!   upload enters them (pure);
//! * `state`: the state shared by all of them (sessions, executions, errors);
//! * `handle`: [`TestServer`], the public handle, and what it reports.

use std::io;
use std::time::Duration;

mod artifacts;
mod buffer;
mod executions;
mod handle;
mod producer;
mod sender;
mod service;
mod session_rpcs;
mod state;
mod store;
mod upload;

pub use handle::{BufferStats, CallCounts, TestServer};
pub use state::{RecordedCall, UploadCall};
pub(crate) use store::CACHE_PREFIX;

/// The Spark version `AnalyzePlan.spark_version` reports by default.
pub const DEFAULT_SPARK_VERSION: &str = "4.3.0";

/// Default of [`TestServerBuilder::retry_buffer_bytes`]: 10 MiB, the real
/// server's `observerRetryBufferSize`.
pub const DEFAULT_RETRY_BUFFER_BYTES: usize = 10 * 1024 * 1024;

/// Default of [`TestServerBuilder::rows_per_batch`].
pub const DEFAULT_ROWS_PER_BATCH: u64 = 8192;

/// Default of [`TestServerBuilder::max_stream_duration`]: 2 minutes, the
/// real server's `senderMaxStreamDuration`.
pub const DEFAULT_MAX_STREAM_DURATION: Duration = Duration::from_secs(120);

/// How many produced-but-unsent responses an execution may run ahead of its
/// consumer. The real server produces without bound; this cap only keeps a
/// huge `range` from filling memory when nobody reads it.
const PRODUCER_WINDOW: u64 = 256;

/// Default of [`TestServerBuilder::max_chunk_bytes`]: 4 MiB.
pub const DEFAULT_MAX_CHUNK_BYTES: usize = 4 * 1024 * 1024;

/// The gRPC message-size limit of the real server (128 MiB).
const MAX_MESSAGE_BYTES: usize = 128 * 1024 * 1024;

#[derive(Debug, Clone)]
struct Settings {
    retry_buffer_bytes: usize,
    max_responses_per_stream: Option<u64>,
    max_bytes_per_stream: Option<u64>,
    max_stream_duration: Option<Duration>,
    rows_per_batch: u64,
    batch_delay: Duration,
    execution_progress: bool,
    schema_response: bool,
    max_chunk_bytes: usize,
    required_token: Option<String>,
    spark_version: String,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            retry_buffer_bytes: DEFAULT_RETRY_BUFFER_BYTES,
            max_responses_per_stream: None,
            max_bytes_per_stream: None,
            max_stream_duration: Some(DEFAULT_MAX_STREAM_DURATION),
            rows_per_batch: DEFAULT_ROWS_PER_BATCH,
            batch_delay: Duration::ZERO,
            execution_progress: false,
            schema_response: true,
            max_chunk_bytes: DEFAULT_MAX_CHUNK_BYTES,
            required_token: None,
            spark_version: DEFAULT_SPARK_VERSION.to_owned(),
        }
    }
}

/// Configures and starts a [`TestServer`]. Get one from
/// [`TestServer::builder`].
#[derive(Debug, Clone, Default)]
pub struct TestServerBuilder {
    settings: Settings,
}

impl TestServerBuilder {
    /// Bytes of already-sent responses kept for reattach, behind the current
    /// one (default [`DEFAULT_RETRY_BUFFER_BYTES`]). 0 keeps none, so a
    /// reattach from anything but the last response id fails with
    /// `INVALID_CURSOR.POSITION_NOT_AVAILABLE`.
    pub fn retry_buffer_bytes(mut self, bytes: usize) -> Self {
        self.settings.retry_buffer_bytes = bytes;
        self
    }

    /// End each reattachable stream gracefully (status OK, no
    /// `ResultComplete`) after this many responses. Default: unlimited.
    pub fn max_responses_per_stream(mut self, n: u64) -> Self {
        self.settings.max_responses_per_stream = Some(n.max(1));
        self
    }

    /// End each reattachable stream gracefully once more than this many
    /// bytes were sent on it (the response crossing the limit is still sent,
    /// like Spark's `senderMaxStreamSize`). Default: unlimited.
    pub fn max_bytes_per_stream(mut self, bytes: u64) -> Self {
        self.settings.max_bytes_per_stream = Some(bytes);
        self
    }

    /// End each reattachable stream gracefully after this long (`None`:
    /// never; so is a duration too large for the clock, such as
    /// `Duration::MAX`). Default [`DEFAULT_MAX_STREAM_DURATION`].
    pub fn max_stream_duration(mut self, duration: Option<Duration>) -> Self {
        self.settings.max_stream_duration = duration;
        self
    }

    /// Rows per `ArrowBatch` response (default [`DEFAULT_ROWS_PER_BATCH`];
    /// 0 is treated as 1).
    pub fn rows_per_batch(mut self, rows: u64) -> Self {
        self.settings.rows_per_batch = rows.max(1);
        self
    }

    /// Pause the execution this long after producing each batch, to keep it
    /// running while a test interrupts or releases it. Default: none.
    pub fn batch_delay(mut self, delay: Duration) -> Self {
        self.settings.batch_delay = delay;
        self
    }

    /// Send an `ExecutionProgress` response before every `ArrowBatch`, as
    /// the real server does every `spark.connect.progress.reportInterval`,
    /// and one before a temporary view command ends. Clients must skip
    /// them. Default: off.
    pub fn execution_progress(mut self, on: bool) -> Self {
        self.settings.execution_progress = on;
        self
    }

    /// Send the result's schema (Spark's `DataType`) in a response of its
    /// own before the first batch, as the real server does. Default: on.
    pub fn schema_response(mut self, on: bool) -> Self {
        self.settings.schema_response = on;
        self
    }

    /// The largest Arrow chunk sent to a client that allows result chunking
    /// (`ResultChunkingOptions`); a client's smaller preferred size (at least
    /// 1 KiB) wins. Default [`DEFAULT_MAX_CHUNK_BYTES`].
    pub fn max_chunk_bytes(mut self, bytes: usize) -> Self {
        self.settings.max_chunk_bytes = bytes.max(1024);
        self
    }

    /// Require `authorization: Bearer <token>` on every RPC
    /// (`UNAUTHENTICATED` otherwise), like `spark.connect.authenticate.token`.
    pub fn required_token(mut self, token: impl Into<String>) -> Self {
        self.settings.required_token = Some(token.into());
        self
    }

    /// The version `AnalyzePlan.spark_version` reports (default
    /// [`DEFAULT_SPARK_VERSION`]).
    pub fn spark_version(mut self, version: impl Into<String>) -> Self {
        self.settings.spark_version = version.into();
        self
    }

    /// Binds `127.0.0.1:0` and starts serving on the current tokio runtime.
    pub async fn start(self) -> io::Result<TestServer> {
        TestServer::start_with(self.settings).await
    }
}
