//! The sans-I/O reattach state machine (PySpark 4.3.0's
//! `ExecutePlanResponseReattachableIterator`, as events in and actions out).
//!
//! It performs no I/O and reads no clock of its own: the driver feeds it
//! [`Event`]s (a response, a clean end of stream, an error, a deadline, a
//! stall) and carries out the [`Action`] it returns (open a stream, sleep,
//! emit, release, fail). Retry decisions go through the shared policy core
//! ([`Retrying::decide`](tonic_retry::retrying::Retrying::decide)), whose clock and jitter are injected.
//!
//! Two rules on top of PySpark's are enforced here, for every driver: the
//! stream-integrity rules on response ids ([`super::integrity`]: no
//! duplicate ids, no resume without a position, nothing after a terminal
//! error), and progress-aware reopening ([`super::progress`]: a stream that
//! keeps coming back empty is reopened with backoff, then given up with
//! [`ReattachError::NoProgress`]). The segment lifetimes that rule needs
//! are read from the [`Retrying`]'s injected clock.
//!
//! One more departure from PySpark: while the ExecutePlan provably never
//! reached the server, a retry re-sends it instead of reattaching, and the
//! "not found" answers of servers other than Spark are recognised too; both
//! rules live in [`super::not_found`].

use std::time::Duration;

use tonic::Status;

use crate::policy::{Failure, RetryDecision, RetryReason, RetryState};
use crate::proto::execute_plan_request::{RequestOption, request_option};
use crate::proto::release_execute_request::{Release as ReleaseKind, ReleaseAll, ReleaseUntil};
use crate::proto::{
    ExecutePlanRequest, ExecutePlanResponse, ReattachExecuteRequest, ReattachOptions,
    ReleaseExecuteRequest, execute_plan_response,
};
use crate::retrying::{AttemptError, Retrying};
use crate::token::refusal::{RefreshBudget, is_refusal, refused};

use super::ReattachError;
use super::ids::{check_session_ids, is_canonical_uuid};
use super::integrity::{IntegrityError, ResponseIds};
use super::not_found::Delivery;
use super::progress::{EmptyRun, EmptySegment, Verdict};
use super::stats::StreamStats;

/// What the driver observed.
#[derive(Debug)]
#[non_exhaustive]
pub(crate) enum Event {
    /// A message arrived on the current stream.
    Response(Box<ExecutePlanResponse>),
    /// The current stream ended with an OK status.
    EndOfStream,
    /// The current stream (or opening it) failed.
    Error(Status),
    /// The client-side deadline of the current stream segment passed.
    SegmentDeadline,
    /// No message (or, while opening, no response headers) arrived within
    /// the idle timeout.
    Stalled(Duration),
    /// The stream just opened answered: its response headers arrived.
    Opened,
}

/// A stream to open.
// The ExecutePlan request is larger (its plan carries the SQL parameters'
// maps), but an `Open` lives only from the decision to the send, one at a
// time: boxing it would cost an allocation per stream for nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Open {
    /// Send ExecutePlan with the byte-identical initial request.
    Execute(ExecutePlanRequest),
    /// Send ReattachExecute.
    Reattach(ReattachExecuteRequest),
}

/// A ReleaseExecute to send in the background.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Release {
    /// Free the buffered responses up to and including this id.
    Until(String),
    /// Free everything; ends the execution on the server.
    All,
}

/// What the driver must do next.
#[derive(Debug)]
#[non_exhaustive]
pub(crate) enum Action {
    /// Open a stream, then read from it.
    Open(Open),
    /// Sleep, then open a stream.
    SleepThenOpen(Duration, Open),
    /// The server refused the token: drop it, then open a stream (which
    /// carries a fresh one).
    RefreshThenOpen(Open),
    /// Read the next message from the current stream.
    Read,
    /// Hand this response to the consumer (and send the release, if any).
    Emit(Box<ExecutePlanResponse>, Release),
    /// Fail the stream with this error; send the release, if any.
    Fail(ReattachError, Option<Release>),
    /// The result is complete; end the stream.
    Finish,
}

