//! The embedded test server, exercised by a real tonic client over loopback.

use std::error::Error as _;
use std::time::{Duration, Instant};

use arrow_array::{Array, Int32Array, Int64Array};
use spark_connect_retry::proto::{
    self, execute_plan_response::ResponseType,
    spark_connect_service_client::SparkConnectServiceClient,
};
use spark_connect_testkit::{Fault, Rpc, SparkException, TestServer};
use tonic::transport::Channel;
use tonic::{Code, Status};
use tonic_types::StatusExt;

type Client = SparkConnectServiceClient<Channel>;

const SESSION: &str = "8f2d3c1e-0b7a-4c55-9d2e-3a4b5c6d7e8f";

async fn client(server: &TestServer) -> Client {
    SparkConnectServiceClient::connect(server.endpoint())
        .await
        .expect("connect")
}

fn range_plan(start: Option<i64>, end: i64, step: i64) -> proto::Plan {
    proto::Plan {
        op_type: Some(proto::plan::OpType::Root(proto::Relation {
            common: None,
            rel_type: Some(proto::relation::RelType::Range(proto::Range {
                start,
                end,
                step,
                num_partitions: None,
            })),
        })),
    }
}

fn sql_relation(q: &str) -> proto::Relation {
    proto::Relation {
        common: None,
        rel_type: Some(proto::relation::RelType::Sql(proto::Sql {
            query: q.into(),
        })),
    }
}

fn sql_plan(q: &str) -> proto::Plan {
    proto::Plan {
        op_type: Some(proto::plan::OpType::Root(sql_relation(q))),
    }
}

fn exec(plan: proto::Plan, reattachable: bool, op_id: Option<&str>) -> proto::ExecutePlanRequest {
    use proto::execute_plan_request::{RequestOption, request_option};
    proto::ExecutePlanRequest {
        session_id: SESSION.into(),
        operation_id: op_id.map(Into::into),
        plan: Some(plan),
        request_options: vec![RequestOption {
            request_option: Some(request_option::RequestOption::ReattachOptions(
                proto::ReattachOptions { reattachable },
            )),
        }],
        ..Default::default()
    }
}

fn reattach(op_id: &str, last: Option<&str>) -> proto::ReattachExecuteRequest {
    proto::ReattachExecuteRequest {
        session_id: SESSION.into(),
        operation_id: op_id.into(),
        last_response_id: last.map(Into::into),
        ..Default::default()
    }
}

fn release(op_id: &str, until: Option<&str>) -> proto::ReleaseExecuteRequest {
    use proto::release_execute_request::{Release, ReleaseAll, ReleaseUntil};
    proto::ReleaseExecuteRequest {
        session_id: SESSION.into(),
        operation_id: op_id.into(),
        release: Some(match until {
            Some(id) => Release::ReleaseUntil(ReleaseUntil {
                response_id: id.into(),
            }),
            None => Release::ReleaseAll(ReleaseAll {}),
        }),
        ..Default::default()
    }
}

/// Reads a stream to its end: the responses, and the final status.
async fn drain(
    mut s: tonic::Streaming<proto::ExecutePlanResponse>,
) -> (Vec<proto::ExecutePlanResponse>, Result<(), Status>) {
    let mut out = Vec::new();
    loop {
        match s.message().await {
            Ok(Some(r)) => out.push(r),
            Ok(None) => return (out, Ok(())),
            Err(e) => return (out, Err(e)),
        }
    }
}

fn is_complete(r: &proto::ExecutePlanResponse) -> bool {
    matches!(r.response_type, Some(ResponseType::ResultComplete(_)))
}

