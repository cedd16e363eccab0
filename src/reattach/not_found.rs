//! Whether the server may know this operation, and how each server says
//! that it does not.
//!
//! An ExecutePlan that never reached the server must be sent again; one
//! that did must be resumed with ReattachExecute, because re-sending it is
//! not safe everywhere (Spark ≤ 4.0 answers `OPERATION_ALREADY_EXISTS`, Sail
//! runs the query a second time). The client learns which case it is in two
//! ways, both kept here so the reattach core only calls hooks:
//!
//! * **What the transport proved** (`Delivery`, kept by the core). While every ExecutePlan
//!   of the execution failed `Unprocessed` (a refused connection, a request
//!   dropped unsent, REFUSED_STREAM, GOAWAY(NO_ERROR): see
//!   [`crate::policy::FailureKind`]) and nothing was answered, the server
//!   cannot know the operation: the next segment is the same ExecutePlan,
//!   sent after the normal backoff. Any other failure of an ExecutePlan, a
//!   stall or deadline, a graceful end, or any answer means it may know.
//! * **What the server says** ([`WORDINGS`]). A ReattachExecute for an
//!   operation the server never received is answered with "not found".
//!   Spark names that with an error class; other servers word it their own
//!   way. Every wording recognised is one row of one table, each with its
//!   own test. Nothing else in the crate matches server prose, and what
//!   counts as retryable is untouched: a row only feeds the existing
//!   "not found, re-send the ExecutePlan" branch.
//!
//! # Sail and DDL
//!
//! Sail registers an operation only after planning it, and DDL statements
//! run during planning. An ExecutePlan of a DDL statement whose connection
//! died while Sail was planning it can therefore be answered "not found"
//! and be sent again: its DDL may run twice. Queries and DML are registered
//! before they run, so they never run twice.

use tonic::{Code, Status};

use crate::policy::{Failure, FailureKind};

use crate::error_classes::{OPERATION_NOT_FOUND, SESSION_NOT_FOUND};

/// The server a recognised "not found" wording belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub(crate) enum Server {
    /// Apache Spark: an error class, in the message, the rich message or
    /// the ErrorInfo.
    Spark,
    /// Sail (pysail 0.7): `INTERNAL`, `invalid argument: operation not
    /// found: <operation id>`.
    Sail,
}

/// One way a server says it does not know an operation (or its session).
#[derive(Debug)]
pub(crate) struct Wording {
    /// The server that answers this way (what the table's tests check).
    #[cfg_attr(not(test), allow(dead_code))]
    pub server: Server,
    /// Spark's error class this wording means; reported in
    /// [`super::ReattachError::ResponseAlreadyReceived`].
    pub marker: &'static str,
    /// Trusted only while no segment of the execution has been answered.
    /// After an answer the server knew the operation, so such a wording
    /// means released, interrupted or restarted, never "not sent".
    pub before_any_response: bool,
    matches: fn(&Status, &str) -> bool,
}

impl Wording {
    /// Whether `status`, the answer to a request for `operation_id`, is
    /// this wording (regardless of [`Wording::before_any_response`]).
    pub(crate) fn matches(&self, status: &Status, operation_id: &str) -> bool {
        (self.matches)(status, operation_id)
    }
}

/// Every "not found" wording the client recognises, one row per server and
/// case.
pub(crate) const WORDINGS: &[Wording] = &[
    Wording {
        server: Server::Spark,
        marker: OPERATION_NOT_FOUND,
        before_any_response: false,
        matches: |s, _| crate::status::mentions(s, OPERATION_NOT_FOUND),
    },
    Wording {
        server: Server::Spark,
        marker: SESSION_NOT_FOUND,
        before_any_response: false,
        matches: |s, _| crate::status::mentions(s, SESSION_NOT_FOUND),
    },
    Wording {
        server: Server::Sail,
        marker: OPERATION_NOT_FOUND,
        before_any_response: true,
        matches: sail_operation_not_found,
    },
];

/// The row of [`WORDINGS`] that `status` (the answer to a request for
/// `operation_id`) is, if any. `answered`: some segment of the execution
/// was already answered, which rules out the rows trusted only before.
pub(crate) fn recognise(
    status: &Status,
    operation_id: &str,
    answered: bool,
) -> Option<&'static Wording> {
    WORDINGS
        .iter()
        .filter(|w| !(answered && w.before_any_response))
        .find(|w| w.matches(status, operation_id))
}

/// Sail 0.7's `handle_reattach_execute`: `SparkError::invalid(format!(
/// "operation not found: {id}"))`, sent as INTERNAL with an ErrorInfo whose
/// reason is `java.lang.IllegalArgumentException`, and no error class.
fn sail_operation_not_found(status: &Status, operation_id: &str) -> bool {
    status.code() == Code::Internal
        && status
            .message()
            .strip_prefix("invalid argument: operation not found: ")
            .is_some_and(|id| id == operation_id)
        && crate::status::error_info(status).is_some_and(|i| {
            i.reason == "java.lang.IllegalArgumentException" && i.error_class().is_none()
        })
}

/// What the client knows about the server's knowledge of the operation.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Delivery {
    /// The open (or last) segment is an ExecutePlan.
    execute_open: bool,
    /// The server may know the operation.
    may_know: bool,
    /// Some segment of the execution was answered (headers or a message).
    answered: bool,
}

impl Delivery {
    /// A segment is being opened: an ExecutePlan when `execute`.
    pub(crate) fn opening(&mut self, execute: bool) {
        self.execute_open = execute;
    }

    /// The server answered a segment.
    pub(crate) fn answered(&mut self) {
        self.answered = true;
        self.may_know = true;
    }

    /// The segment failed with `status` (from the server or the transport).
    pub(crate) fn failed(&mut self, status: &Status) {
        if self.execute_open && Failure::new(status).kind() != FailureKind::Unprocessed {
            self.may_know = true;
        }
    }

    /// The segment ended in a way that proves nothing about delivery: a
    /// stall, a deadline, or a clean end.
    pub(crate) fn unproven(&mut self) {
        self.may_know = true;
    }

    /// The server said it does not know the operation.
    pub(crate) fn not_known(&mut self) {
        self.may_know = false;
    }

    /// Whether the next segment must be a ReattachExecute (else the
    /// ExecutePlan is sent again).
    pub(crate) fn server_may_know(&self) -> bool {
        self.may_know
    }

    /// The "not found" row `status` is, given what was answered so far.
    pub(crate) fn not_found(
        &self,
        status: &Status,
        operation_id: &str,
    ) -> Option<&'static Wording> {
        recognise(status, operation_id, self.answered)
    }
}

#[cfg(test)]
mod tests;
