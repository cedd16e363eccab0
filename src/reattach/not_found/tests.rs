//! Each server's "not found" wording, one test per row of the table, and
//! the core's rule for an ExecutePlan that never reached the server:
//! re-sent, never reattached, while the transport proves it unsent.
//!
//! Sail (pysail 0.7.2) answers a ReattachExecute for an operation it never
//! received with `INTERNAL "invalid argument: operation not found: <id>"`,
//! not Spark's error class, so a client relying on Spark's words alone lost
//! the query when its first connections were refused. The Sail statuses
//! below are built from the bytes Sail 0.7.2 sent (its
//! `grpc-status-details-bin`, captured on the wire).

use std::collections::HashMap;
use std::time::Duration;

use base64::Engine as _;
use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt};

use super::{Server, WORDINGS, recognise};
use crate::error_classes::{OPERATION_NOT_FOUND, SESSION_NOT_FOUND};
use crate::policy::PySparkPolicy;
use crate::policy::RetryPolicy;
use crate::proto::execute_plan_response::{ResponseType, ResultComplete};
use crate::proto::{ExecutePlanRequest, ExecutePlanResponse};
use crate::reattach::ReattachError;
use crate::reattach::core::{Action, Event, Open, ReattachCore};
use crate::retrying::PySparkRetrying;
use crate::retrying::Retrying;

/// The operation id of the captured Sail answer.
const OP: &str = "00000000-0000-4000-8000-000000000001";

/// Sail 0.7.2's `grpc-status-details-bin` for `ReattachExecute(OP)`: a
/// `google.rpc.Status` with ErrorInfo reason
/// `java.lang.IllegalArgumentException`, domain `org.apache.spark`,
/// metadata `classes`, no errorClass.
const SAIL_DETAILS: &str = "CA0SS2ludmFsaWQgYXJndW1lbnQ6IG9wZXJhdGlvbiBub3QgZm91bmQ6IDAwMDAwMDAwLTAwMDAtNDAwMC04MDAwLTAwMDAwMDAwMDAwMRqVAQoodHlwZS5nb29nbGVhcGlzLmNvbS9nb29nbGUucnBjLkVycm9ySW5mbxJpCiJqYXZhLmxhbmcuSWxsZWdhbEFyZ3VtZW50RXhjZXB0aW9uEhBvcmcuYXBhY2hlLnNwYXJrGjEKB2NsYXNzZXMSJlsiamF2YS5sYW5nLklsbGVnYWxBcmd1bWVudEV4Y2VwdGlvbiJd";

/// Sail's answer, exactly as captured.
fn sail_not_found() -> Status {
    let details = base64::engine::general_purpose::STANDARD
        .decode(SAIL_DETAILS)
        .unwrap();
    Status::with_details(
        Code::Internal,
        format!("invalid argument: operation not found: {OP}"),
        details.into(),
    )
}

/// A Sail-like answer with the given parts, for near misses.
fn sail_like(code: Code, message: &str, error_class: Option<&str>) -> Status {
    let mut metadata = HashMap::new();
    metadata.insert(
        "classes".to_owned(),
        "[\"java.lang.IllegalArgumentException\"]".to_owned(),
    );
    if let Some(class) = error_class {
        metadata.insert("errorClass".to_owned(), class.to_owned());
    }
    let details = ErrorDetails::with_error_info(
        "java.lang.IllegalArgumentException",
        "org.apache.spark",
        metadata,
    );
    Status::with_error_details(code, message, details)
}

/// Spark 4.3's answer: the class in the message and the ErrorInfo.
fn spark_not_found(class: &str) -> Status {
    let mut metadata = HashMap::new();
    metadata.insert("errorClass".to_owned(), class.to_owned());
    metadata.insert("sqlState".to_owned(), "HY000".to_owned());
    let details = ErrorDetails::with_error_info(
        "org.apache.spark.SparkSQLException",
        "org.apache.spark",
        metadata,
    );
    Status::with_error_details(
        Code::Internal,
        format!("[{class}] The handle {OP} is invalid. SQLSTATE: HY000"),
        details,
    )
}

/// A connection refused: the request never left (`FailureKind::Unprocessed`).
fn refused() -> Status {
    let io = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
    Status::from_error(Box::new(tonic::ConnectError(Box::new(io))))
}

/// A reset after the request was written (`FailureKind::MaybeProcessed`).
fn reset() -> Status {
    Status::from_error(Box::new(std::io::Error::from(
        std::io::ErrorKind::ConnectionReset,
    )))
}

// ---- the table, one test per row ----

#[test]
fn the_table_has_one_row_per_tested_wording() {
    let rows: Vec<_> = WORDINGS
        .iter()
        .map(|w| (w.server, w.marker, w.before_any_response))
        .collect();
    assert_eq!(
        rows,
        [
            (Server::Spark, OPERATION_NOT_FOUND, false),
            (Server::Spark, SESSION_NOT_FOUND, false),
            (Server::Sail, OPERATION_NOT_FOUND, true),
        ],
        "a new row needs its own test below"
    );
}

