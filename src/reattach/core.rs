//! The sans-I/O reattach state machine (PySpark 4.3.0's
//! `ExecutePlanResponseReattachableIterator`, as events in and actions out).
//!
//! It performs no I/O and reads no clock of its own: the driver feeds it
//! [`Event`]s (a response, a clean end of stream, an error, a deadline, a
//! stall) and carries out the [`Action`] it returns (open a stream, sleep,
//! emit, release, fail). Retry decisions go through the shared policy core
//! ([`Retrying::decide`]), whose clock and jitter are injected.

use std::time::Duration;

use tonic::{Code, Status};

use crate::policy::{FailureKind, RetryDecision, RetryReason, RetryState, classify_failure};
use crate::proto::execute_plan_request::{RequestOption, request_option};
use crate::proto::release_execute_request::{Release as ReleaseKind, ReleaseAll, ReleaseUntil};
use crate::proto::{
    ExecutePlanRequest, ExecutePlanResponse, ReattachExecuteRequest, ReattachOptions,
    ReleaseExecuteRequest, execute_plan_response,
};
use crate::retrying::{AttemptError, Retrying};

use super::ReattachError;

/// `INVALID_HANDLE.OPERATION_NOT_FOUND`: the server has no such execution.
pub const OPERATION_NOT_FOUND: &str = "INVALID_HANDLE.OPERATION_NOT_FOUND";
/// `INVALID_HANDLE.SESSION_NOT_FOUND`: the server has no such session.
pub const SESSION_NOT_FOUND: &str = "INVALID_HANDLE.SESSION_NOT_FOUND";

/// What the driver observed.
#[derive(Debug)]
pub enum Event {
    /// A message arrived on the current stream.
    Response(Box<ExecutePlanResponse>),
    /// The current stream ended with an OK status.
    EndOfStream,
    /// The current stream (or opening it) failed.
    Error(Status),
    /// The client-side deadline of the current stream segment passed.
    SegmentDeadline,
    /// No message arrived within the idle timeout.
    Stalled(Duration),
}

/// A stream to open.
#[derive(Debug, Clone, PartialEq)]
pub enum Open {
    /// Send ExecutePlan with the byte-identical initial request.
    Execute(ExecutePlanRequest),
    /// Send ReattachExecute.
    Reattach(ReattachExecuteRequest),
}

/// A ReleaseExecute to send in the background.
#[derive(Debug, Clone, PartialEq)]
pub enum Release {
    /// Free the buffered responses up to and including this id.
    Until(String),
    /// Free everything; ends the execution on the server.
    All,
}

/// What the driver must do next.
#[derive(Debug)]
pub enum Action {
    /// Open a stream, then read from it.
    Open(Open),
    /// Sleep, then open a stream.
    SleepThenOpen(Duration, Open),
    /// Read the next message from the current stream.
    Read,
    /// Hand this response to the consumer (and send the release, if any).
    Emit(Box<ExecutePlanResponse>, Release),
    /// Fail the stream with this error; send the release, if any.
    Fail(ReattachError, Option<Release>),
    /// The result is complete; end the stream.
    Finish,
}

/// Counters kept by the core.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CoreCounters {
    /// Responses handed to the consumer.
    pub responses: u64,
    /// ReattachExecute streams opened.
    pub reattaches: u64,
    /// ExecutePlan re-sent after NOT_FOUND.
    pub re_executes: u64,
    /// Policy retries (each after a sleep).
    pub policy_retries: u64,
    /// Immediate retries (NOT_FOUND, deadline, stall).
    pub immediate_retries: u64,
    /// Streams that ended cleanly without ResultComplete.
    pub graceful_ends: u64,
    /// Streams given up as silent ([`Event::Stalled`]), each followed by a reattach.
    pub stalls: u64,
}

/// The reattach state machine for one execution.
#[derive(Debug)]
pub struct ReattachCore {
    initial: ExecutePlanRequest,
    operation_id: String,
    last_returned: Option<String>,
    result_complete: bool,
    /// A stream is open (or being opened) and may be read.
    stream_open: bool,
    /// The server-side session id seen or expected.
    server_side_session_id: Option<String>,
    retry: Option<RetryState>,
    counters: CoreCounters,
    /// ExecutePlan has been sent once.
    started: bool,
}

