//! [`RetryLayer`]: what to retry, per method, and the tower `Layer` impl.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use super::config::ServiceConfig;
use super::hedging_policy::HedgingPolicy;
use super::method::MethodConfig;
use super::service::{RetryService, Shared};
use super::stats::{RetryStats, RetryStatsHandle};
use super::throttle::RetryThrottle;
use crate::recorder::Meters;
use crate::retrying::Retrying;

/// Default cap on a request body kept for replay: 1 MiB per call (grpc-java's per-RPC figure).
pub(crate) const DEFAULT_MAX_REQUEST_BUFFER: usize = 1 << 20;
/// Default cap on a unary response body buffered to read its status: 4 MiB.
pub(crate) const DEFAULT_MAX_RESPONSE_BUFFER: usize = 4 << 20;

/// A tower layer that retries gRPC calls; see the [module docs](super).
///
/// Build it, then `ServiceBuilder::new().layer(layer).service(channel)`;
/// every service it builds (and every clone of those) shares the token
/// bucket and the [`stats`](Self::stats).
#[derive(Debug, Clone)]
pub struct RetryLayer {
    shared: Arc<Shared>,
}

impl RetryLayer {
    /// A layer over `retrying`'s policies, with the defaults: every method
    /// non-idempotent and [`ResponseKind::Auto`](super::ResponseKind::Auto), 1 MiB request buffer, 4 MiB
    /// response buffer, no default deadline, no per-attempt timeout, no
    /// throttling.
    pub fn new(retrying: impl Into<Retrying>) -> Self {
        RetryLayer {
            shared: Arc::new(Shared {
                retrying: retrying.into(),
                methods: HashMap::new(),
                services: HashMap::new(),
                default_method: MethodConfig::default(),
                max_request_buffer: DEFAULT_MAX_REQUEST_BUFFER,
                max_response_buffer: DEFAULT_MAX_RESPONSE_BUFFER,
                default_deadline: None,
                per_attempt_timeout: None,
                throttle: None,
                stats: RetryStatsHandle::default(),
                target: None,
                meters: Meters::default(),
            }),
        }
    }

    /// For any gRPC service, as gRFC A6 specifies: each method named in
    /// `config` with a `retryPolicy` is retried only on the codes it lists,
    /// at most `maxAttempts` times in all, with A6's backoff; its `timeout`
    /// is its deadline. Methods without a `retryPolicy`, and methods the
    /// config does not name, are not retried. `retryThrottling` becomes the
    /// token bucket. The
    /// sleeper, clock and jitter come from `base`, whose policies are not
    /// used.
    ///
    /// A method with a `retryPolicy` counts as idempotent: the
    /// configuration's author chose the codes that are safe to retry for it.
    /// A method with a `hedgingPolicy` is hedged, and idempotent for the
    /// same reason.
    pub fn from_service_config(config: &ServiceConfig, base: impl Into<Retrying>) -> Self {
        let base = base.into();
        let mut layer = Self::new(base.clone().with_policies(Vec::new()));
        for entry in config.method_configs() {
            let mut method = match (entry.retry_policy(), entry.hedging_policy()) {
                (Some(policy), _) => MethodConfig::idempotent()
                    .with_retrying(base.clone().with_policies(vec![policy.clone()])),
                (None, Some(policy)) => {
                    let mut method = MethodConfig::idempotent();
                    method.hedging = Some(policy.clone());
                    method
                }
                (None, None) => MethodConfig::non_idempotent(),
            };
            method.timeout = entry.timeout();
            for name in entry.names() {
                layer = match (name.service(), name.method()) {
                    (None, _) => layer.default_method(method.clone()),
                    (Some(s), None) => layer.service(s, method.clone()),
                    (Some(s), Some(m)) => layer.method(format!("/{s}/{m}"), method.clone()),
                };
            }
        }
        if let Some(t) = config.retry_throttling() {
            layer = layer.throttle(t);
        }
        layer
    }

    fn edit(mut self, f: impl FnOnce(&mut Shared)) -> Self {
        // Builders run before any service exists, so the Arc is unique; if
        // a service already shares it, the layer gets its own copy (with
        // fresh stats) and the service is unaffected.
        if Arc::get_mut(&mut self.shared).is_none() {
            let mut copy = (*self.shared).clone();
            copy.stats = RetryStatsHandle::default();
            self.shared = Arc::new(copy);
        }
        if let Some(s) = Arc::get_mut(&mut self.shared) {
            f(s);
        }
        self
    }

