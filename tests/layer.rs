//! The retry layer against a real tonic server on loopback.

mod support;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use spark_connect_retry::layer::{
    MethodConfig, ResponseKind, RetryLayer, RetryService, RetryThrottle, SparkConnectLayer,
};
use spark_connect_retry::policy::RetryPolicy;
use spark_connect_retry::proto::spark_connect_service_client::SparkConnectServiceClient;
use spark_connect_retry::proto::spark_connect_service_server::{
    SparkConnectService, SparkConnectServiceServer,
};
use spark_connect_retry::proto::*;
use spark_connect_retry::retrying::{BoxFuture, RecordingSleeper, Retrying, Sleeper};
use tokio::net::{TcpListener, TcpStream};
use tokio_stream::wrappers::TcpListenerStream;
use tonic::metadata::MetadataValue;
use tonic::transport::{Channel, Endpoint, Server};
use tonic::{Code, Request, Response, Status};
use tonic_types::{ErrorDetails, StatusExt};
use tower::ServiceBuilder;

const CONFIG: &str = "/spark.connect.SparkConnectService/Config";
const EXECUTE: &str = "/spark.connect.SparkConnectService/ExecutePlan";

type ConfigFn = dyn Fn(u32) -> BoxFuture<Result<(), Status>> + Send + Sync;
type ExecFn = dyn Fn(u32) -> Vec<Result<ExecutePlanResponse, Status>> + Send + Sync;

/// A scripted Spark Connect server: `config` and `execute_plan` follow the
/// script by call index; every other RPC is unimplemented.
#[derive(Clone)]
struct Scripted {
    config_calls: Arc<AtomicU32>,
    exec_calls: Arc<AtomicU32>,
    previous_attempts: Arc<Mutex<Vec<Option<String>>>>,
    timeouts: Arc<Mutex<Vec<Option<String>>>>,
    /// The session ids of every AddArtifacts message, per call; the first
    /// call fails UNAVAILABLE after reading its whole stream.
    artifact_streams: Arc<Mutex<Vec<Vec<String>>>>,
    config: Arc<ConfigFn>,
    exec: Arc<ExecFn>,
}

impl Scripted {
    fn new(config: impl Fn(u32) -> BoxFuture<Result<(), Status>> + Send + Sync + 'static) -> Self {
        Scripted {
            config_calls: Arc::default(),
            exec_calls: Arc::default(),
            previous_attempts: Arc::default(),
            timeouts: Arc::default(),
            artifact_streams: Arc::default(),
            config: Arc::new(config),
            exec: Arc::new(|_| vec![]),
        }
    }
    fn with_exec(
        mut self,
        f: impl Fn(u32) -> Vec<Result<ExecutePlanResponse, Status>> + Send + Sync + 'static,
    ) -> Self {
        self.exec = Arc::new(f);
        self
    }
    fn config_calls(&self) -> u32 {
        self.config_calls.load(Ordering::SeqCst)
    }
    fn record<T>(&self, req: &Request<T>) {
        let get = |k: &str| {
            req.metadata()
                .get(k)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        self.previous_attempts
            .lock()
            .unwrap()
            .push(get("grpc-previous-rpc-attempts"));
        self.timeouts.lock().unwrap().push(get("grpc-timeout"));
    }
}

fn ready(r: Result<(), Status>) -> BoxFuture<Result<(), Status>> {
    Box::pin(std::future::ready(r))
}

fn unavailable_n(n: u32) -> impl Fn(u32) -> BoxFuture<Result<(), Status>> {
    move |i| {
        ready(if i < n {
            Err(Status::unavailable("restarting"))
        } else {
            Ok(())
        })
    }
}

fn with_pushback(code: Code, value: &'static str) -> Status {
    let mut md = tonic::metadata::MetadataMap::new();
    md.insert("grpc-retry-pushback-ms", MetadataValue::from_static(value));
    Status::with_metadata(code, "pushback", md)
}

type ExecStream = tonic::codegen::BoxStream<ExecutePlanResponse>;

#[tonic::async_trait]
impl SparkConnectService for Scripted {
    async fn execute_plan(
        &self,
        req: Request<ExecutePlanRequest>,
    ) -> Result<Response<ExecStream>, Status> {
        self.record(&req);
        let i = self.exec_calls.fetch_add(1, Ordering::SeqCst);
        Ok(Response::new(Box::pin(tokio_stream::iter((self.exec)(i)))))
    }
    async fn config(
        &self,
        req: Request<ConfigRequest>,
    ) -> Result<Response<ConfigResponse>, Status> {
        self.record(&req);
        let i = self.config_calls.fetch_add(1, Ordering::SeqCst);
        (self.config)(i).await?;
        // Echo the session id, so that a large request proves byte-exact delivery.
        Ok(Response::new(ConfigResponse {
            session_id: req.into_inner().session_id,
            ..Default::default()
        }))
    }
    async fn add_artifacts(
        &self,
        req: Request<tonic::Streaming<AddArtifactsRequest>>,
    ) -> Result<Response<AddArtifactsResponse>, Status> {
        let mut stream = req.into_inner();
        let mut ids = vec![];
        while let Some(m) = stream.message().await? {
            ids.push(m.session_id);
        }
        let call = {
            let mut streams = self.artifact_streams.lock().unwrap();
            streams.push(ids.clone());
            streams.len()
        };
        if call == 1 {
            return Err(Status::unavailable("restarting"));
        }
        Ok(Response::new(AddArtifactsResponse {
            session_id: ids.join(","),
            ..Default::default()
        }))
    }
}

async fn serve_on(listener: TcpListener, svc: Scripted) {
    // Every test starts a server before any layer code runs: the global
    // subscriber is in place before any of the crate's callsites is reached.
    support::init();
    tokio::spawn(
        Server::builder()
            .add_service(SparkConnectServiceServer::new(svc))
            .serve_with_incoming(TcpListenerStream::new(listener)),
    );
}

async fn serve(svc: Scripted) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    serve_on(listener, svc).await;
    addr
}