fn row(status: &Status, answered: bool) -> Option<(Server, &'static str)> {
    recognise(status, OP, answered).map(|w| (w.server, w.marker))
}

#[test]
fn spark_operation_not_found_row_is_todays_rule() {
    let spark = Some((Server::Spark, OPERATION_NOT_FOUND));
    let s = spark_not_found(OPERATION_NOT_FOUND);
    assert_eq!(row(&s, false), spark);
    // Trusted after answers too (the core then reports ResponseAlreadyReceived).
    assert_eq!(row(&s, true), spark);
    // The class alone, in the message, in any code (as before).
    assert_eq!(
        row(
            &Status::unknown("x [INVALID_HANDLE.OPERATION_NOT_FOUND] y"),
            true
        ),
        spark
    );
    // Near miss: another class.
    assert_eq!(row(&spark_not_found("INVALID_HANDLE.FORMAT"), false), None);
}

#[test]
fn spark_session_not_found_row_is_todays_rule() {
    let spark = Some((Server::Spark, SESSION_NOT_FOUND));
    let s = spark_not_found(SESSION_NOT_FOUND);
    assert_eq!(row(&s, false), spark);
    assert_eq!(row(&s, true), spark);
    assert_eq!(
        row(&spark_not_found("INVALID_HANDLE.SESSION_CLOSED"), false),
        None
    );
}

#[test]
fn sail_operation_not_found_row_only_before_any_answer() {
    let sail = Some((Server::Sail, OPERATION_NOT_FOUND));
    assert_eq!(row(&sail_not_found(), false), sail);
    let msg = format!("invalid argument: operation not found: {OP}");
    assert_eq!(row(&sail_like(Code::Internal, &msg, None), false), sail);
    // After any answer Sail knew the operation: "not found" is not "not sent".
    assert_eq!(row(&sail_not_found(), true), None);
    // Near misses: another operation, another code, an error class, no
    // ErrorInfo, a longer message, another reason.
    let other = "invalid argument: operation not found: 00000000-0000-4000-8000-000000000002";
    assert_eq!(row(&sail_like(Code::Internal, other, None), false), None);
    assert_eq!(row(&sail_like(Code::Unknown, &msg, None), false), None);
    assert_eq!(
        row(&sail_like(Code::Internal, &msg, Some("SOME.CLASS")), false),
        None
    );
    assert_eq!(row(&Status::internal(msg.clone()), false), None);
    let longer = format!("{msg} (and more)");
    assert_eq!(row(&sail_like(Code::Internal, &longer, None), false), None);
    let reason = Status::with_error_details(
        Code::Internal,
        msg,
        ErrorDetails::with_error_info("java.lang.IllegalStateException", "org.apache.spark", []),
    );
    assert_eq!(row(&reason, false), None);
}

// ---- the core: which segment follows ----

/// PySpark's `TestPolicy` shape (3 retries, 10 ms apart, no jitter), seed 3.
fn test_retrying() -> Retrying {
    let policy = RetryPolicy::pyspark_builder()
        .max_retries(Some(3))
        .initial_backoff_ms(10.0)
        .max_backoff_ms(Some(10.0))
        .jitter_ms(0.0)
        .build()
        .expect("a valid policy");
    Retrying::pyspark_with(vec![policy]).with_seed(3)
}

fn core() -> ReattachCore {
    ReattachCore::new(ExecutePlanRequest {
        session_id: "s".into(),
        operation_id: Some(OP.into()),
        ..Default::default()
    })
    .unwrap()
}

fn resp(id: &str, done: bool) -> Box<ExecutePlanResponse> {
    Box::new(ExecutePlanResponse {
        session_id: "s".into(),
        server_side_session_id: "ss".into(),
        response_id: id.into(),
        response_type: done.then_some(ResponseType::ResultComplete(ResultComplete {})),
        ..Default::default()
    })
}

/// What an action opens: `Some(true)` ExecutePlan, `Some(false)` ReattachExecute.
fn opens(action: &Action) -> Option<bool> {
    match action {
        Action::Open(o) | Action::SleepThenOpen(_, o) => Some(matches!(o, Open::Execute(_))),
        _ => None,
    }
}

const EXECUTE: Option<bool> = Some(true);
const REATTACH: Option<bool> = Some(false);

#[test]
fn refused_execute_is_sent_again_after_the_backoff_not_reattached() {
    let r = test_retrying();
    let mut c = core();
    assert_eq!(opens(&c.poll_next(&r)), EXECUTE);
    for _ in 0..2 {
        let a = c.on_event(Event::Error(refused()), &r);
        assert!(
            matches!(a, Action::SleepThenOpen(d, Open::Execute(ref req)) if d == Duration::from_millis(10) && req == c.initial_request()),
            "{a:?}"
        );
    }
    assert!(matches!(c.on_event(Event::Opened, &r), Action::Read));
    assert!(matches!(
        c.on_event(Event::Response(resp("r1", true)), &r),
        Action::Emit(..)
    ));
    let n = c.stats();
    assert_eq!((n.re_executes, n.reattaches, n.policy_retries), (2, 0, 2));
}

