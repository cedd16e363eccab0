//! The session's own metrics (feature `otel`), behind one seam.
//!
//! gRPC's instruments (gRFC A66 and A96, recorded by `tonic-retry` for the
//! session's unary calls) say nothing of what makes a Spark Connect client
//! survive faults: result streams reattached, queries re-executed or
//! resumed, sessions renewed, executions released, rows received. These
//! are counted here, under the `spark_connect.client.` prefix, with labels
//! that stay bounded (a cause, an outcome; never an operation or session
//! id). The table is in `docs/metrics.md`.
//!
//! Without the feature every type here is empty and every method does
//! nothing, so the session's code reads the same either way.

use crate::reattach::StreamStats;
use crate::reattach::stats::Observers;

#[cfg(feature = "otel")]
use opentelemetry::KeyValue;
#[cfg(feature = "otel")]
use opentelemetry::metrics::{Counter, Meter};

/// Every method of `SparkConnectService`, registered for gRPC's metrics
/// (recorded by name; a method not here would be `other`).
#[cfg(feature = "otel")]
pub(crate) const SPARK_CONNECT_PATHS: [&str; 12] = [
    "/spark.connect.SparkConnectService/ExecutePlan",
    "/spark.connect.SparkConnectService/AnalyzePlan",
    "/spark.connect.SparkConnectService/Config",
    "/spark.connect.SparkConnectService/AddArtifacts",
    "/spark.connect.SparkConnectService/ArtifactStatus",
    "/spark.connect.SparkConnectService/Interrupt",
    "/spark.connect.SparkConnectService/ReattachExecute",
    "/spark.connect.SparkConnectService/ReleaseExecute",
    "/spark.connect.SparkConnectService/ReleaseSession",
    "/spark.connect.SparkConnectService/FetchErrorDetails",
    "/spark.connect.SparkConnectService/CloneSession",
    "/spark.connect.SparkConnectService/GetStatus",
];

/// The prefix of every instrument of the session's own.
#[cfg(feature = "otel")]
const PREFIX: &str = "spark_connect.client.";

#[cfg(feature = "otel")]
#[derive(Debug)]
#[cfg_attr(not(feature = "arrow"), allow(dead_code))]
struct Instruments {
    reattaches: Counter<u64>,
    re_executes: Counter<u64>,
    resumptions: Counter<u64>,
    rows: Counter<u64>,
    bytes: Counter<u64>,
    renewals: Counter<u64>,
    releases: Counter<u64>,
    upload_retries: Counter<u64>,
}

/// The session's instruments, if it records any. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub(crate) struct SessionMeters {
    #[cfg(feature = "otel")]
    inner: Option<std::sync::Arc<Instruments>>,
}

impl SessionMeters {
    /// The instruments, on `meter`.
    #[cfg(feature = "otel")]
    pub(crate) fn new(meter: &Meter) -> Self {
        let counter = |name: &str, unit: &'static str, description: &'static str| {
            meter
                .u64_counter(format!("{PREFIX}{name}"))
                .with_unit(unit)
                .with_description(description)
                .build()
        };
        let inner = Instruments {
            reattaches: counter(
                "result.reattaches",
                "{reattach}",
                "Result streams reattached (ReattachExecute), by cause.",
            ),
            re_executes: counter(
                "result.re_executes",
                "{execution}",
                "Executions sent again after the server no longer knew them (NOT_FOUND).",
            ),
            resumptions: counter(
                "result.resumptions",
                "{resumption}",
                "Queries re-executed after a lost execution and resumed after the rows delivered.",
            ),
            rows: counter("result.rows", "{row}", "Result rows received."),
            bytes: counter(
                "result.bytes",
                "By",
                "Arrow IPC bytes of result batches received.",
            ),
            renewals: counter(
                "session.renewals",
                "{renewal}",
                "Stale sessions moved to a fresh server-side session.",
            ),
            releases: counter(
                "releases",
                "{release}",
                "Background ReleaseExecute calls, by outcome.",
            ),
            upload_retries: counter(
                "upload.retries",
                "{retry}",
                "Retries of artifact uploads (ArtifactStatus, AddArtifacts), by the upload's outcome.",
            ),
        };
        SessionMeters {
            inner: Some(std::sync::Arc::new(inner)),
        }
    }

    /// What one execution reports to: its counters after each step, and
    /// its releases' outcomes.
    pub(crate) fn observers(&self) -> Observers {
        let mut stream = self.stream();
        let meters = self.clone();
        Observers {
            stats: Box::new(move |now| stream.update(now)),
            released: std::sync::Arc::new(move |ok| meters.released(ok)),
        }
    }

    /// A fresh recorder for one execution's stream.
    pub(crate) fn stream(&self) -> StreamMeter {
        StreamMeter {
            #[cfg(feature = "otel")]
            meters: self.clone(),
            #[cfg(feature = "otel")]
            last: StreamStats::default(),
        }
    }

    /// A resumption began.
    // Results and uploads are Arrow's (feature `arrow`).
    #[cfg_attr(not(feature = "arrow"), allow(dead_code))]
    pub(crate) fn resumed(&self) {
        #[cfg(feature = "otel")]
        if let Some(i) = &self.inner {
            i.resumptions.add(1, &[]);
        }
    }

