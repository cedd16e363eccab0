//! [`ReattachableExecution`]: the thin async driver over [`ReattachCore`].

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use tokio::time::Instant;
use tokio_stream::Stream;
use tonic::Status;
use tonic::codec::Streaming;

use super::core::{Action, CoreCounters, Event, Open, ReattachCore, Release};
use super::release::{ReleaseTracker, Releaser};
use super::{ReattachError, ReattachOptions};
use crate::proto::{ExecutePlanRequest, ExecutePlanResponse};
use crate::retrying::Retrying;
use crate::transport::SparkClient;

/// Live counters of one execution.
#[derive(Debug, Clone, Default)]
pub struct ExecutionStats {
    inner: Arc<Mutex<CoreCounters>>,
}

impl ExecutionStats {
    /// A snapshot of the counters.
    pub fn snapshot(&self) -> CoreCounters {
        *self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

struct Driver {
    core: ReattachCore,
    client: SparkClient,
    retrying: Retrying,
    releaser: Releaser,
    options: ReattachOptions,
    current: Option<Streaming<ExecutePlanResponse>>,
    segment_deadline: Option<Instant>,
    stats: ExecutionStats,
}

impl Driver {
    async fn next(&mut self) -> Option<Result<ExecutePlanResponse, ReattachError>> {
        let mut action = self.core.poll_next(&self.retrying);
        let item = loop {
            action = match action {
                Action::Finish => break None,
                Action::Emit(resp, release) => {
                    self.release(release);
                    break Some(Ok(*resp));
                }
                Action::Fail(err, release) => {
                    self.current = None;
                    if let Some(r) = release {
                        self.release(r);
                    }
                    break Some(Err(err));
                }
                Action::SleepThenOpen(delay, open) => {
                    self.current = None;
                    tracing::debug!(
                        operation_id = self.core.operation_id(),
                        wait_ms = delay.as_millis() as u64,
                        "reattachable execution: backing off before the next segment"
                    );
                    self.retrying.sleeper().sleep(delay).await;
                    self.open(open).await
                }
                Action::Open(open) => self.open(open).await,
                Action::Read => self.read().await,
            };
        };
        *self.stats.inner.lock().unwrap_or_else(|e| e.into_inner()) = self.core.counters();
        item
    }

    fn release(&self, release: Release) {
        let req = self.core.release_request(&release);
        match release {
            Release::Until(_) => self.releaser.release_until(req),
            Release::All => self.releaser.release_all(req),
        }
    }

    async fn open(&mut self, open: Open) -> Action {
        self.current = None;
        match &open {
            Open::Execute(_) => tracing::debug!(
                operation_id = self.core.operation_id(),
                "reattachable execution: sending ExecutePlan"
            ),
            Open::Reattach(r) => tracing::debug!(
                operation_id = self.core.operation_id(),
                last_response_id = r.last_response_id.as_deref().unwrap_or(""),
                "reattachable execution: sending ReattachExecute"
            ),
        }
        let deadline = match &open {
            Open::Execute(_) => self.options.deadlines.reattachable_execute_plan,
            Open::Reattach(_) => self.options.deadlines.reattach_execute,
        };
        // `checked_add`: a deadline too far out to represent is no deadline,
        // never a panic.
        self.segment_deadline = deadline.and_then(|d| Instant::now().checked_add(d));
        let mut client = self.client.clone();
        let call = async move {
            match open {
                Open::Execute(req) => {
                    let mut req = tonic::Request::new(req);
                    if let Some(d) = deadline {
                        req.set_timeout(d);
                    }
                    client.execute_plan(req).await
                }
                Open::Reattach(req) => {
                    let mut req = tonic::Request::new(req);
                    if let Some(d) = deadline {
                        req.set_timeout(d);
                    }
                    client.reattach_execute(req).await
                }
            }
        };
        let result = match self.segment_deadline {
            Some(at) => match tokio::time::timeout_at(at, call).await {
                Ok(r) => r,
                Err(_) => return self.core.on_event(Event::SegmentDeadline, &self.retrying),
            },
            None => call.await,
        };
        match result {
            Ok(resp) => {
                self.current = Some(resp.into_inner());
                Action::Read
            }
            Err(status) => self.failed(status, "opening"),
        }
    }

    /// A segment failed, while `during` (opening or reading) it.
    fn failed(&mut self, status: Status, during: &'static str) -> Action {
        self.current = None;
        tracing::debug!(
            operation_id = self.core.operation_id(),
            during,
            code = ?status.code(),
            message = status.message(),
            "reattachable execution: segment failed"
        );
        self.core.on_event(Event::Error(status), &self.retrying)
    }

    async fn read(&mut self) -> Action {
        let Some(stream) = self.current.as_mut() else {
            let status = Status::internal("reattachable execution: no open stream to read");
            return self.core.on_event(Event::Error(status), &self.retrying);
        };
        let idle = self.options.idle_timeout;
        let idle_at = idle.and_then(|d| Instant::now().checked_add(d));
        let wake_at = match (self.segment_deadline, idle_at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let result = match wake_at {
            Some(at) => match tokio::time::timeout_at(at, stream.message()).await {
                Ok(r) => r,
                Err(_) => {
                    self.current = None;
                    tracing::debug!(
                        operation_id = self.core.operation_id(),
                        "reattachable execution: no message before the idle timeout or segment deadline"
                    );
                    let event = match (idle, idle_at) {
                        (Some(d), Some(i))
                            if Some(i) == wake_at
                                && self.segment_deadline.is_none_or(|s| i < s) =>
                        {
                            Event::Stalled(d)
                        }
                        _ => Event::SegmentDeadline,
                    };
                    return self.core.on_event(event, &self.retrying);
                }
            },
            None => stream.message().await,
        };
        let event = match result {
            Ok(Some(msg)) => Event::Response(Box::new(msg)),
            Ok(None) => {
                self.current = None;
                tracing::debug!(
                    operation_id = self.core.operation_id(),
                    "reattachable execution: segment ended cleanly"
                );
                Event::EndOfStream
            }
            Err(status) => return self.failed(status, "reading"),
        };
        self.core.on_event(event, &self.retrying)
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        if let Some(release) = self.core.on_drop() {
            self.release(release);
        }
    }
}

type NextFuture = Pin<
    Box<
        dyn Future<
                Output = (
                    Box<Driver>,
                    Option<Result<ExecutePlanResponse, ReattachError>>,
                ),
            > + Send,
    >,
>;

/// An `ExecutePlan` result stream that survives transient faults.
///
/// It yields every response exactly once, in order, including the final
/// `ResultComplete`, resuming with `ReattachExecute` from the last response
/// it yielded after a clean stream end, a retryable error, a deadline or a
/// stall. See [`crate::reattach`] for the semantics. Dropping it before the
/// end sends `ReleaseExecute(all)` in the background.
pub struct ReattachableExecution {
    driver: Option<Box<Driver>>,
    pending: Option<NextFuture>,
    operation_id: String,
    stats: ExecutionStats,
}

impl fmt::Debug for ReattachableExecution {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReattachableExecution")
            .field("operation_id", &self.operation_id)
            .field("stats", &self.stats.snapshot())
            .finish()
    }
}

impl ReattachableExecution {
    /// Start an execution of `request` over `client`.
    ///
    /// Nothing is sent until the stream is first polled. Fails only if the
    /// request carries an operation id that is not a UUID.
    pub fn new(
        client: SparkClient,
        request: ExecutePlanRequest,
        retrying: Retrying,
        options: ReattachOptions,
    ) -> Result<Self, ReattachError> {
        Self::with_tracker(client, request, retrying, options, ReleaseTracker::new())
    }

    /// Like [`new`](Self::new), counting background releases in `tracker`.
    pub fn with_tracker(
        client: SparkClient,
        request: ExecutePlanRequest,
        retrying: Retrying,
        options: ReattachOptions,
        tracker: ReleaseTracker,
    ) -> Result<Self, ReattachError> {
        let core = ReattachCore::new(request)?;
        let operation_id = core.operation_id().to_owned();
        let releaser = Releaser::new(client.clone(), retrying.clone(), tracker);
        let stats = ExecutionStats::default();
        Ok(ReattachableExecution {
            driver: Some(Box::new(Driver {
                core,
                client,
                retrying,
                releaser,
                options,
                current: None,
                segment_deadline: None,
                stats: stats.clone(),
            })),
            pending: None,
            operation_id,
            stats,
        })
    }

    /// The operation id of this execution.
    pub fn operation_id(&self) -> &str {
        &self.operation_id
    }

    /// Live counters (responses, reattaches, re-executes, retries).
    pub fn stats(&self) -> ExecutionStats {
        self.stats.clone()
    }

    /// The server-side session id seen so far (available between polls).
    pub fn server_side_session_id(&self) -> Option<String> {
        self.driver
            .as_ref()
            .and_then(|d| d.core.server_side_session_id().map(str::to_owned))
    }

    /// The next response, or `None` at the end.
    pub async fn next_response(&mut self) -> Option<Result<ExecutePlanResponse, ReattachError>> {
        std::future::poll_fn(|cx| Pin::new(&mut *self).poll_next(cx)).await
    }
}

impl Stream for ReattachableExecution {
    type Item = Result<ExecutePlanResponse, ReattachError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.pending.is_none() {
            let Some(mut driver) = self.driver.take() else {
                return Poll::Ready(None);
            };
            self.pending = Some(Box::pin(async move {
                let item = driver.next().await;
                (driver, item)
            }));
        }
        let fut = self.pending.as_mut().expect("pending future set above");
        let (driver, item) = std::task::ready!(fut.as_mut().poll(cx));
        self.pending = None;
        self.driver = Some(driver);
        Poll::Ready(item)
    }
}

#[cfg(test)]
mod tests {
    /// The stream is `Send`, so it can cross tasks and be spawned.
    #[test]
    fn execution_is_send() {
        fn is_send<T: Send>() {}
        is_send::<super::ReattachableExecution>();
    }
}
