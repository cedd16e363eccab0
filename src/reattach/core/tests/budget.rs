//! The retry budget: reset on progress, exhaustion, replayed ids, empty segments, a changed server-side session.

use super::{
    Action, Code, Duration, EmptySegment, Event, IntegrityError, Item, ManualClock, Open,
    ReattachCore, ReattachError, Release, Script, request, resp, run, run_with, shared,
    test_retrying, unavailable,
};

/// No upstream test; run against PySpark 4.3.0.
#[test]
fn budget_resets_on_progress() {
    // UNAVAILABLE x3, a response, UNAVAILABLE x3, done: max 3 suffices
    // because every delivered response starts a fresh budget.
    let mut attach = vec![unavailable(), unavailable(), Item::R("1")];
    attach.extend(std::iter::repeat_n(unavailable(), 3));
    attach.push(Item::Done("2"));
    let (c, e) = run(request(), shared(vec![unavailable()]), shared(attach), None);
    assert!(e.is_none(), "{e:?}");
    assert_eq!((c.sleeps.len(), c.attach), (6, 6));
}

/// No upstream test; run against PySpark 4.3.0.
#[test]
fn exhaustion_after_four_failures() {
    let (c, e) = run(
        request(),
        shared(vec![unavailable()]),
        shared(vec![unavailable(), unavailable(), unavailable()]),
        None,
    );
    assert!(matches!(e, Some(ReattachError::Status(s)) if s.code() == Code::Unavailable));
    assert_eq!(
        (c.execute, c.attach, c.sleeps.len(), c.release_all),
        (1, 3, 3, 1)
    );
    assert!(
        c.attach_requests
            .iter()
            .all(|r| r.last_response_id.is_none())
    );
}

/// Departure from PySpark: upstream's replayed response ids are delivered
/// twice there; here the replay ends the stream with an integrity error.
#[test]
fn replayed_response_ids_fail() {
    let (c, e) = run(
        request(),
        shared(vec![Item::R("1"), unavailable()]),
        shared(vec![Item::R("1"), Item::R("1"), Item::Done("2")]),
        None,
    );
    match e {
        Some(ReattachError::Integrity(IntegrityError::DuplicateResponseId(id))) => {
            assert_eq!(id, "1")
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(c.yielded, ["1"], "the replay is never delivered");
    assert_eq!(c.release_all, 1);
}

#[test]
fn long_graceful_segments_never_use_the_budget() {
    // 50 empty reattach streams in a row, each open for 1 s (a server's
    // senderMaxStreamDuration), with a max-3 policy: still fine, no sleep.
    let clock = ManualClock::new();
    let retrying = test_retrying().with_clock(clock.clone());
    let mut calls: Vec<Vec<Item>> = (0..50).map(|_| vec![]).collect();
    calls.push(vec![Item::Done("2")]);
    let (c, e) = run_with(
        &retrying,
        &|| clock.advance(Duration::from_secs(1)),
        request(),
        shared(vec![Item::R("1")]),
        Script::PerCall(calls.into()),
        None,
    );
    assert!(e.is_none());
    assert_eq!(c.attach, 51);
    assert!(c.sleeps.is_empty());
}

/// Departure from PySpark: instant empty segments, one after another, are
/// a hot loop. The first reattach is immediate, later ones wait the
/// policy's backoff, and the run ends when its budget (max 3) is spent.
#[test]
fn instant_empty_segments_back_off_then_fail() {
    let calls: Vec<Vec<Item>> = (0..50).map(|_| vec![]).collect();
    let (c, e) = run(
        request(),
        shared(vec![Item::R("1")]),
        Script::PerCall(calls.into()),
        None,
    );
    match e {
        Some(ReattachError::NoProgress { segments, what, .. }) => {
            assert_eq!(segments, 5);
            assert_eq!(what, EmptySegment::EndedEmpty);
        }
        other => panic!("{other:?}"),
    }
    // The reattach after the response, 1 free one after the first empty
    // segment, 3 after a backoff in [10, 20] ms, then the failure.
    assert_eq!(c.attach, 5);
    assert_eq!(c.sleeps.len(), 3);
    assert!(
        c.sleeps.iter().all(|s| (10..=20).contains(s)),
        "{:?}",
        c.sleeps
    );
    assert_eq!(c.release_all, 1);
}

#[test]
fn server_side_session_change_fails() {
    let mut retrying_resp = resp("2", false);
    retrying_resp.server_side_session_id = "other".into();
    let retrying = test_retrying();
    let mut core = ReattachCore::new(request()).unwrap();
    assert!(matches!(
        core.poll_next(&retrying),
        Action::Open(Open::Execute(_))
    ));
    assert!(matches!(
        core.on_event(Event::Response(Box::new(resp("1", false))), &retrying),
        Action::Emit(..)
    ));
    assert!(matches!(core.poll_next(&retrying), Action::Read));
    match core.on_event(Event::Response(Box::new(retrying_resp)), &retrying) {
        Action::Fail(
            ReattachError::ServerSideSessionChanged { expected, got },
            Some(Release::All),
        ) => {
            assert_eq!((expected.as_str(), got.as_str()), ("ss", "other"));
        }
        other => panic!("{other:?}"),
    }
}
