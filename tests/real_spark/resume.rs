//! A query resumed across a real server restart (kill, start again on the
//! same port): a `range` query re-executes on a fresh session and completes
//! with an exact result, each row once; a query over `rand()` gives other
//! rows when run again, so it fails with `ResultChanged` after exactly the
//! rows delivered.

use std::time::{Duration, Instant};

use arrow_array::{Array, Int64Array, RecordBatch};
use spark_connect_retry::policy::PySparkPolicy;
use spark_connect_retry::policy::RetryPolicy;
use spark_connect_retry::retrying::PySparkRetrying;
use spark_connect_retry::retrying::Retrying;
use spark_connect_retry::session::{ArrowStream, ResultChange, SparkError, SparkSession};

use super::restart::{RESTART_SERVER, restart};
use crate::{Check, absorb, addr_of, assert_exact, remote};

const ROWS: i64 = 3_000_000;

/// Renewal and resumption on; retries spread over about six minutes, long
/// enough for the server to come back (20-90 s on a loaded machine).
fn resuming(url: &str) -> SparkSession {
    let policy = RetryPolicy::pyspark_builder()
        .max_retries(Some(120))
        .initial_backoff(Duration::from_millis(200))
        .max_backoff(Some(Duration::from_secs(3)))
        .build()
        .unwrap();
    SparkSession::builder()
        .remote(url)
        .retrying(Retrying::pyspark_with(vec![policy]).with_seed(25))
        .renew_stale_session(true)
        .resume_queries(true)
        .build()
        .unwrap()
}

/// The restart server's URL and name, or `None` (skipped).
fn restart_server() -> Option<(String, String)> {
    let url = remote("SPARK_CONNECT_TEST_REMOTE_RESTART")?;
    let name = std::env::var("SPARK_CONNECT_TEST_RESTART").expect("restart server name");
    Some((url, name))
}

/// The next batch within a bound (a hang fails the test).
async fn next(stream: &mut ArrowStream) -> Option<Result<RecordBatch, SparkError>> {
    tokio::time::timeout(Duration::from_secs(300), stream.next_batch())
        .await
        .expect("the stream hung")
}

/// Read batches until at least `rows` rows, feeding `each`.
async fn read_at_least(stream: &mut ArrowStream, rows: usize, mut each: impl FnMut(&RecordBatch)) {
    let mut seen = 0;
    while seen < rows {
        let b = next(stream).await.expect("ended early").unwrap();
        seen += b.num_rows();
        each(&b);
    }
}

real_test!(
    a_range_query_resumes_across_a_restart_with_an_exact_result,
    needs = [RESTART, RESTART_NAME]
);
async fn a_range_query_resumes_across_a_restart_with_an_exact_result() {
    let Some((url, name)) = restart_server() else {
        return;
    };
    let _one_at_a_time = RESTART_SERVER.lock().await;
    let spark = resuming(&url);
    let mut stream = spark
        .sql(&format!("SELECT id, id*2 AS x FROM range({ROWS})"))
        .await
        .unwrap();
    let first_op = stream.operation_id().to_owned();
    let mut check = Check {
        in_order: true,
        ..Default::default()
    };
    read_at_least(&mut stream, 50_000, |b| absorb(&mut check, b)).await;
    let delivered = check.rows;
    let started = Instant::now();
    let restarted = restart(name, addr_of(&url).port().to_string());
    while let Some(b) = next(&mut stream).await {
        absorb(&mut check, &b.expect("resumed, not failed"));
    }
    let took = started.elapsed();
    restarted.await.unwrap().expect("the server restarted");
    let stats = stream.stats();
    eprintln!(
        "resumed across a restart: {delivered} rows delivered before the kill, \
         complete {took:.2?} after it; operation {first_op} -> {}; {stats:?}",
        stream.operation_id()
    );
    assert_exact(&check, ROWS);
    assert_eq!(stats.resumptions, 1, "{stats:?}");
    assert_eq!(spark.session_renewals(), 1);
    assert_ne!(stream.operation_id(), first_op);
    spark.close().await.expect("close");
}

real_test!(
    a_rand_query_fails_with_result_changed_after_a_restart,
    needs = [RESTART, RESTART_NAME]
);
async fn a_rand_query_fails_with_result_changed_after_a_restart() {
    let Some((url, name)) = restart_server() else {
        return;
    };
    let _one_at_a_time = RESTART_SERVER.lock().await;
    let spark = resuming(&url);
    let mut stream = spark
        .sql(&format!("SELECT id, rand() AS r FROM range({ROWS})"))
        .await
        .unwrap();
    let mut ids: Vec<i64> = Vec::new();
    let mut keep = |b: &RecordBatch| {
        let col = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
        assert_eq!(col.null_count(), 0);
        ids.extend(col.values().iter());
    };
    read_at_least(&mut stream, 50_000, &mut keep).await;
    let restarted = restart(name, addr_of(&url).port().to_string());
    let err = loop {
        match next(&mut stream).await {
            Some(Ok(b)) => keep(&b),
            Some(Err(e)) => break e,
            None => panic!("a changed result was passed off as the old one"),
        }
    };
    restarted.await.unwrap().expect("the server restarted");
    eprintln!("rand() across a restart: {err}");
    match &err {
        SparkError::ResultChanged {
            delivered,
            change: ResultChange::Rows,
            ..
        } => assert_eq!(*delivered, ids.len() as u64, "{err}"),
        other => panic!("ResultChanged expected: {other:?}"),
    }
    assert!(
        ids.iter().copied().eq(0..ids.len() as i64),
        "each delivered row once, in order"
    );
    assert!(next(&mut stream).await.is_none(), "nothing after the error");
    assert_eq!(stream.stats().resumptions, 1);
    spark.close().await.expect("close");
}
