//! Injected faults: statuses with retry info, TCP resets, lost requests, stalls, malformed details.

use std::time::Duration;
use std::time::Instant;
use tonic_types::StatusExt;

use spark_connect_retry::proto;
use spark_connect_testkit::Fault;
use spark_connect_testkit::Rpc;
use spark_connect_testkit::SparkException;
use spark_connect_testkit::TestServer;
use tonic::Code;

use crate::{
    SESSION, assert_spark, client, column, drain, exec, range_plan, reattach, release,
    run_to_completion, transport_source,
};

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
                .retry_info(Duration::from_millis(30))
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
            .retry_info(Duration::ZERO)
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
