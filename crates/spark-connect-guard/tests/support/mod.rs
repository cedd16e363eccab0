//! What the tests share: the foreign stub's requests, a drain that checks
//! every row, fast retry settings, and a raw gRPC server for the bytes tests.
#![allow(dead_code)] // each test file uses part of this module

pub mod raw;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use arrow_array::{Array, Int64Array};
use spark_connect_retry::policy::{PySparkPolicy, RetryPolicy};
use spark_connect_retry::retrying::{PySparkRetrying, Retrying};
use spark_connect_stub::spark::connect as stub;
use stub::spark_connect_service_client::SparkConnectServiceClient;
use tonic::Status;
use tonic_retry::retrying::RecordingSleeper;

pub const SESSION: &str = "6f1c6a7e-2b9d-4c1a-9d8e-0a1b2c3d4e5f";

/// A lazy channel to `addr` (a guard's, a proxy's), over plain HTTP/2.
pub fn channel_to(addr: std::net::SocketAddr) -> tonic::transport::Channel {
    tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .expect("a valid URI")
        .connect_lazy()
}

/// PySpark's policy with `retries` retries, `from_ms` to `to_ms` apart, no jitter.
fn policy(retries: u32, from_ms: f64, to_ms: f64) -> RetryPolicy {
    RetryPolicy::pyspark_builder()
        .max_retries(Some(retries))
        .initial_backoff_ms(from_ms)
        .max_backoff_ms(Some(to_ms))
        .jitter_ms(0.0)
        .build()
        .expect("a valid policy")
}

/// 40 retries, real sleeps from 20 ms to 200 ms: a client that waits
/// (seconds) for a guard to come back.
pub fn patient() -> Retrying {
    Retrying::pyspark_with(vec![policy(40, 20.0, 200.0)])
}

/// No retries at all: the first retryable failure is a give-up.
pub fn no_retries() -> Retrying {
    let p = RetryPolicy::pyspark_builder()
        .max_retries(Some(0))
        .build()
        .expect("a valid policy");
    Retrying::pyspark_with(vec![p])
}

/// 3 retries, 10 ms apart, sleeps recorded and never slept.
pub fn retrying(sleeper: &RecordingSleeper) -> Retrying {
    Retrying::pyspark_with(vec![policy(3, 10.0, 10.0)])
        .with_sleeper(sleeper.clone())
        .with_seed(5)
}

/// An ExecutePlanRequest of the foreign stub for `sql`, with no operation
/// id and no reattach option (the layer adds them).
pub fn sql_request(sql: &str) -> stub::ExecutePlanRequest {
    stub::ExecutePlanRequest {
        session_id: SESSION.into(),
        user_context: Some(stub::UserContext {
            user_id: "u".into(),
            ..Default::default()
        }),
        plan: Some(stub::Plan {
            op_type: Some(stub::plan::OpType::Root(stub::Relation {
                rel_type: Some(stub::relation::RelType::Sql(stub::Sql {
                    query: sql.into(),
                    ..Default::default()
                })),
                ..Default::default()
            })),
        }),
        client_type: Some("foreign-stub".into()),
        ..Default::default()
    }
}

pub fn range_sql(rows: i64) -> String {
    format!("SELECT id FROM range({rows})")
}

/// What a drained stream gave.
#[derive(Debug)]
pub struct Drained {
    /// Every `id` value, in order.
    pub ids: Vec<i64>,
    /// Every response's `response_id`, in order.
    pub response_ids: Vec<String>,
    pub complete: bool,
    pub error: Option<Status>,
}

/// Reads a foreign-stub ExecutePlan stream to its end, decoding every
/// Arrow batch.
pub async fn drain<T>(
    client: &mut SparkConnectServiceClient<T>,
    request: stub::ExecutePlanRequest,
) -> Drained
where
    T: tonic::client::GrpcService<tonic::body::Body>,
    T::Error: Into<tonic::codegen::StdError>,
    T::ResponseBody: tonic::codegen::Body<Data = bytes::Bytes> + Send + 'static,
    <T::ResponseBody as tonic::codegen::Body>::Error: Into<tonic::codegen::StdError> + Send,
{
    drain_with(client, request, |_| {}).await
}

