//! Retries of unary calls: attempt headers, events, replayed bodies, budget, RetryInfo and pushback.

use super::*;

#[tokio::test]
async fn unavailable_n_times_then_ok_with_attempt_headers() {
    let server = Scripted::new(unavailable_n(3));
    let addr = serve(server.clone()).await;
    let sleeper = RecordingSleeper::new();
    let layer = RetryLayer::spark_connect(retrying(&sleeper));
    let stats = layer.stats_handle();
    let mut c = client(addr, layer);
    let res = c.config(config_req("s1")).await.unwrap().into_inner();
    assert_eq!(res.session_id, "s1");
    assert_eq!(server.config_calls(), 4);
    assert_eq!(sleeper.sleeps_ms(), vec![50, 200, 800]);
    assert_eq!(
        *server.previous_attempts.lock().unwrap(),
        vec![None, Some("1".into()), Some("2".into()), Some("3".into())]
    );
    let s = stats.snapshot();
    assert_eq!((s.calls, s.attempts, s.retries, s.exhausted), (1, 4, 3, 0));
}

/// One event per attempt, with OpenTelemetry's RPC field names: the
/// service and method, the attempt (from 1), the status code, the wait and the
/// reason: two policy retries, then the success that ends the call.
#[tokio::test]
async fn one_event_per_attempt() {
    for failures in [0, 2] {
        let server = Scripted::new(unavailable_n(failures));
        let addr = serve(server).await;
        let sleeper = RecordingSleeper::new();
        let mut c = client(addr, RetryLayer::spark_connect(retrying(&sleeper)));
        let events = captured(c.config(config_req("s"))).await;
        let m = "rpc.service=spark.connect.SparkConnectService rpc.method=Config";
        let mut want: Vec<String> = (0..failures)
            .map(|a| {
                let wait = [50, 200][a as usize];
                let a = a + 1;
                format!("{m} attempt={a} rpc.grpc.status_code=14 wait_ms={wait} reason=policy")
            })
            .collect();
        want.push(format!(
            "{m} attempt={} rpc.grpc.status_code=0 reason=done",
            failures + 1
        ));
        assert_eq!(events, want, "{failures} failure(s)");
    }
}

/// A client-streaming request whose body is not ready when the layer is
/// called (its second message is sent by another task) takes the general
/// path: read to the end, then replayed whole on the retry.
#[tokio::test]
async fn request_body_not_ready_at_call_is_buffered_and_replayed() {
    let server = Scripted::new(unavailable_n(0));
    let addr = serve(server.clone()).await;
    let sleeper = RecordingSleeper::new();
    let layer = RetryLayer::spark_connect(retrying(&sleeper));
    let stats = layer.stats_handle();
    let mut c = client(addr, layer);
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let msg = |id: &str| AddArtifactsRequest {
        session_id: id.to_owned(),
        ..Default::default()
    };
    tx.send(msg("a")).await.unwrap();
    // Runs only once this (current-thread) test task waits on the call, so
    // the second message is not there when the layer first polls the body.
    tokio::spawn(async move {
        tx.send(msg("b")).await.unwrap();
    });
    let res = c
        .add_artifacts(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(res.session_id, "a,b");
    assert_eq!(
        *server.artifact_streams.lock().unwrap(),
        vec![vec!["a".to_owned(), "b".to_owned()]; 2]
    );
    assert_eq!(sleeper.sleeps_ms(), vec![50]);
    let s = stats.snapshot();
    assert_eq!((s.calls, s.attempts, s.retries), (1, 2, 1));
}

/// Every attempt carries the request's metadata and extensions, as a layer
/// between the retry layer and the channel sees them: tonic's `GrpcMethod`
/// alone, or with another extension.
#[tokio::test]
async fn retries_carry_headers_and_extensions() {
    #[derive(Debug, Clone, PartialEq)]
    struct Tag(u32);
    type Seen = (Option<(String, String)>, Option<Tag>, Option<String>);
    for tagged in [false, true] {
        let server = Scripted::new(unavailable_n(2));
        let addr = serve(server.clone()).await;
        let sleeper = RecordingSleeper::new();
        let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let record = seen.clone();
        let svc = ServiceBuilder::new()
            .map_request(move |mut req: http::Request<tonic::body::Body>| {
                if tagged {
                    req.extensions_mut().insert(Tag(7));
                }
                req
            })
            .layer(RetryLayer::spark_connect(retrying(&sleeper)))
            .map_request(move |req: http::Request<tonic::body::Body>| {
                let m = req
                    .extensions()
                    .get::<tonic::GrpcMethod<'static>>()
                    .map(|m| (m.service().to_owned(), m.method().to_owned()));
                let tag = req.extensions().get::<Tag>().cloned();
                let k = req
                    .headers()
                    .get("x-k")
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned);
                record.lock().unwrap().push((m, tag, k));
                req
            })
            .service(channel(addr));
        let mut c = SparkConnectServiceClient::new(svc);
        let mut req = Request::new(config_req("s"));
        req.metadata_mut()
            .insert("x-k", MetadataValue::from_static("v"));
        c.config(req).await.unwrap();
        let want = (
            Some((
                "spark.connect.SparkConnectService".to_owned(),
                "Config".to_owned(),
            )),
            tagged.then_some(Tag(7)),
            Some("v".to_owned()),
        );
        assert_eq!(*seen.lock().unwrap(), vec![want; 3], "tagged: {tagged}");
        assert_eq!(server.config_calls(), 3);
    }
}

