//! Hedged calls (gRFC A6 `hedgingPolicy`) against a real tonic server on
//! loopback. The server's handlers wait on explicit signals or forever, and
//! a drop guard counts each handler the client cancelled; waits between
//! hedges run on a virtual clock, so no test depends on timing.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::future::BoxFuture;
use futures_util::{Stream, StreamExt};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_stream::wrappers::TcpListenerStream;
use tonic::metadata::MetadataValue;
use tonic::transport::{Channel, Endpoint, Server};
use tonic::{Code, Request, Response, Status};
use tonic_retry::layer::{
    HedgingPolicy, RetryLayer, RetryService, RetryStats, RetryStatsHandle, RetryThrottle,
};
use tonic_retry::retrying::{ManualClock, Retrying, Sleeper};
use tonic_retry_echo::{Echo, EchoClient, EchoReply, EchoRequest, EchoServer};
use tower::ServiceBuilder;

const SAY: &str = "/echo.Echo/Say";
const REPEAT: &str = "/echo.Echo/Repeat";
/// A hedging delay no test reaches: a hedge is sent only by the rule tested.
const NEVER: Duration = Duration::from_secs(3600);
/// A guard against a hang (a failing test), not a timed assertion.
const HANG: Duration = Duration::from_secs(20);
/// The request every `Say` call sends, replayed to each hedge.
const BODY: &str = "a request body replayed to every hedge";

type Script = dyn Fn(u32) -> BoxFuture<'static, Result<(), Status>> + Send + Sync;

/// A server whose handlers follow `script` by attempt number (the
/// `grpc-previous-rpc-attempts` header), and count arrivals and
/// cancellations.
#[derive(Clone)]
struct Server_ {
    script: Arc<Script>,
    arrivals: Arc<Mutex<Vec<u32>>>,
    /// The message of every `Say` request, as the server read it.
    bodies: Arc<Mutex<Vec<String>>>,
    cancelled: Arc<Semaphore>,
    cancelled_count: Arc<AtomicU32>,
}

/// Counts the handler as cancelled if dropped before it finished.
struct Guard {
    server: Server_,
    done: bool,
}

impl Drop for Guard {
    fn drop(&mut self) {
        if !self.done {
            self.server.cancelled_count.fetch_add(1, Ordering::SeqCst);
            self.server.cancelled.add_permits(1);
        }
    }
}

impl Server_ {
    fn new(
        script: impl Fn(u32) -> BoxFuture<'static, Result<(), Status>> + Send + Sync + 'static,
    ) -> Self {
        Server_ {
            script: Arc::new(script),
            arrivals: Arc::default(),
            bodies: Arc::default(),
            cancelled: Arc::new(Semaphore::new(0)),
            cancelled_count: Arc::default(),
        }
    }
    fn arrive<T>(&self, req: &Request<T>) -> (u32, Guard) {
        let k = req
            .metadata()
            .get("grpc-previous-rpc-attempts")
            .and_then(|v| v.to_str().ok()?.parse().ok())
            .unwrap_or(0);
        self.arrivals.lock().unwrap().push(k);
        let guard = Guard {
            server: self.clone(),
            done: false,
        };
        (k, guard)
    }
    fn arrivals(&self) -> Vec<u32> {
        let mut a = self.arrivals.lock().unwrap().clone();
        a.sort_unstable();
        a
    }
    /// Wait until `n` handlers were cancelled; the count must then be `n`.
    async fn saw_cancelled(&self, n: u32) {
        let permits = tokio::time::timeout(HANG, self.cancelled.acquire_many(n))
            .await
            .expect("the server never saw the cancellations")
            .unwrap();
        permits.forget();
        assert_eq!(self.cancelled_count.load(Ordering::SeqCst), n);
    }
}

fn ready(r: Result<(), Status>) -> BoxFuture<'static, Result<(), Status>> {
    Box::pin(std::future::ready(r))
}

fn forever() -> BoxFuture<'static, Result<(), Status>> {
    Box::pin(std::future::pending())
}

fn with_pushback(value: &'static str) -> Status {
    let mut md = tonic::metadata::MetadataMap::new();
    md.insert("grpc-retry-pushback-ms", MetadataValue::from_static(value));
    Status::with_metadata(Code::Unavailable, "pushback", md)
}

type Stream_ = Pin<Box<dyn Stream<Item = Result<EchoReply, Status>> + Send>>;

