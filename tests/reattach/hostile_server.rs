//! A server that misbehaves must not make the client spin, panic or lose
//! rows. Each test scripts a loopback tonic `SparkConnectService` (real
//! sockets) to misbehave one way, and asserts the typed error and the
//! backoff (recorded sleeps against a clock that never moves, never wall
//! time).

use crate::support::policies;
use spark_connect_retry::retrying::PySparkRetrying;
use spark_connect_testkit::held_clock::HeldClock;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arrow_array::{Int64Array, RecordBatch};
use spark_connect_retry::deadlines::RpcDeadlines;
use spark_connect_retry::proto::execute_plan_response::{ArrowBatch, ResponseType, ResultComplete};
use spark_connect_retry::proto::{
    ExecutePlanRequest, ExecutePlanResponse, ReattachExecuteRequest, ReleaseExecuteRequest,
    ReleaseExecuteResponse,
};
use spark_connect_retry::reattach::EmptySegment;
use spark_connect_retry::reattach::IntegrityError;
use spark_connect_retry::reattach::{ReattachError, ReattachOptions, ReattachableExecution};
use spark_connect_retry::retrying::Retrying;
use spark_connect_retry::session::{SparkError, SparkSession};
use spark_connect_retry::transport::spark_client;
use spark_connect_testkit::{SparkConnectService, SparkConnectServiceServer};
use tokio_stream::StreamExt;
use tonic::{Code, Status};
use tonic_retry::retrying::{ManualClock, RecordingSleeper};
use tonic_types::{ErrorDetails, StatusExt};

/// How long the scripted server takes to answer ReleaseExecute.
const RELEASE_DELAY: Duration = Duration::from_millis(50);

const SESSION: &str = "6f1c6a7e-2b9d-4c1a-9d8e-0a1b2c3d4e5f";

/// Which RPC a scripted call answers, and its number (0-based) among them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rpc {
    Execute(usize),
    Attach(usize),
}

type Reply = Result<Vec<Result<ExecutePlanResponse, Status>>, Status>;
type Script = Arc<dyn Fn(Rpc) -> Reply + Send + Sync>;

#[derive(Default)]
struct Calls {
    executes: AtomicUsize,
    attaches: AtomicUsize,
    releases: AtomicUsize,
    last_ids: Mutex<Vec<Option<String>>>,
}

struct Scripted {
    script: Script,
    calls: Arc<Calls>,
}

type BoxStream = std::pin::Pin<
    Box<dyn tokio_stream::Stream<Item = Result<ExecutePlanResponse, Status>> + Send + 'static>,
>;

fn stream_of(reply: Reply, session: String) -> Result<tonic::Response<BoxStream>, Status> {
    let items = reply?.into_iter().map(move |mut r| {
        if let Ok(resp) = r.as_mut() {
            resp.session_id = session.clone();
        }
        r
    });
    Ok(tonic::Response::new(Box::pin(tokio_stream::iter(
        items.collect::<Vec<_>>(),
    ))))
}

#[tonic::async_trait]
impl SparkConnectService for Scripted {
    async fn execute_plan(
        &self,
        request: tonic::Request<ExecutePlanRequest>,
    ) -> Result<tonic::Response<BoxStream>, Status> {
        let n = self.calls.executes.fetch_add(1, Ordering::SeqCst);
        stream_of(
            (self.script)(Rpc::Execute(n)),
            request.into_inner().session_id,
        )
    }
    async fn reattach_execute(
        &self,
        request: tonic::Request<ReattachExecuteRequest>,
    ) -> Result<tonic::Response<BoxStream>, Status> {
        let n = self.calls.attaches.fetch_add(1, Ordering::SeqCst);
        let req = request.into_inner();
        self.calls
            .last_ids
            .lock()
            .unwrap()
            .push(req.last_response_id);
        stream_of((self.script)(Rpc::Attach(n)), req.session_id)
    }
    async fn release_execute(
        &self,
        request: tonic::Request<ReleaseExecuteRequest>,
    ) -> Result<tonic::Response<ReleaseExecuteResponse>, Status> {
        self.calls.releases.fetch_add(1, Ordering::SeqCst);
        // A server a little slower to release than a tiny idle timeout.
        tokio::time::sleep(RELEASE_DELAY).await;
        let req = request.into_inner();
        Ok(tonic::Response::new(ReleaseExecuteResponse {
            session_id: req.session_id,
            operation_id: Some(req.operation_id),
            ..Default::default()
        }))
    }
}

