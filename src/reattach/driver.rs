//! The one async driver of [`ReattachCore`], generic over how a segment
//! travels.
//!
//! *Why one:* the session's typed stream and the tower layer's raw bytes
//! perform the same actions of the same core: open a segment, read it,
//! back off, release, hand a response on. Only three things differ, and
//! they are a [`Transport`](super::transport::Transport): how a segment is opened, how one message is
//! read (and what the core sees of it), and how a release is sent. Every
//! rule (when to reattach, the wait bound, fresh connections after a stall,
//! a refused token, releases on drop) is written once, here and in the
//! core.

use tokio::time::Instant;
use tonic::Status;

use super::core::{Action, Event, Open, ReattachCore, Release};
use super::release::Releaser;
use super::stats::{Observers, StatsObserver, StreamStatsHandle};
use super::transport::{Call, Transport};
use super::{ReattachError, ReattachOptions};
use crate::retrying::Retrying;
use crate::token::cache::Credentials;
use crate::token::service::TokenUsed;

/// One execution: the core, the transport that performs its actions, and
/// its releaser (none when the caller releases by itself).
pub(crate) struct Driver<T: Transport> {
    core: ReattachCore,
    transport: T,
    retrying: Retrying,
    options: ReattachOptions,
    releaser: Option<Releaser<T>>,
    current: Option<T::Segment>,
    /// What was kept of the response last fed to the core.
    kept: Option<T::Kept>,
    segment_deadline: Option<Instant>,
    stats: StreamStatsHandle,
    observe_stats: Option<StatsObserver>,
    /// The session's credentials, when its tokens are refreshed.
    credentials: Option<Credentials>,
    /// Which token the current segment's request carried.
    token_used: TokenUsed,
}

impl<T: Transport> Driver<T> {
    pub(crate) fn new(
        core: ReattachCore,
        transport: T,
        retrying: Retrying,
        options: ReattachOptions,
        releaser: Option<Releaser<T>>,
    ) -> Self {
        Driver {
            core,
            transport,
            retrying,
            options,
            releaser,
            current: None,
            kept: None,
            segment_deadline: None,
            stats: StreamStatsHandle::default(),
            observe_stats: None,
            credentials: None,
            token_used: TokenUsed::default(),
        }
    }

    pub(crate) fn core(&self) -> &ReattachCore {
        &self.core
    }

    pub(crate) fn transport_mut(&mut self) -> &mut T {
        &mut self.transport
    }

    pub(crate) fn stats(&self) -> &StreamStatsHandle {
        &self.stats
    }

    /// Refresh the session's token when the server refuses it; releases
    /// use it too.
    pub(crate) fn set_credentials(&mut self, credentials: Credentials) {
        if credentials.refreshes() {
            self.core.refresh_tokens(credentials.name());
        }
        if let Some(r) = &mut self.releaser {
            r.set_credentials(credentials.clone());
        }
        self.credentials = Some(credentials);
    }

    /// Report the stream's counters and its releases to `observers`.
    pub(crate) fn observe(&mut self, observers: Observers) {
        self.observe_stats = Some(observers.stats);
        if let Some(r) = &mut self.releaser {
            r.observe(observers.released);
        }
    }

    /// The next message, `None` at the result's end, or the terminal error.
    pub(crate) async fn next(&mut self) -> Option<Result<T::Message, ReattachError>> {
        let mut action = self.core.poll_next(&self.retrying);
        let item = loop {
            action = match action {
                Action::Finish => break None,
                Action::Emit(resp, release) => {
                    self.release(release);
                    break Some(match self.kept.take() {
                        Some(kept) => Ok(T::message(*resp, kept)),
                        None => Err(ReattachError::Status(Status::internal(
                            "reattachable execution: no response to emit",
                        ))),
                    });
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
        if let Some(observe) = &mut self.observe_stats {
            observe(&stats);
        }
        self.stats.set(stats);
        item
    }

    fn release(&self, release: Release) {
        let Some(releaser) = &self.releaser else {
            return;
        };
        let req = self.core.release_request(&release);
        match release {
            Release::Until(_) => releaser.release_until(req),
            Release::All => releaser.release_all(req),
        }
    }

    async fn open(&mut self, open: Open) -> Action {
        self.current = None;
        let timeout = match &open {
            Open::Execute(_) => {
                tracing::debug!("reattachable execution: sending ExecutePlan");
                self.options.deadlines.reattachable_execute_plan
            }
            Open::Reattach(r) => {
                tracing::debug!(
                    last_response_id = r.last_response_id.as_deref().unwrap_or(""),
                    "reattachable execution: sending ReattachExecute"
                );
                self.options.deadlines.reattach_execute
            }
        };
        self.segment_deadline = timeout.and_then(|d| Instant::now().checked_add(d));
        let fresh = self.core.opening_after_stall();
        if fresh {
            tracing::debug!(
                "reattachable execution: reattaching over a fresh connection after a stall"
            );
        }
        self.token_used = TokenUsed::default();
        let call = Call {
            timeout,
            fresh,
            token: self.token_used.clone(),
        };
        let opening = self.transport.open(open, call);
        let result = match self.options.bounded(self.segment_deadline, opening).await {
            Ok(r) => r,
            Err(event) => {
                tracing::debug!(
                    "reattachable execution: no response headers before the idle timeout or segment deadline"
                );
                return self.core.on_event(event, &self.retrying);
            }
        };
        match result {
            Ok(segment) => {
                self.current = Some(segment);
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
        if self.transport.released_by_caller() {
            self.core.released_by_caller();
        }
        if let Some(c) = &self.credentials
            && c.was_answered(self.token_used.serial())
        {
            self.core.token_was_answered();
        }
        self.core.on_event(Event::Error(status), &self.retrying)
    }

    async fn read(&mut self) -> Action {
        let Some(segment) = self.current.as_mut() else {
            let status = Status::internal("reattachable execution: no open stream to read");
            return self.core.on_event(Event::Error(status), &self.retrying);
        };
        let result = match self
            .options
            .bounded(self.segment_deadline, T::read(segment))
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
            Ok(Some((response, kept))) => {
                if let Some(c) = &self.credentials {
                    c.answered(self.token_used.serial());
                }
                self.kept = Some(kept);
                Event::Response(Box::new(response))
            }
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

impl<T: Transport> Drop for Driver<T> {
    fn drop(&mut self) {
        if let Some(release) = self.core.on_drop() {
            self.release(release);
        }
    }
}