#[tonic::async_trait]
impl Echo for Server_ {
    async fn say(&self, req: Request<EchoRequest>) -> Result<Response<EchoReply>, Status> {
        let (k, mut guard) = self.arrive(&req);
        let body = req.get_ref().message.clone();
        self.bodies.lock().unwrap().push(body);
        let r = (self.script)(k).await;
        guard.done = true;
        r?;
        Ok(Response::new(EchoReply {
            message: format!("attempt {k}"),
        }))
    }

    type RepeatStream = Stream_;

    /// A stream: the script decides before its first message, then a second.
    async fn repeat(&self, req: Request<EchoRequest>) -> Result<Response<Stream_>, Status> {
        let (k, guard) = self.arrive(&req);
        let script = self.script.clone();
        let msg = move |i: u32| EchoReply {
            message: format!("{k}.{i}"),
        };
        let first = futures_util::stream::once(async move {
            let mut guard = guard;
            let r = script(k).await;
            guard.done = true;
            r.map(|()| msg(0))
        });
        let rest = futures_util::stream::iter([Ok(msg(1))]);
        Ok(Response::new(Box::pin(first.chain(rest))))
    }
}

async fn serve(svc: Server_) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(
        Server::builder()
            .add_service(EchoServer::new(svc))
            .serve_with_incoming(TcpListenerStream::new(listener)),
    );
    addr
}

/// Virtual time: a wait advances the manual clock at once, except a wait
/// of [`NEVER`] or more, which never ends. Every wait is recorded.
#[derive(Debug, Clone, Default)]
struct VirtualSleeper {
    clock: ManualClock,
    waits: Arc<Mutex<Vec<Duration>>>,
}

impl Sleeper for VirtualSleeper {
    fn sleep(&self, d: Duration) -> BoxFuture<'static, ()> {
        self.waits.lock().unwrap().push(d);
        if d >= NEVER {
            return Box::pin(std::future::pending());
        }
        self.clock.advance(d);
        Box::pin(std::future::ready(()))
    }
}

impl VirtualSleeper {
    fn waits(&self) -> Vec<Duration> {
        self.waits.lock().unwrap().clone()
    }
    fn retrying(&self) -> Retrying {
        Retrying::default()
            .with_sleeper(self.clone())
            .with_clock(self.clock.clone())
    }
}

type Client = EchoClient<RetryService<Channel>>;

fn client(addr: SocketAddr, layer: RetryLayer) -> Client {
    crate::support::capture::init();
    let channel = Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect_lazy();
    EchoClient::new(ServiceBuilder::new().layer(layer).service(channel))
}

fn policy(max: u32, delay: Duration) -> HedgingPolicy {
    HedgingPolicy::new(max, delay)
        .unwrap()
        .non_fatal([Code::Unavailable])
}

/// A layer with `Say` and `Repeat` hedged.
fn layer(sleeper: &VirtualSleeper, policy: HedgingPolicy) -> RetryLayer {
    RetryLayer::new(sleeper.retrying())
        .hedge(SAY, policy.clone())
        .hedge(REPEAT, policy)
}

async fn say(client: &mut Client) -> Result<String, Status> {
    let req = EchoRequest {
        message: BODY.to_owned(),
        count: 0,
    };
    Ok(client.say(req).await?.into_inner().message)
}

/// A scripted server, a virtual sleeper, and a client whose layer hedges
/// `Say` and `Repeat` with `policy`.
struct Setup {
    server: Server_,
    sleeper: VirtualSleeper,
    stats: RetryStatsHandle,
    client: Client,
}

async fn setup(
    script: impl Fn(u32) -> BoxFuture<'static, Result<(), Status>> + Send + Sync + 'static,
    policy: HedgingPolicy,
) -> Setup {
    let server = Server_::new(script);
    let addr = serve(server.clone()).await;
    let sleeper = VirtualSleeper::default();
    let layer = layer(&sleeper, policy);
    let stats = layer.stats_handle();
    Setup {
        server,
        stats,
        client: client(addr, layer),
        sleeper,
    }
}

fn hedges(s: RetryStats) -> (u64, u64, u64, u64) {
    (s.attempts, s.hedges_sent, s.hedges_won, s.hedges_cancelled)
}