/// Serve `script` on a loopback port; its address and call counts.
async fn serve(script: impl Fn(Rpc) -> Reply + Send + Sync + 'static) -> (String, Arc<Calls>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let calls = Arc::new(Calls::default());
    let svc = SparkConnectServiceServer::new(Scripted {
        script: Arc::new(script),
        calls: calls.clone(),
    });
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(svc)
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    (format!("127.0.0.1:{}", addr.port()), calls)
}

/// [`policies::recorded`] with a clock that never moves (every segment is short).
fn retrying(sleeper: &RecordingSleeper) -> Retrying {
    policies::recorded(sleeper, 5).with_clock(ManualClock::new())
}

fn resp(id: &str) -> ExecutePlanResponse {
    ExecutePlanResponse {
        response_id: id.into(),
        ..Default::default()
    }
}

fn done(id: &str) -> ExecutePlanResponse {
    ExecutePlanResponse {
        response_type: Some(ResponseType::ResultComplete(ResultComplete {})),
        ..resp(id)
    }
}

fn ok(items: Vec<ExecutePlanResponse>) -> Reply {
    Ok(items.into_iter().map(Ok).collect())
}

fn execution(addr: &str, sleeper: &RecordingSleeper) -> ReattachableExecution {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect_lazy();
    let req = ExecutePlanRequest {
        session_id: SESSION.into(),
        ..Default::default()
    };
    ReattachableExecution::new(
        spark_client(channel),
        req,
        retrying(sleeper),
        ReattachOptions::default(),
    )
    .unwrap()
}

/// Read to the end (bounded): the responses' ids and the error, if any;
/// and that nothing comes after the error.
async fn drain(mut exec: ReattachableExecution) -> (Vec<String>, Option<ReattachError>) {
    let mut ids = Vec::new();
    let read = async {
        while let Some(item) = exec.next_response().await {
            match item {
                Ok(r) => ids.push(r.response_id),
                Err(e) => {
                    assert!(
                        exec.next_response().await.is_none(),
                        "nothing after an error"
                    );
                    return Some(e);
                }
            }
        }
        None
    };
    let err = tokio::time::timeout(Duration::from_secs(30), read)
        .await
        .expect("the client spun for 30 s");
    (ids, err)
}

/// The waits the progress rule owes a run that ends in the budget: one
/// free reopen, then the policy's three 10 ms waits.
fn assert_backed_off(sleeper: &RecordingSleeper) {
    assert_eq!(sleeper.sleeps_ms(), vec![10, 10, 10]);
}

fn expect_no_progress(err: Option<ReattachError>, what: EmptySegment) {
    match err {
        Some(ReattachError::NoProgress {
            what: got,
            segments,
            ref operation_id,
            ..
        }) => {
            assert_eq!(got, what);
            assert_eq!(segments, 5);
            let msg = err.as_ref().unwrap().to_string();
            assert!(
                msg.contains(operation_id.as_str()) && msg.contains("NO_PROGRESS"),
                "{msg}"
            );
        }
        other => panic!("expected NoProgress({what:?}), got {other:?}"),
    }
}

#[tokio::test]
async fn empty_reattaches_after_a_clean_end_back_off_then_fail() {
    let (addr, calls) = serve(|rpc| match rpc {
        Rpc::Execute(_) => ok(vec![resp("r1")]),
        Rpc::Attach(_) => ok(vec![]),
    })
    .await;
    let sleeper = RecordingSleeper::new();
    let (ids, err) = drain(execution(&addr, &sleeper)).await;
    assert_eq!(ids, ["r1"]);
    expect_no_progress(err, EmptySegment::EndedEmpty);
    assert_backed_off(&sleeper);
    assert_eq!(calls.attaches.load(Ordering::SeqCst), 5);
}

#[tokio::test]
async fn an_execute_plan_that_never_returns_anything_backs_off_then_fails() {
    let (addr, calls) = serve(|_| ok(vec![])).await;
    let sleeper = RecordingSleeper::new();
    let (ids, err) = drain(execution(&addr, &sleeper)).await;
    assert!(ids.is_empty());
    expect_no_progress(err, EmptySegment::EndedEmpty);
    assert_backed_off(&sleeper);
    assert_eq!(calls.executes.load(Ordering::SeqCst), 1);
    assert_eq!(calls.attaches.load(Ordering::SeqCst), 4);
}