    /// `rows` result rows (or none) and `bytes` of Arrow data arrived.
    // Results and uploads are Arrow's (feature `arrow`).
    #[cfg_attr(not(feature = "arrow"), allow(dead_code))]
    pub(crate) fn received(&self, rows: u64, bytes: u64) {
        #[cfg(feature = "otel")]
        if let Some(i) = &self.inner {
            if rows > 0 {
                i.rows.add(rows, &[]);
            }
            if bytes > 0 {
                i.bytes.add(bytes, &[]);
            }
        }
        #[cfg(not(feature = "otel"))]
        let _ = (rows, bytes);
    }

    /// A stale session was renewed.
    pub(crate) fn renewed(&self) {
        #[cfg(feature = "otel")]
        if let Some(i) = &self.inner {
            i.renewals.add(1, &[]);
        }
    }

    /// A background release ended (`ok`: the server answered).
    pub(crate) fn released(&self, ok: bool) {
        #[cfg(feature = "otel")]
        if let Some(i) = &self.inner {
            i.releases.add(1, &[outcome(ok)]);
        }
        #[cfg(not(feature = "otel"))]
        let _ = ok;
    }

    /// An upload ended after `retries` retries (`ok`: it succeeded).
    // Results and uploads are Arrow's (feature `arrow`).
    #[cfg_attr(not(feature = "arrow"), allow(dead_code))]
    pub(crate) fn upload_retried(&self, retries: u64, ok: bool) {
        #[cfg(feature = "otel")]
        if let Some(i) = &self.inner
            && retries > 0
        {
            i.upload_retries.add(retries, &[outcome(ok)]);
        }
        #[cfg(not(feature = "otel"))]
        let _ = (retries, ok);
    }
}

#[cfg(feature = "otel")]
fn outcome(ok: bool) -> KeyValue {
    KeyValue::new("outcome", if ok { "ok" } else { "failed" })
}

/// One execution's stream: what its counters gained since the last look.
#[derive(Debug, Default)]
pub(crate) struct StreamMeter {
    #[cfg(feature = "otel")]
    meters: SessionMeters,
    #[cfg(feature = "otel")]
    last: StreamStats,
}

impl StreamMeter {
    /// Record what the stream did since the last call, from its counters
    /// now. A reattach is counted with its cause as the cause is seen: a
    /// stream that ended without its result (`graceful_end`), a stream
    /// given up as silent (`stall`), any other fault (`fault`).
    pub(crate) fn update(&mut self, now: &StreamStats) {
        #[cfg(feature = "otel")]
        if let Some(i) = &self.meters.inner {
            let last = &self.last;
            let faults = |s: &StreamStats| {
                s.reattaches
                    .saturating_sub(s.graceful_ends)
                    .saturating_sub(s.stalls)
            };
            for (cause, n) in [
                (
                    "graceful_end",
                    now.graceful_ends.saturating_sub(last.graceful_ends),
                ),
                ("stall", now.stalls.saturating_sub(last.stalls)),
                ("fault", faults(now).saturating_sub(faults(last))),
            ] {
                if n > 0 {
                    i.reattaches.add(n, &[KeyValue::new("cause", cause)]);
                }
            }
            let re_executes = now.re_executes.saturating_sub(last.re_executes);
            if re_executes > 0 {
                i.re_executes.add(re_executes, &[]);
            }
            self.last = *now;
        }
        #[cfg(not(feature = "otel"))]
        let _ = now;
    }
}

#[cfg(all(test, feature = "otel"))]
mod tests {
    use super::{PREFIX, SessionMeters, StreamStats};
    use tonic_retry_echo::metrics::Pipeline;

    /// Causes are counted once each, whichever step of the stream sees
    /// the reattach and whichever sees its cause.
    #[test]
    fn reattaches_by_cause_from_counters_that_grow_in_any_order() {
        let pipeline = Pipeline::new();
        let mut meter = SessionMeters::new(&pipeline.meter()).stream();
        let steps = [
            // A graceful end seen before its reattach opens, then the reattach.
            (0, 1, 0, 0),
            (1, 1, 0, 0),
            // A fault's reattach, then a stall and its reattach in one step.
            (2, 1, 0, 0),
            (3, 1, 1, 0),
            // A re-execute.
            (3, 1, 1, 1),
        ];
        for (reattaches, graceful_ends, stalls, re_executes) in steps {
            meter.update(&StreamStats {
                reattaches,
                graceful_ends,
                stalls,
                re_executes,
                ..StreamStats::default()
            });
        }
        let m = pipeline.read();
        let by = |cause| m.value(&format!("{PREFIX}result.reattaches"), &[("cause", cause)]);
        assert_eq!(by("graceful_end").1, 1.0);
        assert_eq!(by("fault").1, 1.0);
        assert_eq!(by("stall").1, 1.0);
        assert_eq!(m.value(&format!("{PREFIX}result.re_executes"), &[]).1, 1.0);
    }
}
