//! Resuming a query across a server restart, against the embedded server:
//! the same result resumes exactly, each row once, whatever the cut (at a
//! batch boundary, inside a chunked batch, right after a graceful end); a
//! result that changes on re-execution fails with `ResultChanged` and
//! nothing duplicated or skipped; the budget bounds resumptions; a command
//! is never re-run.

use std::sync::Arc;

use arrow_array::{Array, Int64Array, RecordBatch};
use arrow_schema::{DataType, Field, Schema};
use spark_connect_retry::policy::PySparkPolicy;
use spark_connect_retry::policy::RetryPolicy;
use spark_connect_retry::retrying::PySparkRetrying;
use spark_connect_retry::retrying::Retrying;
use spark_connect_retry::session::{
    ArrowStream, ResultChange, SparkError, SparkSession, SparkSessionBuilder,
};
use spark_connect_testkit::{Fault, ResultEdit, Rpc, TestServer};
use tonic_retry::retrying::RecordingSleeper;

const QUERY: &str = "SELECT id, id*2 AS x FROM range(20000)";
const ROWS: i64 = 20_000;
const BATCH: i64 = 1000;

fn builder(server: &TestServer, max_retries: u32) -> SparkSessionBuilder {
    let policy = RetryPolicy::pyspark_builder()
        .jitter_ms(0.0)
        .max_retries(Some(max_retries))
        .build()
        .unwrap();
    SparkSession::builder()
        .remote(server.remote())
        .retrying(
            Retrying::pyspark_with(vec![policy])
                .with_sleeper(RecordingSleeper::new())
                .with_seed(7),
        )
        .renew_stale_session(true)
}

fn resuming(server: &TestServer) -> SparkSession {
    builder(server, 4).resume_queries(true).build().unwrap()
}

async fn server(rows_per_stream: Option<u64>) -> TestServer {
    let mut b = TestServer::builder().rows_per_batch(BATCH as u64);
    if let Some(n) = rows_per_stream {
        b = b.max_responses_per_stream(n);
    }
    b.start().await.unwrap()
}

/// The `id`s of a batch, with `x = 2 * id` checked.
fn ids(batch: &RecordBatch) -> Vec<i64> {
    let col = |i: usize| {
        batch
            .column(i)
            .as_any()
            .downcast_ref::<Int64Array>()
            .unwrap()
            .values()
            .to_vec()
    };
    let (id, x) = (col(0), col(1));
    assert!(id.iter().zip(&x).all(|(a, b)| *b == a * 2));
    id
}

/// Read `n` rows (whole batches), then the rest after `between` ran.
async fn read_around(
    stream: &mut ArrowStream,
    n: i64,
    between: impl FnOnce(),
) -> (Vec<i64>, Option<SparkError>) {
    let mut seen = Vec::new();
    while (seen.len() as i64) < n {
        seen.extend(ids(&stream.next_batch().await.unwrap().unwrap()));
    }
    assert_eq!(seen.len() as i64, n, "the cut is at a batch boundary");
    between();
    loop {
        match stream.next_batch().await {
            Some(Ok(b)) => seen.extend(ids(&b)),
            Some(Err(e)) => return (seen, Some(e)),
            None => return (seen, None),
        }
    }
}

fn assert_exact(seen: &[i64], rows: i64) {
    assert_eq!(seen.len() as i64, rows, "each row once");
    assert!(
        seen.iter().copied().eq(0..rows),
        "in order, none skipped or repeated"
    );
}

#[tokio::test]
async fn a_restart_at_a_batch_boundary_resumes_exactly() {
    for batches in [1i64, 3, 7, 19] {
        let s = server(None).await;
        let spark = resuming(&s);
        let first_session = spark.session_id();
        // The first execution stops sending after the schema and `batches`
        // batches: the restart comes while the stream waits for more.
        s.faults().push(
            Fault::stall_forever()
                .on(Rpc::ExecutePlan)
                .after_responses(1 + batches as u32),
        );
        let mut stream = spark.sql(QUERY).await.unwrap();
        let old_op = stream.operation_id().to_owned();
        let (seen, err) = read_around(&mut stream, batches * BATCH, || {
            s.simulate_restart();
        })
        .await;
        assert!(err.is_none(), "{err:?}");
        assert_exact(&seen, ROWS);
        let stats = stream.stats();
        assert_eq!(stats.resumptions, 1, "{stats:?}");
        // The lost execution's reattach (after the reset) counts too.
        assert!(stats.reattaches >= 1, "{stats:?}");
        assert_eq!(stream.rows(), ROWS as u64);
        assert_ne!(stream.operation_id(), old_op, "a new operation");
        // The re-execution ran the same plan on a fresh session.
        assert_eq!(spark.session_renewals(), 1);
        assert_ne!(spark.session_id(), first_session);
        let sent = s.execute_requests();
        let last = sent.last().unwrap();
        assert_eq!(last.session_id, spark.session_id());
        assert_eq!(last.operation_id.as_deref(), Some(stream.operation_id()));
        assert_eq!(last.plan, sent[0].plan);
        assert_eq!(s.calls().execute, 2, "cut after {batches} batches");
    }
}

