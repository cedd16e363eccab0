//! [`ReattachableExecution`]: the thin async driver over [`ReattachCore`].
//!
//! The driver's step is an `async fn`; [`Stream::poll_next`] moves the driver
//! into a freshly boxed future for each response and takes it back when the
//! response is ready. That box (about 4 KiB) is kept on purpose: measured with
//! `benches/stream.rs` (`--only box`, interleaved A/B in one run) it costs
//! 50–63 ns per response, 0.04 % of even a 16-row response over loopback, and
//! end to end the difference is below the noise. Figures in
//! `docs/benchmarks.md`.
//!
//! Every read runs in the execution's `spark_connect` span (OpenTelemetry's
//! `rpc.system`, `rpc.service`, `rpc.method = "ExecutePlan"`, and Spark's
//! `operation_id` and `session_id`), so its events, the retry loop's
//! `retrying` and `[RETRIES_EXCEEDED]` among them, name the execution.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::time::Instant;
use tokio_stream::Stream;
use tonic::Status;
use tonic::codec::Streaming;
use tracing::Instrument;

use super::core::{Action, Event, Open, ReattachCore, Release};
use super::release::{ReleaseTracker, Releaser};
use super::stats::{StreamStats, StreamStatsHandle};
use super::{ReattachError, ReattachOptions};
use crate::meters::{SessionMeters, StreamMeter};
use crate::proto::{ExecutePlanRequest, ExecutePlanResponse};
use crate::reconnect::FreshConnection;
use crate::retrying::Retrying;
use crate::token::cache::Credentials;
use crate::token::service::TokenUsed;
use crate::transport::SparkClient;

struct Driver {
    core: ReattachCore,
    client: SparkClient,
    retrying: Retrying,
    releaser: Releaser,
    options: ReattachOptions,
    current: Option<Streaming<ExecutePlanResponse>>,
    segment_deadline: Option<Instant>,
    stats: StreamStatsHandle,
    /// The session's credentials, when its tokens are refreshed.
    credentials: Option<Credentials>,
    /// Which token the current segment's request carried.
    token_used: TokenUsed,
    meter: StreamMeter,
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
                        wait_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
                        "reattachable execution: backing off before the next segment"
                    );
                    self.retrying.sleeper().sleep(delay).await;
                    self.open(open).await
                }
                Action::Open(open) => self.open(open).await,
                Action::RefreshThenOpen(open) => {
                    self.current = None;
                    if let Some(c) = &self.credentials {
                        c.invalidate(self.token_used.serial());
                    }
                    tracing::debug!(
                        "reattachable execution: token refused, reopening with a fresh one"
                    );
                    self.open(open).await
                }
                Action::Read => self.read().await,
            };
        };
        let stats = self.core.stats();
        self.meter.update(&stats);
        self.stats.set(stats);
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
            Open::Execute(_) => tracing::debug!("reattachable execution: sending ExecutePlan"),
            Open::Reattach(r) => tracing::debug!(
                last_response_id = r.last_response_id.as_deref().unwrap_or(""),
                "reattachable execution: sending ReattachExecute"
            ),
        }
        let deadline = match &open {
            Open::Execute(_) => self.options.deadlines.reattachable_execute_plan,
            Open::Reattach(_) => self.options.deadlines.reattach_execute,
        };
        self.segment_deadline = deadline.and_then(|d| Instant::now().checked_add(d));
        let fresh = self.core.opening_after_stall();
        if fresh {
            tracing::debug!(
                "reattachable execution: reattaching over a fresh connection after a stall"
            );
        }
        let mut client = self.client.clone();
        self.token_used = TokenUsed::default();
        let used = self.token_used.clone();
        let call = async move {
            match open {
                Open::Execute(req) => {
                    client
                        .execute_plan(request(req, deadline, fresh, used))
                        .await
                }
                Open::Reattach(req) => {
                    client
                        .reattach_execute(request(req, deadline, fresh, used))
                        .await
                }
            }
        };
        let result = match self.options.bounded(self.segment_deadline, call).await {
            Ok(r) => r,
            Err(event) => {
                tracing::debug!(
                    "reattachable execution: no response headers before the idle timeout or segment deadline"
                );
                return self.core.on_event(event, &self.retrying);
            }
        };
        match result {
            Ok(resp) => {
                self.current = Some(resp.into_inner());
                self.core.on_event(Event::Opened, &self.retrying)
            }
            Err(status) => self.failed(status, "opening"),
        }
    }

    /// A segment failed, while `during` (opening or reading) it.
    fn failed(&mut self, status: Status, during: &'static str) -> Action {
        self.current = None;
        tracing::debug!(
            during,
            rpc.grpc.status_code = status.code() as i32,
            rpc.grpc.status_message = status.message(),
            failure.kind = ?crate::policy::Failure::new(&status).kind(),
            failure.source = ?std::error::Error::source(&status),
            "reattachable execution: segment failed"
        );
        self.core.on_event(Event::Error(status), &self.retrying)
    }

    async fn read(&mut self) -> Action {
        let Some(stream) = self.current.as_mut() else {
            let status = Status::internal("reattachable execution: no open stream to read");
            return self.core.on_event(Event::Error(status), &self.retrying);
        };
        let result = match self
            .options
            .bounded(self.segment_deadline, stream.message())
            .await
        {
            Ok(r) => r,
            Err(event) => {
                self.current = None;
                tracing::debug!(
                    "reattachable execution: no message before the idle timeout or segment deadline"
                );
                return self.core.on_event(event, &self.retrying);
            }
        };
        let event = match result {
            Ok(Some(msg)) => Event::Response(Box::new(msg)),
            Ok(None) => {
                self.current = None;
                tracing::debug!("reattachable execution: segment ended cleanly");
                Event::EndOfStream
            }
            Err(status) => return self.failed(status, "reading"),
        };
        self.core.on_event(event, &self.retrying)
    }
}