/// Decodes every ArrowBatch (checking start_offset continuity) into the
/// values of column `col`.
fn column(resps: &[proto::ExecutePlanResponse], col: usize) -> Vec<i64> {
    let mut out = Vec::new();
    for r in resps {
        if let Some(ResponseType::ArrowBatch(b)) = &r.response_type {
            assert_eq!(b.start_offset, Some(out.len() as i64), "start_offset");
            let reader = arrow_ipc::reader::StreamReader::try_new(
                std::io::Cursor::new(b.data.clone()),
                None,
            )
            .unwrap();
            let mut rows = 0;
            for batch in reader {
                let batch = batch.unwrap();
                rows += batch.num_rows();
                let a = batch
                    .column(col)
                    .as_any()
                    .downcast_ref::<Int64Array>()
                    .unwrap();
                out.extend(a.values().iter().copied());
            }
            assert_eq!(rows as i64, b.row_count);
        }
    }
    out
}

fn error_class(s: &Status) -> Option<String> {
    s.get_details_error_info()
        .and_then(|i| i.metadata.get("errorClass").cloned())
}

fn assert_spark(s: &Status, class: &str) {
    assert_eq!(s.code(), Code::Internal, "{s:?}");
    assert_eq!(error_class(s).as_deref(), Some(class), "{s:?}");
    assert!(
        s.message().starts_with(&format!("[{class}] ")),
        "{}",
        s.message()
    );
}

/// Runs an operation to the end through reattaches; returns all responses.
async fn run_to_completion(
    c: &mut Client,
    first: Vec<proto::ExecutePlanResponse>,
    op_id: &str,
) -> Vec<proto::ExecutePlanResponse> {
    let mut all = first;
    while !all.last().is_some_and(is_complete) {
        let last = all.last().map(|r| r.response_id.clone());
        let s = c
            .reattach_execute(reattach(op_id, last.as_deref()))
            .await
            .unwrap()
            .into_inner();
        let (resps, end) = drain(s).await;
        end.unwrap();
        all.extend(resps);
    }
    all
}

#[tokio::test]
async fn range_results_are_real_arrow_with_ids_and_offsets() {
    let server = TestServer::builder()
        // Exact response positions below: batches only, no schema response.
        .schema_response(false)
        .rows_per_batch(8192)
        .start()
        .await
        .unwrap();
    let mut c = client(&server).await;
    let s = c
        .execute_plan(exec(range_plan(None, 20_000, 1), true, None))
        .await
        .unwrap()
        .into_inner();
    let (resps, end) = drain(s).await;
    end.unwrap();
    assert_eq!(resps.len(), 4, "3 batches + ResultComplete");
    assert!(is_complete(resps.last().unwrap()));
    assert_eq!(column(&resps, 0), (0..20_000).collect::<Vec<_>>());
    let op_id = resps[0].operation_id.clone();
    assert!(uuid::Uuid::parse_str(&op_id).is_ok(), "generated op id");
    let mut ids = std::collections::HashSet::new();
    for r in &resps {
        assert_eq!(r.session_id, SESSION);
        assert_eq!(r.operation_id, op_id);
        assert_eq!(r.server_side_session_id, server.server_side_session_id());
        assert!(uuid::Uuid::parse_str(&r.response_id).is_ok());
        assert!(ids.insert(r.response_id.clone()), "fresh response ids");
    }
    // Reattachable: still registered until released.
    assert_eq!(server.live_executions(), vec![op_id.clone()]);
    let r = c
        .release_execute(release(&op_id, None))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.operation_id.as_deref(), Some(op_id.as_str()));
    assert!(server.live_executions().is_empty());

    // start/step, negative step, empty range; non-reattachable: no
    // ResultComplete and removed when done.
    for (start, end, step, want) in [
        (Some(5), 30, 7, vec![5, 12, 19, 26]),
        (Some(10), 0, -4, vec![10, 6, 2]),
        (None, 0, 1, vec![]),
    ] {
        let s = c
            .execute_plan(exec(range_plan(start, end, step), false, None))
            .await
            .unwrap()
            .into_inner();
        let (resps, end) = drain(s).await;
        end.unwrap();
        assert!(!resps.iter().any(is_complete));
        assert_eq!(column(&resps, 0), want);
    }
    assert!(server.live_executions().is_empty());
    server.shutdown().await;
}

