//! Streams and response kinds, non-retryable codes, the A6 service config, huge deadlines.

use super::*;

fn batch(id: &str) -> ExecutePlanResponse {
    ExecutePlanResponse {
        response_id: id.to_owned(),
        ..Default::default()
    }
}

async fn streaming_case(kind: ResponseKind) {
    let server = Scripted::new(unavailable_n(0)).with_exec(|i| match i {
        0 => vec![Err(Status::unavailable("not yet"))],
        _ => vec![
            Ok(batch("r1")),
            Ok(batch("r2")),
            Err(Status::unavailable("mid-stream")),
        ],
    });
    let addr = serve(server.clone()).await;
    let sleeper = RecordingSleeper::new();
    let layer = RetryLayer::spark_connect(retrying(&sleeper))
        .method(EXECUTE, MethodConfig::idempotent().with_kind(kind));
    let mut c = client(addr, layer);
    let mut stream = c
        .execute_plan(ExecutePlanRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(stream.message().await.unwrap().unwrap().response_id, "r1");
    assert_eq!(stream.message().await.unwrap().unwrap().response_id, "r2");
    let err = stream.message().await.unwrap_err();
    assert_eq!(err.code(), Code::Unavailable);
    assert_eq!(err.message(), "mid-stream");
    // Retried before the first message, not after.
    assert_eq!(server.exec_calls.load(Ordering::SeqCst), 2);
    assert_eq!(sleeper.sleeps_ms(), vec![50]);
}

#[tokio::test]
async fn server_stream_retried_before_first_message_only() {
    streaming_case(ResponseKind::ServerStreaming).await;
}

#[tokio::test]
async fn auto_kind_detects_a_stream() {
    streaming_case(ResponseKind::Auto).await;
}

#[tokio::test]
async fn auto_kind_detects_unary_and_spark_preset_keeps_execute_plan_safe() {
    // Config under the default Auto kind, marked idempotent: retried.
    let server = Scripted::new(unavailable_n(2)).with_exec(|_| vec![Err(Status::unavailable("x"))]);
    let addr = serve(server.clone()).await;
    let sleeper = RecordingSleeper::new();
    let layer = RetryLayer::new(retrying(&sleeper)).method(CONFIG, MethodConfig::idempotent());
    let mut c = client(addr, layer);
    c.config(config_req("s")).await.unwrap();
    assert_eq!(server.config_calls(), 3);
    // ExecutePlan under the Spark preset is non-idempotent: a server
    // UNAVAILABLE (it saw the request) is not replayed.
    let mut c = client(addr, RetryLayer::spark_connect(retrying(&sleeper)));
    let mut s = c
        .execute_plan(ExecutePlanRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(s.message().await.unwrap_err().code(), Code::Unavailable);
    assert_eq!(server.exec_calls.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn unimplemented_is_not_retried_and_tracing_runs() {
    let server = Scripted::new(unavailable_n(1));
    let addr = serve(server).await;
    let sleeper = RecordingSleeper::new();
    let layer = RetryLayer::spark_connect(retrying(&sleeper));
    let stats = layer.stats_handle();
    let mut c = client(addr, layer);
    let err = c
        .analyze_plan(AnalyzePlanRequest::default())
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unimplemented);
    c.config(config_req("s")).await.unwrap();
    assert_eq!(stats.retries(), 1);
    assert!(sleeper.sleeps_ms() == vec![50]);
}

/// The generic constructor follows the service config (gRFC A6): only the
/// codes it names, at most `maxAttempts` attempts, A6's backoff (±20 %),
/// and nothing for the methods it does not name.
#[tokio::test]
async fn service_config_layer_follows_a6() {
    let config = spark_connect_retry::layer::ServiceConfig::from_json(
        r#"{"methodConfig": [{
            "name": [{"service": "spark.connect.SparkConnectService", "method": "Config"}],
            "retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.1s", "maxBackoff": "1s",
                            "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}
        }]}"#,
    )
    .unwrap();
    // One Config call against `server`: its status, the server's calls, the waits.
    let run = |server: Scripted| {
        let config = &config;
        async move {
            let addr = serve(server.clone()).await;
            let sleeper = RecordingSleeper::new();
            let layer = RetryLayer::from_service_config(config, retrying(&sleeper));
            let err = client(addr, layer)
                .config(config_req("s"))
                .await
                .unwrap_err();
            (err.code(), server.config_calls(), sleeper.sleeps_ms())
        }
    };
    // Listed code: three attempts in all, then the status.
    let (code, calls, waits) = run(Scripted::new(unavailable_n(u32::MAX))).await;
    assert_eq!((code, calls, waits.len()), (Code::Unavailable, 3, 2));
    assert!(
        (80..120).contains(&waits[0]) && (160..240).contains(&waits[1]),
        "{waits:?}"
    );
    // A code the config does not list: one attempt.
    let aborted = Scripted::new(|_| ready(Err(Status::aborted("conflict"))));
    assert_eq!(run(aborted).await, (Code::Aborted, 1, vec![]));
    // A method the config does not name: not retried.
    let server = Scripted::new(unavailable_n(u32::MAX));
    let addr = serve(server).await;
    let sleeper = RecordingSleeper::new();
    let layer = RetryLayer::from_service_config(&config, retrying(&sleeper));
    let err = client(addr, layer)
        .analyze_plan(AnalyzePlanRequest::default())
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unimplemented);
    assert!(sleeper.sleeps().is_empty());
}

/// A deadline or attempt timeout too large for the clock means none: no
/// overflow, and the retries happen as without it.
#[tokio::test]
async fn huge_deadlines_do_not_overflow() {
    let server = Scripted::new(unavailable_n(2));
    let addr = serve(server.clone()).await;
    let sleeper = RecordingSleeper::new();
    let layer = RetryLayer::spark_connect(retrying(&sleeper))
        .default_deadline(Duration::MAX)
        .per_attempt_timeout(Duration::MAX);
    let mut c = client(addr, layer);
    let mut req = Request::new(config_req("s"));
    req.set_timeout(Duration::from_secs(86_400));
    c.config(req).await.unwrap();
    assert_eq!(server.config_calls(), 3);
    assert_eq!(sleeper.sleeps_ms(), vec![50, 200]);
}
