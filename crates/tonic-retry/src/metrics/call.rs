//! One call's recording: its labels, its attempts, and what A96 counts,
//! recorded as each attempt ends and once as the call ends.
//!
//! Both end exactly once: an attempt or a call dropped before it was
//! ended (a losing hedge, a call its caller abandoned) is recorded as
//! `CANCELLED` when it is dropped.

use std::sync::Arc;
use std::time::Duration;

use opentelemetry::{KeyValue, StringValue};
use tokio::time::Instant;
use tonic::Code;

use super::{GrpcMetrics, Instruments, OTHER, status_name};

/// What every recording of one call shares.
#[derive(Debug)]
struct Labels {
    instruments: Arc<Instruments>,
    /// `grpc.method`, `grpc.target`.
    base: [KeyValue; 2],
}

impl Labels {
    fn with_status(&self, code: Code) -> [KeyValue; 3] {
        [
            self.base[0].clone(),
            self.base[1].clone(),
            KeyValue::new("grpc.status", status_name(code)),
        ]
    }
}

/// One call in flight.
#[derive(Debug)]
pub(crate) struct Call {
    labels: Arc<Labels>,
    start: Instant,
    retries: u64,
    transparent: u64,
    hedges: u64,
    delay: Duration,
    /// Message bytes each attempt sends (the layer's request body).
    pub(crate) sent: Option<Arc<std::sync::atomic::AtomicU64>>,
    ended: bool,
}

/// One attempt in flight.
#[derive(Debug)]
pub(crate) struct Attempt {
    labels: Arc<Labels>,
    start: Instant,
    sent: Option<Arc<std::sync::atomic::AtomicU64>>,
    ended: bool,
}

impl Call {
    /// A call to `path`, labelled by `metrics`.
    pub(crate) fn new(metrics: &GrpcMetrics, path: &str) -> Self {
        let target = metrics
            .target
            .clone()
            .unwrap_or_else(|| StringValue::from(OTHER));
        let labels = Labels {
            instruments: metrics.instruments.clone(),
            base: [
                KeyValue::new("grpc.method", metrics.label(path)),
                KeyValue::new("grpc.target", target),
            ],
        };
        Call {
            labels: Arc::new(labels),
            start: Instant::now(),
            retries: 0,
            transparent: 0,
            hedges: 0,
            delay: Duration::ZERO,
            sent: None,
            ended: false,
        }
    }

    /// An attempt starts.
    pub(crate) fn attempt(&self) -> Attempt {
        let labels = self.labels.clone();
        labels.instruments.attempt_started.add(1, &labels.base);
        Attempt {
            labels,
            start: Instant::now(),
            sent: self.sent.clone(),
            ended: false,
        }
    }

    /// A retry after `wait` (transparent: an unsent request re-sent).
    pub(crate) fn retried(&mut self, wait: Duration, transparent: bool) {
        if transparent {
            self.transparent += 1;
        } else {
            self.retries += 1;
        }
        self.delay = self.delay.saturating_add(wait);
    }

    /// A hedge was sent.
    pub(crate) fn hedged(&mut self) {
        self.hedges += 1;
    }

    /// Time with no attempt in flight, other than a retry's wait.
    pub(crate) fn idle(&mut self, d: Duration) {
        self.delay = self.delay.saturating_add(d);
    }

    /// The call ends with `code`.
    pub(crate) fn end(mut self, code: Code) {
        self.record(code);
    }

    fn record(&mut self, code: Code) {
        if std::mem::replace(&mut self.ended, true) {
            return;
        }
        let i = &self.labels.instruments;
        let base = &self.labels.base;
        let elapsed = self.start.elapsed().as_secs_f64();
        i.call_duration
            .record(elapsed, &self.labels.with_status(code));
        for (n, h) in [
            (self.retries, &i.retries),
            (self.transparent, &i.transparent_retries),
            (self.hedges, &i.hedges),
        ] {
            if n > 0 {
                h.record(n, base);
            }
        }
        i.retry_delay.record(self.delay.as_secs_f64(), base);
    }
}

impl Drop for Call {
    fn drop(&mut self) {
        self.record(Code::Cancelled);
    }
}

impl Attempt {
    /// The attempt ends with `code`, having received `rcvd` message bytes
    /// (`None`: sizes unknown, not recorded).
    pub(crate) fn end(mut self, code: Code, rcvd: Option<u64>) {
        self.record(code, rcvd);
    }

    fn record(&mut self, code: Code, rcvd: Option<u64>) {
        if std::mem::replace(&mut self.ended, true) {
            return;
        }
        let i = &self.labels.instruments;
        let labels = self.labels.with_status(code);
        i.attempt_duration
            .record(self.start.elapsed().as_secs_f64(), &labels);
        if let Some(sent) = &self.sent {
            let sent = sent.load(std::sync::atomic::Ordering::Relaxed);
            i.attempt_sent.record(sent, &labels);
            i.attempt_rcvd.record(rcvd.unwrap_or(0), &labels);
        }
    }
}

impl Drop for Attempt {
    fn drop(&mut self) {
        self.record(Code::Cancelled, None);
    }
}
