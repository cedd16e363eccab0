//! [`RetryLayer`]: configuration, and the tower `Layer` impl.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;
use std::time::Duration;

use tower::Layer;

use super::service::RetryService;
use super::stats::RetryStats;
use super::throttle::RetryThrottle;
use crate::retrying::Retrying;

/// Default cap on a request body kept for replay: 1 MiB per call (grpc-java's per-RPC figure).
pub const DEFAULT_MAX_REQUEST_BUFFER: usize = 1 << 20;
/// Default cap on a unary response body buffered to read its status: 4 MiB.
pub const DEFAULT_MAX_RESPONSE_BUFFER: usize = 4 << 20;

/// How the layer finds a response's gRPC status before committing to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ResponseKind {
    /// Decide per response: buffer the first message and keep reading; the
    /// trailers arriving first means unary (status known, retry possible);
    /// a second message starting means a stream (commit). Costs a streaming
    /// method the latency until its second message, so name streaming
    /// methods [`ServerStreaming`](Self::ServerStreaming) when known.
    #[default]
    Auto,
    /// One response message: buffer it and the trailers (up to the response cap).
    Unary,
    /// A server stream: retried only until its first data frame (gRFC A6 commit rule).
    ServerStreaming,
}

/// Per-method retry settings, keyed by gRPC path (`/package.Service/Method`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MethodConfig {
    idempotent: bool,
    retry: bool,
    kind: ResponseKind,
}

impl Default for MethodConfig {
    /// Not idempotent, [`ResponseKind::Auto`], retries on.
    fn default() -> Self {
        MethodConfig {
            idempotent: false,
            retry: true,
            kind: ResponseKind::Auto,
        }
    }
}

impl MethodConfig {
    /// A method safe to run twice: any failure the policy accepts is replayed.
    pub fn idempotent() -> Self {
        MethodConfig {
            idempotent: true,
            ..Self::default()
        }
    }
    /// A method that must not run twice: only failures proving the server
    /// never started the work are replayed (see the module docs).
    pub fn non_idempotent() -> Self {
        Self::default()
    }
    /// Never retried and never buffered: for bidirectional streams, whose
    /// request body may wait on the responses.
    pub fn passthrough() -> Self {
        MethodConfig {
            retry: false,
            ..Self::default()
        }
    }
    /// Set how the response status is found.
    pub fn with_kind(mut self, kind: ResponseKind) -> Self {
        self.kind = kind;
        self
    }
    /// Whether the method is idempotent.
    pub fn is_idempotent(&self) -> bool {
        self.idempotent
    }
    /// Whether the method is retried at all.
    pub fn is_retried(&self) -> bool {
        self.retry
    }
    /// How the response status is found.
    pub fn kind(&self) -> ResponseKind {
        self.kind
    }
}

/// The Spark Connect service's gRPC path prefix.
pub const SPARK_CONNECT_SERVICE: &str = "/spark.connect.SparkConnectService/";

/// Everything a [`RetryService`] shares with its clones.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) retrying: Retrying,
    pub(crate) methods: HashMap<String, MethodConfig, PathHasher>,
    pub(crate) default_method: MethodConfig,
    pub(crate) max_request_buffer: usize,
    pub(crate) max_response_buffer: usize,
    pub(crate) default_deadline: Option<Duration>,
    pub(crate) per_attempt_timeout: Option<Duration>,
    pub(crate) throttle: Option<Arc<RetryThrottle>>,
    pub(crate) stats: RetryStats,
}

impl Shared {
    pub(crate) fn method(&self, path: &str) -> MethodConfig {
        self.methods
            .get(path)
            .copied()
            .unwrap_or(self.default_method)
    }

    /// The bookkeeping of an attempt that ends the call with the server's
    /// response: a success for the token bucket (A6), and the attempt's event.
    pub(crate) fn record_done<'p>(&self, path: impl FnOnce() -> &'p str, attempt: u32) {
        if let Some(t) = &self.throttle {
            t.on_success();
        }
        // The path is found only for a subscriber that wants the event.
        if tracing::enabled!(tracing::Level::DEBUG) {
            crate::layer::service::event(path(), attempt, tonic::Code::Ok, None, "done");
        }
    }
}

/// The method table's hasher, used once per call: a word-at-a-time
/// multiply-rotate hash (the FxHash scheme). The keys are the application's
/// own configuration, so SipHash's resistance to chosen collisions buys
/// nothing here, and it cost more than the rest of the lookup.
pub(crate) type PathHasher = BuildHasherDefault<WordHasher>;

/// The hash state of [`PathHasher`].
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct WordHasher(u64);

impl WordHasher {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

impl Hasher for WordHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut words = bytes.chunks_exact(8);
        for w in &mut words {
            self.add(u64::from_le_bytes(w.try_into().unwrap_or_default()));
        }
        let mut last = [0u8; 8];
        let tail = words.remainder();
        last[..tail.len()].copy_from_slice(tail);
        self.add(u64::from_le_bytes(last) ^ ((tail.len() as u64) << 59));
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

/// A tower layer that retries gRPC calls under a [`Retrying`] configuration.
///
/// Build it, then `ServiceBuilder::new().layer(layer).service(channel)`;
/// every service it builds (and every clone of those) shares the token
/// bucket and the [`stats`](Self::stats). See the [module docs](super).
#[derive(Debug, Clone)]
pub struct RetryLayer {
    shared: Arc<Shared>,
}

impl RetryLayer {
    /// A layer over `retrying`'s policies, with the defaults: every method
    /// non-idempotent and [`ResponseKind::Auto`], 1 MiB request buffer, 4 MiB
    /// response buffer, no default deadline, no per-attempt timeout, no
    /// throttling.
    pub fn new(retrying: Retrying) -> Self {
        RetryLayer {
            shared: Arc::new(Shared {
                retrying,
                methods: HashMap::default(),
                default_method: MethodConfig::default(),
                max_request_buffer: DEFAULT_MAX_REQUEST_BUFFER,
                max_response_buffer: DEFAULT_MAX_RESPONSE_BUFFER,
                default_deadline: None,
                per_attempt_timeout: None,
                throttle: None,
                stats: RetryStats::default(),
            }),
        }
    }