#[test]
fn refused_execute_uses_the_same_budget() {
    // Not more retryable than before: 3 retries, then the refusal surfaces.
    let r = test_retrying();
    let mut c = core();
    c.poll_next(&r);
    for _ in 0..3 {
        assert_eq!(opens(&c.on_event(Event::Error(refused()), &r)), EXECUTE);
    }
    match c.on_event(Event::Error(refused()), &r) {
        Action::Fail(ReattachError::Status(s), _) => assert_eq!(s.code(), Code::Unavailable),
        other => panic!("{other:?}"),
    }
}

#[test]
fn execute_that_may_have_left_is_reattached() {
    let r = test_retrying();
    let mut c = core();
    c.poll_next(&r);
    assert_eq!(opens(&c.on_event(Event::Error(reset()), &r)), REATTACH);
    // A refused reattach proves nothing about the ExecutePlan: reattach again.
    assert_eq!(opens(&c.on_event(Event::Error(refused()), &r)), REATTACH);
    assert_eq!(c.stats().re_executes, 0);
}

#[test]
fn refused_then_reset_execute_is_reattached() {
    let r = test_retrying();
    let mut c = core();
    c.poll_next(&r);
    assert_eq!(opens(&c.on_event(Event::Error(refused()), &r)), EXECUTE);
    assert_eq!(opens(&c.on_event(Event::Error(reset()), &r)), REATTACH);
}

#[test]
fn stall_or_deadline_on_execute_is_reattached() {
    let r = test_retrying();
    let mut c = core();
    c.poll_next(&r);
    let a = c.on_event(Event::Stalled(Duration::from_secs(10)), &r);
    assert_eq!(opens(&a), REATTACH);
    let mut c = core();
    c.poll_next(&r);
    assert_eq!(opens(&c.on_event(Event::SegmentDeadline, &r)), REATTACH);
    let mut c = core();
    c.poll_next(&r);
    assert_eq!(opens(&c.on_event(Event::Error(refused()), &r)), EXECUTE);
    assert_eq!(opens(&c.on_event(Event::SegmentDeadline, &r)), REATTACH);
}

#[test]
fn answered_execute_is_reattached_even_after_a_refusal() {
    let r = test_retrying();
    let mut c = core();
    c.poll_next(&r);
    c.on_event(Event::Opened, &r);
    assert_eq!(opens(&c.on_event(Event::Error(refused()), &r)), REATTACH);
    // A graceful end reattaches, as before.
    let mut c = core();
    c.poll_next(&r);
    c.on_event(Event::Opened, &r);
    c.on_event(Event::Response(resp("r1", false)), &r);
    assert_eq!(opens(&c.on_event(Event::EndOfStream, &r)), REATTACH);
}

#[test]
fn sail_not_found_before_any_answer_sends_the_execute_again() {
    let r = test_retrying();
    let mut c = core();
    c.poll_next(&r);
    assert_eq!(opens(&c.on_event(Event::Error(reset()), &r)), REATTACH);
    let a = c.on_event(Event::Error(sail_not_found()), &r);
    assert!(matches!(a, Action::Open(Open::Execute(_))), "{a:?}");
    let n = c.stats();
    assert_eq!((n.re_executes, n.reattaches), (1, 1));
    // Refused again now: the server still cannot know it, send it again.
    assert_eq!(opens(&c.on_event(Event::Error(refused()), &r)), EXECUTE);
}

#[test]
fn sail_not_found_after_an_answer_surfaces() {
    let r = test_retrying();
    let mut c = core();
    c.poll_next(&r);
    c.on_event(Event::Opened, &r);
    assert_eq!(opens(&c.on_event(Event::Error(reset()), &r)), REATTACH);
    match c.on_event(Event::Error(sail_not_found()), &r) {
        Action::Fail(ReattachError::Status(s), _) => {
            assert_eq!(s.code(), Code::Internal);
            assert!(s.message().contains("operation not found"), "{s:?}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(c.stats().re_executes, 0);
}

#[test]
fn sail_wording_for_another_operation_surfaces() {
    let r = test_retrying();
    let mut c = core();
    c.poll_next(&r);
    c.on_event(Event::Error(reset()), &r);
    let other = "invalid argument: operation not found: 00000000-0000-4000-8000-000000000002";
    let a = c.on_event(Event::Error(sail_like(Code::Internal, other, None)), &r);
    assert!(
        matches!(a, Action::Fail(ReattachError::Status(_), _)),
        "{a:?}"
    );
}

#[test]
fn spark_not_found_after_a_response_is_unchanged() {
    let r = test_retrying();
    let mut c = core();
    c.poll_next(&r);
    c.on_event(Event::Response(resp("r1", false)), &r);
    assert_eq!(opens(&c.on_event(Event::Error(reset()), &r)), REATTACH);
    match c.on_event(Event::Error(spark_not_found(OPERATION_NOT_FOUND)), &r) {
        Action::Fail(ReattachError::ResponseAlreadyReceived { marker, .. }, _) => {
            assert_eq!(marker, OPERATION_NOT_FOUND)
        }
        other => panic!("{other:?}"),
    }
}

// ---- real sockets: a port that refuses until a server listens on it ----
