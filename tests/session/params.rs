//! Parameterized SQL against the embedded server: a query whose bounds are
//! `:name` / `?` parameters is replayed, reattached and resumed exactly like
//! any other, every ExecutePlan carrying the same parameters; a value Spark
//! cannot take fails before anything is sent.

use std::time::Duration;

use arrow_array::{Array, Int64Array, RecordBatch};
use spark_connect_retry::policy::PySparkPolicy;
use spark_connect_retry::policy::RetryPolicy;
use spark_connect_retry::proto;
use spark_connect_retry::retrying::PySparkRetrying;
use spark_connect_retry::retrying::Retrying;
use spark_connect_retry::session::params::{Decimal, ParamError, ParamRef, Params};
use spark_connect_retry::session::{SparkError, SparkSession};
use spark_connect_testkit::{Fault, Rpc, TestServer};
use tonic_retry::retrying::RecordingSleeper;

fn session(server: &TestServer, resume: bool) -> SparkSession {
    let policy = RetryPolicy::pyspark_builder()
        .jitter_ms(0.0)
        .max_retries(Some(6))
        .build()
        .unwrap();
    SparkSession::builder()
        .remote(server.remote())
        .retrying(
            Retrying::pyspark_with(vec![policy])
                .with_sleeper(RecordingSleeper::new())
                .with_seed(5),
        )
        .renew_stale_session(resume)
        .resume_queries(resume)
        .build()
        .unwrap()
}

/// `id`s of the batches, with `x = 2 * id` checked.
fn ids(batches: &[RecordBatch]) -> Vec<i64> {
    batches
        .iter()
        .flat_map(|b| {
            let col = |i: usize| {
                let c = b.column(i).as_any().downcast_ref::<Int64Array>().unwrap();
                assert_eq!(c.null_count(), 0);
                c.values().to_vec()
            };
            let (id, x) = (col(0), col(1));
            assert!(id.iter().zip(&x).all(|(a, b)| *b == a * 2));
            id
        })
        .collect()
}

/// The SQL relation of an ExecutePlan request.
fn sql_of(req: &proto::ExecutePlanRequest) -> &proto::Sql {
    match req.plan.as_ref().and_then(|p| p.op_type.as_ref()) {
        Some(proto::plan::OpType::Root(proto::Relation {
            rel_type: Some(proto::relation::RelType::Sql(sql)),
            ..
        })) => sql,
        other => panic!("not a SQL relation: {other:?}"),
    }
}

#[tokio::test]
async fn a_parameterized_query_is_replayed_and_reattached_exactly() {
    let s = TestServer::builder()
        .rows_per_batch(1000)
        .max_responses_per_stream(7)
        .start()
        .await
        .unwrap();
    // The first ExecutePlan fails before any response (the client sends it
    // again, same operation); the second is cut after 3 responses (the
    // client reattaches).
    s.faults()
        .push(Fault::unavailable().on(Rpc::ExecutePlan))
        .push(Fault::unavailable().on(Rpc::ExecutePlan).after_responses(3))
        .push(
            Fault::reset_connection()
                .on(Rpc::ReattachExecute)
                .after_responses(2),
        )
        .push(
            Fault::status(tonic::Code::ResourceExhausted, "slow down")
                .retry_info(Duration::from_millis(700))
                .on(Rpc::ReattachExecute),
        );
    let spark = session(&s, false);
    let params = Params::named().bind("start", 10i64).bind("end", 50_010i32);
    let mut stream = spark
        .sql_with("SELECT id, id*2 AS x FROM range(:start, :end)", params)
        .await
        .unwrap();
    let mut batches = vec![];
    while let Some(b) = stream.next_batch().await {
        batches.push(b.unwrap());
    }
    assert!(ids(&batches).into_iter().eq(10..50_010));
    let stats = stream.stats();
    assert!(stats.reattaches >= 5, "graceful ends and faults: {stats:?}");
    assert_eq!(
        stats.re_executes, 1,
        "only the ExecutePlan that failed before any response was sent again: {stats:?}"
    );
    // The ExecutePlan was sent twice (the first failed in the fault
    // script); the one that ran is the resent one, with the parameters
    // beside the query text, and every reattach was to its operation.
    assert_eq!(
        s.calls().execute,
        2,
        "the UNAVAILABLE ExecutePlan was sent again"
    );
    let sent = s.execute_requests();
    assert_eq!(sent.len(), 1);
    let op = sent[0].operation_id.clone().unwrap();
    assert!(s.reattach_requests().iter().all(|r| r.operation_id == op));
    let sql = sql_of(&sent[0]);
    assert_eq!(sql.query, "SELECT id, id*2 AS x FROM range(:start, :end)");
    assert_eq!(
        sql.named_arguments.keys().collect::<Vec<_>>(),
        ["end", "start"]
    );
    assert!(sql.pos_arguments.is_empty() && sql.args.is_empty());
    spark.close().await.unwrap();
}