#[tokio::test]
async fn graceful_ends_and_reattach_continue_exactly() {
    let server = TestServer::builder()
        .rows_per_batch(10)
        .max_responses_per_stream(3)
        .start()
        .await
        .unwrap();
    let mut c = client(&server).await;
    let op_id = uuid::Uuid::new_v4().to_string();
    let s = c
        .execute_plan(exec(range_plan(None, 100, 1), true, Some(&op_id)))
        .await
        .unwrap()
        .into_inner();
    let (first, end) = drain(s).await;
    end.expect("graceful end is an OK status");
    assert_eq!(first.len(), 3);
    assert!(!first.iter().any(is_complete), "no ResultComplete yet");
    let all = run_to_completion(&mut c, first, &op_id).await;
    assert_eq!(column(&all, 0), (0..100).collect::<Vec<_>>());
    // 10 batches + ResultComplete = 11 responses, 3 per stream.
    assert_eq!(server.calls().reattach, 3);
    let last = server.last_reattach_request().unwrap();
    assert_eq!(last.operation_id, op_id);
    assert_eq!(
        last.last_response_id.as_deref(),
        Some(all[8].response_id.as_str())
    );

    // A reattach without last_response_id replays from the start (the
    // default 10 MiB buffer still holds everything).
    let s = c
        .reattach_execute(reattach(&op_id, None))
        .await
        .unwrap()
        .into_inner();
    let (replay, _) = drain(s).await;
    assert_eq!(replay[0].response_id, all[0].response_id);
    server.shutdown().await;
}

#[tokio::test]
async fn byte_limit_and_duration_limit_end_streams_gracefully() {
    let server = TestServer::builder()
        .rows_per_batch(1)
        .max_bytes_per_stream(1)
        .start()
        .await
        .unwrap();
    let mut c = client(&server).await;
    let op = uuid::Uuid::new_v4().to_string();
    let s = c
        .execute_plan(exec(range_plan(None, 3, 1), true, Some(&op)))
        .await
        .unwrap()
        .into_inner();
    let (first, end) = drain(s).await;
    end.unwrap();
    assert_eq!(
        first.len(),
        1,
        "the response crossing the limit is still sent"
    );
    let all = run_to_completion(&mut c, first, &op).await;
    assert_eq!(column(&all, 0), vec![0, 1, 2]);
    server.shutdown().await;

    // Duration: a slow execution's stream ends after 100 ms.
    let server = TestServer::builder()
        .rows_per_batch(1)
        .batch_delay(Duration::from_millis(60))
        .max_stream_duration(Some(Duration::from_millis(100)))
        .start()
        .await
        .unwrap();
    let mut c = client(&server).await;
    let op = uuid::Uuid::new_v4().to_string();
    let s = c
        .execute_plan(exec(range_plan(None, 6, 1), true, Some(&op)))
        .await
        .unwrap()
        .into_inner();
    let (first, end) = drain(s).await;
    end.unwrap();
    assert!(first.len() < 6 && !first.iter().any(is_complete));
    let all = run_to_completion(&mut c, first, &op).await;
    assert_eq!(column(&all, 0), (0..6).collect::<Vec<_>>());
    server.shutdown().await;
}