    /// Settings for one method, by gRPC path (`/package.Service/Method`).
    pub fn method(self, path: impl Into<String>, config: MethodConfig) -> Self {
        let path = path.into();
        self.edit(|s| {
            s.meters.register(Some(&path), None);
            s.methods.insert(path, config);
        })
    }
    /// Hedge the method at `path` (`/package.Service/Method`) with `policy`,
    /// keeping the rest of the settings that apply to it. Hedging sends a
    /// call more than once on purpose, so this also declares the method
    /// idempotent (as a service config's `hedgingPolicy` does).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tonic_retry::layer::{HedgingPolicy, RetryLayer};
    /// use tonic_retry::retrying::Retrying;
    ///
    /// let policy = HedgingPolicy::new(3, Duration::from_millis(5))?;
    /// let path = "/kv.Store/Get";
    /// let layer = RetryLayer::new(Retrying::default())
    ///     .hedge(path, policy.clone())
    ///     .per_attempt_timeout(Duration::from_secs(1));
    /// assert_eq!(layer.method_config(path).hedging(), Some(&policy));
    /// assert!(layer.method_config(path).is_idempotent());
    /// # Ok::<(), tonic_retry::policy::InvalidPolicy>(())
    /// ```
    pub fn hedge(self, path: impl Into<String>, policy: HedgingPolicy) -> Self {
        let path = path.into();
        let config = self.method_config(&path).clone().hedged(policy);
        self.method(path, config)
    }
    /// Settings for every method of a service (`package.Service`) not named
    /// with [`method`](Self::method).
    pub fn service(self, service: impl Into<String>, config: MethodConfig) -> Self {
        let service = service.into();
        self.edit(|s| {
            s.meters.register(None, Some(&service));
            s.services.insert(service, config);
        })
    }
    /// Settings for methods named nowhere else.
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
    /// Deadline across attempts for methods without their own timeout. A
    /// request's `grpc-timeout` wins when it is shorter. Any duration is
    /// accepted: one past the clock's range means no deadline.
    pub fn default_deadline(self, d: Duration) -> Self {
        self.edit(|s| s.default_deadline = Some(d))
    }
    /// Timeout of each attempt; each attempt's `grpc-timeout` is
    /// `min(per_attempt, time left overall)`.
    pub fn per_attempt_timeout(self, d: Duration) -> Self {
        self.edit(|s| s.per_attempt_timeout = Some(d))
    }
    /// gRFC A6 throttling with this token bucket, shared by every service
    /// the layer builds; pass an `Arc` to share one bucket across layers
    /// (e.g. one per server).
    pub fn throttle(self, throttle: impl Into<Arc<RetryThrottle>>) -> Self {
        let t = throttle.into();
        self.edit(|s| s.throttle = Some(t))
    }
    /// The token bucket, if throttling is on.
    pub fn throttle_handle(&self) -> Option<Arc<RetryThrottle>> {
        self.shared.throttle.clone()
    }
    /// The counters shared by every service this layer builds, as they are now.
    pub fn stats(&self) -> RetryStats {
        self.shared.stats.snapshot()
    }
    /// A live handle on the counters shared by every service this layer
    /// builds: take it before the layer moves into a `ServiceBuilder`.
    pub fn stats_handle(&self) -> RetryStatsHandle {
        self.shared.stats.clone()
    }
    /// The server (`host:port`) the give-up warning names when a request
    /// carries no authority. A tonic `Channel` adds its endpoint's below
    /// the layer, so a request through a layer over a `Channel` has none
    /// unless the client was built `with_origin`.
    pub fn target(self, target: impl Into<String>) -> Self {
        let target = target.into();
        self.edit(|s| {
            s.meters.default_target(&target);
            s.target = Some(target);
        })
    }
    /// Record every call in `metrics` (gRFC A66 and A96: see
    /// [`crate::metrics`]): attempts, retries, hedges and transparent
    /// re-sends, waits, message sizes. The methods this layer has
    /// settings for, before or after this call, are registered (recorded
    /// by name); its [`target`](Self::target) labels the calls unless
    /// `metrics` has its own.
    #[cfg(feature = "otel")]
    #[cfg_attr(docsrs, doc(cfg(feature = "otel")))]
    pub fn metrics(self, metrics: crate::metrics::GrpcMetrics) -> Self {
        self.edit(|s| {
            s.meters = Meters::new(metrics);
            for path in s.methods.keys() {
                s.meters.register(Some(path), None);
            }
            for service in s.services.keys() {
                s.meters.register(None, Some(service));
            }
            if let Some(t) = &s.target {
                s.meters.default_target(t);
            }
        })
    }
    /// The layer's policies.
    pub fn retrying(&self) -> &Retrying {
        &self.shared.retrying
    }
    /// The settings that apply to `path`.
    pub fn method_config(&self, path: &str) -> &MethodConfig {
        self.shared.method(path)
    }
}

impl<S: Clone> tower::Layer<S> for RetryLayer {
    type Service = RetryService<S>;
    fn layer(&self, inner: S) -> Self::Service {
        RetryService::new(inner, self.shared.clone())
    }
}
