//! gRPC's standard client metrics, through OpenTelemetry (feature `otel`).
//!
//! A service that retries needs numbers a metrics pipeline can scrape: how
//! many calls needed a retry, how long they waited, how often a hedge won.
//! gRPC names them once for every language: gRFC A66's per-attempt and
//! per-call instruments and gRFC A96's retry instruments. [`GrpcMetrics`]
//! records them, with A66's names, units, labels and bucket boundaries,
//! from the [`RetryLayer`](crate::layer::RetryLayer)
//! ([`RetryLayer::metrics`](crate::layer::RetryLayer::metrics)) and from
//! the [`Retrying`](crate::retrying::Retrying) loop
//! ([`Retrying::with_metrics`](crate::retrying::Retrying::with_metrics),
//! and [`Retrying::with_method`](crate::retrying::Retrying::with_method)).
//! The nine instruments, their units, labels and when each is recorded are
//! in the [crate docs](crate#metrics-feature-otel).
//!
//! Latency buckets are A66's (0, 10 µs, … 100 s), size buckets A66's
//! (0, 1 KiB, … 4 GiB), given to the SDK as advice (a view may replace them).
//! `grpc.status` is the code's name (`OK`, `UNAVAILABLE`, …); an attempt
//! dropped before it ended (a losing hedge, a call the caller abandoned) is
//! `CANCELLED`.
//!
//! # Bounded labels
//!
//! A client that names methods at run time could create a label set per
//! name. A method is recorded under its name (`package.Service/Method`,
//! A66's form) only if it is *registered*; every other method is
//! recorded as `other`, as grpc-java does. Registered are:
//! the paths given to [`GrpcMetrics::with_methods`]; and, for a layer, the
//! methods it has settings for: each path given to
//! [`RetryLayer::method`](crate::layer::RetryLayer::method) or
//! [`hedge`](crate::layer::RetryLayer::hedge), every method of a service
//! given to [`service`](crate::layer::RetryLayer::service), and so every
//! name of a service config
//! ([`from_service_config`](crate::layer::RetryLayer::from_service_config)).
//! `grpc.target` is one value per [`GrpcMetrics`] ([`with_target`](GrpcMetrics::with_target);
//! for a layer without one, its [`target`](crate::layer::RetryLayer::target)),
//! never a request's authority; `other` when none is set.
//!
//! # Message sizes
//!
//! The layer sees each request and response body as gRPC frames: it
//! records the bytes of the messages as they travel (compressed when the
//! call is compressed, without the 5-byte prefix of each message), which
//! is A66's definition. The loop sees decoded messages, not bytes, so calls
//! recorded by the loop have no size instruments.
//!
//! ```
//! use opentelemetry::metrics::MeterProvider as _;
//! use opentelemetry_sdk::metrics::SdkMeterProvider;
//! use tonic_retry::layer::{MethodConfig, RetryLayer};
//! use tonic_retry::metrics::GrpcMetrics;
//! use tonic_retry::retrying::Retrying;
//!
//! let provider = SdkMeterProvider::builder().build(); // with a reader or exporter
//! let metrics = GrpcMetrics::from_provider(&provider).with_target("dns:///kv.internal:443");
//! let layer = RetryLayer::new(Retrying::default())
//!     .method("/kv.Store/Get", MethodConfig::idempotent())
//!     .metrics(metrics.clone());
//! // A loop's calls, named by method:
//! let for_loop = metrics.with_methods(["/kv.Store/Get"]);
//! assert_eq!(for_loop.method_label("/kv.Store/Get"), "kv.Store/Get");
//! assert_eq!(for_loop.method_label("/kv.Store/Scan"), "other");
//! let retrying = Retrying::default().with_metrics(for_loop);
//! # let _ = (layer, retrying);
//! ```

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use opentelemetry::metrics::{Counter, Histogram, Meter, MeterProvider};
use opentelemetry::{InstrumentationScope, KeyValue, StringValue};

pub(crate) mod body;
pub(crate) mod call;

/// The label value of methods that are not registered (and of the target
/// when none is set).
pub(crate) const OTHER: &str = "other";

/// gRFC A66's latency buckets, in seconds.
const LATENCY_BUCKETS: [f64; 41] = [
    0.0, 0.00001, 0.00005, 0.0001, 0.0003, 0.0006, 0.0008, 0.001, 0.002, 0.003, 0.004, 0.005,
    0.006, 0.008, 0.01, 0.013, 0.016, 0.02, 0.025, 0.03, 0.04, 0.05, 0.065, 0.08, 0.1, 0.13, 0.16,
    0.2, 0.25, 0.3, 0.4, 0.5, 0.65, 0.8, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0,
];

/// gRFC A66's size buckets, in bytes.
const SIZE_BUCKETS: [f64; 14] = [
    0.0,
    1024.0,
    2048.0,
    4096.0,
    16384.0,
    65536.0,
    262144.0,
    1048576.0,
    4194304.0,
    16777216.0,
    67108864.0,
    268435456.0,
    1073741824.0,
    4294967296.0,
];