fn not_found() -> Status {
    Status::with_error_details(
        Code::Internal,
        "[INVALID_HANDLE.OPERATION_NOT_FOUND] no such operation",
        ErrorDetails::new(),
    )
}

#[tokio::test]
async fn operation_not_found_every_time_backs_off_then_fails() {
    let (addr, calls) = serve(|_| Err(not_found())).await;
    let sleeper = RecordingSleeper::new();
    let (ids, err) = drain(execution(&addr, &sleeper)).await;
    assert!(ids.is_empty());
    expect_no_progress(err, EmptySegment::NotFound);
    assert_backed_off(&sleeper);
    assert_eq!(calls.executes.load(Ordering::SeqCst), 5);
}

#[tokio::test]
async fn deadline_exceeded_on_every_reattach_backs_off_then_fails() {
    let (addr, calls) = serve(|rpc| match rpc {
        Rpc::Execute(_) => ok(vec![resp("r1")]),
        Rpc::Attach(_) => Err(Status::deadline_exceeded("too slow")),
    })
    .await;
    let sleeper = RecordingSleeper::new();
    let (ids, err) = drain(execution(&addr, &sleeper)).await;
    assert_eq!(ids, ["r1"]);
    expect_no_progress(err, EmptySegment::DeadlineExceeded);
    assert_backed_off(&sleeper);
    // After the clean end that followed r1, five answered DEADLINE_EXCEEDED:
    // one free reopen, three after a wait, then the error.
    assert_eq!(calls.attaches.load(Ordering::SeqCst), 5);
}

#[tokio::test]
async fn a_replay_from_the_start_with_empty_ids_is_refused() {
    let (addr, calls) = serve(|_| ok(vec![resp("")])).await;
    let sleeper = RecordingSleeper::new();
    let (ids, err) = drain(execution(&addr, &sleeper)).await;
    assert_eq!(ids, [""], "delivered once");
    assert!(
        matches!(
            err,
            Some(ReattachError::Integrity(IntegrityError::NoResumePosition))
        ),
        "{err:?}"
    );
    assert_eq!(calls.attaches.load(Ordering::SeqCst), 0, "never replayed");
}

#[tokio::test]
async fn the_same_response_id_twice_is_an_error() {
    // In one segment, and across a reattach that replays from the start.
    for (exec, attach) in [
        (vec![resp("a"), resp("a"), done("z")], vec![]),
        (vec![resp("a"), resp("b")], vec![resp("a"), done("z")]),
    ] {
        let (addr, _) = serve(move |rpc| match rpc {
            Rpc::Execute(_) => ok(exec.clone()),
            Rpc::Attach(_) => ok(attach.clone()),
        })
        .await;
        let sleeper = RecordingSleeper::new();
        let (ids, err) = drain(execution(&addr, &sleeper)).await;
        assert!(!ids.contains(&"z".to_owned()), "{ids:?}");
        assert_eq!(ids.iter().filter(|i| *i == "a").count(), 1);
        assert!(
            matches!(
                err,
                Some(ReattachError::Integrity(IntegrityError::DuplicateResponseId(ref id))) if id == "a"
            ),
            "{err:?}"
        );
    }
}

#[tokio::test]
async fn a_deadline_too_large_for_the_clock_is_refused_where_it_enters() {
    let channel = tonic::transport::Endpoint::from_static("http://127.0.0.1:9").connect_lazy();
    let options = ReattachOptions {
        deadlines: RpcDeadlines {
            reattach_execute: Some(Duration::MAX),
            ..RpcDeadlines::default()
        },
        ..ReattachOptions::default()
    };
    let err = ReattachableExecution::new(
        spark_client(channel),
        ExecutePlanRequest::default(),
        Retrying::pyspark(),
        options,
    )
    .unwrap_err();
    match err {
        ReattachError::InvalidDeadline(e) => assert_eq!(e.field, "reattach_execute"),
        other => panic!("{other:?}"),
    }
}

// ---- The session's batch stream ----

fn ipc(rows: i64) -> Vec<u8> {
    let batch =
        RecordBatch::try_from_iter([("id", Arc::new(Int64Array::from_iter_values(0..rows)) as _)])
            .unwrap();
    let mut out = Vec::new();
    let mut w = arrow_ipc::writer::StreamWriter::try_new(&mut out, &batch.schema()).unwrap();
    w.write(&batch).unwrap();
    w.finish().unwrap();
    drop(w);
    out
}

