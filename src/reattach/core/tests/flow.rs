//! The ordinary paths: execute, reattach, NotFound, session ids, graceful ends, deadlines, release, operation ids.

use super::{
    Code, Duration, ErrorDetails, Item, ReattachCore, ReattachError, Script, Status, StatusExt,
    not_found, request, run, shared, unavailable,
};

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
    use crate::reattach::core::Release as R;
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
