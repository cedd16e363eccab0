//! A refused token: one fresh token and a reattach from the last response
//! delivered, never a re-execute of a query that ran; a second refusal
//! without progress ends the stream, marked for the session's error.

use super::{
    Action, Event, Open, ReattachCore, ReattachError, Release, request, resp, test_retrying,
};
use crate::token::refusal::token_error;
use tonic::Status;

fn expired() -> Event {
    Event::Error(Status::unauthenticated("token expired"))
}

/// A core refreshing the tokens of provider `p`, its `ExecutePlan` about
/// to be sent.
fn refreshing_core() -> (ReattachCore, crate::retrying::Retrying) {
    let retrying = test_retrying();
    let mut core = ReattachCore::new(request()).unwrap();
    core.refresh_tokens("p");
    assert!(matches!(
        core.poll_next(&retrying),
        Action::Open(Open::Execute(_))
    ));
    (core, retrying)
}

/// A core refreshing the tokens of provider `p`, one response delivered.
fn after_one_response() -> (ReattachCore, crate::retrying::Retrying) {
    let (mut core, retrying) = refreshing_core();
    assert!(matches!(
        core.on_event(Event::Opened, &retrying),
        Action::Read
    ));
    let emitted = core.on_event(Event::Response(Box::new(resp("1", false))), &retrying);
    assert!(matches!(emitted, Action::Emit(..)));
    assert!(matches!(core.poll_next(&retrying), Action::Read));
    (core, retrying)
}

#[test]
fn a_refusal_mid_stream_reattaches_with_a_fresh_token() {
    let (mut core, retrying) = after_one_response();
    let Action::RefreshThenOpen(Open::Reattach(r)) = core.on_event(expired(), &retrying) else {
        panic!("a refresh, then a reattach")
    };
    assert_eq!(r.last_response_id.as_deref(), Some("1"));
    assert_eq!(core.last_rpc(), "ReattachExecute");
    // Progress makes the budget whole again.
    assert!(matches!(
        core.on_event(Event::Opened, &retrying),
        Action::Read
    ));
    let emitted = core.on_event(Event::Response(Box::new(resp("2", false))), &retrying);
    assert!(matches!(emitted, Action::Emit(..)));
    assert!(matches!(core.poll_next(&retrying), Action::Read));
    assert!(matches!(
        core.on_event(expired(), &retrying),
        Action::RefreshThenOpen(Open::Reattach(_))
    ));
    let stats = core.stats();
    assert_eq!(
        (stats.token_refreshes, stats.reattaches, stats.re_executes),
        (2, 2, 0)
    );
}

#[test]
fn a_second_refusal_without_progress_ends_the_stream() {
    let (mut core, retrying) = after_one_response();
    assert!(matches!(
        core.on_event(expired(), &retrying),
        Action::RefreshThenOpen(_)
    ));
    let Action::Fail(ReattachError::Status(s), Some(Release::All)) =
        core.on_event(expired(), &retrying)
    else {
        panic!("the end")
    };
    assert_eq!(token_error(&s).expect("marked").provider(), "p");
    assert_eq!(core.stats().token_refreshes, 1);
}

/// The refused token had delivered a response on another stream of the
/// session: it expired, and the budget is whole again.
#[test]
fn a_second_refusal_of_a_token_that_worked_elsewhere_refreshes_again() {
    let (mut core, retrying) = after_one_response();
    assert!(matches!(
        core.on_event(expired(), &retrying),
        Action::RefreshThenOpen(_)
    ));
    core.token_was_answered();
    assert!(matches!(
        core.on_event(expired(), &retrying),
        Action::RefreshThenOpen(Open::Reattach(_))
    ));
    assert_eq!(core.stats().token_refreshes, 2);
}

#[test]
fn a_refused_execute_plan_is_sent_again_as_it_never_ran() {
    let (mut core, retrying) = refreshing_core();
    assert!(matches!(
        core.on_event(expired(), &retrying),
        Action::RefreshThenOpen(Open::Execute(_))
    ));
}

#[test]
fn without_refreshes_a_refusal_is_the_servers_error() {
    let retrying = test_retrying();
    let mut core = ReattachCore::new(request()).unwrap();
    assert!(matches!(core.poll_next(&retrying), Action::Open(_)));
    let Action::Fail(ReattachError::Status(s), _) = core.on_event(expired(), &retrying) else {
        panic!("not retried")
    };
    assert!(token_error(&s).is_none());
    assert_eq!(core.stats().token_refreshes, 0);
}
