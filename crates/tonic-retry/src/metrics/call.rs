//! One call's recording: its labels, its attempts, and what A96 counts,
//! recorded as each attempt ends and once as the call ends.
//!
//! Both end exactly once: an attempt or a call dropped before it was
//! ended (a losing hedge, a call its caller abandoned) is recorded as
//! `CANCELLED` when it is dropped.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;
use tonic::Code;

use super::{GrpcMetrics, Labels};

/// The message bytes each attempt of a call sends.
#[derive(Debug, Clone)]
pub(crate) enum Sent {
    /// A buffered request: known before it is sent.
    Known(u64),
    /// A request sent once: counted as it streams.
    Counted(Arc<AtomicU64>),
}

impl Sent {
    fn get(&self) -> u64 {
        match self {
            Sent::Known(n) => *n,
            Sent::Counted(n) => n.load(Ordering::Relaxed),
        }
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
    pub(crate) sent: Option<Sent>,
    attempts: u32,
    ended: bool,
}

/// One attempt in flight.
#[derive(Debug)]
pub(crate) struct Attempt {
    labels: Arc<Labels>,
    start: Instant,
    sent: Option<Sent>,
    ended: bool,
}

impl Call {
    /// A call to `path`, labelled by `metrics`.
    pub(crate) fn new(metrics: &GrpcMetrics, path: &str) -> Self {
        Call {
            labels: metrics.labels(path),
            start: Instant::now(),
            retries: 0,
            transparent: 0,
            hedges: 0,
            delay: Duration::ZERO,
            sent: None,
            attempts: 0,
            ended: false,
        }
    }

    /// An attempt starts (the first one as the call does: one clock read).
    pub(crate) fn attempt(&mut self) -> Attempt {
        let labels = self.labels.clone();
        labels.instruments.attempt_started.add(1, &labels.base);
        self.attempts += 1;
        let start = if self.attempts == 1 {
            self.start
        } else {
            Instant::now()
        };
        Attempt {
            labels,
            start,
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

    /// The call ends with `code` at `now`.
    pub(crate) fn end(mut self, code: Code, now: Instant) {
        self.record(code, now);
    }

    fn record(&mut self, code: Code, now: Instant) {
        if std::mem::replace(&mut self.ended, true) {
            return;
        }
        let i = &self.labels.instruments;
        let base = &self.labels.base;
        let elapsed = now.saturating_duration_since(self.start).as_secs_f64();
        self.labels
            .with_status(code, |l| i.call_duration.record(elapsed, l));
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
        self.record(Code::Cancelled, Instant::now());
    }
}

impl Attempt {
    /// The attempt ends with `code` at `now`, having received `rcvd`
    /// message bytes (`None`: not measured).
    pub(crate) fn end(mut self, code: Code, rcvd: Option<u64>, now: Instant) {
        self.record(code, rcvd, now);
    }

    fn record(&mut self, code: Code, rcvd: Option<u64>, now: Instant) {
        if std::mem::replace(&mut self.ended, true) {
            return;
        }
        let i = &self.labels.instruments;
        let elapsed = now.saturating_duration_since(self.start).as_secs_f64();
        let sent = self.sent.as_ref().map(Sent::get);
        self.labels.with_status(code, |labels| {
            i.attempt_duration.record(elapsed, labels);
            if let Some(sent) = sent {
                i.attempt_sent.record(sent, labels);
                i.attempt_rcvd.record(rcvd.unwrap_or(0), labels);
            }
        });
    }
}

impl Drop for Attempt {
    fn drop(&mut self) {
        self.record(Code::Cancelled, None, Instant::now());
    }
}