/// The reattach state machine for one execution.
#[derive(Debug)]
pub(crate) struct ReattachCore {
    initial: ExecutePlanRequest,
    operation_id: String,
    last_returned: Option<String>,
    result_complete: bool,
    /// A stream is open (or being opened) and may be read.
    stream_open: bool,
    /// The server-side session id seen or expected.
    server_side_session_id: Option<String>,
    retry: Option<RetryState>,
    counters: StreamStats,
    /// ExecutePlan has been sent once.
    started: bool,
    /// The segment being opened replaces one given up as silent, and the
    /// server has not answered it yet.
    after_stall: bool,
    /// Response ids delivered so far (no duplicates).
    ids: ResponseIds,
    /// When the current segment opened (the retrying clock; a planned
    /// sleep included), and whether it delivered a response.
    segment_opened_at: Duration,
    segment_progress: bool,
    /// The current run of empty segments, if any.
    empty_run: Option<EmptyRun>,
    /// Whether the server may know the operation ([`super::not_found`]).
    delivery: Delivery,
    /// The RPC of the segment opened last: what a failure names.
    last_rpc: &'static str,
    /// The token provider's name and the fresh tokens asked for since the
    /// last delivered response, when its tokens can be refreshed.
    token: Option<(String, RefreshBudget)>,
    /// The ExecutePlan may be sent (again). False for an execution resumed
    /// from a caller's own ReattachExecute ([`ReattachCore::resume`]): its
    /// plan is not known here, so "not found" is the caller's to handle.
    can_execute: bool,
}

impl ReattachCore {
    /// Prepare `request`: validate or generate the operation id and append the
    /// reattach option. Fails if a caller-provided operation id is not a UUID.
    pub(crate) fn new(mut request: ExecutePlanRequest) -> Result<Self, ReattachError> {
        let operation_id = match request.operation_id.as_deref() {
            Some(id) if !id.is_empty() => {
                if !is_canonical_uuid(id) {
                    return Err(ReattachError::InvalidOperationId(id.to_owned()));
                }
                id.to_owned()
            }
            _ => uuid::Uuid::new_v4().to_string(),
        };
        request.operation_id = Some(operation_id.clone());
        request.request_options.push(RequestOption {
            request_option: Some(request_option::RequestOption::ReattachOptions(
                ReattachOptions { reattachable: true },
            )),
        });
        let server_side_session_id = request
            .client_observed_server_side_session_id
            .clone()
            .filter(|s| !s.is_empty());
        Ok(ReattachCore {
            initial: request,
            operation_id,
            last_returned: None,
            result_complete: false,
            stream_open: false,
            server_side_session_id,
            retry: None,
            counters: StreamStats::default(),
            started: false,
            after_stall: false,
            ids: ResponseIds::default(),
            segment_opened_at: Duration::ZERO,
            segment_progress: false,
            empty_run: None,
            delivery: Delivery::default(),
            last_rpc: "ExecutePlan",
            token: None,
            can_execute: true,
        })
    }

    /// Carry on an execution that a caller resumes with its own
    /// ReattachExecute (`request` holds the ids of that request: session,
    /// operation, observed server-side session, client type), from
    /// `last_response_id` (`None`: from the start). Every segment is a
    /// ReattachExecute; "not found" ends the stream with the server's status,
    /// since the plan is not known here. Fails if the operation id is not a
    /// UUID.
    pub(crate) fn resume(
        request: ExecutePlanRequest,
        last_response_id: Option<String>,
    ) -> Result<Self, ReattachError> {
        if request.operation_id.as_deref().is_none_or(str::is_empty) {
            return Err(ReattachError::InvalidOperationId(String::new()));
        }
        let mut core = ReattachCore::new(request)?;
        core.started = true;
        core.can_execute = false;
        core.last_returned = last_response_id;
        core.delivery.unproven();
        Ok(core)
    }

    /// The caller released this execution by itself (through another
    /// stream of the same operation): the server knew the operation, and
    /// "not found" from now on means released, so it ends the stream with
    /// the server's status instead of sending the ExecutePlan again.
    ///
    /// A driver whose caller vanished behind a partition would otherwise
    /// re-create an execution its caller has already read and released,
    /// and nobody would release it again.
    pub(crate) fn released_by_caller(&mut self) {
        self.can_execute = false;
        self.delivery.unproven();
    }