/// A request with the segment's timeout, marked for a fresh connection
/// when it follows a stall, noting which token it carries in `used`.
fn request<T>(
    message: T,
    timeout: Option<std::time::Duration>,
    fresh: bool,
    used: TokenUsed,
) -> tonic::Request<T> {
    let mut req = tonic::Request::new(message);
    req.extensions_mut().insert(used);
    if let Some(d) = timeout {
        req.set_timeout(d);
    }
    if fresh {
        req.extensions_mut().insert(FreshConnection);
    }
    req
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
    stats: StreamStatsHandle,
    /// The execution's `spark_connect` span: every read runs in it.
    span: tracing::Span,
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
    /// Nothing is sent until the stream is first polled. Fails if the
    /// request carries an operation id that is not a UUID, if the idle
    /// timeout is zero, or if a deadline is zero or longer than
    /// 100 years ([`ReattachError::InvalidDeadline`];
    /// `None` is the way to say "no deadline").
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
        options.check()?;
        let core = ReattachCore::new(request)?;
        let operation_id = core.operation_id().to_owned();
        let span = tracing::info_span!(
            "spark_connect",
            rpc.system = "grpc",
            rpc.service = crate::proto::SERVICE_NAME,
            rpc.method = "ExecutePlan",
            operation_id = operation_id.as_str(),
            session_id = core.initial_request().session_id.as_str(),
        );
        let releaser = Releaser::new(
            client.clone(),
            retrying.clone(),
            tracker,
            options.idle_timeout,
        );
        let stats = StreamStatsHandle::default();
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
                credentials: None,
                token_used: TokenUsed::default(),
                meter: StreamMeter::default(),
            })),
            pending: None,
            operation_id,
            stats,
            span,
        })
    }

    /// Refresh the session's token when the server refuses it (the
    /// stream reattaches with a fresh one; see [`crate::token`]);
    /// releases use it too.
    pub(crate) fn with_credentials(mut self, credentials: Option<Credentials>) -> Self {
        if let (Some(d), Some(c)) = (self.driver.as_mut(), credentials) {
            if c.refreshes() {
                d.core.refresh_tokens(c.name());
            }
            d.releaser.set_credentials(c.clone());
            d.credentials = Some(c);
        }
        self
    }

    /// Record what the stream does (reattaches, re-executes, releases) in
    /// the session's `meters`.
    pub(crate) fn metered(mut self, meters: &SessionMeters) -> Self {
        if let Some(d) = &mut self.driver {
            d.meter = meters.stream();
            d.releaser.meters = meters.clone();
        }
        self
    }

    /// The operation id of this execution.
    pub fn operation_id(&self) -> &str {
        &self.operation_id
    }

    /// What the stream did so far (responses, reattaches, re-executes,
    /// retries): a snapshot.
    pub fn stats(&self) -> StreamStats {
        self.stats.snapshot()
    }

    /// A live handle on the same counters, readable while the stream is
    /// consumed elsewhere.
    pub fn stats_handle(&self) -> StreamStatsHandle {
        self.stats.clone()
    }

    /// The server-side session id seen so far (available between polls).
    pub fn server_side_session_id(&self) -> Option<String> {
        self.driver
            .as_ref()
            .and_then(|d| d.core.server_side_session_id().map(str::to_owned))
    }

    /// The RPC this execution opened last (`ExecutePlan` or
    /// `ReattachExecute`): the one its failure names. Read between polls.
    pub(crate) fn last_rpc(&self) -> &'static str {
        self.driver
            .as_ref()
            .map_or("ExecutePlan", |d| d.core.last_rpc())
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
            let span = self.span.clone();
            self.pending = Some(Box::pin(
                async move {
                    let item = driver.next().await;
                    (driver, item)
                }
                .instrument(span),
            ));
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
