//! [`TestServerBuilder`]: the settings of a [`TestServer`] before it starts.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio_stream::Stream;

use super::handle::TestServer;
use super::settings::Settings;

/// Configures and starts a [`TestServer`]. Get one from
/// [`TestServer::builder`].
#[derive(Debug, Clone, Default)]
pub struct TestServerBuilder {
    settings: Settings,
}

impl TestServerBuilder {
    /// Listen on this address instead of `127.0.0.1:0` (an ephemeral
    /// loopback port). [`TestServer::addr`] tells the port bound for port 0.
    pub fn listen_addr(mut self, addr: SocketAddr) -> Self {
        self.settings.listen_addr = addr;
        self
    }

    /// Bytes of already-sent responses kept for reattach, behind the current
    /// one (default [`DEFAULT_RETRY_BUFFER_BYTES`](crate::DEFAULT_RETRY_BUFFER_BYTES)). 0 keeps none, so a
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
    /// `Duration::MAX`). Default [`DEFAULT_MAX_STREAM_DURATION`](crate::DEFAULT_MAX_STREAM_DURATION).
    pub fn max_stream_duration(mut self, duration: Option<Duration>) -> Self {
        self.settings.max_stream_duration = duration;
        self
    }

    /// The most rows per `ArrowBatch` response (default [`DEFAULT_ROWS_PER_BATCH`](crate::DEFAULT_ROWS_PER_BATCH);
    /// 0 is treated as 1): the server's own cap, as Spark's
    /// `spark.connect.grpc.arrow.maxBatchSize` caps a batch's bytes. A
    /// session's `spark.sql.execution.arrow.maxRecordsPerBatch`, when set
    /// and positive, makes batches smaller still (never larger).
    pub fn rows_per_batch(mut self, rows: u64) -> Self {
        self.settings.rows_per_batch = rows.max(1);
        self
    }

    /// Refuse a Config `Set` of session conf `key` with Spark's
    /// `CANNOT_MODIFY_CONFIG` (as Spark does for a static conf, and as a
    /// server without the conf might): the whole `Set` fails, nothing of
    /// it is applied.
    pub fn refuse_conf(mut self, key: impl Into<String>) -> Self {
        self.settings.refused_confs.insert(key.into());
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
    /// 1 KiB) wins. Default [`DEFAULT_MAX_CHUNK_BYTES`](crate::DEFAULT_MAX_CHUNK_BYTES).
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

    /// Accept bearer tokens that expire: one token at a time, rotating by
    /// calls, by time or on [`TestServer::rotate_token`] (see
    /// [`TokenRotation`](crate::TokenRotation)). Replaces
    /// [`required_token`](Self::required_token).
    pub fn token_rotation(mut self, rotation: crate::TokenRotation) -> Self {
        self.settings.token_rotation = Some(rotation);
        self
    }

    /// The version `AnalyzePlan.spark_version` reports (default
    /// [`DEFAULT_SPARK_VERSION`](crate::DEFAULT_SPARK_VERSION)).
    pub fn spark_version(mut self, version: impl Into<String>) -> Self {
        self.settings.spark_version = version.into();
        self
    }

    /// A server default of a session conf, as Spark's `--conf key=value`:
    /// every new session starts with it, and the `Config` RPC reads and
    /// overrides it per session. The server honours
    /// `spark.sql.execution.arrow.compression.codec` (`zstd`, `lz4`,
    /// `none`): result batches are compressed Arrow IPC, as Spark 4.1+;
    /// and `spark.sql.execution.arrow.maxRecordsPerBatch` (see
    /// [`rows_per_batch`](Self::rows_per_batch)).
    pub fn conf(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.settings.default_conf.insert(key.into(), value.into());
        self
    }

    /// Whether the server reads compressed plans (`Plan.compressed_operation`,
    /// SPARK-54194; default on). Off, it refuses them with
    /// `CONNECT_INVALID_PLAN.CANNOT_PARSE`, as a server that advertises plan
    /// compression but cannot read what a client sends. Plan compression
    /// itself is turned on as in Spark, by the confs
    /// `spark.connect.session.planCompression.threshold` (bytes) and
    /// `spark.connect.session.planCompression.defaultAlgorithm` (`ZSTD`),
    /// e.g. with [`conf`](Self::conf).
    pub fn compressed_plans(mut self, readable: bool) -> Self {
        self.settings.compressed_plans = readable;
        self
    }

    /// Binds the listen address (default `127.0.0.1:0`) and starts serving
    /// on the current tokio runtime.
    pub async fn start(self) -> io::Result<TestServer> {
        TestServer::start_with(self.settings).await
    }

    /// Serves on the connections `incoming` yields instead of binding a
    /// socket, on the current tokio runtime: for a transport this crate
    /// does not open itself, such as a simulated network (turmoil's
    /// `TcpListener`, its accepted streams forwarded as a stream). `addr` is
    /// what [`TestServer::addr`] and the endpoint strings report; the
    /// [`listen_addr`](Self::listen_addr) setting is not used.
    ///
    /// The server and its fault script work as over loopback, but a reset
    /// ([`Fault::reset_connection`](crate::Fault::reset_connection),
    /// [`Fault::lose_request`](crate::Fault::lose_request),
    /// [`Fault::restart`](crate::Fault::restart),
    /// [`TestServer::reset_connections`]) can only drop the stream: it is
    /// then whatever the transport does on a close (turmoil: an RST when
    /// data is left unread, a FIN otherwise), not a TCP RST set up with
    /// `SO_LINGER 0`.
    ///
    /// ```
    /// use spark_connect_testkit::TestServer;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// // Here a tokio listener stands in for the caller's transport.
    /// let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    /// let addr = listener.local_addr()?;
    /// let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
    /// let server = TestServer::builder().serve_incoming(addr, incoming);
    /// assert_eq!(server.addr(), addr);
    /// server.shutdown().await;
    /// # Ok(())
    /// # }
    /// ```
    pub fn serve_incoming<I, IO, IE>(self, addr: SocketAddr, incoming: I) -> TestServer
    where
        I: Stream<Item = Result<IO, IE>> + Send + 'static,
        IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
        IE: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        TestServer::serve_incoming_with(self.settings, addr, incoming)
    }
}

impl TestServer {
    /// A builder to change the defaults.
    pub fn builder() -> TestServerBuilder {
        TestServerBuilder::default()
    }
}