#[tokio::test]
async fn a_slow_first_attempt_is_beaten_by_the_hedge_and_cancelled() {
    let mut t = setup(
        |k| if k == 0 { forever() } else { ready(Ok(())) },
        policy(2, Duration::from_millis(5)),
    )
    .await;
    assert_eq!(say(&mut t.client).await.unwrap(), "attempt 1");
    assert_eq!(t.sleeper.waits(), [Duration::from_millis(5)]);
    assert_eq!(hedges(t.stats.snapshot()), (2, 1, 1, 1));
    t.server.saw_cancelled(1).await;
    assert_eq!(t.server.arrivals(), [0, 1]);
}

#[tokio::test]
async fn all_at_once_the_first_ok_wins_and_every_loser_is_cancelled() {
    let mut t = setup(
        |k| if k == 2 { ready(Ok(())) } else { forever() },
        policy(4, Duration::ZERO),
    )
    .await;
    assert_eq!(say(&mut t.client).await.unwrap(), "attempt 2");
    assert_eq!(hedges(t.stats.snapshot()), (4, 3, 1, 3));
    t.server.saw_cancelled(3).await;
    assert_eq!(
        *t.server.bodies.lock().unwrap(),
        [BODY; 4],
        "the same bytes"
    );
}

#[tokio::test]
async fn a_non_fatal_code_sends_the_next_hedge_at_once() {
    let mut t = setup(
        |k| {
            ready(match k {
                0 => Err(Status::unavailable("busy")),
                _ => Ok(()),
            })
        },
        policy(3, NEVER),
    )
    .await;
    assert_eq!(say(&mut t.client).await.unwrap(), "attempt 1");
    assert_eq!(
        t.sleeper.waits(),
        [NEVER, NEVER],
        "no wait before the hedge"
    );
    assert_eq!(hedges(t.stats.snapshot()), (2, 1, 1, 0));
    assert_eq!(t.server.arrivals(), [0, 1]);
}

#[tokio::test]
async fn a_fatal_code_commits_and_cancels_the_others() {
    let mut t = setup(
        |k| match k {
            1 => ready(Err(Status::internal("broken"))),
            _ => forever(),
        },
        policy(3, Duration::ZERO),
    )
    .await;
    let err = say(&mut t.client).await.unwrap_err();
    assert_eq!((err.code(), err.message()), (Code::Internal, "broken"));
    assert_eq!(hedges(t.stats.snapshot()), (3, 2, 1, 2));
    t.server.saw_cancelled(2).await;
}

#[tokio::test]
async fn negative_pushback_stops_the_hedges() {
    let mut t = setup(|_| ready(Err(with_pushback("-1"))), policy(5, NEVER)).await;
    let err = say(&mut t.client).await.unwrap_err();
    assert_eq!((err.code(), err.message()), (Code::Unavailable, "pushback"));
    assert_eq!(t.server.arrivals(), [0]);
    assert_eq!(hedges(t.stats.snapshot()), (1, 0, 0, 0));
}

#[tokio::test]
async fn positive_pushback_delays_the_next_hedge() {
    let mut t = setup(
        |k| match k {
            0 => ready(Err(with_pushback("40"))),
            _ => ready(Ok(())),
        },
        policy(3, NEVER),
    )
    .await;
    assert_eq!(say(&mut t.client).await.unwrap(), "attempt 1");
    assert_eq!(t.sleeper.waits(), [NEVER, Duration::from_millis(40), NEVER]);
    assert_eq!(t.server.arrivals(), [0, 1]);
}