#[tokio::test]
async fn budget_exhausted_returns_last_status() {
    let server = Scripted::new(unavailable_n(u32::MAX));
    let addr = serve(server.clone()).await;
    let sleeper = RecordingSleeper::new();
    let policy = RetryPolicy::builder().max_retries(Some(2)).build().unwrap();
    let layer =
        RetryLayer::spark_connect(Retrying::new(vec![policy]).with_sleeper(sleeper.clone()));
    let stats = layer.stats_handle();
    let err = client(addr, layer)
        .config(config_req("s"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unavailable);
    assert_eq!(err.message(), "restarting");
    assert_eq!(server.config_calls(), 3);
    assert_eq!(stats.exhausted(), 1);
}

#[tokio::test]
async fn retry_info_is_a_floor() {
    let server = Scripted::new(|i| {
        ready(match i {
            0 => Err(Status::with_error_details(
                Code::Unavailable,
                "busy",
                ErrorDetails::with_retry_info(Some(Duration::from_millis(700))),
            )),
            // RetryInfo makes even ABORTED retryable, with its delay as the floor.
            1 => Err(Status::with_error_details(
                Code::Aborted,
                "busy",
                ErrorDetails::with_retry_info(Some(Duration::from_millis(30))),
            )),
            _ => Ok(()),
        })
    });
    let addr = serve(server.clone()).await;
    let sleeper = RecordingSleeper::new();
    let mut c = client(addr, RetryLayer::spark_connect(retrying(&sleeper)));
    c.config(config_req("s")).await.unwrap();
    // 700 (floor over 50), then the policy's 200 (floor 30 is lower).
    assert_eq!(sleeper.sleeps_ms(), vec![700, 200]);
    assert_eq!(server.config_calls(), 3);
}

#[tokio::test]
async fn pushback_positive_waits_exactly_and_restarts_backoff() {
    let server = Scripted::new(|i| {
        ready(match i {
            0 => Err(Status::unavailable("a")),
            1 => Err(with_pushback(Code::Unavailable, "1234")),
            2 => Err(Status::unavailable("b")),
            _ => Ok(()),
        })
    });
    let addr = serve(server.clone()).await;
    let sleeper = RecordingSleeper::new();
    let mut c = client(addr, RetryLayer::spark_connect(retrying(&sleeper)));
    c.config(config_req("s")).await.unwrap();
    // 50 (policy), 1234 (pushback, exact), then the backoff restarts at 50.
    assert_eq!(sleeper.sleeps_ms(), vec![50, 1234, 50]);
}

#[tokio::test]
async fn pushback_negative_or_garbled_stops() {
    for value in ["-1", "soon"] {
        let server = Scripted::new(move |_| ready(Err(with_pushback(Code::Unavailable, value))));
        let addr = serve(server.clone()).await;
        let sleeper = RecordingSleeper::new();
        let mut c = client(addr, RetryLayer::spark_connect(retrying(&sleeper)));
        let err = c.config(config_req("s")).await.unwrap_err();
        assert_eq!(err.code(), Code::Unavailable, "{value}");
        assert_eq!(server.config_calls(), 1, "{value}");
        assert!(sleeper.sleeps().is_empty(), "{value}");
    }
}
