//! The reattachable execution over real loopback sockets against the
//! embedded Spark Connect server, through injected faults.

use crate::support::policies;
use spark_connect_retry::policy::PySparkPolicy;
use spark_connect_retry::retrying::PySparkRetrying;
use spark_connect_testkit::held_clock::HeldClock;

use std::time::Duration;

use arrow_array::Int64Array;
use spark_connect_retry::deadlines::RpcDeadlines;
use spark_connect_retry::policy::RetryPolicy;
use spark_connect_retry::proto::ExecutePlanRequest;
use spark_connect_retry::proto::execute_plan_response::ResponseType;
use spark_connect_retry::reattach::{
    ReattachError, ReattachOptions, ReattachableExecution, ReleaseTracker, StreamStats,
};
use spark_connect_retry::retrying::Retrying;
use spark_connect_retry::transport::{SparkClient, spark_client};
use spark_connect_testkit::{Fault, Rpc, TestServer, plans};
use tokio_stream::StreamExt;
use tonic::Code;
use tonic_retry::retrying::RecordingSleeper;

const SESSION: &str = "6f1c6a7e-2b9d-4c1a-9d8e-0a1b2c3d4e5f";

fn client(server: &TestServer) -> SparkClient {
    let channel = tonic::transport::Endpoint::from_shared(server.endpoint())
        .unwrap()
        .connect_lazy();
    spark_client(channel)
}

fn range_request(end: i64) -> ExecutePlanRequest {
    plans::execute_request(SESSION, plans::range(Some(0), end, 1))
}

/// [`policies::recorded`], seed 5.
fn retrying(sleeper: &RecordingSleeper) -> Retrying {
    policies::recorded(sleeper, 5)
}

struct Outcome {
    ids: Vec<i64>,
    responses: usize,
    complete: bool,
    error: Option<ReattachError>,
    stats: StreamStats,
}

async fn drain(mut exec: ReattachableExecution) -> Outcome {
    let stats = exec.stats_handle();
    let mut out = Outcome {
        ids: vec![],
        responses: 0,
        complete: false,
        error: None,
        stats: Default::default(),
    };
    while let Some(item) = tokio::time::timeout(Duration::from_secs(30), exec.next())
        .await
        .expect("execution hung")
    {
        match item {
            Ok(resp) => {
                out.responses += 1;
                match resp.response_type {
                    Some(ResponseType::ArrowBatch(b)) => {
                        for batch in plans::decode(&b).unwrap() {
                            let col = batch
                                .column(0)
                                .as_any()
                                .downcast_ref::<Int64Array>()
                                .unwrap();
                            out.ids.extend(col.values().iter().copied());
                        }
                    }
                    Some(ResponseType::ResultComplete(_)) => out.complete = true,
                    _ => {}
                }
            }
            Err(e) => {
                out.error = Some(e);
                break;
            }
        }
    }
    out.stats = stats.snapshot();
    out
}

fn assert_exact(ids: &[i64], n: i64) {
    assert_eq!(ids.len() as i64, n, "row count");
    assert!(
        ids.iter().copied().eq(0..n),
        "rows out of order, lost or duplicated"
    );
}

async fn run(
    server: &TestServer,
    end: i64,
    sleeper: &RecordingSleeper,
    options: ReattachOptions,
) -> Outcome {
    drain(execution(server, end, sleeper, options)).await
}

/// An execution of `range(end)` on `server`.
fn execution(
    server: &TestServer,
    end: i64,
    sleeper: &RecordingSleeper,
    options: ReattachOptions,
) -> ReattachableExecution {
    ReattachableExecution::new(
        client(server),
        range_request(end),
        retrying(sleeper),
        options,
    )
    .unwrap()
}

/// Drains `exec` whose server goes silent after `responses` responses,
/// moving the held `clock` by `bound` once the client has read them, until
/// the stats say `noticed`; the outcome and the number of advances.
async fn silent_after(
    clock: &HeldClock,
    exec: ReattachableExecution,
    responses: u64,
    bound: Duration,
    noticed: impl Fn(&StreamStats) -> bool,
) -> (Outcome, u32) {
    let stats = exec.stats_handle();
    tokio::join!(
        drain(exec),
        clock.fire(
            bound,
            || stats.snapshot().responses == responses,
            || noticed(&stats.snapshot())
        )
    )
}

