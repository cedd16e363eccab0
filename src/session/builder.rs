//! [`SparkSessionBuilder`]: every option of a session, checked once, at
//! [`build`](SparkSessionBuilder::build).
//!
//! A bad value (a zero or hundred-year timeout, a tiny chunk size) is a
//! typed error naming the option when the session is built, never a panic
//! or a surprise on the first query.

use std::sync::Arc;
use std::time::Duration;

use tonic::service::interceptor::InterceptedService;
use tower::ServiceExt;
use tower::util::BoxCloneSyncService;

use super::error::SparkError;
use super::options::{BuilderConfigs, Options};
use super::spark::SparkSession;
use crate::connect::channel::ChannelError;
use crate::connect::channel::{AuthInterceptor, ChannelBuilder, DEFAULT_CONNECT_TIMEOUT};
use crate::connect::conn_string::ConnectionString;
use crate::connect::egress::EgressProxy;
use crate::connect::flow_control::Http2FlowControl;
use crate::connect::result_batch_rows::ResultBatchRows;
use crate::connect::result_compression::ResultCompression;
use crate::connector::Connector;
use crate::deadlines::{RpcDeadlines, check_timeout};
use crate::meters::SessionMeters;
use crate::policy::RetryPolicy;
use crate::reattach::DEFAULT_IDLE_TIMEOUT;
use crate::reconnect::ReconnectingChannel;
use crate::retrying::PySparkRetrying;
use crate::retrying::Retrying;
use crate::token::StaticToken;
use crate::token::cache::Credentials;
use crate::token::service::TokenService;
use crate::transport::{GrpcChannel, SparkClient, grpc_channel};

/// How long [`SparkSession::close`] waits for background releases (PySpark: 10 s).
pub(crate) const DEFAULT_RELEASE_WAIT: Duration = Duration::from_secs(10);

/// The smallest preferred Arrow chunk the server accepts (PySpark: 1 KiB).
pub(crate) const MIN_ARROW_CHUNK_SIZE: usize = 1024;

/// Room left in a gRPC message for the response around an Arrow chunk.
const CHUNK_HEADROOM: usize = 64 * 1024;

/// Builds a [`SparkSession`].
///
/// The session needs a tokio runtime (any flavour): [`build`](Self::build)
/// only prepares a lazily connecting channel, but RPCs, background releases
/// and the interrupt sent when a stream is dropped run on the current
/// runtime.
#[derive(Debug, Default)]
#[must_use]
pub struct SparkSessionBuilder {
    remote: Option<String>,
    config: Option<ConnectionString>,
    retrying: Option<Retrying>,
    deadlines: Option<RpcDeadlines>,
    /// `None`: not set, the default applies; `Some(None)`: turned off.
    idle_timeout: Option<Option<Duration>>,
    release_wait: Option<Duration>,
    connect_timeout: Option<Duration>,
    flow_control: Option<Http2FlowControl>,
    channel: Option<GrpcChannel>,
    connector: Option<Connector>,
    egress: EgressProxy,
    arrow_chunking: Option<bool>,
    preferred_arrow_chunk_size: Option<usize>,
    interrupt_on_drop: bool,
    configs: BuilderConfigs,
    result_compression: Option<ResultCompression>,
    result_batch_rows: Option<ResultBatchRows>,
    renew_stale_session: bool,
    resume_queries: bool,
    /// The builder's token provider (Debug: its name only).
    credentials: Option<Credentials>,
    #[cfg(feature = "tls")]
    tls: crate::connect::tls::TlsSettings,
    #[cfg(feature = "otel")]
    meter: Option<opentelemetry::metrics::Meter>,
}

