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

/// Lowercase hex of `bytes`.
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn sql_parameters_have_spark_4_3_field_numbers() {
    use spark_connect_retry::proto::expression::{ExprType, Literal, literal::LiteralType};
    use spark_connect_retry::proto::{Expression, Relation, Sql, SqlCommand, relation::RelType};
    let lit = |t: LiteralType| Literal {
        literal_type: Some(t),
        data_type: None,
    };
    let expr = |t: LiteralType| Expression {
        expr_type: Some(ExprType::Literal(lit(t))),
    };
    // PySpark 4.3.0's encoding (relations_pb2.SQL) of query = 1 "q",
    // args = 2 {"a": integer 1}, pos_args = 3 [long 2],
    // named_arguments = 4 {"n": literal string "s"}, pos_arguments = 5 [literal true].
    let sql = Sql {
        query: "q".into(),
        args: [("a".to_owned(), lit(LiteralType::Integer(1)))].into(),
        pos_args: vec![lit(LiteralType::Long(2))],
        named_arguments: [("n".to_owned(), expr(LiteralType::String("s".into())))].into(),
        pos_arguments: vec![expr(LiteralType::Boolean(true))],
    };
    const SQL: &str = "0a017112070a0161120230011a023802220a0a016e12050a036a01732a040a021801";
    assert_eq!(hex(&sql.encode_to_vec()), SQL);
    // commands_pb2.SqlCommand: the same fields 1-5, and input = 6 (a SQL relation "q").
    let cmd = SqlCommand {
        sql: sql.query.clone(),
        args: sql.args.clone(),
        pos_args: sql.pos_args.clone(),
        named_arguments: sql.named_arguments.clone(),
        pos_arguments: sql.pos_arguments.clone(),
        input: Some(Relation {
            common: None,
            rel_type: Some(RelType::Sql(Sql {
                query: "q".into(),
                ..Default::default()
            })),
        }),
    };
    assert_eq!(hex(&cmd.encode_to_vec()), format!("{SQL}320552030a0171"));
    assert_eq!(
        hex(&expr(LiteralType::Integer(7)).encode_to_vec()),
        "0a023007",
        "Expression.literal = 1"
    );
}

#[test]
fn literals_have_spark_4_3_field_numbers() {
    use spark_connect_retry::proto::DataType;
    use spark_connect_retry::proto::data_type::{self as dt, Kind};
    use spark_connect_retry::proto::expression::Literal;
    use spark_connect_retry::proto::expression::literal::{self as lit, LiteralType};
    let ty = |k: Kind| DataType { kind: Some(k) };
    let l = |t: LiteralType| Literal {
        literal_type: Some(t),
        data_type: None,
    };
    // Each literal as PySpark 4.3.0's expressions_pb2 encodes it.
    let cases: Vec<(&str, Literal, &str)> = vec![
        (
            "null",
            l(LiteralType::Null(ty(Kind::Null(dt::Null::default())))),
            "0a020a00",
        ),
        ("binary", l(LiteralType::Binary(vec![0, 255])), "120200ff"),
        ("boolean", l(LiteralType::Boolean(true)), "1801"),
        ("byte", l(LiteralType::Byte(-1)), "20ffffffffffffffffff01"),
        ("short", l(LiteralType::Short(300)), "28ac02"),
        ("integer", l(LiteralType::Integer(7)), "3007"),
        ("long", l(LiteralType::Long(-2)), "38feffffffffffffffff01"),
        ("float", l(LiteralType::Float(1.5)), "550000c03f"),
        ("double", l(LiteralType::Double(2.5)), "590000000000000440"),
        (
            "decimal",
            l(LiteralType::Decimal(lit::Decimal {
                value: "12.340".into(),
                precision: Some(5),
                scale: Some(3),
            })),
            "620c0a0631322e33343010051803",
        ),
        ("string", l(LiteralType::String("x".into())), "6a0178"),
        ("date", l(LiteralType::Date(19782)), "8001c69a01"),
        ("timestamp", l(LiteralType::Timestamp(1)), "880101"),
        ("timestamp_ntz", l(LiteralType::TimestampNtz(2)), "900102"),
        (
            "array",
            l(LiteralType::Array(lit::Array {
                element_type: Some(ty(Kind::Integer(Default::default()))),
                elements: vec![l(LiteralType::Integer(1))],
            })),
            "b201080a02320012023001",
        ),
        (
            "map",
            l(LiteralType::Map(lit::Map {
                key_type: Some(ty(Kind::String(Default::default()))),
                value_type: Some(ty(Kind::Long(Default::default()))),
                keys: vec![l(LiteralType::String("k".into()))],
                values: vec![l(LiteralType::Long(3))],
            })),
            "ba01110a025a0012023a001a036a016b22023803",
        ),
        (
            "data_type",
            Literal {
                literal_type: Some(LiteralType::Boolean(false)),
                data_type: Some(ty(Kind::Boolean(Default::default()))),
            },
            "1800a206021a00",
        ),
    ];
    for (name, literal, pyspark) in cases {
        assert_eq!(hex(&literal.encode_to_vec()), pyspark, "{name}");
        assert_eq!(Literal::decode(&*literal.encode_to_vec()).unwrap(), literal);
    }
    // A variant this crate does not model (Literal.calendar_interval = 19,
    // months 1) decodes as an unknown field, leaving the literal empty.
    let interval = [0x9a, 0x01, 0x02, 0x08, 0x01];
    assert_eq!(Literal::decode(&interval[..]).unwrap().literal_type, None);
}