#[tokio::test]
async fn a_positional_query_is_resumed_across_a_restart_exactly() {
    let s = TestServer::builder()
        .rows_per_batch(1000)
        .start()
        .await
        .unwrap();
    let spark = session(&s, true);
    // The first execution stops after the schema and 4 batches; the server
    // then restarts, and the query is re-run on a new session and resumed.
    s.faults().push(
        Fault::stall_forever()
            .on(Rpc::ExecutePlan)
            .after_responses(5),
    );
    let mut stream = spark
        .sql_with(
            "SELECT id, id*2 AS x FROM range(?, ?)",
            Params::positional().bind(0i64).bind(20_000i64),
        )
        .await
        .unwrap();
    let mut batches = vec![];
    while batches.len() < 4 {
        batches.push(stream.next_batch().await.unwrap().unwrap());
    }
    s.simulate_restart();
    while let Some(b) = stream.next_batch().await {
        batches.push(b.unwrap());
    }
    assert!(ids(&batches).into_iter().eq(0..20_000), "each row once");
    let stats = stream.stats();
    assert_eq!(stats.resumptions, 1, "{stats:?}");
    assert_eq!(spark.session_renewals(), 1);
    let sent = s.execute_requests();
    assert_eq!(s.calls().execute, 2);
    let (first, last) = (sql_of(&sent[0]), sql_of(sent.last().unwrap()));
    assert_eq!(first, last, "re-run with the same parameters");
    assert_eq!(first.pos_arguments.len(), 2);
    spark.close().await.unwrap();
}

#[tokio::test]
async fn an_unbound_marker_fails_as_spark_says() {
    let s = TestServer::start().await.unwrap();
    let spark = session(&s, false);
    let err = spark
        .sql_with("SELECT id FROM range(:n)", Params::named().bind("m", 3i64))
        .await
        .unwrap_err();
    let SparkError::Server(e) = &err else {
        panic!("{err:?}")
    };
    assert_eq!(e.error_class(), Some("UNBOUND_SQL_PARAMETER"));
    assert_eq!(e.sql_state(), Some("42P02"));
    spark.close().await.unwrap();
}

#[tokio::test]
async fn a_value_spark_cannot_take_fails_before_sending() {
    let s = TestServer::start().await.unwrap();
    let spark = session(&s, false);
    let err = spark
        .sql_with(
            "SELECT id FROM range(:n) WHERE :price > 0",
            Params::named()
                .bind("n", 3i64)
                .bind("price", Decimal::new("12.5", 3, 2)),
        )
        .await
        .unwrap_err();
    let SparkError::Params(ParamError::InvalidValue { param, .. }) = &err else {
        panic!("{err:?}")
    };
    assert_eq!(param, &ParamRef::Named("price".into()));
    assert_eq!(
        err.to_string(),
        "SQL parameter `:price`: 12.5 does not fit DECIMAL(3,2)"
    );
    let err = spark
        .sql_with("SELECT 1", Params::named().bind("not a name", 1i32))
        .await
        .unwrap_err();
    assert!(
        matches!(err, SparkError::Params(ParamError::InvalidName { .. })),
        "{err:?}"
    );
    assert_eq!(s.calls().execute, 0, "nothing was sent");
    spark.close().await.unwrap();
}