impl SparkSessionBuilder {
    /// Connect to this `sc://` URL (default: `SPARK_REMOTE`).
    pub fn remote(mut self, url: impl Into<String>) -> Self {
        self.remote = Some(url.into());
        self
    }
    /// Use an already parsed connection string.
    pub fn connection(mut self, config: ConnectionString) -> Self {
        self.config = Some(config);
        self
    }
    /// The retry policies, in order (default: one PySpark `DefaultPolicy`).
    pub fn retry_policies(mut self, policies: Vec<RetryPolicy>) -> Self {
        self.retrying = Some(Retrying::pyspark_with(policies));
        self
    }
    /// A fully configured retry loop (policies, sleeper, clock, seed).
    pub fn retrying(mut self, retrying: Retrying) -> Self {
        self.retrying = Some(retrying);
        self
    }
    /// Per-RPC deadlines (default: PySpark 4.3's).
    pub fn deadlines(mut self, deadlines: RpcDeadlines) -> Self {
        self.deadlines = Some(deadlines);
        self
    }
    /// Stall detection: reattach, over a fresh connection, when a result
    /// stream is silent for this long (default
    /// 10 s, as [`ReattachOptions`](crate::reattach::ReattachOptions)'s; `None` turns it off).
    pub fn idle_timeout(mut self, idle: Option<Duration>) -> Self {
        self.idle_timeout = Some(idle);
        self
    }
    /// How long [`SparkSession::close`] waits for background releases
    /// (default 10 s).
    pub fn release_wait(mut self, wait: Duration) -> Self {
        self.release_wait = Some(wait);
        self
    }
    /// How long to wait for a TCP (and TLS) connection (default 10 s).
    /// Ignored with [`channel`](Self::channel), which brings its own.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = Some(timeout);
        self
    }
    /// HTTP/2 flow control of the session's connection, in place of the
    /// connection string's `grpc_initial_*_window_size` / `grpc_http2_bdp_probe`
    /// (default: fixed windows of 16 MiB per stream and 32 MiB per connection,
    /// so a long round trip does not throttle results). The client buffers at
    /// most the window, and only while the application does not read. Checked
    /// at [`build`](Self::build). Ignored with [`channel`](Self::channel).
    ///
    /// ```
    /// use spark_connect_retry::session::{Http2FlowControl, SparkError, SparkSession};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// // hyper's own defaults (2 MiB / 5 MiB): less memory, slower on long round trips.
    /// let small = Http2FlowControl::Fixed { stream_window: 2 << 20, connection_window: 5 << 20 };
    /// assert!(SparkSession::builder().remote("sc://localhost").http2_flow_control(small).build().is_ok());
    /// let inverted = Http2FlowControl::Fixed { stream_window: 4 << 20, connection_window: 1 << 20 };
    /// let err = SparkSession::builder().remote("sc://localhost").http2_flow_control(inverted).build();
    /// assert!(matches!(err, Err(SparkError::InvalidOption { field: "http2_flow_control", .. })));
    /// # }
    /// ```
    pub fn http2_flow_control(mut self, flow_control: Http2FlowControl) -> Self {
        self.flow_control = Some(flow_control);
        self
    }
    /// Let the server split an Arrow batch over several responses (default
    /// on, as in PySpark), so a row larger than one gRPC message still
    /// arrives. Chunks are reassembled before decoding.
    pub fn arrow_chunking(mut self, enabled: bool) -> Self {
        self.arrow_chunking = Some(enabled);
        self
    }
    /// The chunk size to ask the server for, in bytes (at least
    /// 1 KiB). By default the client's maximum message
    /// size less 64 KiB, so every chunk fits in a message; the server uses
    /// its own maximum (`spark.connect.session.resultChunking.maxChunkSize`)
    /// when that is smaller.
    pub fn preferred_arrow_chunk_size(mut self, bytes: usize) -> Self {
        self.preferred_arrow_chunk_size = Some(bytes);
        self
    }
    /// When an unfinished [`ArrowStream`](crate::session::ArrowStream) is dropped,
    /// interrupt its operation on the server before releasing it (default
    /// off: the release alone frees the server's buffers, as in PySpark).
    pub fn interrupt_on_drop(mut self, enabled: bool) -> Self {
        self.interrupt_on_drop = enabled;
        self
    }
    /// A Spark config (`spark.sql.session.timeZone`, `spark.sql.shuffle.partitions`,
    /// ...) set on the server-side session before its first call, as
    /// PySpark's `SparkSession.builder.config(key, value)` does; set again
    /// on the fresh session after a [renewal](Self::renew_stale_session).
    /// The same key twice: the last value wins. An empty key is an error at
    /// [`build`](Self::build). Unlike PySpark's builder, which ignores the
    /// confs the server refuses, a refused conf (a static one, a bad value)
    /// fails the first call with Spark's error naming it.
    ///
    /// ```
    /// use spark_connect_retry::session::SparkSession;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), spark_connect_retry::session::SparkError> {
    /// let spark = SparkSession::builder()
    ///     .remote("sc://localhost:15002")
    ///     .config("spark.sql.session.timeZone", "UTC")
    ///     .config("spark.sql.shuffle.partitions", "8")
    ///     .build()?; // nothing is sent yet: the configs go with the first call
    /// assert_eq!(spark.session_renewals(), 0);
    /// let empty = SparkSession::builder().remote("sc://localhost:15002").config("", "x").build();
    /// assert!(empty.unwrap_err().to_string().contains("config"));
    /// # Ok(())
    /// # }
    /// ```
    pub fn config(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.configs.set(key.into(), value.into());
        self
    }
    /// Ask Spark to compress result batches with `codec` (Spark 4.1+): sets
    /// [`ResultCompression::CONF`](crate::session::ResultCompression::CONF) with the
    /// builder's configs, when the session starts. Overrides the connection
    /// string's `result_compression` and a [`config`](Self::config) of the
    /// same key. Pays on thin links; ask for `Zstd` (see
    /// [`ResultCompression`](crate::session::ResultCompression)).
    ///
    /// ```
    /// use spark_connect_retry::session::{ResultCompression, SparkSession};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let spark = SparkSession::builder()
    ///     .remote("sc://localhost:15002")
    ///     .result_compression(ResultCompression::Zstd)
    ///     .build();
    /// assert!(spark.is_ok());
    /// let bad = SparkSession::builder().remote("sc://localhost/;result_compression=gzip").build();
    /// assert!(bad.unwrap_err().to_string().contains("\"gzip\""));
    /// # }
    /// ```
    pub fn result_compression(mut self, codec: ResultCompression) -> Self {
        self.result_compression = Some(codec);
        self
    }
    /// How many rows Spark puts in one result batch: sets
    /// [`ResultBatchRows::CONF`](crate::session::ResultBatchRows::CONF)
    /// (`spark.sql.execution.arrow.maxRecordsPerBatch`) with the builder's
    /// configs, when the session starts. Overrides the connection string's
    /// `result_batch_rows` and a [`config`](Self::config) of the same key;
    /// a server that refuses it fails the call, as for any config.
    ///
    /// Without it (and without `result_batch_rows=` in the connection
    /// string, or a `config` of the key), a session asks for
    /// [`ResultBatchRows::DEFAULT`](crate::session::ResultBatchRows::DEFAULT)
    /// (100,000 rows; Spark's own default is 10,000), and a server that
    /// refuses that is logged once and otherwise ignored.
    /// [`ResultBatchRows::ServerDefault`](crate::session::ResultBatchRows::ServerDefault)
    /// (`result_batch_rows=server`) sets nothing.
    ///
    /// ```
    /// use spark_connect_retry::session::{ResultBatchRows, SparkSession};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let spark = SparkSession::builder()
    ///     .remote("sc://localhost:15002")
    ///     .result_batch_rows(ResultBatchRows::ServerDefault) // Spark's 10,000
    ///     .build();
    /// assert!(spark.is_ok());
    /// let bad = SparkSession::builder().remote("sc://localhost/;result_batch_rows=-1").build();
    /// assert!(bad.unwrap_err().to_string().contains("\"-1\""));
    /// # }
    /// ```
    pub fn result_batch_rows(mut self, rows: ResultBatchRows) -> Self {
        self.result_batch_rows = Some(rows);
        self
    }
    /// Move a stale session to a fresh server-side session for *new* calls
    /// (default off).
    ///
    /// A session is stale when its server-side state is gone: the server
    /// restarted (it answers `INVALID_HANDLE.SESSION_CHANGED`), or it
    /// dropped the session after the session had been used
    /// (`SESSION_NOT_FOUND`, `SESSION_CLOSED`: idle for
    /// `spark.connect.session.manager.defaultSessionTimeout`, 1 h by
    /// default). Off, every later call fails until a new session is built
    /// (`SESSION_CHANGED` closes the session, as in PySpark). On, the next call draws a new client
    /// session id (even if the connection string gave one), sets the
    /// builder's [`config`](Self::config)s, and runs; a call the server
    /// refused as stale before running anything is sent again once. Racing
    /// calls renew once; each renewal is logged (`warn`, ids only) and
    /// counted ([`SparkSession::session_renewals`]).
    ///
    /// Never in the middle of an execution: a running
    /// [`ArrowStream`](crate::session::ArrowStream) keeps its error
    /// (`RESPONSE_ALREADY_RECEIVED`, `OPERATION_NOT_FOUND`), unless it
    /// [resumes](Self::resume_queries) the query: re-executed on the fresh
    /// session and verified against the rows already delivered.
    ///
    /// Lost with the old server-side session: temporary views and
    /// functions, configs set at run time
    /// ([`SparkSession::config_set`], SQL `SET`), the current database
    /// (`USE`), cached relations and artifacts. Kept: the builder's configs
    /// and the session's tags (the client's).
    pub fn renew_stale_session(mut self, enabled: bool) -> Self {
        self.renew_stale_session = enabled;
        self
    }
    /// Resume a query whose execution the server lost after delivering rows
    /// (a restart, the operation or session gone), verified, instead of
    /// failing with `RESPONSE_ALREADY_RECEIVED` (default off; needs
    /// [`renew_stale_session`](Self::renew_stale_session)`(true)`, or
    /// [`build`](Self::build) fails naming this option). Per stream:
    /// [`ArrowStream::set_resume`](crate::session::ArrowStream::set_resume).
    ///
    /// The stream keeps a running digest of the rows it delivered (XXH3-128
    /// over a canonical per-column encoding: no copy of the rows). On
    /// losing the execution it moves to a fresh server-side session, runs
    /// the same plan again under a new operation id and digests the new
    /// result's first N rows (N delivered). The same: it delivers from row
    /// N on, each row exactly once. Different, or fewer rows: it fails
    /// with [`SparkError::ResultChanged`] saying how many rows had been
    /// delivered. At most the retry policy's `max_retries` resumptions per
    /// query (15 for a policy without a limit); each is logged
    /// at `warn` with the old and new operation ids and counted in
    /// [`ArrowStream::stats`](crate::session::ArrowStream::stats).
    ///
    /// Queries only: a relation (`sql()` text starting with `SELECT`,
    /// `VALUES` or `TABLE`, `range`, local data). A command, or SQL that
    /// may be one (`INSERT`, `CREATE`, `WITH ...`), is never run twice: it
    /// keeps its error. What the old server-side session held is lost, as
    /// with any renewal (temporary views, runtime configs): a query that
    /// reads them fails on re-execution, or, if they now say something
    /// else, fails the digest check. The digest is a 128-bit hash, not a
    /// proof: a collision is possible in principle (about 2⁻¹²⁸ for an
    /// accidental change). With it off, nothing is digested.
    ///
    /// ```
    /// use spark_connect_retry::session::{SparkError, SparkSession};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let on = SparkSession::builder()
    ///     .remote("sc://localhost:15002")
    ///     .renew_stale_session(true)
    ///     .resume_queries(true)
    ///     .build();
    /// assert!(on.is_ok());
    /// let alone = SparkSession::builder()
    ///     .remote("sc://localhost:15002")
    ///     .resume_queries(true)
    ///     .build();
    /// assert!(matches!(alone, Err(SparkError::InvalidOption { field: "resume_queries", .. })));
    /// # }
    /// ```
    #[cfg(feature = "arrow")]
    pub fn resume_queries(mut self, enabled: bool) -> Self {
        self.resume_queries = enabled;
        self
    }

    /// Build the session. The channel connects lazily, on the first RPC; the
    /// session id is drawn here (unless the connection string gives one), so
    /// two sessions built from one string never share it.
    pub fn build(mut self) -> Result<SparkSession, SparkError> {
        let (config, flow_control) = self.resolve()?;
        let deadlines = self.deadlines.unwrap_or_default();
        deadlines.validate()?;
        let idle_timeout = self.idle_timeout.unwrap_or(Some(DEFAULT_IDLE_TIMEOUT));
        check_option("idle_timeout", idle_timeout)?;
        check_option("connect_timeout", self.connect_timeout)?;
        let chunk = self.chunk_size(&config)?;
        if let Some(codec) = self.result_compression.or(config.result_compression()) {
            let key = ResultCompression::CONF.to_owned();
            self.configs.set(key, codec.as_str().to_owned());
        }
        let default_configs = self.batch_rows(&config);
        if self.configs.0.iter().any(|(k, _)| k.trim().is_empty()) {
            return Err(SparkError::InvalidOption {
                field: "config",
                reason: "a config key must not be empty",
            });
        }
        if self.resume_queries && !self.renew_stale_session {
            return Err(SparkError::InvalidOption {
                field: "resume_queries",
                reason: "needs renew_stale_session(true): a resumed query runs on a fresh server-side session",
            });
        }
        let (retrying, meters) = self.metered(
            self.retrying.clone().unwrap_or_else(Retrying::pyspark),
            &config,
        );
        let (channel, credentials) = self.make_channel(&config, flow_control)?;
        let client = SparkClient::new(channel)
            .max_decoding_message_size(config.max_message_size())
            .max_encoding_message_size(config.max_message_size());
        Ok(SparkSession::new(
            client,
            &config,
            Options {
                retrying,
                meters,
                deadlines,
                idle_timeout,
                release_wait: self.release_wait.unwrap_or(DEFAULT_RELEASE_WAIT),
                arrow_chunk_size: chunk,
                interrupt_on_drop: self.interrupt_on_drop,
                configs: self.configs,
                default_configs,
                default_configs_refused: Default::default(),
                renew_stale_session: self.renew_stale_session,
                resume_queries: self.resume_queries,
                credentials,
            },
        ))
    }

    /// The channel a session built from this builder would use, alone:
    /// the connection string's (or `SPARK_REMOTE`'s) TLS, CA, token or
    /// token provider, keepalive and flow control, over a reconnecting
    /// connection; for programs that forward calls to a Spark Connect server
    /// (a proxy such as `spark-connect-guard`). Session-only options are
    /// ignored.
    pub fn build_channel(mut self) -> Result<GrpcChannel, SparkError> {
        let (config, flow_control) = self.resolve()?;
        check_option("connect_timeout", self.connect_timeout)?;
        Ok(self.make_channel(&config, flow_control)?.0)
    }

    /// The connection string and the HTTP/2 flow control, checked.
    fn resolve(&mut self) -> Result<(ConnectionString, Http2FlowControl), SparkError> {
        let config = match (self.config.take(), self.remote.take()) {
            (Some(c), _) => c,
            (None, Some(url)) => ConnectionString::parse(&url)?,
            (None, None) => ConnectionString::from_env()?,
        };
        let flow_control = self.flow_control.unwrap_or(config.http2_flow_control());
        flow_control
            .validate()
            .map_err(|reason| SparkError::InvalidOption {
                field: "http2_flow_control",
                reason,
            })?;
        Ok((config, flow_control))
    }

    /// Rows per result batch: an explicit setting joins the builder's
    /// configs (refusal fails the call); the default is returned, to be set
    /// apart (refusal logged once), unless a config of the key was given.
    fn batch_rows(&mut self, config: &ConnectionString) -> BuilderConfigs {
        let mut defaults = BuilderConfigs::default();
        let key = ResultBatchRows::CONF;
        match self.result_batch_rows.or(config.result_batch_rows()) {
            Some(rows) => {
                if let Some(v) = rows.conf_value() {
                    self.configs.set(key.to_owned(), v);
                }
            }
            None => {
                if !self.configs.0.iter().any(|(k, _)| k == key)
                    && let Some(v) = ResultBatchRows::DEFAULT.conf_value()
                {
                    defaults.set(key.to_owned(), v);
                }
            }
        }
        defaults
    }

    /// The session's channel and credentials.
    fn make_channel(
        &mut self,
        config: &ConnectionString,
        flow_control: Http2FlowControl,
    ) -> Result<(GrpcChannel, Option<Credentials>), SparkError> {
        // The connection string's token is a provider that never refreshes:
        // one code path for both.
        let provider_given = self.credentials.is_some();
        let credentials = self.credentials.take().or_else(|| {
            let token = config.token()?.clone();
            Some(Credentials::new(Arc::new(StaticToken(token))))
        });
        let auth = AuthInterceptor::metadata_only(config);
        // Wrapped once: a channel built here is intercepted, sanitized and
        // boxed in one step; a caller's channel is already a sanitized
        // `GrpcChannel`, so it is only intercepted and boxed again.
        let channel = match self.channel.take() {
            Some(c) => BoxCloneSyncService::new(
                TokenService::new(InterceptedService::new(c, auth), credentials.clone())
                    .map_response(|r: http::Response<_>| r.map(tonic::body::Body::new))
                    .map_err(tonic::Status::from_error),
            ),
            None => {
                let timeout = self.connect_timeout.unwrap_or(DEFAULT_CONNECT_TIMEOUT);
                // A reconnecting channel: a stall reattach dials a fresh
                // connection instead of waiting on a dead one.
                let builder = ChannelBuilder::new(config)
                    .connect_timeout(timeout)
                    .http2_flow_control(flow_control)
                    .bearer_token(provider_given);
                #[cfg(feature = "tls")]
                let builder = builder.tls_settings(self.tls.clone());
                let endpoint = builder.endpoint()?;
                let connector = match self.connector.clone() {
                    Some(c) => Some(c),
                    None => self
                        .egress
                        .connector_for(&config.authority())
                        .map_err(ChannelError::from)?,
                };
                let tonic = match connector {
                    Some(c) => ReconnectingChannel::with_connector(endpoint, c),
                    None => ReconnectingChannel::new(endpoint),
                };
                let channel = grpc_channel(TokenService::new(
                    InterceptedService::new(tonic, auth),
                    credentials.clone(),
                ));
                // A TLS handshake that fails on a certificate fails every
                // attempt alike: made a non-retryable error naming the cause.
                #[cfg(feature = "tls")]
                let channel = {
                    let target = config.authority();
                    BoxCloneSyncService::new(channel.map_err(move |s| {
                        crate::connect::tls::rewrite_handshake_failure(s, &target)
                    }))
                };
                channel
            }
        };
        Ok((channel, credentials))
    }

    /// Record the session's metrics on `meter` (feature `otel`; default:
    /// the global meter provider's meter `spark-connect-retry`): gRPC's
    /// per-attempt, per-call and retry instruments (gRFC A66, A96) for
    /// every unary RPC and background release, labelled with the Spark
    /// Connect method and `host:port`, and the session's own
    /// `spark_connect.client.*` instruments (`docs/metrics.md`).
    #[cfg(feature = "otel")]
    #[cfg_attr(docsrs, doc(cfg(feature = "otel")))]
    pub fn meter(mut self, meter: opentelemetry::metrics::Meter) -> Self {
        self.meter = Some(meter);
        self
    }

    /// The session's metrics: gRPC's on its loop, its own beside them.
    fn metered(&self, retrying: Retrying, config: &ConnectionString) -> (Retrying, SessionMeters) {
        #[cfg(feature = "otel")]
        {
            let meter = self.meter.clone().unwrap_or_else(|| {
                let scope = opentelemetry::InstrumentationScope::builder(env!("CARGO_PKG_NAME"))
                    .with_version(env!("CARGO_PKG_VERSION"))
                    .build();
                opentelemetry::global::meter_with_scope(scope)
            });
            let grpc = tonic_retry::metrics::GrpcMetrics::new(&meter)
                .with_target(format!("{}:{}", config.host(), config.port()))
                .with_methods(crate::meters::SPARK_CONNECT_PATHS);
            (retrying.with_metrics(grpc), SessionMeters::new(&meter))
        }
        #[cfg(not(feature = "otel"))]
        {
            let _ = config;
            (retrying, SessionMeters::default())
        }
    }

    /// The preferred chunk size to send, or `None` with chunking off.
    fn chunk_size(&self, config: &ConnectionString) -> Result<Option<usize>, SparkError> {
        if self.arrow_chunking == Some(false) {
            return Ok(None);
        }
        if let Some(bytes) = self.preferred_arrow_chunk_size
            && bytes < MIN_ARROW_CHUNK_SIZE
        {
            return Err(SparkError::InvalidOption {
                field: "preferred_arrow_chunk_size",
                reason: "must be at least 1024 bytes",
            });
        }
        let fits = config
            .max_message_size()
            .saturating_sub(CHUNK_HEADROOM)
            .max(MIN_ARROW_CHUNK_SIZE);
        Ok(Some(
            self.preferred_arrow_chunk_size.unwrap_or(fits).min(fits),
        ))
    }
}

/// A timeout option: not zero, not absurdly long (`Instant + d` must not overflow).
fn check_option(field: &'static str, value: Option<Duration>) -> Result<(), SparkError> {
    match value {
        Some(d) => check_timeout(d).map_err(|reason| SparkError::InvalidOption { field, reason }),
        None => Ok(()),
    }
}

impl SparkSession {
    /// A builder with PySpark's defaults.
    pub fn builder() -> SparkSessionBuilder {
        SparkSessionBuilder::default()
    }

    /// Connect to `url` with defaults.
    pub fn connect(url: &str) -> Result<SparkSession, SparkError> {
        Self::builder().remote(url).build()
    }
}

mod connection;
#[cfg(test)]
mod tests;
