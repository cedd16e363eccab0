//! `ReattachLayer` under a stub generated from the protos with messages of
//! its own (`spark-connect-stub`), against the embedded server's faults.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use spark_connect_retry::layer::{ReattachLayer, ReattachService};
use spark_connect_retry::reattach::ReattachOptions;
use spark_connect_stub::spark::connect as stub;
use spark_connect_testkit::held_clock::HeldClock;
use spark_connect_testkit::{Fault, Rpc, TestServer};
use stub::spark_connect_service_client::SparkConnectServiceClient;
use tonic::Code;
use tonic_retry::retrying::RecordingSleeper;
use tower::Layer;

use crate::support::{
    SESSION, assert_exact, drain, drain_counted, range_sql, retrying, sql_request,
};

const ROWS: i64 = 2_000_000;

fn stub_over_layer(
    server: &TestServer,
    sleeper: &RecordingSleeper,
    options: ReattachOptions,
) -> SparkConnectServiceClient<ReattachService> {
    let channel = tonic::transport::Endpoint::from_shared(server.endpoint())
        .unwrap()
        .connect_lazy();
    let layer = ReattachLayer::new()
        .retrying(retrying(sleeper))
        .options(options);
    SparkConnectServiceClient::new(layer.layer(channel)).max_decoding_message_size(usize::MAX)
}

/// A server that ends every stream cleanly after 256 KiB.
async fn ending_server() -> TestServer {
    TestServer::builder()
        .max_bytes_per_stream(256 * 1024)
        .start()
        .await
        .unwrap()
}

#[tokio::test]
async fn graceful_ends_2m_rows_exact() {
    let s = ending_server().await;
    let sleeper = RecordingSleeper::new();
    let mut client = stub_over_layer(&s, &sleeper, ReattachOptions::default());
    let out = drain(&mut client, sql_request(&range_sql(ROWS))).await;
    assert_exact(&out, ROWS);
    assert!(s.calls().reattach > 10, "{:?}", s.calls());
    assert!(
        sleeper.sleeps().is_empty(),
        "graceful ends reattach at once"
    );
    // The layer released as it went, and everything at the end.
    let releases = s.release_requests();
    assert!(!releases.is_empty());
    assert!(
        releases
            .iter()
            .all(|r| r.user_context.as_ref().is_some_and(|u| u.user_id == "u"))
    );
}

#[tokio::test]
async fn resets_lost_requests_and_unavailable_2m_rows_exact() {
    let s = ending_server().await;
    s.faults().push(Fault::lose_request().on(Rpc::ExecutePlan));
    s.faults().push(
        Fault::reset_connection()
            .on(Rpc::ExecutePlan)
            .after_responses(5),
    );
    s.faults().push(
        Fault::reset_connection()
            .on(Rpc::ReattachExecute)
            .after_responses(3),
    );
    s.faults()
        .push(Fault::unavailable().on(Rpc::ReattachExecute).times(2));
    let sleeper = RecordingSleeper::new();
    let mut client = stub_over_layer(&s, &sleeper, ReattachOptions::default());
    let out = drain(&mut client, sql_request(&range_sql(ROWS))).await;
    assert_exact(&out, ROWS);
    assert_eq!(s.faults().pending(), 0, "every fault fired");
    assert!(
        s.calls().execute >= 2,
        "the lost ExecutePlan was sent again"
    );
}

