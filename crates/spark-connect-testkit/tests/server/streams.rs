//! Result streams: real Arrow rows, graceful ends, reattach, release and buffer eviction, plan helpers.

use crate::*;

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
    // The JVM client 4.3 sends `spark.sql(q)` in SqlCommand's older fields,
    // with no `input`: answered with the same SQL relation, then run.
    let jvm = proto::Plan {
        op_type: Some(proto::plan::OpType::Command(proto::Command {
            command_type: Some(proto::command::CommandType::SqlCommand(proto::SqlCommand {
                sql: "SELECT id, id*2 AS x FROM range(:n)".into(),
                args: [("n".to_owned(), long(4))].into(),
                ..Default::default()
            })),
        })),
    };
    let (r, end) = drain(
        c.execute_plan(exec(jvm, true, None))
            .await
            .unwrap()
            .into_inner(),
    )
    .await;
    end.unwrap();
    let Some(ResponseType::SqlCommandResult(result)) = &r[0].response_type else {
        panic!("expected a SqlCommandResult, got {:?}", r[0].response_type);
    };
    let relation = result.relation.clone().expect("the relation to run");
    let plan = proto::Plan {
        op_type: Some(proto::plan::OpType::Root(relation)),
    };
    let (r, _) = drain(
        c.execute_plan(exec(plan, true, None))
            .await
            .unwrap()
            .into_inner(),
    )
    .await;
    assert_eq!(plans::int64_column(&r, 1).unwrap(), vec![0, 2, 4, 6]);
    server.shutdown().await;
}

fn long(v: i64) -> proto::expression::Literal {
    proto::expression::Literal {
        literal_type: Some(proto::expression::literal::LiteralType::Long(v)),
        ..Default::default()
    }
}
