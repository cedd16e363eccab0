//! PySpark 4.3.0's reattach tests, ported against the sans-I/O core with a
//! scripted stub as PySpark's own tests use: exact execute / attach /
//! release_until / release_all / sleep counts.
//!
//! The first tests port `test_client.py::SparkConnectClientReattachTestCase`
//! (`python/pyspark/sql/tests/connect/client/`), each naming the upstream
//! test; where PySpark 4.3.0's own counts differ from that test's 2024
//! expectations, the 4.3.0 counts (obtained by running its
//! `ExecutePlanResponseReattachableIterator` against the same stub) are
//! asserted. The later scenarios have no upstream test: they were run the same
//! way against PySpark 4.3.0, and the counts it produced are asserted.

use std::collections::VecDeque;
use std::time::Duration;

use spark_connect_retry::policy::RetryPolicy;
use spark_connect_retry::proto::execute_plan_response::{ResponseType, ResultComplete};
use spark_connect_retry::proto::{ExecutePlanRequest, ExecutePlanResponse, ReattachExecuteRequest};
use spark_connect_retry::reattach::ReattachError;
use spark_connect_retry::reattach::core::{Action, Event, Open, ReattachCore, Release};
use spark_connect_retry::reattach::integrity::IntegrityError;
use spark_connect_retry::reattach::progress::EmptySegment;
use spark_connect_retry::retrying::{ManualClock, Retrying};
use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt};

