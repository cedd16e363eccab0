//! The one seam between the drivers (the layer, the loop) and metrics.
//!
//! The drivers say what happened (an attempt started or ended, a retry,
//! a hedge, the response handed on); whether anything is recorded is
//! decided here. Without the `otel` feature every type here is empty and
//! every method does nothing, so the drivers read the same either way and
//! nothing of OpenTelemetry is compiled.

use std::time::Duration;

use http::{Request, Response};
use tonic::Code;
use tonic::body::Body;

use crate::boxed::BoxError;

#[cfg(feature = "otel")]
use crate::metrics::{GrpcMetrics, body, call};

/// The metrics of a layer or a loop, if any.
#[derive(Debug, Clone, Default)]
pub(crate) struct Meters {
    #[cfg(feature = "otel")]
    metrics: Option<GrpcMetrics>,
}

impl Meters {
    /// Record into `metrics`.
    #[cfg(feature = "otel")]
    pub(crate) fn new(metrics: GrpcMetrics) -> Self {
        Meters {
            metrics: Some(metrics),
        }
    }

    /// Register `path` (`/package.Service/Method`), or with `service`,
    /// every method of the service (`package.Service`).
    pub(crate) fn register(&mut self, path: Option<&str>, service: Option<&str>) {
        #[cfg(feature = "otel")]
        if let Some(m) = self.metrics.take() {
            let m = match path {
                Some(p) => m.with_methods([p]),
                None => m,
            };
            self.metrics = Some(match service {
                Some(s) => m.with_service(s),
                None => m,
            });
        }
        #[cfg(not(feature = "otel"))]
        let _ = (path, service);
    }

    /// Label calls with `target` unless the metrics name their own.
    pub(crate) fn default_target(&mut self, target: &str) {
        #[cfg(feature = "otel")]
        if let Some(m) = self.metrics.take() {
            self.metrics = Some(match m.target {
                Some(_) => m,
                None => m.with_target(target),
            });
        }
        #[cfg(not(feature = "otel"))]
        let _ = target;
    }

    /// A call to `path` starts.
    pub(crate) fn call(&self, path: &str) -> CallRecorder {
        #[cfg(not(feature = "otel"))]
        let _ = path;
        CallRecorder {
            #[cfg(feature = "otel")]
            inner: self.metrics.as_ref().map(|m| call::Call::new(m, path)),
        }
    }
}

/// One call's recording (nothing without metrics).
#[derive(Debug)]
pub(crate) struct CallRecorder {
    #[cfg(feature = "otel")]
    inner: Option<call::Call>,
}

/// One attempt's recording (nothing without metrics).
#[derive(Debug)]
pub(crate) struct AttemptRecorder {
    #[cfg(feature = "otel")]
    inner: Option<call::Attempt>,
}

impl CallRecorder {
    /// The message bytes of the request every attempt sends, buffered.
    pub(crate) fn request_size<'a>(&mut self, chunks: impl IntoIterator<Item = &'a bytes::Bytes>) {
        #[cfg(feature = "otel")]
        if let Some(c) = &mut self.inner {
            c.sent = Some(call::Sent::Known(crate::framing::payload_len(chunks)));
        }
        #[cfg(not(feature = "otel"))]
        let _ = chunks;
    }

    /// A request sent once, its message bytes counted as it is sent.
    pub(crate) fn count_request(&mut self, req: Request<Body>) -> Request<Body> {
        #[cfg(feature = "otel")]
        if let Some(c) = &mut self.inner {
            let sent = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
            c.sent = Some(call::Sent::Counted(sent.clone()));
            return req.map(|b| body::CountedRequest::wrap(b, sent));
        }
        req
    }

    /// An attempt starts.
    pub(crate) fn attempt(&mut self) -> AttemptRecorder {
        AttemptRecorder {
            #[cfg(feature = "otel")]
            inner: self.inner.as_mut().map(call::Call::attempt),
        }
    }

    /// A retry after `wait`; `transparent`: an unsent request re-sent (gRFC A6).
    pub(crate) fn retried(&mut self, wait: Duration, transparent: bool) {
        #[cfg(feature = "otel")]
        if let Some(c) = &mut self.inner {
            c.retried(wait, transparent);
        }
        #[cfg(not(feature = "otel"))]
        let _ = (wait, transparent);
    }

    /// A hedge is sent.
    pub(crate) fn hedged(&mut self) {
        #[cfg(feature = "otel")]
        if let Some(c) = &mut self.inner {
            c.hedged();
        }
    }

    /// `d` passed with no attempt in flight (other than a retry's wait).
    pub(crate) fn idle(&mut self, d: Duration) {
        #[cfg(feature = "otel")]
        if let Some(c) = &mut self.inner {
            c.idle(d);
        }
        #[cfg(not(feature = "otel"))]
        let _ = d;
    }

    /// The call ends with `code`, with nothing handed on to read.
    pub(crate) fn end(self, code: Code) {
        #[cfg(feature = "otel")]
        if let Some(c) = self.inner {
            c.end(code, tokio::time::Instant::now());
        }
        #[cfg(not(feature = "otel"))]
        let _ = code;
    }

    /// The call ends by handing `result` to the caller; the attempt it came
    /// from, if still open, ends with it: now, if its status was read
    /// (`ended`: its code and message bytes), else when the caller has
    /// read the response to its status.
    pub(crate) fn deliver(
        self,
        attempt: Option<AttemptRecorder>,
        ended: Option<(Code, u64)>,
        result: Result<Response<Body>, BoxError>,
    ) -> Result<Response<Body>, BoxError> {
        #[cfg(feature = "otel")]
        if let Some(c) = self.inner {
            let attempt = attempt.and_then(|a| a.inner);
            let Some((code, received)) = ended else {
                return body::deliver(attempt, c, result);
            };
            let now = tokio::time::Instant::now();
            if let Some(a) = attempt {
                a.end(code, Some(received), now);
            }
            c.end(code, now);
            return result;
        }
        let _ = (attempt, ended);
        result
    }
}

impl AttemptRecorder {
    /// The attempt ends as the layer read it (`None`: committed unread,
    /// recorded as OK with what was read so far, nothing).
    pub(crate) fn ended(self, ended: Option<(Code, u64)>) {
        let (code, received) = ended.unwrap_or((Code::Ok, 0));
        self.end(code, Some(received));
    }

    /// The attempt ends with `code`, having received `rcvd` message bytes
    /// (`None`: not measured).
    pub(crate) fn end(self, code: Code, rcvd: Option<u64>) {
        #[cfg(feature = "otel")]
        if let Some(a) = self.inner {
            a.end(code, rcvd, tokio::time::Instant::now());
        }
        #[cfg(not(feature = "otel"))]
        let _ = (code, rcvd);
    }
}
