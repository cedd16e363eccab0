//! Tokens that expire, against the embedded server's token rotation: a
//! long query across rotations resumes exactly with one fresh token per
//! rotation and never re-executes; a unary call gets one fresh token; a
//! provider whose tokens the server keeps refusing, or that fails, ends in
//! a typed error naming it, never a loop, and never showing a token.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use arrow_array::{Array, Int64Array};
use spark_connect_retry::session::{ResultBatchRows, SparkError, SparkSession};
use spark_connect_retry::token::Token;
use spark_connect_retry::token::{AccessToken, TokenError, TokenFuture, TokenProvider};
use spark_connect_testkit::{Rpc, TestServer, TokenRotation};
use tonic_retry::retrying::RecordingSleeper;

use crate::support::policies::recorded;

const PREFIX: &str = "tok-sec-";

/// Hands out the server's rotation in order: its `i`-th call returns
/// token `i`, so it mirrors a server that rotated `i` times.
struct Mirror {
    rotation: TokenRotation,
    calls: AtomicU64,
    /// Returns this fixed token instead (one the server never takes).
    bad: Option<&'static str>,
    lifetime: Option<Duration>,
}

impl Mirror {
    fn new() -> Arc<Self> {
        Arc::new(Mirror {
            rotation: TokenRotation::new(PREFIX),
            calls: AtomicU64::new(0),
            bad: None,
            lifetime: None,
        })
    }
    fn calls(&self) -> u64 {
        self.calls.load(Ordering::SeqCst)
    }
}

impl TokenProvider for Mirror {
    fn token(&self) -> TokenFuture<'_> {
        Box::pin(async move {
            let i = self.calls.fetch_add(1, Ordering::SeqCst);
            let secret = match self.bad {
                Some(bad) => format!("{bad}{i}"),
                None => self.rotation.token(i),
            };
            let token = AccessToken::new(Token::new(secret)?);
            Ok(match self.lifetime {
                Some(l) => token.expires_in(l),
                None => token,
            })
        })
    }
    fn name(&self) -> &str {
        "mirror"
    }
}

/// Rotated only by the test (`rotate_token`).
async fn server() -> TestServer {
    TestServer::builder()
        .token_rotation(TokenRotation::new(PREFIX))
        .start()
        .await
        .unwrap()
}

/// `sc://localhost:PORT` (a token goes over plaintext to localhost only).
fn local(server: &TestServer) -> String {
    server.remote().replace("127.0.0.1", "localhost")
}

fn session(server: &TestServer, provider: Arc<Mirror>, sleeper: &RecordingSleeper) -> SparkSession {
    SparkSession::builder()
        .remote(local(server))
        // Not about batch sizes: no Config call of the client's own.
        .result_batch_rows(ResultBatchRows::ServerDefault)
        .token_provider(provider)
        .retrying(recorded(sleeper, 1))
        .build()
        .unwrap()
}

/// Neither the error's text nor its Debug shows a token of the scheme.
fn assert_no_token(text: &str) {
    assert!(!text.contains(PREFIX), "a token leaked: {text}");
}