fn batch(id: &str, b: ArrowBatch) -> ExecutePlanResponse {
    ExecutePlanResponse {
        response_type: Some(ResponseType::ArrowBatch(b)),
        ..resp(id)
    }
}

/// The batches of `responses` (one ExecutePlan, no reattach): rows per
/// `Ok` batch, then the error, checking nothing comes after it.
async fn batches_of(responses: Vec<ExecutePlanResponse>) -> (Vec<usize>, Option<SparkError>) {
    let (addr, _) = serve(move |_| ok(responses.clone())).await;
    let sleeper = RecordingSleeper::new();
    let spark = SparkSession::builder()
        .remote(format!("sc://{addr}/;session_id={SESSION}"))
        .retrying(retrying(&sleeper))
        .build()
        .unwrap();
    let mut stream = spark.range(0, 1, 1).unwrap();
    let mut rows = Vec::new();
    let read = async {
        while let Some(item) = stream.next().await {
            match item {
                Ok(b) => rows.push(b.num_rows()),
                Err(e) => {
                    assert!(stream.next().await.is_none(), "nothing after an error");
                    return Some(e);
                }
            }
        }
        None
    };
    let err = tokio::time::timeout(Duration::from_secs(30), read)
        .await
        .expect("hung");
    (rows, err)
}

fn chunks(rows: i64, parts: usize, first_id: usize) -> Vec<ExecutePlanResponse> {
    let data = ipc(rows);
    data.chunks(data.len().div_ceil(parts))
        .enumerate()
        .map(|(i, c)| {
            batch(
                &format!("c{}", first_id + i),
                ArrowBatch {
                    row_count: rows,
                    data: c.to_vec().into(),
                    start_offset: Some(0),
                    chunk_index: Some(i as i64),
                    num_chunks_in_batch: Some(parts as i64),
                },
            )
        })
        .collect()
}