async fn server(rows_per_batch: u64) -> TestServer {
    TestServer::builder()
        .rows_per_batch(rows_per_batch)
        .start()
        .await
        .unwrap()
}

#[tokio::test]
async fn clean_run_is_exact_and_releases_all() {
    let s = server(1000).await;
    let sleeper = RecordingSleeper::new();
    let tracker = ReleaseTracker::new();
    let exec = ReattachableExecution::with_tracker(
        client(&s),
        range_request(50_000),
        retrying(&sleeper),
        ReattachOptions::default(),
        tracker.clone(),
    )
    .unwrap();
    let out = drain(exec).await;
    assert!(out.error.is_none(), "{:?}", out.error);
    assert_exact(&out.ids, 50_000);
    assert!(out.complete);
    assert!(tracker.wait_idle(Duration::from_secs(10)).await);
    let c = s.calls();
    assert_eq!((c.execute, c.reattach, c.release_all), (1, 0, 1));
    // One per response at most; none at all when the stream ends before the
    // first one goes (the release_all covers it).
    assert!(c.release_until <= 51, "{c:?}");
    assert!(s.live_executions().is_empty());
    assert!(sleeper.sleeps().is_empty());
}

#[tokio::test]
async fn graceful_stream_ends_reattach_without_sleep_or_budget() {
    let s = TestServer::builder()
        .rows_per_batch(100)
        .max_responses_per_stream(3)
        .start()
        .await
        .unwrap();
    let sleeper = RecordingSleeper::new();
    let out = run(&s, 10_000, &sleeper, ReattachOptions::default()).await;
    assert!(out.error.is_none(), "{:?}", out.error);
    assert_exact(&out.ids, 10_000);
    assert!(s.calls().reattach >= 30, "{:?}", s.calls());
    assert!(sleeper.sleeps().is_empty());
    // Every reattach resumed exactly after the last yielded response.
    assert!(
        s.reattach_requests()
            .iter()
            .all(|r| r.last_response_id.is_some())
    );
}

#[tokio::test]
async fn unavailable_mid_stream_backs_off_then_reattaches() {
    let s = server(500).await;
    s.faults()
        .push(Fault::unavailable().on(Rpc::ExecutePlan).after_responses(4));
    let sleeper = RecordingSleeper::new();
    let out = run(&s, 20_000, &sleeper, ReattachOptions::default()).await;
    assert!(out.error.is_none(), "{:?}", out.error);
    assert_exact(&out.ids, 20_000);
    assert_eq!(sleeper.sleeps_ms(), vec![10]);
    assert_eq!(s.calls().reattach, 1);
}

#[tokio::test]
async fn tcp_reset_mid_stream_is_retried_like_unavailable() {
    let s = server(500).await;
    s.faults().push(
        Fault::reset_connection()
            .on(Rpc::ExecutePlan)
            .after_responses(5),
    );
    s.faults().push(
        Fault::reset_connection()
            .on(Rpc::ReattachExecute)
            .after_responses(7),
    );
    let sleeper = RecordingSleeper::new();
    let out = run(&s, 30_000, &sleeper, ReattachOptions::default()).await;
    assert!(out.error.is_none(), "{:?}", out.error);
    assert_exact(&out.ids, 30_000);
    // Two policy retries for the stream (a release cut by the same reset may
    // retry too, through the same sleeper).
    assert_eq!(out.stats.policy_retries, 2, "{:?}", out.stats);
    assert!(s.calls().reattach >= 2);
}

#[tokio::test]
async fn lost_execute_plan_is_re_sent_after_operation_not_found() {
    let s = server(1000).await;
    s.faults().push(Fault::lose_request().on(Rpc::ExecutePlan));
    let sleeper = RecordingSleeper::new();
    let out = run(&s, 5_000, &sleeper, ReattachOptions::default()).await;
    assert!(out.error.is_none(), "{:?}", out.error);
    assert_exact(&out.ids, 5_000);
    let c = s.calls();
    assert_eq!(c.execute, 2, "{c:?}");
    assert_eq!(c.reattach, 1, "{c:?}");
    // Re-sent byte-identical.
    let reqs = s.execute_requests();
    assert_eq!(reqs.len(), 1, "the lost request was never processed");
}

