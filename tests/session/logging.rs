//! What the session's retries log: PySpark's `[RETRIES_EXCEEDED]` warning
//! when the loop gives up (PySpark logs one, and so do we), and events that
//! name the call, the session, the attempt and the wait. (The loop's own
//! events, in any wording: tonic-retry's `policy/give_up.rs`.)
//!
//! The events are captured through one global subscriber that every test here
//! installs before it runs the loop (`support`'s docs say why a scoped
//! subscriber per test would be flaky).

use std::sync::atomic::{AtomicU32, Ordering};

use spark_connect_retry::policy::PySparkPolicy;
use spark_connect_retry::policy::RetryPolicy;
use spark_connect_retry::retrying::PySparkRetrying;
use spark_connect_retry::retrying::{RETRIES_EXCEEDED, Retrying};
use spark_connect_retry::session::{ResultBatchRows, SparkSession};
use spark_connect_testkit::{Fault, Rpc, TestServer};
use tonic::Status;
use tonic_retry::retrying::RecordingSleeper;

use crate::support;

/// Runs the default loop against a server that is always UNAVAILABLE; returns
/// the attempts, the sleeps and the WARN messages of the crate.
async fn give_up_forever(retrying: Retrying) -> (u32, usize, Vec<String>) {
    support::init();
    let sleeper = RecordingSleeper::new();
    let retrying = retrying.with_sleeper(sleeper.clone()).with_seed(1);
    let attempts = AtomicU32::new(0);
    let (result, events) = support::capture(retrying.call(|| {
        attempts.fetch_add(1, Ordering::SeqCst);
        async { Err::<(), _>(Status::unavailable("down")) }
    }))
    .await;
    assert_eq!(result.unwrap_err().message(), "down");
    let warnings = events
        .into_iter()
        .filter(|e| e.level == tracing::Level::WARN)
        .map(|e| e.message)
        .collect();
    (
        attempts.load(Ordering::SeqCst),
        sleeper.sleeps_ms().len(),
        warnings,
    )
}

/// PySpark's default policy: 16 attempts, 15 waits, then one warning in
/// PySpark's words.
#[tokio::test]
async fn give_up_warns_once() {
    let (attempts, sleeps, warnings) = give_up_forever(Retrying::pyspark()).await;
    assert_eq!((attempts, sleeps), (16, 15));
    assert_eq!(warnings, vec![RETRIES_EXCEEDED.to_owned()]);
}

// What a person reading the logs needs: which call, which attempt, which
// status, how long the wait, which policy; and on give-up, what was tried.

/// The fields of `event` (and its spans) `names`, as `name=value`, for
/// an assertion that shows all of them when it fails.
fn fields_of(event: &support::Event, names: &[&str]) -> Vec<String> {
    names
        .iter()
        .map(|n| format!("{n}={}", event.get(n).unwrap_or("<missing>")))
        .collect()
}

/// Asserts `event` is the first `retrying` event after an injected
/// UNAVAILABLE under [`quick_retrying`]: the attempt, status, wait and
/// policy fields every retry has, then `more` (name, value), in order.
fn assert_first_retry(event: &support::Event, more: &[(&str, &str)]) {
    let mut expected = vec![
        ("attempt", "1"),
        ("rpc.grpc.status_code", "14"),
        ("rpc.grpc.status_message", "injected fault: unavailable"),
        ("wait_ms", "50"),
        ("policy", "DefaultPolicy"),
        ("reason", "policy"),
    ];
    expected.extend_from_slice(more);
    let names: Vec<&str> = expected.iter().map(|(name, _)| *name).collect();
    let want: Vec<String> = expected.iter().map(|(n, v)| format!("{n}={v}")).collect();
    assert_eq!(fields_of(event, &names), want);
}

fn quick_retrying() -> Retrying {
    Retrying::pyspark()
        .with_sleeper(RecordingSleeper::new())
        .with_seed(1)
}

/// A unary session call retried once: the `retrying` event names the RPC,
/// the session, the failed attempt, its status, the wait and the policy.
#[tokio::test]
async fn a_session_retry_names_the_call_attempt_status_wait_and_policy() {
    support::init();
    let server = TestServer::start().await.unwrap();
    server
        .faults()
        .push(Fault::unavailable().on(Rpc::Config).times(1));
    let spark = SparkSession::builder()
        .remote(format!("sc://{}", server.addr()))
        // Not about batch sizes: no Config call of the client's own.
        .result_batch_rows(ResultBatchRows::ServerDefault)
        .retrying(quick_retrying())
        .build()
        .unwrap();
    let (result, events) = support::capture(spark.config_set(&[("a.b", "1")])).await;
    result.unwrap();
    let retries: Vec<_> = events.iter().filter(|e| e.message == "retrying").collect();
    assert_eq!(retries.len(), 1, "{events:#?}");
    assert_first_retry(
        retries[0],
        &[
            ("rpc.system", "grpc"),
            ("rpc.service", "spark.connect.SparkConnectService"),
            ("rpc.method", "Config"),
            ("server.address", "127.0.0.1"),
            ("session_id", &spark.session_id()),
        ],
    );
}