/// [`drain`], calling `hook` once after `after` responses (0: never).
pub async fn drain_then<T>(
    client: &mut SparkConnectServiceClient<T>,
    request: stub::ExecutePlanRequest,
    after: usize,
    hook: impl FnOnce(),
) -> Drained
where
    T: tonic::client::GrpcService<tonic::body::Body>,
    T::Error: Into<tonic::codegen::StdError>,
    T::ResponseBody: tonic::codegen::Body<Data = bytes::Bytes> + Send + 'static,
    <T::ResponseBody as tonic::codegen::Body>::Error: Into<tonic::codegen::StdError> + Send,
{
    let mut hook = Some(hook);
    drain_with(client, request, |read| {
        if read + 1 == after
            && let Some(hook) = hook.take()
        {
            hook();
        }
    })
    .await
}

/// [`drain`], counting in `received` each response as it arrives, for a
/// test that acts once the caller has read so many (a held clock's
/// condition).
pub async fn drain_counted<T>(
    client: &mut SparkConnectServiceClient<T>,
    request: stub::ExecutePlanRequest,
    received: &AtomicU64,
) -> Drained
where
    T: tonic::client::GrpcService<tonic::body::Body>,
    T::Error: Into<tonic::codegen::StdError>,
    T::ResponseBody: tonic::codegen::Body<Data = bytes::Bytes> + Send + 'static,
    <T::ResponseBody as tonic::codegen::Body>::Error: Into<tonic::codegen::StdError> + Send,
{
    drain_with(client, request, |read| {
        received.store(read as u64, Ordering::SeqCst)
    })
    .await
}

/// [`drain`], calling `before_read` with the number of responses read so
/// far before each read.
async fn drain_with<T>(
    client: &mut SparkConnectServiceClient<T>,
    request: stub::ExecutePlanRequest,
    mut before_read: impl FnMut(usize),
) -> Drained
where
    T: tonic::client::GrpcService<tonic::body::Body>,
    T::Error: Into<tonic::codegen::StdError>,
    T::ResponseBody: tonic::codegen::Body<Data = bytes::Bytes> + Send + 'static,
    <T::ResponseBody as tonic::codegen::Body>::Error: Into<tonic::codegen::StdError> + Send,
{
    let mut out = Drained {
        ids: vec![],
        response_ids: vec![],
        complete: false,
        error: None,
    };
    let call = tokio::time::timeout(Duration::from_secs(60), client.execute_plan(request));
    let mut stream = match call.await.expect("ExecutePlan hung") {
        Ok(r) => r.into_inner(),
        Err(s) => {
            out.error = Some(s);
            return out;
        }
    };
    let mut read = 0;
    loop {
        before_read(read);
        read += 1;
        let next = tokio::time::timeout(Duration::from_secs(60), stream.message())
            .await
            .expect("stream hung");
        match next {
            Ok(Some(resp)) => {
                assert!(!out.complete, "a response after ResultComplete");
                out.response_ids.push(resp.response_id.clone());
                match resp.response_type {
                    Some(stub::execute_plan_response::ResponseType::ArrowBatch(b)) => {
                        let reader =
                            arrow_ipc::reader::StreamReader::try_new(&b.data[..], None).unwrap();
                        for batch in reader {
                            let batch = batch.unwrap();
                            let col = batch
                                .column(0)
                                .as_any()
                                .downcast_ref::<Int64Array>()
                                .unwrap();
                            out.ids.extend(col.values().iter().copied());
                            assert_eq!(col.null_count(), 0);
                        }
                    }
                    Some(stub::execute_plan_response::ResponseType::ResultComplete(_)) => {
                        out.complete = true
                    }
                    _ => {}
                }
            }
            Ok(None) => break,
            Err(s) => {
                out.error = Some(s);
                break;
            }
        }
    }
    out
}

/// Every row of `range(n)` once, in order, and the real end.
pub fn assert_exact(d: &Drained, n: i64) {
    assert!(d.error.is_none(), "{:?}", d.error);
    assert!(d.complete, "ended without ResultComplete");
    assert_eq!(d.ids.len() as i64, n, "row count");
    assert!(
        d.ids.iter().copied().eq(0..n),
        "rows out of order or duplicated"
    );
}

/// The guard's counts once `ready` holds (a call is counted when its body
/// is dropped, just after the client read its end); bounded: 10 s.
pub async fn eventually_stats(
    guard: &spark_connect_guard::Guard,
    ready: impl Fn(&spark_connect_guard::GuardStats) -> bool,
) -> spark_connect_guard::GuardStats {
    for _ in 0..1000 {
        let stats = guard.stats();
        if ready(&stats) {
            return stats;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the guard's counts never got there: {:?}", guard.stats());
}