#[tokio::test]
async fn session_not_found_before_any_response_re_executes() {
    let s = server(1000).await;
    s.faults()
        .push(Fault::session_not_found().on(Rpc::ExecutePlan));
    let sleeper = RecordingSleeper::new();
    let out = run(&s, 3_000, &sleeper, ReattachOptions::default()).await;
    assert!(out.error.is_none(), "{:?}", out.error);
    assert_exact(&out.ids, 3_000);
    assert_eq!((s.calls().execute, s.calls().reattach), (2, 0));
    assert!(sleeper.sleeps().is_empty());
}

#[tokio::test]
async fn operation_not_found_after_responses_fails_clearly() {
    let s = TestServer::builder()
        .rows_per_batch(100)
        .max_responses_per_stream(2)
        .start()
        .await
        .unwrap();
    s.faults()
        .push(Fault::operation_not_found().on(Rpc::ReattachExecute));
    let sleeper = RecordingSleeper::new();
    let out = run(&s, 10_000, &sleeper, ReattachOptions::default()).await;
    match out.error {
        Some(ReattachError::ResponseAlreadyReceived { marker, .. }) => {
            assert_eq!(marker, "INVALID_HANDLE.OPERATION_NOT_FOUND")
        }
        other => panic!("{other:?}"),
    }
    // The first segment: the schema response and one batch of 100 rows.
    assert_eq!(
        out.ids.len(),
        100,
        "the rows before the failure were delivered once"
    );
}

/// The server stops sending after 3 responses: on a clock that moves only
/// once the client has read them, the idle timeout fires exactly once and
/// the execution reattaches at once.
#[tokio::test(start_paused = true)]
async fn stall_is_detected_by_the_idle_timeout() {
    let clock = HeldClock::hold();
    let s = server(500).await;
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
    let exec = execution(&s, 10_000, &sleeper, options);
    let (out, advances) = silent_after(&clock, exec, 3, idle, |st| st.stalls > 0).await;
    clock.release().await;
    assert_eq!(advances, 1, "the client waited when the clock moved");
    assert!(out.error.is_none(), "{:?}", out.error);
    assert_exact(&out.ids, 10_000);
    assert_eq!(s.calls().reattach, 1);
    assert_eq!(out.stats.stalls, 1, "{:?}", out.stats);
    assert_eq!(out.stats.immediate_retries, 1, "{:?}", out.stats);
    assert!(sleeper.sleeps().is_empty(), "a stall reattaches at once");
}

/// The server stops sending after 2 responses, with no idle timeout: the
/// segment's deadline, reached by one move of a held clock, ends it, and the
/// execution reattaches at once.
#[tokio::test(start_paused = true)]
async fn segment_deadline_reattaches_at_once() {
    let clock = HeldClock::hold();
    let s = server(500).await;
    s.faults().push(
        Fault::stall_forever()
            .on(Rpc::ExecutePlan)
            .after_responses(2),
    );
    let sleeper = RecordingSleeper::new();
    let deadline = Duration::from_millis(400);
    let options = ReattachOptions {
        deadlines: RpcDeadlines {
            reattachable_execute_plan: Some(deadline),
            ..RpcDeadlines::default()
        },
        idle_timeout: None,
    };
    let exec = execution(&s, 5_000, &sleeper, options);
    let (out, advances) =
        silent_after(&clock, exec, 2, deadline, |st| st.immediate_retries > 0).await;
    clock.release().await;
    assert_eq!(advances, 1, "the client waited when the clock moved");
    assert!(out.error.is_none(), "{:?}", out.error);
    assert_exact(&out.ids, 5_000);
    assert_eq!(s.calls().reattach, 1);
    assert_eq!(out.stats.immediate_retries, 1, "{:?}", out.stats);
    assert_eq!(
        out.stats.stalls, 0,
        "a deadline is not a stall: {:?}",
        out.stats
    );
    assert!(sleeper.sleeps().is_empty(), "a deadline reattaches at once");
}