fn channel(addr: SocketAddr) -> Channel {
    Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect_lazy()
}

type Client = SparkConnectServiceClient<RetryService<Channel>>;

fn client(addr: SocketAddr, layer: RetryLayer) -> Client {
    SparkConnectServiceClient::new(ServiceBuilder::new().layer(layer).service(channel(addr)))
}

fn retrying(sleeper: &RecordingSleeper) -> Retrying {
    Retrying::default()
        .with_sleeper(sleeper.clone())
        .with_seed(1)
}

fn config_req(session: &str) -> ConfigRequest {
    ConfigRequest {
        session_id: session.to_owned(),
        ..Default::default()
    }
}

/// The layer's events while `fut` runs on this thread, as `name=value` fields
/// (a current-thread test runtime runs the layer's futures here).
async fn captured<T, E: std::fmt::Debug>(
    fut: impl std::future::Future<Output = Result<T, E>>,
) -> Vec<String> {
    let (out, events) = support::capture(fut).await;
    out.expect("call");
    events
        .into_iter()
        .filter(|e| e.target.starts_with("tonic_retry::layer"))
        .map(|e| e.fields.join(" "))
        .collect()
}

#[tokio::test]
async fn unavailable_n_times_then_ok_with_attempt_headers() {
    let server = Scripted::new(unavailable_n(3));
    let addr = serve(server.clone()).await;
    let sleeper = RecordingSleeper::new();
    let layer = RetryLayer::spark_connect(retrying(&sleeper));
    let stats = layer.stats();
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
/// service and method, the attempt, the status code, the wait and the
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
                format!("{m} attempt={a} rpc.grpc.status_code=14 wait_ms={wait} reason=policy")
            })
            .collect();
        want.push(format!(
            "{m} attempt={failures} rpc.grpc.status_code=0 reason=done"
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
    let stats = layer.stats();
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
    let stats = layer.stats();
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

/// A TCP proxy that resets (SO_LINGER 0 + close) its first `resets`
/// connections after reading the client's first bytes, and forwards the rest.
async fn rst_proxy(upstream: SocketAddr, resets: u32) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let mut n = 0;
        while let Ok((mut down, _)) = listener.accept().await {
            n += 1;
            if n <= resets {
                use tokio::io::AsyncReadExt;
                let mut buf = [0u8; 1024];
                let _ = down.read(&mut buf).await;
                let _ = down.set_zero_linger();
                drop(down);
                continue;
            }
            tokio::spawn(async move {
                if let Ok(mut up) = TcpStream::connect(upstream).await {
                    let _ = tokio::io::copy_bidirectional(&mut down, &mut up).await;
                }
            });
        }
    });
    addr
}

