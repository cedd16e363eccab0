//! An execution resumed from a caller's own ReattachExecute
//! ([`ReattachCore::resume`], the reattach layer's): every segment is a
//! ReattachExecute from the caller's position, and "not found" is the
//! caller's to handle, since the plan is not known here.

use super::{
    ExecutePlanRequest, Item, ReattachCore, ReattachError, Script, not_found, run_core, shared,
    test_retrying, unavailable,
};

const OP: &str = "0b7c1e2a-9a59-4c55-8d0e-3a1b2c3d4e5f";

fn head() -> ExecutePlanRequest {
    ExecutePlanRequest {
        session_id: "s".into(),
        operation_id: Some(OP.into()),
        ..Default::default()
    }
}

fn none() -> Script {
    shared(vec![])
}

#[test]
fn resumes_from_the_callers_position_and_carries_on_across_faults() {
    let core = ReattachCore::resume(head(), Some("0".into())).unwrap();
    let attach = Script::PerCall(
        vec![
            vec![Item::R("1")],
            vec![Item::R("2"), unavailable()],
            vec![Item::Done("3")],
        ]
        .into(),
    );
    let (c, e) = run_core(&test_retrying(), &|| {}, core, none(), attach, None);
    assert!(e.is_none(), "{e:?}");
    assert_eq!(c.execute, 0, "a resumed execution never sends ExecutePlan");
    assert_eq!(c.yielded, ["1", "2", "3"]);
    let lasts: Vec<_> = c
        .attach_requests
        .iter()
        .map(|r| r.last_response_id.clone().unwrap_or_default())
        .collect();
    assert_eq!(lasts, ["0", "1", "2"]);
    assert!(c.attach_requests.iter().all(|r| r.operation_id == OP));
}

#[test]
fn not_found_is_the_callers_even_before_any_response() {
    for last in [None, Some("0".to_owned())] {
        let core = ReattachCore::resume(head(), last.clone()).unwrap();
        let attach = shared(vec![not_found("INVALID_HANDLE.OPERATION_NOT_FOUND")]);
        let (c, e) = run_core(&test_retrying(), &|| {}, core, none(), attach, None);
        assert_eq!((c.execute, c.attach), (0, 1), "{last:?}");
        assert!(
            matches!(&e, Some(ReattachError::Status(s)) if s.message().contains("OPERATION_NOT_FOUND")),
            "{e:?}"
        );
    }
}

#[test]
fn a_resume_needs_an_operation_id() {
    let err = ReattachCore::resume(ExecutePlanRequest::default(), None).unwrap_err();
    assert!(matches!(err, ReattachError::InvalidOperationId(_)));
}

/// An ExecutePlan the server answered nothing to, then released by the
/// caller through another stream: "not found" ends the stream, where it
/// would otherwise send the ExecutePlan again (`not_found_recovers`).
#[test]
fn not_found_after_the_callers_release_is_never_re_executed() {
    for released in [false, true] {
        let mut core = ReattachCore::new(head()).unwrap();
        if released {
            core.released_by_caller();
        }
        let execute = shared(vec![
            not_found("INVALID_HANDLE.OPERATION_NOT_FOUND"),
            Item::Done("1"),
        ]);
        let (c, e) = run_core(&test_retrying(), &|| {}, core, execute, none(), None);
        if released {
            assert_eq!((c.execute, c.attach), (1, 0));
            assert!(
                matches!(&e, Some(ReattachError::Status(s)) if s.message().contains("OPERATION_NOT_FOUND")),
                "{e:?}"
            );
        } else {
            assert!(e.is_none(), "{e:?}");
            assert_eq!((c.execute, c.attach), (2, 0));
        }
    }
}