#[tokio::test]
async fn budget_resets_after_progress_and_exhausts_without_it() {
    let s = TestServer::builder()
        .rows_per_batch(100)
        .max_responses_per_stream(1)
        .start()
        .await
        .unwrap();
    // 3 failures, progress, 3 failures: fine with a 3-retry budget.
    s.faults()
        .push(Fault::unavailable().on(Rpc::ReattachExecute).times(3));
    let sleeper = RecordingSleeper::new();
    let exec = ReattachableExecution::new(
        client(&s),
        range_request(1_000),
        retrying(&sleeper),
        ReattachOptions::default(),
    )
    .unwrap();
    let mut exec = exec;
    let first = exec.next().await.unwrap().unwrap();
    assert!(first.response_id.len() > 10);
    let second = exec.next().await.unwrap();
    assert!(second.is_ok(), "{second:?}");
    s.faults()
        .push(Fault::unavailable().on(Rpc::ReattachExecute).times(3));
    let rest = drain(exec).await;
    assert!(rest.error.is_none(), "{:?}", rest.error);
    assert_eq!(sleeper.sleeps().len(), 6);

    // Four in a row: exhausted, the UNAVAILABLE is returned, release_all sent.
    let s = TestServer::builder()
        .rows_per_batch(100)
        .start()
        .await
        .unwrap();
    s.faults().push(Fault::unavailable().on(Rpc::ExecutePlan));
    s.faults()
        .push(Fault::unavailable().on(Rpc::ReattachExecute).times(3));
    let sleeper = RecordingSleeper::new();
    let out = run(&s, 1_000, &sleeper, ReattachOptions::default()).await;
    match out.error {
        Some(ReattachError::Status(st)) => assert_eq!(st.code(), Code::Unavailable),
        other => panic!("{other:?}"),
    }
    assert_eq!(sleeper.sleeps().len(), 3);
    assert_eq!((s.calls().execute, s.calls().reattach), (1, 3));
}

#[tokio::test]
async fn non_base64_status_details_is_a_clear_error_not_a_panic() {
    let s = server(100).await;
    s.faults().push(
        Fault::bad_status_details()
            .on(Rpc::ExecutePlan)
            .after_responses(2),
    );
    let sleeper = RecordingSleeper::new();
    let out = run(&s, 1_000, &sleeper, ReattachOptions::default()).await;
    match out.error {
        Some(ReattachError::Status(st)) => {
            assert_eq!(st.code(), Code::Internal);
            assert!(st.message().contains("not base64"), "{}", st.message());
        }
        other => panic!("{other:?}"),
    }
    assert!(sleeper.sleeps().is_empty(), "not retried");
}

#[tokio::test]
async fn dropping_early_releases_the_execution() {
    let s = TestServer::builder()
        .rows_per_batch(100)
        .batch_delay(Duration::from_millis(5))
        .start()
        .await
        .unwrap();
    let tracker = ReleaseTracker::new();
    let sleeper = RecordingSleeper::new();
    let mut exec = ReattachableExecution::with_tracker(
        client(&s),
        range_request(100_000),
        retrying(&sleeper),
        ReattachOptions::default(),
        tracker.clone(),
    )
    .unwrap();
    assert_eq!(exec.server_side_session_id(), None, "nothing seen yet");
    exec.next().await.unwrap().unwrap();
    assert_eq!(
        exec.server_side_session_id(),
        Some(s.server_side_session_id())
    );
    let op = exec.operation_id().to_owned();
    drop(exec);
    assert!(tracker.wait_idle(Duration::from_secs(10)).await);
    assert_eq!(s.calls().release_all, 1);
    assert!(!s.live_executions().contains(&op));
}

