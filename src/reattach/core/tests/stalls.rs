//! Stalls: immediate reattaches, their bound, and which failures are forgiven.

use super::{
    Action, Code, Duration, Event, ExecutePlanResponse, ManualClock, Open, ReattachCore,
    ReattachError, Release, Retrying, Status, request, resp, test_retrying,
};

#[test]
fn stall_and_segment_deadline_reattach_at_once() {
    let retrying = test_retrying();
    let mut core = ReattachCore::new(request()).unwrap();
    core.poll_next(&retrying);
    core.on_event(Event::Response(Box::new(resp("1", false))), &retrying);
    core.poll_next(&retrying);
    for ev in [
        Event::Stalled(Duration::from_secs(1)),
        Event::SegmentDeadline,
    ] {
        match core.on_event(ev, &retrying) {
            Action::Open(Open::Reattach(r)) => assert_eq!(r.last_response_id.as_deref(), Some("1")),
            other => panic!("{other:?}"),
        }
    }
}

/// A core that has yielded response "1" and waits for the next one, with a
/// manual clock and a 60 s immediate-retry bound.
fn waiting_core() -> (ReattachCore, Retrying, ManualClock) {
    let clock = ManualClock::new();
    let retrying = test_retrying()
        .with_clock(clock.clone())
        .with_retry_now_bound(Duration::from_secs(60));
    let mut core = ReattachCore::new(request()).unwrap();
    core.poll_next(&retrying);
    core.on_event(Event::Response(Box::new(resp("1", false))), &retrying);
    assert!(matches!(core.poll_next(&retrying), Action::Read));
    (core, retrying, clock)
}

fn expect_reattach_from_1(action: Action) {
    match action {
        Action::Open(Open::Reattach(r)) => assert_eq!(r.last_response_id.as_deref(), Some("1")),
        other => panic!("expected a reattach, got {other:?}"),
    }
}

#[test]
fn answered_stalls_never_use_up_the_immediate_retry_bound() {
    // A query computing in silence for 100 idle timeouts (far past the 60 s
    // bound): every stall reattach is answered, so none of them counts.
    let (mut core, retrying, clock) = waiting_core();
    for _ in 0..100 {
        clock.advance(Duration::from_secs(10));
        expect_reattach_from_1(core.on_event(Event::Stalled(Duration::from_secs(10)), &retrying));
        assert!(
            core.opening_after_stall(),
            "a stall reattach goes over a fresh connection"
        );
        assert!(matches!(
            core.on_event(Event::Opened, &retrying),
            Action::Read
        ));
        assert!(!core.opening_after_stall());
    }
    let c = core.stats();
    assert_eq!((c.stalls, c.stalls_answered, c.re_executes), (100, 100, 0));
    // The silence ends: the response is delivered.
    match core.on_event(Event::Response(Box::new(resp("2", true))), &retrying) {
        Action::Emit(r, Release::All) => assert_eq!(r.response_id, "2"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn unanswered_stalls_give_up_at_the_bound_with_the_stall_as_cause() {
    let (mut core, retrying, clock) = waiting_core();
    // The first stall starts the clock at 10 s; at 70 s the bound is spent.
    for _ in 0..6 {
        clock.advance(Duration::from_secs(10));
        expect_reattach_from_1(core.on_event(Event::Stalled(Duration::from_secs(10)), &retrying));
        assert!(core.opening_after_stall());
    }
    clock.advance(Duration::from_secs(10));
    match core.on_event(Event::Stalled(Duration::from_secs(10)), &retrying) {
        Action::Fail(ReattachError::Status(s), Some(Release::All)) => {
            assert_eq!(s.code(), Code::Unavailable);
            assert!(
                s.message().contains("no message for 10s"),
                "{}",
                s.message()
            );
        }
        other => panic!("{other:?}"),
    }
    let c = core.stats();
    assert_eq!((c.stalls, c.stalls_answered, c.re_executes), (7, 0, 0));
}

#[test]
fn a_message_after_a_stall_is_an_answer() {
    let (mut core, retrying, clock) = waiting_core();
    // Unanswered stalls for 50 s, then a message: the clock starts afresh,
    // so 50 s more of unanswered stalls are still within the bound.
    for _ in 0..6 {
        clock.advance(Duration::from_secs(10));
        expect_reattach_from_1(core.on_event(Event::Stalled(Duration::from_secs(10)), &retrying));
    }
    let progress = ExecutePlanResponse {
        response_type: None,
        ..resp("p", false)
    };
    assert!(matches!(
        core.on_event(Event::Response(Box::new(progress)), &retrying),
        Action::Emit(..)
    ));
    assert_eq!(core.stats().stalls_answered, 1);
    assert!(!core.opening_after_stall());
}

#[test]
fn only_stalls_are_forgiven_and_only_they_ask_for_a_fresh_connection() {
    let (mut core, retrying, clock) = waiting_core();
    // Segment deadlines answered by the server still share the bound.
    let mut gave_up = false;
    for _ in 0..10 {
        clock.advance(Duration::from_secs(10));
        match core.on_event(Event::SegmentDeadline, &retrying) {
            Action::Open(Open::Reattach(_)) => {
                assert!(!core.opening_after_stall(), "a deadline is not a stall");
                assert!(matches!(
                    core.on_event(Event::Opened, &retrying),
                    Action::Read
                ));
            }
            Action::Fail(ReattachError::Status(s), _) => {
                assert_eq!(s.code(), Code::DeadlineExceeded);
                gave_up = true;
                break;
            }
            other => panic!("{other:?}"),
        }
    }
    assert!(gave_up, "deadlines must stay bounded");
    assert_eq!(core.stats().stalls_answered, 0);

    // An error after a stall clears the fresh-connection request.
    let (mut core, retrying, _) = waiting_core();
    expect_reattach_from_1(core.on_event(Event::Stalled(Duration::from_secs(10)), &retrying));
    assert!(core.opening_after_stall());
    assert!(matches!(
        core.on_event(Event::Error(Status::unavailable("refused")), &retrying),
        Action::SleepThenOpen(..)
    ));
    assert!(!core.opening_after_stall());
    assert_eq!(core.stats().stalls_answered, 0);
}