#[tokio::test]
async fn reattach_preempts_the_previous_stream() {
    let server = TestServer::builder()
        .rows_per_batch(1)
        .start()
        .await
        .unwrap();
    let mut c = client(&server).await;
    let op = uuid::Uuid::new_v4().to_string();
    let mut a = c
        .execute_plan(exec(range_plan(None, 600, 1), true, Some(&op)))
        .await
        .unwrap()
        .into_inner();
    let first = a.message().await.unwrap().unwrap();
    let b = c
        .reattach_execute(reattach(&op, Some(&first.response_id)))
        .await
        .unwrap()
        .into_inner();
    let (a_rest, a_end) = drain(a).await;
    let err = a_end.expect_err("preempted stream fails");
    assert_spark(&err, "INVALID_CURSOR.DISCONNECTED");
    assert!(err.message().ends_with("SQLSTATE: HY109"));
    assert!(a_rest.len() < 599);
    let (b_resps, b_end) = drain(b).await;
    b_end.unwrap();
    let mut all = vec![first];
    all.extend(b_resps);
    assert_eq!(column(&all, 0), (0..600).collect::<Vec<_>>());
    server.shutdown().await;
}

#[tokio::test]
async fn release_semantics_and_buffer_eviction() {
    let server = TestServer::builder()
        // Exact response positions below: batches only, no schema response.
        .schema_response(false)
        .rows_per_batch(1)
        .retry_buffer_bytes(0)
        .start()
        .await
        .unwrap();
    let mut c = client(&server).await;
    let op = uuid::Uuid::new_v4().to_string();
    let s = c
        .execute_plan(exec(range_plan(None, 5, 1), true, Some(&op)))
        .await
        .unwrap()
        .into_inner();
    let (resps, end) = drain(s).await;
    end.unwrap();
    assert_eq!(resps.len(), 6);
    // Buffer 0: everything before the last consumed response is gone.
    let s = c
        .reattach_execute(reattach(&op, Some(&resps[0].response_id)))
        .await
        .unwrap()
        .into_inner();
    let (got, end) = drain(s).await;
    assert!(got.is_empty());
    let err = end.unwrap_err();
    assert_spark(&err, "INVALID_CURSOR.POSITION_NOT_AVAILABLE");
    let info = err.get_details_error_info().unwrap();
    assert!(info.metadata["messageParameters"].contains(&resps[1].response_id));
    // Reattach after the last response: nothing more, clean end.
    let s = c
        .reattach_execute(reattach(&op, Some(&resps[5].response_id)))
        .await
        .unwrap()
        .into_inner();
    let (got, end) = drain(s).await;
    assert!(got.is_empty());
    end.unwrap();

    // Unknown response id: POSITION_NOT_FOUND, synchronously and on release.
    let bogus = uuid::Uuid::new_v4().to_string();
    let err = c
        .reattach_execute(reattach(&op, Some(&bogus)))
        .await
        .unwrap_err();
    assert_spark(&err, "INVALID_CURSOR.POSITION_NOT_FOUND");
    let err = c
        .release_execute(release(&op, Some(&bogus)))
        .await
        .unwrap_err();
    assert_spark(&err, "INVALID_CURSOR.POSITION_NOT_FOUND");
    // A known id is fine (and idempotent).
    for _ in 0..2 {
        let r = c
            .release_execute(release(&op, Some(&resps[2].response_id)))
            .await
            .unwrap()
            .into_inner();
        assert_eq!(r.operation_id.as_deref(), Some(op.as_str()));
        assert_eq!(r.server_side_session_id, server.server_side_session_id());
    }
    // release_all removes; a second one is a no-op success without op id.
    c.release_execute(release(&op, None)).await.unwrap();
    assert!(server.live_executions().is_empty());
    let r = c
        .release_execute(release(&op, None))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.operation_id, None);
    let err = c.reattach_execute(reattach(&op, None)).await.unwrap_err();
    assert_spark(&err, "INVALID_HANDLE.OPERATION_NOT_FOUND");
    let calls = server.calls();
    assert_eq!((calls.release_all, calls.release_until), (2, 3));
    assert_eq!(server.last_release_request().unwrap().operation_id, op);
    server.shutdown().await;
}