#[derive(Clone, Debug)]
enum Item {
    R(&'static str),
    Done(&'static str),
    Err(Status),
}

/// One shared cursor for all calls (PySpark's shared generator), or one script per call.
enum Script {
    Shared(VecDeque<Item>),
    PerCall(VecDeque<Vec<Item>>),
}

impl Script {
    fn open(&mut self) -> VecDeque<Item> {
        match self {
            Script::Shared(_) => VecDeque::new(),
            Script::PerCall(calls) => calls.pop_front().unwrap_or_default().into(),
        }
    }
    fn next(&mut self, own: &mut VecDeque<Item>) -> Option<Item> {
        match self {
            Script::Shared(items) => items.pop_front(),
            Script::PerCall(_) => own.pop_front(),
        }
    }
}

fn resp(id: &str, done: bool) -> ExecutePlanResponse {
    ExecutePlanResponse {
        session_id: "s".into(),
        server_side_session_id: "ss".into(),
        operation_id: String::new(),
        response_id: id.into(),
        response_type: done.then_some(ResponseType::ResultComplete(ResultComplete {})),
        ..Default::default()
    }
}

#[derive(Debug, Default)]
struct Counts {
    execute: usize,
    attach: usize,
    release_until: Vec<String>,
    release_all: usize,
    sleeps: Vec<u64>,
    yielded: Vec<String>,
    attach_requests: Vec<ReattachExecuteRequest>,
    execute_requests: Vec<ExecutePlanRequest>,
}

/// Test policy of PySpark's tests: max 3, sleeps in [10, 20] ms.
fn test_retrying() -> Retrying {
    let p = RetryPolicy::builder()
        .max_retries(Some(3))
        .initial_backoff_ms(10.0)
        .max_backoff_ms(Some(10.0))
        .jitter_ms(10.0)
        .min_jitter_threshold_ms(10.0)
        .build()
        .unwrap();
    Retrying::new(vec![p]).with_seed(3)
}

fn request() -> ExecutePlanRequest {
    ExecutePlanRequest {
        session_id: "s".into(),
        client_type: Some("test".into()),
        ..Default::default()
    }
}

/// Drive the core to the end (or `take` responses), like the async driver does.
fn run(
    req: ExecutePlanRequest,
    execute: Script,
    attach: Script,
    take: Option<usize>,
) -> (Counts, Option<ReattachError>) {
    run_with(&test_retrying(), &|| {}, req, execute, attach, take)
}

/// [`run`] with a given policy loop, and `tick` called on every read.
fn run_with(
    retrying: &Retrying,
    tick: &dyn Fn(),
    req: ExecutePlanRequest,
    mut execute: Script,
    mut attach: Script,
    take: Option<usize>,
) -> (Counts, Option<ReattachError>) {
    let retrying = retrying.clone();
    let mut core = ReattachCore::new(req).unwrap();
    let mut c = Counts::default();
    let mut current: Option<(bool, VecDeque<Item>)> = None; // (is_execute, own items)
    let mut error = None;
    'outer: for _ in 0..1000 {
        if take.is_some_and(|n| c.yielded.len() >= n) {
            if let Some(Release::All) = core.on_drop() {
                c.release_all += 1;
            }
            break;
        }
        let mut action = core.poll_next(&retrying);
        for _ in 0..1000 {
            action = match action {
                Action::Finish => break 'outer,
                Action::Emit(r, release) => {
                    c.yielded.push(r.response_id.clone());
                    match release {
                        Release::Until(id) => c.release_until.push(id),
                        Release::All => c.release_all += 1,
                    }
                    continue 'outer;
                }
                Action::Fail(e, release) => {
                    if release.is_some() {
                        c.release_all += 1;
                    }
                    error = Some(e);
                    break 'outer;
                }
                Action::SleepThenOpen(d, open) => {
                    c.sleeps.push(d.as_millis() as u64);
                    Action::Open(open)
                }
                Action::Open(Open::Execute(r)) => {
                    c.execute += 1;
                    c.execute_requests.push(r);
                    current = Some((true, execute.open()));
                    Action::Read
                }
                Action::Open(Open::Reattach(r)) => {
                    c.attach += 1;
                    c.attach_requests.push(r);
                    current = Some((false, attach.open()));
                    Action::Read
                }
                Action::Read => {
                    tick();
                    let (is_exec, own) = current.as_mut().expect("read without a stream");
                    let script = if *is_exec { &mut execute } else { &mut attach };
                    let event = match script.next(own) {
                        None => Event::EndOfStream,
                        Some(Item::R(id)) => Event::Response(Box::new(resp(id, false))),
                        Some(Item::Done(id)) => Event::Response(Box::new(resp(id, true))),
                        Some(Item::Err(s)) => Event::Error(s),
                    };
                    core.on_event(event, &retrying)
                }
                other => panic!("an action this stub does not know: {other:?}"),
            };
        }
        panic!("no progress");
    }
    (c, error)
}

fn shared(items: Vec<Item>) -> Script {
    Script::Shared(items.into())
}

fn unavailable() -> Item {
    Item::Err(Status::unavailable("u"))
}

fn not_found(marker: &str) -> Item {
    Item::Err(Status::with_error_details(
        Code::Unavailable,
        marker,
        ErrorDetails::new(),
    ))
}

/// `test_client.py::SparkConnectClientReattachTestCase::test_basic_flow`.
#[test]
fn basic_flow() {
    let (c, e) = run(
        request(),
        shared(vec![Item::R("1"), Item::Done("2")]),
        shared(vec![]),
        None,
    );
    assert!(e.is_none());
    assert_eq!(
        (c.execute, c.attach, c.release_until.len(), c.release_all),
        (1, 0, 1, 1)
    );
    assert_eq!(c.yielded, ["1", "2"]);
    assert!(c.sleeps.is_empty());
}

/// `test_client.py::SparkConnectClientReattachTestCase::test_fail_during_execute`.
#[test]
fn fail_during_execute() {
    let (c, e) = run(
        request(),
        shared(vec![Item::R("1"), Item::Err(Status::internal("Fatal"))]),
        shared(vec![]),
        None,
    );
    assert!(matches!(e, Some(ReattachError::Status(s)) if s.message() == "Fatal"));
    assert_eq!(
        (c.execute, c.attach, c.release_until.len(), c.release_all),
        (1, 0, 1, 1)
    );
}

/// `test_client.py::SparkConnectClientReattachTestCase::test_fail_and_retry_during_execute`.
///
/// Upstream's stub replays response "1" after the reattach (its generator
/// is shared), which PySpark delivers twice; here that replay is an
/// integrity error (`replayed_response_ids_fail`), so the stub sends fresh
/// ids and the counts are upstream's.
#[test]
fn fail_and_retry_during_execute() {
    let (c, e) = run(
        request(),
        shared(vec![Item::R("1"), unavailable()]),
        shared(vec![Item::R("1b"), Item::R("1c"), Item::Done("2")]),
        None,
    );
    assert!(e.is_none());
    assert_eq!(
        (c.execute, c.attach, c.release_until.len(), c.release_all),
        (1, 1, 3, 1)
    );
    assert_eq!(c.sleeps.len(), 1);
    assert!((10..=20).contains(&c.sleeps[0]));
    assert_eq!(c.attach_requests[0].last_response_id.as_deref(), Some("1"));
}

/// `test_client.py::SparkConnectClientReattachTestCase::test_fail_and_retry_during_reattach`,
/// with fresh ids where upstream's stub replays "1" (see
/// `fail_and_retry_during_execute`).
#[test]
fn fail_and_retry_during_reattach() {
    let (c, e) = run(
        request(),
        shared(vec![Item::R("1"), unavailable()]),
        shared(vec![
            Item::R("1b"),
            unavailable(),
            Item::R("1c"),
            Item::Done("2"),
        ]),
        None,
    );
    assert!(e.is_none());
    assert_eq!(
        (c.execute, c.attach, c.release_until.len(), c.release_all),
        (1, 2, 3, 1)
    );
    assert_eq!(c.sleeps.len(), 2);
}

/// `test_client.py::SparkConnectClientReattachTestCase::test_not_found_recovers`
/// (SPARK-48056), with 4.3.0's release count.
#[test]
fn not_found_recovers() {
    for marker in [
        "INVALID_HANDLE.SESSION_NOT_FOUND",
        "INVALID_HANDLE.OPERATION_NOT_FOUND",
    ] {
        let (c, e) = run(
            request(),
            shared(vec![not_found(marker), Item::Done("2")]),
            shared(vec![]),
            None,
        );
        assert!(e.is_none(), "{marker}");
        assert_eq!(
            (c.execute, c.attach, c.release_until.len(), c.release_all),
            (2, 0, 0, 1)
        );
        assert!(c.sleeps.is_empty());
        // Re-sent byte-identical.
        assert_eq!(c.execute_requests[0], c.execute_requests[1]);
    }
}

/// `test_client.py::SparkConnectClientReattachTestCase::test_not_found_fails`,
/// with 4.3.0's release counts.
#[test]
fn not_found_after_a_response_fails() {
    let (c, e) = run(
        request(),
        shared(vec![Item::R("1")]),
        shared(vec![not_found("INVALID_HANDLE.OPERATION_NOT_FOUND")]),
        None,
    );
    let e = e.expect("must fail");
    assert!(e.to_string().contains("RESPONSE_ALREADY_RECEIVED"), "{e}");
    assert_eq!((c.execute, c.attach), (1, 1));
    assert_eq!(c.release_until, ["1"]);
    assert_eq!(c.release_all, 1);
}

/// `test_client.py::SparkConnectClientReattachTestCase::test_observed_session_id`
/// (SPARK-49458).
#[test]
fn observed_session_id_on_reattach() {
    let mut req = request();
    req.client_observed_server_side_session_id = Some(String::new());
    let (c, _) = run(
        req,
        shared(vec![Item::R("1")]),
        shared(vec![Item::Done("2")]),
        None,
    );
    assert_eq!(
        c.attach_requests[0].client_observed_server_side_session_id,
        None
    );
    let mut req = request();
    req.client_observed_server_side_session_id = Some("ss".into());
    let (c, _) = run(
        req,
        shared(vec![Item::R("1")]),
        shared(vec![Item::Done("2")]),
        None,
    );
    assert_eq!(
        c.attach_requests[0]
            .client_observed_server_side_session_id
            .as_deref(),
        Some("ss")
    );
}

/// No upstream test; run against PySpark 4.3.0.
#[test]
fn graceful_reattach_chain() {
    let (c, e) = run(
        request(),
        shared(vec![Item::R("1")]),
        Script::PerCall(vec![vec![Item::R("2")], vec![], vec![Item::Done("3")]].into()),
        None,
    );
    assert!(e.is_none());
    assert_eq!(c.yielded, ["1", "2", "3"]);
    assert_eq!((c.execute, c.attach), (1, 3));
    let lasts: Vec<_> = c
        .attach_requests
        .iter()
        .map(|r| r.last_response_id.clone().unwrap())
        .collect();
    assert_eq!(lasts, ["1", "2", "2"]);
    assert_eq!(c.release_until, ["1", "2"]);
    assert_eq!(c.release_all, 1);
    assert!(c.sleeps.is_empty());
}

/// No upstream test; run against PySpark 4.3.0 (its DEADLINE_EXCEEDED
/// reattach path, SPARK-56538).
#[test]
fn deadline_mid_stream_reattaches_at_once() {
    let (c, e) = run(
        request(),
        shared(vec![
            Item::R("1"),
            Item::Err(Status::deadline_exceeded("late")),
        ]),
        shared(vec![Item::R("2"), Item::Done("3")]),
        None,
    );
    assert!(e.is_none());
    assert_eq!(c.yielded, ["1", "2", "3"]);
    assert_eq!(c.attach, 1);
    assert_eq!(c.attach_requests[0].last_response_id.as_deref(), Some("1"));
    assert!(c.sleeps.is_empty());
}

/// No upstream test; run against PySpark 4.3.0.
#[test]
fn retry_info_on_resource_exhausted() {
    let ri = Status::with_error_details(
        Code::ResourceExhausted,
        "busy",
        ErrorDetails::with_retry_info(Some(Duration::from_millis(25))),
    );
    let (c, e) = run(
        request(),
        shared(vec![Item::R("1"), Item::Err(ri)]),
        shared(vec![Item::Done("2")]),
        None,
    );
    assert!(e.is_none());
    assert_eq!(c.sleeps.len(), 1);
    assert!((25..=35).contains(&c.sleeps[0]), "{:?}", c.sleeps);
    assert_eq!(c.attach, 1);
}

/// No upstream test; run against PySpark 4.3.0.
#[test]
fn disconnected_cursor_is_retried() {
    let (c, e) = run(
        request(),
        shared(vec![
            Item::R("1"),
            Item::Err(Status::internal(
                "[INVALID_CURSOR.DISCONNECTED] cursor disconnected",
            )),
        ]),
        shared(vec![Item::Done("2")]),
        None,
    );
    assert!(e.is_none());
    assert_eq!(c.sleeps.len(), 1);
    assert_eq!(c.attach_requests[0].last_response_id.as_deref(), Some("1"));
}

/// No upstream test; run against PySpark 4.3.0.
#[test]
fn early_close_releases() {
    let (c, e) = run(
        request(),
        shared(vec![Item::R("1"), Item::R("2"), Item::Done("3")]),
        shared(vec![]),
        Some(1),
    );
    assert!(e.is_none());
    assert_eq!(c.release_until, ["1"]);
    assert_eq!(c.release_all, 1);
}

/// No upstream test; run against PySpark 4.3.0.
#[test]
fn custom_operation_id_everywhere() {
    let id = "10a4c38e-7e87-40ee-9d6f-60ff0751e63b";
    let mut req = request();
    req.operation_id = Some(id.into());
    let (c, _) = run(
        req,
        shared(vec![Item::R("1")]),
        shared(vec![Item::Done("2")]),
        None,
    );
    assert_eq!(c.execute_requests[0].operation_id.as_deref(), Some(id));
    assert_eq!(c.attach_requests[0].operation_id, id);
    let core = ReattachCore::new({
        let mut r = request();
        r.operation_id = Some(id.into());
        r
    })
    .unwrap();
    use spark_connect_retry::reattach::core::Release as R;
    assert_eq!(core.release_request(&R::All).operation_id, id);
    assert_eq!(core.release_request(&R::Until("1".into())).operation_id, id);
    assert!(
        core.release_request(&R::All)
            .client_observed_server_side_session_id
            .is_none()
    );
    // A non-UUID operation id is refused.
    let mut bad = request();
    bad.operation_id = Some("not-a-uuid".into());
    assert!(matches!(
        ReattachCore::new(bad),
        Err(ReattachError::InvalidOperationId(_))
    ));
}

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
    let c = core.counters();
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
    let c = core.counters();
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
    assert_eq!(core.counters().stalls_answered, 1);
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
    assert_eq!(core.counters().stalls_answered, 0);

    // An error after a stall clears the fresh-connection request.
    let (mut core, retrying, _) = waiting_core();
    expect_reattach_from_1(core.on_event(Event::Stalled(Duration::from_secs(10)), &retrying));
    assert!(core.opening_after_stall());
    assert!(matches!(
        core.on_event(Event::Error(Status::unavailable("refused")), &retrying),
        Action::SleepThenOpen(..)
    ));
    assert!(!core.opening_after_stall());
    assert_eq!(core.counters().stalls_answered, 0);
}