/// Six calls at once, every first attempt UNAVAILABLE once all six have
/// arrived; hedges wait for the test's signal. A bucket of 4 tokens allows
/// one hedge (3 > 2), then throttles the other five calls, which fail fast.
#[tokio::test]
async fn throttling_under_a_burst() {
    let arrived = Arc::new(Semaphore::new(0));
    let release = Arc::new(Semaphore::new(0));
    let (a, r) = (arrived.clone(), release.clone());
    let server = Server_::new(move |k| {
        let (a, r) = (a.clone(), r.clone());
        Box::pin(async move {
            if k == 0 {
                a.add_permits(1);
                let _all = a.acquire_many(6).await.unwrap();
                return Err(Status::unavailable("overloaded"));
            }
            r.acquire().await.unwrap().forget();
            Ok(())
        })
    });
    let addr = serve(server.clone()).await;
    let sleeper = VirtualSleeper::default();
    let layer = layer(&sleeper, policy(3, NEVER)).throttle(RetryThrottle::new(4, 0.1).unwrap());
    let stats = layer.stats_handle();
    let client = client(addr, layer);
    let calls = (0..6).map(|_| {
        let mut c = client.clone();
        async move { say(&mut c).await.map_err(|s| s.code()) }
    });
    let control = async {
        for _ in 0..20_000 {
            if stats.snapshot().throttled == 5 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        release.add_permits(1);
    };
    let (results, ()) = tokio::join!(futures_util::future::join_all(calls), control);
    let ok = results.iter().filter(|r| r.is_ok()).count();
    let throttled = results
        .iter()
        .filter(|r| **r == Err(Code::Unavailable))
        .count();
    assert_eq!((ok, throttled), (1, 5), "{results:?}");
    let s = stats.snapshot();
    assert_eq!((s.attempts, s.hedges_sent, s.throttled), (7, 1, 5));
}

/// Hedges every second (paused time), a deadline of 2.5 s: hedges at 0, 1
/// and 2 s, none at 3 s; the call ends DEADLINE_EXCEEDED at the deadline.
#[tokio::test(start_paused = true)]
async fn the_deadline_bounds_the_hedges() {
    let server = Server_::new(|_| forever());
    let addr = serve(server.clone()).await;
    let layer = RetryLayer::new(Retrying::default())
        .hedge(SAY, policy(5, Duration::from_secs(1)))
        .default_deadline(Duration::from_millis(2500));
    let stats = layer.stats_handle();
    let mut client = client(addr, layer);
    let start = tokio::time::Instant::now();
    let err = say(&mut client).await.unwrap_err();
    assert_eq!(err.code(), Code::DeadlineExceeded, "{err:?}");
    assert_eq!(start.elapsed(), Duration::from_millis(2500), "paused time");
    let s = stats.snapshot();
    assert_eq!((s.attempts, s.hedges_sent), (3, 2));
}

/// A server stream hedges until a first message commits one attempt; the
/// caller reads that attempt's stream to its end.
#[tokio::test]
async fn a_stream_is_committed_by_its_first_message() {
    let mut t = setup(
        |k| if k == 0 { forever() } else { ready(Ok(())) },
        policy(2, Duration::from_millis(5)),
    )
    .await;
    let mut stream = t
        .client
        .repeat(EchoRequest::default())
        .await
        .unwrap()
        .into_inner();
    let mut ids = vec![];
    while let Some(m) = stream.message().await.unwrap() {
        ids.push(m.message);
    }
    assert_eq!(ids, ["1.0", "1.1"]);
    assert_eq!(hedges(t.stats.snapshot()), (2, 1, 1, 1));
    t.server.saw_cancelled(1).await;
}

#[test]
fn hedging_a_method_declares_it_idempotent() {
    let layer = RetryLayer::new(Retrying::default()).hedge(REPEAT, policy(2, NEVER));
    let method = layer.method_config(REPEAT);
    assert!(method.is_idempotent() && method.hedging().is_some());
}

/// The same `grpc attempt` events as retries: the attempt number (from 1), `hedge`
/// as the reason, and which attempt won.
#[tokio::test]
async fn events_name_the_hedges_and_the_winner() {
    use crate::support::capture::capture;
    let server = Server_::new(|k| match k {
        0 | 1 => ready(Err(Status::unavailable("busy"))),
        _ => ready(Ok(())),
    });
    let addr = serve(server.clone()).await;
    let sleeper = VirtualSleeper::default();
    let mut client = client(addr, layer(&sleeper, policy(3, NEVER)));
    let (reply, events) = capture(async { say(&mut client).await.unwrap() }).await;
    assert_eq!(reply, "attempt 2");
    let layer_events: Vec<String> = events
        .iter()
        .filter(|e| e.target.starts_with("tonic_retry::layer"))
        .map(|e| e.fields.join(" "))
        .collect();
    let m = "rpc.service=echo.Echo rpc.method=Say";
    assert_eq!(
        layer_events,
        [
            format!("{m} attempt=1 rpc.grpc.status_code=14 reason=hedge"),
            format!("{m} attempt=2 reason=hedge"),
            format!("{m} attempt=2 rpc.grpc.status_code=14 reason=hedge"),
            format!("{m} attempt=3 reason=hedge"),
            format!("{m} attempt=3 rpc.grpc.status_code=0 reason=done won=3"),
        ]
    );
}