#[tokio::test]
async fn release_until_evicts_and_buffer_keeps_a_tail() {
    // Each 1-row batch is a few hundred bytes; a 2 KiB buffer keeps a tail.
    let server = TestServer::builder()
        // Exact response positions below: batches only, no schema response.
        .schema_response(false)
        .rows_per_batch(1)
        .retry_buffer_bytes(2048)
        .start()
        .await
        .unwrap();
    let mut c = client(&server).await;
    let op = uuid::Uuid::new_v4().to_string();
    let s = c
        .execute_plan(exec(range_plan(None, 50, 1), true, Some(&op)))
        .await
        .unwrap()
        .into_inner();
    let (resps, end) = drain(s).await;
    end.unwrap();
    // The recent tail is still there...
    let s = c
        .reattach_execute(reattach(&op, Some(&resps[47].response_id)))
        .await
        .unwrap()
        .into_inner();
    let (got, end) = drain(s).await;
    end.unwrap();
    assert_eq!(got.len(), 3);
    // ...the head is not.
    let s = c
        .reattach_execute(reattach(&op, Some(&resps[0].response_id)))
        .await
        .unwrap()
        .into_inner();
    assert_spark(
        &drain(s).await.1.unwrap_err(),
        "INVALID_CURSOR.POSITION_NOT_AVAILABLE",
    );
    // release_until evicts the tail too.
    c.release_execute(release(&op, Some(&resps[48].response_id)))
        .await
        .unwrap();
    let s = c
        .reattach_execute(reattach(&op, Some(&resps[47].response_id)))
        .await
        .unwrap()
        .into_inner();
    assert_spark(
        &drain(s).await.1.unwrap_err(),
        "INVALID_CURSOR.POSITION_NOT_AVAILABLE",
    );
    server.shutdown().await;
}

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
        (8, 1, 2, 1, 1)
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

