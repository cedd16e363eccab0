//! The other RPCs: handle errors, SQL grammar, config/analyze/interrupt/release-session, session ids, auth.

use std::time::Duration;
use tonic_types::StatusExt;

use arrow_array::Int32Array;
use spark_connect_retry::proto;
use spark_connect_retry::proto::execute_plan_response::ResponseType;
use spark_connect_testkit::Rpc;
use spark_connect_testkit::TestServer;
use tonic::Code;

use crate::{
    SESSION, assert_spark, client, column, drain, exec, is_complete, range_plan, reattach,
    sql_plan, sql_relation, transport_source,
};

#[tokio::test]
async fn handle_errors_and_idempotent_execute() {
    let server = TestServer::builder()
        .rows_per_batch(2)
        .start()
        .await
        .unwrap();
    let mut c = client(&server).await;
    // Reattach before the session exists.
    let err = c.reattach_execute(reattach("x", None)).await.unwrap_err();
    assert_spark(&err, "INVALID_HANDLE.SESSION_NOT_FOUND");
    // Bad operation id format.
    let err = c
        .execute_plan(exec(range_plan(None, 1, 1), true, Some("not-a-uuid")))
        .await
        .unwrap_err();
    assert_spark(&err, "INVALID_HANDLE.FORMAT");
    // Same op id + same plan: attaches from the start (Spark 4.1+).
    let op = uuid::Uuid::new_v4().to_string();
    let (a, _) = drain(
        c.execute_plan(exec(range_plan(None, 6, 1), true, Some(&op)))
            .await
            .unwrap()
            .into_inner(),
    )
    .await;
    let (b, _) = drain(
        c.execute_plan(exec(range_plan(None, 6, 1), true, Some(&op)))
            .await
            .unwrap()
            .into_inner(),
    )
    .await;
    let ids = |v: &[proto::ExecutePlanResponse]| {
        v.iter().map(|r| r.response_id.clone()).collect::<Vec<_>>()
    };
    assert_eq!(ids(&a), ids(&b));
    // A different plan: OPERATION_ALREADY_EXISTS.
    let err = c
        .execute_plan(exec(range_plan(None, 7, 1), true, Some(&op)))
        .await
        .unwrap_err();
    assert_spark(&err, "INVALID_HANDLE.OPERATION_ALREADY_EXISTS");
    // Non-reattachable: reattach is refused while it runs, and it is gone
    // after its stream ends.
    let op2 = uuid::Uuid::new_v4().to_string();
    let (_, end) = drain(
        c.execute_plan(exec(range_plan(None, 3, 1), false, Some(&op2)))
            .await
            .unwrap()
            .into_inner(),
    )
    .await;
    end.unwrap();
    assert!(server.live_executions().iter().all(|id| *id != op2));
    let err = c.reattach_execute(reattach(&op2, None)).await.unwrap_err();
    assert_spark(&err, "INVALID_HANDLE.OPERATION_NOT_FOUND");
    // An empty plan fails at once and registers nothing.
    let op3 = uuid::Uuid::new_v4().to_string();
    let mut req = exec(range_plan(None, 1, 1), true, Some(&op3));
    req.plan = None;
    let err = c.execute_plan(req).await.unwrap_err();
    assert_eq!(err.code(), Code::Internal);
    assert!(!server.live_executions().contains(&op3));
    server.shutdown().await;
}