#[tokio::test]
async fn a_long_query_across_three_rotations_is_exact_with_three_refreshes() {
    const ROWS: i64 = 3_000_000;
    // 8192-row batches: 367 of them, plus the schema and the end. Each token
    // is good for 100 result responses, so the stream is refused three
    // times, wherever the client is reading.
    let server = TestServer::builder()
        .token_rotation(TokenRotation::new(PREFIX).every_responses(100))
        .start()
        .await
        .unwrap();
    let provider = Mirror::new();
    let sleeper = RecordingSleeper::new();
    let spark = session(&server, provider.clone(), &sleeper);
    let mut stream = spark
        .sql(&format!("SELECT id FROM range({ROWS})"))
        .await
        .unwrap();
    let mut next = 0i64;
    while let Some(batch) = stream.next_batch().await {
        let batch = batch.unwrap();
        let ids = batch
            .column(0)
            .as_any()
            .downcast_ref::<Int64Array>()
            .unwrap();
        assert_eq!(ids.null_count(), 0);
        for id in ids.values().iter() {
            assert_eq!(*id, next, "every row once, in order");
            next += 1;
        }
    }
    assert_eq!(next, ROWS);
    let stats = stream.stats();
    assert_eq!(stats.token_refreshes, 3, "{stats:?}");
    assert_eq!(stats.re_executes, 0, "{stats:?}");
    assert_eq!(stats.reattaches, 3, "one reattach per refusal: {stats:?}");
    assert_eq!(server.calls().execute, 1, "never re-executed");
    assert_eq!(server.calls().reattach, 3);
    assert_eq!(provider.calls(), 4, "the first token and three fresh ones");
    assert_eq!(server.current_token(), Some(3));
    assert!(
        sleeper.sleeps().is_empty(),
        "no backoff for a refused token"
    );
}

#[tokio::test]
async fn a_unary_call_refused_gets_one_fresh_token() {
    let server = server().await;
    let provider = Mirror::new();
    let sleeper = RecordingSleeper::new();
    let spark = session(&server, provider.clone(), &sleeper);
    assert_eq!(spark.spark_version().await.unwrap(), "4.3.0");
    server.rotate_token();
    assert_eq!(spark.spark_version().await.unwrap(), "4.3.0");
    assert_eq!(provider.calls(), 2);
    assert_eq!(server.calls().analyze, 3, "one refused, sent again once");
    assert_eq!(server.token_refusals(), 1);
    assert!(sleeper.sleeps().is_empty());
    let md = server.last_metadata(Rpc::AnalyzePlan).unwrap();
    assert_eq!(
        md.get("authorization").unwrap(),
        &format!("Bearer {PREFIX}1")
    );
}

#[tokio::test]
async fn concurrent_calls_refused_together_share_one_fresh_token() {
    let server = server().await;
    let provider = Mirror::new();
    let spark = session(&server, provider.clone(), &RecordingSleeper::new());
    spark.spark_version().await.unwrap();
    server.rotate_token();
    let calls: Vec<_> = (0..8)
        .map(|_| {
            let spark = spark.clone();
            tokio::spawn(async move { spark.spark_version().await })
        })
        .collect();
    for call in calls {
        assert_eq!(call.await.unwrap().unwrap(), "4.3.0");
    }
    assert_eq!(provider.calls(), 2, "one fresh token for all of them");
    assert_eq!(server.current_token(), Some(1));
}

#[tokio::test(start_paused = true)]
async fn a_token_is_asked_for_again_before_it_expires() {
    let server = TestServer::builder()
        .token_rotation(TokenRotation::new(PREFIX).every(Duration::from_secs(100)))
        .start()
        .await
        .unwrap();
    let provider = Arc::new(Mirror {
        lifetime: Some(Duration::from_secs(100)),
        ..Arc::into_inner(Mirror::new()).unwrap()
    });
    let spark = session(&server, provider.clone(), &RecordingSleeper::new());
    spark.spark_version().await.unwrap();
    // Past the server's rotation, and past the cache's early refresh.
    tokio::time::advance(Duration::from_secs(101)).await;
    spark.spark_version().await.unwrap();
    assert_eq!(provider.calls(), 2);
    assert_eq!(
        server.token_refusals(),
        0,
        "refreshed before it was refused"
    );
}