impl ReattachCore {
    /// Prepare `request`: validate or generate the operation id and append the
    /// reattach option. Fails if a caller-provided operation id is not a UUID.
    pub fn new(mut request: ExecutePlanRequest) -> Result<Self, ReattachError> {
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
            counters: CoreCounters::default(),
            started: false,
        })
    }

    /// The operation id on every request of this execution.
    pub fn operation_id(&self) -> &str {
        &self.operation_id
    }
    /// The request sent (and re-sent) as ExecutePlan.
    pub fn initial_request(&self) -> &ExecutePlanRequest {
        &self.initial
    }
    /// The id of the last response handed to the consumer.
    pub fn last_returned_response_id(&self) -> Option<&str> {
        self.last_returned.as_deref()
    }
    /// Whether the execution is over (ResultComplete delivered, or released after an error).
    pub fn is_complete(&self) -> bool {
        self.result_complete
    }
    /// The server-side session id observed on this execution.
    pub fn server_side_session_id(&self) -> Option<&str> {
        self.server_side_session_id.as_deref()
    }
    /// Counters so far.
    pub fn counters(&self) -> CoreCounters {
        self.counters
    }

    /// The consumer asks for the next response. Starts a fresh retry budget
    /// (PySpark builds a new `Retrying` per `next()`: progress resets it).
    pub fn poll_next(&mut self, retrying: &Retrying) -> Action {
        if self.result_complete {
            return Action::Finish;
        }
        self.retry = Some(retrying.new_state());
        if self.stream_open {
            Action::Read
        } else if !self.started {
            self.started = true;
            self.stream_open = true;
            Action::Open(Open::Execute(self.initial.clone()))
        } else {
            self.stream_open = true;
            self.counters.reattaches += 1;
            Action::Open(Open::Reattach(self.reattach_request()))
        }
    }

    /// Feed what the driver observed; get the next action.
    pub fn on_event(&mut self, event: Event, retrying: &Retrying) -> Action {
        match event {
            Event::Response(resp) => self.on_response(resp),
            Event::EndOfStream => {
                // A clean end without ResultComplete: the server ended the
                // segment on purpose. Reattach at once: no sleep, no budget.
                self.counters.graceful_ends += 1;
                self.counters.reattaches += 1;
                self.stream_open = true;
                Action::Open(Open::Reattach(self.reattach_request()))
            }
            Event::Error(status) => self.on_error(status, retrying),
            Event::SegmentDeadline => self.retry_now(
                Status::deadline_exceeded("client-side deadline of the stream segment expired"),
                retrying,
            ),
            Event::Stalled(idle) => {
                self.counters.stalls += 1;
                self.retry_now(
                    Status::unavailable(format!("no message for {idle:?}: stream treated as dead")),
                    retrying,
                )
            }
        }
    }

    /// The consumer dropped the stream: the release to send, if any.
    pub fn on_drop(&mut self) -> Option<Release> {
        self.release_all()
    }

    fn on_response(&mut self, resp: Box<ExecutePlanResponse>) -> Action {
        if let Err(err) = check_session_ids(
            &self.initial.session_id,
            &mut self.server_side_session_id,
            &resp.session_id,
            &resp.server_side_session_id,
        ) {
            return Action::Fail(err, self.release_all());
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
        let not_found = [OPERATION_NOT_FOUND, SESSION_NOT_FOUND]
            .into_iter()
            .find(|m| crate::status::mentions(&status, m));
        if let Some(marker) = not_found {
            if self.last_returned.is_some() {
                let err = ReattachError::ResponseAlreadyReceived { marker, status };
                return Action::Fail(err, self.release_all());
            }
            // The ExecutePlan never reached the server: send it again at once.
            return match self.decide(retrying, AttemptError::RetryNow(Some(status))) {
                Ok(_) => {
                    self.counters.re_executes += 1;
                    self.stream_open = true;
                    Action::Open(Open::Execute(self.initial.clone()))
                }
                Err(status) => self.fail(status),
            };
        }
        if status.code() == Code::DeadlineExceeded
            || classify_failure(&status) == FailureKind::Deadline
        {
            return self.retry_now(status, retrying);
        }
        match self.decide(retrying, AttemptError::Status(status)) {
            Ok(delay) => {
                self.counters.reattaches += 1;
                self.stream_open = true;
                Action::SleepThenOpen(delay, Open::Reattach(self.reattach_request()))
            }
            Err(status) => self.fail(status),
        }
    }

    fn retry_now(&mut self, cause: Status, retrying: &Retrying) -> Action {
        self.stream_open = false;
        match self.decide(retrying, AttemptError::RetryNow(Some(cause))) {
            Ok(_) => {
                self.counters.reattaches += 1;
                self.stream_open = true;
                Action::Open(Open::Reattach(self.reattach_request()))
            }
            Err(status) => self.fail(status),
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
                }
                Ok(delay)
            }
            RetryDecision::GiveUp(_) => Err(error.into_status()),
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
    pub fn reattach_request(&self) -> ReattachExecuteRequest {
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
    pub fn release_request(&self, release: &Release) -> ReleaseExecuteRequest {
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

/// The session-id check of every response (PySpark's
/// `_verify_response_integrity`), for executions and the session's unary
/// RPCs alike: the response must name the request's session; the first
/// non-empty server-side session id is recorded in `seen`, and a different
/// one later means the server restarted. An empty server-side id is ignored.
pub(crate) fn check_session_ids(
    expected: &str,
    seen: &mut Option<String>,
    session_id: &str,
    server_side: &str,
) -> Result<(), ReattachError> {
    if session_id != expected {
        return Err(ReattachError::SessionMismatch {
            expected: expected.to_owned(),
            got: session_id.to_owned(),
        });
    }
    if server_side.is_empty() {
        return Ok(());
    }
    match seen {
        Some(s) if s != server_side => Err(ReattachError::ServerSideSessionChanged {
            expected: s.clone(),
            got: server_side.to_owned(),
        }),
        Some(_) => Ok(()),
        None => {
            *seen = Some(server_side.to_owned());
            Ok(())
        }
    }
}

/// `8-4-4-4-12` lower- or upper-case hex.
pub(crate) fn is_canonical_uuid(s: &str) -> bool {
    s.len() == 36
        && s.char_indices().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => c == '-',
            _ => c.is_ascii_hexdigit(),
        })
}