#[tokio::test]
async fn sql_grammar_and_parse_errors() {
    let server = TestServer::builder()
        // Exact response positions below: batches only, no schema response.
        .schema_response(false)
        .rows_per_batch(4)
        .start()
        .await
        .unwrap();
    let mut c = client(&server).await;
    let (r, end) = drain(
        c.execute_plan(exec(
            sql_plan("select id, ID*2 as x from range(3, 9)"),
            true,
            None,
        ))
        .await
        .unwrap()
        .into_inner(),
    )
    .await;
    end.unwrap();
    assert_eq!(column(&r, 0), (3..9).collect::<Vec<_>>());
    assert_eq!(column(&r, 1), (3..9).map(|v| v * 2).collect::<Vec<_>>());
    for q in ["SELECT * FROM range(5)", "SELECT id FROM range(5);"] {
        let (r, _) = drain(
            c.execute_plan(exec(sql_plan(q), false, None))
                .await
                .unwrap()
                .into_inner(),
        )
        .await;
        assert_eq!(column(&r, 0), (0..5).collect::<Vec<_>>());
    }
    let (r, _) = drain(
        c.execute_plan(exec(sql_plan("SELECT 1"), false, None))
            .await
            .unwrap()
            .into_inner(),
    )
    .await;
    let Some(ResponseType::ArrowBatch(b)) = &r[0].response_type else {
        panic!("arrow batch expected")
    };
    let batch =
        arrow_ipc::reader::StreamReader::try_new(std::io::Cursor::new(b.data.clone()), None)
            .unwrap()
            .next()
            .unwrap()
            .unwrap();
    assert_eq!(batch.schema().field(0).name(), "1");
    assert_eq!(
        batch
            .column(0)
            .as_any()
            .downcast_ref::<Int32Array>()
            .unwrap()
            .value(0),
        1
    );
    assert_eq!(batch.column(0).len(), 1);

    // spark.sql(): a SqlCommand answered with SqlCommandResult + ResultComplete.
    let command = proto::Plan {
        op_type: Some(proto::plan::OpType::Command(proto::Command {
            command_type: Some(proto::command::CommandType::SqlCommand(proto::SqlCommand {
                input: Some(sql_relation("SELECT * FROM range(3)")),
                ..Default::default()
            })),
        })),
    };
    let (r, end) = drain(
        c.execute_plan(exec(command, true, None))
            .await
            .unwrap()
            .into_inner(),
    )
    .await;
    end.unwrap();
    assert_eq!(r.len(), 2);
    let Some(ResponseType::SqlCommandResult(res)) = &r[0].response_type else {
        panic!("SqlCommandResult expected")
    };
    assert_eq!(res.relation, Some(sql_relation("SELECT * FROM range(3)")));
    assert!(is_complete(&r[1]));

    // A parse error arrives as the stream's status, Spark-encoded.
    let (r, end) = drain(
        c.execute_plan(exec(sql_plan("SELECT name FROM people"), true, None))
            .await
            .unwrap()
            .into_inner(),
    )
    .await;
    assert!(r.is_empty());
    let err = end.unwrap_err();
    assert_eq!(
        err.message(),
        "[PARSE_SYNTAX_ERROR] Syntax error at or near 'name'. SQLSTATE: 42601"
    );
    let info = err.get_details_error_info().unwrap();
    assert_eq!(
        info.reason,
        "org.apache.spark.sql.catalyst.parser.ParseException"
    );
    assert_eq!(info.domain, "org.apache.spark");
    assert_eq!(info.metadata["errorClass"], "PARSE_SYNTAX_ERROR");
    assert_eq!(info.metadata["sqlState"], "42601");
    assert_eq!(
        info.metadata["messageParameters"],
        r#"{"error":"'name'","hint":""}"#
    );
    let error_id = info.metadata["errorId"].clone();
    let fetch = |id: String| proto::FetchErrorDetailsRequest {
        session_id: SESSION.into(),
        error_id: id,
        ..Default::default()
    };
    let d = c
        .fetch_error_details(fetch(error_id.clone()))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(d.root_error_idx, Some(0));
    let e = &d.errors[0];
    assert_eq!(e.error_type_hierarchy[0], info.reason);
    let t = e.spark_throwable.as_ref().unwrap();
    assert_eq!(t.error_class.as_deref(), Some("PARSE_SYNTAX_ERROR"));
    assert_eq!(t.sql_state.as_deref(), Some("42601"));
    // Served once.
    let d = c
        .fetch_error_details(fetch(error_id))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(d.root_error_idx, None);
    assert!(d.errors.is_empty());
    server.shutdown().await;
}