fn expect_integrity(err: Option<SparkError>, check: impl Fn(&IntegrityError) -> bool) {
    match err {
        Some(SparkError::Execution(ReattachError::Integrity(ref e))) if check(e) => {}
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_chunked_batch_cut_short_by_result_complete_is_an_error() {
    let mut rs = chunks(100, 3, 0);
    rs.truncate(2);
    rs.push(done("end"));
    let (rows, err) = batches_of(rs).await;
    assert!(rows.is_empty());
    expect_integrity(err, |e| {
        matches!(
            e,
            IntegrityError::TornBatch {
                received: 2,
                total: 3
            }
        )
    });
}

#[tokio::test]
async fn a_batch_whose_row_count_disagrees_is_never_delivered() {
    let rs = vec![
        batch(
            "b1",
            ArrowBatch {
                row_count: 11,
                data: ipc(10).into(),
                start_offset: Some(0),
                ..Default::default()
            },
        ),
        done("end"),
    ];
    let (rows, err) = batches_of(rs).await;
    assert!(
        rows.is_empty(),
        "the miscounted batch was delivered: {rows:?}"
    );
    expect_integrity(err, |e| {
        matches!(
            e,
            IntegrityError::RowCount {
                declared: 11,
                decoded: 10
            }
        )
    });
}

#[tokio::test]
async fn a_negative_chunk_count_is_an_error() {
    let rs = vec![
        batch(
            "b1",
            ArrowBatch {
                row_count: 10,
                data: ipc(10).into(),
                num_chunks_in_batch: Some(-2),
                ..Default::default()
            },
        ),
        done("end"),
    ];
    let (rows, err) = batches_of(rs).await;
    assert!(rows.is_empty());
    expect_integrity(err, |e| matches!(e, IntegrityError::BadChunkCount(-2)));
}

#[tokio::test]
async fn a_duplicate_response_id_with_a_start_offset_is_an_error() {
    let b = |start| ArrowBatch {
        row_count: 10,
        data: ipc(10).into(),
        start_offset: Some(start),
        ..Default::default()
    };
    let (rows, err) = batches_of(vec![batch("b1", b(0)), batch("b1", b(10)), done("end")]).await;
    assert_eq!(rows, [10]);
    expect_integrity(err, |e| matches!(e, IntegrityError::DuplicateResponseId(_)));
}

/// docs/arrow-ipc-panic.md's payload: a one-row Int32 stream whose first
/// buffer offset (byte 240) points past the message body.
const PANIC_PAYLOAD_HEX: &str = concat!(
    "ffffffff780000001000000000000a000c000a00090004000a0000001000000000010400080008000000040008000000",
    "04000000010000001400000010001400100000000f00040000000800100000001800000020000000000000021c000000",
    "08000c0004000b00080000002000000000000001000000000100000078000000ffffffffb8000000100000000c001a00",
    "18001700040008000c000000200000004000000000000000000000000000000304000a0018000c00080004000a000000",
    "2c0000001000000001000000000000000000000001000000010000000000000000000000000000000000000002000000",
    "7f0000000000000000000000000000000000000000000000040000000000000000000000000000000000000000000000",
    "000000000000000000000000000000000000000000000000000000000000000007000000000000000000000000000000",
    "000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000",
    "ffffffff00000000",
);

#[tokio::test]
async fn corrupt_arrow_data_is_a_typed_error_on_the_callers_task() {
    let data: Vec<u8> = (0..PANIC_PAYLOAD_HEX.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&PANIC_PAYLOAD_HEX[i..i + 2], 16).unwrap())
        .collect();
    let rs = vec![
        batch(
            "b1",
            ArrowBatch {
                row_count: 1,
                data: data.into(),
                start_offset: Some(0),
                ..Default::default()
            },
        ),
        done("end"),
    ];
    let (rows, err) = batches_of(rs).await;
    assert!(rows.is_empty());
    match err {
        Some(SparkError::Arrow(e)) => assert!(e.to_string().contains("corrupt Arrow IPC"), "{e}"),
        other => panic!("{other:?}"),
    }
}

/// The embedded server's `max_stream_duration(Some(Duration::MAX))` means
/// "never" (it used to panic its sender task, and the client reattached in
/// a hot loop).
#[tokio::test]
async fn the_test_servers_longest_stream_duration_saturates() {
    let server = spark_connect_testkit::TestServer::builder()
        .max_stream_duration(Some(Duration::MAX))
        .start()
        .await
        .unwrap();
    let channel = tonic::transport::Endpoint::from_shared(server.endpoint())
        .unwrap()
        .connect_lazy();
    let sleeper = RecordingSleeper::new();
    let req = spark_connect_testkit::plans::execute_request(
        SESSION,
        spark_connect_testkit::plans::range(Some(0), 5000, 1),
    );
    let exec = ReattachableExecution::new(
        spark_client(channel),
        req,
        retrying(&sleeper),
        ReattachOptions::default(),
    )
    .unwrap();
    let stats = exec.stats_handle();
    let (ids, err) = drain(exec).await;
    assert!(err.is_none(), "{err:?}");
    assert!(!ids.is_empty());
    assert_eq!(stats.snapshot().reattaches, 0, "{:?}", stats.snapshot());
}

/// With an idle timeout shorter than the server's answer to a release, the
/// release still succeeds at its first attempt (the attempt bound has a
/// floor), so a session's close has nothing left to wait for. On a held
/// clock: once the release is at the server, the clock moves by the
/// server's delay, and only the server's wait can end.
#[tokio::test(start_paused = true)]
async fn a_tiny_idle_timeout_does_not_give_up_releases() {
    let clock = HeldClock::hold();
    let (addr, calls) = serve(|_| ok(vec![done("z")])).await;
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect_lazy();
    let tracker = spark_connect_retry::reattach::ReleaseTracker::new();
    let sleeper = RecordingSleeper::new();
    let exec = ReattachableExecution::with_tracker(
        spark_client(channel),
        ExecutePlanRequest {
            session_id: SESSION.into(),
            ..Default::default()
        },
        retrying(&sleeper),
        ReattachOptions {
            idle_timeout: Some(Duration::from_millis(20)),
            ..ReattachOptions::default()
        },
        tracker.clone(),
    )
    .unwrap();
    let (ids, err) = drain(exec).await;
    assert!(err.is_none() && ids == ["z"], "{ids:?} {err:?}");
    clock
        .wait_for("the release at the server", || {
            calls.releases.load(Ordering::SeqCst) == 1
        })
        .await;
    tokio::time::advance(RELEASE_DELAY).await;
    let attempts = || calls.releases.load(Ordering::SeqCst);
    clock
        .wait_for("the release answered, or sent again", || {
            tracker.outstanding() == 0 || attempts() > 1
        })
        .await;
    assert_eq!(attempts(), 1, "one attempt");
    clock.release().await;
    assert_eq!((tracker.sent(), tracker.failed()), (1, 0));
    // The release attempt's floor (1 s) is above the server's delay.
    assert!(Duration::from_secs(1) > RELEASE_DELAY);
}