#[tokio::test]
async fn a_loss_inside_a_chunked_batch_resumes_exactly() {
    // 1000 rows of two Int64 columns are ~16 KiB: 17 chunks of 1 KiB.
    let s = TestServer::builder()
        .rows_per_batch(BATCH as u64)
        .max_chunk_bytes(1024)
        .start()
        .await
        .unwrap();
    for responses in [1 + 17, 1 + 17 * 2 + 5, 1 + 17 * 3 - 1, 1 + 17 * 19 + 16] {
        let spark = builder(&s, 4)
            .preferred_arrow_chunk_size(1024)
            .resume_queries(true)
            .build()
            .unwrap();
        // The server loses the session after exactly this many responses,
        // as a reattach to a restarted server finds it.
        s.faults().push(
            Fault::session_not_found()
                .on(Rpc::ExecutePlan)
                .after_responses(responses),
        );
        let mut stream = spark.sql(QUERY).await.unwrap();
        let (seen, err) = read_around(&mut stream, 0, || {}).await;
        assert!(err.is_none(), "{err:?}");
        assert_exact(&seen, ROWS);
        assert_eq!(stream.stats().resumptions, 1, "lost after {responses}");
        assert_eq!(spark.session_renewals(), 1);
    }
}

#[tokio::test]
async fn a_restart_right_after_a_graceful_end_resumes_exactly() {
    // Each stream segment ends cleanly after 5 responses.
    for batches in [4i64, 9] {
        let s = server(Some(5)).await;
        // Per stream, on a session that does not resume by default.
        let spark = builder(&s, 4).build().unwrap();
        let mut stream = spark.sql(QUERY).await.unwrap();
        stream.set_resume(true).unwrap();
        let (seen, err) = read_around(&mut stream, batches * BATCH, || {
            s.simulate_restart();
        })
        .await;
        assert!(err.is_none(), "{err:?}");
        assert_exact(&seen, ROWS);
        let stats = stream.stats();
        assert_eq!(stats.resumptions, 1, "{stats:?}");
        assert!(stats.graceful_ends >= 1, "{stats:?}");
    }
}

/// Cut after 2000 rows by a restart; the re-execution serves `edit`.
async fn changed(edit: ResultEdit) -> (Vec<i64>, Option<SparkError>, ArrowStream) {
    let s = server(None).await;
    let spark = resuming(&s);
    s.faults().push(
        Fault::stall_forever()
            .on(Rpc::ExecutePlan)
            .after_responses(3),
    );
    let mut stream = spark.sql(QUERY).await.unwrap();
    let (seen, err) = read_around(&mut stream, 2 * BATCH, || {
        s.edit_results(Some(edit));
        s.simulate_restart();
    })
    .await;
    (seen, err, stream)
}

#[tokio::test]
async fn a_result_that_changed_fails_naming_the_rows_delivered() {
    let edits = [
        (ResultEdit::Shift { from_row: 0, by: 1 }, ResultChange::Rows),
        // Only the last row delivered differs.
        (
            ResultEdit::Shift {
                from_row: 1999,
                by: 1,
            },
            ResultChange::Rows,
        ),
        (
            ResultEdit::Truncate { rows: 1500 },
            ResultChange::Shorter { rows: 1500 },
        ),
        (
            ResultEdit::Truncate { rows: 0 },
            ResultChange::Shorter { rows: 0 },
        ),
    ];
    for (edit, change) in edits {
        let (seen, err, mut stream) = changed(edit).await;
        match &err {
            Some(SparkError::ResultChanged {
                delivered: 2000,
                operation_id,
                change: got,
            }) => {
                assert_eq!(got, &change, "{edit:?}");
                assert_eq!(operation_id, stream.operation_id());
            }
            other => panic!("{edit:?}: {other:?}"),
        }
        let text = err.unwrap().to_string();
        assert!(
            text.contains("RESULT_CHANGED_ON_RESUME") && text.contains("2000 rows"),
            "{text}"
        );
        // Exactly the rows delivered before the loss; nothing after.
        assert_exact(&seen, 2 * BATCH);
        assert!(stream.next_batch().await.is_none());
        assert_eq!(stream.stats().resumptions, 1);
    }
}