#[tokio::test]
async fn connection_reset_is_retried() {
    let server = Scripted::new(unavailable_n(0));
    let upstream = serve(server.clone()).await;
    let proxy = rst_proxy(upstream, 1).await;
    let sleeper = RecordingSleeper::new();
    let layer = RetryLayer::spark_connect(retrying(&sleeper));
    let stats = layer.stats();
    let mut c = client(proxy, layer);
    let res = c
        .config(config_req("after-rst"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(res.session_id, "after-rst");
    assert_eq!(
        server.config_calls(),
        1,
        "the reset attempt never reached the server"
    );
    assert!(stats.retries() >= 1);
}

#[tokio::test]
async fn non_idempotent_not_replayed_after_server_saw_it() {
    let server = Scripted::new(unavailable_n(1));
    let addr = serve(server.clone()).await;
    let sleeper = RecordingSleeper::new();
    // RetryLayer::new: every method non-idempotent.
    let mut c = client(addr, RetryLayer::new(retrying(&sleeper)));
    let err = c.config(config_req("s")).await.unwrap_err();
    assert_eq!(err.code(), Code::Unavailable);
    assert_eq!(server.config_calls(), 1);
    assert!(sleeper.sleeps().is_empty());
}

#[tokio::test]
async fn non_idempotent_replayed_after_admission_rejection() {
    let server = Scripted::new(|i| {
        ready(match i {
            0 => Err(Status::with_error_details(
                Code::ResourceExhausted,
                "queue full",
                ErrorDetails::with_retry_info(Some(Duration::from_millis(300))),
            )),
            1 => Err(with_pushback(Code::Unavailable, "20")),
            _ => Ok(()),
        })
    });
    let addr = serve(server.clone()).await;
    let sleeper = RecordingSleeper::new();
    let mut c = client(addr, RetryLayer::new(retrying(&sleeper)));
    c.config(config_req("s")).await.unwrap();
    assert_eq!(server.config_calls(), 3);
    assert_eq!(sleeper.sleeps_ms(), vec![300, 20]);
}

/// A sleeper that runs a hook (once) before returning: here, it starts the
/// server, so the retry finds it.
#[derive(Clone)]
struct HookSleeper {
    rec: RecordingSleeper,
    #[allow(clippy::type_complexity)]
    hook: Arc<Mutex<Option<BoxFuture<()>>>>,
}

impl std::fmt::Debug for HookSleeper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HookSleeper")
    }
}

impl Sleeper for HookSleeper {
    fn sleep(&self, d: Duration) -> BoxFuture<()> {
        let rec = self.rec.sleep(d);
        let hook = self.hook.lock().unwrap().take();
        Box::pin(async move {
            rec.await;
            if let Some(h) = hook {
                h.await;
            }
        })
    }
}

#[tokio::test]
async fn non_idempotent_replayed_after_connection_refused() {
    // Reserve a port, close it: the first attempt is refused.
    let addr = {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        l.local_addr().unwrap()
    };
    let server = Scripted::new(unavailable_n(0));
    let s2 = server.clone();
    let rec = RecordingSleeper::new();
    let sleeper = HookSleeper {
        rec: rec.clone(),
        hook: Arc::new(Mutex::new(Some(Box::pin(async move {
            let l = TcpListener::bind(addr).await.unwrap();
            serve_on(l, s2).await;
        })))),
    };
    let layer = RetryLayer::new(Retrying::default().with_sleeper(sleeper).with_seed(1));
    let mut c = client(addr, layer);
    let res = c.config(config_req("late")).await.unwrap().into_inner();
    assert_eq!(res.session_id, "late");
    assert_eq!(server.config_calls(), 1);
    assert_eq!(rec.sleeps_ms(), vec![50]);
}

fn slow(first_n: u32, d: Duration) -> impl Fn(u32) -> BoxFuture<Result<(), Status>> {
    move |i| {
        Box::pin(async move {
            if i < first_n {
                tokio::time::sleep(d).await;
            }
            Ok(())
        })
    }
}

#[tokio::test]
async fn per_attempt_timeout_retries_slow_attempt() {
    let server = Scripted::new(slow(1, Duration::from_secs(5)));
    let addr = serve(server.clone()).await;
    let sleeper = RecordingSleeper::new();
    let layer = RetryLayer::spark_connect(retrying(&sleeper))
        .per_attempt_timeout(Duration::from_millis(100))
        .default_deadline(Duration::from_secs(10));
    let started = std::time::Instant::now();
    let mut c = client(addr, layer);
    c.config(config_req("s")).await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(3));
    assert_eq!(server.config_calls(), 2);
    // Each attempt's grpc-timeout is min(per-attempt, remaining) = 100 ms.
    for t in server.timeouts.lock().unwrap().iter() {
        let t = t.as_deref().unwrap();
        let us: u64 = t.trim_end_matches('u').parse().unwrap();
        assert!(us <= 100_000 && us > 50_000, "{t}");
    }
}

