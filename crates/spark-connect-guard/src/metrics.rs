//! A Prometheus scrape endpoint for the guard's counts (feature
//! `metrics`), off until asked for.
//!
//! *Why `prometheus-client`:* it is the Prometheus project's own Rust
//! client, small (no global registry, no protobuf by default), and encodes
//! OpenMetrics text; the counts are read from the guard's atomics at
//! scrape time, so nothing is recorded twice. An OpenTelemetry pipeline
//! (SDK, reader, exporter) would keep a second copy of every count, its
//! Prometheus exporter was declared discontinued at 0.29, and OTLP needs a
//! collector beside the guard.

use std::convert::Infallible;
use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use hyper_util::rt::TokioIo;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::{Registry, Unit};
use tokio::net::TcpListener;

use crate::error::GuardError;
use crate::stats::Counters;

#[derive(Debug)]
struct GuardCollector(Arc<Counters>);

fn gauge(enc: &mut DescriptorEncoder, name: &str, help: &str, v: u64) -> fmt::Result {
    let m = ConstGauge::new(i64::try_from(v).unwrap_or(i64::MAX));
    m.encode(enc.encode_descriptor(name, help, None, MetricType::Gauge)?)
}

fn counter(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    v: u64,
) -> fmt::Result {
    ConstCounter::new(v).encode(enc.encode_descriptor(name, help, unit, MetricType::Counter)?)
}

impl Collector for GuardCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> fmt::Result {
        let s = self.0.snapshot();
        let serving = u64::from(self.0.serving.load(Ordering::Relaxed));
        gauge(
            &mut enc,
            "spark_connect_guard_serving",
            "1 while the health status is SERVING",
            serving,
        )?;
        gauge(
            &mut enc,
            "spark_connect_guard_clients",
            "Client connections open",
            s.clients,
        )?;
        counter(
            &mut enc,
            "spark_connect_guard_connections",
            "Client connections accepted",
            None,
            s.connections_accepted,
        )?;
        gauge(
            &mut enc,
            "spark_connect_guard_open_streams",
            "Calls open (health checks excluded)",
            s.open_calls,
        )?;
        counter(
            &mut enc,
            "spark_connect_guard_calls_started",
            "Calls started (health checks excluded)",
            None,
            s.calls_started,
        )?;
        counter(
            &mut enc,
            "spark_connect_guard_sent",
            "Response bytes sent towards clients",
            Some(&Unit::Bytes),
            s.bytes_to_clients,
        )?;
        counter(
            &mut enc,
            "spark_connect_guard_refused",
            "Calls refused for a missing or wrong client token",
            None,
            s.refused,
        )?;
        counter(
            &mut enc,
            "spark_connect_guard_drain_cuts",
            "Calls a drain ended with UNAVAILABLE",
            None,
            s.cut_by_drain,
        )?;
        counter(
            &mut enc,
            "spark_connect_guard_re_executes",
            "ExecutePlans sent again after the server lost one before any response",
            None,
            s.re_executes,
        )?;
        counter(
            &mut enc,
            "spark_connect_guard_resumed_streams",
            "Executions that ended after reattaching at least once",
            None,
            s.resumed_streams,
        )?;
        let mut family = enc.encode_descriptor(
            "spark_connect_guard_reattaches",
            "Reattaches of ended executions, by cause",
            None,
            MetricType::Counter,
        )?;
        for (cause, n) in &s.reattaches {
            ConstCounter::new(*n).encode(family.encode_family(&[("cause", *cause)])?)?;
        }
        let mut family = enc.encode_descriptor(
            "spark_connect_guard_calls_ended",
            "Calls ended, by Spark Connect method and gRPC status code",
            None,
            MetricType::Counter,
        )?;
        for (method, code, n) in &s.ended {
            let labels = [("method", *method), ("code", *code)];
            ConstCounter::new(*n).encode(family.encode_family(&labels)?)?;
        }
        Ok(())
    }
}

/// Binds the scrape endpoint; serves `GET /metrics` until aborted.
pub(crate) async fn start(
    addr: SocketAddr,
    counters: Arc<Counters>,
) -> Result<(SocketAddr, tokio::task::JoinHandle<()>), GuardError> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|source| GuardError::Listen { addr, source })?;
    let bound = listener
        .local_addr()
        .map_err(|source| GuardError::Listen { addr, source })?;
    let mut registry = Registry::default();
    registry.register_collector(Box::new(GuardCollector(counters)));
    let registry = Arc::new(registry);
    let task = tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                continue;
            };
            let registry = registry.clone();
            tokio::spawn(async move {
                let service =
                    hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
                        let registry = registry.clone();
                        async move { Ok::<_, Infallible>(answer(&req, &registry)) }
                    });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tcp), service)
                    .await;
            });
        }
    });
    tracing::info!(%bound, "spark-connect-guard: metrics on http://{bound}/metrics");
    Ok((bound, task))
}

fn answer<B>(req: &http::Request<B>, registry: &Registry) -> http::Response<String> {
    let reply = |status: http::StatusCode, body: String, kind: &'static str| {
        let mut r = http::Response::new(body);
        *r.status_mut() = status;
        r.headers_mut().insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static(kind),
        );
        r
    };
    if req.method() != http::Method::GET || req.uri().path() != "/metrics" {
        return reply(
            http::StatusCode::NOT_FOUND,
            "GET /metrics\n".into(),
            "text/plain",
        );
    }
    let mut text = String::new();
    match prometheus_client::encoding::text::encode(&mut text, registry) {
        Ok(()) => reply(
            http::StatusCode::OK,
            text,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        ),
        Err(_) => reply(
            http::StatusCode::INTERNAL_SERVER_ERROR,
            String::new(),
            "text/plain",
        ),
    }
}