    /// [`new`](Self::new) plus the Spark Connect method table of the module
    /// docs: every RPC idempotent except `ExecutePlan`; `ExecutePlan` and
    /// `ReattachExecute` server-streaming, the rest unary.
    pub fn spark_connect(retrying: Retrying) -> Self {
        let unary = MethodConfig::idempotent().with_kind(ResponseKind::Unary);
        let mut layer = Self::new(retrying).method(
            format!("{SPARK_CONNECT_SERVICE}ExecutePlan"),
            MethodConfig::non_idempotent().with_kind(ResponseKind::ServerStreaming),
        );
        layer = layer.method(
            format!("{SPARK_CONNECT_SERVICE}ReattachExecute"),
            MethodConfig::idempotent().with_kind(ResponseKind::ServerStreaming),
        );
        for m in [
            "AnalyzePlan",
            "Config",
            "AddArtifacts",
            "ArtifactStatus",
            "Interrupt",
            "ReleaseExecute",
            "ReleaseSession",
            "FetchErrorDetails",
            "CloneSession",
            "GetStatus",
        ] {
            layer = layer.method(format!("{SPARK_CONNECT_SERVICE}{m}"), unary);
        }
        layer
    }

    fn edit(mut self, f: impl FnOnce(&mut Shared)) -> Self {
        // Builders run before any service exists, so the Arc is unique and
        // make_mut does not copy; if a service already shares it, the layer
        // gets its own copy (with fresh stats) and the service is unaffected.
        match Arc::get_mut(&mut self.shared) {
            Some(s) => f(s),
            None => {
                let s = &*self.shared;
                let mut copy = Shared {
                    retrying: s.retrying.clone(),
                    methods: s.methods.clone(),
                    default_method: s.default_method,
                    max_request_buffer: s.max_request_buffer,
                    max_response_buffer: s.max_response_buffer,
                    default_deadline: s.default_deadline,
                    per_attempt_timeout: s.per_attempt_timeout,
                    throttle: s.throttle.clone(),
                    stats: RetryStats::default(),
                };
                f(&mut copy);
                self.shared = Arc::new(copy);
            }
        }
        self
    }

    /// Settings for one method, by gRPC path (`/package.Service/Method`).
    pub fn method(self, path: impl Into<String>, config: MethodConfig) -> Self {
        let path = path.into();
        self.edit(|s| {
            s.methods.insert(path, config);
        })
    }
    /// Settings for methods not named with [`method`](Self::method).
    pub fn default_method(self, config: MethodConfig) -> Self {
        self.edit(|s| s.default_method = config)
    }
    /// Cap on the request body kept for replay (default 1 MiB). Bigger
    /// requests are sent once, unretried.
    pub fn max_request_buffer(self, bytes: usize) -> Self {
        self.edit(|s| s.max_request_buffer = bytes)
    }
    /// Cap on a unary response buffered to read its status (default 4 MiB).
    /// A bigger response is committed: delivered as is, never retried.
    pub fn max_response_buffer(self, bytes: usize) -> Self {
        self.edit(|s| s.max_response_buffer = bytes)
    }
    /// Overall deadline across attempts for calls without a `grpc-timeout` header.
    pub fn default_deadline(self, d: Duration) -> Self {
        self.edit(|s| s.default_deadline = Some(d))
    }
    /// Timeout of each attempt; each attempt's `grpc-timeout` is
    /// `min(per_attempt, remaining overall time)`.
    pub fn per_attempt_timeout(self, d: Duration) -> Self {
        self.edit(|s| s.per_attempt_timeout = Some(d))
    }
    /// gRFC A6 throttling with `max_tokens` and `token_ratio`.
    pub fn throttle(self, max_tokens: u32, token_ratio: f64) -> Self {
        let t = Arc::new(RetryThrottle::new(max_tokens, token_ratio));
        self.edit(|s| s.throttle = Some(t))
    }
    /// Share an existing token bucket (e.g. one per server across layers).
    pub fn throttle_shared(self, throttle: Arc<RetryThrottle>) -> Self {
        self.edit(|s| s.throttle = Some(throttle))
    }
    /// The token bucket, if throttling is on.
    pub fn throttle_handle(&self) -> Option<Arc<RetryThrottle>> {
        self.shared.throttle.clone()
    }
    /// The counters shared by every service this layer builds.
    pub fn stats(&self) -> RetryStats {
        self.shared.stats.clone()
    }
    /// The retry configuration.
    pub fn retrying(&self) -> &Retrying {
        &self.shared.retrying
    }
    /// The settings that apply to `path`.
    pub fn method_config(&self, path: &str) -> MethodConfig {
        self.shared.method(path)
    }
}

impl<S: Clone> Layer<S> for RetryLayer {
    type Service = RetryService<S>;
    fn layer(&self, inner: S) -> Self::Service {
        RetryService::new(inner, self.shared.clone())
    }
}
