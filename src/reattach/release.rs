//! Background ReleaseExecute calls.
//!
//! Releases are best effort and never block the consumer: each runs on a
//! spawned task under its own fresh retry loop, and a final failure is logged
//! and swallowed. Better than PySpark's one RPC per response, at most one
//! `release_until` is in flight per execution and the newest id wins: ids
//! that arrive while one is in flight replace each other, and only the last
//! is sent. And at most one `release_until` goes out per
//! [`RELEASE_UNTIL_INTERVAL`]: on a fast stream, one per response cost the
//! server about 0.5 ms of CPU each, and the client 6 % of its wall time
//! against Spark 4.3 (docs/side-by-side.md). Releasing sooner frees little:
//! the server already drops consumed responses beyond its retry buffer.
//! A `release_all` discards a pending `release_until`.
//!
//! With stall detection on, an attempt the server does not answer within the
//! idle timeout is given up as UNAVAILABLE and retried under the policy,
//! over a fresh connection: a release sent into a black hole would otherwise
//! wait forever, and, being the one in flight, hold back every later
//! `release_until` of the execution (and make a session's close wait).
//! That bound is never below [`MIN_RELEASE_ATTEMPT`]: a unary RPC needs at
//! least a round trip, and a tiny idle timeout would otherwise give up every
//! attempt before its answer could arrive, leaving the release to back off
//! through the whole policy while a session's `close()` waits its full
//! release wait.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use super::transport::{Call, Transport};
use crate::proto::ReleaseExecuteRequest;
use crate::retrying::{AttemptError, Retrying};
use crate::token::cache::Credentials;
use crate::token::call::CallToken;

/// Counts outstanding background releases, so a session can wait for them on close.
#[derive(Debug, Clone, Default)]
pub struct ReleaseTracker {
    inner: Arc<TrackerInner>,
}

#[derive(Debug, Default)]
struct TrackerInner {
    outstanding: AtomicUsize,
    sent: AtomicU64,
    failed: AtomicU64,
    idle: Notify,
}

impl ReleaseTracker {
    /// A tracker with nothing outstanding.
    pub fn new() -> Self {
        Self::default()
    }
    /// Release tasks still running.
    pub fn outstanding(&self) -> usize {
        self.inner.outstanding.load(Ordering::SeqCst)
    }
    /// ReleaseExecute RPCs that succeeded.
    pub fn sent(&self) -> u64 {
        self.inner.sent.load(Ordering::SeqCst)
    }
    /// ReleaseExecute RPCs that failed after their retries.
    pub fn failed(&self) -> u64 {
        self.inner.failed.load(Ordering::SeqCst)
    }
    /// Wait until nothing is outstanding, at most `timeout`. `true` if idle.
    pub async fn wait_idle(&self, timeout: Duration) -> bool {
        let wait = async {
            loop {
                let notified = self.inner.idle.notified();
                if self.outstanding() == 0 {
                    return;
                }
                notified.await;
            }
        };
        tokio::time::timeout(timeout, wait).await.is_ok()
    }

    fn start(&self) -> TaskGuard {
        self.inner.outstanding.fetch_add(1, Ordering::SeqCst);
        TaskGuard(self.inner.clone())
    }
}

struct TaskGuard(Arc<TrackerInner>);