#[tokio::test]
async fn custom_operation_id_on_every_rpc() {
    let s = TestServer::builder()
        .rows_per_batch(100)
        .max_responses_per_stream(2)
        .start()
        .await
        .unwrap();
    let id = "10a4c38e-7e87-40ee-9d6f-60ff0751e63b";
    let mut req = range_request(1_000);
    req.operation_id = Some(id.into());
    let tracker = ReleaseTracker::new();
    let sleeper = RecordingSleeper::new();
    let exec = ReattachableExecution::with_tracker(
        client(&s),
        req,
        retrying(&sleeper),
        ReattachOptions::default(),
        tracker.clone(),
    )
    .unwrap();
    let out = drain(exec).await;
    assert!(out.error.is_none());
    assert!(tracker.wait_idle(Duration::from_secs(10)).await);
    assert!(
        s.execute_requests()
            .iter()
            .all(|r| r.operation_id.as_deref() == Some(id))
    );
    assert!(s.reattach_requests().iter().all(|r| r.operation_id == id));
    assert!(s.release_requests().iter().all(|r| r.operation_id == id));
}

#[tokio::test]
async fn release_until_is_coalesced_while_one_is_in_flight() {
    let s = server(100).await;
    // The first ReleaseExecute hangs for a while; meanwhile 50 responses arrive.
    s.faults()
        .push(Fault::stall(Duration::from_millis(500)).on(Rpc::ReleaseExecute));
    let tracker = ReleaseTracker::new();
    let sleeper = RecordingSleeper::new();
    let exec = ReattachableExecution::with_tracker(
        client(&s),
        range_request(5_000),
        retrying(&sleeper),
        ReattachOptions::default(),
        tracker.clone(),
    )
    .unwrap();
    let out = drain(exec).await;
    assert!(out.error.is_none());
    assert_eq!(out.responses, 52, "the schema, 50 batches, ResultComplete");
    assert!(tracker.wait_idle(Duration::from_secs(10)).await);
    let c = s.calls();
    // PySpark would send 50 release_until calls; here one in flight, the newest pending.
    assert!(c.release_until <= 2, "{c:?}");
    assert_eq!(c.release_all, 1);
}

/// PySpark sends a release_until per response; on a fast stream that cost
/// the server more CPU than it saved memory. Here at most one goes out per
/// `RELEASE_UNTIL_INTERVAL` (50 ms), however fast the responses come.
#[tokio::test]
async fn release_until_goes_at_most_once_per_interval() {
    let s = server(10).await;
    let tracker = ReleaseTracker::new();
    let sleeper = RecordingSleeper::new();
    let exec = ReattachableExecution::with_tracker(
        client(&s),
        range_request(20_000),
        retrying(&sleeper),
        ReattachOptions::default(),
        tracker.clone(),
    )
    .unwrap();
    let started = std::time::Instant::now();
    let out = drain(exec).await;
    let elapsed = started.elapsed();
    assert!(out.error.is_none(), "{:?}", out.error);
    assert_eq!(
        out.responses, 2_002,
        "the schema, 2,000 batches, ResultComplete"
    );
    assert!(tracker.wait_idle(Duration::from_secs(10)).await);
    let c = s.calls();
    let release_until_interval = Duration::from_millis(50);
    let allowed = (elapsed.as_millis() / release_until_interval.as_millis()) as u64 + 1;
    assert!(
        c.release_until >= 1 && c.release_until <= allowed,
        "{} release_until in {elapsed:?} (at most {allowed}): {c:?}",
        c.release_until
    );
    assert_eq!(c.release_all, 1);
}

#[tokio::test]
async fn cancelling_during_a_backoff_returns_at_once_and_releases() {
    let s = server(100).await;
    s.faults()
        .push(Fault::unavailable().on(Rpc::ExecutePlan).after_responses(1));
    let policy = RetryPolicy::pyspark_builder()
        .initial_backoff(Duration::from_secs(60))
        .build()
        .unwrap();
    let tracker = ReleaseTracker::new();
    let mut exec = ReattachableExecution::with_tracker(
        client(&s),
        range_request(5_000),
        Retrying::pyspark_with(vec![policy]),
        ReattachOptions::default(),
        tracker.clone(),
    )
    .unwrap();
    exec.next().await.unwrap().unwrap();
    let started = std::time::Instant::now();
    // The next item waits out a 60 s backoff; the caller gives up after 200 ms.
    assert!(
        tokio::time::timeout(Duration::from_millis(200), exec.next())
            .await
            .is_err()
    );
    drop(exec);
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(tracker.wait_idle(Duration::from_secs(10)).await);
    assert_eq!(s.calls().release_all, 1);
    assert!(s.live_executions().is_empty());
}