#[tokio::test]
async fn a_provider_of_bad_tokens_ends_after_one_refresh_naming_it() {
    let server = server().await;
    let provider = Arc::new(Mirror {
        bad: Some("tok-sec-bad-"),
        ..Arc::into_inner(Mirror::new()).unwrap()
    });
    let sleeper = RecordingSleeper::new();
    let spark = session(&server, provider.clone(), &sleeper);
    let err = spark.spark_version().await.unwrap_err();
    let SparkError::Token(TokenError::Refused {
        provider: name,
        refreshes,
        ..
    }) = &err
    else {
        panic!("a refusal: {err:?}")
    };
    assert_eq!((name.as_str(), *refreshes), ("mirror", 1));
    let text = err.to_string();
    assert!(
        text.contains("`mirror`") && text.contains("AnalyzePlan to localhost:"),
        "{text}"
    );
    assert_no_token(&text);
    assert_no_token(&format!("{err:?}"));
    let status = std::error::Error::source(&err)
        .and_then(|s| s.downcast_ref::<tonic::Status>())
        .expect("the server's last status is the source");
    assert_eq!(status.code(), tonic::Code::Unauthenticated);
    assert_eq!(provider.calls(), 2, "one fresh token, not a loop");
    assert_eq!(server.calls().analyze, 2);

    // A query: the same bound, the same error.
    let err = spark.sql("SELECT 1").await.unwrap_err();
    assert!(
        matches!(err, SparkError::Token(TokenError::Refused { .. })),
        "{err:?}"
    );
    assert!(err.to_string().contains("ExecutePlan"), "{err}");
    assert_no_token(&format!("{err} {err:?}"));
    assert!(provider.calls() <= 4);
}

struct Failing;

impl TokenProvider for Failing {
    fn token(&self) -> TokenFuture<'_> {
        Box::pin(async { Err("identity service answered 503".into()) })
    }
    fn name(&self) -> &str {
        "identity-service"
    }
}

#[tokio::test]
async fn a_provider_that_fails_is_a_typed_error_and_nothing_is_sent() {
    let server = server().await;
    let spark = SparkSession::builder()
        .remote(local(&server))
        .token_provider(Failing)
        .retrying(recorded(&RecordingSleeper::new(), 1))
        .build()
        .unwrap();
    let err = spark.spark_version().await.unwrap_err();
    let SparkError::Token(e @ TokenError::ProviderFailed { .. }) = &err else {
        panic!("a provider failure: {err:?}")
    };
    assert_eq!(e.provider(), "identity-service");
    assert!(
        err.to_string().contains("identity service answered 503"),
        "{err}"
    );
    assert_eq!(server.calls().analyze, 0, "nothing sent without a token");
}

#[tokio::test]
async fn debug_never_shows_the_token() {
    let server = server().await;
    let provider = Mirror::new();
    let builder = SparkSession::builder()
        .remote(local(&server))
        .token_provider(provider.clone());
    assert_no_token(&format!("{builder:?}"));
    assert!(format!("{builder:?}").contains("mirror"));
    let spark = builder.build().unwrap();
    let mut stream = spark.sql("SELECT id FROM range(10)").await.unwrap();
    assert_no_token(&format!("{spark:?} {stream:?}"));
    while stream.next_batch().await.transpose().unwrap().is_some() {}
    assert_no_token(&format!("{spark:?}"));
    assert_eq!(provider.calls(), 1);
}

#[tokio::test]
async fn the_connection_strings_token_still_works_and_is_never_refreshed() {
    let server = TestServer::builder()
        .token_rotation(TokenRotation::new(PREFIX))
        .start()
        .await
        .unwrap();
    let url = format!("{}/;token={PREFIX}0", local(&server));
    let sleeper = RecordingSleeper::new();
    let spark = SparkSession::builder()
        .remote(url)
        .retrying(recorded(&sleeper, 1))
        .build()
        .unwrap();
    assert_eq!(spark.spark_version().await.unwrap(), "4.3.0");
    server.rotate_token();
    let err = spark.spark_version().await.unwrap_err();
    // The server's own error, as before providers: no refresh was possible.
    assert_eq!(
        err.server_error().map(|e| e.code()),
        Some(tonic::Code::Unauthenticated),
        "{err:?}"
    );
    assert_eq!(server.calls().analyze, 2, "sent once, not refreshed");
    assert_no_token(&format!("{err} {err:?} {spark:?}"));
}