#[tokio::test]
async fn config_analyze_interrupt_release_session() {
    use proto::config_request::{self as cr, operation::OpType};
    let server = TestServer::builder()
        .rows_per_batch(1)
        .batch_delay(Duration::from_millis(50))
        .start()
        .await
        .unwrap();
    let mut c = client(&server).await;
    let config = |op: OpType| proto::ConfigRequest {
        session_id: SESSION.into(),
        operation: Some(cr::Operation { op_type: Some(op) }),
        ..Default::default()
    };
    let kv = |k: &str, v: Option<&str>| proto::KeyValue {
        key: k.into(),
        value: v.map(Into::into),
    };
    c.config(config(OpType::Set(cr::Set {
        pairs: vec![kv("spark.a", Some("1")), kv("spark.b", Some("2"))],
        silent: None,
    })))
    .await
    .unwrap();
    let r = c
        .config(config(OpType::Get(cr::Get {
            keys: vec!["spark.a".into()],
        })))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.pairs, vec![kv("spark.a", Some("1"))]);
    assert_eq!(r.server_side_session_id, server.server_side_session_id());
    let err = c
        .config(config(OpType::Get(cr::Get {
            keys: vec!["nope".into()],
        })))
        .await
        .unwrap_err();
    assert_spark(&err, "SQL_CONF_NOT_FOUND");
    let r = c
        .config(config(OpType::GetWithDefault(cr::GetWithDefault {
            pairs: vec![kv("nope", Some("d")), kv("spark.b", Some("d"))],
        })))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        r.pairs,
        vec![kv("nope", Some("d")), kv("spark.b", Some("2"))]
    );
    c.config(config(OpType::Unset(cr::Unset {
        keys: vec!["spark.a".into()],
    })))
    .await
    .unwrap();
    let r = c
        .config(config(OpType::GetOption(cr::GetOption {
            keys: vec!["spark.a".into(), "spark.b".into()],
        })))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.pairs, vec![kv("spark.a", None), kv("spark.b", Some("2"))]);
    // A server conf a session never set reads as Spark's registered value
    // (the JVM client and PySpark read this one before their first query).
    let threshold = "spark.connect.session.planCompression.threshold";
    let r = c
        .config(config(OpType::GetOption(cr::GetOption {
            keys: vec![threshold.into()],
        })))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.pairs, vec![kv(threshold, Some("10485760"))]);
    let r = c
        .config(config(OpType::GetAll(cr::GetAll {
            prefix: Some("spark.".into()),
        })))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.pairs, vec![kv("spark.b", Some("2"))]);
    assert_eq!(server.session_config(SESSION).unwrap().len(), 1);

    let v = c
        .analyze_plan(proto::AnalyzePlanRequest {
            session_id: SESSION.into(),
            analyze: Some(proto::analyze_plan_request::Analyze::SparkVersion(
                proto::analyze_plan_request::SparkVersion {},
            )),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        v.result,
        Some(proto::analyze_plan_response::Result::SparkVersion(
            proto::analyze_plan_response::SparkVersion {
                version: "4.3.0".into()
            }
        ))
    );

    // Interrupt a running execution: its stream ends with OPERATION_CANCELED.
    let op = uuid::Uuid::new_v4().to_string();
    let mut s = c
        .execute_plan(exec(range_plan(None, 1000, 1), true, Some(&op)))
        .await
        .unwrap()
        .into_inner();
    s.message().await.unwrap().unwrap();
    let r = c
        .interrupt(proto::InterruptRequest {
            session_id: SESSION.into(),
            interrupt_type: proto::interrupt_request::InterruptType::OperationId as i32,
            interrupt: Some(proto::interrupt_request::Interrupt::OperationId(op.clone())),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.interrupted_ids, vec![op.clone()]);
    let (_, end) = drain(s).await;
    assert_spark(&end.unwrap_err(), "OPERATION_CANCELED");
    // Interrupting a finished execution interrupts nothing.
    let r = c
        .interrupt(proto::InterruptRequest {
            session_id: SESSION.into(),
            interrupt_type: proto::interrupt_request::InterruptType::All as i32,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(r.interrupted_ids.is_empty());

    // Unimplemented RPCs.
    let err = c
        .get_status(proto::GetStatusRequest::default())
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unimplemented);

    // ReleaseSession closes the session.
    c.release_session(proto::ReleaseSessionRequest {
        session_id: SESSION.into(),
        ..Default::default()
    })
    .await
    .unwrap();
    assert!(server.live_executions().is_empty());
    let err = c
        .config(config(OpType::GetAll(cr::GetAll { prefix: None })))
        .await
        .unwrap_err();
    assert_spark(&err, "INVALID_HANDLE.SESSION_CLOSED");
    let calls = server.calls();
    assert_eq!(
        (
            calls.config,
            calls.analyze,
            calls.interrupt,
            calls.release_session,
            calls.other
        ),
        (9, 1, 2, 1, 1)
    );
    server.shutdown().await;
}

#[tokio::test]
async fn server_side_session_id_rotation_and_restart() {
    let server = TestServer::start().await.unwrap();
    let mut c = client(&server).await;
    let op = uuid::Uuid::new_v4().to_string();
    let (r, _) = drain(
        c.execute_plan(exec(range_plan(None, 3, 1), true, Some(&op)))
            .await
            .unwrap()
            .into_inner(),
    )
    .await;
    let old = r[0].server_side_session_id.clone();
    let new = server.rotate_server_side_session_id();
    assert_ne!(old, new);
    let mut req = reattach(&op, None);
    req.client_observed_server_side_session_id = Some(old.clone());
    assert_spark(
        &c.reattach_execute(req).await.unwrap_err(),
        "INVALID_HANDLE.SESSION_CHANGED",
    );
    let (r, _) = drain(
        c.reattach_execute(reattach(&op, None))
            .await
            .unwrap()
            .into_inner(),
    )
    .await;
    assert_eq!(r[0].server_side_session_id, new);
    server.simulate_restart();
    // The restart reset the connection: the first call on the Channel may
    // fail at the transport level before it reconnects.
    let mut err = c.reattach_execute(reattach(&op, None)).await.unwrap_err();
    for _ in 0..3 {
        if !transport_source(&err) {
            break;
        }
        err = c.reattach_execute(reattach(&op, None)).await.unwrap_err();
    }
    assert_spark(&err, "INVALID_HANDLE.SESSION_NOT_FOUND");
    server.shutdown().await;
}

#[tokio::test]
async fn auth_and_recorded_metadata() {
    let server = TestServer::builder()
        .required_token("s3cret")
        .start()
        .await
        .unwrap();
    let mut c = client(&server).await;
    let get_all = || proto::ConfigRequest {
        session_id: SESSION.into(),
        operation: Some(proto::config_request::Operation {
            op_type: Some(proto::config_request::operation::OpType::GetAll(
                proto::config_request::GetAll { prefix: None },
            )),
        }),
        ..Default::default()
    };
    let err = c.config(get_all()).await.unwrap_err();
    assert_eq!(err.code(), Code::Unauthenticated);
    let mut req = tonic::Request::new(get_all());
    req.metadata_mut()
        .insert("authorization", "Bearer wrong".parse().unwrap());
    assert_eq!(
        c.config(req).await.unwrap_err().code(),
        Code::Unauthenticated
    );
    let mut req = tonic::Request::new(get_all());
    req.metadata_mut()
        .insert("authorization", "Bearer s3cret".parse().unwrap());
    req.metadata_mut().insert("x-custom", "42".parse().unwrap());
    c.config(req).await.unwrap();
    let md = server.last_metadata(Rpc::Config).unwrap();
    assert_eq!(md.get("authorization").unwrap(), "Bearer s3cret");
    assert_eq!(md.get("x-custom").unwrap(), "42");
    assert!(md.get("user-agent").is_some());
    assert_eq!(server.recorded_calls().len(), 3);
    assert_eq!(server.calls().config, 3);
    server.shutdown().await;
}