#[tokio::test]
async fn a_change_after_the_rows_delivered_is_new_data() {
    // Rows from 2000 on are the re-execution's own: delivered as they are.
    let (seen, err, _) = changed(ResultEdit::Shift {
        from_row: 2000,
        by: 5,
    })
    .await;
    assert!(err.is_none(), "{err:?}");
    assert_eq!(seen.len() as i64, ROWS);
    assert!(seen[..2000].iter().copied().eq(0..2000));
    assert!(seen[2000..].iter().copied().eq(2005..ROWS + 5));
    // A result exactly as long as what was delivered ends there.
    let (seen, err, _) = changed(ResultEdit::Truncate { rows: 2000 }).await;
    assert!(err.is_none(), "{err:?}");
    assert_exact(&seen, 2000);
}

#[tokio::test]
async fn resumptions_are_bounded_by_the_policy_budget() {
    let s = server(None).await;
    // max_retries 1: one resumption per query.
    let spark = builder(&s, 1).resume_queries(true).build().unwrap();
    for _ in 0..2 {
        s.faults().push(
            Fault::session_not_found()
                .on(Rpc::ExecutePlan)
                .after_responses(3),
        );
    }
    let mut stream = spark.sql(QUERY).await.unwrap();
    let (seen, err) = read_around(&mut stream, 0, || {}).await;
    match err {
        Some(SparkError::ResponseAlreadyReceived(e)) => {
            assert!(e.message().contains("SESSION_NOT_FOUND"), "{e}")
        }
        other => panic!("{other:?}"),
    }
    assert_exact(&seen, 2 * BATCH);
    assert_eq!(stream.stats().resumptions, 1);
    assert_eq!(s.calls().execute, 2);
}

#[tokio::test]
async fn resumption_is_off_by_default_and_needs_renewal() {
    let s = server(None).await;
    let plain = builder(&s, 4).build().unwrap();
    s.faults().push(
        Fault::session_not_found()
            .on(Rpc::ExecutePlan)
            .after_responses(3),
    );
    let mut stream = plain.sql(QUERY).await.unwrap();
    let (seen, err) = read_around(&mut stream, 0, || {}).await;
    assert!(
        matches!(err, Some(SparkError::ResponseAlreadyReceived(_))),
        "{err:?}"
    );
    assert_exact(&seen, 2 * BATCH);
    assert_eq!(stream.stats().resumptions, 0);

    let no_renewal = SparkSession::builder().remote(s.remote()).build().unwrap();
    let mut stream = no_renewal.range(0, 10, 1).unwrap();
    let err = stream.set_resume(true).unwrap_err();
    assert!(err.to_string().contains("renew_stale_session"), "{err}");
    // Too late once rows were delivered without a digest.
    let mut stream = plain.sql(QUERY).await.unwrap();
    stream.next_batch().await.unwrap().unwrap();
    let err = stream.set_resume(true).unwrap_err();
    assert!(err.to_string().contains("already delivered"), "{err}");
}

#[tokio::test]
async fn a_command_is_never_re_run() {
    let s = TestServer::builder()
        .execution_progress(true)
        .start()
        .await
        .unwrap();
    let spark = resuming(&s);
    // SQL that may be a command (INSERT, CTAS, a CTE before an INSERT) is
    // refused per stream, and not resumed under the session's setting.
    for q in [
        "INSERT INTO t SELECT id FROM range(10)",
        "WITH a AS (SELECT 1) INSERT INTO t SELECT * FROM a",
        "CREATE TABLE t AS SELECT 1",
    ] {
        let mut stream = spark
            .relation(spark_connect_retry::proto::Relation {
                common: None,
                rel_type: Some(spark_connect_retry::proto::relation::RelType::Sql(
                    spark_connect_retry::proto::Sql {
                        query: q.into(),
                        ..Default::default()
                    },
                )),
            })
            .unwrap();
        let err = stream.set_resume(true).unwrap_err();
        assert!(err.to_string().contains("side effects"), "{q}: {err}");
    }
    // A command losing its execution after a response keeps its error and
    // is sent once, with resumption on for the session.
    let schema = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)]));
    let batch =
        RecordBatch::try_new(schema.clone(), vec![Arc::new(Int64Array::from(vec![1, 2]))]).unwrap();
    let df = spark.create_dataframe(schema, [batch]).await.unwrap();
    let executes = s.calls().execute;
    s.faults().push(
        Fault::session_not_found()
            .on(Rpc::ExecutePlan)
            .after_responses(1),
    );
    let err = df.create_or_replace_temp_view("v").await.unwrap_err();
    assert!(
        matches!(err, SparkError::ResponseAlreadyReceived(_)),
        "{err:?}"
    );
    assert_eq!(s.calls().execute, executes + 1, "the command ran once");
}
