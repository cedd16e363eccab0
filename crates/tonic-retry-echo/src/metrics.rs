//! An in-memory OpenTelemetry pipeline for the workspace's metrics tests.
//!
//! A test of recorded metrics needs a meter whose output it can read back
//! exactly: [`Pipeline`] is a meter provider exporting to the SDK's
//! in-memory exporter, and [`Pipeline::read`] flattens what was recorded
//! into [`Point`]s a test compares with plain values.

use std::collections::BTreeMap;

use opentelemetry::metrics::{Meter, MeterProvider as _};
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData};
use opentelemetry_sdk::metrics::{InMemoryMetricExporter, SdkMeterProvider};

/// A meter provider whose metrics a test reads back.
#[derive(Debug, Clone)]
pub struct Pipeline {
    provider: SdkMeterProvider,
    exporter: InMemoryMetricExporter,
}

/// One data point: an instrument, one label set, and its value (a
/// counter's sum; a histogram's count, sum and bucket counts).
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    /// The instrument's name.
    pub name: String,
    /// Its unit.
    pub unit: String,
    /// The labels, sorted by key.
    pub labels: BTreeMap<String, String>,
    /// Histogram: values recorded; counter: 1.
    pub count: u64,
    /// Histogram: their sum; counter: its value.
    pub sum: f64,
    /// Histogram: the bucket boundaries.
    pub bounds: Vec<f64>,
}

/// Everything recorded, as of one read.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// Every data point.
    pub points: Vec<Point>,
}

impl Default for Pipeline {
    fn default() -> Self {
        Self::new()
    }
}

impl Pipeline {
    /// A fresh provider and exporter.
    pub fn new() -> Self {
        let exporter = InMemoryMetricExporter::default();
        let provider = SdkMeterProvider::builder()
            .with_periodic_exporter(exporter.clone())
            .build();
        Pipeline { provider, exporter }
    }

    /// The provider.
    pub fn provider(&self) -> &SdkMeterProvider {
        &self.provider
    }

    /// A meter of the provider.
    pub fn meter(&self) -> Meter {
        self.provider.meter("test")
    }

    /// What was recorded so far (cumulative).
    pub fn read(&self) -> Recorded {
        self.provider.force_flush().expect("flush");
        let exported = self.exporter.get_finished_metrics().expect("export");
        self.exporter.reset();
        let mut points = Vec::new();
        let Some(last) = exported.last() else {
            return Recorded { points };
        };
        for scope in last.scope_metrics() {
            for metric in scope.metrics() {
                let point = |labels: BTreeMap<String, String>, count, sum, bounds| Point {
                    name: metric.name().to_owned(),
                    unit: metric.unit().to_owned(),
                    labels,
                    count,
                    sum,
                    bounds,
                };
                let labels = |kv: &mut dyn Iterator<Item = &opentelemetry::KeyValue>| {
                    kv.map(|kv| (kv.key.to_string(), kv.value.to_string()))
                        .collect::<BTreeMap<_, _>>()
                };
                match metric.data() {
                    AggregatedMetrics::U64(MetricData::Sum(s)) => {
                        for p in s.data_points() {
                            let l = labels(&mut p.attributes());
                            points.push(point(l, 1, p.value() as f64, Vec::new()));
                        }
                    }
                    AggregatedMetrics::U64(MetricData::Histogram(h)) => {
                        for p in h.data_points() {
                            let l = labels(&mut p.attributes());
                            let bounds = p.bounds().collect();
                            points.push(point(l, p.count(), p.sum() as f64, bounds));
                        }
                    }
                    AggregatedMetrics::F64(MetricData::Histogram(h)) => {
                        for p in h.data_points() {
                            let l = labels(&mut p.attributes());
                            let bounds = p.bounds().collect();
                            points.push(point(l, p.count(), p.sum(), bounds));
                        }
                    }
                    AggregatedMetrics::U64(MetricData::Gauge(g)) => {
                        for p in g.data_points() {
                            let l = labels(&mut p.attributes());
                            points.push(point(l, 1, p.value() as f64, Vec::new()));
                        }
                    }
                    other => panic!("{}: unexpected data {other:?}", metric.name()),
                }
            }
        }
        Recorded { points }
    }
}

impl Recorded {
    /// The points of instrument `name`.
    pub fn of(&self, name: &str) -> Vec<&Point> {
        self.points.iter().filter(|p| p.name == name).collect()
    }

    /// The one point of `name` whose labels include `labels`; panics
    /// (listing what there is) if there is not exactly one.
    pub fn one(&self, name: &str, labels: &[(&str, &str)]) -> &Point {
        let found: Vec<_> = self
            .of(name)
            .into_iter()
            .filter(|p| {
                labels
                    .iter()
                    .all(|(k, v)| p.labels.get(*k).map(String::as_str) == Some(*v))
            })
            .collect();
        match found[..] {
            [p] => p,
            _ => panic!(
                "{name} {labels:?}: {} point(s) among {:#?}",
                found.len(),
                self.of(name)
            ),
        }
    }

    /// `(count, sum)` of the one point of `name` with `labels`.
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> (u64, f64) {
        let p = self.one(name, labels);
        (p.count, p.sum)
    }

    /// Whether `name` has no point at all.
    pub fn absent(&self, name: &str) -> bool {
        self.of(name).is_empty()
    }
}