/// The server stops sending after 3 responses of the ExecutePlan, for
/// good: the layer's idle timeout (300 ms) notices it, and the layer
/// reattaches at once, after the 3rd response. The clock is held
/// ([`HeldClock`]): it moves once, by the idle timeout, after the caller has
/// read those 3 responses (so the layer waits for the 4th, which the server
/// will not send), so there is exactly one stall whatever the machine's
/// speed. The server ends no stream on its own: its one ReattachExecute is
/// the stall's. The layer has no stall counter; its ReattachExecute calls
/// are counted as it hands them to the channel, when it notices the stall,
/// before any byte goes out.
#[tokio::test(start_paused = true)]
async fn a_stall_is_detected_and_resumed_2m_rows_exact() {
    let clock = HeldClock::hold();
    let s = TestServer::builder().start().await.unwrap();
    s.faults().push(
        Fault::stall_forever()
            .on(Rpc::ExecutePlan)
            .after_responses(3),
    );
    let sleeper = RecordingSleeper::new();
    let idle = Duration::from_millis(300);
    let options = ReattachOptions {
        idle_timeout: Some(idle),
        ..Default::default()
    };
    let reattaches_sent = Arc::new(AtomicU64::new(0));
    let counted = reattaches_sent.clone();
    let channel = tower::ServiceBuilder::new()
        .map_request(move |req: http::Request<tonic::body::Body>| {
            if req.uri().path().ends_with("/ReattachExecute") {
                counted.fetch_add(1, Ordering::SeqCst);
            }
            req
        })
        .service(
            tonic::transport::Endpoint::from_shared(s.endpoint())
                .unwrap()
                .connect_lazy(),
        );
    let layer = ReattachLayer::new()
        .retrying(retrying(&sleeper))
        .options(options);
    let mut client =
        SparkConnectServiceClient::new(layer.layer(channel)).max_decoding_message_size(usize::MAX);
    let received = AtomicU64::new(0);
    let (out, advances) = tokio::join!(
        drain_counted(&mut client, sql_request(&range_sql(ROWS)), &received),
        clock.fire(
            idle,
            || received.load(Ordering::SeqCst) == 3 && s.faults().pending() == 0,
            || reattaches_sent.load(Ordering::SeqCst) > 0
        )
    );
    clock.release().await;
    assert_eq!(advances, 1, "the layer waited when the clock moved");
    assert_exact(&out, ROWS);
    assert_eq!(s.faults().pending(), 0);
    let calls = s.calls();
    assert_eq!(calls.execute, 1, "{calls:?}");
    assert_eq!(calls.reattach, 1, "one stall, one reattach: {calls:?}");
    assert_eq!(reattaches_sent.load(Ordering::SeqCst), 1);
    assert_eq!(
        s.reattach_requests()[0].last_response_id.as_deref(),
        Some(out.response_ids[2].as_str()),
        "resumed after the 3rd response, where the server stopped"
    );
    assert!(sleeper.sleeps().is_empty(), "a stall reattaches at once");
}

#[tokio::test]
async fn not_found_before_any_response_re_executes_after_fails_clearly() {
    let s = ending_server().await;
    s.faults()
        .push(Fault::session_not_found().on(Rpc::ExecutePlan));
    let sleeper = RecordingSleeper::new();
    let mut client = stub_over_layer(&s, &sleeper, ReattachOptions::default());
    let out = drain(&mut client, sql_request(&range_sql(ROWS))).await;
    assert_exact(&out, ROWS);
    assert!(s.calls().execute >= 2);

    s.faults()
        .push(Fault::operation_not_found().on(Rpc::ReattachExecute));
    let out = drain(&mut client, sql_request(&range_sql(ROWS))).await;
    let err = out
        .error
        .expect("an error, never a short result as if whole");
    assert!(!out.complete);
    assert!(err.message().contains("OPERATION_NOT_FOUND"), "{err:?}");
    assert!(out.ids.iter().copied().eq(0..out.ids.len() as i64));
}

#[tokio::test]
async fn the_callers_metadata_goes_on_every_request_made_for_it() {
    let s = ending_server().await;
    let sleeper = RecordingSleeper::new();
    let mut client = stub_over_layer(&s, &sleeper, ReattachOptions::default());
    let mut req = tonic::Request::new(sql_request(&range_sql(200_000)));
    req.metadata_mut()
        .insert("x-databricks-cluster-id", "c-1".parse().unwrap());
    let mut stream = client.execute_plan(req).await.unwrap().into_inner();
    while stream.message().await.unwrap().is_some() {}
    assert!(s.calls().reattach > 0);
    for rpc in [Rpc::ExecutePlan, Rpc::ReattachExecute, Rpc::ReleaseExecute] {
        let md = s.last_metadata(rpc).unwrap_or_else(|| panic!("no {rpc:?}"));
        assert_eq!(
            md.get("x-databricks-cluster-id")
                .map(|v| v.to_str().unwrap()),
            Some("c-1"),
            "{rpc:?}"
        );
    }
}