#[tokio::test]
async fn fault_statuses_with_retry_info_and_spark_encoding() {
    let server = TestServer::builder()
        .rows_per_batch(1)
        .start()
        .await
        .unwrap();
    let mut c = client(&server).await;
    server
        .faults()
        .push(
            Fault::unavailable()
                .with_retry_info(Duration::from_millis(30))
                .on(Rpc::ExecutePlan)
                .times(2),
        )
        .push(
            Fault::status(Code::Internal, "boom")
                .on(Rpc::ExecutePlan)
                .after_responses(2),
        )
        .push(Fault::operation_not_found().on(Rpc::ReattachExecute))
        .push(Fault::session_not_found().on(Rpc::ReattachExecute))
        .push(
            Fault::spark(SparkException::new(
                "CONNECT.EXECUTE_CONCURRENT_LIMIT_TIMEOUT",
                "HY000",
                "Busy.",
            ))
            .with_retry_info(Duration::ZERO)
            .on(Rpc::Config),
        );
    assert_eq!(server.faults().pending(), 5);
    let op = uuid::Uuid::new_v4().to_string();
    for _ in 0..2 {
        let err = c
            .execute_plan(exec(range_plan(None, 5, 1), true, Some(&op)))
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::Unavailable);
        assert_eq!(
            err.get_details_retry_info().unwrap().retry_delay,
            Some(Duration::from_millis(30))
        );
    }
    // The failed ExecutePlans were never registered.
    assert!(server.live_executions().is_empty());
    // Mid-stream failure after 2 responses, in the trailers.
    let (r, end) = drain(
        c.execute_plan(exec(range_plan(None, 5, 1), true, Some(&op)))
            .await
            .unwrap()
            .into_inner(),
    )
    .await;
    assert_eq!(r.len(), 2);
    let err = end.unwrap_err();
    assert_eq!((err.code(), err.message()), (Code::Internal, "boom"));
    // The execution itself goes on; a reattach picks up after the fault ones.
    let err = c.reattach_execute(reattach(&op, None)).await.unwrap_err();
    assert_spark(&err, "INVALID_HANDLE.OPERATION_NOT_FOUND");
    assert!(err.message().contains(&op));
    let err = c.reattach_execute(reattach(&op, None)).await.unwrap_err();
    assert_spark(&err, "INVALID_HANDLE.SESSION_NOT_FOUND");
    let all = run_to_completion(&mut c, r, &op).await;
    assert_eq!(column(&all, 0), (0..5).collect::<Vec<_>>());
    // Spark encoding plus RetryInfo as details[1].
    let err = c
        .config(proto::ConfigRequest {
            session_id: SESSION.into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_spark(&err, "CONNECT.EXECUTE_CONCURRENT_LIMIT_TIMEOUT");
    assert_eq!(
        err.get_details_retry_info().unwrap().retry_delay,
        Some(Duration::ZERO)
    );
    assert_eq!(server.faults().pending(), 0);
    server.shutdown().await;
}

/// True when the status came from the transport (a source chain), not from
/// a server-sent status.
fn transport_source(s: &Status) -> bool {
    let mut src = s.source();
    while let Some(e) = src {
        if e.downcast_ref::<h2::Error>().is_some() || e.downcast_ref::<std::io::Error>().is_some() {
            return true;
        }
        src = e.source();
    }
    false
}

#[tokio::test]
async fn reset_connection_is_a_real_tcp_reset() {
    let server = TestServer::builder()
        .rows_per_batch(1)
        .start()
        .await
        .unwrap();
    let mut c = client(&server).await;
    server.faults().push(
        Fault::reset_connection()
            .on(Rpc::ExecutePlan)
            .after_responses(2),
    );
    let op = uuid::Uuid::new_v4().to_string();
    let (r, end) = drain(
        c.execute_plan(exec(range_plan(None, 50, 1), true, Some(&op)))
            .await
            .unwrap()
            .into_inner(),
    )
    .await;
    let err = end.expect_err("the cut surfaces as an error");
    assert!(r.len() <= 2);
    assert_eq!(err.code(), Code::Unknown, "{err:?}");
    assert!(transport_source(&err), "{err:?}");
    // The server kept the execution: the same Channel reconnects and resumes.
    let all = run_to_completion(&mut c, r, &op).await;
    assert_eq!(column(&all, 0), (0..50).collect::<Vec<_>>());

    // On a unary RPC the request is processed, then the response is lost.
    server
        .faults()
        .push(Fault::reset_connection().on(Rpc::ReleaseExecute));
    let err = c.release_execute(release(&op, None)).await.unwrap_err();
    assert!(transport_source(&err), "{err:?}");
    assert!(
        server.live_executions().is_empty(),
        "the release was applied"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn lost_request_is_never_registered() {
    let server = TestServer::start().await.unwrap();
    let mut c = client(&server).await;
    server
        .faults()
        .push(Fault::lose_request().on(Rpc::ExecutePlan));
    let op = uuid::Uuid::new_v4().to_string();
    let err = c
        .execute_plan(exec(range_plan(None, 5, 1), true, Some(&op)))
        .await
        .unwrap_err();
    assert!(transport_source(&err), "{err:?}");
    assert!(server.live_executions().is_empty());
    assert_eq!(server.calls().execute, 1);
    // The session was not even created: a reattach sees SESSION_NOT_FOUND;
    // once it exists, OPERATION_NOT_FOUND.
    assert_spark(
        &c.reattach_execute(reattach(&op, None)).await.unwrap_err(),
        "INVALID_HANDLE.SESSION_NOT_FOUND",
    );
    c.config(proto::ConfigRequest {
        session_id: SESSION.into(),
        ..Default::default()
    })
    .await
    .unwrap();
    assert_spark(
        &c.reattach_execute(reattach(&op, None)).await.unwrap_err(),
        "INVALID_HANDLE.OPERATION_NOT_FOUND",
    );
    server.shutdown().await;
}

#[tokio::test]
async fn stalls_pause_streams_and_unary_calls() {
    let server = TestServer::builder()
        .rows_per_batch(1)
        .start()
        .await
        .unwrap();
    let mut c = client(&server).await;
    server.faults().push(
        Fault::stall(Duration::from_millis(150))
            .on(Rpc::ExecutePlan)
            .after_responses(1),
    );
    let op = uuid::Uuid::new_v4().to_string();
    let mut s = c
        .execute_plan(exec(range_plan(None, 3, 1), true, Some(&op)))
        .await
        .unwrap()
        .into_inner();
    let first = s.message().await.unwrap().unwrap();
    let t = Instant::now();
    s.message().await.unwrap().unwrap();
    assert!(
        t.elapsed() >= Duration::from_millis(120),
        "{:?}",
        t.elapsed()
    );
    drop(s);

    // Stalled forever: the client gives up and reattaches; the new attach
    // preempts the stalled stream.
    server
        .faults()
        .push(Fault::stall_forever().on(Rpc::ReattachExecute));
    let mut s = c
        .reattach_execute(reattach(&op, Some(&first.response_id)))
        .await
        .unwrap()
        .into_inner();
    assert!(
        tokio::time::timeout(Duration::from_millis(100), s.message())
            .await
            .is_err()
    );
    let s2 = c
        .reattach_execute(reattach(&op, Some(&first.response_id)))
        .await
        .unwrap()
        .into_inner();
    let (rest, end) = drain(s2).await;
    end.unwrap();
    let mut all = vec![first];
    all.extend(rest);
    assert_eq!(column(&all, 0), vec![0, 1, 2]);
    assert_spark(
        &s.message().await.unwrap_err(),
        "INVALID_CURSOR.DISCONNECTED",
    );

    // Unary stall delays the answer.
    server
        .faults()
        .push(Fault::stall(Duration::from_millis(100)).on(Rpc::Config));
    let t = Instant::now();
    c.config(proto::ConfigRequest {
        session_id: SESSION.into(),
        ..Default::default()
    })
    .await
    .unwrap();
    assert!(t.elapsed() >= Duration::from_millis(90));
    server.shutdown().await;
}

/// tonic 0.14 panics while decoding a `grpc-status-details-bin` that is not
/// base64 (grpc-rust#2618). The call runs in its own task so the test can
/// observe the panic as a `JoinError`.
#[tokio::test]
async fn bad_status_details_make_tonic_panic() {
    let server = TestServer::start().await.unwrap();
    let c = client(&server).await;
    // Trailers-only response on a unary call.
    server
        .faults()
        .push(Fault::bad_status_details().on(Rpc::Config));
    let mut c1 = c.clone();
    let join = tokio::spawn(async move {
        let _ = c1
            .config(proto::ConfigRequest {
                session_id: SESSION.into(),
                ..Default::default()
            })
            .await;
    })
    .await;
    assert_tonic_base64_panic(join.unwrap_err());

    // In the trailers of a stream after one response.
    server.faults().push(
        Fault::bad_status_details()
            .on(Rpc::ExecutePlan)
            .after_responses(1),
    );
    let mut c2 = c.clone();
    let join = tokio::spawn(async move {
        let s = c2
            .execute_plan(exec(range_plan(None, 5, 1), true, None))
            .await
            .unwrap()
            .into_inner();
        drain(s).await
    })
    .await;
    assert_tonic_base64_panic(join.unwrap_err());
    server.shutdown().await;
}

/// The panic is tonic's "expected base64 encoded value" one, which proves
/// the bad header arrived as sent.
fn assert_tonic_base64_panic(e: tokio::task::JoinError) {
    assert!(e.is_panic());
    let payload = e.into_panic();
    let msg = payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default();
    assert!(msg.contains("base64"), "{msg}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn any_faults_times_tags_and_connection_resets() {
    let server = TestServer::builder()
        .rows_per_batch(1)
        .batch_delay(Duration::from_millis(20))
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
    // An Any fault with times(2) hits the next two calls, whatever they are;
    // faults queue in push order.
    server
        .faults()
        .push(Fault::status(Code::Aborted, "first").times(2))
        .push(Fault::status(Code::DataLoss, "second").on(Rpc::Config));
    assert_eq!(c.config(get_all()).await.unwrap_err().code(), Code::Aborted);
    let err = c
        .analyze_plan(proto::AnalyzePlanRequest {
            session_id: SESSION.into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Aborted);
    assert_eq!(
        c.config(get_all()).await.unwrap_err().code(),
        Code::DataLoss
    );
    c.config(get_all()).await.unwrap();
    server.faults().push(Fault::unavailable());
    server.faults().clear();
    assert_eq!(server.faults().pending(), 0);

    // Interrupt by tag.
    let op = uuid::Uuid::new_v4().to_string();
    let mut req = exec(range_plan(None, 100, 1), true, Some(&op));
    req.tags = vec!["nightly".into()];
    let s = c.execute_plan(req).await.unwrap().into_inner();
    let r = c
        .interrupt(proto::InterruptRequest {
            session_id: SESSION.into(),
            interrupt_type: proto::interrupt_request::InterruptType::Tag as i32,
            interrupt: Some(proto::interrupt_request::Interrupt::OperationTag(
                "nightly".into(),
            )),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.interrupted_ids, vec![op.clone()]);
    assert_spark(&drain(s).await.1.unwrap_err(), "OPERATION_CANCELED");

    // reset_connections cuts an open stream with a real RST.
    let op = uuid::Uuid::new_v4().to_string();
    let mut s = c
        .execute_plan(exec(range_plan(None, 100, 1), true, Some(&op)))
        .await
        .unwrap()
        .into_inner();
    s.message().await.unwrap().unwrap();
    assert!(server.reset_connections() >= 1);
    let (_, end) = drain(s).await;
    let err = end.unwrap_err();
    assert!(transport_source(&err), "{err:?}");
    server.shutdown().await;
}

#[tokio::test]
async fn plan_helpers_and_execution_progress() {
    use spark_connect_testkit::plans;
    let server = TestServer::builder()
        // Exact response positions below: batches only, no schema response.
        .schema_response(false)
        .rows_per_batch(3)
        .execution_progress(true)
        .start()
        .await
        .unwrap();
    let mut c = client(&server).await;
    let mut req = exec(plans::sql("SELECT id, id*2 AS x FROM range(7)"), true, None);
    req.session_id = plans::new_id();
    let (r, end) = drain(c.execute_plan(req).await.unwrap().into_inner()).await;
    end.unwrap();
    let progress = r
        .iter()
        .filter(|r| matches!(r.response_type, Some(ResponseType::ExecutionProgress(_))))
        .count();
    assert_eq!(progress, 3);
    assert_eq!(r.len(), 7, "3 progress + 3 batches + ResultComplete");
    assert_eq!(
        plans::int64_column(&r, 0).unwrap(),
        (0..7).collect::<Vec<_>>()
    );
    assert_eq!(
        plans::int64_column(&r, 1).unwrap(),
        (0..7).map(|v| v * 2).collect::<Vec<_>>()
    );
    assert!(plans::int64_column(&r, 2).is_err());
    let (r, _) = drain(
        c.execute_plan(exec(plans::range(Some(2), 5, 1), false, None))
            .await
            .unwrap()
            .into_inner(),
    )
    .await;
    assert_eq!(plans::int64_column(&r, 0).unwrap(), vec![2, 3, 4]);
    let (r, _) = drain(
        c.execute_plan(exec(plans::sql_command("select 1"), true, None))
            .await
            .unwrap()
            .into_inner(),
    )
    .await;
    assert!(matches!(
        r[0].response_type,
        Some(ResponseType::SqlCommandResult(_))
    ));
    server.shutdown().await;
}
