//! Stale sessions against the embedded server: a restart (the server forgets
//! every session and gets a new server-side id) without and with
//! `renew_stale_session`, builder configs set again on the fresh session,
//! running executions never moved, and racing calls renewing once.

use std::time::Duration;

use arrow_array::{Array, Int64Array};
use spark_connect_retry::policy::PySparkPolicy;
use spark_connect_retry::policy::RetryPolicy;
use spark_connect_retry::retrying::PySparkRetrying;
use spark_connect_retry::retrying::Retrying;
use spark_connect_retry::session::{SparkError, SparkSession, SparkSessionBuilder};
use spark_connect_testkit::TestServer;
use tonic_retry::retrying::RecordingSleeper;

use crate::support::streams;
use streams::first_error;

const ZONE: (&str, &str) = ("spark.sql.session.timeZone", "Asia/Kolkata");

fn builder(server: &TestServer) -> SparkSessionBuilder {
    let policy = RetryPolicy::pyspark_builder()
        .jitter_ms(0.0)
        .build()
        .unwrap();
    SparkSession::builder()
        .remote(server.remote())
        .retrying(
            Retrying::pyspark_with(vec![policy])
                .with_sleeper(RecordingSleeper::new())
                .with_seed(3),
        )
        .config(ZONE.0, ZONE.1)
}

/// The ids of `SELECT id FROM range(n)`, read to the end.
async fn ids(spark: &SparkSession, n: i64) -> Result<Vec<i64>, SparkError> {
    let batches = spark
        .sql(&format!("SELECT id FROM range({n})"))
        .await?
        .collect()
        .await?;
    Ok(batches
        .iter()
        .flat_map(|b| {
            let col = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
            assert_eq!(col.null_count(), 0);
            col.values().to_vec()
        })
        .collect())
}

fn conf(server: &TestServer, spark: &SparkSession, key: &str) -> Option<String> {
    server
        .session_config(&spark.session_id())
        .and_then(|c| c.get(key).cloned())
}

#[tokio::test]
async fn builder_configs_are_set_before_the_first_call() {
    let s = TestServer::start().await.unwrap();
    let spark = builder(&s).build().unwrap();
    assert_eq!(s.calls().config, 0, "nothing is sent at build");
    assert_eq!(ids(&spark, 3).await.unwrap(), [0, 1, 2]);
    assert_eq!(conf(&s, &spark, ZONE.0).as_deref(), Some(ZONE.1));
    assert_eq!(
        spark.config_get(&[ZONE.0]).await.unwrap(),
        [Some(ZONE.1.into())]
    );
    assert_eq!(s.calls().config, 2, "once, then the get");
    // A lazy stream started first applies them too.
    let lazy = builder(&s).build().unwrap();
    let batches = lazy.range(0, 5, 1).unwrap().collect().await.unwrap();
    assert_eq!(batches.iter().map(|b| b.num_rows()).sum::<usize>(), 5);
    assert_eq!(conf(&s, &lazy, ZONE.0).as_deref(), Some(ZONE.1));
}

/// A new server-side session id alone (sessions kept), or a full restart:
/// without renewal, SESSION_CHANGED closes the session, as in PySpark.
#[tokio::test]
async fn without_renewal_a_changed_server_session_closes_the_session() {
    for restart in [false, true] {
        let s = TestServer::start().await.unwrap();
        let spark = builder(&s).build().unwrap();
        assert_eq!(ids(&spark, 2).await.unwrap(), [0, 1]);
        let id = spark.session_id();
        if restart {
            s.simulate_restart();
        } else {
            s.rotate_server_side_session_id();
        }
        let err = if restart {
            ids(&spark, 2).await.unwrap_err()
        } else {
            spark.spark_version().await.unwrap_err()
        };
        assert_eq!(
            err.error_class(),
            Some("INVALID_HANDLE.SESSION_CHANGED"),
            "{err}"
        );
        assert!(spark.is_closed());
        assert!(matches!(
            spark.range(0, 1, 1),
            Err(SparkError::SessionClosed)
        ));
        assert_eq!((spark.session_renewals(), spark.session_id()), (0, id));
    }
}

#[tokio::test]
async fn with_renewal_the_next_call_runs_on_a_fresh_session_with_the_builder_configs() {
    let s = TestServer::start().await.unwrap();
    let spark = builder(&s).renew_stale_session(true).build().unwrap();
    assert_eq!(ids(&spark, 2).await.unwrap(), [0, 1]);
    spark
        .config_set(&[("spark.sql.shuffle.partitions", "3")])
        .await
        .unwrap();
    let (old_id, old_server_side) = (spark.session_id(), spark.server_side_session_id());
    let executes = s.calls().execute;
    let new_server_side = s.simulate_restart();

    assert_eq!(ids(&spark, 4).await.unwrap(), [0, 1, 2, 3]);
    assert_eq!(spark.session_renewals(), 1);
    assert!(!spark.is_closed());
    assert_ne!(spark.session_id(), old_id);
    assert_ne!(spark.server_side_session_id(), old_server_side);
    assert_eq!(spark.server_side_session_id(), Some(new_server_side));
    // Refused once (SESSION_CHANGED, nothing ran), then sent on the fresh
    // session, whose first request carried no observed server-side id.
    assert_eq!(s.calls().execute, executes + 2);
    let sent = s.execute_requests();
    let (refused, resent) = (&sent[sent.len() - 2], &sent[sent.len() - 1]);
    assert_eq!(refused.session_id, old_id);
    assert_eq!(resent.session_id, spark.session_id());
    assert_eq!(
        refused.operation_id, resent.operation_id,
        "the same operation"
    );
    // The builder's config is back; the one set at run time is gone.
    assert_eq!(conf(&s, &spark, ZONE.0).as_deref(), Some(ZONE.1));
    assert_eq!(conf(&s, &spark, "spark.sql.shuffle.partitions"), None);
    // Unary calls renew the same way.
    s.simulate_restart();
    assert_eq!(spark.spark_version().await.unwrap(), "4.3.0");
    assert_eq!(spark.session_renewals(), 2);
    assert_eq!(conf(&s, &spark, ZONE.0).as_deref(), Some(ZONE.1));
    spark.close().await.unwrap();
    assert!(matches!(
        spark.spark_version().await,
        Err(SparkError::SessionClosed)
    ));
}