#[tokio::test]
async fn a_callers_own_reattach_is_carried_on_to_the_end() {
    let s = ending_server().await;
    // Start the execution without the layer, read a few responses, stop.
    let channel = tonic::transport::Endpoint::from_shared(s.endpoint())
        .unwrap()
        .connect_lazy();
    let mut plain = SparkConnectServiceClient::new(channel).max_decoding_message_size(usize::MAX);
    let op = "2a7f7a4e-5a4b-4b7c-9a0e-1f2e3d4c5b6a";
    let mut req = sql_request(&range_sql(ROWS));
    req.operation_id = Some(op.into());
    req.request_options
        .push(stub::execute_plan_request::RequestOption {
            request_option: Some(
                stub::execute_plan_request::request_option::RequestOption::ReattachOptions(
                    stub::ReattachOptions { reattachable: true },
                ),
            ),
        });
    let mut first = plain.execute_plan(req).await.unwrap().into_inner();
    let mut last = String::new();
    let mut seen = 0i64;
    for _ in 0..4 {
        let r = first.message().await.unwrap().unwrap();
        if let Some(stub::execute_plan_response::ResponseType::ArrowBatch(b)) = &r.response_type {
            seen += b.row_count;
        }
        last = r.response_id;
    }
    drop(first);

    let sleeper = RecordingSleeper::new();
    let mut client = stub_over_layer(&s, &sleeper, ReattachOptions::default());
    let reattach = stub::ReattachExecuteRequest {
        session_id: SESSION.into(),
        user_context: Some(stub::UserContext {
            user_id: "u".into(),
            ..Default::default()
        }),
        operation_id: op.into(),
        last_response_id: Some(last),
        ..Default::default()
    };
    let before = s.calls().reattach;
    let mut stream = client
        .reattach_execute(reattach)
        .await
        .unwrap()
        .into_inner();
    let mut rows = seen;
    let mut complete = false;
    while let Some(r) = stream.message().await.unwrap() {
        match r.response_type {
            Some(stub::execute_plan_response::ResponseType::ArrowBatch(b)) => {
                assert_eq!(
                    b.start_offset,
                    Some(rows),
                    "resumed exactly where the caller was"
                );
                rows += b.row_count;
            }
            Some(stub::execute_plan_response::ResponseType::ResultComplete(_)) => complete = true,
            _ => {}
        }
    }
    assert!(complete);
    assert_eq!(rows, ROWS);
    assert!(
        s.calls().reattach - before > 1,
        "carried across graceful ends"
    );
}

#[tokio::test]
async fn other_rpcs_pass_through_with_their_errors() {
    let s = ending_server().await;
    s.faults()
        .push(Fault::status(Code::FailedPrecondition, "no config for you").on(Rpc::Config));
    let sleeper = RecordingSleeper::new();
    let mut client = stub_over_layer(&s, &sleeper, ReattachOptions::default());
    let req = stub::ConfigRequest {
        session_id: SESSION.into(),
        user_context: Some(stub::UserContext::default()),
        operation: Some(stub::config_request::Operation {
            op_type: Some(stub::config_request::operation::OpType::GetAll(
                stub::config_request::GetAll::default(),
            )),
        }),
        ..Default::default()
    };
    let err = client.config(req.clone()).await.unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition);
    assert_eq!(err.message(), "no config for you");
    client.config(req).await.expect("passes through");
}

/// Each execution's response carries its live stream statistics: after a
/// graceful end and a reset, the handle read at the end counts exactly the
/// reattaches the server saw.
#[tokio::test]
async fn each_response_carries_its_stream_stats() {
    use spark_connect_retry::reattach::StreamStatsHandle;

    let s = TestServer::builder()
        .rows_per_batch(1000)
        .max_responses_per_stream(5)
        .start()
        .await
        .unwrap();
    s.faults().push(
        Fault::reset_connection()
            .on(Rpc::ReattachExecute)
            .after_responses(2),
    );
    let sleeper = RecordingSleeper::new();
    let mut client = stub_over_layer(&s, &sleeper, ReattachOptions::default());
    let response = client
        .execute_plan(sql_request(&range_sql(20_000)))
        .await
        .unwrap();
    let stats: StreamStatsHandle = response
        .extensions()
        .get::<StreamStatsHandle>()
        .expect("the layer's stats handle")
        .clone();
    let mut stream = response.into_inner();
    let mut responses = 0_u64;
    while let Some(_msg) = stream.message().await.unwrap() {
        responses += 1;
    }
    let seen = stats.snapshot();
    assert_eq!(seen.responses, responses, "{seen:?}");
    assert_eq!(seen.reattaches, s.calls().reattach, "{seen:?}");
    assert!(
        seen.graceful_ends >= 1 && seen.reattaches > seen.graceful_ends,
        "{seen:?}"
    );
}