impl Drop for TaskGuard {
    fn drop(&mut self) {
        if self.0.outstanding.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

/// The shortest bound on one ReleaseExecute attempt under stall detection
/// (the idle timeout, when longer).
const MIN_RELEASE_ATTEMPT: Duration = Duration::from_secs(1);

/// The shortest time between two `release_until` calls of one execution.
pub(crate) const RELEASE_UNTIL_INTERVAL: Duration = Duration::from_millis(50);

#[derive(Debug)]
struct UntilSlot<T> {
    pending: Option<T>,
    in_flight: bool,
    /// When the last `release_until` went out.
    last_sent: Option<Instant>,
}

impl<T> Default for UntilSlot<T> {
    fn default() -> Self {
        UntilSlot {
            pending: None,
            in_flight: false,
            last_sent: None,
        }
    }
}

impl<T> UntilSlot<T> {
    /// The newest pending release and the time it may go (now or later),
    /// or `None` when nothing is pending.
    fn next_due(&self) -> Option<Instant> {
        self.pending.as_ref()?;
        Some(match self.last_sent {
            Some(t) => t + RELEASE_UNTIL_INTERVAL,
            None => Instant::now(),
        })
    }
}

/// The pacing of one execution's `release_until`s: the newest wins, at
/// most one in flight, [`RELEASE_UNTIL_INTERVAL`] apart; a `release_all`
/// discards what is pending.
#[derive(Debug)]
struct UntilPacer<T>(Arc<Mutex<UntilSlot<T>>>);

impl<T> Clone for UntilPacer<T> {
    fn clone(&self) -> Self {
        UntilPacer(self.0.clone())
    }
}

impl<T> Default for UntilPacer<T> {
    fn default() -> Self {
        UntilPacer(Arc::default())
    }
}

impl<T> UntilPacer<T> {
    fn slot(&self) -> std::sync::MutexGuard<'_, UntilSlot<T>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queue `release`; true when no sender runs, so the caller must
    /// start one that drains [`next`](Self::next).
    fn offer(&self, release: T) -> bool {
        let mut slot = self.slot();
        slot.pending = Some(release);
        !std::mem::replace(&mut slot.in_flight, true)
    }

    /// Forget any pending release (a `release_all` supersedes it).
    fn clear(&self) {
        self.slot().pending = None;
    }

    /// The sender's next release once it is due, or `None` (and the
    /// sender stops) when nothing is pending.
    async fn next(&self) -> Option<T> {
        let due = self.slot().next_due();
        if let Some(at) = due.filter(|at| *at > Instant::now()) {
            tokio::time::sleep_until(at).await;
        }
        let mut slot = self.slot();
        match slot.pending.take() {
            Some(r) => {
                slot.last_sent = Some(Instant::now());
                Some(r)
            }
            None => {
                slot.in_flight = false;
                None
            }
        }
    }
}

/// The gRPC path of ReleaseExecute, the method its metrics are recorded under.
const RELEASE_EXECUTE: &str = "/spark.connect.SparkConnectService/ReleaseExecute";

/// Sends one execution's releases, over its driver's transport.
pub(crate) struct Releaser<T> {
    transport: T,
    retrying: Retrying,
    tracker: ReleaseTracker,
    runtime: Option<tokio::runtime::Handle>,
    until: UntilPacer<ReleaseExecuteRequest>,
    /// Give an attempt up after this long without an answer (the idle timeout).
    attempt_timeout: Option<Duration>,
    /// The session's credentials, when its tokens are refreshed.
    credentials: Option<Credentials>,
    /// Hears each release's outcome (the session's metrics).
    released: Option<Arc<dyn Fn(bool) + Send + Sync>>,
}

impl<T: Clone> Clone for Releaser<T> {
    fn clone(&self) -> Self {
        Releaser {
            transport: self.transport.clone(),
            retrying: self.retrying.clone(),
            tracker: self.tracker.clone(),
            runtime: self.runtime.clone(),
            until: self.until.clone(),
            attempt_timeout: self.attempt_timeout,
            credentials: self.credentials.clone(),
            released: self.released.clone(),
        }
    }
}

impl<T: Transport> Releaser<T> {
    /// Releases over `transport`, counted in `tracker`, each attempt
    /// bounded by `idle_timeout` (at least [`MIN_RELEASE_ATTEMPT`]).
    pub(crate) fn new(
        transport: T,
        retrying: Retrying,
        tracker: ReleaseTracker,
        idle_timeout: Option<Duration>,
    ) -> Self {
        Releaser {
            transport,
            retrying,
            tracker,
            runtime: tokio::runtime::Handle::try_current().ok(),
            until: UntilPacer::default(),
            attempt_timeout: idle_timeout.map(|d| d.max(MIN_RELEASE_ATTEMPT)),
            credentials: None,
            released: None,
        }
    }

    /// Refresh the session's token when the server refuses it.
    pub(crate) fn set_credentials(&mut self, credentials: Credentials) {
        self.credentials = Some(credentials);
    }

    /// Tell `released` each release's outcome.
    pub(crate) fn observe(&mut self, released: Arc<dyn Fn(bool) + Send + Sync>) {
        self.released = Some(released);
    }

    /// Queue a release_until; coalesced with any not yet sent, and sent no
    /// sooner than [`RELEASE_UNTIL_INTERVAL`] after the previous one.
    pub(crate) fn release_until(&self, req: ReleaseExecuteRequest) {
        if !self.until.offer(req) {
            return;
        }
        let this = self.clone();
        self.spawn(async move {
            while let Some(next) = this.until.next().await {
                this.send(next).await;
            }
        });
    }

    /// Send a release_all (and forget any pending release_until).
    pub(crate) fn release_all(&self, req: ReleaseExecuteRequest) {
        self.until.clear();
        let this = self.clone();
        self.spawn(async move { this.send(req).await });
    }

    fn spawn(&self, fut: impl std::future::Future<Output = ()> + Send + 'static) {
        let Some(rt) = &self.runtime else {
            tracing::debug!("no tokio runtime: ReleaseExecute skipped");
            return;
        };
        let guard = self.tracker.start();
        rt.spawn(async move {
            let _guard = guard;
            fut.await;
        });
    }

    async fn send(&self, req: ReleaseExecuteRequest) {
        let unanswered = Arc::new(AtomicBool::new(false));
        let token = &CallToken::new(self.credentials.as_ref());
        let result = self
            .retrying
            .clone()
            .with_method(RELEASE_EXECUTE)
            .run::<_, std::convert::Infallible, _, _>(|| {
                let call = Call {
                    timeout: None,
                    fresh: unanswered.load(Ordering::SeqCst),
                    token: token.slot(),
                };
                let used = call.token.clone();
                let attempt = self.transport.release(req.clone(), call);
                let (limit, unanswered) = (self.attempt_timeout, unanswered.clone());
                async move {
                    let result = match limit {
                        None => attempt.await,
                        Some(limit) => match tokio::time::timeout(limit, attempt).await {
                            Ok(result) => result,
                            Err(_) => {
                                unanswered.store(true, Ordering::SeqCst);
                                Err(tonic::Status::unavailable(format!(
                                    "ReleaseExecute got no answer within {limit:?}"
                                )))
                            }
                        },
                    };
                    result.map_err(|s| token.judge(s, &used))
                }
            })
            .await
            .0
            .map_err(AttemptError::into_status);
        if let Some(released) = &self.released {
            released(result.is_ok());
        }
        match result {
            Ok(()) => {
                self.tracker.inner.sent.fetch_add(1, Ordering::SeqCst);
            }
            Err(status) => {
                self.tracker.inner.failed.fetch_add(1, Ordering::SeqCst);
                let history = crate::retrying::GaveUp::of(&status).map(ToString::to_string);
                tracing::warn!(
                    rpc.grpc.status_code = status.code() as i32,
                    rpc.grpc.status_message = status.message(),
                    gave_up = history.as_deref(),
                    "ReleaseExecute failed"
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_first_release_goes_at_once_later_ones_an_interval_apart() {
        let mut slot = UntilSlot::<ReleaseExecuteRequest>::default();
        assert_eq!(slot.next_due(), None, "nothing pending");
        slot.pending = Some(ReleaseExecuteRequest::default());
        assert_eq!(slot.next_due(), Some(Instant::now()));
        let sent = Instant::now();
        slot.last_sent = Some(sent);
        assert_eq!(slot.next_due(), Some(sent + RELEASE_UNTIL_INTERVAL));
        slot.pending = None;
        assert_eq!(slot.next_due(), None, "a release_all cleared it");
    }
}