#[tokio::test]
async fn overall_deadline_stops_the_loop() {
    let server = Scripted::new(slow(u32::MAX, Duration::from_secs(5)));
    let addr = serve(server.clone()).await;
    // Waits of 1 ms, so the deadline (not the wait check) ends the loop.
    let policy = RetryPolicy::builder()
        .initial_backoff(Duration::from_millis(1))
        .backoff_multiplier(1.0)
        .build()
        .unwrap();
    let sleeper = RecordingSleeper::new();
    let layer =
        RetryLayer::spark_connect(Retrying::new(vec![policy]).with_sleeper(sleeper.clone()))
            .per_attempt_timeout(Duration::from_millis(100))
            .default_deadline(Duration::from_millis(350));
    let started = std::time::Instant::now();
    let err = client(addr, layer)
        .config(config_req("s"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::DeadlineExceeded, "{err:?}");
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(340) && took < Duration::from_secs(2),
        "{took:?}"
    );
    // Attempts at 0, 100, 200 ms (100 ms each) and 300 ms (the 50 ms left).
    let calls = server.config_calls();
    assert!((3..=4).contains(&calls), "{calls}");
    assert!(err.message().contains("deadline of 350 ms"), "{err:?}");
}

#[tokio::test]
async fn request_grpc_timeout_is_the_overall_deadline() {
    let server = Scripted::new(slow(u32::MAX, Duration::from_secs(5)));
    let addr = serve(server.clone()).await;
    let sleeper = RecordingSleeper::new();
    let mut c = client(addr, RetryLayer::spark_connect(retrying(&sleeper)));
    let mut req = Request::new(config_req("s"));
    req.set_timeout(Duration::from_millis(150));
    let started = std::time::Instant::now();
    let err = c.config(req).await.unwrap_err();
    assert_eq!(err.code(), Code::DeadlineExceeded, "{err:?}");
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_eq!(server.config_calls(), 1);
}

#[tokio::test]
async fn no_attempt_scheduled_past_the_deadline() {
    let server = Scripted::new(|_| {
        ready(Err(Status::with_error_details(
            Code::Unavailable,
            "come back later",
            ErrorDetails::with_retry_info(Some(Duration::from_secs(10))),
        )))
    });
    let addr = serve(server.clone()).await;
    let sleeper = RecordingSleeper::new();
    let layer =
        RetryLayer::spark_connect(retrying(&sleeper)).default_deadline(Duration::from_secs(1));
    let err = client(addr, layer)
        .config(config_req("s"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unavailable);
    assert_eq!(err.message(), "come back later");
    assert_eq!(server.config_calls(), 1);
    assert!(sleeper.sleeps().is_empty());
}

#[tokio::test]
async fn throttling_under_a_burst() {
    async fn burst(throttle: bool) -> (u32, u64) {
        let server = Scripted::new(unavailable_n(u32::MAX));
        let addr = serve(server.clone()).await;
        let policy = RetryPolicy::builder().max_retries(Some(3)).build().unwrap();
        let mut layer = RetryLayer::spark_connect(
            Retrying::new(vec![policy]).with_sleeper(RecordingSleeper::new()),
        );
        if throttle {
            layer = layer.throttle(RetryThrottle::new(10, 0.1).unwrap());
        }
        let stats = layer.stats();
        let c = client(addr, layer);
        let calls: Vec<_> = (0..40)
            .map(|i| {
                let mut c = c.clone();
                tokio::spawn(async move { c.config(config_req(&i.to_string())).await })
            })
            .collect();
        for h in calls {
            assert_eq!(h.await.unwrap().unwrap_err().code(), Code::Unavailable);
        }
        (server.config_calls(), stats.throttled())
    }
    let (unthrottled_calls, none) = burst(false).await;
    assert_eq!((unthrottled_calls, none), (160, 0));
    let (calls, throttled) = burst(true).await;
    assert!(throttled > 0);
    assert!(calls < 60, "{calls}");
}

#[tokio::test]
async fn body_over_the_cap_passes_through() {
    let server = Scripted::new(unavailable_n(1));
    let addr = serve(server.clone()).await;
    let sleeper = RecordingSleeper::new();
    let layer = RetryLayer::spark_connect(retrying(&sleeper)).max_request_buffer(1024);
    let stats = layer.stats();
    let mut c = client(addr, layer);
    let big: String = (0..200_000)
        .map(|i| char::from(b'a' + (i % 26) as u8))
        .collect();
    // Over the cap: sent once, its UNAVAILABLE not retried.
    let err = c.config(config_req(&big)).await.unwrap_err();
    assert_eq!(err.code(), Code::Unavailable);
    assert_eq!(server.config_calls(), 1);
    // The next one succeeds, byte for byte.
    let res = c.config(config_req(&big)).await.unwrap().into_inner();
    assert_eq!(res.session_id, big);
    assert_eq!(stats.passthrough_too_large(), 2);
    assert_eq!(stats.retries(), 0);
    // A small one is still retried.
    c.config(config_req("small")).await.unwrap();
}

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
    let stats = layer.stats();
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