/// The instruments, made once per [`GrpcMetrics`].
#[derive(Debug)]
pub(crate) struct Instruments {
    pub(crate) attempt_started: Counter<u64>,
    pub(crate) attempt_duration: Histogram<f64>,
    pub(crate) attempt_sent: Histogram<u64>,
    pub(crate) attempt_rcvd: Histogram<u64>,
    pub(crate) call_duration: Histogram<f64>,
    pub(crate) retries: Histogram<u64>,
    pub(crate) transparent_retries: Histogram<u64>,
    pub(crate) hedges: Histogram<u64>,
    pub(crate) retry_delay: Histogram<f64>,
}

impl Instruments {
    fn new(meter: &Meter) -> Self {
        let latency = |name: &'static str, description: &'static str| {
            meter
                .f64_histogram(name)
                .with_unit("s")
                .with_description(description)
                .with_boundaries(LATENCY_BUCKETS.to_vec())
                .build()
        };
        let size = |name: &'static str, description: &'static str| {
            meter
                .u64_histogram(name)
                .with_unit("By")
                .with_description(description)
                .with_boundaries(SIZE_BUCKETS.to_vec())
                .build()
        };
        let count = |name: &'static str, unit: &'static str, description: &'static str, top| {
            let mut bounds = vec![1.0, 2.0, 3.0, 4.0, 5.0];
            bounds.extend(top);
            meter
                .u64_histogram(name)
                .with_unit(unit)
                .with_description(description)
                .with_boundaries(bounds)
                .build()
        };
        Instruments {
            attempt_started: meter
                .u64_counter("grpc.client.attempt.started")
                .with_unit("{attempt}")
                .with_description("Number of client call attempts started.")
                .build(),
            attempt_duration: latency(
                "grpc.client.attempt.duration",
                "Time taken to complete a client call attempt.",
            ),
            attempt_sent: size(
                "grpc.client.attempt.sent_total_compressed_message_size",
                "Compressed message bytes sent per client call attempt.",
            ),
            attempt_rcvd: size(
                "grpc.client.attempt.rcvd_total_compressed_message_size",
                "Compressed message bytes received per call attempt.",
            ),
            call_duration: latency(
                "grpc.client.call.duration",
                "Time taken by the gRPC library to complete a client call.",
            ),
            retries: count(
                "grpc.client.call.retries",
                "{retry}",
                "Number of retries during the client call.",
                None,
            ),
            transparent_retries: count(
                "grpc.client.call.transparent_retries",
                "{transparent_retry}",
                "Number of transparent retries during the client call.",
                Some(10.0),
            ),
            hedges: count(
                "grpc.client.call.hedges",
                "{hedge}",
                "Number of hedges during the client call.",
                None,
            ),
            retry_delay: latency(
                "grpc.client.call.retry_delay",
                "Total time of delay while there is no active attempt during the client call.",
            ),
        }
    }
}

/// The labels of every call to one method: made once per registered
/// method, so that a call clones an `Arc`, not its labels.
#[derive(Debug)]
pub(crate) struct Labels {
    pub(crate) instruments: Arc<Instruments>,
    /// `grpc.method`, `grpc.target`.
    pub(crate) base: [KeyValue; 2],
    /// The same and `grpc.status = OK`, the usual end.
    ok: [KeyValue; 3],
}

impl Labels {
    fn new(instruments: Arc<Instruments>, method: StringValue, target: StringValue) -> Self {
        let base = [
            KeyValue::new("grpc.method", method),
            KeyValue::new("grpc.target", target),
        ];
        let ok = [
            base[0].clone(),
            base[1].clone(),
            KeyValue::new("grpc.status", status_name(tonic::Code::Ok)),
        ];
        Labels {
            instruments,
            base,
            ok,
        }
    }

    /// Run `record` with the labels and `grpc.status = code`.
    pub(crate) fn with_status(&self, code: tonic::Code, record: impl FnOnce(&[KeyValue])) {
        if code == tonic::Code::Ok {
            return record(&self.ok);
        }
        record(&[
            self.base[0].clone(),
            self.base[1].clone(),
            KeyValue::new("grpc.status", status_name(code)),
        ]);
    }
}

/// gRFC A66 and A96 client instruments on one OpenTelemetry `Meter`, with
/// the target and the registered methods they label calls with (see the
/// [module docs](self)).
///
/// Cheap to clone: clones share the instruments.
#[derive(Debug, Clone)]
pub struct GrpcMetrics {
    pub(crate) instruments: Arc<Instruments>,
    pub(crate) target: Option<StringValue>,
    /// Label values by path (`/package.Service/Method`).
    methods: Arc<HashMap<String, StringValue>>,
    /// Services whose every method is registered.
    services: Arc<HashSet<String>>,
    /// The labels of each registered method, and of every other one.
    labels: Arc<HashMap<String, Arc<Labels>>>,
    other: Arc<Labels>,
}

