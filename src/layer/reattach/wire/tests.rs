use bytes::{BufMut, Bytes, BytesMut};
use prost::Message;

use super::{
    ResponseHead, execute_head, execute_request, reattach_from, reattach_head, release_ids,
    response_head, with_user_context,
};
use crate::proto::execute_plan_request::{RequestOption, request_option};
use crate::proto::release_execute_request::Release as ReleaseKind;
use crate::proto::{
    ExecutePlanRequest, ExecutePlanResponse, ReattachExecuteRequest, ReattachOptions,
    ReleaseExecuteRequest, ResultChunkingOptions, UserContext, execute_plan_response,
};

const OP: &str = "0b7c1e2a-9a59-4c55-8d0e-3a1b2c3d4e5f";

fn caller_request() -> ExecutePlanRequest {
    ExecutePlanRequest {
        session_id: "s".into(),
        user_context: Some(UserContext {
            user_id: "u".into(),
            user_name: "n".into(),
            extensions: vec![prost_types::Any {
                type_url: "x/y".into(),
                value: vec![1, 2, 3],
            }],
        }),
        client_type: Some("ct".into()),
        client_observed_server_side_session_id: Some("ss".into()),
        request_options: vec![RequestOption {
            request_option: Some(request_option::RequestOption::ResultChunkingOptions(
                ResultChunkingOptions {
                    allow_arrow_batch_chunking: true,
                    preferred_arrow_chunk_size: None,
                },
            )),
        }],
        ..Default::default()
    }
}

#[test]
fn execute_request_appends_id_and_option_keeping_every_byte() {
    let mut raw = BytesMut::from(&caller_request().encode_to_vec()[..]);
    // A field our protos do not know (number 4000, a string).
    prost::encoding::string::encode(4000, &"future".to_owned(), &mut raw);
    let raw = raw.freeze();
    let head = execute_head(&raw).unwrap();
    assert_eq!(head.session_id, "s");
    assert_eq!(head.reattachable, None);
    assert_eq!(head.observed_server_side_session_id.as_deref(), Some("ss"));
    let out = execute_request(&raw, &head, OP);
    assert_eq!(
        &out[..raw.len()],
        &raw[..],
        "the caller's bytes come first, unchanged"
    );
    let decoded = ExecutePlanRequest::decode(out.clone()).unwrap();
    assert_eq!(decoded.operation_id.as_deref(), Some(OP));
    assert_eq!(decoded.request_options.len(), 2, "appended, not replaced");
    assert_eq!(
        decoded.request_options[1].request_option,
        Some(request_option::RequestOption::ReattachOptions(
            ReattachOptions { reattachable: true }
        ))
    );
    let again = execute_head(&out).unwrap();
    assert_eq!(again.reattachable, Some(true));
    assert_eq!(
        execute_request(&out, &again, OP),
        out,
        "nothing appended twice"
    );
}

#[test]
fn reattach_and_release_carry_the_callers_user_context_as_sent() {
    let req = caller_request();
    let raw = Bytes::from(req.encode_to_vec());
    let head = execute_head(&raw).unwrap();
    let core_made = ReattachExecuteRequest {
        session_id: "s".into(),
        operation_id: OP.into(),
        last_response_id: Some("r1".into()),
        ..Default::default()
    };
    let r = ReattachExecuteRequest::decode(with_user_context(&core_made, &head)).unwrap();
    assert_eq!(r.user_context, req.user_context);
    assert_eq!(
        r,
        ReattachExecuteRequest {
            user_context: req.user_context.clone(),
            ..core_made
        },
        "the rest as the core made it"
    );

    let core_made = ReleaseExecuteRequest {
        session_id: "s".into(),
        operation_id: OP.into(),
        release: Some(ReleaseKind::ReleaseAll(Default::default())),
        ..Default::default()
    };
    let rel = ReleaseExecuteRequest::decode(with_user_context(&core_made, &head)).unwrap();
    assert_eq!(
        rel,
        ReleaseExecuteRequest {
            user_context: req.user_context.clone(),
            ..core_made
        }
    );
}

#[test]
fn a_callers_reattach_moves_on_by_appending_last_response_id() {
    let req = ReattachExecuteRequest {
        session_id: "s".into(),
        operation_id: OP.into(),
        last_response_id: Some("r1".into()),
        ..Default::default()
    };
    let mut raw = BytesMut::from(&req.encode_to_vec()[..]);
    prost::encoding::string::encode(77, &"unknown".to_owned(), &mut raw);
    let raw = raw.freeze();
    let head = reattach_head(&raw).unwrap();
    assert_eq!(head.operation_id.as_deref(), Some(OP));
    assert_eq!(head.last_response_id.as_deref(), Some("r1"));
    assert_eq!(reattach_from(&raw, &head, Some("r1")), raw);
    let moved = reattach_from(&raw, &head, Some("r9"));
    assert_eq!(&moved[..raw.len()], &raw[..]);
    let decoded = ReattachExecuteRequest::decode(moved).unwrap();
    assert_eq!(
        decoded.last_response_id.as_deref(),
        Some("r9"),
        "the last occurrence wins"
    );
}

#[test]
fn response_heads_follow_the_oneof_as_prost_decodes_it() {
    let complete = ExecutePlanResponse {
        session_id: "s".into(),
        server_side_session_id: "ss".into(),
        response_id: "r".into(),
        response_type: Some(execute_plan_response::ResponseType::ResultComplete(
            execute_plan_response::ResultComplete {},
        )),
        ..Default::default()
    };
    let head = response_head(&complete.encode_to_vec()).unwrap();
    assert_eq!(
        head,
        ResponseHead {
            session_id: "s".into(),
            server_side_session_id: "ss".into(),
            response_id: "r".into(),
            result_complete: true,
        }
    );
    // A later member of the oneof replaces ResultComplete.
    let mut raw = BytesMut::from(&complete.encode_to_vec()[..]);
    raw.put_slice(&[0x12, 0x00]); // field 2 (arrow_batch), empty
    assert!(!response_head(&raw).unwrap().result_complete);
}

#[test]
fn malformed_bytes_are_errors_never_panics() {
    let cases: &[&[u8]] = &[
        &[0x0a, 0x05, b'a'], // length past the end
        &[0x0a, 0x01, 0xff], // not UTF-8
        &[0x08],             // truncated varint
        &[0x00],             // field number 0
        &[
            0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01,
        ], // varint overflow
        &[0x0f],             // wire type 7
        &[0x08, 0x01],       // session id as a varint
    ];
    for case in cases {
        let raw = Bytes::copy_from_slice(case);
        assert!(response_head(case).is_err(), "{case:?}");
        assert!(execute_head(&raw).is_err(), "{case:?}");
        assert!(reattach_head(&raw).is_err(), "{case:?}");
        assert!(release_ids(case).is_err(), "{case:?}");
    }
    // Deep garbage in a request option.
    let mut raw = BytesMut::new();
    raw.put_slice(&[0x2a, 0x02, 0x0a, 0x05]);
    assert!(execute_head(&raw.freeze()).is_err());
}

#[test]
fn a_release_names_its_session_and_operation() {
    let rel = ReleaseExecuteRequest {
        session_id: "s".into(),
        operation_id: OP.into(),
        client_type: Some("c".into()),
        release: Some(ReleaseKind::ReleaseAll(Default::default())),
        ..Default::default()
    };
    let ids = release_ids(&rel.encode_to_vec()).unwrap();
    assert_eq!(ids, ("s".to_owned(), OP.to_owned()));
}