    /// The operation id on every request of this execution.
    pub(crate) fn operation_id(&self) -> &str {
        &self.operation_id
    }
    /// The request sent (and re-sent) as ExecutePlan.
    pub(crate) fn initial_request(&self) -> &ExecutePlanRequest {
        &self.initial
    }
    /// The server-side session id observed on this execution.
    pub(crate) fn server_side_session_id(&self) -> Option<&str> {
        self.server_side_session_id.as_deref()
    }
    /// Counters so far.
    pub(crate) fn stats(&self) -> StreamStats {
        self.counters
    }
    /// Refresh the token of `provider` when the server refuses it: once,
    /// then again only after a delivered response or when the refused
    /// token had delivered one ([`ReattachCore::token_was_answered`],
    /// [`crate::token`]).
    pub(crate) fn refresh_tokens(&mut self, provider: &str) {
        self.token = Some((provider.to_owned(), RefreshBudget::default()));
    }
    /// The token the failing segment carried had delivered a response
    /// (on this stream or another of the session): a refusal of it is its
    /// expiry, so the refresh budget is whole again, as after progress.
    pub(crate) fn token_was_answered(&mut self) {
        if let Some((_, budget)) = self.token.as_mut() {
            budget.progress();
        }
    }
    /// The RPC of the segment opened last (`ExecutePlan` or
    /// `ReattachExecute`): the one a failure of the stream names.
    pub(crate) fn last_rpc(&self) -> &'static str {
        self.last_rpc
    }
    /// Whether the stream being opened replaces one given up as silent. Its
    /// connection may be a black hole (silent both ways, no FIN, no RST), so
    /// the driver sends it over a fresh connection
    /// ([`crate::reconnect::FreshConnection`]).
    pub(crate) fn opening_after_stall(&self) -> bool {
        self.after_stall
    }

    /// The consumer asks for the next response. Starts a fresh retry budget
    /// (PySpark builds a new `Retrying` per `next()`: progress resets it).
    pub(crate) fn poll_next(&mut self, retrying: &Retrying) -> Action {
        if self.result_complete {
            return Action::Finish;
        }
        self.retry = Some(retrying.new_state());
        if self.stream_open {
            Action::Read
        } else if !self.started {
            self.started = true;
            self.delivery.opening(true);
            self.open(
                Open::Execute(self.initial.clone()),
                Duration::ZERO,
                retrying,
            )
        } else {
            self.reattach(Duration::ZERO, retrying)
        }
    }

    /// Open `open` after `delay`: the segment starts then.
    fn open(&mut self, open: Open, delay: Duration, retrying: &Retrying) -> Action {
        self.last_rpc = match open {
            Open::Execute(_) => "ExecutePlan",
            Open::Reattach(_) => "ReattachExecute",
        };
        self.stream_open = true;
        self.segment_progress = false;
        self.segment_opened_at = retrying.clock().now().saturating_add(delay);
        if delay.is_zero() {
            Action::Open(open)
        } else {
            Action::SleepThenOpen(delay, open)
        }
    }

    /// Reopen after `delay`: the ExecutePlan again while the server cannot
    /// know the operation ([`super::not_found`]), else ReattachExecute, if
    /// there is a position to resume from.
    fn reattach(&mut self, delay: Duration, retrying: &Retrying) -> Action {
        if !self.delivery.server_may_know() {
            self.delivery.opening(true);
            self.counters.re_executes += 1;
            return self.open(Open::Execute(self.initial.clone()), delay, retrying);
        }
        self.delivery.opening(false);
        if self.last_returned.as_deref() == Some("") {
            // Resuming without an id would replay the result from its start.
            let release = self.release_all();
            return Action::Fail(IntegrityError::NoResumePosition.into(), release);
        }
        self.counters.reattaches += 1;
        self.open(Open::Reattach(self.reattach_request()), delay, retrying)
    }

    /// The segment ends in a way that reopens at once: apply the progress
    /// rule ([`super::progress`]) to an empty one. `Ok(wait)` before the
    /// reopen, or the failure.
    fn after_segment(
        &mut self,
        kind: EmptySegment,
        retrying: &Retrying,
    ) -> Result<Duration, Box<Action>> {
        if self.segment_progress {
            return Ok(Duration::ZERO);
        }
        let lived = retrying
            .clock()
            .now()
            .saturating_sub(self.segment_opened_at);
        let run = self
            .empty_run
            .get_or_insert_with(|| EmptyRun::new(retrying));
        match run.on_empty(lived, retrying) {
            Verdict::Reopen(wait) => {
                if !wait.is_zero() {
                    self.counters.empty_backoffs += 1;
                }
                Ok(wait)
            }
            Verdict::GiveUp => {
                let err = ReattachError::NoProgress {
                    operation_id: self.operation_id.clone(),
                    segments: run.counted,
                    waited: run.waited,
                    what: kind,
                };
                Err(Box::new(Action::Fail(err, self.release_all())))
            }
        }
    }

    /// Feed what the driver observed; get the next action.
    pub(crate) fn on_event(&mut self, event: Event, retrying: &Retrying) -> Action {
        let after_stall = std::mem::take(&mut self.after_stall);
        match event {
            Event::Opened => {
                self.delivery.answered();
                if after_stall {
                    self.stall_answered();
                }
                Action::Read
            }
            Event::Response(resp) => {
                self.delivery.answered();
                if after_stall {
                    self.stall_answered();
                }
                self.on_response(resp)
            }
            Event::EndOfStream => {
                // A clean end without ResultComplete: the server ended the
                // segment on purpose. Reattach at once, no retry budget, but
                // under the progress rule.
                self.counters.graceful_ends += 1;
                self.stream_open = false;
                self.delivery.unproven();
                match self.after_segment(EmptySegment::EndedEmpty, retrying) {
                    Ok(wait) => self.reattach(wait, retrying),
                    Err(fail) => *fail,
                }
            }
            Event::Error(status) => self.on_error(status, retrying),
            Event::SegmentDeadline => self.retry_now(
                Status::deadline_exceeded("client-side deadline of the stream segment expired"),
                EmptySegment::SegmentDeadline,
                retrying,
            ),
            Event::Stalled(idle) => {
                self.counters.stalls += 1;
                let action = self.retry_now(
                    Status::unavailable(format!("no message for {idle:?}: stream treated as dead")),
                    EmptySegment::Stalled,
                    retrying,
                );
                self.after_stall = matches!(action, Action::Open(_) | Action::SleepThenOpen(..));
                action
            }
        }
    }

    /// The server answered the reattach that followed a stall: the stream
    /// was only quiet (a query computing in silence), not dead. Such a stall
    /// must not use up the immediate-retry bound, or a query that computes
    /// silently for longer than the bound would fail: restart its clock.
    /// Only stalls the server leaves unanswered add up.
    fn stall_answered(&mut self) {
        self.counters.stalls_answered += 1;
        if let Some(state) = self.retry.as_mut() {
            state.restart_retry_now_clock();
        }
    }

    /// The consumer dropped the stream: the release to send, if any.
    pub(crate) fn on_drop(&mut self) -> Option<Release> {
        self.release_all()
    }

    fn on_response(&mut self, resp: Box<ExecutePlanResponse>) -> Action {
        if let Err(mismatch) = check_session_ids(
            &self.initial.session_id,
            &mut self.server_side_session_id,
            &resp.session_id,
            &resp.server_side_session_id,
        ) {
            return Action::Fail(mismatch.into(), self.release_all());
        }
        if let Err(dup) = self.ids.insert(&resp.response_id) {
            return Action::Fail(dup.into(), self.release_all());
        }
        self.segment_progress = true;
        self.empty_run = None;
        if let Some((_, budget)) = self.token.as_mut() {
            budget.progress();
        }
        self.counters.responses += 1;
        self.last_returned = Some(resp.response_id.clone());
        let complete = matches!(
            resp.response_type,
            Some(execute_plan_response::ResponseType::ResultComplete(_))
        );
        let release = if complete {
            self.result_complete = true;
            self.stream_open = false;
            Release::All
        } else if resp.response_id.is_empty() {
            // PySpark quirk kept: an empty id releases everything but does not complete.
            Release::All
        } else {
            Release::Until(resp.response_id.clone())
        };
        Action::Emit(resp, release)
    }

    fn on_error(&mut self, status: Status, retrying: &Retrying) -> Action {
        self.stream_open = false;
        if let Some((provider, budget)) = self.token.as_mut()
            && is_refusal(&status)
        {
            // A refused request ran nothing: what the server knows of the
            // operation is unchanged, so the reopen is a reattach unless
            // the ExecutePlan itself was refused.
            if budget.try_refresh() {
                self.counters.token_refreshes += 1;
                return match self.reattach(Duration::ZERO, retrying) {
                    Action::Open(open) => Action::RefreshThenOpen(open),
                    other => other,
                };
            }
            let status = refused(status, provider, budget.used());
            return self.fail(status);
        }
        self.delivery.failed(&status);
        let not_found = self.delivery.not_found(&status, &self.operation_id);
        if let Some(marker) = not_found.map(|w| w.marker) {
            if !self.can_execute {
                return self.fail(status);
            }
            if self.last_returned.is_some() {
                let err = ReattachError::ResponseAlreadyReceived { marker, status };
                return Action::Fail(err, self.release_all());
            }
            // The ExecutePlan never reached the server: send it again at
            // once (under the progress rule).
            if let Err(status) = self.decide(retrying, AttemptError::RetryNow(Some(status))) {
                return self.fail(status);
            }
            self.delivery.not_known();
            return match self.after_segment(EmptySegment::NotFound, retrying) {
                Ok(wait) => self.reattach(wait, retrying),
                Err(fail) => *fail,
            };
        }
        // The one classification of this failure.
        let failure = Failure::new(&status);
        if failure.is_deadline() {
            return self.retry_now(status, EmptySegment::DeadlineExceeded, retrying);
        }
        // A stream reset or truncated between client and server (a proxy's
        // read timeout, a reload's hard stop) says nothing about the
        // execution, which the server keeps: resumed at once, as a stall
        // is. A generic call would not be retried (the work may have run);
        // a reattach by response id cannot run it twice.
        if failure.kind() == crate::policy::FailureKind::Ambiguous {
            return self.retry_now(status, EmptySegment::Cut, retrying);
        }
        // On give-up the status keeps the loop's history (attempts, time
        // waited) when the policy gave up on a retryable failure.
        match self.decide(retrying, AttemptError::Status(status)) {
            Ok(delay) => self.reattach(delay, retrying),
            Err(status) => self.fail(status),
        }
    }

    /// Reattach at once (PySpark's RetryException), bounded by the
    /// immediate-retry bound and the progress rule.
    fn retry_now(&mut self, cause: Status, kind: EmptySegment, retrying: &Retrying) -> Action {
        self.stream_open = false;
        self.delivery.unproven();
        if let Err(status) = self.decide(retrying, AttemptError::RetryNow(Some(cause))) {
            return self.fail(status);
        }
        match self.after_segment(kind, retrying) {
            Ok(wait) => self.reattach(wait, retrying),
            Err(fail) => *fail,
        }
    }

    /// Ask the shared policy core; `Ok(delay)` to retry, `Err(status)` to give up.
    fn decide(&mut self, retrying: &Retrying, error: AttemptError) -> Result<Duration, Status> {
        let state = self.retry.get_or_insert_with(|| retrying.new_state());
        match retrying.decide(state, &error) {
            RetryDecision::Retry { delay, reason } => {
                match reason {
                    RetryReason::Policy { .. } => self.counters.policy_retries += 1,
                    RetryReason::RetryNow => self.counters.immediate_retries += 1,
                    RetryReason::Transparent => self.counters.transparent_retries += 1,
                }
                Ok(delay)
            }
            RetryDecision::GiveUp(_) => Err(retrying.give_up_status(state, error)),
        }
    }

    fn fail(&mut self, status: Status) -> Action {
        let release = self.release_all();
        Action::Fail(ReattachError::Status(status), release)
    }

    fn release_all(&mut self) -> Option<Release> {
        if self.result_complete {
            return None;
        }
        self.result_complete = true;
        self.stream_open = false;
        Some(Release::All)
    }

    /// The ReattachExecute request for the current position.
    pub(crate) fn reattach_request(&self) -> ReattachExecuteRequest {
        ReattachExecuteRequest {
            session_id: self.initial.session_id.clone(),
            // Copied from the initial request only, as PySpark 4.3 does.
            client_observed_server_side_session_id: self
                .initial
                .client_observed_server_side_session_id
                .clone()
                .filter(|s| !s.is_empty()),
            user_context: self.initial.user_context.clone(),
            operation_id: self.operation_id.clone(),
            client_type: self.initial.client_type.clone().filter(|s| !s.is_empty()),
            last_response_id: self.last_returned.clone().filter(|s| !s.is_empty()),
        }
    }

    /// The ReleaseExecute request for `release` (never carries the observed session id).
    pub(crate) fn release_request(&self, release: &Release) -> ReleaseExecuteRequest {
        ReleaseExecuteRequest {
            session_id: self.initial.session_id.clone(),
            client_observed_server_side_session_id: None,
            user_context: self.initial.user_context.clone(),
            operation_id: self.operation_id.clone(),
            client_type: self.initial.client_type.clone().filter(|s| !s.is_empty()),
            release: Some(match release {
                Release::All => ReleaseKind::ReleaseAll(ReleaseAll {}),
                Release::Until(id) => ReleaseKind::ReleaseUntil(ReleaseUntil {
                    response_id: id.clone(),
                }),
            }),
        }
    }
}

#[cfg(test)]
mod props;
#[cfg(test)]
mod tests;