impl GrpcMetrics {
    /// The instruments on `meter`, no target, no method registered.
    pub fn new(meter: &Meter) -> Self {
        let instruments = Arc::new(Instruments::new(meter));
        let other = StringValue::from(OTHER);
        GrpcMetrics {
            other: Arc::new(Labels::new(instruments.clone(), other.clone(), other)),
            instruments,
            target: None,
            methods: Arc::default(),
            services: Arc::default(),
            labels: Arc::default(),
        }
    }

    /// The labels of each registered method, made again after a change.
    fn relabel(mut self) -> Self {
        let target = self.target();
        let labels = self.methods.iter().map(|(path, method)| {
            let labels = Labels::new(self.instruments.clone(), method.clone(), target.clone());
            (path.clone(), Arc::new(labels))
        });
        self.labels = Arc::new(labels.collect());
        let other = StringValue::from(OTHER);
        self.other = Arc::new(Labels::new(self.instruments.clone(), other, target));
        self
    }

    fn target(&self) -> StringValue {
        self.target
            .clone()
            .unwrap_or_else(|| StringValue::from(OTHER))
    }

    /// The labels of a call to `path`.
    pub(crate) fn labels(&self, path: &str) -> Arc<Labels> {
        if let Some(labels) = self.labels.get(path) {
            return labels.clone();
        }
        match self.label(path) {
            // A method of a registered service.
            method if method.as_str() != OTHER => {
                Arc::new(Labels::new(self.instruments.clone(), method, self.target()))
            }
            _ => self.other.clone(),
        }
    }

    /// The instruments on `provider`'s meter for this crate (scope
    /// `tonic-retry`, with its version).
    pub fn from_provider(provider: &(impl MeterProvider + ?Sized)) -> Self {
        Self::new(&provider.meter_with_scope(scope()))
    }

    /// The instruments on the global meter provider's meter for this crate
    /// (`opentelemetry::global::set_meter_provider`; a no-op until one is set).
    pub fn global() -> Self {
        Self::new(&opentelemetry::global::meter_with_scope(scope()))
    }

    /// A copy that labels calls with `target` (`grpc.target`: gRPC's
    /// canonical form is `dns:///host:port`).
    pub fn with_target(mut self, target: impl Into<String>) -> Self {
        self.target = Some(shared(target.into()));
        self.relabel()
    }

    /// A copy with `paths` (`/package.Service/Method`) registered as well:
    /// recorded under their names rather than `other`.
    pub fn with_methods<I>(mut self, paths: I) -> Self
    where
        I: IntoIterator,
        I::Item: Into<String>,
    {
        let methods = Arc::make_mut(&mut self.methods);
        for path in paths {
            let path = path.into();
            methods
                .entry(path.clone())
                .or_insert_with(|| label_of(&path));
        }
        self.relabel()
    }

    /// A copy with every method of `service` (`package.Service`) registered.
    pub(crate) fn with_service(mut self, service: &str) -> Self {
        Arc::make_mut(&mut self.services).insert(service.to_owned());
        self
    }

    /// The `grpc.method` value calls to `path` are recorded under: the
    /// method's name without its leading `/` if it is registered, else
    /// `"other"`.
    pub fn method_label(&self, path: &str) -> String {
        self.label(path).as_str().to_owned()
    }

    /// [`method_label`](Self::method_label), as the recorder uses it.
    pub(crate) fn label(&self, path: &str) -> StringValue {
        if let Some(label) = self.methods.get(path) {
            return label.clone();
        }
        let service = path.trim_start_matches('/').split_once('/').map(|(s, _)| s);
        match service {
            Some(s) if self.services.contains(s) => label_of(path),
            _ => StringValue::from(OTHER),
        }
    }
}

/// A path's label: A66's `package.Service/Method`.
fn label_of(path: &str) -> StringValue {
    shared(path.trim_start_matches('/').to_owned())
}

/// A label value whose clones share it: every recording clones its labels.
fn shared(value: String) -> StringValue {
    StringValue::from(Arc::<str>::from(value))
}

fn scope() -> InstrumentationScope {
    InstrumentationScope::builder(env!("CARGO_PKG_NAME"))
        .with_version(env!("CARGO_PKG_VERSION"))
        .build()
}

/// gRPC's name of a status code, the `grpc.status` label.
pub(crate) fn status_name(code: tonic::Code) -> &'static str {
    use tonic::Code;
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "CANCELLED",
        Code::Unknown => "UNKNOWN",
        Code::InvalidArgument => "INVALID_ARGUMENT",
        Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
        Code::NotFound => "NOT_FOUND",
        Code::AlreadyExists => "ALREADY_EXISTS",
        Code::PermissionDenied => "PERMISSION_DENIED",
        Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
        Code::FailedPrecondition => "FAILED_PRECONDITION",
        Code::Aborted => "ABORTED",
        Code::OutOfRange => "OUT_OF_RANGE",
        Code::Unimplemented => "UNIMPLEMENTED",
        Code::Internal => "INTERNAL",
        Code::Unavailable => "UNAVAILABLE",
        Code::DataLoss => "DATA_LOSS",
        Code::Unauthenticated => "UNAUTHENTICATED",
    }
}