#[tokio::test]
async fn a_running_execution_keeps_its_error_and_is_never_moved() {
    let s = TestServer::builder()
        .rows_per_batch(100)
        .start()
        .await
        .unwrap();
    let spark = builder(&s).renew_stale_session(true).build().unwrap();
    let mut stream = spark.sql("SELECT id FROM range(10000000)").await.unwrap();
    let operation_id = stream.operation_id().to_owned();
    stream.next_batch().await.unwrap().unwrap();
    // A lazy stream made before the restart but not started yet is new work.
    let lazy = spark.range(0, 7, 1).unwrap();
    let reattaches = s.reattach_requests().len();
    let old_id = spark.session_id();
    s.simulate_restart();
    let err = first_error(&mut stream, Duration::from_secs(60)).await;
    assert!(
        matches!(err, SparkError::ResponseAlreadyReceived(_))
            || err.error_class() == Some("OPERATION_CANCELED"),
        "{err:?}"
    );
    assert_eq!(stream.operation_id(), operation_id);
    assert_eq!(
        spark.session_renewals(),
        0,
        "nothing renewed under a running execution"
    );
    assert!(
        s.reattach_requests()[reattaches..]
            .iter()
            .all(|r| r.operation_id == operation_id && r.session_id == old_id),
        "reattaches stay on the execution's own session"
    );
    // New work runs on a fresh session: the lazy stream, then a new query.
    let batches = lazy.collect().await.unwrap();
    assert_eq!(batches.iter().map(|b| b.num_rows()).sum::<usize>(), 7);
    assert_eq!(spark.session_renewals(), 1);
    assert_eq!(ids(&spark, 3).await.unwrap(), [0, 1, 2]);
    assert_eq!(spark.session_renewals(), 1);
}

#[tokio::test]
async fn racing_calls_renew_once() {
    let s = TestServer::start().await.unwrap();
    let spark = builder(&s).renew_stale_session(true).build().unwrap();
    spark.spark_version().await.unwrap();
    s.simulate_restart();
    let configs = s.calls().config;
    let mut calls = tokio::task::JoinSet::new();
    for i in 0..8i64 {
        let spark = spark.clone();
        calls.spawn(async move {
            if i % 2 == 0 {
                ids(&spark, i + 1).await.map(|v| v.len() as i64)
            } else {
                spark.spark_version().await.map(|_| i + 1)
            }
        });
    }
    let mut done = Vec::new();
    while let Some(r) = calls.join_next().await {
        done.push(r.unwrap().unwrap());
    }
    done.sort();
    assert_eq!(done, (1..=8).collect::<Vec<_>>());
    assert_eq!(
        spark.session_renewals(),
        1,
        "eight racing calls, one renewal"
    );
    assert_eq!(
        s.calls().config - configs,
        1,
        "the builder's configs set once on the fresh session"
    );
    assert_eq!(conf(&s, &spark, ZONE.0).as_deref(), Some(ZONE.1));
}

#[tokio::test]
async fn a_session_closed_on_the_server_is_renewed_only_when_asked() {
    let s = TestServer::start().await.unwrap();
    for renew in [false, true] {
        let spark = builder(&s).renew_stale_session(renew).build().unwrap();
        spark.spark_version().await.unwrap();
        // Another client releases the same server session (as an idle
        // timeout on the server would).
        let other = SparkSession::connect(&format!(
            "{}/;session_id={}",
            s.remote(),
            spark.session_id()
        ))
        .unwrap();
        other.release_session().await.unwrap();
        let next = spark.spark_version().await;
        if renew {
            assert_eq!(next.unwrap(), "4.3.0");
            assert_eq!(spark.session_renewals(), 1);
        } else {
            let err = next.unwrap_err();
            assert_eq!(
                err.error_class(),
                Some("INVALID_HANDLE.SESSION_CLOSED"),
                "{err}"
            );
            // Not closed locally (only SESSION_CHANGED does that, as in
            // PySpark): the server keeps saying so.
            assert!(!spark.is_closed());
            let again = spark.spark_version().await.unwrap_err();
            assert_eq!(again.error_class(), err.error_class());
            assert_eq!(spark.session_renewals(), 0);
        }
    }
}
