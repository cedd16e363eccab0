//! [`ReattachableExecution`]: the session's stream, the one driver over
//! [`ReattachCore`] on the typed client.
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

use tokio_stream::Stream;
use tonic::Status;
use tonic::codec::Streaming;
use tracing::Instrument;

use super::core::{Open, ReattachCore};
use super::driver::Driver;
use super::release::{ReleaseTracker, Releaser};
use super::stats::{Observers, StreamStats, StreamStatsHandle};
use super::transport::{Call, Transport};
use super::{ReattachError, ReattachOptions};
use crate::proto::{ExecutePlanRequest, ExecutePlanResponse, ReleaseExecuteRequest};
use crate::retrying::Retrying;
use crate::token::cache::Credentials;
use crate::transport::SparkClient;

/// The session's transport: the typed client, whole responses.
#[derive(Clone)]
struct Typed(SparkClient);

impl Transport for Typed {
    type Segment = Streaming<ExecutePlanResponse>;
    type Message = ExecutePlanResponse;
    type Kept = ();

    async fn open(&mut self, open: Open, call: Call) -> Result<Self::Segment, Status> {
        let mut client = self.0.clone();
        let response = match open {
            Open::Execute(req) => client.execute_plan(call.request(req)).await,
            Open::Reattach(req) => client.reattach_execute(call.request(req)).await,
        };
        response.map(tonic::Response::into_inner)
    }

    async fn read(
        segment: &mut Self::Segment,
    ) -> Result<Option<(ExecutePlanResponse, ())>, Status> {
        Ok(segment.message().await?.map(|m| (m, ())))
    }

    fn message(response: ExecutePlanResponse, (): ()) -> ExecutePlanResponse {
        response
    }

    async fn release(&self, request: ReleaseExecuteRequest, call: Call) -> Result<(), Status> {
        self.0
            .clone()
            .release_execute(call.request(request))
            .await
            .map(drop)
    }
}

type NextFuture = Pin<
    Box<
        dyn Future<
                Output = (
                    Box<Driver<Typed>>,
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
    driver: Option<Box<Driver<Typed>>>,
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
        let transport = Typed(client);
        let releaser = Releaser::new(
            transport.clone(),
            retrying.clone(),
            tracker,
            options.idle_timeout,
        );
        let driver = Driver::new(core, transport, retrying, options, Some(releaser));
        let stats = driver.stats().clone();
        Ok(ReattachableExecution {
            driver: Some(Box::new(driver)),
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
            d.set_credentials(c);
        }
        self
    }

    /// Report what the stream does (reattaches, re-executes, releases) to
    /// `observers` (the session's metrics).
    pub(crate) fn observed(mut self, observers: Observers) -> Self {
        if let Some(d) = &mut self.driver {
            d.observe(observers);
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
            .and_then(|d| d.core().server_side_session_id().map(str::to_owned))
    }

    /// The RPC this execution opened last (`ExecutePlan` or
    /// `ReattachExecute`): the one its failure names. Read between polls.
    pub(crate) fn last_rpc(&self) -> &'static str {
        self.driver
            .as_ref()
            .map_or("ExecutePlan", |d| d.core().last_rpc())
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
