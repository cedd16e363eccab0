//! A bounded drain, and an abrupt stop: a client that reattaches by itself
//! (the reattach layer under a stub) continues exactly through a new guard
//! on the same port.

use std::time::Duration;

use spark_connect_guard::{Guard, GuardStats};
use spark_connect_retry::layer::ReattachLayer;
use spark_connect_stub::spark::connect::spark_connect_service_client::SparkConnectServiceClient;
use spark_connect_testkit::TestServer;
use tokio::task::JoinHandle;
use tonic_health::pb::health_check_response::ServingStatus;

use crate::guard::health::{fast_checks, wait_for};
use crate::support::{assert_exact, drain_then, patient, range_sql, sql_request};

const ROWS: i64 = 300_000;

/// A server that takes a while: 300 batches, 1 ms apart.
async fn slow_server() -> TestServer {
    TestServer::builder()
        .rows_per_batch(1000)
        .batch_delay(Duration::from_millis(1))
        .start()
        .await
        .unwrap()
}

/// A stub over the reattach layer (its own releases, patient retries),
/// dialling `addr`.
fn client(
    addr: std::net::SocketAddr,
) -> SparkConnectServiceClient<spark_connect_retry::layer::ReattachService> {
    use tower::Layer;
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect_lazy();
    SparkConnectServiceClient::new(ReattachLayer::new().retrying(patient()).layer(channel))
        .max_decoding_message_size(usize::MAX)
}

/// Mid-stream, `stop` stops guard A; guard B then starts on the same port.
async fn hand_over<F, Fut>(stop: F) -> (Option<GuardStats>, Guard)
where
    F: FnOnce(Guard) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Option<GuardStats>> + Send,
{
    let server = slow_server().await;
    let a = Guard::builder(server.remote())
        .drain_timeout(Duration::ZERO)
        .start()
        .await
        .unwrap();
    let addr = a.local_addr();
    let remote = server.remote();
    let mut a = Some(a);
    let mut handover: Option<JoinHandle<(Option<GuardStats>, Guard)>> = None;
    let mut c = client(addr);
    let out = drain_then(&mut c, sql_request(&range_sql(ROWS)), 20, || {
        let a = a.take().unwrap();
        handover = Some(tokio::spawn(async move {
            let stats = stop(a).await;
            // The port is free as soon as A has stopped.
            let b = Guard::builder(remote).listen(addr).start().await.unwrap();
            (stats, b)
        }));
    })
    .await;
    assert_exact(&out, ROWS);
    let (stats, b) = handover.unwrap().await.unwrap();
    // The client reached the server again only through B, by reattaching.
    assert!(server.calls().reattach >= 1, "{:?}", server.calls());
    assert!(b.stats().calls_started >= 1);
    (stats, b)
}

#[tokio::test]
async fn a_drained_guard_hands_its_streams_over_to_the_next_one_exactly() {
    let (stats, b) = hand_over(|a| async move { Some(a.drain().await) }).await;
    let stats = stats.unwrap();
    // A ended the open stream with UNAVAILABLE.
    assert_eq!(stats.cut_by_drain, 1, "{stats:?}");
    assert_eq!(stats.ended_with("UNAVAILABLE"), 1, "{stats:?}");
    assert_eq!(stats.open_calls, 0, "{stats:?}");
    b.shutdown().await;
}

#[tokio::test]
async fn an_aborted_guard_hands_its_streams_over_to_the_next_one_exactly() {
    let (stats, b) = hand_over(|a| async move {
        a.abort().await;
        None
    })
    .await;
    assert!(stats.is_none());
    b.shutdown().await;
}

#[tokio::test]
async fn a_drain_lets_streams_end_within_its_timeout_and_closes_the_port() {
    let server = slow_server().await;
    let guard = Guard::builder(server.remote())
        .health_check(fast_checks())
        .drain_timeout(Duration::from_secs(60))
        .start()
        .await
        .unwrap();
    let addr = guard.local_addr();
    wait_for(addr, ServingStatus::Serving).await;
    let mut c = client(addr);
    let mut guard = Some(guard);
    let mut drained = None;
    let out = drain_then(&mut c, sql_request(&range_sql(ROWS)), 20, || {
        let g = guard.take().unwrap();
        drained = Some(tokio::spawn(g.drain()));
    })
    .await;
    // The stream ended by itself, well within the timeout: nothing was cut.
    assert_exact(&out, ROWS);
    let stats = drained.unwrap().await.unwrap();
    assert_eq!(stats.cut_by_drain, 0, "{stats:?}");
    assert_eq!(server.calls().reattach, 0);
    // The port is closed: a probe cannot connect.
    let probe = tokio::net::TcpStream::connect(addr).await;
    assert!(probe.is_err(), "the drained guard still accepts");
}