/// A stream cut by UNAVAILABLE after two responses: the reattach's events
/// are in the execution's span (operation and session), the retry event
/// has the same fields as a unary one, and no field is named `message`.
#[tokio::test]
async fn a_reattach_names_the_operation_attempt_status_and_wait() {
    support::init();
    let server = TestServer::builder()
        .rows_per_batch(10)
        .start()
        .await
        .unwrap();
    let spark = SparkSession::builder()
        .remote(format!("sc://{}", server.addr()))
        .retrying(quick_retrying())
        .build()
        .unwrap();
    server
        .faults()
        .push(Fault::unavailable().on(Rpc::ExecutePlan).after_responses(2));
    let ((rows, operation_id), events) = support::capture(async {
        let mut stream = spark.sql("SELECT id FROM range(100)").await.unwrap();
        let mut rows = 0;
        while let Some(batch) = stream.next_batch().await {
            rows += batch.unwrap().num_rows();
        }
        (rows, stream.operation_id().to_owned())
    })
    .await;
    assert_eq!(rows, 100);
    let retries: Vec<_> = events.iter().filter(|e| e.message == "retrying").collect();
    assert!(!retries.is_empty(), "{events:#?}");
    assert_first_retry(
        retries[0],
        &[
            ("rpc.method", "ExecutePlan"),
            ("operation_id", &operation_id),
            ("session_id", &spark.session_id()),
        ],
    );
    let reattach = events
        .iter()
        .find(|e| e.message == "reattachable execution: sending ReattachExecute")
        .expect("a reattach event");
    assert!(
        reattach.has(&format!("operation_id={operation_id}")),
        "{reattach:?}"
    );
    for e in &events {
        assert!(
            !e.fields.iter().any(|f| f.starts_with("message=")),
            "a field named `message` clashes with the event's: {e:?}"
        );
    }
}

/// A closed port, three retries: one `[RETRIES_EXCEEDED]` warning with the
/// attempts, the time waited, the last status, the policy and the call.
#[tokio::test]
async fn a_give_up_names_the_call_attempts_time_and_last_status() {
    support::init();
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let policy = RetryPolicy::pyspark_builder()
        .max_retries(Some(3))
        .jitter_ms(0.0)
        .build()
        .unwrap();
    let spark = SparkSession::builder()
        .remote(format!("sc://127.0.0.1:{port}"))
        .retrying(quick_retrying().with_policies(vec![policy]))
        .build()
        .unwrap();
    let (result, events) = support::capture(spark.spark_version()).await;
    assert!(result.is_err());
    let warnings: Vec<_> = events
        .iter()
        .filter(|e| e.level == tracing::Level::WARN)
        .collect();
    assert_eq!(warnings.len(), 1, "{events:#?}");
    assert_eq!(warnings[0].message, RETRIES_EXCEEDED);
    assert_eq!(
        fields_of(
            warnings[0],
            &[
                "attempts",
                "waited_ms",
                "rpc.grpc.status_code",
                "policy",
                "reason",
                "rpc.method",
                "server.address",
                "server.port",
            ]
        ),
        [
            "attempts=4",
            "waited_ms=1050", // 50 + 200 + 800
            "rpc.grpc.status_code=14",
            "policy=custom",
            "reason=exhausted",
            "rpc.method=AnalyzePlan",
            "server.address=127.0.0.1",
            &format!("server.port={port}"),
        ]
    );
    let message = warnings[0].get("rpc.grpc.status_message").unwrap();
    assert!(message.contains("connect"), "{message}");
}

/// A token refused and refreshed, on a unary call and mid-stream: the
/// refusal is logged with the provider's name, and no event, field or span
/// of the crate carries a token.
#[tokio::test]
async fn a_refreshed_token_is_logged_by_provider_never_by_value() {
    use spark_connect_retry::token::Token;
    use spark_connect_retry::token::{AccessToken, provider_fn};
    use spark_connect_testkit::TokenRotation;

    support::init();
    let server = TestServer::builder()
        .token_rotation(TokenRotation::new("s3cr3t-").every_responses(8))
        .start()
        .await
        .unwrap();
    let issued = std::sync::Arc::new(AtomicU32::new(0));
    let counter = issued.clone();
    let provider = provider_fn("vault", move || {
        let n = counter.fetch_add(1, Ordering::SeqCst);
        async move { Ok(AccessToken::new(Token::new(format!("s3cr3t-{n}"))?)) }
    });
    let spark = SparkSession::builder()
        .remote(server.remote().replace("127.0.0.1", "localhost"))
        .token_provider(provider)
        .retrying(quick_retrying())
        .build()
        .unwrap();
    // 13 batches: the eighth response sent rotates the token mid-stream.
    let (result, events) = support::capture(async {
        spark.spark_version().await?;
        server.rotate_token();
        spark.spark_version().await?;
        spark
            .sql("SELECT id FROM range(100000)")
            .await?
            .collect()
            .await
    })
    .await;
    let batches = result.unwrap();
    assert_eq!(batches.iter().map(|b| b.num_rows()).sum::<usize>(), 100_000);
    assert_eq!(issued.load(Ordering::SeqCst), 3);
    let refused: Vec<_> = events
        .iter()
        .filter(|e| e.message.starts_with("token refused"))
        .collect();
    assert_eq!(refused.len(), 2, "{refused:#?}");
    assert!(refused.iter().all(|e| e.get("provider") == Some("vault")));
    for e in &events {
        let all = format!("{} {:?} {:?}", e.message, e.fields, e.span_fields);
        assert!(!all.contains("s3cr3t"), "a token in the logs: {all}");
    }
}
