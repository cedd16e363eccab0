//! The protocol subset decodes what a newer (or full) server sends.

use prost::Message;
use spark_connect_retry::proto::ExecutePlanResponse;
use spark_connect_retry::proto::execute_plan_response::ResponseType;

fn field(tag: u32, wire: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    prost::encoding::encode_varint(u64::from(tag << 3 | u32::from(wire)), &mut out);
    if wire == 2 {
        prost::encoding::encode_varint(payload.len() as u64, &mut out);
    }
    out.extend_from_slice(payload);
    out
}

#[test]
fn unknown_fields_and_oneof_variants_decode() {
    let mut bytes = Vec::new();
    bytes.extend(field(1, 2, b"session"));
    bytes.extend(field(13, 2, b"resp-1"));
    // A oneof variant this crate does not model (23: pipeline signal) ...
    bytes.extend(field(23, 2, &field(1, 2, b"x")));
    // ... a field number no release uses yet, and a varint field.
    bytes.extend(field(4242, 2, b"future"));
    bytes.extend(field(4243, 0, &[0x96, 0x01]));
    // The schema (7) with a nested DataType this crate leaves empty.
    bytes.extend(field(7, 2, &field(5, 2, b"")));
    let resp = ExecutePlanResponse::decode(bytes.as_slice()).expect("decodes");
    assert_eq!(resp.session_id, "session");
    assert_eq!(resp.response_id, "resp-1");
    assert!(resp.response_type.is_none());
    assert!(resp.schema.is_some());
}

#[test]
fn known_variants_roundtrip_with_field_numbers_of_spark_4_3() {
    // result_complete is field 14, an empty message: tag 0x72, length 0.
    let resp = ExecutePlanResponse {
        response_type: Some(ResponseType::ResultComplete(Default::default())),
        ..Default::default()
    };
    assert_eq!(resp.encode_to_vec(), vec![0x72, 0x00]);
    // server_side_session_id is field 15.
    let resp = ExecutePlanResponse {
        server_side_session_id: "s".into(),
        ..Default::default()
    };
    assert_eq!(resp.encode_to_vec(), vec![0x7a, 0x01, b's']);
}

#[test]
fn the_view_command_has_spark_4_3_field_numbers() {
    use spark_connect_retry::proto::{Command, CreateDataFrameViewCommand, command::CommandType};
    // PySpark 4.3.0's encoding of the same command (commands_pb2):
    // create_dataframe_view = 3 { input = 1 {}, name = 2 "v", replace = 4 true }.
    let cmd = Command {
        command_type: Some(CommandType::CreateDataframeView(
            CreateDataFrameViewCommand {
                input: Some(Default::default()),
                name: "v".into(),
                is_global: false,
                replace: true,
            },
        )),
    };
    assert_eq!(
        cmd.encode_to_vec(),
        [0x1a, 0x07, 0x0a, 0x00, 0x12, 0x01, b'v', 0x20, 0x01]
    );
    let global = CreateDataFrameViewCommand {
        is_global: true,
        ..Default::default()
    };
    assert_eq!(global.encode_to_vec(), [0x18, 0x01]); // is_global = 3
}
